//! The end of a run, built from what verification saw (`monitor::Seen`) and how the command
//! ended (`Run`): the diagnosis (near-oom and the like from the peaks, the Xid errors and lost
//! GPUs from the health watch, the MPS neighbours) and the report with its receipt. Launch
//! hands both over and writes what this returns; the rules are here, with their tests.

use std::ffi::OsString;
use std::time::{Duration, SystemTime};

use crate::exit_code::{End, Exit};
use crate::options::size::Threshold;
use crate::probe::gpu::Machine;
use crate::select::selection::Selection;
use crate::verify::diagnosis::{self, Card, Diagnosis};
use crate::verify::job::{JobIdentity, JobRecord};
use crate::verify::monitor::{HealthWatch, Seen};
use crate::verify::report::{Outcome, Placement, Report};

/// What the launch knew of the run before the command started: one half of the run's end.
pub(crate) struct Launched<'a> {
    /// As it was run (a container run's with gpurun's options in it).
    pub(crate) command: &'a [OsString],
    pub(crate) selection: &'a Selection,
    /// The machine at launch.
    pub(crate) machine: &'a Machine,
    /// The `--min-free` applied.
    pub(crate) min_free: Option<Threshold>,
    pub(crate) verify_timeout: Duration,
    pub(crate) job: &'a JobIdentity,
}

/// How the command ended (supervision's answer): the other half.
pub(crate) struct Ended {
    pub(crate) end: End,
    pub(crate) exit: Exit,
    pub(crate) wall: Duration,
    pub(crate) started_at: SystemTime,
    /// `--time-limit` or a house rule ended the command: what was done.
    pub(crate) limited: Option<Limited>,
}

/// The run's end from its two halves and what verification saw: the diagnosis and the report.
/// Only verification assembles it (tests/layout.rs).
pub(crate) fn report_of(launched: &Launched, ended: Ended, seen: Seen, placement: Placement) -> Report {
    report(&Run { launched, ended }, seen, placement)
}

/// The run's two halves, as the diagnosis and the report read them.
struct Run<'a, 'b> {
    launched: &'b Launched<'a>,
    ended: Ended,
}

/// A limit that ended the command (gpurun exits 124), and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Limited {
    /// `--time-limit`, or the house rule max-time-limit.
    Time(String),
    /// The house rule `idle-action = "end"`: the GPU found idle.
    Idle { gpu: u32, what: String },
}

/// The run's report: the verdict, the diagnosis (each finding logged as it is made), the
/// receipt and where the command ran.
fn report(run: &Run, seen: Seen, placement: Placement) -> Report {
    let mut diagnosis = diagnose(run, &seen);
    // Whatever was watched: the run's end is the limit's.
    if let Some(Limited::Time(what)) = &run.ended.limited {
        diagnosis.push(diagnosis::time_limit(what));
    }
    let uuid_of = |index: u32| run.launched.machine.device(index).and_then(|gpu| gpu.uuid.clone());
    let outcome = Outcome::new(run.ended.wall.as_secs_f64(), run.ended.end, run.ended.exit);
    let mut report = Report::new(
        run.launched.command,
        run.launched.selection,
        seen.verification,
        &seen.peaks,
        &uuid_of,
        outcome,
    );
    report.diagnosis = diagnosis;
    report.add_receipt(seen.receipt.as_ref(), &uuid_of);
    report.placement = placement;
    report.job = Some(JobRecord {
        identity: run.launched.job.clone(),
        start: run.ended.started_at,
        end: SystemTime::now(),
    });
    report
}

/// The chosen devices as the diagnosis sees them: free at launch, the peak, whether the
/// command used them, what `--min-free` kept from others.
fn cards(run: &Run, seen: &Seen) -> Vec<Card> {
    run.launched
        .selection
        .devices
        .iter()
        .map(|device| {
            let gpu = run.launched.machine.device(device.index);
            let total = gpu.and_then(|gpu| gpu.memory).map(|m| m.total_bytes);
            let reserved = match (run.launched.min_free, total) {
                (Some(threshold), Some(total)) => Some((threshold.bytes_on(total), "--min-free")),
                _ => None,
            };
            Card {
                index: device.index,
                free_at_launch: gpu.and_then(|gpu| gpu.memory).map(|m| m.free_bytes),
                peak: seen.peaks.get(&device.index).copied().unwrap_or(0),
                // A GPU NVML cannot list may be in use: never said idle.
                used: seen.used.contains(&device.index) || seen.unlistable.contains(&device.index),
                reserved,
            }
        })
        .collect()
}

