//! probe -> candidates -> filter and rank -> reserve, under the lock directory, retried while
//! `--wait` allows. Two gpurun started in the same second never both take the one free GPU:
//! selection and reservation happen under one exclusive lock, and other launches' reserved
//! memory counts until their processes show up in NVML.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::output::listing;
use crate::probe::gpu::Machine;
use crate::probe::nvml::Session;
use crate::probe::procfs;
use crate::reserve::lockdir::{HeldLease, Lease, LockDir};
use crate::select::policy::{self, Decision, Outcome, Request, Reservation};
use crate::select::visibility::{self, Inherited};
use crate::Error;

/// Between two tries while waiting: the head of the queue looks often, the others less the
/// further back they are (many waiters must not keep the machine busy).
const HEAD_OF_QUEUE_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(1);
/// On a non-terminal stderr, one progress line this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub struct Options<'a> {
    pub request: &'a Request,
    /// `None`: `--no-lock`.
    pub lock_dir: Option<PathBuf>,
    /// `Some(None)`: wait forever; `Some(Some(d))`: at most d.
    pub wait: Option<Option<Duration>>,
    /// Take leases (running the command) rather than only look (list, dry run, export).
    pub hold: bool,
    /// For the lease files.
    pub command: String,
}

pub struct Acquisition {
    pub machine: Machine,
    pub decision: Decision,
    /// The chosen NVML indices, or exit 75's explanation.
    pub chosen: Result<Vec<u32>, String>,
    /// Held until the command ends (or handed to it with --exec).
    pub leases: Vec<HeldLease>,
    /// Everyone's live reservations, for --list.
    pub live: Vec<Lease>,
}

impl Acquisition {
    /// `--gpus 0` without NVML: nothing probed, nothing chosen, nothing reserved.
    pub fn no_gpu() -> Acquisition {
        Acquisition {
            machine: Machine { driver_version: None, cuda_driver_version: None, gpus: Vec::new() },
            decision: Decision { assessments: Vec::new(), outcome: Outcome::Selected(Vec::new()) },
            chosen: Ok(Vec::new()),
            leases: Vec::new(),
            live: Vec::new(),
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
            let gpu = machine.gpus.iter().find(|gpu| gpu.uuid.as_deref() == Some(lease.uuid.as_str()))?;
            // Once the lease holder's processes show in NVML, NVML's numbers hold its memory.
            let visible = gpu.processes.iter().flatten().any(|p| procfs::descends_from(p.pid, lease.pid));
            Some(Reservation {
                index: gpu.index,
                pid: lease.pid,
                user: lease.user.clone(),
                pending_bytes: if visible { 0 } else { lease.reserved_bytes },
                exclusive: lease.exclusive,
            })
        })
        .collect()
}

/// The chosen GPUs, or exit 75's text. Fallbacks say what they did.
fn chosen_gpus(machine: &Machine, decision: &Decision, requested: u32) -> Result<Vec<u32>, String> {
    match &decision.outcome {
        Outcome::Selected(chosen) => Ok(chosen.clone()),
        Outcome::FallbackBest(chosen) => {
            for index in chosen {
                let assessment = decision.assessments.iter().find(|a| a.index == *index);
                if let Some(a) = assessment.filter(|a| !a.eligible()) {
                    tracing::warn!("taking GPU {index} anyway (--fallback best): {}", a.reasons().join("; "));
                }
            }
            Ok(chosen.clone())
        }
        Outcome::FallbackCpu => {
            tracing::warn!("not enough GPUs qualify; running with no GPU visible (--fallback cpu)");
            Ok(Vec::new())
        }
        Outcome::Refused { qualified } => {
            Err(listing::refusal(machine, &decision.assessments, requested, *qualified))
        }
    }
}

