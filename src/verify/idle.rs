//! GPUs held idle (issue 52): a chosen GPU whose utilization the receipt's samples read as 0%
//! for `--idle-warn` is said once, and kept as an `idle` diagnosis with its minutes; the house
//! rule `idle-action = "end"` ends the command once a GPU has been idle for `idle-limit`.
//! Notebooks and forgotten shells that hold a card all night are a shared server's first
//! complaint. Pure: the monitor feeds it the samples, the supervisor acts on what it returns.
//!
//! Utilization is the GPU's, not the command's (NVML's `nvmlDeviceGetUtilizationRates`): a
//! card another user keeps busy is not idle. A GPU whose utilization cannot be read (a MIG
//! device, a driver that answers NOT_SUPPORTED) is never called idle: nothing is known of it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::options::duration::compact;
use crate::probe::meter::Reading;

/// What a run is held to: the warning (`--idle-warn`, or the house rule `idle-limit` with
/// `idle-action = "warn"`, whichever comes first) and the end (`idle-action = "end"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IdleRules {
    /// Each with what set it, for the messages: `--idle-warn 30m`, or the rule as the system
    /// file says it.
    pub(crate) warn_after: Option<(Duration, String)>,
    pub(crate) end_after: Option<(Duration, String)>,
}

impl IdleRules {
    /// `--idle-warn` alone.
    pub(crate) fn warn(after: Option<Duration>) -> IdleRules {
        let warn_after = after.map(|after| (after, format!("--idle-warn {}", compact(after))));
        IdleRules { warn_after, end_after: None }
    }

    /// What idle GPUs are held to: `--idle-warn` (`asked`), sooner where the house rule
    /// (`house`: idle-limit, whether its action is end, and its words) warns sooner (a user
    /// cannot turn it off), and the house rule's end.
    pub(crate) fn within(asked: Option<Duration>, house: Option<(Duration, bool, String)>) -> IdleRules {
        let asked = IdleRules::warn(asked);
        match house {
            Some((after, true, rule)) => IdleRules { end_after: Some((after, rule)), ..asked },
            Some((after, false, rule)) if asked.warn_after.as_ref().is_none_or(|(mine, _)| *mine > after) => {
                IdleRules { warn_after: Some((after, rule)), end_after: None }
            }
            _ => asked,
        }
    }
}

/// One GPU's stretches at 0%.
#[derive(Debug, Clone, Default)]
struct Stretch {
    /// Since when every sample has read 0% (None: the last one read more, or none read 0 yet).
    since: Option<Instant>,
    /// The longest stretch at 0% so far.
    longest: Duration,
    warned: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct IdleWatch {
    rules: IdleRules,
    /// The run's start: a GPU whose first sample reads 0% has been idle since then.
    started: Instant,
    gpus: BTreeMap<u32, Stretch>,
    ended: bool,
    /// The end crossed and not yet acted on (`take_end`).
    pending_end: Option<(u32, Duration)>,
}

impl IdleWatch {
    pub(crate) fn new(rules: IdleRules, started: Instant) -> IdleWatch {
        IdleWatch { rules, started, gpus: BTreeMap::new(), ended: false, pending_end: None }
    }

    /// Takes one look's samples of the chosen GPUs' utilization. Returns the GPUs idle for the
    /// warning's time since this look (each said once), with how long; the house rule's end, if
    /// crossed, waits for `take_end`.
    pub(crate) fn absorb(&mut self, readings: &[Reading]) -> Vec<(u32, Duration)> {
        let mut crossed = Vec::new();
        if self.rules.warn_after.is_none() && self.rules.end_after.is_none() {
            return crossed;
        }
        for reading in readings {
            let Some(percent) = reading.busiest_percent() else { continue };
            let first = !self.gpus.contains_key(&reading.gpu);
            let stretch = self.gpus.entry(reading.gpu).or_default();
            if percent > 0 {
                stretch.since = None;
                continue;
            }
            let since = *stretch.since.get_or_insert(if first { self.started } else { reading.at });
            let idle = reading.at.saturating_duration_since(since);
            stretch.longest = stretch.longest.max(idle);
            if self.rules.warn_after.as_ref().is_some_and(|(after, _)| idle >= *after) && !stretch.warned {
                stretch.warned = true;
                crossed.push((reading.gpu, idle));
            }
            if self.rules.end_after.as_ref().is_some_and(|(after, _)| idle >= *after) && !self.ended {
                self.ended = true;
                stretch.warned = true;
                self.pending_end = Some((reading.gpu, idle));
            }
        }
        crossed
    }

