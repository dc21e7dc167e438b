//! gpurun: run a command on the right NVIDIA GPU. The pipeline lives in `gpurun::run`.
//!
//! No Rust `main`: the standard runtime would set SIGPIPE to "ignore" before any of gpurun's
//! code runs, losing whether the caller had it ignored, and the command must start with the
//! caller's signal dispositions (DESIGN 7.4). std still works (Linux hands it argv directly).
#![no_main]

#[no_mangle]
pub extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    gpurun::main_exit()
}
