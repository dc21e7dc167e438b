//! What gpurun shows on stdout: `--list` and `--dry-run`, `--doctor` and `--history`; and the
//! Jupyter kernel spec `--jupyter-kernel` writes.

pub(crate) mod doctor;
pub(crate) mod history;
pub(crate) mod jupyter;
pub(crate) mod listing;
pub(crate) mod mps_daemon;
pub(crate) mod watching;

#[cfg(test)]
mod snapshots;
