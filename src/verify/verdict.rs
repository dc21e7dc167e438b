//! Pure verification (DESIGN 8): what NVML showed of the command's process tree, against the
//! GPUs that were selected, gives one verdict. No I/O: `monitor` feeds it.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use crate::probe::gpu::{label, labels};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Verdict {
    /// Every tree process seen on a GPU is on a selected GPU, and every selected GPU is used.
    Verified,
    /// A tree process is on a GPU that was not selected.
    WrongGpu,
    /// More than one GPU selected, fewer used.
    Partial,
    /// No tree process appeared on a GPU.
    NotObserved,
    /// NVML cannot list processes, or its PIDs belong to another PID namespace.
    Unverifiable,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Verified => "verified",
            Verdict::WrongGpu => "wrong-gpu",
            Verdict::Partial => "partial",
            Verdict::NotObserved => "not-observed",
            Verdict::Unverifiable => "unverifiable",
        })
    }
}

/// A process of the command's tree seen by NVML on a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sighting {
    pub(crate) pid: u32,
    pub(crate) command: String,
    pub(crate) gpu: u32,
    /// Seen in the GPU's MPS list: a client of its MPS server.
    pub(crate) mps_client: bool,
}

/// One poll of NVML, as seen from the command's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Poll {
    /// Tree processes on GPUs.
    pub(crate) sightings: Vec<Sighting>,
    /// GPUs (selected ones) whose processes NVML could not list, with why.
    pub(crate) unlistable: Vec<(u32, String)>,
    /// PIDs that appeared on a selected GPU after launch and do not exist here: NVML reports
    /// them from another PID namespace.
    pub(crate) foreign_namespace_pids: Vec<(u32, u32)>,
    /// Selected GPUs whose process list answered GPU_IS_LOST.
    pub(crate) lost: Vec<u32>,
}

/// The verdict so far, updated by each poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tracker {
    selected: Vec<u32>,
    used: BTreeSet<u32>,
    seen: Vec<Sighting>,
    wrong: Option<(Sighting, String)>,
    /// Selected GPUs whose processes NVML could not list, each with the first reason.
    unlistable: Vec<(u32, String)>,
    foreign_namespace: Option<(u32, u32)>,
    lost: Vec<u32>,
}

impl Tracker {
    pub(crate) fn new(selected: &[u32]) -> Tracker {
        Tracker {
            selected: selected.to_vec(),
            used: BTreeSet::new(),
            seen: Vec::new(),
            wrong: None,
            unlistable: Vec::new(),
            foreign_namespace: None,
            lost: Vec::new(),
        }
    }

    /// Takes one poll. `cause_of` explains a process on the wrong GPU (it reads /proc).
    pub(crate) fn observe(&mut self, poll: Poll, cause_of: impl Fn(&Sighting) -> String) {
        for sighting in poll.sightings {
            if self.selected.contains(&sighting.gpu) {
                self.used.insert(sighting.gpu);
            } else if self.wrong.is_none() {
                let cause = cause_of(&sighting);
                self.wrong = Some((sighting.clone(), cause));
            }
            if !self.seen.iter().any(|s| s.pid == sighting.pid && s.gpu == sighting.gpu) {
                self.seen.push(sighting);
            }
        }
        for (gpu, why) in poll.unlistable {
            if !self.unlistable.iter().any(|(known, _)| *known == gpu) {
                self.unlistable.push((gpu, why));
            }
        }
        if self.foreign_namespace.is_none() {
            self.foreign_namespace = poll.foreign_namespace_pids.into_iter().next();
        }
        for gpu in poll.lost {
            if !self.lost.contains(&gpu) {
                self.lost.push(gpu);
            }
        }
    }

    /// The selected GPUs a process of the tree was seen on.
    /// Whether a process with this PID was seen as the command's on some GPU.
    pub(crate) fn saw(&self, pid: u32) -> bool {
        self.seen.iter().any(|sighting| sighting.pid == pid)
    }

    pub(crate) fn used(&self) -> &BTreeSet<u32> {
        &self.used
    }

    /// The selected GPUs whose processes NVML could not list: whether the command used them
    /// is unknown, never "unused".
    pub(crate) fn unlistable(&self) -> Vec<u32> {
        self.unlistable.iter().map(|(gpu, _)| *gpu).collect()
    }

    /// A verdict that no later poll can improve on: wrong-gpu, a selected GPU lost, or verified
    /// with every selected GPU in use. `None` while it may still change.
    pub(crate) fn settled(&self) -> Option<(Verdict, String)> {
        if self.wrong.is_some() || !self.lost.is_empty() {
            return Some(self.verdict());
        }
        let all_used = !self.selected.is_empty() && self.selected.iter().all(|gpu| self.used.contains(gpu));
        all_used.then(|| self.verdict())
    }

