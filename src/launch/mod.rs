//! Stage 5, launch and supervision: start the command with its environment and the caller's
//! signal state, supervise it (signals, reaping, job control, verification beside it), end its
//! leftovers, report, and give back how it ended.

pub mod affinity;
pub mod container;
pub mod death;
pub mod env;
pub mod hooks;
pub mod orphans;
pub mod signals;
pub mod spawn;
pub mod supervise;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::exit_code::{End, Exit};
use crate::history;
use crate::launch::death::Watcher;
use crate::launch::env::Plan;
use crate::launch::hooks::Hook;
use crate::launch::spawn::{Launch, LaunchError};
use crate::options::VerifyMode;
use crate::probe::gpu::Machine;
use crate::probe::worker::NvmlThread;
use crate::process::procfs;
use crate::process::signals::{default_action, send, DefaultAction, Receiver};
use crate::reserve::lease::HeldLease;
use crate::select::policy::Request;
use crate::verify::diagnosis::{self, Card};
use crate::verify::monitor::Monitor;
use crate::verify::report::{self, Report};

/// How the command is run and watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    pub no_forward: Vec<i32>,
    pub kill_after: Option<Duration>,
    pub parent_death_signal: Option<i32>,
    pub keep_orphans: bool,
    pub exec: bool,
    pub verify: VerifyMode,
    pub verify_timeout: Duration,
    pub report: bool,
    pub report_json: Option<PathBuf>,
    /// Where the run's record goes (None: --no-history).
    pub history: Option<PathBuf>,
    /// `--on-start`, `--on-exit`: shell command lines.
    pub on_start: Option<String>,
    pub on_exit: Option<String>,
}

/// Everything the launch step needs.
pub struct Job<'a> {
    pub command: &'a [OsString],
    pub supervision: &'a Supervision,
    pub machine: &'a Machine,
    pub plan: &'a Plan,
    /// Held until the command and its leftovers are gone (or handed to it with --exec).
    pub leases: Vec<HeldLease>,
    /// A container run: its ID's file, and how to end it.
    pub container: Option<&'a container::Prepared>,
    /// `--per-rank`: the hold on the group's record, released right after the leases.
    pub group: Option<crate::reserve::group::Membership>,
    /// `--per-rank`: this rank, and whose each of the group's GPUs is.
    pub ranks: Option<(&'a crate::rank::PerRank, crate::rank::Owners)>,
    /// The NVML thread, for verification (None: NVML was never needed).
    pub nvml: Option<&'a mut NvmlThread>,
    pub receiver: &'a Receiver,
    /// What was asked, for the diagnosis and the history.
    pub request: &'a Request,
    pub request_text: &'a str,
    /// What `--min-free auto` decided, and why.
    pub sizing: Option<&'a str>,
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
                send(child, signal);
            }
            DefaultAction::Stop => after_exec.push(signal),
            DefaultAction::Ignore => {}
        }
    }
    after_exec
}

