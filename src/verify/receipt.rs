//! The job's receipt (DESIGN 9): per chosen GPU, the energy it drew, its power, utilization and
//! the time it was held back, from the NVML readings the polls make beside verification; and
//! the processes that were not the command's and appeared on its GPUs. Pure: `monitor` feeds
//! it, the report shows it. Memory stays bounded over any run: running sums, a 101-bucket
//! utilization histogram, and a capped list of intruders.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::probe::meter::{Reading, THROTTLE_REASONS};
use crate::verify::outside::OutsideWatch;

/// The counters read at one end of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bounds {
    energy_mj: Option<u64>,
    throttle_ns: Vec<Option<u64>>,
}

/// One GPU's running figures.
#[derive(Debug, Clone, PartialEq)]
struct Tally {
    gpu: u32,
    start: Option<Bounds>,
    end: Option<Bounds>,
    limit_mw: Option<u32>,
    last_at: Option<Instant>,
    /// Power, each sample weighted by the time since the one before (at least 1 ms).
    power_mw_ms: f64,
    power_ms: f64,
    power_max_mw: Option<u32>,
    /// Utilization: milliseconds spent at each percent, by the same weights (the looks).
    utilization_ms: Box<[u64; 101]>,
    /// The driver's own samples (`nvmlDeviceGetSamples`): milliseconds at each percent, each
    /// sample weighted by the time since the one before it (at most `SAMPLE_WEIGHT_MOST`).
    sampled_utilization_ms: Box<[u64; 101]>,
    last_sample_us: Option<u64>,
    /// Milliseconds seen in each of `THROTTLE_REASONS` at the samples, each sample counting the
    /// time since the one before; `None` until a sample has read the clock event reasons.
    sampled_ms: Option<Vec<u64>>,
}

impl Tally {
    fn new(gpu: u32) -> Tally {
        Tally {
            gpu,
            start: None,
            end: None,
            limit_mw: None,
            last_at: None,
            power_mw_ms: 0.0,
            power_ms: 0.0,
            power_max_mw: None,
            utilization_ms: Box::new([0; 101]),
            sampled_utilization_ms: Box::new([0; 101]),
            last_sample_us: None,
            sampled_ms: None,
        }
    }

    fn absorb(&mut self, reading: &Reading, bounds: bool) {
        // The reading describes the moment it was taken; what it says held since the last one.
        let since = self.last_at.map_or(Duration::ZERO, |last| reading.at.saturating_duration_since(last));
        self.last_at = Some(reading.at);
        let weight_ms = (since.as_millis() as u64).max(1);
        if let Some(mw) = reading.power_mw {
            self.power_mw_ms += f64::from(mw) * weight_ms as f64;
            self.power_ms += weight_ms as f64;
            self.power_max_mw = Some(self.power_max_mw.map_or(mw, |max| max.max(mw)));
        }
        if let Some(percent) = reading.gpu_percent {
            self.utilization_ms[percent.min(100) as usize] += weight_ms;
        }
        for &(at_us, percent) in reading.utilization_samples.iter().flatten() {
            // The driver samples every ~1/6 s; a gap (a sample the buffer dropped) is not
            // stretched over the one after it.
            let stood_ms =
                self.last_sample_us.map_or(SAMPLE_PERIOD_MS, |last| at_us.saturating_sub(last) / 1000);
            self.last_sample_us = Some(at_us);
            self.sampled_utilization_ms[percent.min(100) as usize] +=
                stood_ms.clamp(1, SAMPLE_WEIGHT_MOST_MS);
        }
        if let Some(events) = reading.clock_events {
            let sampled = self.sampled_ms.get_or_insert_with(|| vec![0; THROTTLE_REASONS.len()]);
            for (held, reason) in sampled.iter_mut().zip(THROTTLE_REASONS) {
                if events & reason.bit != 0 {
                    *held += since.as_millis() as u64;
                }
            }
        }
        if bounds {
            self.limit_mw = self.limit_mw.or(reading.limit_mw);
            let read = Bounds { energy_mj: reading.energy_mj, throttle_ns: reading.throttle_ns.clone() };
            match self.start {
                None => self.start = Some(read),
                Some(_) => self.end = Some(read),
            }
        }
    }

