//! What gpurun shows on stdout: `--list` and `--dry-run`, `--doctor` and `--history`.

pub(crate) mod doctor;
pub(crate) mod history;
pub(crate) mod listing;

#[cfg(test)]
mod snapshots;
