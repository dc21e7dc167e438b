//! The only module that talks to NVML (through `nvml-wrapper`). It opens the library once per
//! run and hands plain data (`gpu::Machine`, `gpu::GpuProcess`) to the rest. It runs on
//! gpurun's NVML thread (`worker`), and says which call it is in (`Calls`), so that a call that
//! hangs can be named.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    ComputeMode as NvmlComputeMode, EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus,
    TemperatureSensor, TopologyLevel,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING};
use nvml_wrapper::{Device, EventSet, Nvml};

use crate::options::cpus;
use crate::probe::fabric::FabricInfo;
use crate::probe::gpu::{
    mig_key, mig_parts, ComputeMode, ConfCompute, Gpu, GpuProcess, Link, Machine, Memory, MigInfo, Topology,
    Utilization,
};
use crate::probe::health::{classify, Excluded, Findings};
use crate::probe::meter::{Ask, Reading, THROTTLE_REASONS};
use crate::probe::mps::{Mps, MpsClient};
use crate::probe::numa;
use crate::process::procfs;

/// The library NVML is normally loaded as (what the driver package installs).
pub(crate) const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Why NVML could not be opened. Each has its own one-line message with a hint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error(
        "cannot load the NVML library {library}: {detail}; is the NVIDIA driver installed? \
         Name the library with --nvml-lib PATH or GPURUN_NVML_LIB"
    )]
    LibraryMissing { library: String, detail: String },
    #[error(
        "{library} is not a usable NVML library ({detail}); \
         point --nvml-lib or GPURUN_NVML_LIB at the driver's libnvidia-ml.so.1"
    )]
    NotNvml { library: String, detail: String },
    #[error(
        "the NVIDIA driver is not loaded (NVML: driver not loaded); check that `nvidia-smi` works \
         and that the nvidia kernel module is loaded (`lsmod | grep nvidia`)"
    )]
    DriverNotLoaded,
    #[error(
        "no permission to talk to the NVIDIA driver (NVML: insufficient permissions); check the \
         permissions of /dev/nvidia* and that your user may use the GPUs"
    )]
    NoPermission,
    #[error("NVML failed to initialise: {0}")]
    Other(NvmlError),
    #[error("NVML cannot count the GPUs: {0}")]
    DeviceCount(NvmlError),
    #[error("NVML is not open")]
    NotOpen,
}

/// The NVML call in progress, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The C function, as in nvml.h and `dmesg`/driver bug reports.
    pub(crate) name: &'static str,
    pub(crate) gpu: Option<u32>,
    pub(crate) since: Instant,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)?;
        if let Some(gpu) = self.gpu {
            write!(f, " on GPU {gpu}")?;
        }
        write!(f, " (waiting for {:.1} s)", self.since.elapsed().as_secs_f64())
    }
}

/// Shared between the NVML thread, which records each call it makes, and the main thread,
/// which reads it when a call does not come back.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<Option<Call>>>);

/// What an NVML call answered, in words for `-vv`'s trace of each call.
pub(crate) trait Answer {
    fn answer(&self) -> String;
}

impl<T, E: std::fmt::Display> Answer for Result<T, E> {
    fn answer(&self) -> String {
        match self {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string(),
        }
    }
}

impl<T> Answer for Option<T> {
    fn answer(&self) -> String {
        if self.is_some() { "ok" } else { "no answer" }.to_owned()
    }
}

/// A raw `nvmlReturn_t`.
impl Answer for u32 {
    fn answer(&self) -> String {
        match self {
            0 => "ok".to_owned(),
            code => format!("NVML error {code}"),
        }
    }
}

impl<A: Answer, B: Answer> Answer for (A, B) {
    fn answer(&self) -> String {
        format!("{}, {}", self.0.answer(), self.1.answer())
    }
}

impl Calls {
    /// Runs one NVML call, recorded as the call in flight (for a hang's message) and, with
    /// `-vv`, traced with its answer and how long it took.
    fn run<T: Answer>(&self, name: &'static str, gpu: Option<u32>, call: impl FnOnce() -> T) -> T {
        let since = Instant::now();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Call { name, gpu, since });
        let result = call();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::trace!(
            "NVML {name}{}: {} in {:.3} ms",
            gpu.map(|gpu| format!(" on GPU {gpu}")).unwrap_or_default(),
            result.answer(),
            since.elapsed().as_secs_f64() * 1000.0
        );
        result
    }

    /// The call in progress now.
    pub(crate) fn current(&self) -> Option<Call> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The event set of the chosen GPUs' Xid errors, and (NVML index, raw handle) of each GPU in it.
