//! Watching where the command landed: NVML's process lists (fetched by the probe thread, never
//! on the supervising thread) are matched against gpurun's process tree (the command, its
//! children, DataLoader workers, orphans reparented to gpurun), quickly at first and backing
//! off; each verdict is logged once, and the tree's GPU memory is sampled for the report.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant, SystemTime};

use crate::options::size::human;
use crate::options::VerifyMode;
use crate::probe::calls::Call;
use crate::probe::meter::{Ask, Reading};
use crate::probe::watch::{ListError, Listed, Xid, XidBatch, XIDS_KEPT};
use crate::process::procfs;
use crate::runtime::{Visible, WrongGpuCause};
use crate::verify::container;
use crate::verify::idle::{IdleRules, IdleWatch};
use crate::verify::receipt::Receipt;
use crate::verify::report::Verification;
use crate::verify::verdict::{Poll, Sighting, Tracker, Verdict};

/// The first poll comes this soon after launch; the interval then grows by half each time.
const FIRST_INTERVAL: Duration = Duration::from_millis(100);
/// The longest interval while no verdict has settled.
const LONGEST_INTERVAL: Duration = Duration::from_secs(2);
/// After the verdict: a process of another user that appears on a chosen GPU (an intruder) and
/// a chosen GPU that falls off the bus are seen within this long. One process-list call per
/// chosen GPU (about a millisecond each with the real driver): `make bench` measures it.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// After the verdict, every GPU's list (a late wrong-gpu) and the receipt's readings come this
/// often, with the chosen GPUs' look.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// A poll that has not returned after this long counts as NVML not answering (a healthy driver
/// lists a GPU's processes in about a millisecond).
pub(crate) const SLOW_CALL: Duration = Duration::from_millis(500);

/// What the probe thread returned for one poll: each watched GPU's processes, or why not.
pub(crate) type Lists = Vec<(u32, Result<Vec<Listed>, ListError>)>;

/// Verification of one run: what the command was given, how to tell its processes, when to
/// look next, and the parts that each watch one thing (health, MPS, the receipt).
pub(crate) struct Monitor {
    mode: VerifyMode,
    given: Given,
    causes: Causes,
    tracker: Tracker,
    pace: Pace,
    logged: Vec<Verdict>,
    /// Largest total of the tree's memory seen on each GPU.
    peak_bytes: BTreeMap<u32, u64>,
    health: HealthWatch,
    mps: MpsWatch,
    /// The receipt: what the chosen GPUs drew and did, and who else appeared on them.
    receipt: Receipt,
    /// The chosen GPUs held at 0% utilization, from the receipt's samples.
    idle: IdleWatch,
    started: Instant,
}

/// What verification watches, built by the plan (`Plan::monitor`): the mode, the GPUs, what
/// was on them before the launch, and what tells the command's processes from others'.
pub(crate) struct Watching {
    pub(crate) mode: VerifyMode,
    /// The chosen devices (NVML indices, MIG device keys).
    pub(crate) selected: Vec<u32>,
    /// The GPUs whose processes are listed each poll.
    pub(crate) watched: Vec<u32>,
    /// PIDs on any GPU at launch: not the command's.
    pub(crate) before_launch: HashSet<u32>,
    /// What gpurun made the command see.
    pub(crate) visible: Visible,
    /// `--verify-timeout`.
    pub(crate) timeout: Duration,
    /// `--per-rank`: whose each GPU of the group is.
    pub(crate) owners: Option<crate::rank::Owners>,
    /// A container run: the file its ID comes in.
    pub(crate) cidfile: Option<std::path::PathBuf>,
    /// `--launcher off`: how the launcher left alone overrides the visibility variable.
    pub(crate) launcher_note: Option<String>,
    /// `--idle-warn` and the house rule on idle GPUs.
    pub(crate) idle: IdleRules,
}

/// What the command was given, and what was there before it.
struct Given {
    /// gpurun's PID: the root of the command's tree.
    own_pid: u32,
    /// NVML indices of the selected GPUs.
    selected: Vec<u32>,
    /// GPUs whose processes are listed each poll (all that could be read at launch).
    watched: Vec<u32>,
    /// PIDs on any GPU at launch: not the command's.
    before_launch: HashSet<u32>,
}

