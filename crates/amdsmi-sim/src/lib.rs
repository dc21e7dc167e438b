//! AMD SMI simulator.
//!
//! The `cdylib` built from this crate is a `libamd_smi.so` exporting the AMD SMI C ABI
//! (amdsmi.h as of ROCm 7.0: the symbols and struct layouts that gpurun and AMD's `amdsmi`
//! Python package call), answering from a scenario file instead of the amdgpu driver. The
//! `sim-hip` binary plays a HIP program: it resolves `ROCR_VISIBLE_DEVICES` and
//! `HIP_VISIBLE_DEVICES` the way the ROCm runtime does and registers its PID and memory on the
//! GPUs it resolved, so that the simulated library lists it.
//!
//! Which scenario: `AMDSMI_SIM_SCENARIO=/path/to/file.toml`, else the embedded default
//! (`scenarios/mi300x.toml`, eight MI300X). The format is documented in `scenarios/README.md`.

pub mod abi;
pub mod hip;
pub mod scenario;
mod state;
mod unsupported;

pub use unsupported::NAMES as UNSUPPORTED;