    /// The verdict now, with its detail; at the end of the run, the final one.
    pub(crate) fn verdict(&self) -> (Verdict, String) {
        if let Some((sighting, cause)) = &self.wrong {
            return (
                Verdict::WrongGpu,
                format!(
                    "PID {} ({}) is on {}, which was not selected (selected: {}); likely cause: {cause}",
                    sighting.pid,
                    sighting.command,
                    label(sighting.gpu),
                    labels(&self.selected)
                ),
            );
        }
        // Once a chosen GPU is lost, what ran there can no longer be checked, whatever was
        // seen before: the verdict says so, and what was seen.
        if !self.lost.is_empty() {
            let before = match self.seen.is_empty() {
                true => "no process of the command had been seen on a GPU".to_owned(),
                false => format!("seen before: {}", sightings_text(&self.seen, &self.selected)),
            };
            return (
                Verdict::Unverifiable,
                format!(
                    "{} fell off the bus during the run (NVML answers GPU is lost to its process list): \
                     what ran there cannot be checked any more; {before}",
                    labels(&self.lost)
                ),
            );
        }
        if !self.used.is_empty() {
            let on_selected = sightings_text(&self.seen, &self.selected);
            let unused: Vec<u32> = self.selected.iter().copied().filter(|g| !self.used.contains(g)).collect();
            if unused.is_empty() {
                return (Verdict::Verified, on_selected);
            }
            // A GPU whose list NVML refuses may be in use: unverifiable is the truth, not
            // "partial" with advice to ask for fewer GPUs.
            let unlistable: Vec<&(u32, String)> =
                self.unlistable.iter().filter(|(gpu, _)| unused.contains(gpu)).collect();
            if unlistable.len() == unused.len() {
                let (_, why) = unlistable[0];
                return (
                    Verdict::Unverifiable,
                    format!(
                        "{on_selected}; NVML cannot list the processes on {}: {why}, so whether the command \
                         uses {} cannot be checked",
                        labels(&unused),
                        if unused.len() == 1 { "it" } else { "them" }
                    ),
                );
            }
            return (
                Verdict::Partial,
                format!(
                    "{} GPUs selected, {} used: {}; unused: {}",
                    self.selected.len(),
                    self.used.len(),
                    on_selected,
                    labels(&unused)
                ),
            );
        }
        if let Some((gpu, why)) = self.unlistable.first() {
            return (
                Verdict::Unverifiable,
                format!("NVML cannot list the processes on {}: {why}", label(*gpu)),
            );
        }
        if let Some((pid, gpu)) = &self.foreign_namespace {
            return (
                Verdict::Unverifiable,
                format!(
                    "NVML shows PID {pid} on {}, which does not exist here: its PIDs belong to another \
                     PID namespace (gpurun runs in a container?), so the command's processes cannot be matched",
                    label(*gpu)
                ),
            );
        }
        (Verdict::NotObserved, "no process of the command appeared on a GPU".to_owned())
    }
}

