//! The AMD SMI seam: the only code that talks to `libamd_smi.so` (through `abi`'s thin dlopen
//! layer; crates.io has no maintained binding). It produces the same plain data as `probe::nvml`
//! (`gpu::Machine`, `watch::Listed`, `meter::Reading`), on the same probe thread and under the
//! same deadline (`calls::Calls` names a call that hangs). What AMD SMI does not have (MIG, MPS,
//! compute modes, Xid events, persistence mode) is simply absent, as on a driver that answers
//! NOT_SUPPORTED.

mod abi;
mod devices;

use std::path::{Path, PathBuf};

use self::abi::{Answered, Api, Handle, LoadError, Status};
use crate::probe::calls::Calls;

/// The library AMD SMI is installed as (the `amd-smi-lib` package), found like any shared
/// library; ROCm's own directory after it, as AMD's Python bindings look.
pub(crate) const DEFAULT_LIBRARY: &str = "libamd_smi.so";
const ROCM_LIBRARY: &str = "/opt/rocm/lib/libamd_smi.so";

/// Why AMD SMI could not be opened, each with its hint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("cannot load the AMD SMI library {library}: {detail}; {hint}")]
    LibraryMissing { library: String, detail: String, hint: &'static str },
    #[error(
        "{library} is not a usable AMD SMI library ({symbol} is missing): gpurun reads AMD SMI as of \
         ROCm 7.0 (amd-smi-lib 26 and later); point --amd-smi-lib or GPURUN_AMD_SMI_LIB at that libamd_smi.so"
    )]
    NotAmdSmi { library: String, symbol: String },
    #[error(
        "{library} is AMD SMI {version} (ROCm 6.x or older), whose structures differ from those gpurun reads \
         (AMD SMI 26, ROCm 7.0, and later); point --amd-smi-lib or GPURUN_AMD_SMI_LIB at ROCm 7's libamd_smi.so"
    )]
    TooOld { library: String, version: String },
    #[error(
        "the AMD GPU driver is not loaded (AMD SMI: {0}); check that `amd-smi list` works and that the \
         amdgpu kernel module is loaded (`lsmod | grep amdgpu`)"
    )]
    DriverNotLoaded(Status),
    #[error(
        "no permission to talk to the AMD GPU driver (AMD SMI: {0}); check that your user may open \
         /dev/kfd and /dev/dri/renderD* (the video and render groups)"
    )]
    NoPermission(Status),
    #[error("AMD SMI failed to initialise: {0}")]
    Other(Status),
}

impl OpenError {
    /// The library is not on this machine (as opposed to present and failing).
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, OpenError::LibraryMissing { .. })
    }
}

/// The open library, for a spare thread of calls (`Opened::session`).
#[derive(Clone, Copy)]
pub(crate) struct Opened {
    api: &'static Api,
}

impl Opened {
    pub(crate) fn session(self, calls: Calls) -> Session {
        Session { api: self.api, calls, processors: std::cell::OnceCell::new() }
    }
}

pub(crate) struct Session {
    api: &'static Api,
    calls: Calls,
    /// The processor handles, looked up once: AMD SMI fixes them at `amdsmi_init` (a partition
    /// change needs the driver reloaded), and each poll of each GPU would otherwise list every
    /// socket again.
    processors: std::cell::OnceCell<Vec<Handle>>,
}

/// Opens AMD SMI from `library` (default: `libamd_smi.so` through the loader's path, then
/// `/opt/rocm/lib/libamd_smi.so`) and initialises it for AMD GPUs.
pub(crate) fn open(library: Option<&Path>, calls: Calls) -> Result<Session, OpenError> {
    load(library)?.init(calls)
}

/// The library, loaded and its functions found, not yet initialised.
pub(crate) struct Loaded {
    api: &'static Api,
    shown: String,
}

/// Loads AMD SMI (`open` without `amdsmi_init`): whether it is on this machine at all.
pub(crate) fn load(library: Option<&Path>) -> Result<Loaded, OpenError> {
    let candidates: Vec<PathBuf> = match library {
        Some(path) => vec![path.to_path_buf()],
        None => vec![PathBuf::from(DEFAULT_LIBRARY), PathBuf::from(ROCM_LIBRARY)],
    };
    let mut missing = None;
    let mut api = None;
    for candidate in &candidates {
        match Api::load(candidate) {
            Ok(loaded) => {
                api = Some((loaded, candidate.display().to_string()));
                break;
            }
            Err(LoadError::Missing(detail)) => {
                missing.get_or_insert((candidate.display().to_string(), detail));
            }
            Err(LoadError::Symbol(symbol)) => {
                return Err(OpenError::NotAmdSmi { library: candidate.display().to_string(), symbol })
            }
        }
    }
    let Some((api, shown)) = api else {
        let (library, detail) = missing.unwrap_or_default();
        let hint = match library.as_str() {
            DEFAULT_LIBRARY => "is ROCm's amd-smi-lib installed? Name the library with --amd-smi-lib PATH or GPURUN_AMD_SMI_LIB",
            _ => "check the path given to --amd-smi-lib or GPURUN_AMD_SMI_LIB",
        };
        return Err(OpenError::LibraryMissing { library, detail, hint });
    };
    match api.version() {
        Ok([major, minor, release]) if major < abi::FIRST_MAJOR => {
            Err(OpenError::TooOld { library: shown, version: format!("{major}.{minor}.{release}") })
        }
        _ => Ok(Loaded { api, shown }),
    }
}

impl Loaded {
    /// `amdsmi_init` for AMD GPUs.
    pub(crate) fn init(self, calls: Calls) -> Result<Session, OpenError> {
        let api = self.api;
        match calls.run("amdsmi_init", None, || api.init()) {
            Status::SUCCESS => {}
            status @ Status::DRIVER_NOT_LOADED => return Err(OpenError::DriverNotLoaded(status)),
            status @ Status::NO_PERM => return Err(OpenError::NoPermission(status)),
            status => return Err(OpenError::Other(status)),
        }
        tracing::debug!("AMD SMI initialised from {}", self.shown);
        Ok(Session { api, calls, processors: std::cell::OnceCell::new() })
    }
}

impl Session {
    pub(crate) fn opened(&self) -> Opened {
        Opened { api: self.api }
    }

    /// Every GPU processor, socket by socket: AMD SMI's own order, the one `amd-smi list`
    /// numbers GPUs by. A partition (CPX, DPX ...) is a processor of its own.
    fn processors(&self) -> Answered<Vec<Handle>> {
        if let Some(known) = self.processors.get() {
            return Ok(known.clone());
        }
        let api = self.api;
        let sockets = self.calls.run("amdsmi_get_socket_handles", None, || api.sockets())?;
        let mut processors = Vec::new();
        for socket in sockets {
            processors
                .extend(self.calls.run("amdsmi_get_processor_handles", None, || api.processors(socket))?);
        }
        Ok(self.processors.get_or_init(|| processors).clone())
    }

    /// The handle of processor `index` (NOT_FOUND for one AMD SMI does not list).
    fn processor(&self, index: u32) -> Answered<Handle> {
        self.processors()?.get(index as usize).copied().ok_or(Status(31))
    }

    /// How many GPUs AMD SMI lists (`--vendor auto` goes on to it only where NVML has none).
    pub(crate) fn gpu_count(&self) -> usize {
        self.processors().map_or(0, |found| found.len())
    }
}