    /// The warning, as said on stderr when GPUs cross `--idle-warn`.
    pub(crate) fn warning(&self, crossed: &[(u32, Duration)]) -> Option<String> {
        let (_, source) = self.rules.warn_after.as_ref()?;
        let idle = crossed.iter().map(|(_, idle)| Duration::from_secs(idle.as_secs())).min()?;
        let gpus: Vec<String> = crossed.iter().map(|(gpu, _)| crate::probe::gpu::label(*gpu)).collect();
        let (first, rest) = gpus.split_first()?;
        let named = match rest {
            [] => first.clone(),
            _ => format!("{} and {}", gpus[..gpus.len() - 1].join(", "), gpus[gpus.len() - 1]),
        };
        let (verb, pronoun) = if gpus.len() == 1 { ("has", "it") } else { ("have", "them") };
        Some(format!(
            "{named} {verb} been held at 0% utilization for {} ({source}): end the command or let \
             others use {pronoun}",
            compact(idle)
        ))
    }

    /// The house rule's end, crossed since the last call: the GPU, and what ending the
    /// command with `signal` for it is said as.
    pub(crate) fn take_end(&mut self, signal: i32) -> Option<(u32, String)> {
        let (gpu, idle) = self.pending_end.take()?;
        Some((gpu, self.ending(gpu, idle, signal)))
    }

    /// What ending the command for idleness is said as, and kept in the report.
    fn ending(&self, gpu: u32, idle: Duration, signal: i32) -> String {
        let rule = self.rules.end_after.as_ref().map(|(_, rule)| rule.as_str()).unwrap_or_default();
        format!(
            "{} was held at 0% utilization for {} (the house rule {rule}): the command was sent {}",
            crate::probe::gpu::label(gpu),
            compact(Duration::from_secs(idle.as_secs())),
            crate::options::signal::name(signal)
        )
    }

