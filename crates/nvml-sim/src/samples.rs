//! The driver's utilization samples (`nvmlDeviceGetSamples`, issue 62), as nvml.h documents
//! them: the driver keeps a bounded buffer of recent samples (here one every 1/6 s, the last
//! 20 s), a caller asks for those newer than the last timestamp it saw, with the count protocol
//! of the process lists (a NULL buffer asks how many; a short one is filled oldest first), and
//! NOT_FOUND when there is none. Only NVML_GPU_UTILIZATION_SAMPLES of a whole GPU with a
//! utilization figure answers; the other types, MIG devices and GPUs in MIG mode are
//! NOT_SUPPORTED (nvml.h: "On MIG-enabled GPUs, querying ... NVML_GPU_UTILIZATION_SAMPLES ... is
//! not currently supported").
//!
//! What a sample says is the GPU's utilization at its moment (`busy`).

#![allow(non_snake_case)]

use std::ffi::{c_uint, c_ulonglong};

use crate::abi::{
    device_call, Device, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
};
use crate::busy::{busy_windows, now_us, utilization_in};

/// `nvmlSample_t`: the CPU timestamp in microseconds and an 8-byte `nvmlValue_t`.
#[repr(C)]
pub struct Sample {
    time_stamp: c_ulonglong,
    value: c_ulonglong,
}

/// `NVML_GPU_UTILIZATION_SAMPLES`.
const GPU_UTILIZATION_SAMPLES: c_uint = 1;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
/// One sample every 1/6 s, and the buffer's last 120 of them.
const PERIOD_US: u64 = 166_667;
const KEPT: u64 = 120;

/// # Safety
/// `value_type` and `count` must be valid for writes (`count` for reads too); `samples` null or
/// valid for `*count` writes of `nvmlSample_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: Device,
    sample_type: c_uint,
    last_seen: c_ulonglong,
    value_type: *mut c_uint,
    count: *mut c_uint,
    samples: *mut Sample,
) -> u32 {
    if count.is_null() || value_type.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    device_call(device, "nvmlDeviceGetSamples", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        if sample_type != GPU_UTILIZATION_SAMPLES || spec.mig_mode.as_deref() == Some("enabled") {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        if spec.utilization_gpu.is_none() {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let now = now_us();
        let newest = now / PERIOD_US;
        let oldest = newest.saturating_sub(KEPT - 1).max(last_seen / PERIOD_US + 1);
        let moments: Vec<u64> =
            (oldest..=newest).map(|k| k * PERIOD_US).filter(|at| *at > last_seen).collect();
        // SAFETY: checked non-null; caller contract.
        unsafe { *value_type = VALUE_TYPE_UNSIGNED_INT };
        if moments.is_empty() {
            return NVML_ERROR_NOT_FOUND;
        }
        // SAFETY: as above.
        let capacity = unsafe { *count } as usize;
        if samples.is_null() {
            // SAFETY: as above.
            unsafe { *count = moments.len() as c_uint };
            return NVML_SUCCESS;
        }
        if capacity == 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let written = moments.len().min(capacity);
        let windows = busy_windows(&state.state_dir);
        for (slot, at) in moments.iter().take(written).enumerate() {
            let percent = utilization_in(state, gpu, &windows, at / 1000).unwrap_or(0);
            // SAFETY: slot < capacity, which the caller allocated.
            unsafe { samples.add(slot).write(Sample { time_stamp: *at, value: u64::from(percent) }) };
        }
        // SAFETY: as above.
        unsafe { *count = written as c_uint };
        NVML_SUCCESS
    })
}

/// What the simulator takes nvml.h to say of the samples (checked against the header).
pub(crate) fn facts() -> Vec<(String, u64)> {
    vec![
        ("sizeof(nvmlSample_t)".into(), std::mem::size_of::<Sample>() as u64),
        ("NVML_GPU_UTILIZATION_SAMPLES".into(), u64::from(GPU_UTILIZATION_SAMPLES)),
        ("NVML_VALUE_TYPE_UNSIGNED_INT".into(), u64::from(VALUE_TYPE_UNSIGNED_INT)),
    ]
}
