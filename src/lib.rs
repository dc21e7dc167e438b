//! gpurun: put a command on the right NVIDIA GPU and tell the truth about it.
//!
//! `run` is the pipeline of DESIGN.md, one folder per stage: the command line (`cli`), the probe
//! (`probe`), selection (`select`), reservation (`reserve`), launch and supervision (`launch`),
//! verification and report (`verify`), and what gpurun shows (`output`). `options` is the
//! vocabulary they share and `process` is gpurun's own process (descriptors, signals, /proc).

pub mod cli;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod exit_code;
pub(crate) mod history;
pub(crate) mod launch;
pub(crate) mod options;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod probe;
pub(crate) mod process;
pub(crate) mod rank;
pub(crate) mod reserve;
pub(crate) mod runtime;
pub(crate) mod select;
pub(crate) mod verify;

use std::ffi::OsString;

use crate::config::{Config, Goal, Mode};
use crate::error::Error;
use crate::exit_code::Exit;
use crate::launch::Held;
use crate::options::{Fallback, HealthUse, Verbosity};
use crate::output::{doctor, listing};
use crate::plan::env;
use crate::plan::Plan;
use crate::probe::gpu::Machine;
use crate::probe::worker::ProbeThread;
use crate::process::signals::{die_by, CallerState, Receiver};
use crate::process::stdio::print;
use crate::process::{holder, logging};
use crate::reserve::acquire::{self, AcquireError, Acquisition};
use crate::reserve::holds::Queued;
use crate::reserve::lease::Lease;
use crate::runtime::Inherited;
use crate::select::policy::Decision;
use crate::select::selection::Selection;

/// The pipeline: command line -> settings, resolved once -> logging -> the mode: doctor,
/// history, or probe, choose and reserve (`select`), then the goal.
pub(crate) fn run(args: Vec<OsString>, receiver: &Receiver) -> Result<Exit, Error> {
    let Some(parsed) = cli::parse_command_line(args)? else { return Ok(Exit::Code(0)) };
    logging::init(&parsed.verbosity(), parsed.cli.log_format);
    if let Some(name) = parsed.cli.jupyter_kernel.clone() {
        return output::jupyter::install(&parsed, &name);
    }
    let config = config::resolve(parsed)?;
    match &config.mode {
        Mode::Doctor => doctor(&config, receiver),
        Mode::History { json, pattern } => show_history(*json, pattern.as_deref()),
        Mode::Release => release(&config),
        Mode::Select(goal) => select(&config, goal, receiver),
    }
}

/// What the goals show beside the plan: the machine, the decision and everyone's holds.
struct Seen<'a> {
    config: &'a Config,
    machine: &'a Machine,
    decision: &'a Decision,
    live: &'a [Lease],
    queue: &'a [Queued],
    /// What `--min-free auto` decided, and why.
    sizing: Option<String>,
}

