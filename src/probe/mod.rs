//! Stage 2, the probe: what the machine looks like, from NVML (the only user of nvml-wrapper)
//! and /proc, as plain data.

pub mod gpu;
pub mod health;
pub mod numa;
pub mod nvml;
pub mod worker;
