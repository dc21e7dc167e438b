//! probe -> candidates -> filter and rank -> reserve, under the directory lock, retried while
//! `--wait` allows. Two gpurun started in the same second never both take the one free GPU:
//! selection and reservation happen under one exclusive lock, other launches' reserved memory
//! counts until their processes show up in NVML, and GPUs an earlier waiter could use are held
//! for it.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::options::count::Count;
use crate::options::devices::DeviceRef;
use crate::options::{duration, Wait};
use crate::probe::gpu::{label, Machine, Topology};
use crate::probe::nvml::OpenError;
use crate::probe::worker::{Failure, NvmlThread};
use crate::process::procfs;
use crate::process::signals::Receiver;
use crate::reserve::lease::{self, HeldLease, Lease};
use crate::reserve::lockdir::{LockDir, LockDirError};
use crate::reserve::ticket::{self, KnownGpus, Needs, Ticket, Waiter};
use crate::select::policy::{self, Decision, DeviceError, HeldBack, Outcome, Request, Reservation};
use crate::select::selection::Selection;
use crate::select::visibility::{self, Inherited, Visibility};

/// A multi-GPU request reads the links among at most this many of the best-ranked GPUs (or four
/// times the GPUs it asks for): links are read per pair.
const LINK_POOL: usize = 16;

/// Between two tries while waiting: the head of the queue looks often, the others less the
/// further back they are (many waiters must not keep the machine busy).
const HEAD_OF_QUEUE_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(1);
/// On a non-terminal stderr, one progress line this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Options<'a> {
    pub(crate) request: &'a Request,
    /// `None`: `--no-lock`.
    pub(crate) lock_dir: Option<PathBuf>,
    pub(crate) wait: Wait,
    /// Take leases (running the command) rather than only look (list, dry run, export).
    pub(crate) hold: bool,
    /// For the lease files and the queue: the command, and the request as typed.
    pub(crate) command: String,
    pub(crate) request_text: String,
    pub(crate) nvml_timeout: Duration,
    /// Log lines are JSON: no in-place progress line.
    pub(crate) json_logs: bool,
    /// `--list`: showing the machine is not a request; nothing is refused.
    pub(crate) listing: bool,
    /// The house rule max-gpus-per-user, and how to name it.
    pub(crate) max_gpus_per_user: Option<(u32, String)>,
    /// Probe the links between the GPUs (a multi-GPU request, or a listing that shows them).
    pub(crate) topology: bool,
    /// `--per-rank`: the whole group's set is chosen, in PCI order (rank order); this rank
    /// reserves only its own part of it and, when it is the group's chooser, records the set.
    pub(crate) group: Option<GroupShare<'a>>,
}

/// What max-gpus-per-user leaves this launch: `Ok(None)` no rule (or only looking),
/// `Ok(Some(n))` at most n more GPUs now, `Err(why)` the request alone is over the rule.
fn user_allowance(options: &Options, live: &[Lease]) -> Result<Option<(u32, String)>, String> {
    // Every request is held to it, a dry run and an export too (they show what the launch
    // would get, rules included); a listing is no request.
    let Some((max, rule)) = options.max_gpus_per_user.as_ref().filter(|_| !options.listing) else {
        return Ok(None);
    };
    let count = options.request.count;
    if count.min > *max {
        return Err(format!("--gpus {count}: the house rule {rule} allows at most {max} per user"));
    }
    let uid = crate::reserve::lockdir::current_uid();
    let held = live.iter().filter(|lease| lease.uid == uid).count() as u32;
    let why = format!(
        "you hold {held} reserved GPU{}, and the house rule is {rule}",
        if held == 1 { "" } else { "s" }
    );
    Ok(Some((max.saturating_sub(held), why)))
}

/// `--per-rank`: what the acquisition needs to know of the rank's group.
pub(crate) struct GroupShare<'a> {
    /// This rank's positions in the set (PCI order).
    pub(crate) own: std::ops::Range<usize>,
    /// The record to write the set into (the chooser; `None` when only looking).
    pub(crate) record: Option<&'a crate::reserve::group::Membership>,
}

pub(crate) struct Acquisition {
    pub(crate) machine: Machine,
    pub(crate) decision: Decision,
    /// The chosen GPUs, or exit 75's explanation.
    pub(crate) chosen: Result<Selection, String>,
    /// Held until the command ends (or handed to it with --exec).
    pub(crate) leases: Vec<HeldLease>,
    /// Everyone's live reservations, for --list.
    pub(crate) live: Vec<Lease>,
    /// The waiters ahead of this launch (all of them, for --list), in queue order.
    pub(crate) queue: Vec<Queued>,
    /// `--per-rank`: this rank's hold on its group's record, released after the leases.
    pub(crate) group: Option<crate::reserve::group::Membership>,
}