/// `PID 10 (job) on GPUs 3, 5, PID 11 (job) on GPU 7`: each process once, in the order seen,
/// its GPUs in the selection's order (the `running ... on` line's: CUDA's device 0 first),
/// then any other by index.
fn sightings_text(seen: &[Sighting], selected: &[u32]) -> String {
    let mut processes: Vec<(u32, &str, Vec<u32>, bool)> = Vec::new();
    for sighting in seen {
        match processes.iter_mut().find(|(pid, ..)| *pid == sighting.pid) {
            Some((_, _, gpus, mps)) => {
                gpus.push(sighting.gpu);
                *mps |= sighting.mps_client;
            }
            None => {
                processes.push((sighting.pid, &sighting.command, vec![sighting.gpu], sighting.mps_client))
            }
        }
    }
    let parts: Vec<String> = processes
        .into_iter()
        .map(|(pid, command, mut gpus, mps)| {
            gpus.sort_by_key(|gpu| (selected.iter().position(|s| s == gpu).unwrap_or(usize::MAX), *gpu));
            let client = if mps { " as an MPS client" } else { "" };
            format!("PID {pid} ({command}) on {}{client}", labels(&gpus))
        })
        .collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pid: u32, gpu: u32) -> Sighting {
        Sighting { pid, command: "job".to_owned(), gpu, mps_client: false }
    }

    fn poll(sightings: Vec<Sighting>) -> Poll {
        Poll { sightings, ..Poll::default() }
    }

    fn no_cause(_: &Sighting) -> String {
        "a hard-coded device index".to_owned()
    }

    #[test]
    fn verified_when_every_selected_gpu_is_used() {
        let mut tracker = Tracker::new(&[3, 5]);
        assert_eq!(tracker.settled(), None);
        tracker.observe(poll(vec![seen(10, 3)]), no_cause);
        assert_eq!(tracker.settled(), None, "GPU 5 may still be used");
        assert_eq!(tracker.verdict().0, Verdict::Partial);
        tracker.observe(poll(vec![seen(10, 3), seen(11, 5)]), no_cause);
        let (verdict, detail) = tracker.settled().unwrap();
        assert_eq!(verdict, Verdict::Verified);
        assert_eq!(detail, "PID 10 (job) on GPU 3; PID 11 (job) on GPU 5");
        // One process on two GPUs is named once.
        let mut both = Tracker::new(&[3, 5]);
        both.observe(poll(vec![seen(10, 5), seen(10, 3)]), no_cause);
        assert_eq!(both.settled().unwrap(), (Verdict::Verified, "PID 10 (job) on GPUs 3, 5".to_owned()));
    }

    #[test]
    fn wrong_gpu_wins_and_names_pid_gpu_and_cause() {
        let mut tracker = Tracker::new(&[3]);
        tracker.observe(poll(vec![seen(10, 3), seen(12, 0)]), no_cause);
        let (verdict, detail) = tracker.settled().unwrap();
        assert_eq!(verdict, Verdict::WrongGpu);
        assert!(
            detail.starts_with("PID 12 (job) is on GPU 0, which was not selected (selected: GPU 3)"),
            "{detail}"
        );
        assert!(detail.ends_with("likely cause: a hard-coded device index"));
    }

    #[test]
    fn nothing_seen() {
        let tracker = Tracker::new(&[1]);
        assert_eq!(tracker.verdict().0, Verdict::NotObserved);
        let mut unlistable = Tracker::new(&[1]);
        unlistable
            .observe(Poll { unlistable: vec![(1, "Not Supported".to_owned())], ..Poll::default() }, no_cause);
        assert_eq!(
            unlistable.verdict(),
            (Verdict::Unverifiable, "NVML cannot list the processes on GPU 1: Not Supported".to_owned())
        );
        let mut container = Tracker::new(&[1]);
        container.observe(Poll { foreign_namespace_pids: vec![(4194400, 1)], ..Poll::default() }, no_cause);
        assert_eq!(container.verdict().0, Verdict::Unverifiable);
        assert!(container.verdict().1.contains("another PID namespace"));
    }

    #[test]
    fn a_lost_gpu_makes_a_verified_run_unverifiable_but_not_a_wrong_one() {
        let mut tracker = Tracker::new(&[1]);
        tracker.observe(poll(vec![seen(5, 1)]), no_cause);
        assert_eq!(tracker.settled().unwrap().0, Verdict::Verified);
        let lost = Poll { unlistable: vec![(1, "GPU is lost".to_owned())], lost: vec![1], ..Poll::default() };
        tracker.observe(lost.clone(), no_cause);
        let (verdict, detail) = tracker.settled().unwrap();
        assert_eq!(verdict, Verdict::Unverifiable);
        assert!(detail.starts_with("GPU 1 fell off the bus during the run"), "{detail}");
        assert!(detail.ends_with("seen before: PID 5 (job) on GPU 1"), "{detail}");
        let mut wrong = Tracker::new(&[1]);
        wrong.observe(poll(vec![seen(5, 0)]), no_cause);
        wrong.observe(lost, no_cause);
        assert_eq!(wrong.verdict().0, Verdict::WrongGpu);
    }

    #[test]
    fn a_gpu_whose_list_is_refused_is_unverifiable_never_unused() {
        // PID 5 seen on GPU 1, GPU 2's list refused, among `selected`.
        let tracker = |selected: &[u32]| {
            let mut tracker = Tracker::new(selected);
            let refused = vec![(2, "Not Supported".to_owned())];
            tracker.observe(
                Poll { sightings: vec![seen(5, 1)], unlistable: refused, ..Poll::default() },
                no_cause,
            );
            tracker
        };
        let two = tracker(&[1, 2]);
        let (verdict, detail) = two.verdict();
        assert_eq!(verdict, Verdict::Unverifiable, "{detail}");
        assert!(detail.contains("NVML cannot list the processes on GPU 2: Not Supported"), "{detail}");
        assert_eq!(two.unlistable(), [2]);
        // A third GPU that was listed and unused still makes it partial.
        assert_eq!(tracker(&[1, 2, 3]).verdict().0, Verdict::Partial);
    }
}