    fn energy_joules(&self) -> Option<f64> {
        let (start, end) = (self.start.as_ref()?.energy_mj?, self.end.as_ref()?.energy_mj?);
        // A counter that went back: the driver was reloaded during the run; nothing is known.
        Some(end.checked_sub(start)? as f64 / 1000.0)
    }

    fn power(&self) -> Power {
        let watts = |mw: f64| (mw / 1000.0 * 10.0).round() / 10.0;
        Power {
            mean: (self.power_ms > 0.0).then(|| watts(self.power_mw_ms / self.power_ms)),
            max: self.power_max_mw.map(|mw| watts(f64::from(mw))),
            limit: self.limit_mw.map(|mw| watts(f64::from(mw))),
        }
    }

    /// From the driver's samples where it kept any during the run (a few looks seconds apart
    /// cannot make percentiles), else from the looks.
    fn utilization(&self) -> Utilization {
        let sampled = self.sampled_utilization_ms.iter().any(|ms| *ms > 0);
        let (histogram, source) = match sampled {
            true => (&self.sampled_utilization_ms, "samples"),
            false => (&self.utilization_ms, "looks"),
        };
        let total: u64 = histogram.iter().sum();
        let percentile = |share: u64| {
            let wanted = (total * share).div_ceil(100).max(1);
            let mut seen = 0;
            histogram.iter().position(|ms| {
                seen += ms;
                seen >= wanted
            })
        };
        let known = total > 0;
        Utilization {
            p50: known.then(|| percentile(50)).flatten().map(|p| p as u32),
            p95: known.then(|| percentile(95)).flatten().map(|p| p as u32),
            max: known.then(|| histogram.iter().rposition(|ms| *ms > 0)).flatten().map(|p| p as u32),
            source: known.then_some(source),
        }
    }

    /// Seconds held back by each reason: the driver's counter where it answered at both ends,
    /// else the samples. `None` where neither was read; only reasons that held it back at all.
    fn throttled(&self) -> Option<BTreeMap<&'static str, f64>> {
        let counted = |at: usize| {
            let start = (*self.start.as_ref()?.throttle_ns.get(at)?)?;
            let end = (*self.end.as_ref()?.throttle_ns.get(at)?)?;
            Some(end.saturating_sub(start) as f64 / 1e9)
        };
        let sampled = self.sampled_ms.as_ref();
        let mut held = BTreeMap::new();
        let mut known = false;
        for (at, reason) in THROTTLE_REASONS.iter().enumerate() {
            let seconds = counted(at).or_else(|| sampled.map(|ms| ms[at] as f64 / 1000.0));
            known |= seconds.is_some();
            if let Some(seconds) = seconds.filter(|s| *s > 0.0) {
                held.insert(reason.name, (seconds * 1000.0).round() / 1000.0);
            }
        }
        known.then_some(held)
    }
}

/// Watts over the run: the samples' mean and maximum, and the enforced limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Power {
    pub(crate) mean: Option<f64>,
    pub(crate) max: Option<f64>,
    pub(crate) limit: Option<f64>,
}

/// How often drivers sample utilization into their buffer (about 1/6 s): what the first
/// sample of a run stands for.
const SAMPLE_PERIOD_MS: u64 = 167;
/// The longest a driver sample stands for: one after a gap (samples the buffer dropped) is not
/// stretched over it.
const SAMPLE_WEIGHT_MOST_MS: u64 = 1000;

/// GPU utilization percentiles over the run, the samples weighted by the time each stood for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Utilization {
    pub(crate) p50: Option<u32>,
    pub(crate) p95: Option<u32>,
    pub(crate) max: Option<u32>,
    /// `samples` (the driver's own, `nvmlDeviceGetSamples`) or `looks` (gpurun's polls, where
    /// the driver keeps no samples); null where nothing was read.
    pub(crate) source: Option<&'static str>,
}

