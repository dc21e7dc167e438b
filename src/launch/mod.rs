//! Stage 5, launch and supervision: the command's environment, starting it with the caller's
//! signal state, forwarding signals, following job control, reaping, and ending leftovers.

pub mod env;
pub mod orphans;
pub mod signals;
pub mod spawn;
pub mod supervise;