/// probe -> select -> reserve -> one plan -> the goal: list, dry run, export or launch.
fn select(config: &Config, goal: &Goal, receiver: &Receiver) -> Result<Exit, Error> {
    // `--hold`: the holder is a process of its own, forked before any thread exists; the
    // caller's gpurun answers with its status.
    let holder = match goal {
        Goal::Hold { .. } => match holder::fork().map_err(Error::Thread)? {
            holder::Forked::Caller(status) => {
                return Ok(Exit::Code(u8::try_from(status).unwrap_or(exit_code::GPURUN_ERROR)))
            }
            holder::Forked::Holder(report) => Some(report),
        },
        _ => None,
    };
    let (mut prober, acquired) = acquire(config, receiver)?;
    let Acquisition { machine, decision, chosen, leases, live, queue, group } = acquired;
    let sizing = match &decision.min_free_note {
        Some((_, note)) => {
            tracing::info!("--min-free {note}");
            config.said.sizing.as_ref().map(|why| format!("{why}; {note}"))
        }
        None => config.said.sizing.clone(),
    };
    if !matches!(goal, Goal::List { .. }) {
        explain_choice(&machine, &decision, &chosen, config.request.health);
    }
    // What the command gets, or exit 75's explanation.
    let min_free = decision.min_free(config.request.min_free);
    let plan = match chosen {
        Ok(selection) => {
            Ok(Plan::build(&config.plan_input(goal, min_free, sizing.clone()), &machine, selection)
                .map_err(|error| Error::Usage(error.to_string()))?)
        }
        Err(why) => Err(why),
    };
    let seen = Seen { config, machine: &machine, decision: &decision, live: &live, queue: &queue, sizing };
    match goal {
        Goal::List { json, links, watch: None } => show(listing_text(&seen, *json, *links)),
        Goal::List { json, links, watch: Some(every) } => {
            let first = listing_text(&seen, *json, *links);
            let prober = prober.as_mut().expect("a listing probes NVML");
            Ok(watch_list(config, prober, receiver, (*json, *links, *every), first))
        }
        Goal::DryRun { json, command } => dry_run(&seen, command, plan, *json),
        Goal::Export => show(env::export_lines(&plan.map_err(Error::NotEnoughGpus)?.gpus.variables)),
        Goal::Run { .. } => {
            let plan = plan.map_err(Error::NotEnoughGpus)?;
            let held = Held { leases, group };
            Ok(crate::launch::run_command(&plan, &machine, held, prober.as_mut(), receiver)?)
        }
        Goal::Hold { duration, for_pid } => {
            let plan = plan.map_err(Error::NotEnoughGpus)?;
            let holder = holder.expect("--hold runs in the holder");
            let held = Held { leases, group };
            crate::launch::hold::hold(&plan, held, (*duration, *for_pid), holder, receiver)
                .map_err(Error::Output)
        }
    }
}

/// `--release`: ends the caller's own holds.
fn release(config: &Config) -> Result<Exit, Error> {
    let dir =
        config.lock_dir.clone().unwrap_or_else(|| std::path::PathBuf::from(crate::options::DEFAULT_LOCK_DIR));
    let released = crate::reserve::holder::release(&dir).map_err(Error::Usage)?;
    match released.is_empty() {
        true => tracing::info!("no hold of yours to release"),
        false => released.iter().for_each(|what| tracing::info!("released {what}")),
    }
    Ok(Exit::Code(0))
}

fn show(text: String) -> Result<Exit, Error> {
    print(&text).map(|()| Exit::Code(0)).map_err(Error::Output)
}

impl Seen<'_> {
    fn shared(&self, columns: Option<usize>) -> listing::Shared<'_> {
        let verbose = matches!(self.config.logging.verbosity, Verbosity::Debug | Verbosity::Trace);
        listing::Shared { queue: self.queue, rules: self.config.limits.describe(), verbose, columns }
    }

    fn json(&self, dry_run: Option<&listing::DryRun>) -> String {
        let library = self.config.libraries.path_of(self.machine.vendor);
        listing::json(
            self.machine,
            &library,
            &self.decision.assessments,
            self.live,
            &self.shared(None),
            dry_run,
        )
    }
}

/// `--list`: the table (fitted to a terminal; piped or to a file, nothing is cut), or JSON.
fn listing_text(seen: &Seen, json: bool, links: bool) -> String {
    if json {
        return seen.json(None);
    }
    let columns = process::stdio::terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stdout()));
    let mut text = listing::table(seen.machine, &seen.decision.assessments, seen.live, &seen.shared(columns));
    if links {
        text.push_str(&listing::link_matrix(seen.machine));
    }
    text
}