/// One chosen GPU's receipt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuReceipt {
    pub(crate) gpu: u32,
    pub(crate) energy_joules: Option<f64>,
    pub(crate) power: Power,
    pub(crate) utilization: Utilization,
    pub(crate) throttled_seconds: Option<BTreeMap<&'static str, f64>>,
}

impl GpuReceipt {
    /// A device nothing was read on.
    pub(crate) fn unknown(gpu: u32) -> GpuReceipt {
        GpuReceipt {
            gpu,
            energy_joules: None,
            power: Power { mean: None, max: None, limit: None },
            utilization: Utilization { p50: None, p95: None, max: None, source: None },
            throttled_seconds: None,
        }
    }

    /// The report's line: "energy 620 J (0.17 Wh), 201 W mean / 230 W max of 400 W, util p50
    /// 40% p95 61%, throttled 2.1 s hw_slowdown". `None` where nothing was read.
    pub(crate) fn line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(joules) = self.energy_joules {
            parts.push(format!("energy {} ({:.2} Wh)", joules_text(joules), joules / 3600.0));
        }
        if let Some(mean) = self.power.mean {
            let mut power = format!("{mean:.0} W mean");
            if let Some(max) = self.power.max {
                power.push_str(&format!(" / {max:.0} W max"));
            }
            if let Some(limit) = self.power.limit {
                power.push_str(&format!(" of {limit:.0} W"));
            }
            parts.push(power);
        }
        if let (Some(p50), Some(p95)) = (self.utilization.p50, self.utilization.p95) {
            // Said where the driver kept no samples: then a few looks made these.
            let looks = if self.utilization.source == Some("looks") { " (looks)" } else { "" };
            parts.push(format!("util p50 {p50}% p95 {p95}%{looks}"));
        }
        match &self.throttled_seconds {
            Some(held) if held.is_empty() => parts.push("not throttled".to_owned()),
            Some(held) => {
                let reasons: Vec<String> =
                    held.iter().map(|(reason, s)| format!("{s:.1} s {reason}")).collect();
                parts.push(format!("throttled {}", reasons.join(", ")));
            }
            None => {}
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// `620 J`, `1.25 kJ`, `3.40 MJ`.
fn joules_text(joules: f64) -> String {
    match joules {
        j if j < 1_000.0 => format!("{j:.0} J"),
        j if j < 1_000_000.0 => format!("{:.2} kJ", j / 1_000.0),
        j => format!("{:.2} MJ", j / 1_000_000.0),
    }
}

/// A process that was not the command's and appeared on one of its GPUs during the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intruder {
    /// `None`: memory held by processes outside gpurun's PID namespace, which NVML lists
    /// nowhere here.
    pub(crate) pid: Option<u32>,
    pub(crate) user: Option<String>,
    pub(crate) gpu: u32,
    /// The most it was seen using.
    pub(crate) memory_bytes: Option<u64>,
    pub(crate) first_seen: Duration,
}

/// Intruders listed per run: past these, they are counted.
const INTRUDERS_KEPT: usize = 32;

/// The receipt as the run goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Receipt {
    tallies: Vec<Tally>,
    pub(crate) intruders: Vec<Intruder>,
    /// Intruders seen past `INTRUDERS_KEPT`.
    pub(crate) intruders_not_kept: u64,
    /// Memory held outside gpurun's PID namespace (in a container): intruders no list shows.
    outside: OutsideWatch,
}

impl Receipt {
    /// For these whole GPUs (a MIG device has no power or energy of its own).
    pub(crate) fn new(gpus: &[u32]) -> Receipt {
        Receipt {
            tallies: gpus.iter().map(|gpu| Tally::new(*gpu)).collect(),
            intruders: Vec::new(),
            intruders_not_kept: 0,
            outside: OutsideWatch::default(),
        }
    }