type XidEvents = (EventSet<'static>, Vec<(u32, usize)>);

/// The open library, for a thread of calls of its own (`Opened::session`).
#[derive(Clone, Copy)]
pub(crate) struct Opened {
    nvml: &'static Nvml,
    v3_misread: bool,
}

impl Opened {
    /// A session on the same library that lists processes and probes, and asks for no Xid
    /// events (where they hung, polling goes on without them).
    pub(crate) fn session_without_xids(self, calls: Calls) -> Session {
        Session {
            nvml: self.nvml,
            calls,
            v3_misread: self.v3_misread,
            xid_events: Some(None),
            metered: Vec::new(),
        }
    }
}

/// An open NVML library.
pub(crate) struct Session {
    /// Opened once per run and kept to the end (NVML's own reference count ends with the
    /// process), so that an event set can borrow it for as long as the run lasts.
    nvml: &'static Nvml,
    calls: Calls,
    /// Use the `_v2` process list: the driver writes `_v3` entries wider than nvml.h says.
    v3_misread: bool,
    /// Xid events of the chosen GPUs: registered at the first `xids` call, with the handle of
    /// each GPU registered (an event names its GPU by handle: a GPU that fell off the bus
    /// answers GPU_IS_LOST to nvmlDeviceGetIndex, and that is the Xid 79 that must be said).
    xid_events: Option<Option<XidEvents>>,
    /// The handles of the GPUs the receipt reads, looked up once (each poll reads them again).
    metered: Vec<(u32, Device<'static>)>,
}

/// How many Xid events one poll reads, and the run's last look at most (a flood of thousands
/// is read in a few milliseconds; each is one call that answers at once).
const XIDS_PER_POLL: usize = 1024;
const XIDS_DRAINED: usize = 65_536;
/// How many are kept: the first ones, and after them each (GPU, code) not seen yet, so that
/// the Xid 79 after a burst of Xid 13 is never the one lost; the rest are counted.
pub(crate) const XIDS_KEPT: usize = 64;

/// What one look at the Xid events found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XidBatch {
    pub(crate) kept: Vec<Xid>,
    /// Read and not kept: repeats of kept (GPU, code) pairs past `XIDS_KEPT`.
    pub(crate) dropped: u64,
}

impl XidBatch {
    fn keep(&mut self, xid: Xid) {
        let new = !self.kept.iter().any(|kept| kept.gpu == xid.gpu && kept.code == xid.code);
        match self.kept.len() < XIDS_KEPT || new {
            true => self.kept.push(xid),
            false => self.dropped += 1,
        }
    }
}

/// An Xid error NVML raised on a GPU (`nvmlEventTypeXidCriticalError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Xid {
    /// NVML index.
    pub(crate) gpu: u32,
    /// The Xid; 999 where the driver does not know it.
    pub(crate) code: u64,
}

/// Drivers 535.43 to 535.86 write 32-byte `_v3` process entries where nvml.h (and nvml-wrapper
/// 0.13) expect 24, so every entry after the first is misread (pynvml PR #48, go-nvml #75).
fn has_535_v3_bug(driver_version: &str) -> bool {
    let mut parts = driver_version.split('.').map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(535)), Some(Some(minor))) if (43..=86).contains(&minor))
}

/// A process with a compute context on one GPU, as NVML lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) pid: u32,
    pub(crate) used_bytes: Option<u64>,
    /// Listed as an MPS client (the MPS list), not in the compute list.
    pub(crate) mps_client: bool,
}

/// Opens NVML from `library` (default: `libnvidia-ml.so.1`, found like any shared library).
pub(crate) fn open(library: Option<&Path>, calls: Calls) -> Result<Session, OpenError> {
    let library = library.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY));
    let shown = library.display().to_string();
    let nvml = calls
        .run("nvmlInit_v2", None, || Nvml::builder().lib_path(library.as_os_str()).init())
        .map_err(|error| match error {
            NvmlError::LibloadingError(detail) => {
                OpenError::LibraryMissing { library: shown.clone(), detail: detail.to_string() }
            }
            NvmlError::FailedToLoadSymbol(detail) => OpenError::NotNvml { library: shown.clone(), detail },
            NvmlError::DriverNotLoaded => OpenError::DriverNotLoaded,
            NvmlError::NoPermission => OpenError::NoPermission,
            other => OpenError::Other(other),
        })?;
    tracing::debug!("NVML initialised from {shown}");
    let v3_misread = calls
        .run("nvmlSystemGetDriverVersion", None, || nvml.sys_driver_version())
        .is_ok_and(|version| has_535_v3_bug(&version));
    if v3_misread {
        tracing::debug!("driver 535.43-535.86: reading process lists with the _v2 call");
    }
    Ok(Session { nvml: Box::leak(Box::new(nvml)), calls, v3_misread, xid_events: None, metered: Vec::new() })
}