impl Acquisition {
    /// `--gpus 0` (or `--fallback cpu` without NVML): nothing probed, chosen or reserved.
    pub(crate) fn no_gpu(requested: Count) -> Acquisition {
        Acquisition {
            machine: Machine {
                driver_version: None,
                cuda_driver_version: None,
                gpus: Vec::new(),
                migs: Vec::new(),
                topology: None,
                excluded: Vec::new(),
                confidential_computing: None,
            },
            decision: Decision::selected(Vec::new()),
            chosen: Ok(Selection::none(requested)),
            leases: Vec::new(),
            live: Vec::new(),
            queue: Vec::new(),
            group: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AcquireError {
    #[error(transparent)]
    Nvml(OpenError),
    /// NVML did not answer in time: the message.
    #[error("{0}")]
    Stalled(String),
    #[error(transparent)]
    LockDir(LockDirError),
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// No state of the machine can meet the request.
    #[error("{0}")]
    Impossible(String),
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
    /// `--per-rank`: the group could not be joined (its chooser failed, the set never came).
    #[error("{why}")]
    Group { why: String, failure: GroupFailure },
}

/// Why a rank could not take its part of its group's set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupFailure {
    /// Not now: the GPUs were not to be had, or the set did not come in time (a retry may do).
    Busy,
    /// Not as started: the ranks disagree, or the record cannot be used here.
    Broken,
}

impl GroupFailure {
    /// A chooser's failure as its record keeps it (the exit status it ended with).
    pub(crate) fn of_status(status: u8) -> GroupFailure {
        match status {
            crate::exit_code::NOT_ENOUGH_GPUS => GroupFailure::Busy,
            _ => GroupFailure::Broken,
        }
    }
}

impl From<Failure> for AcquireError {
    fn from(failure: Failure) -> AcquireError {
        match failure {
            Failure::Nvml(error) => AcquireError::Nvml(error),
            Failure::Stalled(why) => AcquireError::Stalled(why),
            Failure::Interrupted(signal) => AcquireError::Interrupted(signal),
        }
    }
}

impl From<LockDirError> for AcquireError {
    fn from(error: LockDirError) -> AcquireError {
        match error {
            LockDirError::Interrupted(signal) => AcquireError::Interrupted(signal),
            other => AcquireError::LockDir(other),
        }
    }
}

/// Other launches' leases as the policy sees them.
fn reservations(leases: &[Lease], machine: &Machine) -> Vec<Reservation> {
    let own_pid = std::process::id();
    leases
        .iter()
        .filter(|lease| lease.pid != own_pid)
        .filter_map(|lease| {
            let gpu = machine.devices().find(|gpu| gpu.uuid.as_deref() == Some(lease.uuid.as_str()))?;
            // What the lease holder's processes already use shows in NVML's numbers; the rest of
            // what it reserved does not yet.
            let shown: u64 = gpu
                .processes
                .iter()
                .flatten()
                .filter(|p| procfs::descends_from(p.pid, lease.pid))
                .filter_map(|p| p.used_bytes)
                .sum();
            Some(Reservation {
                index: gpu.index,
                pid: lease.pid,
                user: lease.user.clone(),
                pending_bytes: lease.reserved_bytes.saturating_sub(shown),
                // A MIG device is a device of its own, too small to share: one lease, one job,
                // whether or not the holder asked for --exclusive.
                exclusive: lease.exclusive || gpu.mig.is_some(),
                queued: false,
            })
        })
        .collect()
}

/// What the waiters ahead keep from this launch, first come first served. Each, in queue order,
/// is tried against the machine as the ones before it would leave it: one that could be served
/// now keeps what it would take (as the lease it is about to hold); one that cannot keeps every
/// GPU it could ever use, so that no later launch starves it. A waiter keeps nothing it could
/// never use.
/// Also says, for each waiter, why it cannot start now ("can start now" if it can).
fn queue_ahead<'a>(
    ahead: impl Iterator<Item = &'a Waiter>,
    machine: &Machine,
    reservations: &mut Vec<Reservation>,
) -> (Vec<HeldBack>, Vec<Queued>) {
    let mut held: Vec<HeldBack> = Vec::new();
    let mut queue = Vec::new();
    let unrestricted = visibility::Visibility::default();
    for waiter in ahead {
        let possible: Vec<u32> = waiter
            .gpus
            .iter()
            .filter_map(|uuid| machine.devices().find(|gpu| gpu.uuid.as_deref() == Some(uuid)))
            .map(|gpu| gpu.index)
            .collect();
        let request = Request {
            count: waiter.needs.count,
            min_free: waiter.needs.min_free,
            max_util: waiter.needs.max_util,
            exclusive: waiter.needs.exclusive,
            devices: Some(possible.iter().map(|&i| DeviceRef::Index(i)).collect()),
            policy: waiter.needs.policy,
            seed: u64::from(waiter.pid),
            ..Request::default()
        };
        let decision = policy::decide(&machine.all_devices(), &unrestricted, &request, reservations, &held);
        let reason = match &decision {
            Ok(Decision { outcome: Outcome::Selected(_), .. }) => "can start now".to_owned(),
            Ok(decision) => decision.why_not(&request),
            Err(error) => error.to_string(),
        };
        queue.push(Queued { waiter: waiter.clone(), reason });
        match decision.map(|d| d.outcome) {
            Ok(Outcome::Selected(chosen)) => {
                for index in chosen {
                    let total = machine.device(index).and_then(|gpu| gpu.memory);
                    reservations.push(Reservation {
                        index,
                        pid: waiter.pid,
                        user: waiter.user.clone(),
                        pending_bytes: waiter
                            .needs
                            .min_free
                            .map(|t| t.bytes_on(total.map_or(0, |m| m.total_bytes)))
                            .unwrap_or(0),
                        exclusive: waiter.needs.exclusive,
                        queued: true,
                    });
                }
            }
            _ => {
                for index in possible {
                    if !held.iter().any(|h| h.index == index) {
                        held.push(HeldBack { index, pid: waiter.pid, user: waiter.user.clone() });
                    }
                }
            }
        }
    }
    (held, queue)
}

/// A launch waiting in the queue, and why it cannot start now.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Queued {
    #[serde(flatten)]
    pub(crate) waiter: Waiter,
    pub(crate) reason: String,
}

