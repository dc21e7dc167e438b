//! Stage 5, launch and supervision: start the command with its environment and the caller's
//! signal state, supervise it (signals, reaping, job control, verification beside it), end its
//! leftovers, report, and give back how it ended.

pub(crate) mod deadlines;
pub(crate) mod hold;
pub(crate) mod hooks;
pub(crate) mod job_map;
pub(crate) mod orphans;
pub(crate) mod signals;
pub(crate) mod supervise;

use std::ffi::OsString;
use std::time::{Instant, SystemTime};

use crate::exit_code::Exit;
use crate::history;
use crate::launch::hooks::Hook;
use crate::launch::job_map::JobMap;
use crate::options::{cpus, shell, VerifyMode};
use crate::plan::{affinity, Plan};
use crate::probe::gpu::Machine;
use crate::probe::worker::ProbeThread;
use crate::process::death::Watcher;
use crate::process::procfs;
use crate::process::signals::{default_action, send_to, DefaultAction, Receiver};
use crate::process::spawn::{self, Launch, LaunchError};
use crate::reserve::lease::HeldLease;
use crate::verify::job::JobIdentity;
use crate::verify::monitor::Seen;
use crate::verify::report::Report;
use crate::verify::{ending, prom};

/// What gpurun holds for the command: released once the command and its leftovers are gone,
/// or handed to it with `--exec`.
pub(crate) struct Held {
    pub(crate) leases: Vec<HeldLease>,
    /// `--per-rank`: the hold on the group's record, released right after the leases.
    pub(crate) group: Option<crate::reserve::group::Membership>,
}

impl Held {
    /// The locked descriptors are inherited: the reservation lives as long as the command.
    fn hand_over_to_exec(self) {
        self.leases.into_iter().for_each(HeldLease::hand_over_to_exec);
        self.group.into_iter().for_each(crate::reserve::group::Membership::hand_over_to_exec);
    }
}

/// Signals that reached gpurun in the moment before the command existed go to the command,
/// which is still waiting with its signals blocked: one that would end it ends it as it starts,
/// exactly once (the kernel merges it with one it may already have). A stop signal is kept for
/// after the exec (returned): a command stopped before its exec would hold gpurun in `spawn`.
fn pass_on_pending(receiver: &Receiver, child: u32) -> Vec<i32> {
    let mut after_exec = Vec::new();
    for received in receiver.drain() {
        let signal = received.signal;
        if receiver.caller().is_ignored(signal) {
            continue;
        }
        match default_action(signal) {
            DefaultAction::Terminate => {
                send_to(child, signal);
            }
            DefaultAction::Stop => after_exec.push(signal),
            DefaultAction::Ignore => {}
        }
    }
    after_exec
}

/// start -> supervise (and verify) -> wrap up (report, history, hook) -> how it ended. The
/// plan is every stage's input: the command, its GPUs and variables, how it is run and
/// watched. With `--exec`, gpurun becomes the command instead (returns only if that failed).
pub(crate) fn run_command(
    plan: &Plan,
    machine: &Machine,
    held: Held,
    probe: Option<&mut ProbeThread>,
    receiver: &Receiver,
) -> Result<Exit, LaunchError> {
    let (command, supervision) = (plan.command(), &plan.supervision);
    let identity =
        JobIdentity::of_this_run(plan.rank.as_ref().map(|member| member.per_rank.rank.job.as_str()));
    let mut variables = plan.gpus.variables.clone();
    variables.push(("GPURUN_JOB_ID".to_owned(), identity.id.clone()));
    if supervision.exec {
        tracing::info!("running {} on {} (exec)", shell::quote(command), plan.gpus.selection.describe());
        if supervision.hooks.on_start.is_some() || supervision.hooks.on_exit.is_some() {
            tracing::warn!(
                "--on-start and --on-exit do not run with --exec: gpurun is replaced by the command"
            );
        }
        held.hand_over_to_exec();
        return Err(spawn::exec(&Launch { command, variables: &variables }, receiver.caller()));
    }
    // Created first: an unwritable path fails before the command starts.
    let report_file = match &supervision.records.report_json {
        Some(path) => {
            Some(open_report(path).map_err(|e| LaunchError::ReportFile(path.display().to_string(), e))?)
        }
        None => None,
    };
    let launch = Launch { command, variables: &variables };
    let running = start(&launch, &identity.id, plan, receiver, machine, probe)?;
    let ended = supervise_to_the_end(running, plan, receiver, held);
    Ok(wrap_up((plan, machine, receiver), ended, report_file, &identity))
}

/// The command, started, with what watches it.
struct Running<'a> {
    child: u32,
    /// The parent-death watcher.
    watcher: Option<Watcher>,
    on_start: Option<Hook>,
    watch: Option<supervise::Watch<'a>>,
    leftovers: orphans::Leftovers,
    /// `--job-map-dir`: the job's lines in dcgm-exporter's job map, taken out at the end.
    job_map: Option<JobMap>,
    started: Instant,
    started_at: SystemTime,
}