/// What tells the command's processes from others', and why one is on a GPU it was not given.
struct Causes {
    /// What gpurun made the command see (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES), to
    /// explain a wrong GPU in its runtime's words.
    visible: Visible,
    /// `--per-rank`: whose each GPU of the group is, to name the rank a wrong GPU belongs to.
    owners: Option<crate::rank::Owners>,
    /// `--per-rank`: the launcher that started this rank; the other ranks, its descendants,
    /// are the job's own wherever they appear (NCCL's peer contexts), never intruders.
    launcher: Option<u32>,
    /// `--launcher off`: how the launcher left alone overrides CUDA_VISIBLE_DEVICES.
    launcher_note: Option<String>,
    /// A container run: the file its ID comes in, and the ID once read. Its processes are the
    /// runtime's children, not gpurun's: a process NVML lists is the container's when its
    /// cgroup path names the container's ID (podman's libpod-<ID>, docker's docker-<ID>).
    container: Option<(std::path::PathBuf, Option<String>)>,
}

/// When to look next: quickly at first and backing off, then samples after the verdict.
struct Pace {
    interval: Duration,
    next_poll: Instant,
    /// When every watched GPU was last listed and the receipt read (all are, until the
    /// verdict; then every `SAMPLE_INTERVAL`).
    last_sample: Instant,
    /// `--verify-timeout`, until a verdict settles.
    deadline: Option<Instant>,
}

/// What the chosen GPUs' health did during the run: Xid errors, and devices lost.
#[derive(Debug, Clone, Default)]
pub(crate) struct HealthWatch {
    /// The Xid errors NVML raised on the chosen GPUs, with when they were seen.
    pub(crate) xids: Vec<(Xid, SystemTime)>,
    /// Xid events read and not kept (repeats past the bound), for the report.
    pub(crate) xids_dropped: u64,
    /// Chosen devices whose process list answered GPU_IS_LOST, with when that was first seen.
    pub(crate) lost: Vec<(u32, SystemTime)>,
}

/// The other clients of the MPS servers the command ran on.
#[derive(Default)]
struct MpsWatch {
    /// The other clients of the MPS server on each chosen device, with their owners.
    neighbours: BTreeMap<u32, BTreeSet<(u32, Option<String>)>>,
    /// The devices a process of the command was seen on as an MPS client.
    gpus: BTreeSet<u32>,
}

/// The other clients of one MPS server: (PID, owner).
pub(crate) type MpsNeighbours = Vec<(u32, Option<String>)>;

/// Other MPS clients remembered per device (the report names them; a busy server has many).
const MPS_NEIGHBOURS_KEPT: usize = 64;

/// What verification saw of a run, taken from the monitor once the command has ended.
pub(crate) struct Seen {
    pub(crate) verification: Verification,
    /// Whether NVML watched the run (without it nothing was seen: nothing to diagnose).
    pub(crate) watched: bool,
    pub(crate) peaks: BTreeMap<u32, u64>,
    /// The selected GPUs a process of the tree was seen on.
    pub(crate) used: Vec<u32>,
    /// The selected GPUs whose processes NVML could not list (used or not: unknown).
    pub(crate) unlistable: Vec<u32>,
    pub(crate) health: HealthWatch,
    /// For each device the command ran on as an MPS client, the other clients of its server.
    pub(crate) mps_shared: Vec<(u32, MpsNeighbours)>,
    /// What the chosen GPUs drew and did (None: nothing watched the run).
    pub(crate) receipt: Option<Receipt>,
    /// `memory-held`: the command's processes NVML still listed once they had all ended.
    pub(crate) memory_held: Vec<crate::verify::diagnosis::Diagnosis>,
    /// The chosen GPUs held at 0% utilization past the warning or the limit, with the longest
    /// stretch of each.
    pub(crate) idle: Vec<(u32, Duration)>,
}

impl Seen {
    /// A run no monitor watched, and why.
    pub(crate) fn unwatched(detail: &str) -> Seen {
        Seen {
            verification: Verification { verdict: None, detail: detail.to_owned() },
            watched: false,
            peaks: BTreeMap::new(),
            used: Vec::new(),
            unlistable: Vec::new(),
            health: HealthWatch::default(),
            mps_shared: Vec::new(),
            receipt: None,
            idle: Vec::new(),
            memory_held: Vec::new(),
        }
    }
}