/// What the run's end says of it: near-oom, idle GPUs and the like (logged now), the Xid
/// errors seen (logged when they were seen; a command that died right after one most likely
/// died of it), the MPS neighbours and the GPUs lost.
fn diagnose(run: &Run, seen: &Seen) -> Vec<Diagnosis> {
    if !seen.watched {
        return Vec::new();
    }
    let failed = run.ended.end != End::Exited(0);
    let most_room = run
        .launched
        .machine
        .devices()
        .filter_map(|gpu| gpu.memory)
        .map(|memory| memory.total_bytes.saturating_sub(memory.reserved_bytes))
        .max();
    let ran_past = run.ended.wall >= run.launched.verify_timeout;
    let mut found = diagnosis::diagnose(&cards(run, seen), failed, ran_past, most_room);
    let health = &seen.health;
    if let (Some((last, at)), true) = (health.xids.last(), failed) {
        tracing::warn!(
            "the command {} {:.1} s after {}",
            match run.ended.end {
                End::Exited(code) => format!("exited with status {code}"),
                End::Signaled(signal) => format!("was killed by {}", crate::options::signal::name(signal)),
            },
            run.ended.wall.as_secs_f64() - into_run(run, *at),
            crate::verify::xid::describe(last.code, last.gpu)
        );
    }
    for finding in &found {
        tracing::warn!("{}: {}", finding.kind, finding.detail);
    }
    found.extend(
        health.xids.iter().map(|(xid, at)| {
            diagnosis::xid(xid.gpu, xid.code, into_run(run, *at), &diagnosis::utc_clock(*at))
        }),
    );
    found.extend((health.xids_dropped > 0).then(|| diagnosis::xids_not_kept(health.xids_dropped)));
    found.extend(seen.mps_shared.iter().map(|(gpu, others)| diagnosis::mps_shared(*gpu, others)));
    found.extend(seen.idle.iter().map(|(gpu, longest)| {
        let ended = match &run.ended.limited {
            Some(Limited::Idle { gpu: ended, what }) if ended == gpu => Some(what.as_str()),
            _ => None,
        };
        diagnosis::idle(*gpu, *longest, ended)
    }));
    for held in &seen.memory_held {
        tracing::warn!("{}: {}", held.kind, held.detail);
        found.push(held.clone());
    }
    for gone in lost_gpus(run, health) {
        tracing::warn!("{}: {}", gone.kind, gone.detail);
        found.push(gone);
    }
    found
}

/// Seconds from the command's start to `at`.
fn into_run(run: &Run, at: SystemTime) -> f64 {
    at.duration_since(run.ended.started_at).unwrap_or_default().as_secs_f64()
}

