//! What went wrong, or nearly, once the command has ended (DESIGN 9): pure rules over what
//! verification saw. Each kind names its rule; none fires on a run that used what it asked for.
//!
//! - `near-oom`: the tree's peak on a GPU came within 5% of the memory free there at launch.
//! - `idle-gpu`: of several selected GPUs, one the tree never used while it used another.
//! - `cpu-fallback`: GPUs were selected, the command ran past `--verify-timeout`, and no process
//!   of it ever used one.
//! - `xid`: the driver raised an Xid error on a selected GPU during the run (what it usually
//!   means, and whether applications cause it).
//! - `over-reserved`: `--min-free` reserved ten times or more what the tree's peak on that GPU
//!   was. Not `--exclusive`: that asks for the card unshared, not for its memory.
//! - `idle`: a chosen GPU held at 0% utilization past `--idle-warn` or the house rule
//!   (`verify::idle`), with the minutes.

use serde::Serialize;

use crate::options::size::human;
use crate::probe::gpu::label;

/// Within this share of the available memory a job is near an out-of-memory error.
const NEAR_OOM_PERCENT: u64 = 95;
/// A reservation this many times the peak kept others off for nothing.
const OVER_RESERVED_FACTOR: u64 = 10;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Diagnosis {
    /// `near-oom`, `idle-gpu`, `cpu-fallback`, `over-reserved`, `xid`, `time-limit` and the like.
    pub(crate) kind: &'static str,
    /// The NVML index it is about (null for the run as a whole).
    pub(crate) gpu: Option<u32>,
    pub(crate) detail: String,
    /// The Xid, for `xid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) code: Option<u64>,
    /// For `idle`: the longest the GPU was held at 0% utilization, in minutes (one decimal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) minutes: Option<f64>,
    /// For `memory-held`: the process NVML still lists, and its memory there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bytes: Option<u64>,
}

/// One selected GPU, as the run left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Card {
    pub(crate) index: u32,
    /// Free memory at launch, before the command.
    pub(crate) free_at_launch: Option<u64>,
    /// The tree's largest total on it.
    pub(crate) peak: u64,
    /// Whether a process of the tree was seen on it.
    pub(crate) used: bool,
    /// What the launch reserved of it: the whole card for --exclusive, else --min-free's bytes.
    pub(crate) reserved: Option<(u64, &'static str)>,
}

/// The figure to ask for next time: the peak plus a tenth, in whole GiB (at least 1).
fn next_time(peak: u64) -> u64 {
    (peak + peak / 10).div_ceil(1 << 30).max(1)
}

/// What to do about a near-oom: a card with more room, as `--min-free` asks for it, where the
/// machine has one (`most_room`: the largest total less the driver's reservation, what
/// `--min-free` can ever find free); else a smaller batch, since no card here is bigger.
fn more_room(available: u64, most_room: Option<u64>) -> String {
    let gib = next_time(available);
    match most_room {
        Some(most) if gib << 30 > most => format!(
            "no card here has more room (the most any can have free is {}): use a smaller batch, or a \
             machine with bigger cards",
            human(most)
        ),
        _ => format!("ask for a card with more room (--min-free {gib}G) or use a smaller batch"),
    }
}