impl Monitor {
    pub(crate) fn new(watching: Watching) -> Monitor {
        let Watching { mode, selected, watched, before_launch, visible, timeout, owners, cidfile, .. } =
            watching;
        let now = Instant::now();
        let whole: Vec<u32> =
            selected.iter().copied().filter(|key| crate::probe::gpu::mig_parts(*key).is_none()).collect();
        let causes = Causes {
            visible,
            // `--per-rank`: the other ranks are the launcher's descendants.
            launcher: owners.is_some().then(|| nix::unistd::getppid().as_raw() as u32),
            owners,
            launcher_note: watching.launcher_note,
            container: cidfile.map(|cidfile| (cidfile, None)),
        };
        Monitor {
            mode,
            tracker: Tracker::new(&selected),
            peak_bytes: selected.iter().map(|gpu| (*gpu, 0)).collect(),
            given: Given { own_pid: std::process::id(), selected, watched, before_launch },
            causes,
            pace: Pace {
                interval: FIRST_INTERVAL,
                next_poll: now + FIRST_INTERVAL,
                last_sample: now,
                deadline: Some(now + timeout),
            },
            logged: Vec::new(),
            health: HealthWatch::default(),
            mps: MpsWatch::default(),
            receipt: Receipt::new(&whole).watching_outside(!procfs::in_host_pid_namespace()),
            idle: IdleWatch::new(watching.idle, now),
            started: now,
        }
    }

    /// The run's end, as verification saw it: the final verdict (`stuck`: the NVML call that
    /// has not returned, if one hangs) and everything watched.
    pub(crate) fn conclude(
        &mut self,
        stuck: Option<Option<Call>>,
        memory_held: Vec<crate::verify::diagnosis::Diagnosis>,
    ) -> Seen {
        let (verdict, detail) = self.final_verdict(stuck);
        Seen {
            verification: Verification { verdict: Some(verdict), detail },
            watched: true,
            peaks: self.peak_bytes.clone(),
            used: self.used(),
            unlistable: self.tracker.unlistable(),
            health: self.health.clone(),
            mps_shared: self.mps_shared(),
            receipt: Some(self.receipt.clone()),
            idle: self.idle.held_idle(),
            memory_held,
        }
    }

    /// The chosen GPUs that are listed (a GPU in MIG mode: its MIG devices).
    pub(crate) fn chosen_watched(&self) -> Vec<u32> {
        self.given.watched.iter().copied().filter(|gpu| self.given.selected.contains(gpu)).collect()
    }

    /// Of the chosen GPUs' lists taken once the command and its leftovers ended, the command's
    /// processes: seen as its during the run, or still in gpurun's tree (kept orphans).
    pub(crate) fn still_held(&self, lists: Lists) -> Vec<crate::verify::leftover::Held> {
        let mut held = Vec::new();
        for (gpu, listed) in lists {
            for process in listed.into_iter().flatten() {
                let ours = self.tracker.saw(process.pid)
                    || (process.pid != self.given.own_pid
                        && procfs::descends_from(process.pid, self.given.own_pid));
                if ours {
                    let left = crate::verify::leftover::left_of(process.pid);
                    held.push(crate::verify::leftover::Held {
                        pid: process.pid,
                        gpu,
                        bytes: process.used_bytes,
                        left,
                    });
                }
            }
        }
        held
    }

    /// What the receipt reads now: the chosen whole GPUs, with the counters at the start and
    /// the end (`bounds`).
    pub(crate) fn meter(&self, bounds: bool) -> Ask {
        Ask { gpus: self.receipt.gpus(), bounds, memory: self.receipt.watches_outside() }
    }

    /// Takes the receipt's readings; GPUs idle past `--idle-warn` are said now.
    pub(crate) fn absorb_readings(&mut self, readings: &[Reading], bounds: bool) {
        self.receipt.absorb(readings, bounds);
        let crossed = self.idle.absorb(readings);
        if let Some(warning) = self.idle.warning(&crossed) {
            tracing::warn!("{warning}");
        }
    }

    /// The house rule `idle-action = "end"` was crossed since the last call: what ending the
    /// command with `signal` is said as (once).
    pub(crate) fn take_idle_end(&mut self, signal: i32) -> Option<(u32, String)> {
        self.idle.take_end(signal)
    }

