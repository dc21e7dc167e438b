//! Readings a launch defers (issue 63, DESIGN 13). On a real driver a GPU's utilization costs
//! 3.8 ms and its health (ECC mode and counters, remapping, clock events, PCIe width) about 4.5
//! ms, on an H200: eight GPUs' worth is 66 ms, as much as the floor every tool pays (nvmlInit
//! and each GPU's first handle). A launch that takes one of them needs them of that one only.
//! So the probe defers them (`Needs::every_reading` off), the choice is made as though every
//! deferred GPU were idle and healthy (the best it could be), and the GPUs it takes are read and
//! the choice made again, until it takes only GPUs that were read (`select::deferred`).

use crate::probe::fabric::Fabric;
use crate::probe::gpu::{Machine, Utilization};
use crate::probe::health::{Health, HealthState};

/// One GPU's deferred readings, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Deferred {
    pub(crate) gpu: u32,
    pub(crate) utilization: Option<Utilization>,
    pub(crate) health: Health,
    pub(crate) fabric: Option<Fabric>,
}

impl Machine {
    /// The GPUs whose readings are still deferred.
    pub(crate) fn deferred(&self) -> Vec<u32> {
        self.gpus.iter().filter(|gpu| gpu.readings_deferred).map(|gpu| gpu.index).collect()
    }

    /// Puts what was read of `asked` in place. One NVML did not answer for (its handle refused
    /// since the probe) keeps no utilization and an unknown health: it is never taken as
    /// healthy unread.
    pub(crate) fn settle(&mut self, asked: &[u32], read: Vec<Deferred>) {
        for gpu in self.gpus.iter_mut().filter(|gpu| gpu.readings_deferred && asked.contains(&gpu.index)) {
            gpu.readings_deferred = false;
            match read.iter().find(|reading| reading.gpu == gpu.index) {
                Some(reading) => {
                    gpu.utilization = reading.utilization;
                    gpu.health = reading.health.clone();
                    gpu.fabric = reading.fabric.clone();
                }
                None => {
                    gpu.health.state = gpu.health.state.max(HealthState::Unknown);
                    gpu.health.reasons.push("its health could not be read".to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::{test_gpu, Gpu};

    fn deferred(index: u32) -> Gpu {
        Gpu { readings_deferred: true, utilization: None, ..test_gpu(index) }
    }

    #[test]
    fn settling_puts_what_was_read_in_place_and_an_unanswered_gpu_is_not_healthy() {
        let mut machine = Machine::of(Default::default(), vec![deferred(0), deferred(1), deferred(2)]);
        let busy = Utilization { gpu_percent: 80, memory_percent: Some(10) };
        let sick =
            Health { state: HealthState::Degraded, reasons: vec!["x".to_owned()], ..Health::default() };
        machine.settle(
            &[0, 1],
            vec![Deferred { gpu: 0, utilization: Some(busy), health: sick.clone(), fabric: None }],
        );
        assert_eq!(machine.deferred(), vec![2]);
        assert_eq!((machine.gpus[0].utilization, &machine.gpus[0].health), (Some(busy), &sick));
        assert_eq!(machine.gpus[1].health.state, HealthState::Unknown);
        assert_eq!(machine.gpus[1].utilization, None);
    }
}