/// `cards`: the selected GPUs. `failed`: the command did not exit 0. `ran_past_timeout`: it
/// was still running when --verify-timeout passed. `most_room`: see `more_room`.
pub(crate) fn diagnose(
    cards: &[Card],
    failed: bool,
    ran_past_timeout: bool,
    most_room: Option<u64>,
) -> Vec<Diagnosis> {
    let mut found = Vec::new();
    let any_used = cards.iter().any(|card| card.used);
    for card in cards.iter().filter(|card| card.used) {
        if let Some(available) = card.free_at_launch.filter(|bytes| *bytes > 0) {
            if card.peak.saturating_mul(100) >= available.saturating_mul(NEAR_OOM_PERCENT) {
                found.push(Diagnosis {
                    kind: "near-oom",
                    gpu: Some(card.index),
                    detail: format!(
                        "peak {} of the {} free at launch on {}{}: {}",
                        human(card.peak),
                        human(available),
                        label(card.index),
                        if failed { ", and the command failed" } else { "" },
                        more_room(available, most_room)
                    ),
                    code: None,
                    minutes: None,
                    pid: None,
                    bytes: None,
                });
            }
        }
        if let Some((reserved, how)) = card.reserved {
            if card.peak > 0 && card.peak.saturating_mul(OVER_RESERVED_FACTOR) <= reserved {
                found.push(Diagnosis {
                    kind: "over-reserved",
                    gpu: Some(card.index),
                    detail: format!(
                        "{how} kept {} of {} from others, and the command's peak there was {}: \
                         next time ask for --min-free {}G",
                        human(reserved),
                        label(card.index),
                        human(card.peak),
                        next_time(card.peak)
                    ),
                    code: None,
                    minutes: None,
                    pid: None,
                    bytes: None,
                });
            }
        }
    }
    if any_used && cards.len() > 1 {
        for card in cards.iter().filter(|card| !card.used) {
            found.push(Diagnosis {
                kind: "idle-gpu",
                gpu: Some(card.index),
                detail: format!(
                    "{} was selected but no process of the command used it: the program probably uses \
                     only cuda:0 (DataParallel or DistributedDataParallel not set up); ask for fewer GPUs",
                    label(card.index)
                ),
                code: None,
                minutes: None,
                pid: None,
                bytes: None,
            });
        }
    }
    if !cards.is_empty() && !any_used && ran_past_timeout {
        found.push(Diagnosis {
            kind: "cpu-fallback",
            gpu: None,
            detail: "the command ran past --verify-timeout and never used a GPU: its framework probably fell back \
                     to the CPU (does it see CUDA? python -c 'import torch; print(torch.cuda.is_available())')"
                .to_owned(),
            code: None,
            minutes: None,
                    pid: None,
                    bytes: None,
        });
    }
    found
}

/// `xid`: an Xid error NVML raised on a chosen GPU during the run, `seconds` after the start
/// (`at`: the wall-clock time, `12:34:56`).
pub(crate) fn xid(gpu: u32, code: u64, seconds: f64, at: &str) -> Diagnosis {
    Diagnosis {
        kind: "xid",
        gpu: Some(gpu),
        detail: format!("{} ({at}, {seconds:.1} s into the run)", crate::verify::xid::describe(code, gpu)),
        code: Some(code),
        minutes: None,
        pid: None,
        bytes: None,
    }
}

/// A chosen GPU that fell off the bus during the run: whatever ran there is gone. `seen_as`:
/// how it was seen, an Xid 79 (`Some(79)`) or NVML answering GPU_IS_LOST (`None`).
pub(crate) fn gpu_lost(gpu: u32, seconds: f64, at: &str, xid: Option<u64>) -> Diagnosis {
    let seen_as = match xid {
        Some(code) => format!("Xid {code}"),
        None => "NVML answers GPU is lost".to_owned(),
    };
    Diagnosis {
        kind: "gpu-lost",
        gpu: Some(gpu),
        detail: format!(
            "GPU {gpu} fell off the bus {seconds:.1} s into the run ({at}, {seen_as}): its work is lost; drain the \
             node, check dmesg, and reboot (a reset rarely brings such a GPU back)"
        ),
        code: xid,
        minutes: None,
                    pid: None,
                    bytes: None,
    }
}

