//! Stage 3, selection: which GPUs the command may use (inherited visibility), which of them
//! qualify for the request, and which are chosen. Pure: no I/O.

pub mod busy;
pub mod explain;
pub mod filters;
pub mod policy;
pub mod ranking;
pub mod selection;
pub mod sets;
pub mod visibility;
