//! Stage 2, the probe: what the machine looks like, from NVML (`nvml/`, the only user of
//! nvml-wrapper) or AMD SMI (`amd/`), chosen by `session` (`vendor`), and /proc, as plain data
//! (`gpu`, `watch`, `meter`) that no later stage reads a vendor into.

pub(crate) mod amd;
pub(crate) mod calls;
pub(crate) mod fabric;
pub(crate) mod gpu;
pub(crate) mod health;
pub(crate) mod meminfo;
pub(crate) mod meter;
pub(crate) mod mps;
pub(crate) mod numa;
pub(crate) mod nvml;
pub(crate) mod pid_regime;
pub(crate) mod session;
pub(crate) mod vendor;
pub(crate) mod watch;
pub(crate) mod worker;
