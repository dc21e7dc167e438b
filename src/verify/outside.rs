//! Memory held outside gpurun's PID namespace during a run (issue 62): in a container, drivers
//! since 535.113.01 list only the namespace's own processes, so another container's or the
//! host's process on the job's GPU is in no list, though its memory is in use. The receipt's
//! readings then carry each chosen GPU's used memory; what no listed process accounts for
//! (`pid_regime::held_outside`), grown past what was there at the start, is an intruder
//! "outside this namespace". Pure: the monitor feeds it.

use std::collections::{BTreeMap, BTreeSet};

use crate::probe::meter::Reading;
use crate::probe::pid_regime::held_outside;
use crate::probe::watch::Listed;

/// Growth below this is a context's own slack, not an intruder.
const GROWTH_SAID: u64 = 256 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OutsideWatch {
    /// gpurun runs in a PID namespace of its own: otherwise nothing here is ever read.
    pub(crate) active: bool,
    /// Each chosen GPU's listed processes' memory at the last poll (`None`: one unknown).
    listed: BTreeMap<u32, Option<Vec<u64>>>,
    /// What was held outside at the first reading of each GPU (before the command's time).
    baseline: BTreeMap<u32, u64>,
    said: BTreeSet<u32>,
}

impl OutsideWatch {
    pub(crate) fn new(active: bool) -> OutsideWatch {
        OutsideWatch { active, ..OutsideWatch::default() }
    }

    /// A poll's list of a chosen GPU.
    pub(crate) fn listed(&mut self, gpu: u32, listed: &[Listed]) {
        if self.active {
            self.listed.insert(gpu, listed.iter().map(|process| process.used_bytes).collect());
        }
    }

    /// The readings' used memory: each GPU where memory held outside grew past the slack since
    /// the first reading, once, with how much is held there now.
    pub(crate) fn readings(&mut self, readings: &[Reading]) -> Vec<(u32, u64)> {
        let mut appeared = Vec::new();
        for reading in readings.iter().filter(|_| self.active) {
            let Some(used) = reading.memory_used else { continue };
            let listed = self.listed.get(&reading.gpu).cloned().flatten().unwrap_or_default();
            let outside = held_outside(true, Some(used), Some(&listed)).unwrap_or(0);
            let baseline = *self.baseline.entry(reading.gpu).or_insert(outside);
            if outside > baseline + GROWTH_SAID && self.said.insert(reading.gpu) {
                appeared.push((reading.gpu, outside));
            }
        }
        appeared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(gpu: u32, used: u64) -> Reading {
        Reading {
            gpu,
            at: std::time::Instant::now(),
            power_mw: None,
            gpu_percent: None,
            utilization_samples: None,
            memory_used: Some(used),
            clock_events: None,
            energy_mj: None,
            limit_mw: None,
            throttle_ns: Vec::new(),
        }
    }

    #[test]
    fn memory_that_appears_outside_is_said_once_and_what_was_there_before_is_not() {
        let gib = 1u64 << 30;
        let mut watch = OutsideWatch::new(true);
        // 1 GiB held outside before the command, the command's own 2 GiB listed.
        assert_eq!(watch.readings(&[reading(0, gib)]), []);
        watch.listed(0, &[Listed { pid: 4, used_bytes: Some(2 * gib), mps_client: false }]);
        assert_eq!(watch.readings(&[reading(0, 3 * gib + (600 << 20))]), []);
        // Another container takes 5 GiB more.
        assert_eq!(watch.readings(&[reading(0, 8 * gib + (600 << 20))]), [(0, 6 * gib - (168 << 20))]);
        assert_eq!(watch.readings(&[reading(0, 9 * gib)]), []);
        // On the host nothing is read.
        let mut host = OutsideWatch::new(false);
        assert_eq!(host.readings(&[reading(0, gib)]), []);
        assert_eq!(host.readings(&[reading(0, 9 * gib)]), []);
    }
}
