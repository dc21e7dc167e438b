//! What gpurun shows on stdout: `--list` and `--dry-run`, and `--doctor`.

pub mod doctor;
pub mod listing;