    /// The GPUs that were idle past the warning or the limit, with their longest stretch:
    /// the `idle` diagnosis.
    pub(crate) fn held_idle(&self) -> Vec<(u32, Duration)> {
        self.gpus.iter().filter(|(_, stretch)| stretch.warned).map(|(gpu, s)| (*gpu, s.longest)).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_house_rule_warns_sooner_or_ends() {
        use super::IdleRules;
        use std::time::Duration;
        let hour = Duration::from_secs(3600);
        let rule = || "idle-limit = 1h".to_owned();
        let ends = IdleRules::within(None, Some((hour, true, rule())));
        assert_eq!(ends, IdleRules { warn_after: None, end_after: Some((hour, rule())) });
        let first = |rules: IdleRules| rules.warn_after.map(|(after, _)| after);
        let warns = |asked| IdleRules::within(asked, Some((hour, false, rule())));
        assert_eq!(first(warns(None)), Some(hour), "off is not for a user to choose");
        assert_eq!(first(warns(Some(hour * 2))), Some(hour));
        assert_eq!(first(warns(Some(Duration::from_secs(60)))), Some(Duration::from_secs(60)));
    }

    use super::*;

    fn reading(gpu: u32, at: Instant, percent: Option<u32>) -> Reading {
        Reading {
            gpu,
            at,
            power_mw: None,
            gpu_percent: percent,
            clock_events: None,
            energy_mj: None,
            limit_mw: None,
            throttle_ns: Vec::new(),
            utilization_samples: None,
            memory_used: None,
        }
    }

    fn watch(warn: Option<u64>, end: Option<u64>) -> (IdleWatch, Instant) {
        let start = Instant::now();
        let rules = IdleRules {
            end_after: end.map(|s| (Duration::from_secs(s), "idle-limit = 1h".to_owned())),
            ..IdleRules::warn(warn.map(Duration::from_secs))
        };
        (IdleWatch::new(rules, start), start)
    }

    #[test]
    fn a_gpu_at_zero_from_the_start_warns_once_at_the_time() {
        let (mut idle, start) = watch(Some(10), None);
        let at = |s| start + Duration::from_secs(s);
        assert!(idle.absorb(&[reading(3, at(5), Some(0))]).is_empty());
        let crossed = idle.absorb(&[reading(3, at(10), Some(0))]);
        assert_eq!(crossed, [(3, Duration::from_secs(10))]);
        assert!(idle.absorb(&[reading(3, at(20), Some(0))]).is_empty(), "said once");
        assert_eq!(idle.held_idle(), [(3, Duration::from_secs(20))]);
        assert_eq!(
            idle.warning(&crossed).unwrap(),
            "GPU 3 has been held at 0% utilization for 10s (--idle-warn 10s): end the command or let others use it"
        );
    }

    #[test]
    fn work_restarts_the_count_and_unknown_utilization_is_never_idle() {
        let (mut idle, start) = watch(Some(10), None);
        let at = |s| start + Duration::from_secs(s);
        idle.absorb(&[reading(3, at(1), Some(40)), reading(4, at(1), None)]);
        idle.absorb(&[reading(3, at(6), Some(0)), reading(4, at(6), None)]);
        assert!(idle.absorb(&[reading(3, at(15), Some(0)), reading(4, at(30), None)]).is_empty());
        idle.absorb(&[reading(3, at(16), Some(1))]);
        assert!(idle.absorb(&[reading(3, at(25), Some(0))]).is_empty(), "a new stretch");
        assert_eq!(idle.absorb(&[reading(3, at(35), Some(0))]), [(3, Duration::from_secs(10))]);
        assert_eq!(idle.held_idle(), [(3, Duration::from_secs(10))]);
    }

    #[test]
    fn the_house_rule_ends_once_and_off_reads_nothing() {
        let (mut idle, start) = watch(None, Some(60));
        let at = |s| start + Duration::from_secs(s);
        idle.absorb(&[reading(2, at(59), Some(0))]);
        assert_eq!(idle.take_end(libc::SIGTERM), None);
        idle.absorb(&[reading(2, at(61), Some(0))]);
        let (gpu, what) = idle.take_end(libc::SIGTERM).unwrap();
        assert_eq!(gpu, 2);
        assert_eq!(what, "GPU 2 was held at 0% utilization for 61s (the house rule idle-limit = 1h): the command was sent SIGTERM");
        idle.absorb(&[reading(2, at(70), Some(0))]);
        assert_eq!(idle.take_end(libc::SIGTERM), None, "once");
        assert!(idle
            .ending(2, Duration::from_secs(61), libc::SIGTERM)
            .contains("(the house rule idle-limit = 1h)"));
        let (mut off, start) = watch(None, None);
        off.absorb(&[reading(2, start + Duration::from_secs(999), Some(0))]);
        assert!(off.held_idle().is_empty());
        let two = IdleWatch::new(IdleRules::warn(Some(Duration::from_secs(60))), start);
        let said = two.warning(&[(1, Duration::from_secs(75)), (4, Duration::from_millis(61_500))]).unwrap();
        assert!(
            said.starts_with("GPU 1 and GPU 4 have been held at 0% utilization for 61s (--idle-warn 1m)"),
            "{said}"
        );
    }
}
