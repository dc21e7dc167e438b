//! The health calls of the NVML C ABI (issue 24): ECC, row remapping, retired pages, clock
//! event reasons, PCIe link width and the GPUs the driver excluded, each as nvml.h documents it
//! for a data-center board, from the scenario's per-GPU keys.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::mem::{offset_of, size_of};

use crate::abi::{
    device_call, fill_c_string, pci_info, put, system_call, Device, PciInfo, FEATURE_DISABLED,
    FEATURE_ENABLED,
};
use crate::abi::{NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_SUCCESS};
use crate::scenario::{self, GpuSpec};

/// `nvmlMemoryErrorType_t` and `nvmlEccCounterType_t`.
const MEMORY_ERROR_TYPE_CORRECTED: c_uint = 0;
const MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
const VOLATILE_ECC: c_uint = 0;
const AGGREGATE_ECC: c_uint = 1;

/// `NVML_FI_DEV_REMAPPED_COR` .. `_FAILURE`, and the value type the simulator answers them in.
const FI_DEV_REMAPPED_COR: c_uint = 142;
const FI_DEV_REMAPPED_UNC: c_uint = 143;
const FI_DEV_REMAPPED_PENDING: c_uint = 144;
const FI_DEV_REMAPPED_FAILURE: c_uint = 145;
const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
const VALUE_TYPE_UNSIGNED_LONG_LONG: c_uint = 3;

/// `NVML_DEVICE_UUID_BUFFER_SIZE`.
const UUID_BUFFER_SIZE: usize = 80;

/// `nvmlFieldValue_t`.
#[repr(C)]
pub struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_usec: i64,
    value_type: c_uint,
    nvml_return: c_uint,
    value: u64,
}

/// `nvmlExcludedDeviceInfo_t`.
#[repr(C)]
pub struct ExcludedDeviceInfo {
    pci_info: PciInfo,
    uuid: [c_char; UUID_BUFFER_SIZE],
}

fn ecc_enabled(spec: &GpuSpec) -> Option<bool> {
    spec.ecc_mode.as_deref().map(|mode| mode == "enabled")
}

/// nvml.h: "For Fermi or newer fully supported devices." Omitted `ecc_mode`: a board without
/// ECC, NOT_SUPPORTED. ECC mode changes need a reboot, so pending is current.
///
/// # Safety
/// `current` and `pending` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    device_call(device, "nvmlDeviceGetEccMode", |state, gpu| {
        let Some(enabled) = ecc_enabled(&state.scenario.gpus[gpu as usize]) else {
            return NVML_ERROR_NOT_SUPPORTED;
        };
        let mode = if enabled { FEATURE_ENABLED } else { FEATURE_DISABLED };
        // SAFETY: forwarded caller contract.
        unsafe {
            match put(current, mode) {
                NVML_SUCCESS => put(pending, mode),
                error => error,
            }
        }
    })
}

/// nvml.h: "Requires ECC Mode to be enabled." (NOT_SUPPORTED otherwise); counters by error type
/// (corrected, uncorrected) and counter type (volatile: since the driver loaded; aggregate:
/// the board's lifetime).
///
/// # Safety
/// `count` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: Device,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> u32 {
    device_call(device, "nvmlDeviceGetTotalEccErrors", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        if ecc_enabled(spec) != Some(true) {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let value = match (error_type, counter_type) {
            (MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC) => spec.ecc_volatile_uncorrected,
            (MEMORY_ERROR_TYPE_CORRECTED, VOLATILE_ECC) => spec.ecc_volatile_corrected,
            (MEMORY_ERROR_TYPE_UNCORRECTED, AGGREGATE_ECC) => spec.ecc_aggregate_uncorrected,
            (MEMORY_ERROR_TYPE_CORRECTED, AGGREGATE_ECC) => spec.ecc_aggregate_corrected,
            _ => return NVML_ERROR_INVALID_ARGUMENT,
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(count, value) }
    })
}

/// The scenario's remapped rows, where nvml.h has them: "For Ampere or newer fully supported
/// devices"; "NOT_SUPPORTED If MIG is enabled or if the device doesn't support this feature".
fn remapped_rows(spec: &GpuSpec) -> Option<scenario::RemappedRowsSpec> {
    (spec.ampere_or_newer() && spec.mig_mode.as_deref() != Some("enabled"))
        .then(|| spec.remapped_rows.clone().unwrap_or_default())
}

/// # Safety
/// Each pointer must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: Device,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> u32 {
    device_call(device, "nvmlDeviceGetRemappedRows", |state, gpu| {
        let Some(rows) = remapped_rows(&state.scenario.gpus[gpu as usize]) else {
            return NVML_ERROR_NOT_SUPPORTED;
        };
        if [correctable, uncorrectable, pending, failure].iter().any(|p| p.is_null()) {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: checked non-null; caller contract.
        unsafe {
            put(correctable, rows.correctable);
            put(uncorrectable, rows.uncorrectable);
            put(pending, c_uint::from(rows.pending));
            put(failure, c_uint::from(rows.failure))
        }
    })
}