/// The chosen GPUs, or exit 75's text. Fallbacks say what they did.
fn chosen_gpus(
    machine: &Machine,
    decision: &Decision,
    requested: Count,
    visibility: &Visibility,
) -> Result<Vec<u32>, String> {
    match &decision.outcome {
        Outcome::Selected(chosen) => Ok(chosen.clone()),
        Outcome::FallbackBest(chosen) => {
            for index in chosen {
                let assessment = decision.assessments.iter().find(|a| a.index == *index);
                if let Some(a) = assessment.filter(|a| !a.eligible()) {
                    tracing::warn!(
                        "taking {} anyway (--fallback best): {}",
                        label(*index),
                        a.reasons().join("; ")
                    );
                }
            }
            Ok(chosen.clone())
        }
        Outcome::FallbackCpu => {
            tracing::warn!("not enough GPUs qualify; running with no GPU visible (--fallback cpu)");
            Ok(Vec::new())
        }
        Outcome::Refused { qualified } => {
            let mut text = refusal(machine, decision, requested, *qualified);
            if visibility.exported && machine.devices().any(|gpu| !visibility.allows(gpu.index)) {
                text.push_str(&format!("\n  {}", visibility::UNDO_EXPORT));
            }
            Err(text)
        }
        Outcome::Impossible(why) => Err(why.clone()),
    }
}

/// Exit 75's explanation: every GPU and why it was turned away.
pub(crate) fn refusal(machine: &Machine, decision: &Decision, requested: Count, qualified: u32) -> String {
    let mut text = format!(
        "not enough GPUs: {requested} requested, {qualified} {}",
        if qualified == 1 { "qualifies" } else { "qualify" }
    );
    if let Some(why) = &decision.set_reason {
        text.push_str(&format!(", but {why}"));
    }
    let sick = decision.assessments.iter().filter(|a| a.only_health()).count() as u32;
    if sick > 0 && qualified + sick >= requested.min {
        text.push_str(
            "; only GPUs turned away for their health could make up the rest (--health ignore would take them)",
        );
    }
    for gpu in machine.devices().filter(|gpu| !gpu.in_mig_mode()) {
        let verdict = match decision.assessments.iter().find(|a| a.index == gpu.index) {
            Some(a) if a.eligible() => "qualifies".to_owned(),
            Some(a) => a.reasons().join("; "),
            None => "not assessed".to_owned(),
        };
        // "GPU 3: free 6.1 GiB < 8 GiB" first (what people grep for), the model after.
        text.push_str(&format!(
            "\n  {}: {verdict} ({})",
            label(gpu.index),
            gpu.name.as_deref().unwrap_or("unknown model")
        ));
    }
    text
}

/// Opens the lock directory as the mode needs it. Only looking: a missing directory holds no
/// reservation (and is not created by a mere --list), and an unusable one is worth a warning,
/// not a failed listing.
fn open_lock_dir(options: &Options) -> Result<Option<LockDir>, AcquireError> {
    match options.lock_dir.as_deref() {
        None => Ok(None),
        Some(path) if options.hold => Ok(Some(LockDir::open(path, true)?)),
        Some(path) if !path.exists() => Ok(None),
        Some(path) => match LockDir::open(path, false) {
            Ok(dir) => Ok(Some(dir)),
            Err(error) => {
                tracing::warn!("{error}; reservations are not shown");
                Ok(None)
            }
        },
    }
}

