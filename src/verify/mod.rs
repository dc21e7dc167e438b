//! Stage 6, verification and report: where the command's processes really landed (NVML polled
//! beside supervision), what went wrong or nearly (diagnosis) and the summary at the end.

pub(crate) mod container;
pub(crate) mod diagnosis;
pub(crate) mod ending;
pub(crate) mod idle;
pub(crate) mod job;
pub(crate) mod leftover;
pub(crate) mod monitor;
pub(crate) mod outside;
pub(crate) mod prom;
pub(crate) mod receipt;
pub(crate) mod report;
pub(crate) mod verdict;
pub(crate) mod xid;
