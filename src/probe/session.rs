//! One open vendor library behind one interface: the probe thread (`worker`) holds a
//! `Session` and never asks which vendor it is.

use crate::probe::amd;
use crate::probe::calls::Calls;
use crate::probe::gpu::{Machine, Topology};
use crate::probe::meter::{Ask, Reading};
use crate::probe::nvml;
use crate::probe::vendor::{Libraries, VendorChoice};
use crate::probe::watch::{ListError, Listed, XidBatch};

/// The open library; `also_amd`: under `--vendor auto`, the AMD GPUs AMD SMI lists beside the
/// NVIDIA ones NVML answered for (said in `--list`, never used unless `--vendor amd`).
pub(crate) struct Session {
    library: Library,
    also_amd: Option<usize>,
}

enum Library {
    Nvml(nvml::Session),
    Amd(amd::Session),
}

impl From<Library> for Session {
    fn from(library: Library) -> Session {
        Session { library, also_amd: None }
    }
}

/// Why the library could not be opened: the vendor's own reason, each with its hint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error(transparent)]
    Nvml(nvml::OpenError),
    /// `--vendor amd`, or `auto` on a machine whose GPUs are AMD's.
    #[error(transparent)]
    Amd(amd::OpenError),
    #[error("the GPU library is not open")]
    NotOpen,
}

impl OpenError {
    /// A machine without GPUs for this user (a laptop, a CI box: no library, no driver, no
    /// access), which `--fallback cpu` is for; a library that is not the vendor's, or one that
    /// fails otherwise, is a broken install instead.
    pub(crate) fn is_no_gpu_here(&self) -> bool {
        match self {
            OpenError::Nvml(error) => matches!(
                error,
                nvml::OpenError::LibraryMissing { .. }
                    | nvml::OpenError::DriverNotLoaded
                    | nvml::OpenError::NoPermission
            ),
            OpenError::Amd(error) => matches!(
                error,
                amd::OpenError::LibraryMissing { .. }
                    | amd::OpenError::DriverNotLoaded(_)
                    | amd::OpenError::NoPermission(_)
            ),
            OpenError::NotOpen => false,
        }
    }
}

/// The open library, for a spare thread (`worker::ProbeThread::without_xids`).
#[derive(Clone, Copy)]
pub(crate) enum Opened {
    Nvml(nvml::Opened),
    Amd(amd::Opened),
}

impl Opened {
    /// A session on the same library that asks for no Xid events.
    pub(crate) fn session_without_xids(self, calls: Calls) -> Session {
        match self {
            Opened::Nvml(opened) => Library::Nvml(opened.session_without_xids(calls)).into(),
            Opened::Amd(opened) => Library::Amd(opened.session(calls)).into(),
        }
    }
}

/// Opens the library `libraries` asks for. `auto`: NVML where it loads and lists a GPU; else
/// AMD SMI where it loads and lists one; else NVML's own answer (its error where it failed,
/// unless AMD SMI is there: then AMD SMI's, which is about this machine). Where AMD SMI is not
/// installed, `auto` asks NVML nothing more than `nvidia` does (a count of GPUs could hang);
/// where NVML lists GPUs, AMD SMI is initialised only for `--list` (`look_beside`).
pub(crate) fn open(libraries: &Libraries, calls: Calls) -> Result<Session, OpenError> {
    let nvidia = || nvml::open(libraries.nvml.as_deref(), calls.clone());
    let amd = || amd::open(libraries.amd_smi.as_deref(), calls.clone());
    match libraries.vendor {
        VendorChoice::Nvidia => nvidia().map(|s| Library::Nvml(s).into()).map_err(OpenError::Nvml),
        VendorChoice::Amd => amd().map(|s| Library::Amd(s).into()).map_err(OpenError::Amd),
        VendorChoice::Auto => match nvidia() {
            Ok(session) => {
                let loaded = amd_possible(libraries).then(|| amd::load(libraries.amd_smi.as_deref()));
                let Some(Ok(loaded)) = loaded else {
                    return Ok(Library::Nvml(session).into());
                };
                let nvidia_gpus = session.has_gpus();
                if nvidia_gpus && !libraries.look_beside {
                    return Ok(Library::Nvml(session).into());
                }
                match (nvidia_gpus, loaded.init(calls.clone())) {
                    (true, Ok(other)) => {
                        let also_amd = Some(other.gpu_count()).filter(|&count| count > 0);
                        Ok(Session { library: Library::Nvml(session), also_amd })
                    }
                    (false, Ok(other)) if other.gpu_count() > 0 => Ok(Library::Amd(other).into()),
                    _ => Ok(Library::Nvml(session).into()),
                }
            }
            Err(error @ (nvml::OpenError::LibraryMissing { .. } | nvml::OpenError::DriverNotLoaded)) => {
                match amd() {
                    Ok(other) => Ok(Library::Amd(other).into()),
                    Err(other) if other.is_missing() => Err(OpenError::Nvml(error)),
                    Err(other) => Err(OpenError::Amd(other)),
                }
            }
            Err(error) => Err(OpenError::Nvml(error)),
        },
    }
}