/// One acquisition's state across its looks at the machine (one look without --wait).
struct Search {
    lock_dir: Option<LockDir>,
    started: Instant,
    /// `None`: no --wait; `Some(None)`: for ever.
    waiting_until: Option<Option<Instant>>,
    ticket: Option<Ticket>,
    /// How often a waiter looks at the machine again.
    pacing: Pacing,
    progress: Progress,
    /// Links do not change: read once for a pool of GPUs, again only if the pool changes.
    links: Option<(Vec<u32>, Topology)>,
}

/// Probe -> decide -> reserve under the directory lock, looked at again until the request is
/// met, or cannot be, or the --wait is over. A waiter queues (a ticket) and sleeps until a
/// lease ends or its turn comes.
pub(crate) fn acquire(
    nvml: &mut NvmlThread,
    receiver: &Receiver,
    inherited: &Inherited,
    options: &Options,
) -> Result<Acquisition, AcquireError> {
    let started = Instant::now();
    let mut search = Search {
        lock_dir: open_lock_dir(options)?,
        started,
        waiting_until: options.wait.until(started),
        ticket: None,
        pacing: Pacing::new(),
        progress: Progress::new(options.json_logs),
        links: None,
    };
    for attempt in 0u64.. {
        let (machine, visibility) = search.look(nvml, receiver, inherited, options)?;
        let known = KnownGpus::of(&machine);
        if attempt == 0 {
            warn_unusable(&machine, &visibility);
        }
        if search.joined_a_covering_queue(&machine, &known, &visibility, options, receiver)? {
            continue;
        }
        let guard = match (&search.lock_dir, options.hold) {
            (Some(dir), true) => Some(lock(dir, receiver)?),
            _ => None,
        };
        let live =
            search.lock_dir.as_ref().map(|dir| live_and_unclaimed(dir, options.hold)).unwrap_or_default();
        // What is ahead of this launch (every waiter, for a launch without a ticket or a listing).
        let waiters = search
            .lock_dir
            .as_ref()
            .map(|dir| ticket::waiters_ahead(dir, &known, search.ticket.as_ref(), options.hold))
            .unwrap_or_default();
        let mut reserved = reservations(&live, &machine);
        let (held, queue) =
            queue_ahead(ticket::ahead(&waiters, search.ticket.as_ref()), &machine, &mut reserved);
        let timed_out = match search.waiting_until {
            None => true,
            Some(None) => false,
            Some(Some(until)) => Instant::now() >= until,
        };
        let (request, over_rule) = capped_request(options, &live)?;
        let topology = machine.topology.as_ref();
        let decision = policy::decide_with_links(
            &machine.all_devices(),
            &visibility,
            &request,
            &reserved,
            &held,
            topology,
        )?;
        if let (Outcome::Impossible(why), false) = (&decision.outcome, options.listing) {
            return Err(AcquireError::Impossible(why.clone()));
        }
        if let Some(why) = over_rule {
            drop(guard);
            if timed_out {
                search.progress.clear();
                let chosen = Err(format!("not enough GPUs now: {why}"));
                return Ok(Acquisition {
                    machine,
                    decision,
                    chosen,
                    leases: Vec::new(),
                    live,
                    queue,
                    group: None,
                });
            }
            search.progress.show_text(&format!("waiting: {why}"));
            receiver.pause(LONGEST_RETRY).map_err(AcquireError::Interrupted)?;
            continue;
        }
        // Anything but a selection (a refusal, a fallback) is the answer only once waiting
        // cannot help: the wait is over, or no state of the machine could do.
        let waiting_helps = !timed_out && decision.never.is_none();
        if matches!(decision.outcome, Outcome::Selected(_)) || !waiting_helps {
            let leases_and_choice = search.take_choice(&machine, &known, &decision, &visibility, options)?;
            drop(guard);
            search.progress.clear();
            let (leases, chosen) = leases_and_choice;
            return Ok(Acquisition { machine, decision, chosen, leases, live, queue, group: None });
        }
        search.queue(&machine, &known, &decision, options)?;
        drop(guard);
        let ahead = ticket::ahead(&waiters, search.ticket.as_ref()).count();
        search.wait_again(&decision, &request, ahead, receiver)?;
    }
    unreachable!("the loop returns")
}