    /// Watches for memory held outside gpurun's PID namespace (`active`: gpurun runs in one
    /// of its own), from the readings' used memory.
    pub(crate) fn watching_outside(self, active: bool) -> Receipt {
        Receipt { outside: OutsideWatch::new(active), ..self }
    }

    /// Whether the readings must carry the used memory.
    pub(crate) fn watches_outside(&self) -> bool {
        self.outside.active
    }

    /// A poll's list of a chosen GPU, judged with the same poll's used memory: memory that
    /// appeared outside the namespace is kept as an intruder without a PID, and returned (to be
    /// said) with how much.
    pub(crate) fn listed(
        &mut self,
        gpu: u32,
        listed: &[crate::probe::watch::Listed],
        at: Duration,
    ) -> Option<u64> {
        let bytes = self.outside.listed(gpu, listed)?;
        self.intruder_outside(gpu, bytes, at).then_some(bytes)
    }

    /// The GPUs read.
    pub(crate) fn gpus(&self) -> Vec<u32> {
        self.tallies.iter().map(|tally| tally.gpu).collect()
    }

    /// Takes readings; `bounds`: they are the start's or the end's (counters and limit read).
    pub(crate) fn absorb(&mut self, readings: &[Reading], bounds: bool) {
        self.outside.readings(readings);
        for reading in readings {
            if let Some(tally) = self.tallies.iter_mut().find(|tally| tally.gpu == reading.gpu) {
                tally.absorb(reading, bounds);
            }
        }
    }

    /// A process not the command's on `gpu`: true the first time it is seen (to be warned about).
    pub(crate) fn intruder(
        &mut self,
        pid: u32,
        gpu: u32,
        memory_bytes: Option<u64>,
        at: Duration,
        user: impl FnOnce() -> Option<String>,
    ) -> bool {
        if let Some(known) =
            self.intruders.iter_mut().find(|known| known.pid == Some(pid) && known.gpu == gpu)
        {
            known.memory_bytes = known.memory_bytes.max(memory_bytes);
            return false;
        }
        if self.intruders.len() >= INTRUDERS_KEPT {
            self.intruders_not_kept += 1;
            return self.intruders_not_kept == 1;
        }
        self.intruders.push(Intruder { pid: Some(pid), user: user(), gpu, memory_bytes, first_seen: at });
        true
    }

    /// Memory that appeared on `gpu` held outside gpurun's PID namespace: one intruder without
    /// a PID, kept like the others. Whether it is new (to be said).
    fn intruder_outside(&mut self, gpu: u32, bytes: u64, at: Duration) -> bool {
        if self.intruders.len() >= INTRUDERS_KEPT {
            self.intruders_not_kept += 1;
            return false;
        }
        self.intruders.push(Intruder {
            pid: None,
            user: None,
            gpu,
            memory_bytes: Some(bytes),
            first_seen: at,
        });
        true
    }

