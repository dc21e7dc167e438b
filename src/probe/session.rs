//! One open vendor library behind one interface: the probe thread (`worker`) holds a
//! `Session` and never asks which vendor it is.

use crate::probe::amd;
use crate::probe::calls::Calls;
use crate::probe::gpu::{Machine, Topology};
use crate::probe::meter::{Ask, Reading};
use crate::probe::nvml::{self, OpenError};
use crate::probe::vendor::{Libraries, VendorChoice};
use crate::probe::watch::{ListError, Listed, XidBatch};

pub(crate) enum Session {
    Nvml(nvml::Session),
    Amd(amd::Session),
}

/// The open library, for a spare thread (`worker::NvmlThread::without_xids`).
#[derive(Clone, Copy)]
pub(crate) enum Opened {
    Nvml(nvml::Opened),
    Amd(amd::Opened),
}

impl Opened {
    /// A session on the same library that asks for no Xid events.
    pub(crate) fn session_without_xids(self, calls: Calls) -> Session {
        match self {
            Opened::Nvml(opened) => Session::Nvml(opened.session_without_xids(calls)),
            Opened::Amd(opened) => Session::Amd(opened.session(calls)),
        }
    }
}

/// Opens the library `libraries` asks for. `auto`: NVML where it loads and lists a GPU; else
/// AMD SMI where it loads and lists one; else NVML's own answer (its error where it failed,
/// unless AMD SMI is there: then AMD SMI's, which is about this machine). Where AMD SMI is not
/// installed, `auto` asks NVML nothing more than `nvidia` does (a count of GPUs could hang).
pub(crate) fn open(libraries: &Libraries, calls: Calls) -> Result<Session, OpenError> {
    let nvidia = || nvml::open(libraries.nvml.as_deref(), calls.clone());
    let amd = || amd::open(libraries.amd_smi.as_deref(), calls.clone());
    match libraries.vendor {
        VendorChoice::Nvidia => nvidia().map(Session::Nvml),
        VendorChoice::Amd => amd().map(Session::Amd).map_err(OpenError::Amd),
        VendorChoice::Auto => match nvidia() {
            Ok(session) => match amd::load(libraries.amd_smi.as_deref()) {
                Ok(loaded) if !session.has_gpus() => match loaded.init(calls.clone()) {
                    Ok(other) if other.has_gpus() => Ok(Session::Amd(other)),
                    _ => Ok(Session::Nvml(session)),
                },
                _ => Ok(Session::Nvml(session)),
            },
            Err(error @ (OpenError::LibraryMissing { .. } | OpenError::DriverNotLoaded)) => match amd() {
                Ok(other) => Ok(Session::Amd(other)),
                Err(other) if other.is_missing() => Err(error),
                Err(other) => Err(OpenError::Amd(other)),
            },
            Err(error) => Err(error),
        },
    }
}

impl Session {
    pub(crate) fn probe(&mut self) -> Result<Machine, OpenError> {
        match self {
            Session::Nvml(session) => session.probe(),
            Session::Amd(session) => session.probe(),
        }
    }

    pub(crate) fn links(&mut self, gpus: &[u32]) -> Topology {
        match self {
            Session::Nvml(session) => session.links(gpus),
            Session::Amd(session) => session.links(gpus),
        }
    }

    pub(crate) fn processes(&mut self, gpu: u32) -> Result<Vec<Listed>, ListError> {
        match self {
            Session::Nvml(session) => session.processes(gpu).map_err(ListError::from),
            Session::Amd(session) => session.processes(gpu),
        }
    }

    /// The Xid errors raised on `gpus` since the last look; AMD SMI has no such events.
    pub(crate) fn xids(&mut self, gpus: &[u32], drain: bool) -> XidBatch {
        match self {
            Session::Nvml(session) => session.xids(gpus, drain),
            Session::Amd(_) => XidBatch::default(),
        }
    }

    pub(crate) fn meter(&mut self, ask: &Ask) -> Vec<Reading> {
        match self {
            Session::Nvml(session) => session.meter(ask),
            Session::Amd(session) => session.meter(ask),
        }
    }

    pub(crate) fn opened(&self) -> Opened {
        match self {
            Session::Nvml(session) => Opened::Nvml(session.opened()),
            Session::Amd(session) => Opened::Amd(session.opened()),
        }
    }
}
