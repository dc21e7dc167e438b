//! The receipt's readings: power, utilization and clock events each poll; energy, the power
//! limit and the throttle counters at the two ends.

use std::time::Instant;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Device;

use super::health::{clock_event_reasons, sample_integer};
use super::Session;
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
            let position = match self.metered.iter().position(|(known, _)| *known == gpu) {
                Some(position) => position,
                None => {
                    let Ok(device) =
                        calls.run("nvmlDeviceGetHandleByIndex_v2", Some(gpu), || nvml.device_by_index(gpu))
                    else {
                        continue;
                    };
                    self.metered.push((gpu, device));
                    self.metered.len() - 1
                }
            };
            let device = &self.metered[position].1;
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