/// The request under max-gpus-per-user: at most what the rule leaves this user now, or (the
/// second value) why it must wait for the user's own reservations to end first.
fn capped_request<'a>(
    options: &Options<'a>,
    live: &[Lease],
) -> Result<(Cow<'a, Request>, Option<String>), AcquireError> {
    let allowance = user_allowance(options, live).map_err(AcquireError::Impossible)?;
    Ok(match allowance {
        Some((allowed, why)) if options.request.count.min > allowed => {
            (Cow::Borrowed(options.request), Some(why))
        }
        Some((allowed, _)) => {
            let most = options.request.count.max.map_or(allowed, |max| max.min(allowed));
            let count = Count { max: Some(most), ..options.request.count };
            (Cow::Owned(Request { count, ..options.request.clone() }), None)
        }
        None => (Cow::Borrowed(options.request), None),
    })
}

/// The first look's warnings: GPUs that cannot be used, and what the inherited visibility says.
fn warn_unusable(machine: &Machine, visibility: &Visibility) {
    for gpu in machine.gpus.iter().filter(|gpu| gpu.error.is_some()) {
        tracing::warn!("GPU {} cannot be used: {}", gpu.index, gpu.error.as_deref().unwrap_or_default());
    }
    for warning in &visibility.warnings {
        tracing::warn!("{warning}");
    }
}

impl Search {
    /// The machine now, with the links between the GPUs that matter where links are wanted.
    fn look(
        &mut self,
        nvml: &mut NvmlThread,
        receiver: &Receiver,
        inherited: &Inherited,
        options: &Options,
    ) -> Result<(Machine, Visibility), AcquireError> {
        let progress = &mut self.progress;
        let mut machine = nvml.probe(receiver, options.nvml_timeout, self.waiting_until, &mut |why| {
            progress.show_text(&format!("waiting (--wait): {why}"))
        })?;
        let visibility = visibility::resolve(&machine, inherited);
        if options.topology {
            let pool = match options.listing {
                true => machine.gpus.iter().filter(|gpu| gpu.error.is_none()).map(|gpu| gpu.index).collect(),
                false => {
                    let count = options.request.count;
                    let most = LINK_POOL.max(4 * count.max.unwrap_or(count.min) as usize);
                    policy::link_candidates(&machine.all_devices(), &visibility, options.request, most)
                }
            };
            if self.links.as_ref().is_none_or(|(known, _)| *known != pool) {
                let read =
                    nvml.links(receiver, options.nvml_timeout, pool.clone()).map_err(AcquireError::from)?;
                self.links = Some((pool, read));
            }
            machine.topology = self.links.as_ref().map(|(_, topology)| topology.clone());
        }
        Ok((machine, visibility))
    }

    /// A waiting launch behind a queue whose tickets cover every GPU it could use joins the
    /// queue without reading it (it could not start now, and the queue wakes it in turn): a
    /// burst of hundreds of launches each reading every ticket was quadratic. It joins without
    /// the directory lock, too: tickets are ordered by their names, and a burst of launches
    /// queued on the lock, each holder preempted by the others on a busy machine, held back
    /// every hand-off for as long as the burst lasted (0.7 s of 400 launches on 2 cores).
    /// Should the queue have emptied meanwhile, it is a head, and looks at once. True: it
    /// joined (and waited for its turn), and looks again.
    fn joined_a_covering_queue(
        &mut self,
        machine: &Machine,
        known: &Arc<KnownGpus>,
        visibility: &Visibility,
        options: &Options,
        receiver: &Receiver,
    ) -> Result<bool, AcquireError> {
        let still_waiting =
            self.waiting_until.is_some_and(|until| until.is_none_or(|until| Instant::now() < until));
        let (Some(dir), None, true, true) = (&self.lock_dir, &self.ticket, options.hold, still_waiting)
        else {
            return Ok(false);
        };
        let quick = policy::decide(&machine.all_devices(), visibility, options.request, &[], &[])?;
        let mask = ticket::mask_of(quick.possible());
        if quick.never.is_some() || mask == 0 {
            return Ok(false);
        }
        let Some(ahead) = ticket::queue_covers(dir, known, mask) else { return Ok(false) };
        let taken = ticket::take(
            dir,
            known,
            possible_uuids(machine, &quick),
            mask,
            &options.request_text,
            needs(&quick, options),
        )?;
        if !taken.is_head(dir) {
            self.progress.show_text(&format!("waiting: {ahead} ahead in the queue for the same GPUs"));
            wait_turn(&taken, dir, receiver, &mut self.pacing, self.waiting_until.flatten())
                .map_err(AcquireError::Interrupted)?;
        }
        self.ticket = Some(taken);
        Ok(true)
    }

