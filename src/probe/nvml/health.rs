//! What NVML says of a GPU's health, the GPUs the driver excluded, and confidential computing.

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING};
use nvml_wrapper::{Device, Nvml};

use super::Queries;
use crate::probe::calls::Calls;
use crate::probe::fabric::FabricInfo;
use crate::probe::gpu::ConfCompute;
use crate::probe::health::{Excluded, Findings};

/// What NVML says of a GPU's health (DESIGN 3). Each query is optional: unsupported or failed
/// is unknown. A lost GPU is asked nothing more (every call would answer the same, slowly).
pub(super) fn health_findings(
    nvml: &Nvml,
    device: &Device,
    queries: &mut Queries,
    mig_enabled: Option<bool>,
) -> Findings {
    if queries.lost {
        return Findings { lost: true, ..Findings::default() };
    }
    let failed_before = queries.failed.len();
    let ecc_on = queries
        .ask("ECC mode", "nvmlDeviceGetEccMode", false, || device.is_ecc_enabled())
        .is_some_and(|mode| mode.currently_enabled);
    let ecc_volatile_uncorrected = ecc_on
        .then(|| {
            queries.ask("ECC errors", "nvmlDeviceGetTotalEccErrors", false, || {
                device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            })
        })
        .flatten();
    // nvml-wrapper 0.13 has no safe nvmlDeviceGetRemappedRows: fields 142-145 carry the same,
    // through its safe nvmlDeviceGetFieldValues. NVML refuses them on a MIG-enabled GPU.
    let (remap_pending, remap_failure) = match mig_enabled {
        Some(true) => (None, None),
        _ => {
            let fields = [FieldId(NVML_FI_DEV_REMAPPED_PENDING), FieldId(NVML_FI_DEV_REMAPPED_FAILURE)];
            let values = queries
                .ask("row remapping", "nvmlDeviceGetFieldValues", false, || device.field_values_for(&fields))
                .unwrap_or_default();
            let flag = |at: usize| {
                values.get(at).and_then(|sample| sample.as_ref().ok()).and_then(|sample| {
                    sample.value.as_ref().ok().and_then(sample_integer).map(|value| value != 0)
                })
            };
            (flag(0), flag(1))
        }
    };
    // Boards that remap rows (Ampere and newer) retire no pages: not asked where the remap
    // fields answered, one call fewer per GPU on every launch.
    let retired_pages_pending = match remap_pending {
        Some(_) => None,
        None => queries.ask("retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", false, || {
            device.are_pages_pending_retired()
        }),
    };
    let clock_events = queries.ask("clock events", "nvmlDeviceGetCurrentClocksEventReasons", false, || {
        clock_event_reasons(nvml, device)
    });
    let fabric = fabric_of(nvml, device, queries);
    let current = queries
        .ask("PCIe width", "nvmlDeviceGetCurrPcieLinkWidth", false, || device.current_pcie_link_width());
    let most =
        queries.ask("PCIe width", "nvmlDeviceGetMaxPcieLinkWidth", false, || device.max_pcie_link_width());
    Findings {
        ecc_volatile_uncorrected,
        ecc_uncorrectable_since_load: None,
        remap_pending,
        remap_failure,
        retired_pages_pending,
        clock_events,
        pcie_width: current.zip(most),
        lost: queries.lost,
        fabric,
        unreadable: queries.failed[failed_before..].to_vec(),
    }
}

/// What a GPU's readings deferred (`probe::deferred`) leave of its health: its place in the
/// NVLink fabric alone, which costs microseconds and which a multi-GPU choice reads of every
/// candidate (a set keeps to one clique).
pub(super) fn fabric_findings(nvml: &Nvml, device: &Device, queries: &mut Queries) -> Findings {
    if queries.lost {
        return Findings { lost: true, ..Findings::default() };
    }
    let failed_before = queries.failed.len();
    let fabric = fabric_of(nvml, device, queries);
    Findings {
        fabric,
        lost: queries.lost,
        unreadable: queries.failed[failed_before..].to_vec(),
        ..Findings::default()
    }
}

fn fabric_of(nvml: &Nvml, device: &Device, queries: &mut Queries) -> Option<crate::probe::fabric::Fabric> {
    queries
        .ask("NVLink fabric", "nvmlDeviceGetGpuFabricInfoV", false, || fabric_info(nvml, device))
        .flatten()
        .and_then(|info| info.judge())
}

/// An integer field value, whatever width NVML reports it in.
pub(super) fn sample_integer(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::U64(v) => Some(v),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(_) => None,
    }
}

/// `nvmlDeviceGetCurrentClocksEventReasons`, which nvml-wrapper 0.13 does not wrap: its
/// `current_throttle_reasons` calls the name nvml.h 13.0 deprecates. The event-reasons symbol
/// first (drivers since 535), the throttle-reasons one on older drivers.
pub(super) fn clock_event_reasons(nvml: &Nvml, device: &Device) -> Result<u64, NvmlError> {
    let Ok(symbol) = nvml.lib().nvmlDeviceGetCurrentClocksEventReasons.as_ref() else {
        return device.current_throttle_reasons().map(|reasons| reasons.bits());
    };
    let mut reasons: std::ffi::c_ulonglong = 0;
    // SAFETY: the symbol has nvml.h's signature (nvml-wrapper-sys's bindings); the handle is
    // live for `device`'s lifetime, and `reasons` is a valid place for the one write.
    let code = unsafe { symbol(device.handle(), &mut reasons) };
    nvml_wrapper::error::nvml_try(code).map(|()| reasons)
}

