//! NVML simulator.
//!
//! The `cdylib` built from this crate is a `libnvidia-ml.so.1` that exports the NVML C ABI
//! (the symbols, symbol versions and struct layouts that `nvml-wrapper` and NVIDIA's
//! `nvidia-ml-py` call), answering from a scenario file instead of a driver. The `sim-cuda`
//! binary plays a CUDA program: it resolves `CUDA_VISIBLE_DEVICES` the way the CUDA runtime does
//! and registers its PID and memory on the GPUs it resolved, so that the simulated NVML lists it.
//!
//! Which scenario: `NVML_SIM_SCENARIO=/path/to/file.toml`, else the embedded default
//! (`scenarios/default.toml`). The format is documented in `scenarios/README.md`.

mod abi;
mod busy;
pub mod cuda;
mod events;
mod fabric;
mod health;
pub mod latency;
mod power;
mod samples;
/// The registry of live processes, shared with the AMD SMI simulator.
pub use sim_shared::registry;
pub mod scenario;
mod state;

/// What the simulator takes nvml.h to say, as `(C expression, value)` (see `abi::header_facts`).
pub fn header_facts() -> Vec<(String, u64)> {
    let mut facts = abi::header_facts();
    facts.extend(health::facts());
    facts.extend(events::facts());
    facts.extend(fabric::facts());
    facts.extend(samples::facts());
    facts
}
