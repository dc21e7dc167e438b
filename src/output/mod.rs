//! What gpurun shows: `--list` and `--dry-run`, `--doctor`, and the stderr log.

pub mod doctor;
pub mod listing;
pub mod logging;