/// One gpu-lost per GPU: at its first Xid 79 (the GPU is gone, which says more than its code),
/// else where its process list answered GPU_IS_LOST (events not supported, or not delivered).
/// A MIG device lost is its GPU lost.
fn lost_gpus(run: &Run, health: &HealthWatch) -> Vec<Diagnosis> {
    let mut lost: Vec<u32> = Vec::new();
    let mut found = Vec::new();
    for (xid, at) in health.xids.iter().filter(|(xid, _)| xid.code == 79) {
        if !lost.contains(&xid.gpu) {
            lost.push(xid.gpu);
            found.push(diagnosis::gpu_lost(
                xid.gpu,
                into_run(run, *at),
                &diagnosis::utc_clock(*at),
                Some(79),
            ));
        }
    }
    for (key, at) in &health.lost {
        let gpu = crate::probe::gpu::mig_parts(*key).map_or(*key, |(parent, _)| parent);
        if !lost.contains(&gpu) {
            lost.push(gpu);
            found.push(diagnosis::gpu_lost(gpu, into_run(run, *at), &diagnosis::utc_clock(*at), None));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::options::count::Count;
    use crate::probe::gpu::{mig_key, test_gpu, Memory};
    use crate::probe::watch::Xid;
    use crate::verify::report::Verification;
    use crate::verify::verdict::Verdict;

    fn machine() -> Machine {
        let mut busy = test_gpu(1);
        busy.memory = Some(Memory {
            total_bytes: 80 << 30,
            reserved_bytes: 0,
            used_bytes: 70 << 30,
            free_bytes: 10 << 30,
        });
        Machine {
            vendor: Default::default(),
            also_amd_gpus: None,
            driver_version: None,
            cuda_driver_version: None,
            gpus: vec![test_gpu(0), busy],
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        }
    }

    fn seen(peaks: &[(u32, u64)], used: &[u32]) -> Seen {
        Seen {
            verification: Verification { verdict: Some(Verdict::Verified), detail: "seen".to_owned() },
            watched: true,
            peaks: peaks.iter().copied().collect::<BTreeMap<_, _>>(),
            used: used.to_vec(),
            unlistable: Vec::new(),
            health: HealthWatch::default(),
            mps_shared: Vec::new(),
            receipt: None,
            idle: Vec::new(),
            memory_held: Vec::new(),
        }
    }

    /// Ends `seen` on `chosen` of `machine()`, as the command ended (`end`).
    fn ended(chosen: &[u32], end: End, min_free: Option<Threshold>, seen: Seen) -> Report {
        let machine = machine();
        let selection = Selection::new(&machine, chosen, Count::exactly(chosen.len() as u32));
        let started_at = SystemTime::now();
        let job = JobIdentity { id: "7".into(), host: "node".into(), user: "alice".into() };
        let command = [OsString::from("train")];
        let launched = Launched {
            command: &command,
            selection: &selection,
            machine: &machine,
            min_free,
            verify_timeout: Duration::from_secs(30),
            job: &job,
        };
        let ended = Ended {
            end,
            exit: Exit::of(end, false, false),
            wall: Duration::from_secs(3),
            started_at,
            limited: None,
        };
        report_of(&launched, ended, seen, Placement::default())
    }

    fn kinds(report: &Report) -> Vec<(&'static str, Option<u32>)> {
        report.diagnosis.iter().map(|found| (found.kind, found.gpu)).collect()
    }

    #[test]
    fn a_run_nothing_watched_has_no_diagnosis_however_it_ended() {
        let report = ended(&[1], End::Exited(1), None, Seen::unwatched("--verify off"));
        assert!(report.diagnosis.is_empty());
        assert_eq!(report.verification.verdict, None);
        assert_eq!(report.verification.detail, "--verify off");
    }

    #[test]
    fn the_peak_is_measured_against_what_was_free_at_launch_and_what_was_kept() {
        // 9.5 of the 10 GiB free on GPU 1 is near an OOM; 1 GiB on an 80 GiB card held with
        // --min-free 50% is over-reserved; GPU 0 chosen and unused beside GPU 1 is idle.
        let report = ended(&[0, 1], End::Exited(0), None, seen(&[(1, 19 << 29)], &[1]));
        assert_eq!(kinds(&report), [("near-oom", Some(1)), ("idle-gpu", Some(0))]);
        let report =
            ended(&[0], End::Exited(0), Some(Threshold::PercentOfTotal(50.0)), seen(&[(0, 1 << 30)], &[0]));
        assert_eq!(kinds(&report), [("over-reserved", Some(0))]);
        let report = ended(&[0], End::Exited(0), None, seen(&[(0, 1 << 30)], &[0]));
        assert!(report.diagnosis.is_empty(), "{:?}", kinds(&report));
    }

    #[test]
    fn each_lost_gpu_is_said_once_by_its_xid_79_or_else_its_process_list() {
        let mut found = seen(&[], &[]);
        let at = SystemTime::now();
        found.health.xids = vec![
            (Xid { gpu: 1, code: 13 }, at),
            (Xid { gpu: 1, code: 79 }, at),
            (Xid { gpu: 1, code: 79 }, at),
        ];
        // GPU 1's list said lost too; GPU 0's MIG device 0/2 lost without an Xid is GPU 0 lost.
        found.health.lost = vec![(1, at), (mig_key(0, 2), at), (0, at)];
        found.health.xids_dropped = 5;
        let report = ended(&[0, 1], End::Signaled(libc::SIGKILL), None, found);
        let lost: Vec<_> = report.diagnosis.iter().filter(|d| d.kind == "gpu-lost").map(|d| d.gpu).collect();
        assert_eq!(lost, [Some(1), Some(0)]);
        let xids: Vec<_> = report.diagnosis.iter().filter(|d| d.kind == "xid").map(|d| d.code).collect();
        // Each kept one, then the count of those not kept.
        assert_eq!(xids, [Some(13), Some(79), Some(79), None]);
        assert!(report.diagnosis.iter().any(|d| d.detail.starts_with("and 5 more Xid events")));
    }

    #[test]
    fn the_report_is_one_flat_object_in_the_documented_order() {
        let mut report = ended(&[0], End::Exited(0), None, seen(&[(0, 1 << 30)], &[0]));
        report.placement.cpus = Some("0-3".to_owned());
        let text = report.json();
        let keys = [
            "\"command\"",
            "\"requested\"",
            "\"count\"",
            "\"selected\"",
            "\"verification\"",
            "\"peak_memory_bytes\"",
            "\"wall_seconds\"",
            "\"exit\"",
            "\"gpurun_exit_status\"",
            "\"diagnosis\"",
            "\"cpus\"",
            "\"energy_joules\"",
            "\"power_watts\"",
            "\"utilization_percent\"",
            "\"throttled_seconds\"",
            "\"intruders\"",
        ];
        let at: Vec<usize> =
            keys.iter().map(|key| text.find(key).unwrap_or_else(|| panic!("{key}: {text}"))).collect();
        assert!(at.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["peak_memory_bytes"]["GPU-00000000-1111-4222-8333-444455556666"], 1u64 << 30);
        assert_eq!(value["exit"]["code"], 0);
        for absent in ["min_free", "container", "rank", "intruders_not_listed", "peak_by_index", "lines"] {
            assert!(value.get(absent).is_none(), "{absent}: {text}");
        }
    }
}
