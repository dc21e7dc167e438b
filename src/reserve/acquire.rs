//! probe -> candidates -> filter and rank -> reserve, under the directory lock, retried while
//! `--wait` allows. Two gpurun started in the same second never both take the one free GPU:
//! selection and reservation happen under one exclusive lock, other launches' reserved memory
//! counts until their processes show up in NVML, and GPUs an earlier waiter could use are held
//! for it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::options::count::Count;
use crate::options::Policy;
use crate::options::Wait;
use crate::probe::gpu::{Machine, Topology};
use crate::probe::worker::ProbeThread;
use crate::process::signals::Receiver;
use crate::reserve::allowance;
pub(crate) use crate::reserve::error::AcquireError;
use crate::reserve::group::{Found, GroupFailure, Member, Membership, State};
use crate::reserve::holds::{chosen_gpus, queue_ahead, reservations, Queued};
use crate::reserve::joining::{self, Rank, Waited};
use crate::reserve::lease::{self, Claim, HeldLease, Lease};
use crate::reserve::lockdir::{DirLock, LockDir, LockDirError};
use crate::reserve::stalled::{StalledHeads, LOCK_CONTENDED};
use crate::reserve::ticket::{self, KnownGpus, Needs, Ticket};
use crate::reserve::waiting::{read_deferred, wait_turn, Pacing, Progress};
use crate::runtime::{Inherited, Visibility};
use crate::select::deferred;
use crate::select::policy::{self, Decision, Outcome, Request};
use crate::select::selection::Selection;

/// A multi-GPU request reads the links among at most this many of the best-ranked GPUs (or four
/// times the GPUs it asks for): links are read per pair.
const LINK_POOL: usize = 16;

/// Between two tries while waiting: the head of the queue looks often, the others less the
/// further back they are (many waiters must not keep the machine busy).
const HEAD_OF_QUEUE_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(1);
/// How long a rank whose chooser is still choosing sleeps between looks at the group's record
/// (a few ranks, a cheap look: no NVML).
const LOOK_AT_THE_GROUP_AGAIN: Duration = Duration::from_millis(20);

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
    pub(crate) group: Option<GroupShare>,
    /// What the probe asks of each GPU beyond what every request needs.
    pub(crate) needs: crate::probe::Needs,
    /// `lock_dir` is the machine's shared one (the system file's, else `/run/lock/gpurun`).
    pub(crate) system_lock_dir: bool,
}

/// `--per-rank`: what the acquisition needs to know of the rank's group.
pub(crate) struct GroupShare {
    /// This rank's positions in the set (PCI order).
    pub(crate) own: std::ops::Range<usize>,
    /// The rank, as the group's record names it.
    pub(crate) member: Member,
    /// `torchrun local rank 1 of 4`, for messages.
    pub(crate) who: String,
    /// The variable that numbers the ranks (`LOCAL_RANK`), for messages.
    pub(crate) rank_variable: &'static str,
}

/// What an acquisition got: the machine as it was seen, the decision, the GPUs (or exit 75's
/// explanation) and their leases.
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
            machine: Machine::of(Default::default(), Vec::new()),
            decision: Decision::selected(Vec::new()),
            chosen: Ok(Selection::none(requested)),
            leases: Vec::new(),
            live: Vec::new(),
            queue: Vec::new(),
            group: None,
        }
    }
}

