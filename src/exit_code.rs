//! The documented exit codes (DESIGN 10), in one place. Nothing else calls `process::exit` with
//! a literal.

/// Not enough GPUs satisfy the request (sysexits EX_TEMPFAIL: retry later, or use `--wait`).
pub const NOT_ENOUGH_GPUS: u8 = 75;
/// gpurun's own failure: usage, NVML, lock directory, strict verification.
pub const GPURUN_ERROR: u8 = 125;
/// The command was found but could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;