    /// The selected GPUs a process of the tree was seen on.
    fn used(&self) -> Vec<u32> {
        self.tracker.used().iter().copied().collect()
    }

    /// The physical GPUs whose Xid errors count: the chosen ones (a MIG device's GPU).
    pub(crate) fn xid_gpus(&self) -> Vec<u32> {
        let mut gpus: Vec<u32> = self
            .given
            .selected
            .iter()
            .map(|&key| crate::probe::gpu::mig_parts(key).map_or(key, |(parent, _)| parent))
            .collect();
        gpus.dedup();
        gpus
    }

    /// Takes one look's Xid events: each kept one is said (once per GPU and code: a flood of
    /// one code is one line), the rest counted. Memory stays bounded over the run as in the
    /// look (`XidBatch`): the first `XIDS_KEPT`, then only a (GPU, code) not seen yet.
    pub(crate) fn absorb_xids(&mut self, batch: XidBatch) {
        let mut dropped = batch.dropped;
        for xid in batch.kept {
            let seen = self.health.xids.iter().any(|(kept, _)| kept.gpu == xid.gpu && kept.code == xid.code);
            if !seen {
                tracing::warn!("{}", crate::verify::xid::describe(xid.code, xid.gpu));
            }
            match self.health.xids.len() < XIDS_KEPT || !seen {
                true => self.health.xids.push((xid, SystemTime::now())),
                false => dropped += 1,
            }
        }
        if dropped > 0 {
            tracing::warn!("and {dropped} more Xid events of the codes above (counted, not kept)");
            self.health.xids_dropped += dropped;
        }
    }

    /// For each device the command ran on as an MPS client, the other clients seen on its
    /// server (PID, owner): they share its fault domain.
    fn mps_shared(&self) -> Vec<(u32, MpsNeighbours)> {
        self.mps
            .gpus
            .iter()
            .map(|gpu| {
                (*gpu, self.mps.neighbours.get(gpu).map(|n| n.iter().cloned().collect()).unwrap_or_default())
            })
            .filter(|(_, others): &(u32, MpsNeighbours)| !others.is_empty())
            .collect()
    }

    /// The GPUs to list at each poll.
    pub(crate) fn watched(&self) -> Vec<u32> {
        self.given.watched.clone()
    }

    /// What the poll due now lists, and whether it takes the receipt's readings: until the
    /// verdict (and every `SAMPLE_INTERVAL` after it) every watched GPU and the readings;
    /// between, only the chosen GPUs, for intruders and a lost GPU.
    pub(crate) fn next_look(&mut self, now: Instant) -> (Vec<u32>, bool) {
        // Until the verdict settles (or --verify-timeout says what is known), every poll.
        let sample = self.pace.deadline.is_some() || now >= self.pace.last_sample + SAMPLE_INTERVAL;
        if sample {
            self.pace.last_sample = now;
            return (self.given.watched.clone(), true);
        }
        let chosen = self.given.watched.iter().copied().filter(|gpu| self.given.selected.contains(gpu));
        (chosen.collect(), false)
    }

    pub(crate) fn poll_due(&self, now: Instant) -> bool {
        now >= self.pace.next_poll
    }

    /// When the monitor next wants the supervisor's attention: the next poll (if one may be
    /// sent now) or the verification deadline.
    pub(crate) fn next_wake(&self, may_poll: bool) -> Option<Instant> {
        let poll = may_poll.then_some(self.pace.next_poll);
        [poll, self.pace.deadline].into_iter().flatten().min()
    }