/// nvml.h: each requested field gets its own `nvmlReturn`; the call itself succeeds. The
/// simulator serves the row-remapping fields (142-145) on Ampere and newer, and the throttle
/// counters (74, 76, 77, 79, 269-271, in ns) where the scenario has `throttle_ns`; every other
/// field, and those where the board lacks them, is NOT_SUPPORTED in its entry.
///
/// # Safety
/// `values` must be valid for `count` reads and writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: Device,
    count: c_int,
    values: *mut FieldValue,
) -> u32 {
    device_call(device, "nvmlDeviceGetFieldValues", |state, gpu| {
        if values.is_null() || count <= 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let spec = &state.scenario.gpus[gpu as usize];
        let rows = remapped_rows(spec);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_micros() as i64);
        for at in 0..count as usize {
            // SAFETY: the caller gave `count` entries.
            let entry = unsafe { &mut *values.add(at) };
            let remapped = rows.as_ref().and_then(|rows| match entry.field_id {
                FI_DEV_REMAPPED_COR => Some(rows.correctable),
                FI_DEV_REMAPPED_UNC => Some(rows.uncorrectable),
                FI_DEV_REMAPPED_PENDING => Some(u32::from(rows.pending)),
                FI_DEV_REMAPPED_FAILURE => Some(u32::from(rows.failure)),
                _ => None,
            });
            let answer = remapped.map(|value| (VALUE_TYPE_UNSIGNED_INT, u64::from(value))).or_else(|| {
                throttle_counter(spec, entry.field_id).map(|ns| (VALUE_TYPE_UNSIGNED_LONG_LONG, ns))
            });
            entry.timestamp = now;
            entry.latency_usec = 0;
            match answer {
                Some((value_type, value)) => {
                    entry.value_type = value_type;
                    entry.nvml_return = NVML_SUCCESS;
                    entry.value = value;
                }
                None => entry.nvml_return = NVML_ERROR_NOT_SUPPORTED,
            }
        }
        NVML_SUCCESS
    })
}

/// A throttle counter field's value: the scenario's `throttle_ns` for its reason (0 when not
/// listed), `None` where the scenario has none or the field is no throttle counter.
fn throttle_counter(spec: &GpuSpec, field: c_uint) -> Option<u64> {
    let counters = spec.throttle_ns.as_ref()?;
    let (name, _, _) = scenario::THROTTLE_COUNTERS.iter().find(|(_, id, _)| *id == field)?;
    Some(counters.get(*name).copied().unwrap_or(0))
}

/// nvml.h: "For Kepler or newer fully supported devices." Ampere and newer boards remap rows
/// instead of retiring pages, and their drivers answer NOT_SUPPORTED.
///
/// # Safety
/// `pending` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(device: Device, pending: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetRetiredPagesPendingStatus", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        if spec.ampere_or_newer() {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let mode = if spec.retired_pages_pending { FEATURE_ENABLED } else { FEATURE_DISABLED };
        // SAFETY: forwarded caller contract.
        unsafe { put(pending, mode) }
    })
}

/// nvml.h: "For all fully supported products." The scenario's `clocks_event_reasons`.
///
/// # Safety
/// `reasons` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: Device,
    reasons: *mut c_ulonglong,
) -> u32 {
    device_call(device, "nvmlDeviceGetCurrentClocksEventReasons", |state, gpu| {
        // SAFETY: forwarded caller contract.
        unsafe { put(reasons, state.scenario.gpus[gpu as usize].clocks_event_bits()) }
    })
}

/// The deprecated name (nvml.h 13.0) of the call above, which older clients and nvml-wrapper
/// 0.13 use: the same call (and the same `[[error]]` name, `nvmlDeviceGetCurrentClocksEventReasons`).
///
/// # Safety
/// `reasons` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: Device,
    reasons: *mut c_ulonglong,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetCurrentClocksEventReasons(device, reasons) }
}

/// nvml.h: "For Fermi or newer fully supported devices."
///
/// # Safety
/// `width` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(device: Device, width: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetCurrPcieLinkWidth", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        // SAFETY: forwarded caller contract.
        unsafe { put(width, spec.pcie_width.unwrap_or(16)) }
    })
}

/// # Safety
/// `width` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(device: Device, width: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetMaxPcieLinkWidth", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        // SAFETY: forwarded caller contract.
        unsafe { put(width, spec.pcie_max_width.unwrap_or(16)) }
    })
}

/// nvml.h: "For all products." The scenario's `[[excluded]]`.
///
/// # Safety
/// `count` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlGetExcludedDeviceCount(count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlGetExcludedDeviceCount", |state| unsafe {
        put(count, state.scenario.excluded.len() as c_uint)
    })
}

