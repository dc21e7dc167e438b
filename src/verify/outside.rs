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
    /// Each chosen GPU's used memory from a poll's readings, waiting for the same poll's list
    /// (read just before it): the two are judged together.
    pending: BTreeMap<u32, u64>,
    /// What was held outside at the first poll of each GPU (not the command's doing).
    baseline: BTreeMap<u32, u64>,
    /// What the poll before found held outside: growth is said only when two polls in a row
    /// see it (a process of the command's that appears between a list and its reading is not
    /// an intruder).
    last: BTreeMap<u32, u64>,
    said: BTreeSet<u32>,
}

impl OutsideWatch {
    pub(crate) fn new(active: bool) -> OutsideWatch {
        OutsideWatch { active, ..OutsideWatch::default() }
    }

    /// A poll's readings: each GPU's used memory, kept for its list.
    pub(crate) fn readings(&mut self, readings: &[Reading]) {
        for reading in readings.iter().filter(|_| self.active) {
            if let Some(used) = reading.memory_used {
                self.pending.insert(reading.gpu, used);
            }
        }
    }

    /// The same poll's list of a chosen GPU: memory held outside that grew past the slack
    /// since the first poll, in this poll and the one before, is said once, with how much.
    pub(crate) fn listed(&mut self, gpu: u32, listed: &[Listed]) -> Option<u64> {
        let used = self.pending.remove(&gpu)?;
        let listed: Vec<u64> = listed.iter().map(|process| process.used_bytes).collect::<Option<_>>()?;
        let outside = held_outside(true, Some(used), Some(&listed)).unwrap_or(0);
        let baseline = *self.baseline.entry(gpu).or_insert(outside);
        let steady = self.last.insert(gpu, outside)?.min(outside);
        (steady > baseline + GROWTH_SAID && self.said.insert(gpu)).then_some(outside)
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
        let own = |bytes: u64| [Listed { pid: 4, used_bytes: Some(bytes), mps_client: false }];
        let mut watch = OutsideWatch::new(true);
        let mut poll = |used: u64, listed: &[Listed]| {
            watch.readings(&[reading(0, used)]);
            watch.listed(0, listed)
        };
        // 1 GiB held outside before the command; the command's own 2 GiB, its context's slack.
        assert_eq!(poll(gib, &[]), None);
        assert_eq!(poll(3 * gib + (600 << 20), &own(2 * gib)), None);
        // The command grew by 3 GiB between its list and the reading: one poll, not said.
        assert_eq!(poll(6 * gib, &own(2 * gib)), None);
        assert_eq!(poll(5 * gib + (600 << 20), &own(5 * gib)), None);
        // Another container takes 5 GiB, seen by two polls in a row: said once.
        assert_eq!(poll(10 * gib + (600 << 20), &own(5 * gib)), None);
        assert_eq!(poll(10 * gib + (600 << 20), &own(5 * gib)), Some(5 * gib - (168 << 20)));
        assert_eq!(poll(10 * gib + (600 << 20), &own(5 * gib)), None);
        // A list with a process of unknown memory judges nothing.
        let unknown = [Listed { pid: 4, used_bytes: None, mps_client: false }];
        let mut blind = OutsideWatch::new(true);
        for _ in 0..3 {
            blind.readings(&[reading(0, 9 * gib)]);
            assert_eq!(blind.listed(0, &unknown), None);
        }
        // On the host nothing is read.
        let mut host = OutsideWatch::new(false);
        host.readings(&[reading(0, gib)]);
        assert_eq!(host.listed(0, &[]), None);
        host.readings(&[reading(0, 9 * gib)]);
        assert_eq!(host.listed(0, &[]), None);
    }
}