/// Opens the lock directory as the mode needs it. Only looking: a missing directory holds no
/// reservation (and is not created by a mere --list); an unusable one is worth a warning.
fn open_lock_dir(options: &Options) -> Result<Option<LockDir>, AcquireError> {
    match options.lock_dir.as_deref() {
        None => Ok(None),
        Some(path) if options.hold => {
            // Only root makes the machine's: a user's would be theirs, refused by all others.
            let may_make = !options.system_lock_dir || nix::unistd::geteuid().is_root();
            if !may_make && std::fs::symlink_metadata(path).is_err() {
                return Err(LockDirError::NotMade { path: path.display().to_string() }.into());
            }
            Ok(Some(LockDir::open(path, may_make)?))
        }
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
    /// The first look's warnings were said.
    warned: bool,
    /// `--per-rank`, holding GPUs: this rank's place in its group, once found.
    role: Option<Role>,
    /// A rank joining a chosen set: the machine it probed outside the lock, looked at again
    /// under it.
    probed: Option<Machine>,
    /// A rank joining: how long it has waited for the set.
    waited: Option<Waited>,
    /// The waiters ahead that could start and did not, and since when.
    stalled: StalledHeads,
}

/// A `--per-rank` rank's place in its group.
enum Role {
    /// The first of the group here: it chooses the whole set, by the usual rules, and records
    /// it (or why it could not) for the others.
    Chooser(Membership),
    /// It takes its own part of the set the chooser records.
    Joiner(Membership),
}

impl Role {
    fn membership(self) -> Membership {
        match self {
            Role::Chooser(membership) | Role::Joiner(membership) => membership,
        }
    }
}

/// What one look came to.
enum Step {
    /// Take these leases, under the directory lock the look holds: the acquisition is complete.
    Take(Take),
    /// The answer, with nothing (more) to lease: a listing, a dry run, a refusal.
    Answer(Acquisition),
    /// Look again (after waiting, where waiting was due).
    Again,
}

/// The leases a look decided on, and what they complete.
struct Take {
    guard: Option<DirLock>,
    known: Arc<KnownGpus>,
    /// What this launch leases: its GPUs, or a rank's own part of its group's set.
    claims: Vec<Claim>,
    /// A group's chooser: the whole set, recorded for the other ranks first.
    set: Option<Vec<Claim>>,
    exclusive: bool,
    acquisition: Acquisition,
}

/// Probe -> decide -> reserve under the directory lock, looked at again until the request is
/// met, or cannot be, or the --wait is over. What it waits for: GPUs that meet the request, or,
/// for a `--per-rank` rank that is not its group's chooser, the set the chooser records. A
/// waiter for GPUs queues (a ticket) and sleeps until a lease ends or its turn comes. Leases
/// are taken in one place (`Search::take`), whatever was waited for.
pub(crate) fn acquire(
    prober: &mut ProbeThread,
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
        warned: false,
        role: None,
        probed: None,
        waited: None,
        stalled: StalledHeads::default(),
    };
    let acquired = search.run(prober, receiver, inherited, options);
    let role = search.role.take();
    if let Some(Role::Chooser(membership)) = &role {
        // The others fail with the chooser's reason at once, instead of each choosing again.
        match &acquired {
            Ok(Acquisition { chosen: Err(why), .. }) => membership.failed(why, GroupFailure::Busy),
            Ok(_) | Err(AcquireError::Interrupted(_)) => {}
            Err(error) => membership.failed(&error.to_string(), GroupFailure::Broken),
        }
    }
    let group = role.map(Role::membership);
    Ok(Acquisition { group, ..acquired? })
}

impl Search {
    /// The loop: one look at what is waited for at a time, until a look comes to leases or an
    /// answer.
    fn run(
        &mut self,
        prober: &mut ProbeThread,
        receiver: &Receiver,
        inherited: &Inherited,
        options: &Options,
    ) -> Result<Acquisition, AcquireError> {
        loop {
            let joining = match (&options.group, &self.role, &self.lock_dir, options.hold) {
                (Some(group), None | Some(Role::Joiner(_)), Some(_), true) => Some(group),
                _ => None,
            };
            let step = match joining {
                Some(group) => self.look_at_group(prober, receiver, inherited, options, group)?,
                None => self.look_for_gpus(prober, receiver, inherited, options)?,
            };
            match step {
                Step::Take(take) => return self.take(take, options),
                Step::Answer(acquisition) => {
                    self.progress.clear();
                    return Ok(acquisition);
                }
                Step::Again => {}
            }
        }
    }

    /// Leases the claims under the look's lock (a chooser records its group's set first).
    fn take(&mut self, take: Take, options: &Options) -> Result<Acquisition, AcquireError> {
        let Take { guard, known, claims, set, exclusive, mut acquisition } = take;
        if let (Some(set), Some(Role::Chooser(membership))) = (&set, &self.role) {
            membership.chosen(set, exclusive)?;
        }
        if let (true, Some(dir)) = (options.hold, &self.lock_dir) {
            acquisition.leases = lease::reserve(dir, &known, &claims, exclusive, &options.command)?;
        }
        drop(guard);
        self.progress.clear();
        Ok(acquisition)
    }