    /// The decision's GPUs (or exit 75's explanation), and their leases when the command is to
    /// run: under `--per-rank`, this rank's part of the set, the whole set recorded by its
    /// chooser.
    fn take_choice(
        &self,
        machine: &Machine,
        known: &Arc<KnownGpus>,
        decision: &Decision,
        visibility: &Visibility,
        options: &Options,
    ) -> Result<(Vec<HeldLease>, Result<Selection, String>), AcquireError> {
        let mut chosen = chosen_gpus(machine, decision, options.request.count, visibility);
        if let (Some(_), Ok(indices)) = (&options.group, &mut chosen) {
            // Rank r's GPUs are the r-th of the set in PCI order: rank 0 the lowest index.
            indices.sort_unstable();
        }
        let chosen = chosen.map(|indices| Selection::new(machine, &indices, options.request.count));
        let mut leases = Vec::new();
        if let (true, Some(dir), Ok(selection)) = (options.hold, &self.lock_dir, &chosen) {
            let mut reserve: Vec<(String, u64, u32)> = selection
                .devices
                .iter()
                .filter_map(|device| {
                    let bytes = decision
                        .min_free(options.request.min_free)
                        .map(|t| t.bytes_on(device.total_bytes.unwrap_or(0)))
                        .unwrap_or(0);
                    Some((device.uuid.clone()?, bytes, device.gpu_index))
                })
                .collect();
            if let Some(group) = &options.group {
                if let Some(record) = group.record {
                    record.chosen(&reserve, options.request.exclusive)?;
                }
                reserve = reserve.get(group.own.clone()).map(<[_]>::to_vec).unwrap_or_default();
            }
            leases = lease::reserve(dir, known, &reserve, options.request.exclusive, &options.command)?;
        }
        let chosen = chosen.map_err(|text| match options.wait {
            Wait::Forever | Wait::AtMost(_) => {
                format!("{text}\n  (after waiting {:.0} s)", self.started.elapsed().as_secs_f64())
            }
            Wait::No => text,
        });
        Ok((leases, chosen))
    }

    /// A launch that must wait takes its ticket in the queue (once).
    fn queue(
        &mut self,
        machine: &Machine,
        known: &Arc<KnownGpus>,
        decision: &Decision,
        options: &Options,
    ) -> Result<(), AcquireError> {
        if let (None, Some(dir), true) = (&self.ticket, &self.lock_dir, options.hold) {
            let mask = ticket::mask_of(decision.possible());
            let possible = possible_uuids(machine, decision);
            self.ticket = Some(ticket::take(
                dir,
                known,
                possible,
                mask,
                &options.request_text,
                needs(decision, options),
            )?);
        }
        Ok(())
    }

    /// Says why it waits, then sleeps until its turn or a lease's end (a waiter with a ticket),
    /// or for a while (the safety net; longer for a long queue ahead).
    fn wait_again(
        &mut self,
        decision: &Decision,
        request: &Request,
        ahead: usize,
        receiver: &Receiver,
    ) -> Result<(), AcquireError> {
        let qualified = decision.assessments.iter().filter(|a| a.eligible()).count();
        let needs = crate::select::policy::needs(request);
        self.progress.show(&decision.blockers(), &needs, qualified, ahead, self.started.elapsed());
        match (&self.ticket, &self.lock_dir) {
            (Some(ticket), Some(dir)) if ticket.wake_fd().is_some() => {
                let until = self.waiting_until.flatten();
                wait_turn(ticket, dir, receiver, &mut self.pacing, until).map_err(AcquireError::Interrupted)
            }
            _ => {
                let pause = (HEAD_OF_QUEUE_RETRY * (1 + ahead as u32 / 8)).min(LONGEST_RETRY);
                receiver.pause(pause).map_err(AcquireError::Interrupted)
            }
        }
    }
}

/// The UUIDs of the GPUs that could ever qualify (what a waiter holds back).
fn possible_uuids(machine: &Machine, decision: &Decision) -> Vec<String> {
    decision.possible().iter().filter_map(|index| machine.device(*index)?.uuid.clone()).collect()
}

/// What a waiter's ticket says it needs, so that the queue can tell what it would leave over.
fn needs(decision: &Decision, options: &Options) -> Needs {
    Needs {
        count: options.request.count,
        min_free: decision.min_free(options.request.min_free),
        max_util: options.request.max_util,
        exclusive: options.request.exclusive,
        policy: options.request.policy,
    }
}

/// The directory lock, waited for as a launch waits: a signal that would end gpurun ends the
/// wait.
pub(crate) fn lock(
    dir: &LockDir,
    receiver: &Receiver,
) -> Result<crate::reserve::lockdir::DirLock, LockDirError> {
    dir.lock(&mut |fd, timeout| {
        let (received, _) = receiver.wait(Some(fd), Some(timeout));
        receiver.act_before_launch(&received)
    })
}

