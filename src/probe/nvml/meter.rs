//! The receipt's readings: power, utilization and clock events each poll; energy, the power
//! limit and the throttle counters at the two ends.

use std::time::Instant;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Device;

use super::devices::memory_info;
use super::health::{clock_event_reasons, sample_integer};
use super::{Metered, Session};
use crate::probe::calls::Calls;
use crate::probe::meter::{Ask, Reading, THROTTLE_REASONS};

impl Session {
    /// The receipt's reading of each GPU in `ask` (DESIGN 9): power, utilization and the clock
    /// event reasons, and at the start and the end the energy and throttle counters and the
    /// power limit. Any of them may be unknown; a GPU whose handle NVML refuses is left out.
    pub(crate) fn meter(&mut self, ask: &Ask) -> Vec<Reading> {
        let (nvml, calls) = (self.nvml, self.calls.clone());
        let mut readings = Vec::with_capacity(ask.gpus.len());
        for &gpu in &ask.gpus {
            let position = match self.metered.iter().position(|metered| metered.gpu == gpu) {
                Some(position) => position,
                None => {
                    let Ok(device) =
                        calls.run("nvmlDeviceGetHandleByIndex_v2", Some(gpu), || nvml.device_by_index(gpu))
                    else {
                        continue;
                    };
                    self.metered.push(Metered { gpu, device, last_sample_us: None });
                    self.metered.len() - 1
                }
            };
            let utilization_samples = utilization_samples(&calls, &mut self.metered[position]);
            let device = &self.metered[position].device;
            let run =
                |name, query: &dyn Fn() -> Result<u64, NvmlError>| calls.run(name, Some(gpu), query).ok();
            let power_mw = run("nvmlDeviceGetPowerUsage", &|| device.power_usage().map(u64::from));
            let gpu_percent = run("nvmlDeviceGetUtilizationRates", &|| {
                device.utilization_rates().map(|u| u64::from(u.gpu))
            });
            let clock_events =
                run("nvmlDeviceGetCurrentClocksEventReasons", &|| clock_event_reasons(nvml, device));
            let mut reading = Reading {
                gpu,
                at: Instant::now(),
                power_mw: power_mw.and_then(|mw| u32::try_from(mw).ok()),
                gpu_percent: gpu_percent.and_then(|percent| u32::try_from(percent).ok()),
                utilization_samples,
                memory_used: ask
                    .memory
                    .then(|| {
                        calls.run("nvmlDeviceGetMemoryInfo_v2", Some(gpu), || memory_info(nvml, device)).ok()
                    })
                    .flatten()
                    .map(|memory| memory.used),
                clock_events,
                energy_mj: None,
                limit_mw: None,
                throttle_ns: Vec::new(),
            };
            if ask.bounds {
                reading.energy_mj =
                    run("nvmlDeviceGetTotalEnergyConsumption", &|| device.total_energy_consumption());
                reading.limit_mw =
                    run("nvmlDeviceGetEnforcedPowerLimit", &|| device.enforced_power_limit().map(u64::from))
                        .and_then(|mw| u32::try_from(mw).ok());
                reading.throttle_ns = throttle_counters(&calls, gpu, device);
            }
            readings.push(reading);
        }
        readings
    }
}

/// The driver's utilization samples since the last reading of this GPU. The first reading
/// only notes the newest sample: what the buffer held before the run is not the run's. `None`
/// where the driver keeps none (NOT_SUPPORTED, MIG mode, an older library): the receipt then
/// has only its looks.
fn utilization_samples(calls: &Calls, metered: &mut Metered) -> Option<Vec<(u64, u32)>> {
    use nvml_wrapper::enum_wrappers::device::Sampling;
    let since = match metered.last_sample_us {
        Some(None) => return None,
        Some(Some(seen)) => Some(seen),
        None => None,
    };
    let device = &metered.device;
    let answer = calls.run("nvmlDeviceGetSamples", Some(metered.gpu), || {
        match device.samples(Sampling::GpuUtilization, since.unwrap_or(0)) {
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            other => other,
        }
    });
    let Ok(samples) = answer else {
        metered.last_sample_us = Some(None);
        return None;
    };
    let mut found: Vec<(u64, u32)> = samples
        .iter()
        .filter(|sample| since.is_none_or(|seen| sample.timestamp > seen))
        .filter_map(|sample| {
            Some((sample.timestamp, u32::try_from(sample_integer(&sample.value)?).ok()?.min(100)))
        })
        .collect();
    found.sort_unstable();
    let newest = found.last().map(|(at, _)| *at).or(since).unwrap_or(0);
    metered.last_sample_us = Some(Some(newest));
    match since {
        None => Some(Vec::new()),
        Some(_) => Some(found),
    }
}

/// The throttle counters of `THROTTLE_REASONS`, in one `nvmlDeviceGetFieldValues` call: each
/// reason's nanoseconds where the driver counts it.
fn throttle_counters(calls: &Calls, gpu: u32, device: &Device) -> Vec<Option<u64>> {
    let fields: Vec<FieldId> =
        THROTTLE_REASONS.iter().filter_map(|reason| reason.counter.map(FieldId)).collect();
    let values = calls
        .run("nvmlDeviceGetFieldValues", Some(gpu), || device.field_values_for(&fields))
        .unwrap_or_default();
    let mut answered = values.iter().map(|sample| {
        sample.as_ref().ok().and_then(|sample| sample.value.as_ref().ok().and_then(sample_integer))
    });
    THROTTLE_REASONS
        .iter()
        .map(|reason| match reason.counter {
            Some(_) => answered.next().flatten(),
            None => None,
        })
        .collect()
}