/// spawn -> supervise (and verify) -> end leftovers -> release the GPUs -> report -> how it
/// ended. With `--exec`, gpurun becomes the command instead (returns only if that failed).
pub fn run_command(job: Job) -> Result<Exit, LaunchError> {
    let Job {
        command,
        container,
        supervision,
        machine,
        plan,
        leases,
        group,
        ranks,
        nvml,
        receiver,
        request,
        request_text,
        sizing,
    } = job;
    let launch = Launch { command, variables: &plan.variables };
    if supervision.exec {
        // The locked lease descriptors are inherited: the reservation lives as long as the
        // command.
        tracing::info!(
            "running {} on {} (exec)",
            crate::options::shell::quote(command),
            plan.selection.describe()
        );
        if supervision.on_start.is_some() || supervision.on_exit.is_some() {
            tracing::warn!(
                "--on-start and --on-exit do not run with --exec: gpurun is replaced by the command"
            );
        }
        leases.into_iter().for_each(HeldLease::hand_over_to_exec);
        group.into_iter().for_each(crate::reserve::group::Membership::hand_over_to_exec);
        return Err(spawn::exec(&launch, receiver.caller()));
    }
    // Created first: an unwritable path fails before the command starts.
    let report_file = match &supervision.report_json {
        Some(path) => {
            Some(open_report(path).map_err(|e| LaunchError::ReportFile(path.display().to_string(), e))?)
        }
        None => None,
    };
    // A container's processes are the runtime's (conmon, containerd-shim): gpurun does not
    // become their reaper, so that the runtime ends and removes its container as it does
    // without gpurun; gpurun ends a container by its ID when it must.
    if !supervision.keep_orphans && container.is_none() {
        orphans::become_subreaper();
    }
    // Before the command exists: every child gpurun has now came with it from an exec.
    let inherited = orphans::Inherited::capture();
    let started = Instant::now();
    let started_at = std::time::SystemTime::now();
    // Prepared before the command exists: it looks the client up on PATH.
    let death_kill = supervision.parent_death_signal.and_then(|signal| container?.death_kill(signal));
    let mut watcher = None;
    let mut stops = Vec::new();
    let spawned = spawn::spawn(&launch, receiver.caller(), |child| {
        watcher =
            supervision.parent_death_signal.and_then(|signal| Watcher::start(child, signal, death_kill));
        // Before the go: the command starts (and execs) on these CPUs.
        if let Some(cpus) = &plan.cpus {
            if let Err(error) = affinity::bind(child, cpus) {
                tracing::warn!(
                    "--cpu-bind numa: cannot bind the command to CPUs {}: {error}",
                    crate::options::cpus::list(cpus)
                );
            }
        }
        stops = pass_on_pending(receiver, child);
    });
    let child = match spawned {
        Ok(child) => child,
        Err(error) => {
            watcher.into_iter().for_each(Watcher::stop);
            return Err(error);
        }
    };
    for signal in stops {
        send(child, signal);
    }
    let mut leftovers = orphans::Leftovers {
        inherited,
        command_started: procfs::stat(child).map_or(0, |stat| stat.start_ticks),
        announced: Vec::new(),
    };
    tracing::info!("running {} on {}", crate::options::shell::quote(command), plan.selection.describe());
    let mut on_start = supervision.on_start.as_deref().and_then(|line| {
        let input = serde_json::json!({
            "command": command.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>(),
            "pid": child,
            "requested": plan.selection.requested.to_string(),
            "count": plan.selection.devices.len(),
            "selected": plan.selection.devices,
        });
        Hook::start(
            "--on-start",
            line,
            &format!("{input}\n"),
            &hook_variables(plan, None),
            receiver.caller().mask,
        )
    });
    let mut watch =
        nvml.filter(|_| supervision.verify != VerifyMode::Off && !plan.selection.is_empty()).map(|nvml| {
            let watched =
                // A GPU in MIG mode lists its MIG devices' processes again: its devices are watched.
                machine.devices().filter(|gpu| gpu.error.is_none() && !gpu.in_mig_mode()).map(|gpu| gpu.index).collect();
            let before_launch =
                machine.devices().flat_map(|gpu| gpu.processes.iter().flatten().map(|p| p.pid)).collect();
            let monitor = Monitor::new(
                supervision.verify,
                &plan.selection.indices(),
                watched,
                before_launch,
                plan.variable("CUDA_VISIBLE_DEVICES").unwrap_or_default().to_owned(),
                supervision.verify_timeout,
            )
            .for_rank(ranks.as_ref().map(|(_, owners)| owners.clone()))
            .for_container(container.map(|c| c.cidfile.clone()));
            supervise::Watch { nvml, monitor }
        });
    if container.is_some_and(|c| c.run.sig_proxy_off) {
        tracing::warn!(
            "--sig-proxy=false: signals reach the {} client, not the container (gpurun still ends the container by its ID when it must)",
            container.map_or("", |c| c.run.client.name())
        );
    }
    let options = supervise::Options {
        no_forward: &supervision.no_forward,
        kill_after: supervision.kill_after,
        container,
    };
    let supervised = supervise::run(child, receiver, &options, watch.as_mut(), on_start.as_mut());
    if let Some(watch) = watch.as_mut() {
        watch.last_xids();
    }
    watcher.into_iter().for_each(Watcher::stop);
    // An --on-start hook still running ends with the command's leftovers: it is never waited
    // for, since the GPUs stay reserved until gpurun exits.
    if let Some(hook) = on_start.as_ref().filter(|hook| hook.is_running()) {
        tracing::info!("the --on-start hook (PID {}) is still running: ending it with the command", hook.pid);
        leftovers.announced = procfs::descendants(hook.pid).into_iter().chain([hook.pid]).collect();
        if supervision.keep_orphans {
            for pid in &leftovers.announced {
                send(*pid, libc::SIGTERM);
            }
        }
    }
    if !supervision.keep_orphans {
        orphans::end_all(&leftovers);
    }
    // The GPUs are free once the command and its leftovers are gone.
    drop(leases);
    drop(group);
    let exit = Exit::of(supervised.end, supervised.strict_failure.is_some());
    let verification = match watch.as_mut() {
        Some(watch) => {
            let stuck = watch.stuck();
            let (verdict, detail) = watch.monitor.finish(stuck);
            report::Verification { verdict: Some(verdict), detail }
        }
        None if supervision.verify == VerifyMode::Off => {
            report::Verification { verdict: None, detail: "--verify off".to_owned() }
        }
        None => report::Verification { verdict: None, detail: "no GPU was selected".to_owned() },
    };
    let peaks = watch.as_ref().map(|w| w.monitor.peak_bytes.clone()).unwrap_or_default();
    let used = watch.as_ref().map(|w| w.monitor.used()).unwrap_or_default();
    let wall = started.elapsed();
    let cards: Vec<Card> = plan
        .selection
        .devices
        .iter()
        .map(|device| {
            let gpu = machine.device(device.index);
            let total = gpu.and_then(|gpu| gpu.memory).map(|m| m.total_bytes);
            // Only --min-free is a memory request: --exclusive asks for the card unshared (a
            // benchmark, a job that must not meet another), whatever its peak.
            let reserved = match (request.min_free, total) {
                (Some(threshold), Some(total)) => Some((threshold.bytes_on(total), "--min-free")),
                _ => None,
            };
            Card {
                index: device.index,
                free_at_launch: gpu.and_then(|gpu| gpu.memory).map(|m| m.free_bytes),
                peak: peaks.get(&device.index).copied().unwrap_or(0),
                used: used.contains(&device.index),
                reserved,
            }
        })
        .collect();
    // Without verification nothing was seen: nothing to diagnose.
    let mut diagnosis = match watch.is_some() {
        true => {
            diagnosis::diagnose(&cards, supervised.end != End::Exited(0), wall >= supervision.verify_timeout)
        }
        false => Vec::new(),
    };
    let xids = watch.as_ref().map(|w| w.monitor.xids.clone()).unwrap_or_default();
    let into_run =
        |at: std::time::SystemTime| at.duration_since(started_at).unwrap_or_default().as_secs_f64();
    if let (Some((last, at)), false) = (xids.last(), supervised.end == End::Exited(0)) {
        // The exit line: a command that died right after an Xid most likely died of it.
        tracing::warn!(
            "the command {} {:.1} s after {}",
            match supervised.end {
                End::Exited(code) => format!("exited with status {code}"),
                End::Signaled(signal) => format!("was killed by {}", crate::options::signal::name(signal)),
            },
            wall.as_secs_f64() - into_run(*at),
            crate::verify::xid::describe(last.code, last.gpu)
        );
    }
    // Logged when they were seen: here only into the report and the history.
    let logged = diagnosis.len();
    diagnosis.extend(
        xids.iter().map(|(xid, at)| diagnosis::xid(xid.gpu, xid.code, into_run(*at), &utc_clock(*at))),
    );
    for found in &diagnosis[..logged] {
        tracing::warn!("{}: {}", found.kind, found.detail);
    }
    let uuid_of = |index: u32| machine.device(index).and_then(|gpu| gpu.uuid.clone());
    let mut summary = Report::new(
        command,
        &plan.selection,
        verification,
        &peaks,
        &uuid_of,
        wall.as_secs_f64(),
        supervised.end,
        exit,
    );
    summary.diagnosis = diagnosis;
    summary.min_free = sizing.map(str::to_owned);
    summary.cpus = plan.cpus.as_deref().map(crate::options::cpus::list);
    summary.container = container.map(|c| report::ContainerReport {
        client: c.run.client.name().to_owned(),
        image: c.run.image.clone(),
        id: c.id(),
    });
    summary.rank = ranks.as_ref().map(|(per_rank, owners)| report::RankReport {
        local_rank: per_rank.rank.local_rank,
        local_size: per_rank.rank.local_size,
        launcher: per_rank.rank.launcher.to_owned(),
        group: per_rank.rank.job.clone(),
        group_gpus: owners.gpus.iter().map(|(index, _)| *index).collect(),
    });
    if supervision.report {
        summary.log();
    }
    if let Some(file) = report_file {
        summary.write_json(file);
    }
    if let Some(path) = &supervision.history {
        keep_history(path, &summary, started_at, request_text);
    }
    if let Some(line) = &supervision.on_exit {
        let verdict = summary.verification.verdict.map(|v| v.to_string()).unwrap_or_default();
        let variables = hook_variables(plan, Some((exit.status(), verdict)));
        Hook::start("--on-exit", line, &summary.json(), &variables, receiver.caller().mask)
            .into_iter()
            .for_each(Hook::finish);
    }
    Ok(exit)
}

/// `12:34:56 UTC`: when an Xid was seen, as dmesg and the driver's logs can be matched to it.
fn utc_clock(at: std::time::SystemTime) -> String {
    let seconds = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", seconds / 3600, seconds / 60 % 60, seconds % 60)
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

/// What a hook finds in its environment besides gpurun's own: the chosen GPUs and, at the
/// end, gpurun's exit status and the verdict (empty when nothing was checked).
fn hook_variables(plan: &Plan, ended: Option<(i32, String)>) -> Vec<(String, String)> {
    let mut variables: Vec<(String, String)> = ["GPURUN_GPUS", "GPURUN_GPU_UUIDS"]
        .into_iter()
        .map(|name| (name.to_owned(), plan.variable(name).unwrap_or_default().to_owned()))
        .collect();
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