/// The live leases, and the GPUs of `--per-rank` groups whose ranks have not taken theirs yet
/// (counted as the leases they are about to be).
pub(crate) fn live_and_unclaimed(dir: &LockDir, may_clean: bool) -> Vec<Lease> {
    // One listing of the directory for both.
    let names = dir.entries();
    let groups: Vec<Vec<u8>> = names.iter().filter(|name| name.starts_with(b"group.")).cloned().collect();
    let mut live = lease::live_among(dir, names, may_clean);
    let unclaimed = crate::reserve::group::unclaimed(dir, groups, &live);
    live.extend(unclaimed);
    live
}

/// After a wake-up that did not start the job (NVML may show a GPU freed a moment after its
/// lease ends), look again this soon, this many times, before sleeping again.
const AFTER_A_WAKE: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
];

/// When a waiter looks at the machine again.
struct Pacing {
    /// The quick looks since a lease's end woke this waiter.
    quick_retries: usize,
    /// Looks left to take at once (below zero: owed), refilled at `LOOKS_PER_SECOND`.
    looks: f64,
    refilled: Instant,
}

/// A waiter's FIFO is anybody's to write (mode 0622): a flood of wake-up bytes must not become a
/// flood of NVML probes and directory reads. A hand-off after a quiet spell looks at once; more
/// than `LOOK_BURST` looks in a row are spaced to `LOOKS_PER_SECOND` (a real hand-off waits at
/// most that spacing behind a flood: its byte stays in the FIFO).
const LOOK_BURST: f64 = 8.0;
const LOOKS_PER_SECOND: f64 = 10.0;

impl Pacing {
    fn new() -> Pacing {
        Pacing { quick_retries: AFTER_A_WAKE.len(), looks: LOOK_BURST, refilled: Instant::now() }
    }

    /// Takes one look: how long to wait for it first (zero when it may be taken now).
    fn take_look(&mut self) -> Duration {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * LOOKS_PER_SECOND;
        self.looks = (self.looks + earned).min(LOOK_BURST) - 1.0;
        self.refilled = now;
        match self.looks {
            0.0.. => Duration::ZERO,
            owed => Duration::from_secs_f64(-owed / LOOKS_PER_SECOND),
        }
    }
}

/// Sleeps until this waiter should look at the machine again (`wait_for_a_reason`), at the pace
/// `Pacing` allows.
fn wait_turn(
    ticket: &Ticket,
    dir: &LockDir,
    receiver: &Receiver,
    pacing: &mut Pacing,
    until: Option<Instant>,
) -> Result<(), i32> {
    wait_for_a_reason(ticket, dir, receiver, &mut pacing.quick_retries, until)?;
    let mut pause = pacing.take_look();
    if let Some(until) = until {
        pause = pause.min(until.saturating_duration_since(Instant::now()));
    }
    // The FIFO is not watched meanwhile: what is written to it is read at the next wait.
    receiver.pause(pause)
}

/// Sleeps until there is a reason to look at the machine again: its FIFO is written (a lease
/// ended, or the waiter ahead left), it is a head and `SAFETY_POLL` has passed, the quick
/// looks after a lease's end, or the wait's end. A waiter behind a head only checks the names
/// every `ROLE_CHECK` (no NVML, no file read). A wake-up is read at the next wait, after the
/// look it caused; only a lease's end earns the quick looks.
fn wait_for_a_reason(
    ticket: &Ticket,
    dir: &LockDir,
    receiver: &Receiver,
    quick_retries: &mut usize,
    until: Option<Instant>,
) -> Result<(), i32> {
    if ticket.drain() {
        *quick_retries = 0;
    }
    if let Some(pause) = AFTER_A_WAKE.get(*quick_retries) {
        *quick_retries += 1;
        let (received, _) = receiver.wait(ticket.wake_fd(), Some(*pause));
        return receiver.act_before_launch(&received);
    }
    loop {
        let head = ticket.is_head(dir);
        let mut timeout = if head { ticket::SAFETY_POLL } else { ticket::ROLE_CHECK };
        if let Some(until) = until {
            timeout = timeout.min(until.saturating_duration_since(Instant::now()));
        }
        let (received, woke) = receiver.wait(ticket.wake_fd(), Some(timeout));
        receiver.act_before_launch(&received)?;
        if woke || head || until.is_some_and(|until| Instant::now() >= until) || ticket.is_head(dir) {
            return Ok(());
        }
    }
}

/// The waiting line on stderr: rewritten in place on a terminal, cut to its width so that it
/// stays one line that can be rewritten and erased (a 600-character line wrapped over several,
/// left copies of itself behind, and stayed after Ctrl-C); with -v, each new reason is also
/// logged whole. Elsewhere (a log file, a cron mail) one whole line every few seconds. Ended
/// when dropped, so that an interrupted wait leaves a clean line.
struct Progress {
    in_place: bool,
    last_line: Option<Instant>,
    shown: bool,
    /// What the last line said, for -v's whole reasons.
    said: String,
}