/// Starts the command (bound to its CPUs, with the signals that came meanwhile passed on),
/// its parent-death watcher, the --on-start hook and the verification beside it.
fn start<'a>(
    launch: &Launch,
    job_id: &str,
    plan: &Plan,
    receiver: &Receiver,
    machine: &Machine,
    probe: Option<&'a mut ProbeThread>,
) -> Result<Running<'a>, LaunchError> {
    let supervision = &plan.supervision;
    if !supervision.keep_orphans && plan.target.gpurun_reaps_leftovers() {
        orphans::become_subreaper();
    }
    // Before the command exists: every child gpurun has now came with it from an exec.
    let inherited = orphans::Inherited::capture();
    let (started, started_at) = (Instant::now(), SystemTime::now());
    // Prepared before the command exists: it looks the client up on PATH.
    let death_kill = supervision.parent_death_signal.and_then(|signal| plan.target.death_kill(signal));
    let mut watcher = None;
    let mut stops = Vec::new();
    let command = launch.command;
    // Before the command starts: dcgm-exporter labels its GPUs' metrics from the first scrape.
    let gpus: Vec<u32> = plan.gpus.selection.devices.iter().map(|device| device.gpu_index).collect();
    let job_map = supervision.records.job_map_dir.as_deref().map(|dir| JobMap::enter(dir, job_id, &gpus));
    let spawned = spawn::spawn(launch, receiver.caller(), |child| {
        watcher =
            supervision.parent_death_signal.and_then(|signal| Watcher::start(child, signal, death_kill));
        // Before the go: the command starts (and execs) on these CPUs.
        if let Some(cpus) = &plan.gpus.cpus {
            if let Err(error) = affinity::bind(child, cpus) {
                tracing::warn!(
                    "--cpu-bind numa: cannot bind the command to CPUs {}: {error}",
                    cpus::list(cpus)
                );
            }
        }
        stops = pass_on_pending(receiver, child);
    });
    let child = match spawned {
        Ok(child) => child,
        Err(error) => {
            watcher.into_iter().for_each(Watcher::stop);
            job_map.into_iter().for_each(JobMap::leave);
            return Err(error);
        }
    };
    for signal in stops {
        send_to(child, signal);
    }
    let command_started = procfs::stat(child).map_or(0, |stat| stat.start_ticks);
    let leftovers = orphans::Leftovers { inherited, command_started, announced: Vec::new() };
    // Under --per-rank every rank says this: each says which it is.
    let rank = plan.rank.as_ref().map(|member| format!(", {}", member.per_rank.rank)).unwrap_or_default();
    tracing::info!("running {} on {}{rank}", shell::quote(command), plan.gpus.selection.describe());
    if let Some(mixed) = &plan.gpus.mixed_models {
        tracing::warn!("{mixed}");
    }
    let on_start = supervision
        .hooks
        .on_start
        .as_deref()
        .and_then(|line| start_hook(line, (command, job_id), child, plan, receiver));
    let watch = probe
        .filter(|_| supervision.verify != VerifyMode::Off && !plan.gpus.selection.is_empty())
        .map(|probe| supervise::Watch::new(probe, plan.monitor(machine)));
    plan.target.warn_at_start();
    Ok(Running { child, watcher, on_start, watch, leftovers, job_map, started, started_at })
}

/// `--on-start`: the command line, with the launch in JSON on its input.
fn start_hook(
    line: &str,
    (command, job_id): (&[OsString], &str),
    child: u32,
    plan: &Plan,
    receiver: &Receiver,
) -> Option<Hook> {
    let selection = &plan.gpus.selection;
    let input = serde_json::json!({
        "command": command.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>(),
        "pid": child,
        "requested": selection.requested.to_string(),
        "count": selection.devices.len(),
        "selected": selection.devices,
    });
    Hook::start(
        "--on-start",
        line,
        &format!("{input}\n"),
        &hook_variables(plan, job_id, None),
        receiver.caller().mask,
    )
}