pub fn acquire(session: &Session, inherited: &Inherited, options: &Options) -> Result<Acquisition, Error> {
    let lock_dir = match options.lock_dir.as_deref() {
        None => None,
        Some(path) if options.hold => Some(LockDir::open(path)?),
        // Only looking: a missing directory holds no reservation (and is not created by a
        // mere --list), and an unusable one is worth a warning, not a failed listing.
        Some(path) if !path.exists() => None,
        Some(path) => match LockDir::open(path) {
            Ok(dir) => Some(dir),
            Err(error) => {
                tracing::warn!("{error}; reservations are not shown");
                None
            }
        },
    };
    let started = Instant::now();
    let mut ticket = None;
    let mut progress = Progress::new();
    for attempt in 0u64.. {
        let machine = session.probe()?;
        let visibility = visibility::resolve(&machine.gpus, inherited);
        if attempt == 0 {
            for gpu in machine.gpus.iter().filter(|gpu| gpu.error.is_some()) {
                tracing::warn!(
                    "GPU {} cannot be used: {}",
                    gpu.index,
                    gpu.error.as_deref().unwrap_or_default()
                );
            }
            for warning in &visibility.warnings {
                tracing::warn!("{warning}");
            }
        }
        let guard = lock_dir.as_ref().map(|dir| dir.lock(options.hold)).transpose()?;
        let live = lock_dir.as_ref().map(|dir| dir.live_leases(options.hold)).unwrap_or_default();
        let timed_out = match options.wait {
            None => true,
            Some(None) => false,
            Some(Some(limit)) => started.elapsed() >= limit,
        };
        // While waiting, a fallback is the answer only once the wait is over.
        let waiting_request;
        let request = if timed_out {
            options.request
        } else {
            waiting_request = Request { fallback: None, ..options.request.clone() };
            &waiting_request
        };
        let ahead = match (&lock_dir, &ticket) {
            (Some(dir), Some(ticket)) => dir.ahead_of(ticket, options.hold),
            _ => 0,
        };
        let decision = policy::decide(&machine.gpus, &visibility, request, &reservations(&live, &machine))?;
        let chosen = chosen_gpus(&machine, &decision, request.count);
        if (chosen.is_ok() && ahead == 0) || timed_out {
            let mut leases = Vec::new();
            if let (true, Some(dir), Ok(indices)) = (options.hold, &lock_dir, &chosen) {
                let reserve: Vec<(String, u64)> = indices
                    .iter()
                    .filter_map(|index| machine.gpus.iter().find(|gpu| gpu.index == *index))
                    .filter_map(|gpu| {
                        let total = gpu.memory.map(|m| m.total_bytes).unwrap_or(0);
                        let bytes = request.min_free.map(|t| t.bytes_on(total)).unwrap_or(0);
                        Some((gpu.uuid.clone()?, bytes))
                    })
                    .collect();
                leases = dir.reserve(&reserve, request.exclusive, &options.command)?;
            }
            drop(guard);
            progress.finish();
            let chosen = chosen.map_err(|text| match options.wait {
                Some(_) => format!("{text}\n  (after waiting {:.0} s)", started.elapsed().as_secs_f64()),
                None => text,
            });
            return Ok(Acquisition { machine, decision, chosen, leases, live });
        }
        if ticket.is_none() {
            if let Some(dir) = &lock_dir {
                ticket = Some(dir.take_ticket()?);
            }
        }
        drop(guard);
        let qualified = decision.assessments.iter().filter(|a| a.eligible()).count();
        progress.show(options.request.count, qualified, ahead, started.elapsed());
        std::thread::sleep((HEAD_OF_QUEUE_RETRY * (1 + ahead as u32 / 8)).min(LONGEST_RETRY));
    }
    unreachable!("the loop returns")
}

/// The waiting line on stderr: rewritten in place on a terminal, one line every few seconds
/// otherwise (a log file or a cron mail should not fill up).
struct Progress {
    on_terminal: bool,
    last_line: Option<Instant>,
    shown: bool,
}

impl Progress {
    fn new() -> Progress {
        Progress { on_terminal: std::io::stderr().is_terminal(), last_line: None, shown: false }
    }

    fn show(&mut self, wanted: u32, qualified: usize, ahead: usize, waited: Duration) {
        let text = format!(
            "waiting for {wanted} GPU{}: {qualified} qualif{} now, {ahead} ahead in the queue, waited {} s",
            if wanted == 1 { "" } else { "s" },
            if qualified == 1 { "ies" } else { "y" },
            waited.as_secs()
        );
        if self.on_terminal && !crate::output::logging::is_json() {
            let _ = write!(std::io::stderr().lock(), "\rgpurun: {text}\x1b[K");
            self.shown = true;
        } else if self.last_line.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
            tracing::info!("{text}");
            self.last_line = Some(Instant::now());
        }
    }

    fn finish(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}
