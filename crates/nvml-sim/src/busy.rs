//! A GPU's utilization at a moment (issue 62): the scenario's figure, or a `sim-cuda --busy`
//! window of that moment, whichever is higher. A busy window is a file the program leaves in
//! the state directory (`<pid>.busy`: percent, start and end in ms since the epoch, the GPUs'
//! UUIDs) and that outlives it, so that the driver's samples of a moment are the same whenever
//! they are asked for. `nvmlDeviceGetUtilizationRates` reads the present, `nvmlDeviceGetSamples`
//! the recent past.

use std::path::Path;

use crate::state::State;

/// A `sim-cuda --busy` window.
pub(crate) struct Busy {
    percent: u32,
    from_ms: u64,
    until_ms: u64,
    uuids: Vec<String>,
}

pub(crate) fn busy_windows(state_dir: &Path) -> Vec<Busy> {
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

pub(crate) fn utilization_in(state: &State, gpu: u32, windows: &[Busy], at_ms: u64) -> Option<u32> {
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