/// # Safety
/// `info` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlGetExcludedDeviceInfoByIndex(
    index: c_uint,
    info: *mut ExcludedDeviceInfo,
) -> u32 {
    system_call("nvmlGetExcludedDeviceInfoByIndex", |state| {
        let Some(spec) = state.scenario.excluded.get(index as usize) else {
            return NVML_ERROR_INVALID_ARGUMENT;
        };
        let mut answer =
            ExcludedDeviceInfo { pci_info: pci_info(&spec.pci_bus_id, 0), uuid: [0; UUID_BUFFER_SIZE] };
        fill_c_string(&mut answer.uuid, &spec.uuid);
        // SAFETY: forwarded caller contract.
        unsafe { put(info, answer) }
    })
}

/// The health calls' part of `header_facts`.
pub(crate) fn facts() -> Vec<(String, u64)> {
    let mut facts: Vec<(String, u64)> = vec![
        ("sizeof(nvmlFieldValue_t)".into(), size_of::<FieldValue>() as u64),
        ("offsetof(nvmlFieldValue_t, fieldId)".into(), offset_of!(FieldValue, field_id) as u64),
        ("offsetof(nvmlFieldValue_t, scopeId)".into(), offset_of!(FieldValue, scope_id) as u64),
        ("offsetof(nvmlFieldValue_t, timestamp)".into(), offset_of!(FieldValue, timestamp) as u64),
        ("offsetof(nvmlFieldValue_t, latencyUsec)".into(), offset_of!(FieldValue, latency_usec) as u64),
        ("offsetof(nvmlFieldValue_t, valueType)".into(), offset_of!(FieldValue, value_type) as u64),
        ("offsetof(nvmlFieldValue_t, nvmlReturn)".into(), offset_of!(FieldValue, nvml_return) as u64),
        ("offsetof(nvmlFieldValue_t, value)".into(), offset_of!(FieldValue, value) as u64),
        ("sizeof(nvmlValue_t)".into(), size_of::<u64>() as u64),
        ("sizeof(nvmlExcludedDeviceInfo_t)".into(), size_of::<ExcludedDeviceInfo>() as u64),
        ("offsetof(nvmlExcludedDeviceInfo_t, uuid)".into(), offset_of!(ExcludedDeviceInfo, uuid) as u64),
        ("NVML_DEVICE_UUID_BUFFER_SIZE".into(), UUID_BUFFER_SIZE as u64),
    ];
    for (name, value) in [
        ("NVML_MEMORY_ERROR_TYPE_CORRECTED", MEMORY_ERROR_TYPE_CORRECTED),
        ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", MEMORY_ERROR_TYPE_UNCORRECTED),
        ("NVML_VOLATILE_ECC", VOLATILE_ECC),
        ("NVML_AGGREGATE_ECC", AGGREGATE_ECC),
        ("NVML_FI_DEV_REMAPPED_COR", FI_DEV_REMAPPED_COR),
        ("NVML_FI_DEV_REMAPPED_UNC", FI_DEV_REMAPPED_UNC),
        ("NVML_FI_DEV_REMAPPED_PENDING", FI_DEV_REMAPPED_PENDING),
        ("NVML_FI_DEV_REMAPPED_FAILURE", FI_DEV_REMAPPED_FAILURE),
        ("NVML_VALUE_TYPE_UNSIGNED_INT", VALUE_TYPE_UNSIGNED_INT),
        ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", VALUE_TYPE_UNSIGNED_LONG_LONG),
    ] {
        facts.push((name.to_owned(), u64::from(value)));
    }
    let bit_names = [
        ("idle", "nvmlClocksEventReasonGpuIdle"),
        ("applications_clocks", "nvmlClocksEventReasonApplicationsClocksSetting"),
        ("sw_power_cap", "nvmlClocksEventReasonSwPowerCap"),
        ("hw_slowdown", "nvmlClocksThrottleReasonHwSlowdown"),
        ("sync_boost", "nvmlClocksEventReasonSyncBoost"),
        ("sw_thermal", "nvmlClocksEventReasonSwThermalSlowdown"),
        ("hw_thermal", "nvmlClocksThrottleReasonHwThermalSlowdown"),
        ("power_brake", "nvmlClocksThrottleReasonHwPowerBrakeSlowdown"),
        ("display_clocks", "nvmlClocksEventReasonDisplayClockSetting"),
        ("board_limit", "nvmlClocksEventReasonBoardLimit"),
        ("reliability", "nvmlClocksEventReasonReliability"),
    ];
    for (ours, theirs) in bit_names {
        let bit =
            scenario::CLOCKS_EVENT_REASONS.iter().find(|(name, _)| *name == ours).map_or(0, |(_, bit)| *bit);
        facts.push((format!("(unsigned long long){theirs}"), bit));
    }
    let counter_names = [
        ("sw_power_cap", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
        ("sync_boost", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
        ("board_limit", "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT"),
        ("reliability", "NVML_FI_DEV_PERF_POLICY_RELIABILITY"),
        ("sw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
        ("hw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
        ("power_brake", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"),
    ];
    for (ours, theirs) in counter_names {
        let field = scenario::THROTTLE_COUNTERS.iter().find(|(name, _, _)| *name == ours).map_or(0, |c| c.1);
        facts.push((theirs.to_owned(), u64::from(field)));
    }
    facts
}