/// The command ran as an MPS client beside other clients of the same server: one client's
/// fatal GPU fault ends every client of that server (NVIDIA's MPS documentation).
pub(crate) fn mps_shared(gpu: u32, others: &[(u32, Option<String>)]) -> Diagnosis {
    let mut users: Vec<&str> = others.iter().map(|(_, user)| user.as_deref().unwrap_or("unknown")).collect();
    users.sort_unstable();
    users.dedup();
    let (count, s) = (others.len(), if others.len() == 1 { "" } else { "s" });
    let (user_s, names) = (if users.len() == 1 { "" } else { "s" }, and_list(&users));
    Diagnosis {
        kind: "mps-shared",
        gpu: Some(crate::probe::gpu::mig_parts(gpu).map_or(gpu, |(parent, _)| parent)),
        detail: format!(
            "{}: shares an MPS server with {count} other client{s} (user{user_s} {names}): a fatal fault in any of them ends all",
            crate::probe::gpu::label(gpu)
        ),
        code: None,
        minutes: None,
                    pid: None,
                    bytes: None,
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The Xid events of a flood that were counted, not kept (repeats of the codes kept).
pub(crate) fn xids_not_kept(count: u64) -> Diagnosis {
    Diagnosis {
        kind: "xid",
        gpu: None,
        detail: format!("and {count} more Xid events of the codes above (counted, not kept)"),
        code: None,
        minutes: None,
        pid: None,
        bytes: None,
    }
}

/// `--time-limit` ended the run (`what`: the limit and the signal sent).
pub(crate) fn time_limit(what: &str) -> Diagnosis {
    Diagnosis {
        kind: "time-limit",
        gpu: None,
        detail: what.to_owned(),
        code: None,
        minutes: None,
        pid: None,
        bytes: None,
    }
}

/// `idle`: a chosen GPU held at 0% utilization for `longest` at a stretch, past `--idle-warn`
/// or the house rule (`ended`: what ending the command for it did).
pub(crate) fn idle(gpu: u32, longest: std::time::Duration, ended: Option<&str>) -> Diagnosis {
    let minutes = (longest.as_secs_f64() / 6.0).round() / 10.0;
    let detail = match ended {
        Some(what) => what.to_owned(),
        None => format!(
            "{} was held at 0% utilization for {minutes} min at a stretch: a forgotten notebook or shell keeps \
             others off it",
            label(gpu)
        ),
    };
    Diagnosis {
        kind: "idle",
        gpu: Some(gpu),
        detail,
        code: None,
        minutes: Some(minutes),
        pid: None,
        bytes: None,
    }
}

/// `12:34:56 UTC`: when something was seen during the run, as dmesg and the driver's logs can
/// be matched to it.
pub(crate) fn utc_clock(at: std::time::SystemTime) -> String {
    let seconds = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn card(index: u32, free_gib: u64, peak_gib: u64, used: bool) -> Card {
        Card { index, free_at_launch: Some(free_gib * GIB), peak: peak_gib * GIB, used, reserved: None }
    }

    fn kinds(found: &[Diagnosis]) -> Vec<(&str, Option<u32>)> {
        found.iter().map(|d| (d.kind, d.gpu)).collect()
    }

    #[test]
    fn a_normal_run_has_no_diagnosis() {
        let mut two = [card(3, 79, 4, true), card(5, 79, 4, true)];
        two[0].reserved = Some((8 * GIB, "--min-free 8G"));
        assert_eq!(diagnose(&two, false, true, None), vec![]);
        // A quick command that never touched a GPU, ended before the timeout: nothing to say.
        assert_eq!(diagnose(&[card(3, 79, 0, false)], false, false, None), vec![]);
    }

    #[test]
    fn each_kind_on_its_rule() {
        let near = diagnose(&[card(3, 40, 39, true)], true, false, None);
        assert_eq!(kinds(&near), [("near-oom", Some(3))]);
        assert!(near[0]
            .detail
            .contains("peak 39 GiB of the 40 GiB free at launch on GPU 3, and the command failed"));
        assert_eq!(diagnose(&[card(3, 40, 37, true)], false, false, None), vec![], "under 95%");
        // On a machine whose cards can have at most 79.5 GiB free, --min-free 44G is advice
        // that holds, and 88G is not (it would be refused with 125).
        let within = diagnose(&[card(3, 40, 39, true)], true, false, Some(159 << 29));
        assert!(within[0]
            .detail
            .ends_with("ask for a card with more room (--min-free 44G) or use a smaller batch"));
        let beyond = diagnose(&[card(3, 80, 79, true)], true, false, Some(159 << 29));
        assert!(
            beyond[0].detail.contains("no card here has more room (the most any can have free is 79.5 GiB)"),
            "{}",
            beyond[0].detail
        );

        let idle = diagnose(&[card(3, 79, 4, true), card(5, 79, 0, false)], false, true, None);
        assert_eq!(kinds(&idle), [("idle-gpu", Some(5))]);

        assert_eq!(kinds(&diagnose(&[card(3, 79, 0, false)], false, true, None)), [("cpu-fallback", None)]);

        let mut asked = card(3, 79, 2, true);
        asked.reserved = Some((40 * GIB, "--min-free"));
        let over = diagnose(&[asked.clone()], false, true, None);
        assert_eq!(kinds(&over), [("over-reserved", Some(3))]);
        assert!(over[0].detail.ends_with("next time ask for --min-free 3G"), "{}", over[0].detail);
        asked.peak = 5 * GIB;
        assert_eq!(diagnose(&[asked], false, true, None), vec![], "more than a tenth used");
    }
}