impl Progress {
    fn new(json_logs: bool) -> Progress {
        Progress {
            in_place: std::io::stderr().is_terminal() && !json_logs,
            last_line: None,
            shown: false,
            said: String::new(),
        }
    }

    /// The blocker first, short, then what is needed and the counts: the part a narrow
    /// terminal cuts is the least telling. `waiting 2 s: GPU 0 reserved exclusively by gpurun
    /// PID 4242 (alice, python); needs 1 GPU, exclusive; 0 qualify now, 0 ahead`.
    fn show(&mut self, blockers: &[String], needs: &str, qualified: usize, ahead: usize, waited: Duration) {
        let counts =
            format!("{qualified} qualif{} now, {ahead} ahead", if qualified == 1 { "ies" } else { "y" });
        let blocked = match blockers.is_empty() {
            true => format!("{ahead} ahead in the queue"),
            false => blockers.join(", "),
        };
        let reason = format!("{blocked}; {needs}; {counts}");
        let text = format!("waiting {}: {reason}", duration::shown(Duration::from_secs(waited.as_secs())));
        self.show_line(&text, &reason);
    }

    fn show_text(&mut self, text: &str) {
        self.show_line(text, text);
    }

    /// `reason`: what the line says but the time waited, which changes every second.
    fn show_line(&mut self, text: &str, reason: &str) {
        if !self.in_place {
            if self.last_line.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
                tracing::info!("{text}");
                self.last_line = Some(Instant::now());
            }
            return;
        }
        if reason != self.said && tracing::enabled!(tracing::Level::DEBUG) {
            self.clear();
            tracing::debug!("{text}");
        }
        self.said = reason.to_owned();
        let columns = crate::process::stdio::terminal_columns(std::io::stderr().as_fd()).unwrap_or(80);
        // Three columns short of the width: the "^C" a terminal echoes at Ctrl-C still fits on
        // the line (a full line made it wrap, and the erase below then missed the line).
        let line = crate::process::stdio::fit(&format!("gpurun: {text}"), columns.saturating_sub(3).max(20));
        let _ = write!(std::io::stderr().lock(), "\r{line}\x1b[K");
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::test_gpu;
    use crate::reserve::ticket::Needs;

    fn waiter(pid: u32, gpus: &[u32], count: u32, machine: &Machine) -> Waiter {
        Waiter {
            pid,
            uid: 0,
            user: "alice".to_owned(),
            since_ns: u64::from(pid),
            gpus: gpus.iter().map(|&i| machine.gpus[i as usize].uuid.clone().unwrap()).collect(),
            request: String::new(),
            needs: Needs {
                count: Count::exactly(count),
                min_free: None,
                max_util: None,
                exclusive: true,
                policy: crate::options::Policy::Index,
            },
        }
    }

    #[test]
    fn waiters_ahead_keep_what_they_would_take_or_all_they_could_use() {
        let machine = Machine {
            driver_version: None,
            cuda_driver_version: None,
            gpus: (0..4).map(test_gpu).collect(),
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        };
        // W1 can be served now and would take GPU 0; W2 needs three of {0, 1, 2}, which it cannot
        // have while W1 takes GPU 0, so it keeps all three; GPU 3 is nobody's.
        let ahead = [waiter(1, &[0, 1, 2, 3], 1, &machine), waiter(2, &[0, 1, 2], 3, &machine)];
        let mut reserved = Vec::new();
        let (held, queue) = queue_ahead(ahead.iter(), &machine, &mut reserved);
        assert_eq!(
            reserved.iter().map(|r| (r.index, r.pid, r.queued)).collect::<Vec<_>>(),
            vec![(0, 1, true)]
        );
        assert_eq!(held.iter().map(|h| (h.index, h.pid)).collect::<Vec<_>>(), vec![(0, 2), (1, 2), (2, 2)]);
        // Each waiter says why it waits (or that it can start).
        assert_eq!(queue[0].reason, "can start now");
        assert!(
            queue[1].reason.starts_with("needs 3 GPUs, exclusive: GPU 0 held for gpurun PID 1"),
            "{}",
            queue[1].reason
        );
        // Eight single-GPU waiters ahead on eight free cards each keep one: nothing is left.
        let machine = Machine {
            driver_version: None,
            cuda_driver_version: None,
            gpus: (0..8).map(test_gpu).collect(),
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        };
        let all: Vec<u32> = (0..8).collect();
        let ahead: Vec<Waiter> = (1..=8).map(|pid| waiter(pid, &all, 1, &machine)).collect();
        let mut reserved = Vec::new();
        assert!(queue_ahead(ahead.iter(), &machine, &mut reserved).0.is_empty());
        let mut taken: Vec<u32> = reserved.iter().map(|r| r.index).collect();
        taken.sort_unstable();
        assert_eq!(taken, all);
    }
}