/// `nvmlGetExcludedDeviceInfoByIndex`, raw: nvml-wrapper 0.13's `ExcludedDeviceInfo` has
/// private fields and no accessors.
pub(super) fn excluded_device(nvml: &Nvml, index: u32) -> Option<Excluded> {
    let symbol = nvml.lib().nvmlGetExcludedDeviceInfoByIndex.as_ref().ok()?;
    let mut info = nvml_wrapper_sys::bindings::nvmlExcludedDeviceInfo_t {
        pciInfo: nvml_wrapper_sys::bindings::nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pciDeviceId: 0,
            pciSubSystemId: 0,
            busId: [0; 32],
        },
        uuid: [0; 80],
    };
    // SAFETY: the symbol has nvml.h's signature (nvml-wrapper-sys's bindings) and `info` is a
    // valid place for the one struct it writes.
    let code = unsafe { symbol(index, &mut info) };
    nvml_wrapper::error::nvml_try(code).ok()?;
    let text = |chars: &[std::ffi::c_char]| {
        let bytes: Vec<u8> = chars.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        Some(String::from_utf8_lossy(&bytes).into_owned()).filter(|text| !text.is_empty())
    };
    Some(Excluded { pci_bus_id: text(&info.pciInfo.busId), uuid: text(&info.uuid) })
}

/// Confidential computing, where the library has the calls and the driver answers them
/// (NOT_SUPPORTED, FUNCTION_NOT_FOUND: none).
pub(super) fn conf_compute(nvml: &Nvml, calls: &Calls) -> Option<ConfCompute> {
    use nvml_wrapper_sys::bindings::nvmlConfComputeSystemState_t;
    let lib = nvml.lib();
    let state_of = lib.nvmlSystemGetConfComputeState.as_ref().ok()?;
    let mut state = nvmlConfComputeSystemState_t { environment: 0, ccFeature: 0, devToolsMode: 0 };
    // SAFETY: the symbol has nvml.h's signature and writes the one struct it is given.
    let code = calls.run("nvmlSystemGetConfComputeState", None, || unsafe { state_of(&mut state) });
    nvml_wrapper::error::nvml_try(code).ok()?;
    // NVML_CC_SYSTEM_FEATURE_ENABLED (1) or _BMSAI_ENABLED (2).
    let on = state.ccFeature != 0;
    let ready = on
        .then(|| {
            let ready_of = lib.nvmlSystemGetConfComputeGpusReadyState.as_ref().ok()?;
            let mut accepting: std::ffi::c_uint = 0;
            // SAFETY: as above, one unsigned int.
            let code = calls
                .run("nvmlSystemGetConfComputeGpusReadyState", None, || unsafe { ready_of(&mut accepting) });
            nvml_wrapper::error::nvml_try(code).ok().map(|()| accepting == 1)
        })
        .flatten();
    Some(ConfCompute { on, ready })
}

/// The GPU's fabric info: `Ok(None)` where the call says it has none (NOT_SUPPORTED,
/// FUNCTION_NOT_FOUND, a library without the call); SUCCESS with state NOT_SUPPORTED is left to
/// `FabricInfo::judge`. The v3 layout first, then v2 for a driver that answers ARGUMENT_VERSION_MISMATCH.
fn fabric_info(nvml: &Nvml, device: &Device) -> Result<Option<FabricInfo>, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_v3_t;
    let Ok(symbol) = nvml.lib().nvmlDeviceGetGpuFabricInfoV.as_ref() else { return Ok(None) };
    for (version, layout) in [(3u32, std::mem::size_of::<nvmlGpuFabricInfo_v3_t>()), (2, 36)] {
        let mut info = nvmlGpuFabricInfo_v3_t {
            version: layout as u32 | version << 24,
            clusterUuid: [0; 16],
            status: 0,
            cliqueId: 0,
            state: 0,
            healthMask: 0,
            healthSummary: 0,
        };
        // SAFETY: a live handle of this library; the struct is the v3 layout, which holds the
        // v2 one as its prefix (nvml.h), and its version field says which the driver may write.
        let code = unsafe { symbol(device.handle(), &mut info) };
        match nvml_wrapper::error::nvml_try(code) {
            Ok(()) => {
                let status = nvml_wrapper::error::nvml_try(info.status).err().map(|error| error.to_string());
                return Ok(Some(FabricInfo {
                    state: info.state,
                    status,
                    clique_id: info.cliqueId,
                    cluster_uuid: info.clusterUuid,
                    health_mask: info.healthMask,
                    summary: if version == 3 { info.healthSummary } else { 0 },
                }));
            }
            Err(error) if super::is_absent(&error) => return Ok(None),
            // A driver that knows only the v2 layout refuses v3's version.
            Err(NvmlError::UnexpectedVariant(ARGUMENT_VERSION_MISMATCH)) if version == 3 => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_value_is_an_integer_of_any_width_never_a_negative_or_a_float() {
        assert_eq!(sample_integer(&SampleValue::U32(7)), Some(7));
        assert_eq!(sample_integer(&SampleValue::U64(u64::MAX)), Some(u64::MAX));
        assert_eq!(sample_integer(&SampleValue::I64(3)), Some(3));
        assert_eq!(sample_integer(&SampleValue::I64(-1)), None);
        assert_eq!(sample_integer(&SampleValue::F64(1.0)), None);
    }
}
