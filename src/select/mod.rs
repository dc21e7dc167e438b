//! Stage 3, selection: which GPUs the command may use (inherited visibility), which of them
//! qualify for the request, and which are chosen. Pure: no I/O.

pub(crate) mod busy;
pub(crate) mod deferred;
pub(crate) mod explain;
pub(crate) mod filters;
pub(crate) mod policy;
mod properties;
pub(crate) mod ranking;
pub(crate) mod request;
pub(crate) mod selection;
pub(crate) mod sets;
