//! Stage 2, the probe: what the machine looks like, from NVML (`nvml/`, the only user of
//! nvml-wrapper) or AMD SMI (`amd/`), chosen by `session` (`vendor`), and /proc, as plain data
//! (`gpu`, `watch`, `meter`) that no later stage reads a vendor into.

pub(crate) mod amd;
pub(crate) mod calls;
pub(crate) mod deferred;
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

/// What a probe asks of each GPU beyond what every request needs (identity, memory,
/// utilization, modes, processes, health): on a real driver each call costs milliseconds
/// (memory affinity 11.7 ms on an H200), so a launch asks only what it uses (DESIGN 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Needs {
    /// The host NUMA node and local CPUs (memory and CPU affinity): `--cpu-bind numa`, and
    /// what shows them.
    pub(crate) placement: bool,
    /// Temperature and power: what shows them (`--list`, a dry run, `--doctor`).
    pub(crate) sensors: bool,
    /// Every GPU's utilization and health, up front: what shows or explains them. Otherwise
    /// they are deferred (`deferred`), and asked only of the GPUs a choice takes.
    pub(crate) every_reading: bool,
}

impl Needs {
    /// Everything: `--list`, a dry run, `--doctor`.
    pub(crate) const ALL: Needs = Needs { placement: true, sensors: true, every_reading: true };
}
