//! Stage 3, selection: which GPUs the command may use (inherited visibility), which of them
//! qualify for the request, and which are chosen. Pure: no I/O.

pub mod policy;
pub mod selection;
pub mod visibility;
