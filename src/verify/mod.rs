//! Stage 6, verification and report: where the command's processes really landed (NVML polled
//! beside supervision), what went wrong or nearly (diagnosis) and the summary at the end.

pub mod container;
pub mod diagnosis;
pub mod monitor;
pub mod report;
pub mod verdict;
pub mod xid;
