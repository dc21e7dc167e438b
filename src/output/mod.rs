//! What gpurun shows on stdout: `--list` and `--dry-run`, `--doctor` and `--history`.

pub(crate) mod doctor;
pub(crate) mod history;
pub(crate) mod listing;
pub(crate) mod mps_daemon;
pub(crate) mod watching;

#[cfg(test)]
mod snapshots;
