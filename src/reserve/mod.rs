//! Stage 4, reservation: the shared lock directory, leases held for the command's life, the
//! wait queue, and the loop that probes, selects and reserves under the lock.

pub(crate) mod acquire;
mod allowance;
mod error;
pub(crate) mod group;
pub(crate) mod holder;
pub(crate) mod holds;
mod joining;
pub(crate) mod lease;
pub(crate) mod lockdir;
mod stalled;
pub(crate) mod ticket;
mod waiting;