    /// The figures of each GPU.
    pub(crate) fn per_gpu(&self) -> Vec<GpuReceipt> {
        self.tallies
            .iter()
            .map(|tally| GpuReceipt {
                gpu: tally.gpu,
                energy_joules: tally.energy_joules(),
                power: tally.power(),
                utilization: tally.utilization(),
                throttled_seconds: tally.throttled(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, power_w: u32, percent: u32, events: u64) -> Reading {
        Reading {
            gpu: 0,
            at,
            power_mw: Some(power_w * 1000),
            gpu_percent: Some(percent),
            clock_events: Some(events),
            energy_mj: None,
            limit_mw: None,
            throttle_ns: Vec::new(),
            utilization_samples: None,
            memory_used: None,
        }
    }

    fn bounds(mut reading: Reading, energy_j: u64, counters: Vec<Option<u64>>) -> Reading {
        reading.energy_mj = Some(energy_j * 1000);
        reading.limit_mw = Some(400_000);
        reading.throttle_ns = counters;
        reading
    }

    #[test]
    fn energy_is_the_counters_difference_and_a_counter_that_went_back_is_unknown() {
        let t0 = Instant::now();
        let mut receipt = Receipt::new(&[0]);
        receipt.absorb(&[bounds(reading(t0, 200, 50, 0), 10_000, vec![])], true);
        assert_eq!(receipt.per_gpu()[0].energy_joules, None, "no end yet");
        receipt.absorb(&[bounds(reading(t0 + Duration::from_secs(3), 200, 50, 0), 10_600, vec![])], true);
        assert_eq!(receipt.per_gpu()[0].energy_joules, Some(600.0));
        receipt.absorb(&[bounds(reading(t0 + Duration::from_secs(4), 200, 50, 0), 5, vec![])], true);
        assert_eq!(receipt.per_gpu()[0].energy_joules, None);
        assert_eq!(receipt.per_gpu()[0].power.limit, Some(400.0));
    }

    #[test]
    fn power_is_weighted_by_the_time_each_sample_stood_for() {
        let t0 = Instant::now();
        let mut receipt = Receipt::new(&[0]);
        receipt.absorb(&[reading(t0, 100, 0, 0)], false);
        receipt.absorb(&[reading(t0 + Duration::from_secs(1), 100, 0, 0)], false);
        receipt.absorb(&[reading(t0 + Duration::from_secs(4), 300, 0, 0)], false);
        let power = receipt.per_gpu()[0].power;
        // 100 W for 1 s (and 1 ms), 300 W for 3 s.
        assert!((power.mean.unwrap() - 250.0).abs() < 0.2, "{power:?}");
        assert_eq!(power.max, Some(300.0));
        assert_eq!(power.limit, None);
    }

    #[test]
    fn utilization_percentiles_come_from_the_histogram() {
        let t0 = Instant::now();
        let mut receipt = Receipt::new(&[0]);
        receipt.absorb(&[reading(t0, 1, 10, 0)], false);
        for second in 1..=100u64 {
            let percent = if second <= 60 {
                40
            } else if second <= 96 {
                61
            } else {
                90
            };
            receipt.absorb(&[reading(t0 + Duration::from_secs(second), 1, percent, 0)], false);
        }
        let utilization = receipt.per_gpu()[0].utilization;
        assert_eq!(
            utilization,
            Utilization { p50: Some(40), p95: Some(61), max: Some(90), source: Some("looks") }
        );
        assert_eq!(
            Receipt::new(&[0]).per_gpu()[0].utilization,
            Utilization { p50: None, p95: None, max: None, source: None }
        );
    }

    #[test]
    fn the_drivers_samples_beat_sparse_looks() {
        // What the real H200 showed: looks 5 s apart, the last one after the load ended, made
        // p50 0%; the driver's samples every 1/6 s say busy for 10 s of 14.
        let t0 = Instant::now();
        let mut receipt = Receipt::new(&[0]);
        let look = |at: u64, percent: u32, samples: Vec<(u64, u32)>| Reading {
            utilization_samples: Some(samples),
            ..reading(t0 + Duration::from_secs(at), 1, percent, 0)
        };
        let samples = |from_s: u64, to_s: u64, percent: u32| -> Vec<(u64, u32)> {
            (from_s * 6..to_s * 6).map(|sixth| (1_000_000 + sixth * 166_667, percent)).collect()
        };
        receipt.absorb(&[look(0, 0, Vec::new())], true);
        receipt.absorb(&[look(5, 100, [samples(0, 2, 0), samples(2, 5, 99)].concat())], false);
        receipt.absorb(&[look(10, 100, samples(5, 10, 100))], false);
        receipt.absorb(&[look(14, 0, [samples(10, 12, 98), samples(12, 14, 0)].concat())], true);
        let utilization = receipt.per_gpu()[0].utilization;
        assert_eq!(
            utilization,
            Utilization { p50: Some(99), p95: Some(100), max: Some(100), source: Some("samples") }
        );
        // A sample after a gap stands for at most a second, not the whole gap.
        let mut gap = Receipt::new(&[0]);
        gap.absorb(&[look(0, 0, samples(1, 3, 100))], false);
        gap.absorb(&[look(60, 0, vec![(61_000_000, 0)])], false);
        assert_eq!(gap.per_gpu()[0].utilization.p50, Some(100));
    }

    #[test]
    fn counters_beat_samples_and_idle_is_not_throttling() {
        let t0 = Instant::now();
        let t3 = t0 + Duration::from_secs(3);
        let counters = |sw_power_cap: u64| {
            let mut all = vec![None; THROTTLE_REASONS.len()];
            all[0] = Some(sw_power_cap);
            all
        };
        let mut receipt = Receipt::new(&[0]);
        // hw_slowdown (no counter) and sw_power_cap (counted) both active at every sample; idle too.
        receipt.absorb(&[bounds(reading(t0, 1, 0, 0x1 | 0x4 | 0x8), 0, counters(1_000_000_000))], true);
        receipt.absorb(&[reading(t0 + Duration::from_secs(1), 1, 0, 0x1 | 0x4 | 0x8)], false);
        receipt.absorb(&[bounds(reading(t3, 1, 0, 0x1 | 0x4 | 0x8), 0, counters(1_500_000_000))], true);
        let held = receipt.per_gpu()[0].throttled_seconds.clone().unwrap();
        assert_eq!(held.get("hw_slowdown"), Some(&3.0));
        assert_eq!(held.get("sw_power_cap"), Some(&0.5), "the counter, not the 3 s of samples");
        assert_eq!(held.len(), 2, "{held:?}");
        let mut unread = reading(t0, 1, 0, 0);
        unread.clock_events = None;
        let mut receipt = Receipt::new(&[0]);
        receipt.absorb(&[unread], false);
        assert_eq!(receipt.per_gpu()[0].throttled_seconds, None);
    }

    #[test]
    fn the_report_line_says_what_was_read() {
        let figures = GpuReceipt {
            gpu: 0,
            energy_joules: Some(620.0),
            power: Power { mean: Some(201.0), max: Some(230.0), limit: Some(400.0) },
            utilization: Utilization { p50: Some(40), p95: Some(61), max: Some(70), source: Some("samples") },
            throttled_seconds: Some(BTreeMap::from([("hw_slowdown", 2.1)])),
        };
        assert_eq!(
            figures.line().unwrap(),
            "energy 620 J (0.17 Wh), 201 W mean / 230 W max of 400 W, util p50 40% p95 61%, throttled 2.1 s hw_slowdown"
        );
        assert_eq!(GpuReceipt::unknown(0).line(), None);
        assert_eq!(joules_text(1_250.0), "1.25 kJ");
        assert_eq!(joules_text(3_400_000.0), "3.40 MJ");
    }

    #[test]
    fn intruders_are_said_once_and_kept_within_bounds() {
        let mut receipt = Receipt::new(&[0]);
        let at = Duration::from_secs(1);
        assert!(receipt.intruder(4242, 0, Some(1 << 30), at, || Some("nobody".into())));
        assert!(!receipt.intruder(4242, 0, Some(3 << 30), at * 2, || None));
        assert_eq!(receipt.intruders[0].memory_bytes, Some(3 << 30));
        assert_eq!(receipt.intruders[0].first_seen, at);
        let said: usize = (0..100).map(|pid| usize::from(receipt.intruder(pid, 0, None, at, || None))).sum();
        assert_eq!(said, INTRUDERS_KEPT - 1 + 1, "each kept one, and one line for the rest");
        assert_eq!(receipt.intruders.len(), INTRUDERS_KEPT);
        assert_eq!(receipt.intruders_not_kept, 100 - (INTRUDERS_KEPT as u64 - 1));
    }
}