/// A GPU's failed queries. Those a request may need (the handle, identity, memory, MIG mode,
/// processes) make the GPU unusable: `first_error`. Others (temperature, power, utilization,
/// compute mode) only make that value unknown, which fails a filter that needs it.
/// `NOT_SUPPORTED` is never a failure, only an unknown value.
struct Queries<'a> {
    calls: &'a Calls,
    gpu: u32,
    first_error: Option<String>,
    /// A query answered GPU_IS_LOST.
    lost: bool,
    /// Every query that failed with another error than NOT_SUPPORTED: what it asked, and the
    /// error (the health calls' make the health unknown).
    failed: Vec<String>,
}

impl Queries<'_> {
    fn ask<T>(
        &mut self,
        what: &str,
        call: &'static str,
        essential: bool,
        query: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        match self.calls.run(call, Some(self.gpu), query) {
            Ok(value) => Some(value),
            Err(NvmlError::NotSupported) => None,
            Err(error) => {
                tracing::debug!("GPU {}: {what}: {error}", self.gpu);
                self.lost |= matches!(error, NvmlError::GpuLost);
                self.failed.push(format!("{what} ({call}: {})", describe(&error)));
                if essential {
                    self.first_error.get_or_insert_with(|| format!("{what}: {}", describe(&error)));
                }
                None
            }
        }
    }
}

/// What NVML says of a GPU's health (DESIGN 3). Each query is optional: unsupported or failed
/// is unknown. A lost GPU is asked nothing more (every call would answer the same, slowly).
fn health_findings(
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
    let fabric = queries
        .ask("NVLink fabric", "nvmlDeviceGetGpuFabricInfoV", false, || fabric_info(nvml, device))
        .flatten()
        .map(|info| info.judge());
    let current = queries
        .ask("PCIe width", "nvmlDeviceGetCurrPcieLinkWidth", false, || device.current_pcie_link_width());
    let most =
        queries.ask("PCIe width", "nvmlDeviceGetMaxPcieLinkWidth", false, || device.max_pcie_link_width());
    Findings {
        ecc_volatile_uncorrected,
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

/// An integer field value, whatever width NVML reports it in.
fn sample_integer(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::U64(v) => Some(v),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(_) => None,
    }
}

/// The throttle counters of `THROTTLE_REASONS`, in one `nvmlDeviceGetFieldValues` call: each
/// reason's nanoseconds where the driver counts it.
fn throttle_counters(calls: &Calls, gpu: u32, device: &Device) -> Vec<Option<u64>> {
    let fields: Vec<FieldId> =
        THROTTLE_REASONS.iter().filter_map(|reason| reason.counter.map(FieldId)).collect();
    let values = calls
        .run("nvmlDeviceGetFieldValues", Some(gpu), || device.field_values_for(&fields))
        .unwrap_or_default();
    let mut answered = values.iter().map(|sample| {
        sample.as_ref().ok().and_then(|sample| sample.value.as_ref().ok().and_then(sample_integer))
    });
    THROTTLE_REASONS
        .iter()
        .map(|reason| match reason.counter {
            Some(_) => answered.next().flatten(),
            None => None,
        })
        .collect()
}

/// `nvmlDeviceGetCurrentClocksEventReasons`, which nvml-wrapper 0.13 does not wrap: its
/// `current_throttle_reasons` calls the name nvml.h 13.0 deprecates. The event-reasons symbol
/// first (drivers since 535), the throttle-reasons one on older drivers.
fn clock_event_reasons(nvml: &Nvml, device: &Device) -> Result<u64, NvmlError> {
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
fn excluded_device(nvml: &Nvml, index: u32) -> Option<Excluded> {
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
fn conf_compute(nvml: &Nvml, calls: &Calls) -> Option<ConfCompute> {
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

/// The GPU's fabric info: `Ok(None)` where it has no fabric (NOT_SUPPORTED, a library without
/// the call). The v3 layout first, then v2 for a driver that answers ARGUMENT_VERSION_MISMATCH.
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
            Err(NvmlError::NotSupported | NvmlError::FunctionNotFound) => return Ok(None),
            // A driver that knows only the v2 layout refuses v3's version.
            Err(NvmlError::UnexpectedVariant(ARGUMENT_VERSION_MISMATCH)) if version == 3 => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

/// The MPS clients on a device (`nvmlDeviceGetMPSComputeRunningProcesses_v3`); through the `_v2`
/// call where the `_v3` one is misread (the 535 drivers) or missing.
fn mps_listed(nvml: &Nvml, device: &Device, v3_misread: bool) -> Result<Vec<Listed>, NvmlError> {
    if !v3_misread {
        match device.mps_running_compute_processes() {
            Err(NvmlError::FunctionNotFound) => {}
            other => return other.map(to_listed),
        }
    }
    mps_listed_v2(nvml, device)
}

/// `nvmlDeviceGetMPSComputeRunningProcesses_v2`, which nvml-wrapper 0.13 does not wrap: the
/// count first, then the entries (`nvmlProcessInfo_v2_t`), with room for a few more that may
/// have started between the two calls.
fn mps_listed_v2(nvml: &Nvml, device: &Device) -> Result<Vec<Listed>, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlProcessInfo_v2_t;
    let symbol = nvml
        .lib()
        .nvmlDeviceGetMPSComputeRunningProcesses_v2
        .as_ref()
        .map_err(|_| NvmlError::FunctionNotFound)?;
    let empty = nvmlProcessInfo_v2_t { pid: 0, usedGpuMemory: 0, gpuInstanceId: 0, computeInstanceId: 0 };
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: a live handle; a zero count with a null buffer asks for the count (nvml.h).
    let code = unsafe { symbol(device.handle(), &mut count, std::ptr::null_mut()) };
    match nvml_wrapper::error::nvml_try(code) {
        Ok(()) => return Ok(Vec::new()),
        Err(NvmlError::InsufficientSize(_)) => {}
        Err(error) => return Err(error),
    }
    count += 5;
    let mut infos = vec![empty; count as usize];
    // SAFETY: `infos` has room for `count` entries of the layout the symbol writes.
    let code = unsafe { symbol(device.handle(), &mut count, infos.as_mut_ptr()) };
    nvml_wrapper::error::nvml_try(code)?;
    infos.truncate(count as usize);
    Ok(infos
        .into_iter()
        .map(|info| Listed {
            pid: info.pid,
            used_bytes: (info.usedGpuMemory != u64::MAX).then_some(info.usedGpuMemory),
            mps_client: true,
        })
        .collect())
}

/// Why a GPU's processes could not be listed: whether the GPU is lost (GPU_IS_LOST: it fell
/// off the bus, and nothing on it can be checked any more), and NVML's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListError {
    pub(crate) lost: bool,
    pub(crate) text: String,
}

impl From<NvmlError> for ListError {
    fn from(error: NvmlError) -> ListError {
        ListError { lost: matches!(error, NvmlError::GpuLost), text: error.to_string() }
    }
}

/// NVML's error in the words a user searches for.
fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::GpuLost => "GPU is lost (fallen off the bus; see dmesg for Xid errors)".to_owned(),
        NvmlError::NoPermission => "no permission (outside this job's device cgroup?)".to_owned(),
        other => other.to_string(),
    }
}

