//! The NVML driver seam, the only code that talks to NVML (through `nvml-wrapper`), and with
//! `src/process/` the only `unsafe` in the tree (the calls nvml-wrapper 0.13 does not wrap).
//! It opens the library once per run and hands plain data (`gpu::Machine`, `watch::Listed`,
//! `watch::XidBatch`, `meter::Reading`) to the rest, on gpurun's probe thread (`worker`), saying
//! which call it is in (`calls::Calls`) so that a call that hangs can be named. One file per
//! NVML area: the devices and their links, the process lists and MPS, health (ECC, remapping,
//! clock events, fabric, exclusion, confidential computing), the Xid events, and the receipt's
//! counters. AMD SMI is the folder beside this one (`probe::amd`), producing the same data.

mod devices;
mod events;
mod health;
mod meter;
mod processes;

use std::path::{Path, PathBuf};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use self::events::XidEvents;
use self::health::{conf_compute, excluded_device};
use self::processes::has_535_v3_bug;
use crate::probe::calls::Calls;
use crate::probe::gpu::{Gpu, Machine};
use crate::probe::health::Excluded;

/// The library NVML is normally loaded as (what the driver package installs).
pub(crate) const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Why NVML could not be opened. Each has its own one-line message with a hint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("cannot load the NVML library {library}: {detail}; {hint}")]
    LibraryMissing { library: String, detail: String, hint: &'static str },
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
}

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
    metered: Vec<Metered>,
}

/// A GPU the receipt reads: its handle, and the newest driver sample of its utilization seen
/// (`None` until the first reading; `Some(None)`: the driver keeps no samples for it).
pub(super) struct Metered {
    pub(super) gpu: u32,
    pub(super) device: Device<'static>,
    pub(super) last_sample_us: Option<Option<u64>>,
}

/// Opens NVML from `library` (default: `libnvidia-ml.so.1`, found like any shared library).
pub(crate) fn open(library: Option<&Path>, calls: Calls) -> Result<Session, OpenError> {
    let library = library.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY));
    let shown = library.display().to_string();
    let nvml = calls
        .run("nvmlInit_v2", None, || Nvml::builder().lib_path(library.as_os_str()).init())
        .map_err(|error| match error {
            NvmlError::LibloadingError(detail) => {
                // A library named by hand that is not there needs no advice to name one.
                let hint = match library.as_os_str() == DEFAULT_LIBRARY {
                    true => "is the NVIDIA driver installed? Name the library with --nvml-lib PATH or GPURUN_NVML_LIB",
                    false => "check the path given to --nvml-lib or GPURUN_NVML_LIB",
                };
                OpenError::LibraryMissing { library: shown.clone(), detail: detail.to_string(), hint }
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
/// `NOT_SUPPORTED`, `FUNCTION_NOT_FOUND` and a missing symbol are never a failure, only an
/// unknown value (`is_absent`).
pub(super) struct Queries<'a> {
    calls: &'a Calls,
    gpu: u32,
    first_error: Option<String>,
    /// A query answered GPU_IS_LOST.
    lost: bool,
    /// Every query that failed otherwise than as absent (`is_absent`): what it asked, and the
    /// error (the health calls' make the health unknown).
    failed: Vec<String>,
}

impl Queries<'_> {
    /// How many queries have failed so far (an absent query is no failure).
    pub(super) fn failures(&self) -> usize {
        self.failed.len()
    }

    pub(super) fn ask<T>(
        &mut self,
        what: &str,
        call: &'static str,
        essential: bool,
        query: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        match self.calls.run(call, Some(self.gpu), query) {
            Ok(value) => Some(value),
            Err(error) if is_absent(&error) => None,
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

/// The driver has no such query for this GPU: NOT_SUPPORTED, FUNCTION_NOT_FOUND (a library
/// with the call and a driver without it), or a library without the symbol at all (a driver
/// older than the call: R470 has no `nvmlDeviceGetMemoryInfo_v2`). Never a failure (DESIGN 3:
/// not supported is never a fault), only a value gpurun does not know.
pub(super) fn is_absent(error: &NvmlError) -> bool {
    matches!(error, NvmlError::NotSupported | NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_))
}

/// NVML's error in the words a user searches for.
pub(super) fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::GpuLost => "GPU is lost (fallen off the bus; see dmesg for Xid errors)".to_owned(),
        NvmlError::NoPermission => "no permission (outside this job's device cgroup?)".to_owned(),
        other => other.to_string(),
    }
}

impl Session {
    /// Everything gpurun needs to know about the machine, in one pass (the links between GPUs
    /// are asked for apart: `links`).
    pub(crate) fn probe(&mut self, needs: crate::probe::Needs) -> Result<Machine, OpenError> {
        let count = self
            .calls
            .run("nvmlDeviceGetCount_v2", None, || self.nvml.device_count())
            .map_err(OpenError::DeviceCount)?;
        let gpus: Vec<Gpu> = (0..count).map(|index| self.probe_gpu(index, needs)).collect();
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
            vendor: crate::probe::vendor::Vendor::Nvidia,
            also_amd_gpus: None,
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

    pub(crate) fn opened(&self) -> Opened {
        Opened { nvml: self.nvml, v3_misread: self.v3_misread }
    }

    /// Whether NVML counts any GPU (`--vendor auto` tries AMD SMI when it counts none).
    pub(crate) fn has_gpus(&self) -> bool {
        self.calls
            .run("nvmlDeviceGetCount_v2", None, || self.nvml.device_count())
            .is_ok_and(|count| count > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_the_driver_lacks_is_absent_never_a_failure() {
        for absent in [
            NvmlError::NotSupported,
            NvmlError::FunctionNotFound,
            NvmlError::FailedToLoadSymbol("nvmlDeviceGetMemoryInfo_v2: undefined symbol".to_owned()),
        ] {
            assert!(is_absent(&absent), "{absent:?}");
        }
        for failure in [NvmlError::Unknown, NvmlError::GpuLost, NvmlError::NoPermission, NvmlError::Timeout] {
            assert!(!is_absent(&failure), "{failure:?}");
        }
    }

    #[test]
    fn a_lost_gpu_and_a_refused_one_are_said_in_the_words_users_search_for() {
        assert!(describe(&NvmlError::GpuLost).contains("fallen off the bus"));
        assert!(describe(&NvmlError::NoPermission).contains("device cgroup"));
        assert_eq!(describe(&NvmlError::Unknown), NvmlError::Unknown.to_string());
    }
}
