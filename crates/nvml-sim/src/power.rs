//! The energy and power-limit calls of the NVML C ABI (issue 38), as nvml.h documents them:
//! `nvmlDeviceGetTotalEnergyConsumption` ("in millijoules (mJ) since the driver was last
//! reloaded", "For Volta or newer") and `nvmlDeviceGetEnforcedPowerLimit` ("the effective
//! power limit that the driver enforces after taking into account all limiters").

#![allow(non_snake_case)]

use std::ffi::{c_uint, c_ulonglong};

use crate::abi::NVML_ERROR_NOT_SUPPORTED;
use crate::abi::{device_call, put, Device};

/// The energy a board drawing `milliwatts` since the Unix epoch has used, in mJ: the counter
/// grows at the scenario's power, so two reads `t` seconds apart differ by `power x t` (a
/// scenario that changes `power_mw` while a client runs makes it jump, as no driver would).
fn energy_mj(milliwatts: u32) -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (u128::from(milliwatts) * since.as_millis() / 1000) as u64
}

/// # Safety
/// `energy` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: Device,
    energy: *mut c_ulonglong,
) -> u32 {
    device_call(device, "nvmlDeviceGetTotalEnergyConsumption", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        match spec.power_mw.filter(|_| spec.has_energy_counter()) {
            // SAFETY: forwarded caller contract.
            Some(milliwatts) => unsafe { put(energy, energy_mj(milliwatts)) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// The simulator has one limit per board: `power_limit_mw`, as enforced as it is set.
///
/// # Safety
/// `limit` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: Device, limit: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetEnforcedPowerLimit", |state, gpu| {
        match state.scenario.gpus[gpu as usize].power_limit_mw {
            // SAFETY: forwarded caller contract.
            Some(milliwatts) => unsafe { put(limit, milliwatts) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}