impl Session {
    /// Everything gpurun needs to know about the machine, in one pass (the links between GPUs
    /// are asked for apart: `links`).
    pub(crate) fn probe(&mut self) -> Result<Machine, OpenError> {
        let count = self
            .calls
            .run("nvmlDeviceGetCount_v2", None, || self.nvml.device_count())
            .map_err(OpenError::DeviceCount)?;
        let gpus: Vec<Gpu> = (0..count).map(|index| self.probe_gpu(index)).collect();
        let migs: Vec<Gpu> = gpus
            .iter()
            .filter(|gpu| gpu.in_mig_mode() && gpu.error.is_none())
            .flat_map(|gpu| self.probe_migs(gpu))
            .collect();
        let driver_version =
            self.calls.run("nvmlSystemGetDriverVersion", None, || self.nvml.sys_driver_version()).ok();
        let cuda_driver_version = self
            .calls
            .run("nvmlSystemGetCudaDriverVersion_v2", None, || self.nvml.sys_cuda_driver_version())
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        let excluded = self.excluded();
        let confidential_computing = conf_compute(self.nvml, &self.calls);
        let mut gpus = gpus;
        let mut migs = migs;
        if let Some(refusal) = confidential_computing.and_then(|cc| cc.refusal()) {
            gpus.iter_mut().chain(migs.iter_mut()).for_each(|gpu| gpu.blocked = Some(refusal));
        }
        Ok(Machine {
            driver_version,
            cuda_driver_version,
            gpus,
            migs,
            topology: None,
            excluded,
            confidential_computing,
        })
    }

    /// The GPUs the driver excluded (`nvmlGetExcludedDeviceCount`, `...InfoByIndex`); none
    /// where the call is missing or fails.
    fn excluded(&self) -> Vec<Excluded> {
        let count = self.calls.run("nvmlGetExcludedDeviceCount", None, || self.nvml.excluded_device_count());
        (0..count.unwrap_or(0))
            .filter_map(|index| {
                self.calls.run("nvmlGetExcludedDeviceInfoByIndex", None, || excluded_device(self.nvml, index))
            })
            .collect()
    }