/// `--list --watch`: `first`, then the machine probed again (on the same NVML session) at each
/// refresh; a probe that fails is said in its frame, and the next one tries again.
fn watch_list(
    config: &Config,
    prober: &mut ProbeThread,
    receiver: &Receiver,
    (json, links, every): (bool, bool, std::time::Duration),
    first: String,
) -> Exit {
    let mut first = Some(first);
    output::watching::run(every, json, receiver, || {
        if let Some(first) = first.take() {
            return first;
        }
        match acquire::acquire(prober, receiver, &Inherited::from_env(), &config.acquire_options()) {
            Ok(acquired) => {
                let seen = Seen {
                    config,
                    machine: &acquired.machine,
                    decision: &acquired.decision,
                    live: &acquired.live,
                    queue: &acquired.queue,
                    sizing: None,
                };
                listing_text(&seen, json, links)
            }
            // A frame that could not be read is still a frame: one JSON object, with `error`.
            Err(error) => match json {
                true => serde_json::json!({ "error": Error::acquire(error, config).to_string() }).to_string(),
                false => format!("gpurun: {}\n", Error::acquire(error, config)),
            },
        }
    })
}

/// `--dry-run`: the choice, the environment and the command; JSON is printed on exit 75 too,
/// with a null selection and environment.
fn dry_run(seen: &Seen, command: &[OsString], plan: Result<Plan, String>, json: bool) -> Result<Exit, Error> {
    let chosen = plan.as_ref().ok();
    let asked = listing::DryRun {
        requested: seen.config.request.count,
        command: chosen.map_or(command, Plan::command),
        plan: chosen.map(|plan| &plan.gpus),
        sizing: seen.sizing.as_deref(),
        passed_over: &seen.decision.passed_over,
    };
    if json {
        let exit = show(seen.json(Some(&asked)))?;
        return plan.map(|_| exit).map_err(Error::NotEnoughGpus);
    }
    let Some(chosen) = chosen else { return Err(Error::NotEnoughGpus(plan.err().unwrap_or_default())) };
    let columns = process::stdio::terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stdout()));
    show(listing::dry_run(seen.machine, &seen.decision.assessments, seen.live, &chosen.gpus, &asked, columns))
}

/// `-v` says what was passed over, and a sick GPU that was chosen is said so.
fn explain_choice(
    machine: &Machine,
    decision: &Decision,
    chosen: &Result<Selection, String>,
    health: HealthUse,
) {
    for (index, why) in &decision.passed_over {
        tracing::debug!("passed over {}: {why}", crate::probe::gpu::label(*index));
    }
    if let Ok(selection) = chosen {
        warn_sick(machine, selection, health);
    }
}

/// A sick GPU that was chosen is said so: degraded ones come after every healthy one, and
/// `--health ignore` takes unhealthy ones too.
fn warn_sick(machine: &Machine, selection: &Selection, health: HealthUse) {
    for device in &selection.devices {
        let Some(gpu) = machine.device(device.index).filter(|gpu| !gpu.health.is_ok()) else { continue };
        let label = crate::probe::gpu::label(device.index);
        match health {
            HealthUse::Ignore => {
                tracing::warn!(
                    "taking {label} despite its health (--health ignore): {}",
                    gpu.health.describe()
                )
            }
            _ => tracing::warn!(
                "taking {label}, which is {} (no healthy GPU was left for it)",
                gpu.health.describe()
            ),
        }
    }
}

/// `--history`: the recent runs on stdout (none kept yet is not an error).
fn show_history(json: bool, pattern: Option<&str>) -> Result<Exit, Error> {
    let records = history::path().map(|path| history::read(&path)).unwrap_or_default();
    let matching = output::history::matching(&records, pattern);
    let columns = process::stdio::terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stdout()));
    let text = match json {
        true => output::history::json(&matching),
        false => output::history::table_for(&matching, columns),
    };
    print(&text).map_err(Error::Output)?;
    Ok(Exit::Code(0))
}