    /// Takes one poll's lists. Returns a wrong-gpu detail when `--verify strict` must end the
    /// command.
    pub(crate) fn absorb(&mut self, lists: Lists) -> Option<String> {
        let poll = self.poll(lists);
        let visible = self.causes.visible.clone();
        let owners = self.causes.owners.clone();
        let in_container = self.causes.container.is_some();
        let launcher_note = self.causes.launcher_note.clone();
        self.tracker.observe(poll, |sighting| {
            let another_ranks =
                owners.as_ref().and_then(|owners| Some((owners.own_rank, owners.rank_of(sighting.gpu)?)));
            match another_ranks {
                Some((own, theirs)) => rank_cause(sighting, own, theirs, &visible),
                // Inside, the container sees only the devices its runtime gave it.
                None if in_container => {
                    "the container was given that GPU besides gpurun's: a device node or \
                    volume passed by hand, --privileged, or a runtime that injects every GPU by default"
                        .to_owned()
                }
                None => match &launcher_note {
                    Some(note) => format!("{}; {note}", likely_cause(sighting, &visible).text),
                    None => likely_cause(sighting, &visible).text,
                },
            }
        });
        let mut strict_failure = None;
        if let Some((verdict, detail)) = self.tracker.settled() {
            if self.log_once(verdict, &detail)
                && verdict == Verdict::WrongGpu
                && self.mode == VerifyMode::Strict
            {
                strict_failure = Some(detail);
            }
            self.pace.deadline = None;
            self.pace.interval = WATCH_INTERVAL;
        } else if self.pace.deadline.is_some() {
            self.pace.interval = (self.pace.interval * 3 / 2).min(LONGEST_INTERVAL);
        }
        self.pace.next_poll = Instant::now() + self.pace.interval;
        strict_failure
    }

    /// The last look's lists, taken after the command ended: what the end can still show. A
    /// chosen GPU that answers GPU_IS_LOST makes the verdict unverifiable, however short the
    /// run; a process that appeared since the last poll and is not the command's is an
    /// intruder. The command's own processes are gone by now, so nothing else is read from
    /// them: a PID NVML still lists that no longer exists is the command's, ended, not one
    /// of another PID namespace.
    pub(crate) fn absorb_last(&mut self, lists: Lists) {
        let poll = self.poll(lists);
        let lost = Poll { lost: poll.lost, ..Poll::default() };
        self.tracker.observe(lost, |_| String::new());
        if let Some((verdict, detail)) = self.tracker.settled() {
            self.log_once(verdict, &detail);
        }
    }

    /// At `--verify-timeout` with no settled verdict: say what is known. `stuck`: the NVML
    /// call that has not returned, if one is hanging.
    pub(crate) fn check_deadline(&mut self, now: Instant, stuck: Option<Option<Call>>) {
        if self.pace.deadline.is_none_or(|deadline| now < deadline) {
            return;
        }
        self.pace.deadline = None;
        self.pace.interval = WATCH_INTERVAL;
        let (verdict, detail) = self.verdict(stuck);
        self.log_once(verdict, &format!("{detail} (within --verify-timeout)"));
    }

    /// The final verdict, once the command has ended; logged if nothing was yet. A command
    /// that ended before `--verify-timeout` without touching a GPU is most often one that never
    /// meant to (a quick script): that is worth a line, not a warning.
    fn final_verdict(&mut self, stuck: Option<Option<Call>>) -> (Verdict, String) {
        let (verdict, detail) = self.verdict(stuck);
        if verdict == Verdict::NotObserved && self.logged.is_empty() {
            self.logged.push(verdict);
            tracing::info!("{verdict}: {detail} (the command ended before --verify-timeout)");
        } else if self.logged.is_empty() || verdict == Verdict::WrongGpu {
            self.log_once(verdict, &detail);
        }
        (verdict, detail)
    }

    /// The tracker's verdict, except that nothing seen while NVML did not answer is not
    /// "not observed" but "could not be checked".
    fn verdict(&self, stuck: Option<Option<Call>>) -> (Verdict, String) {
        let (verdict, detail) = self.tracker.verdict();
        if let (Some((cidfile, None)), Verdict::NotObserved) = (&self.causes.container, verdict) {
            return (
                Verdict::Unverifiable,
                format!(
                    "the container runtime never wrote the container's ID to {}, so its processes could not be found",
                    cidfile.display()
                ),
            );
        }
        match stuck {
            Some(call) if verdict == Verdict::NotObserved => (
                Verdict::Unverifiable,
                match call {
                    Some(call) => format!("NVML did not answer: {call} did not return"),
                    None => "NVML did not answer the process-list query".to_owned(),
                },
            ),
            _ => (verdict, detail),
        }
    }

