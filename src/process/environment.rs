//! Variables gpurun keeps out of its own libraries and still passes on to the command.
//!
//! `NVML_MPS_DEVICE_ENUMERATION=1` makes NVML 13, from its first initialisation in a process,
//! enumerate the MPS locality-domain view (nvml.h, nvmlMpsDeviceEnumeration): other handles,
//! other indices, for every call. gpurun's own NVML must see the machine as nvidia-smi does,
//! so the variable is taken out of gpurun's environment before any library or thread starts,
//! and put back into the command's.

use std::ffi::OsString;
use std::sync::OnceLock;

/// The variables that change what NVML itself answers.
const KEPT_FROM_NVML: &[&str] = &["NVML_MPS_DEVICE_ENUMERATION"];

static HELD: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Takes the variables of `KEPT_FROM_NVML` out of this process's environment, keeping them for
/// the command. Called first, while gpurun has one thread (changing the environment of a
/// process with threads can race with their reads).
pub(crate) fn hold_back() {
    let held = KEPT_FROM_NVML
        .iter()
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            std::env::remove_var(name);
            Some((OsString::from(name), value))
        })
        .collect();
    let _ = HELD.set(held);
}

/// What `hold_back` took: the command gets it as gpurun was given it.
pub(crate) fn held() -> &'static [(OsString, OsString)] {
    HELD.get().map_or(&[], Vec::as_slice)
}