/// `--doctor`: its findings on stdout; 125 when NVML is unusable.
fn doctor(config: &Config, receiver: &Receiver) -> Result<Exit, Error> {
    let mut prober = ProbeThread::start().map_err(Error::Thread)?;
    let diagnosis = doctor::examine(&mut prober, receiver, config).map_err(Error::Interrupted)?;
    // On a terminal a finding wraps under its text (after "  PROBLEM  "), never at the edge.
    let text = match process::stdio::terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stdout())) {
        Some(columns) => {
            diagnosis.text.lines().map(|line| process::stdio::wrap(line, columns, Some(11))).collect()
        }
        None => diagnosis.text,
    };
    print(&text).map_err(Error::Output)?;
    Ok(Exit::Code(if diagnosis.usable { 0 } else { exit_code::GPURUN_ERROR }))
}

/// Opens NVML on its own thread (when the request needs GPUs at all: `--gpus 0` works on a
/// machine without the driver) and acquires: probe, select, reserve. NVML that does not answer
/// in time is an error, or no GPU with `--fallback cpu`.
fn acquire(config: &Config, receiver: &Receiver) -> Result<(Option<ProbeThread>, Acquisition), Error> {
    let looking = matches!(config.mode, Mode::Select(Goal::List { .. } | Goal::DryRun { .. }));
    if config.request.count.is_none() && !looking {
        return Ok((None, Acquisition::no_gpu(config.request.count)));
    }
    let mut prober = ProbeThread::start().map_err(Error::Thread)?;
    let acquired = prober
        .open(config.libraries_to_open(), receiver, config.nvml_timeout)
        .map_err(AcquireError::from)
        .and_then(|()| {
            acquire::acquire(&mut prober, receiver, &Inherited::from_env(), &config.acquire_options())
        });
    match acquired {
        Ok(acquisition) => Ok((Some(prober), acquisition)),
        Err(AcquireError::Stalled(why)) if config.request.fallback == Some(Fallback::Cpu) && !looking => {
            tracing::warn!("{why}; running with no GPU visible (--fallback cpu)");
            Ok((None, Acquisition::no_gpu(config.request.count)))
        }
        // A machine without GPUs for this user is what --fallback cpu is for; a broken install
        // (a library that is not the vendor's, one that fails otherwise) stays an error.
        Err(AcquireError::Open(error))
            if error.is_no_gpu_here() && config.request.fallback == Some(Fallback::Cpu) && !looking =>
        {
            tracing::warn!("{error}; running with no GPU visible (--fallback cpu)");
            Ok((None, Acquisition::no_gpu(config.request.count)))
        }
        Err(error) => Err(Error::acquire(error, config)),
    }
}

/// `main`: fds 0-2, then the caller's signal state and gpurun's own (before any thread), then
/// the pipeline; print `gpurun: <error>` once on failure and exit with the documented code.
pub fn main_exit() -> ! {
    process::environment::hold_back();
    process::stdio::ensure_open();
    process::one_malloc_arena();
    let caller = CallerState::capture();
    let receiver = match Receiver::open(caller.clone()) {
        Ok(receiver) => receiver,
        Err(error) => {
            logging::print_outside("error", &format!("cannot set up signal handling: {error}"), None);
            signal_hook::low_level::exit(i32::from(exit_code::GPURUN_ERROR))
        }
    };
    let args: Vec<OsString> = std::env::args_os().collect();
    logging::assume_format(&args);
    let code = match run(args, &receiver) {
        Ok(Exit::Code(code)) => i32::from(code),
        Ok(Exit::Signal(signal)) | Err(Error::Interrupted(signal)) => die_by(signal),
        Err(Error::Output(error))
            if error.kind() == std::io::ErrorKind::BrokenPipe && !caller.is_ignored(libc::SIGPIPE) =>
        {
            // What writing to a closed pipe does to any program that did not ignore SIGPIPE.
            die_by(libc::SIGPIPE)
        }
        Err(error) => {
            logging::print_outside("error", &error.to_string(), None);
            i32::from(error.exit_code())
        }
    };
    // _exit: no atexit handlers, which a driver library with a hung thread could block in
    // (stdout needs no flush: everything gpurun prints there is flushed as it is written).
    signal_hook::low_level::exit(code)
}