    /// A look at the machine for GPUs that meet the request: under the directory lock, the
    /// live leases and the queue ahead, then the decision; a waiter queues and waits.
    fn look_for_gpus(
        &mut self,
        prober: &mut ProbeThread,
        receiver: &Receiver,
        inherited: &Inherited,
        options: &Options,
    ) -> Result<Step, AcquireError> {
        let (mut machine, visibility) = self.look(prober, receiver, inherited, options)?;
        let known = KnownGpus::of(&machine);
        if !std::mem::replace(&mut self.warned, true) {
            warn_unusable(&machine, &visibility);
        }
        if self.joined_a_covering_queue(&machine, &known, &visibility, options, receiver)? {
            return Ok(Step::Again);
        }
        let guard = match (&self.lock_dir, options.hold) {
            (Some(dir), true) => {
                let asked = Instant::now();
                let guard = lock(dir, receiver)?;
                if asked.elapsed() > LOCK_CONTENDED {
                    self.stalled.lock_was_contended(Instant::now());
                }
                Some(guard)
            }
            _ => None,
        };
        let live =
            self.lock_dir.as_ref().map(|dir| live_and_unclaimed(dir, options.hold)).unwrap_or_default();
        // What is ahead of this launch (every waiter, for a launch without a ticket or a listing).
        let waiters = self
            .lock_dir
            .as_ref()
            .map(|dir| ticket::waiters_ahead(dir, &known, self.ticket.as_ref(), options.hold))
            .unwrap_or_default();
        // Each waiter's claim is worked out from every GPU as it is.
        let unread = if waiters.is_empty() { Vec::new() } else { machine.deferred() };
        machine.settle(&unread, read_deferred(prober, receiver, options.nvml_timeout, self.wait(), &unread)?);
        let mut reserved = reservations(&live, &machine);
        let (mut held, mut queue) =
            queue_ahead(ticket::ahead(&waiters, self.ticket.as_ref()), &machine, &mut reserved);
        // A waiter ahead that could have started for a while and has not holds nothing.
        let passed = match options.hold {
            true => self.stalled.passed_over(&queue, Instant::now()),
            false => Vec::new(),
        };
        if !passed.is_empty() {
            reserved = reservations(&live, &machine);
            let kept = ticket::ahead(&waiters, self.ticket.as_ref()).filter(|w| !passed.contains(&w.key()));
            (held, queue) = queue_ahead(kept, &machine, &mut reserved);
        }
        let timed_out = self.wait_is_over();
        // Every request is held to it, a dry run and an export too (they show what the launch
        // would get, rules included); a listing is no request.
        let rule = options.max_gpus_per_user.as_ref().filter(|_| !options.listing);
        let (request, over_rule) = allowance::capped_request(options.request, rule, &live)?;
        let topology = machine.topology.clone();
        let partial = waiters.is_empty() && request.policy != Policy::Random && !options.listing;
        let decision = deferred::decide_reading(
            &mut machine,
            partial,
            |gpus| {
                policy::decide_with_links(gpus, &visibility, &request, &reserved, &held, topology.as_ref())
                    .map_err(AcquireError::from)
            },
            |gpus| read_deferred(prober, receiver, options.nvml_timeout, self.wait(), gpus),
        )?;
        if let (Outcome::Impossible(why), false) = (&decision.outcome, options.listing) {
            return Err(AcquireError::Impossible(why.clone()));
        }
        if let Some(why) = over_rule {
            drop(guard);
            if timed_out {
                let chosen = Err(format!("not enough GPUs now: {why}"));
                let acquisition =
                    Acquisition { machine, decision, chosen, leases: Vec::new(), live, queue, group: None };
                return Ok(Step::Answer(acquisition));
            }
            self.progress.show_text(&format!("waiting: {why}"));
            receiver.pause(LONGEST_RETRY).map_err(AcquireError::Interrupted)?;
            return Ok(Step::Again);
        }
        // Anything but a selection (a refusal, a fallback) is the answer only once waiting
        // cannot help: the wait is over, or no state of the machine could do.
        let waiting_helps = !timed_out && decision.never.is_none();
        if matches!(decision.outcome, Outcome::Selected(_)) || !waiting_helps {
            let (chosen, claims, set) = self.choice(&machine, &decision, &visibility, options);
            let exclusive = options.request.exclusive;
            let acquisition =
                Acquisition { machine, decision, chosen, leases: Vec::new(), live, queue, group: None };
            return Ok(Step::Take(Take { guard, known, claims, set, exclusive, acquisition }));
        }
        self.queue(&machine, &known, &decision, options)?;
        drop(guard);
        let ahead = ticket::ahead(&waiters, self.ticket.as_ref()).count();
        self.wait_again(&decision, &request, ahead, receiver)?;
        Ok(Step::Again)
    }