impl Libraries {
    /// The file loaded for `vendor`'s library, as named or by default.
    pub(crate) fn path_of(&self, vendor: crate::probe::vendor::Vendor) -> std::path::PathBuf {
        let (named, default) = match vendor {
            crate::probe::vendor::Vendor::Nvidia => (&self.nvml, crate::probe::nvml::DEFAULT_LIBRARY),
            crate::probe::vendor::Vendor::Amd => (&self.amd_smi, crate::probe::amd::DEFAULT_LIBRARY),
        };
        named.clone().unwrap_or_else(|| std::path::PathBuf::from(default))
    }
}

/// Whether AMD SMI could count a GPU beside NVML's: its library is named (`--amd-smi-lib`), or
/// the AMD compute driver's node is there (`/dev/kfd`: ROCm runs nothing without it, in a
/// container too). Where neither, `auto` does not look for the library: finding it missing
/// costs the dynamic loader's whole search, some 70 paths, on every launch.
fn amd_possible(libraries: &Libraries) -> bool {
    libraries.amd_smi.is_some() || std::path::Path::new("/dev/kfd").exists()
}

impl Session {
    pub(crate) fn probe(&mut self, needs: crate::probe::Needs) -> Result<Machine, OpenError> {
        let machine = match &mut self.library {
            Library::Nvml(session) => session.probe(needs).map_err(OpenError::Nvml),
            Library::Amd(session) => session.probe().map_err(OpenError::Amd),
        };
        machine.map(|machine| Machine { also_amd_gpus: self.also_amd, ..machine })
    }

    /// What the probe deferred of `gpus` (only NVML defers: AMD SMI's probe reads it all).
    pub(crate) fn deferred_readings(&mut self, gpus: &[u32]) -> Vec<crate::probe::deferred::Deferred> {
        match &mut self.library {
            Library::Nvml(session) => session.deferred_readings(gpus),
            Library::Amd(_) => Vec::new(),
        }
    }

    pub(crate) fn links(&mut self, gpus: &[u32]) -> Topology {
        match &mut self.library {
            Library::Nvml(session) => session.links(gpus),
            Library::Amd(session) => session.links(gpus),
        }
    }

    pub(crate) fn processes(&mut self, gpu: u32) -> Result<Vec<Listed>, ListError> {
        match &mut self.library {
            Library::Nvml(session) => session.processes(gpu).map_err(ListError::from),
            Library::Amd(session) => session.processes(gpu),
        }
    }

    /// The Xid errors raised on `gpus` since the last look; AMD SMI has no such events.
    pub(crate) fn xids(&mut self, gpus: &[u32], drain: bool) -> XidBatch {
        match &mut self.library {
            Library::Nvml(session) => session.xids(gpus, drain),
            Library::Amd(_) => XidBatch::default(),
        }
    }

    pub(crate) fn meter(&mut self, ask: &Ask) -> Vec<Reading> {
        match &mut self.library {
            Library::Nvml(session) => session.meter(ask),
            Library::Amd(session) => session.meter(ask),
        }
    }

    pub(crate) fn opened(&self) -> Opened {
        match &self.library {
            Library::Nvml(session) => Opened::Nvml(session.opened()),
            Library::Amd(session) => Opened::Amd(session.opened()),
        }
    }
}
