//! Stage 2, the probe: what the machine looks like, from NVML (the only user of nvml-wrapper)
//! and /proc, as plain data.

pub(crate) mod fabric;
pub(crate) mod gpu;
pub(crate) mod health;
pub(crate) mod meter;
pub(crate) mod mps;
pub(crate) mod numa;
pub(crate) mod nvml;
pub(crate) mod worker;
