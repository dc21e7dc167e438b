//! Stage 4, reservation: the shared lock directory, leases held for the command's life, the
//! wait queue, and the loop that probes, selects and reserves under the lock.

pub mod acquire;
pub mod group;
pub mod lease;
pub mod lockdir;
pub mod ticket;