    /// The link between every pair of `gpus` (two NVML calls a pair: NVLink by P2P status, else
    /// the common PCIe ancestor).
    pub(crate) fn links(&mut self, gpus: &[u32]) -> Topology {
        let calls = self.calls.clone();
        let mut topology = Topology::default();
        let readable: Vec<(u32, Device)> = gpus
            .iter()
            .filter_map(|&index| {
                calls
                    .run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))
                    .ok()
                    .map(|d| (index, d))
            })
            .collect();
        for (at, (a, first)) in readable.iter().enumerate() {
            for (b, second) in &readable[at + 1..] {
                let nvlink = calls
                    .run("nvmlDeviceGetP2PStatus", Some(*a), || {
                        first.p2p_status(second, P2pCapabilitiesIndex::NvLink)
                    })
                    .is_ok_and(|status| status == P2pStatus::Ok);
                let link = if nvlink {
                    Some(Link::Nvlink)
                } else {
                    // The wrapper takes the second handle by value: a fresh one (handles are plain).
                    calls
                        .run("nvmlDeviceGetTopologyCommonAncestor", Some(*a), || {
                            self.nvml
                                .device_by_index(*b)
                                .and_then(|other| first.topology_common_ancestor(other))
                        })
                        .ok()
                        .map(|level| match level {
                            TopologyLevel::Internal => Link::Board,
                            TopologyLevel::Single => Link::Switch,
                            TopologyLevel::Multiple => Link::Switches,
                            TopologyLevel::HostBridge => Link::Hostbridge,
                            TopologyLevel::Node => Link::Node,
                            TopologyLevel::System => Link::System,
                        })
                };
                if let Some(link) = link {
                    topology.insert(*a, *b, link);
                }
            }
        }
        topology
    }

    /// The MIG devices of a GPU in MIG mode, slot by slot (an empty slot is NOT_FOUND).
    fn probe_migs(&mut self, parent: &Gpu) -> Vec<Gpu> {
        let calls = self.calls.clone();
        let index = parent.index;
        let Ok(device) =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))
        else {
            return Vec::new();
        };
        let slots = calls
            .run("nvmlDeviceGetMaxMigDeviceCount", Some(index), || device.mig_device_count())
            .unwrap_or(0);
        let mut found = Vec::new();
        for slot in 0..slots.min(8) {
            let mig = match calls
                .run("nvmlDeviceGetMigDeviceHandleByIndex", Some(index), || device.mig_device_by_index(slot))
            {
                Ok(mig) => mig,
                Err(NvmlError::NotFound) => continue,
                Err(error) => {
                    tracing::debug!("GPU {index}: MIG device {slot}: {error}");
                    continue;
                }
            };
            let mut queries =
                Queries { calls: &calls, gpu: index, first_error: None, lost: false, failed: Vec::new() };
            let uuid = queries.ask("uuid", "nvmlDeviceGetUUID", true, || mig.uuid());
            let name = queries.ask("name", "nvmlDeviceGetName", false, || mig.name());
            let memory =
                queries.ask("memory", "nvmlDeviceGetMemoryInfo_v2", true, || mig.memory_info()).map(|m| {
                    Memory {
                        total_bytes: m.total,
                        reserved_bytes: m.reserved,
                        used_bytes: m.used,
                        free_bytes: m.free,
                    }
                });
            let (processes, mps) = self.processes_and_mps(&mig, &mut queries);
            let (gpu_instance_id, compute_instance_id) =
                calls.run("nvmlDeviceGetGpuInstanceId", Some(index), || instance_ids(self.nvml, &mig));
            let profile =
                name.as_deref().and_then(|n| n.rsplit_once(" MIG ")).map(|(_, profile)| profile.to_owned());
            found.push(Gpu {
                index: mig_key(index, slot),
                uuid,
                name,
                memory,
                processes,
                mps,
                fabric: parent.fabric.clone(),
                compute_mode: parent.compute_mode,
                health: parent.health.clone(),
                numa_node: parent.numa_node,
                gpu_numa_id: parent.gpu_numa_id,
                cpus: parent.cpus.clone(),
                mig: Some(MigInfo { parent: index, slot, profile, gpu_instance_id, compute_instance_id }),
                error: queries.first_error,
                ..Gpu::unknown(mig_key(index, slot))
            });
        }
        found
    }

    fn probe_gpu(&mut self, index: u32) -> Gpu {
        let calls = self.calls.clone();
        let mut queries =
            Queries { calls: &calls, gpu: index, first_error: None, lost: false, failed: Vec::new() };
        let handle =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index));
        let handle_refused = matches!(handle, Err(NvmlError::NoPermission));
        let device = match handle {
            Ok(device) => device,
            Err(error) => {
                let health =
                    classify(&Findings { lost: matches!(error, NvmlError::GpuLost), ..Findings::default() });
                let error = match error {
                    NvmlError::NotSupported => "handle: not supported".to_owned(),
                    other => format!("handle: {}", describe(&other)),
                };
                return Gpu { error: Some(error), handle_refused, health, ..Gpu::unknown(index) };
            }
        };
        let uuid = queries.ask("uuid", "nvmlDeviceGetUUID", true, || device.uuid());
        let name = queries.ask("name", "nvmlDeviceGetName", false, || device.name());
        let pci_bus_id =
            queries.ask("pci info", "nvmlDeviceGetPciInfo_v3", false, || device.pci_info()).map(|p| p.bus_id);
        let memory =
            queries.ask("memory", "nvmlDeviceGetMemoryInfo_v2", true, || device.memory_info()).map(|m| {
                Memory {
                    total_bytes: m.total,
                    reserved_bytes: m.reserved,
                    used_bytes: m.used,
                    free_bytes: m.free,
                }
            });
        let utilization = queries
            .ask("utilization", "nvmlDeviceGetUtilizationRates", false, || device.utilization_rates())
            .map(|u| Utilization { gpu_percent: u.gpu, memory_percent: u.memory });
        let temperature_c = queries.ask("temperature", "nvmlDeviceGetTemperature", false, || {
            device.temperature(TemperatureSensor::Gpu)
        });
        let power_watts = queries
            .ask("power", "nvmlDeviceGetPowerUsage", false, || device.power_usage())
            .map(|mw| f64::from(mw) / 1000.0);
        let compute_mode = queries
            .ask("compute mode", "nvmlDeviceGetComputeMode", false, || device.compute_mode())
            .map(compute_mode_of);
        let numa_node = queries
            .ask("NUMA node", "nvmlDeviceGetMemoryAffinity", false, || {
                device.memory_affinity(numa::NODE_WORDS, numa::AFFINITY_SCOPE_NODE)
            })
            .and_then(|mask| numa::first_node(&mask))
            .or_else(|| pci_bus_id.as_deref().and_then(numa::sysfs_node));
        let gpu_numa_id =
            queries.ask("GPU NUMA ID", "nvmlDeviceGetNumaNodeId", false, || device.numa_node_id());
        // 16 words: 1024 CPUs. Where NVML does not say, the CPUs of the GPU's node.
        let cpus = queries
            .ask("CPU affinity", "nvmlDeviceGetCpuAffinity", false, || device.cpu_affinity(16))
            .map(|words| cpus::from_mask(&words))
            .or_else(|| numa_node.and_then(numa::node_cpus));
        let mig_mode = queries.ask("MIG mode", "nvmlDeviceGetMigMode", true, || device.mig_mode());
        let mig_enabled = mig_mode.as_ref().map(|m| m.current == 1);
        let mig_pending = mig_mode.as_ref().map(|m| m.pending == 1);
        let (processes, mps) = self.processes_and_mps(&device, &mut queries);
        let findings = health_findings(self.nvml, &device, &mut queries, mig_enabled);
        let (health, fabric) = (classify(&findings), findings.fabric);
        Gpu {
            index,
            uuid,
            name,
            pci_bus_id,
            memory,
            utilization,
            temperature_c,
            power_watts,
            compute_mode,
            mig_enabled,
            mig_pending,
            mig: None,
            numa_node,
            gpu_numa_id,
            cpus,
            health,
            processes,
            mps,
            fabric,
            blocked: None,
            error: queries.first_error,
            handle_refused,
        }
    }

    /// A device's compute processes, and its MPS: the server from the compute list, the
    /// clients from the MPS list. Process lists can be refused where everything else works
    /// (some containers, locked down drivers): that makes them unknown, not the GPU unusable;
    /// an MPS list that cannot be read leaves what the compute list says.
    fn processes_and_mps(
        &mut self,
        device: &Device,
        queries: &mut Queries,
    ) -> (Option<Vec<GpuProcess>>, Option<Mps>) {
        let v3_misread = &mut self.v3_misread;
        let listed =
            queries.ask("processes", "nvmlDeviceGetComputeRunningProcesses_v3", true, || {
                match listed(device, v3_misread) {
                    Err(NvmlError::NoPermission) => Err(NvmlError::NotSupported),
                    other => other,
                }
            });
        let processes: Option<Vec<GpuProcess>> =
            listed.map(|listed| listed.into_iter().map(process_of).collect());
        // As a poll does (`processes`): the MPS list only where a server may be listed.
        let serves =
            processes.iter().flatten().any(|p| crate::probe::mps::may_be_server(p.command.as_deref()));
        if !serves {
            return (processes, None);
        }
        let v3_misread = self.v3_misread;
        let clients = queries
            .calls
            .run("nvmlDeviceGetMPSComputeRunningProcesses_v3", Some(queries.gpu), || {
                mps_listed(self.nvml, device, v3_misread)
            })
            .unwrap_or_default()
            .into_iter()
            .map(|client| MpsClient {
                pid: client.pid,
                user: procfs::owner(client.pid),
                used_bytes: client.used_bytes,
            })
            .collect();
        let own_uid = nix::unistd::getuid().as_raw();
        let server = processes
            .iter()
            .flatten()
            .find(|process| crate::probe::mps::is_server(process.command.as_deref()))
            .map(|server| (server.pid, server.user.clone()));
        let mps = Mps::from_lists(server, clients, procfs::uid_of, own_uid);
        (processes, mps)
    }

    pub(crate) fn opened(&self) -> Opened {
        Opened { nvml: self.nvml, v3_misread: self.v3_misread }
    }

    /// The Xid errors raised on `gpus` since the last call, without waiting. The first call
    /// registers for them (GPUs that cannot report Xids are left out); none where events are
    /// not supported at all. `drain`: the run's last look, which reads all that is there.
    pub(crate) fn xids(&mut self, gpus: &[u32], drain: bool) -> XidBatch {
        let nvml: &'static Nvml = self.nvml;
        let calls = self.calls.clone();
        let set = self.xid_events.get_or_insert_with(|| {
            let create = || calls.run("nvmlEventSetCreate", None, || nvml.create_event_set()).ok();
            let register = |device: &Device<'static>, gpu: u32, set: EventSet<'static>| {
                calls
                    .run("nvmlDeviceRegisterEvents", Some(gpu), || {
                        device.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    })
                    .map_err(|error| error.error)
            };
            let mut set = create()?;
            let mut registered: Vec<(u32, Device<'static>)> = Vec::new();
            // SAFETY: the raw handle is only compared, never called through.
            let handle_of = |device: &Device<'static>| unsafe { device.handle() } as usize;
            for &gpu in gpus {
                let Ok(device) = nvml.device_by_index(gpu) else { continue };
                match register(&device, gpu, set) {
                    Ok(kept) => {
                        set = kept;
                        registered.push((gpu, device));
                    }
                    Err(error) => {
                        tracing::debug!("GPU {gpu}: Xid events: {error}");
                        // nvml-wrapper frees the set when a registration fails: a new one, with
                        // the GPUs registered so far registered again.
                        set = create()?;
                        for (again, device) in &registered {
                            set = register(device, *again, set).ok()?;
                        }
                    }
                }
            }
            let handles = registered.iter().map(|(gpu, device)| (*gpu, handle_of(device))).collect();
            Some((set, handles))
        });
        let Some((set, handles)) = set.as_ref() else { return XidBatch::default() };
        let mut batch = XidBatch::default();
        // Bounded: a driver that keeps answering cannot keep the thread here.
        for _ in 0..if drain { XIDS_DRAINED } else { XIDS_PER_POLL } {
            match calls.run("nvmlEventSetWait_v2", None, || set.wait(0)) {
                Ok(event) => {
                    // SAFETY: the raw handle is only compared, never called through.
                    let handle = unsafe { event.device.handle() } as usize;
                    let registered = handles.iter().find(|(_, known)| *known == handle).map(|(gpu, _)| *gpu);
                    let Some(gpu) = registered.or_else(|| event.device.index().ok()) else { continue };
                    let code = match event.event_data {
                        Some(XidError::Value(code)) => code,
                        Some(XidError::Unknown) | None => 999,
                    };
                    batch.keep(Xid { gpu, code });
                }
                Err(_) => break,
            }
        }
        batch
    }

    /// The receipt's reading of each GPU in `ask` (DESIGN 9): power, utilization and the clock
    /// event reasons, and at the start and the end the energy and throttle counters and the
    /// power limit. Any of them may be unknown; a GPU whose handle NVML refuses is left out.
    pub(crate) fn meter(&mut self, ask: &Ask) -> Vec<Reading> {
        let (nvml, calls) = (self.nvml, self.calls.clone());
        let mut readings = Vec::with_capacity(ask.gpus.len());
        for &gpu in &ask.gpus {
            let position = match self.metered.iter().position(|(known, _)| *known == gpu) {
                Some(position) => position,
                None => {
                    let Ok(device) =
                        calls.run("nvmlDeviceGetHandleByIndex_v2", Some(gpu), || nvml.device_by_index(gpu))
                    else {
                        continue;
                    };
                    self.metered.push((gpu, device));
                    self.metered.len() - 1
                }
            };
            let device = &self.metered[position].1;
            let run =
                |name, query: &dyn Fn() -> Result<u64, NvmlError>| calls.run(name, Some(gpu), query).ok();
            let power_mw = run("nvmlDeviceGetPowerUsage", &|| device.power_usage().map(u64::from));
            let gpu_percent = run("nvmlDeviceGetUtilizationRates", &|| {
                device.utilization_rates().map(|u| u64::from(u.gpu))
            });
            let clock_events =
                run("nvmlDeviceGetCurrentClocksEventReasons", &|| clock_event_reasons(nvml, device));
            let mut reading = Reading {
                gpu,
                at: Instant::now(),
                power_mw: power_mw.and_then(|mw| u32::try_from(mw).ok()),
                gpu_percent: gpu_percent.and_then(|percent| u32::try_from(percent).ok()),
                clock_events,
                energy_mj: None,
                limit_mw: None,
                throttle_ns: Vec::new(),
            };
            if ask.bounds {
                reading.energy_mj =
                    run("nvmlDeviceGetTotalEnergyConsumption", &|| device.total_energy_consumption());
                reading.limit_mw =
                    run("nvmlDeviceGetEnforcedPowerLimit", &|| device.enforced_power_limit().map(u64::from))
                        .and_then(|mw| u32::try_from(mw).ok());
                reading.throttle_ns = throttle_counters(&calls, gpu, device);
            }
            readings.push(reading);
        }
        readings
    }

    /// The compute processes on GPU or MIG device `key`.
    pub(crate) fn processes(&mut self, key: u32) -> Result<Vec<Listed>, NvmlError> {
        let calls = self.calls.clone();
        let (index, slot) = mig_parts(key).map_or((key, None), |(parent, slot)| (parent, Some(slot)));
        let mut device =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))?;
        if let Some(slot) = slot {
            device = calls.run("nvmlDeviceGetMigDeviceHandleByIndex", Some(index), || {
                device.mig_device_by_index(slot)
            })?;
        }
        let v3_misread = &mut self.v3_misread;
        let mut found = calls
            .run("nvmlDeviceGetComputeRunningProcesses_v3", Some(index), || listed(&device, v3_misread))?;
        // MPS clients are only in the MPS list, asked for where the compute list shows the MPS
        // server (a poll on a machine without MPS costs no second call per GPU); a driver
        // without the list (NOT_SUPPORTED) has none.
        let serves =
            found.iter().any(|p| crate::probe::mps::may_be_server(procfs::command_line(p.pid).as_deref()));
        if !serves {
            return Ok(found);
        }
        let v3_misread = self.v3_misread;
        let clients = calls
            .run("nvmlDeviceGetMPSComputeRunningProcesses_v3", Some(index), || {
                mps_listed(self.nvml, &device, v3_misread)
            })
            .unwrap_or_default();
        found.extend(clients.into_iter().map(|client| Listed { mps_client: true, ..client }));
        Ok(found)
    }
}