    fn log_once(&mut self, verdict: Verdict, detail: &str) -> bool {
        if self.logged.contains(&verdict) {
            return false;
        }
        self.logged.push(verdict);
        // Under --per-rank every rank gives a verdict: each says which rank it is.
        let rank = self.causes.owners.as_ref().map(|owners| format!(" (rank {})", owners.own_rank));
        let detail = format!("{detail}{}", rank.unwrap_or_default());
        match verdict {
            Verdict::Verified | Verdict::Unverifiable => tracing::info!("{verdict}: {detail}"),
            Verdict::WrongGpu if self.mode == VerifyMode::Strict => {
                tracing::error!("{verdict}: {detail}; ending the command (--verify strict)")
            }
            Verdict::WrongGpu | Verdict::Partial | Verdict::NotObserved => {
                tracing::warn!("{verdict}: {detail}")
            }
        }
        true
    }

    fn poll(&mut self, lists: Lists) -> Poll {
        let mut poll = Poll::default();
        if let Some((cidfile, id @ None)) = &mut self.causes.container {
            *id = crate::verify::container::read_id(cidfile);
        }
        let container_id = self.causes.container.as_ref().and_then(|(_, id)| id.clone());
        for (gpu, listed) in lists {
            let selected = self.given.selected.contains(&gpu);
            match listed {
                Ok(listed) => {
                    let outside = selected.then(|| self.receipt.listed(gpu, &listed, self.started.elapsed()));
                    if let Some(bytes) = outside.flatten() {
                        tracing::warn!(
                            "{} held by processes outside this PID namespace appeared on {} at {}: NVML \
                             lists none of them here (another container's, or the host's), and they share \
                             the GPU with the command",
                            human(bytes),
                            crate::probe::gpu::label(gpu),
                            crate::verify::diagnosis::utc_clock(std::time::SystemTime::now()),
                        );
                    }
                    let mut tree_bytes = 0u64;
                    for process in listed {
                        // The few PIDs NVML lists are walked up to gpurun: nothing scans /proc.
                        // Once seen as the command's, a process stays its own when it leaves
                        // the tree (an orphan under --keep-orphans is reparented away).
                        let in_tree = process.pid != self.given.own_pid
                            && (procfs::descends_from(process.pid, self.given.own_pid)
                                || self.tracker.saw(process.pid)
                                || container_id
                                    .as_deref()
                                    .is_some_and(|id| container::runs_in(process.pid, id)));
                        if in_tree {
                            if process.mps_client {
                                self.mps.gpus.insert(gpu);
                            }
                            tree_bytes += process.used_bytes.unwrap_or(0);
                            let command = procfs::command_line(process.pid).unwrap_or_else(|| "?".to_owned());
                            poll.sightings.push(Sighting {
                                pid: process.pid,
                                command: crate::process::stdio::clip_command(&command, 60),
                                gpu,
                                mps_client: process.mps_client,
                            });
                        } else if selected && process.mps_client {
                            // Another client of the same MPS server: a fatal fault in either
                            // ends both (the report says who).
                            let neighbours = self.mps.neighbours.entry(gpu).or_default();
                            if neighbours.len() < MPS_NEIGHBOURS_KEPT {
                                neighbours.insert((process.pid, procfs::owner(process.pid)));
                            }
                        } else if selected
                            && !self.given.before_launch.contains(&process.pid)
                            && !procfs::exists(process.pid)
                        {
                            poll.foreign_namespace_pids.push((process.pid, gpu));
                        } else if selected && !self.given.before_launch.contains(&process.pid) {
                            self.intruder(process, gpu);
                        }
                    }
                    if tree_bytes > 0 || selected {
                        let peak = self.peak_bytes.entry(gpu).or_insert(0);
                        *peak = (*peak).max(tree_bytes);
                    }
                }
                Err(error) if selected => {
                    if error.lost && !self.health.lost.iter().any(|(lost, _)| *lost == gpu) {
                        tracing::warn!(
                            "{}: NVML answers GPU is lost: it fell off the bus; what ran there is gone",
                            crate::probe::gpu::label(gpu)
                        );
                        self.health.lost.push((gpu, SystemTime::now()));
                        poll.lost.push(gpu);
                    }
                    poll.unlistable.push((gpu, error.text));
                }
                Err(error) => {
                    tracing::debug!(
                        "{}: cannot list processes: {}",
                        crate::probe::gpu::label(gpu),
                        error.text
                    )
                }
            }
        }
        poll
    }
}

