//! The driver's utilization samples (`nvmlDeviceGetSamples`, issue 62), as nvml.h documents
//! them: the driver keeps a bounded buffer of recent samples (here one every 1/6 s, the last
//! 20 s), a caller asks for those newer than the last timestamp it saw, with the count protocol
//! of the process lists (a NULL buffer asks how many; a short one is filled oldest first), and
//! NOT_FOUND when there is none. Only NVML_GPU_UTILIZATION_SAMPLES of a whole GPU with a
//! utilization figure answers; the other types, MIG devices and GPUs in MIG mode are
//! NOT_SUPPORTED (nvml.h: "On MIG-enabled GPUs, querying ... NVML_GPU_UTILIZATION_SAMPLES ... is
//! not currently supported").
//!
//! What a sample says is the GPU's utilization at its moment: the scenario's figure, or a
//! `sim-cuda --busy` of that moment, whichever is higher. A busy window is a file the program
//! leaves in the state directory (`<pid>.busy`: percent, start and end in ms since the epoch,
//! the GPUs' UUIDs) and that outlives it, so that samples of a moment are the same whenever
//! they are asked for.

#![allow(non_snake_case)]

use std::ffi::{c_uint, c_ulonglong};
use std::path::Path;

use crate::abi::{
    device_call, Device, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
};
use crate::state::State;

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

/// A `sim-cuda --busy` window.
struct Busy {
    percent: u32,
    from_ms: u64,
    until_ms: u64,
    uuids: Vec<String>,
}

fn busy_windows(state_dir: &Path) -> Vec<Busy> {
    let Ok(entries) = std::fs::read_dir(state_dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".busy"))
        .filter_map(|entry| {
            let text = std::fs::read_to_string(entry.path()).ok()?;
            let mut words = text.split_whitespace();
            Some(Busy {
                percent: words.next()?.parse().ok()?,
                from_ms: words.next()?.parse().ok()?,
                until_ms: words.next()?.parse().ok()?,
                uuids: words.next()?.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// The utilization of GPU `gpu` at `at_ms` (ms since the epoch): the scenario's figure, or a
/// busy window of that moment. `None` where the scenario gives none (NOT_SUPPORTED).
pub(crate) fn utilization_at(state: &State, gpu: u32, at_ms: u64) -> Option<u32> {
    utilization_in(state, gpu, &busy_windows(&state.state_dir), at_ms)
}

fn utilization_in(state: &State, gpu: u32, windows: &[Busy], at_ms: u64) -> Option<u32> {
    let spec = &state.scenario.gpus[gpu as usize];
    let base = spec.utilization_gpu?;
    let busy = windows
        .iter()
        .filter(|busy| busy.uuids.contains(&spec.uuid) && busy.from_ms <= at_ms && at_ms < busy.until_ms)
        .map(|busy| busy.percent)
        .max();
    Some(base.max(busy.unwrap_or(0)).min(100))
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

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