fn compute_mode_of(mode: NvmlComputeMode) -> ComputeMode {
    match mode {
        NvmlComputeMode::Default => ComputeMode::Default,
        NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
        NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    }
}

fn process_of(p: Listed) -> GpuProcess {
    GpuProcess {
        pid: p.pid,
        used_bytes: p.used_bytes,
        user: procfs::owner(p.pid),
        command: procfs::command_line(p.pid),
    }
}

/// A MIG device's (GPU instance id, compute instance id): nvmlDeviceGetGpuInstanceId and
/// nvmlDeviceGetComputeInstanceId, which nvml-wrapper 0.13 does not wrap. `None` where the
/// library lacks them or they fail.
fn instance_ids(nvml: &Nvml, device: &Device) -> (Option<u32>, Option<u32>) {
    let lib = nvml.lib();
    let (Ok(gpu_instance), Ok(compute_instance)) =
        (lib.nvmlDeviceGetGpuInstanceId.as_ref(), lib.nvmlDeviceGetComputeInstanceId.as_ref())
    else {
        return (None, None);
    };
    let (mut gi, mut ci): (std::ffi::c_uint, std::ffi::c_uint) = (0, 0);
    // SAFETY: `device` is a live handle of this library (the borrow keeps the library open);
    // each function writes one unsigned int through the pointer it is given, as nvml.h declares.
    let (gi_result, ci_result) = unsafe {
        let handle = device.handle();
        (gpu_instance(handle, &mut gi), compute_instance(handle, &mut ci))
    };
    ((gi_result == 0).then_some(gi), (ci_result == 0).then_some(ci))
}

fn to_listed(infos: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>) -> Vec<Listed> {
    infos
        .into_iter()
        .map(|info| Listed {
            pid: info.pid,
            used_bytes: match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
            mps_client: false,
        })
        .collect()
}

fn listed(device: &Device, v3_misread: &mut bool) -> Result<Vec<Listed>, NvmlError> {
    if *v3_misread {
        return device.running_compute_processes_v2().map(to_listed);
    }
    let listed = to_listed(device.running_compute_processes()?);
    // A PID 0 after the first entry is the 535 misread on a driver that did not say so.
    if listed.iter().skip(1).any(|p| p.pid == 0) {
        tracing::debug!("the _v3 process list looks misread (PID 0): using the _v2 call");
        *v3_misread = true;
        return device.running_compute_processes_v2().map(to_listed);
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::has_535_v3_bug;

    #[test]
    fn affected_drivers() {
        for version in ["535.43.02", "535.54.03", "535.86.05"] {
            assert!(has_535_v3_bug(version), "{version}");
        }
        for version in ["535.104.05", "535.42.01", "550.54.15", "525.85.12", "garbage"] {
            assert!(!has_535_v3_bug(version), "{version}");
        }
    }
}
