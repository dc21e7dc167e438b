//! What gpurun shows on stdout: `--list` and `--dry-run`, `--doctor` and `--history`.

pub mod doctor;
pub mod history;
pub mod listing;