    /// The decision's GPUs (or exit 75's explanation) and what to lease of them: under
    /// `--per-rank`, this rank's part of the set, and the whole set for its chooser to record.
    fn choice(
        &self,
        machine: &Machine,
        decision: &Decision,
        visibility: &Visibility,
        options: &Options,
    ) -> (Result<Selection, String>, Vec<Claim>, Option<Vec<Claim>>) {
        let mut chosen = chosen_gpus(machine, decision, options.request.count, visibility);
        if let (Some(_), Ok(indices)) = (&options.group, &mut chosen) {
            // Rank r's GPUs are the r-th of the set in PCI order: rank 0 the lowest index.
            indices.sort_unstable();
        }
        let chosen = chosen.map(|indices| Selection::new(machine, &indices, options.request.count));
        let min_free = decision.min_free(options.request.min_free);
        let mut claims: Vec<Claim> = match (&chosen, options.hold && self.lock_dir.is_some()) {
            (Ok(selection), true) => selection
                .devices
                .iter()
                .filter_map(|device| {
                    let total = device.total_bytes.unwrap_or(0);
                    let reserved_bytes = min_free.map(|t| t.bytes_on(total)).unwrap_or(0);
                    Some(Claim { uuid: device.lease_id.clone()?, index: device.gpu_index, reserved_bytes })
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut set = None;
        if let Some(group) = &options.group {
            // What the chooser chose is recorded; what it could not do is recorded after.
            if matches!(self.role, Some(Role::Chooser(_))) && chosen.is_ok() {
                set = Some(claims.clone());
            }
            claims = claims.get(group.own.clone()).map(<[_]>::to_vec).unwrap_or_default();
        }
        let chosen = chosen.map_err(|text| match options.wait {
            Wait::Forever | Wait::AtMost(_) => {
                format!("{text}\n  (after waiting {:.0} s)", self.started.elapsed().as_secs_f64())
            }
            Wait::No => text,
        });
        (chosen, claims, set)
    }

    /// A `--per-rank` rank's look at its group, under the directory lock: the first of the
    /// group here becomes its chooser (and looks for GPUs from then on); another waits for the
    /// set, then claims its own part of it.
    fn look_at_group(
        &mut self,
        prober: &mut ProbeThread,
        receiver: &Receiver,
        inherited: &Inherited,
        options: &Options,
        group: &GroupShare,
    ) -> Result<Step, AcquireError> {
        // Without a lock directory there is no group to find (run() does not come here then).
        let Some(dir) = &self.lock_dir else {
            return self.look_for_gpus(prober, receiver, inherited, options);
        };
        let guard = lock(dir, receiver)?;
        let membership = match crate::reserve::group::find_or_make(dir, &group.member)? {
            Found::Choose(membership) => {
                drop(guard);
                tracing::debug!(
                    "{}: the first of the group here, choosing {} GPUs for it",
                    group.who,
                    options.request.count
                );
                self.role = Some(Role::Chooser(membership));
                return Ok(Step::Again);
            }
            Found::Joined(membership) => membership,
        };
        let rank = Rank {
            who: &group.who,
            variable: group.rank_variable,
            member: &group.member,
            own: group.own.clone(),
        };
        let record = membership.record.clone();
        match &record.state {
            State::Failed { why, failure } => Err(joining::chooser_failed(&rank, &record, why, *failure)),
            State::Choosing => {
                drop(guard);
                drop(membership);
                let waited = self.waited.get_or_insert_with(|| Waited {
                    since: self.started,
                    deadline: set_deadline(self.started, options.wait, group.member.timeout),
                    said: false,
                });
                joining::while_choosing(&rank, &record, waited)?;
                receiver.pause(LOOK_AT_THE_GROUP_AGAIN).map_err(AcquireError::Interrupted)?;
                Ok(Step::Again)
            }
            State::Chosen { gpus, exclusive, .. } => {
                let Some(probed) = self.probed.take() else {
                    // Probed outside the lock, then looked at again under it.
                    drop(guard);
                    drop(membership);
                    self.probed = Some(prober.probe(
                        receiver,
                        options.nvml_timeout,
                        None,
                        &mut |_| {},
                        options.needs,
                    )?);
                    return Ok(Step::Again);
                };
                let mut probed = probed;
                let visibility = crate::runtime::visibility(&probed, inherited);
                let indices = joining::check_set(&rank, &record, gpus, &probed, &visibility)?;
                // The set's GPUs are read whole, as a chooser reads what it takes.
                let unread: Vec<u32> =
                    probed.deferred().into_iter().filter(|gpu| indices.contains(gpu)).collect();
                let wait = (self.waiting_until, &mut self.progress); // fields apart: `dir` borrows self
                let read = read_deferred(prober, receiver, options.nvml_timeout, wait, &unread)?;
                probed.settle(&unread, read);
                let count = options.request.count;
                if gpus.is_empty() {
                    // The chooser runs with no GPU (--fallback cpu): so does every rank.
                    drop(guard);
                    tracing::warn!(
                        "{}: the group runs with no GPU visible (its chooser's --fallback cpu)",
                        group.who
                    );
                    self.role = Some(Role::Joiner(membership));
                    return Ok(Step::Answer(Acquisition { machine: probed, ..Acquisition::no_gpu(count) }));
                }
                // Real leases only: the group's own hold on this rank's GPU is not in the way.
                let live = lease::live(dir, true);
                let claims = joining::own_part(&rank, gpus, &live)?;
                self.role = Some(Role::Joiner(membership));
                Ok(Step::Take(Take {
                    guard: Some(guard),
                    ..joined(probed, indices, count, live, claims, *exclusive)
                }))
            }
        }
    }
}

/// A joining rank's take: the group's set is its selection, its own part of it what it leases
/// (the caller adds the directory lock it holds).
fn joined(
    probed: Machine,
    indices: Vec<u32>,
    count: Count,
    live: Vec<Lease>,
    claims: Vec<Claim>,
    exclusive: bool,
) -> Take {
    let known = KnownGpus::of(&probed);
    let selection = Selection::new(&probed, &indices, count);
    let acquisition = Acquisition {
        machine: probed,
        decision: Decision::selected(indices),
        chosen: Ok(selection),
        leases: Vec::new(),
        live,
        queue: Vec::new(),
        group: None,
    };
    Take { guard: None, known, claims, set: None, exclusive, acquisition }
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
        prober: &mut ProbeThread,
        receiver: &Receiver,
        inherited: &Inherited,
        options: &Options,
    ) -> Result<(Machine, Visibility), AcquireError> {
        let progress = &mut self.progress;
        let mut machine = prober.probe(
            receiver,
            options.nvml_timeout,
            self.waiting_until,
            &mut |why| progress.show_text(&format!("waiting (--wait): {why}")),
            options.needs,
        )?;
        let visibility = crate::runtime::visibility(&machine, inherited);
        if options.topology {
            let pool = match options.listing {
                true => machine.gpus.iter().filter(|gpu| gpu.error.is_none()).map(|gpu| gpu.index).collect(),
                false => {
                    let count = options.request.count;
                    let most = LINK_POOL.max(4 * count.max.unwrap_or(count.min) as usize);
                    policy::link_candidates(
                        &deferred::best_case(&machine),
                        &visibility,
                        options.request,
                        most,
                    )
                }
            };
            if self.links.as_ref().is_none_or(|(known, _)| *known != pool) {
                let read =
                    prober.links(receiver, options.nvml_timeout, pool.clone()).map_err(AcquireError::from)?;
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
        let still_waiting = !self.wait_is_over();
        let (Some(dir), None, true, true) = (&self.lock_dir, &self.ticket, options.hold, still_waiting)
        else {
            return Ok(false);
        };
        let quick = policy::decide(&deferred::best_case(machine), visibility, options.request, &[], &[])?;
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

    /// How long this acquisition may wait, and the line that says why it does.
    fn wait(&mut self) -> (Option<Option<Instant>>, &mut Progress) {
        (self.waiting_until, &mut self.progress)
    }

    /// Whether waiting can help no more: no `--wait`, or its end has come.
    fn wait_is_over(&self) -> bool {
        match self.waiting_until {
            None => true,
            Some(None) => false,
            Some(Some(until)) => Instant::now() >= until,
        }
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
    decision.possible().iter().filter_map(|index| machine.device(*index)?.lease_id()).collect()
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

/// Until when a rank waits for its group's set: `--rank-timeout` from its start, or as long as
/// its `--wait` (for ever, or the longer of the two), since a chooser waiting for GPUs holds
/// the others as long as its wait may last.
fn set_deadline(started: Instant, wait: Wait, rank_timeout: Duration) -> Option<Instant> {
    match wait {
        Wait::No => Some(started + rank_timeout),
        Wait::Forever => None,
        Wait::AtMost(wait) => Some(started + wait.max(rank_timeout)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_waits_for_its_set_as_long_as_its_rank_timeout_or_its_wait_if_longer() {
        let (now, minute) = (Instant::now(), Duration::from_secs(60));
        assert_eq!(set_deadline(now, Wait::No, minute), Some(now + minute));
        assert_eq!(set_deadline(now, Wait::Forever, minute), None);
        assert_eq!(set_deadline(now, Wait::AtMost(minute * 5), minute), Some(now + minute * 5));
        assert_eq!(set_deadline(now, Wait::AtMost(Duration::from_secs(1)), minute), Some(now + minute));
    }
}