impl Monitor {
    /// A process that appeared on a chosen GPU and is not the command's: said once, kept for
    /// the receipt. Another rank of the same launch is the job's own.
    fn intruder(&mut self, process: Listed, gpu: u32) {
        if self.causes.launcher.is_some_and(|launcher| procfs::descends_from(process.pid, launcher)) {
            return;
        }
        // Our own MPS server, started on demand by the control daemon for the command's first
        // client: the command's, in all but ancestry.
        let ours = procfs::uid_of(process.pid) == Some(nix::unistd::getuid().as_raw());
        if ours && crate::probe::mps::is_server(procfs::command_line(process.pid).as_deref()) {
            return;
        }
        let at = self.started.elapsed();
        let user = procfs::owner(process.pid);
        let shown = user.clone();
        if !self.receipt.intruder(process.pid, gpu, process.used_bytes, at, || user) {
            return;
        }
        if self.receipt.intruders_not_kept > 0 {
            tracing::warn!(
                "more processes that are not the command's appeared on its GPUs: counted, not listed"
            );
            return;
        }
        let memory = process.used_bytes.map(|bytes| format!(" ({})", human(bytes))).unwrap_or_default();
        tracing::warn!(
            "PID {} of user {} appeared on {}{memory} at {}: it is not the command's, and shares the GPU with it",
            process.pid,
            shown.as_deref().unwrap_or("unknown"),
            crate::probe::gpu::label(gpu),
            crate::verify::diagnosis::utc_clock(std::time::SystemTime::now()),
        );
    }
}

/// A rank's process on another rank's GPU: the rank, whose GPU it is, and the usual cause (every
/// rank on device 0, or a bare `.cuda()`), unless the environment was changed.
fn rank_cause(sighting: &Sighting, own: u32, theirs: u32, visible: &Visible) -> String {
    let gpu = crate::probe::gpu::label(sighting.gpu);
    let cause = likely_cause(sighting, visible);
    if cause.environment_changed {
        return format!("rank {own} used {gpu}, rank {theirs}'s: {}", cause.text);
    }
    format!(
        "rank {own} used {gpu}, rank {theirs}'s: the program did not pick its rank's device; call \
         torch.cuda.set_device(LOCAL_RANK) or use cuda:LOCAL_RANK (a bare .cuda() or cuda:0 is rank 0's GPU; \
         --per-rank=own shows each rank only its own, as cuda:0)"
    )
}

/// Why a process of the command may be on a GPU it was not given, from its environment at
/// exec, in its runtime's words.
fn likely_cause(sighting: &Sighting, visible: &Visible) -> WrongGpuCause {
    let pid = sighting.pid;
    visible.runtime.wrong_gpu_cause(|name| procfs::environment_variable(pid, name), &visible.given)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before the verdict every watched GPU is listed at every poll, however far the pace has
    /// backed off (a process on an unselected GPU is the wrong-gpu verdict); after it, the
    /// chosen GPUs each second and every GPU with the receipt every `SAMPLE_INTERVAL`.
    #[test]
    fn every_gpu_is_listed_until_the_verdict_then_the_chosen_ones_between_samples() {
        let mut monitor = Monitor::new(Watching {
            mode: VerifyMode::Warn,
            selected: vec![1],
            watched: vec![0, 1, 2],
            before_launch: HashSet::new(),
            visible: Visible { runtime: crate::runtime::Runtime::Cuda, given: "1".to_owned() },
            timeout: SAMPLE_INTERVAL * 4,
            owners: None,
            cidfile: None,
            launcher_note: None,
            idle: IdleRules::default(),
        });
        let now = Instant::now();
        monitor.pace.interval = LONGEST_INTERVAL;
        assert_eq!(monitor.next_look(now), (vec![0, 1, 2], true));
        assert_eq!(monitor.next_look(now + LONGEST_INTERVAL), (vec![0, 1, 2], true));
        monitor.pace.deadline = None;
        monitor.pace.interval = WATCH_INTERVAL;
        assert_eq!(monitor.next_look(now + WATCH_INTERVAL * 3), (vec![1], false));
        let later = now + LONGEST_INTERVAL + SAMPLE_INTERVAL;
        assert_eq!(monitor.next_look(later), (vec![0, 1, 2], true));
        assert_eq!(monitor.next_look(later + WATCH_INTERVAL), (vec![1], false));
    }
}