/// Supervises the command to its end, ends its leftovers (and a hook still running), then
/// releases the GPUs: they are free once the command and its leftovers are gone.
fn supervise_to_the_end(
    running: Running,
    plan: &Plan,
    receiver: &Receiver,
    held: Held,
) -> (ending::Ended, Seen) {
    let supervision = &plan.supervision;
    let Running { child, watcher, mut on_start, mut watch, mut leftovers, job_map, started, started_at } =
        running;
    let supervised = supervise::run(child, receiver, plan, watch.as_mut(), on_start.as_mut());
    if let Some(watch) = watch.as_mut() {
        watch.last_look();
    }
    watcher.into_iter().for_each(Watcher::stop);
    // An --on-start hook still running ends with the command's leftovers: it is never waited
    // for, since the GPUs stay reserved until gpurun exits.
    if let Some(hook) = on_start.as_ref().filter(|hook| hook.is_running()) {
        tracing::info!("the --on-start hook (PID {}) is still running: ending it with the command", hook.pid);
        leftovers.announced = procfs::descendants(hook.pid).into_iter().chain([hook.pid]).collect();
        if supervision.keep_orphans {
            for pid in &leftovers.announced {
                send_to(*pid, libc::SIGTERM);
            }
        }
    }
    if !supervision.keep_orphans {
        orphans::end_all(&leftovers);
    }
    let memory_held =
        watch.as_mut().map(|watch| watch.memory_held(supervision.keep_orphans)).unwrap_or_default();
    job_map.into_iter().for_each(JobMap::leave);
    drop(held);
    let exit = Exit::of(supervised.end, supervised.strict_failure.is_some(), supervised.limited.is_some());
    let seen = match watch.as_mut() {
        Some(watch) => {
            let stuck = watch.stuck();
            watch.monitor.conclude(stuck, memory_held)
        }
        None if supervision.verify == VerifyMode::Off => Seen::unwatched("--verify off"),
        None => Seen::unwatched("no GPU was selected"),
    };
    let limited = supervised.limited;
    (ending::Ended { end: supervised.end, exit, wall: started.elapsed(), started_at, limited }, seen)
}

/// The report (built by verification; logged, as JSON), the history and the --on-exit hook.
fn wrap_up(
    (plan, machine, receiver): (&Plan, &Machine, &Receiver),
    (ended, seen): (ending::Ended, Seen),
    report_file: Option<std::fs::File>,
    identity: &JobIdentity,
) -> Exit {
    let records = &plan.supervision.records;
    let (exit, started_at) = (ended.exit, ended.started_at);
    let summary = ending::report_of(&plan.launched(machine, identity), ended, seen, plan.placement());
    if records.report {
        summary.log();
    }
    if let Some(file) = report_file {
        summary.write_json(file);
    }
    if let Some(path) = &records.prom_file {
        prom::write(path, &summary);
    }
    if let Some(path) = &records.history {
        keep_history(path, &summary, started_at, &plan.asked.request_text);
    }
    if let Some(line) = &plan.supervision.hooks.on_exit {
        let verdict = summary.verification.verdict.map(|v| v.to_string()).unwrap_or_default();
        let variables = hook_variables(plan, &identity.id, Some((exit.status(), verdict)));
        Hook::start("--on-exit", line, &summary.json(), &variables, receiver.caller().mask)
            .into_iter()
            .for_each(Hook::wait_out);
    }
    exit
}

/// The `--report-json` file, created or truncated. Opened without blocking (signals are
/// blocked: a FIFO nobody reads must not hold gpurun before the command starts), then made
/// blocking again for the write at the end (a pipe to `jq` that reads).
fn open_report(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ENXIO) => std::io::Error::other("a FIFO that no process reads"),
            _ => error,
        })?;
    let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL)?;
    let blocking = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(blocking))?;
    Ok(file)
}

/// What a hook finds in its environment besides gpurun's own: the chosen GPUs, the job id and,
/// at the end, gpurun's exit status and the verdict (empty when nothing was checked).
fn hook_variables(plan: &Plan, job_id: &str, ended: Option<(i32, String)>) -> Vec<(String, String)> {
    let mut variables: Vec<(String, String)> = ["GPURUN_GPUS", "GPURUN_GPU_UUIDS"]
        .into_iter()
        .map(|name| (name.to_owned(), plan.gpus.variable(name).unwrap_or_default().to_owned()))
        .collect();
    variables.push(("GPURUN_JOB_ID".to_owned(), job_id.to_owned()));
    if let Some((status, verdict)) = ended {
        variables.push(("GPURUN_EXIT_STATUS".to_owned(), status.to_string()));
        variables.push(("GPURUN_VERDICT".to_owned(), verdict));
    }
    variables
}

/// Appends the run to the history; a failure is a debug line, never the job's problem.
fn keep_history(path: &std::path::Path, report: &Report, started: std::time::SystemTime, request: &str) {
    let serde_json::Value::Object(fields) = serde_json::to_value(report).expect("plain data") else {
        return;
    };
    let record = history::Record {
        started: started.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        user: procfs::user_name(nix::unistd::getuid().as_raw()),
        directory: std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        request: request.to_owned(),
        report: fields,
    };
    match history::append(path, &record) {
        Ok(()) => {}
        // A history someone else could have planted (a kept HOME under sudo): said, not used.
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!("the run is not kept in the history: {error}")
        }
        Err(error) => tracing::debug!("cannot keep the run in the history {}: {error}", path.display()),
    }
}
