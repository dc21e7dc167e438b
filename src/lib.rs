//! gpurun: put a command on the right NVIDIA GPU and tell the truth about it.
//!
//! `run` is the pipeline of DESIGN.md, one folder per stage: the command line (`cli`), the probe
//! (`probe`), selection (`select`), reservation (`reserve`), launch and supervision (`launch`),
//! verification and report (`verify`), and what gpurun shows (`output`). `options` is the
//! vocabulary they share and `process` is gpurun's own process (descriptors, signals, /proc).

pub mod cli;
pub mod error;
pub mod exit_code;
pub mod history;
pub mod launch;
pub mod options;
pub mod output;
pub mod probe;
pub mod process;
pub mod rank;
pub mod reserve;
pub mod select;
pub mod verify;

use std::ffi::OsString;

use crate::cli::config::{Config, Goal, Mode};
use crate::error::Error;
use crate::exit_code::Exit;
use crate::launch::env::{self, Plan};
use crate::options::{CpuBind, Fallback, HealthUse};
use crate::output::{doctor, listing};
use crate::probe::nvml::OpenError;
use crate::probe::worker::NvmlThread;
use crate::process::logging;
use crate::process::signals::{die_by, CallerState, Receiver};
use crate::process::stdio::print;
use crate::reserve::acquire::{self, AcquireError, Acquisition};
use crate::select::visibility::Inherited;

/// The pipeline: command line -> settings -> logging -> (doctor) -> probe -> acquire (select and
/// reserve) -> one plan -> the goal: list, dry run, export, or launch the command.
pub fn run(args: Vec<OsString>, receiver: &Receiver) -> Result<Exit, Error> {
    let Some(parsed) = cli::parse_command_line(args)? else { return Ok(Exit::Code(0)) };
    let mut config = Config::from_cli(parsed.cli, parsed.origins, parsed.request_text, parsed.limits)?;
    logging::init(&config.verbosity, config.log_format);
    config.log_origins();
    match &config.mode {
        Mode::Doctor => return doctor(&config, receiver),
        Mode::History { json, pattern } => return show_history(*json, pattern.as_deref()),
        Mode::Select(_) => {}
    }
    config.size_min_free();
    config.apply_limits();
    let (mut nvml, acquired) = acquire(&config, receiver)?;
    let Acquisition { machine, decision, chosen, leases, live, queue, group } = acquired;
    if let Some((_, note)) = &decision.min_free_note {
        tracing::info!("--min-free {note}");
        config.request.min_free = decision.min_free(config.request.min_free);
        config.sizing = config.sizing.take().map(|why| format!("{why}; {note}"));
    }
    let Mode::Select(goal) = &config.mode else { unreachable!("the other modes returned above") };
    if !matches!(goal, Goal::List { .. }) {
        for (index, why) in &decision.passed_over {
            tracing::debug!("passed over {}: {why}", crate::probe::gpu::label(*index));
        }
        if let Ok(selection) = &chosen {
            warn_sick(&machine, selection, config.request.health);
        }
    }
    let verbose =
        matches!(config.verbosity, crate::options::Verbosity::Debug | crate::options::Verbosity::Trace);
    // `--list` on a terminal fits it; piped or to a file (no window size), nothing is cut.
    let columns = matches!(goal, Goal::List { json: false, .. })
        .then(|| crate::process::stdio::terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stdout())))
        .flatten();
    let shared = listing::Shared { queue: &queue, rules: config.limits.describe(), verbose, columns };
    let owners = match (&config.per_rank, &chosen) {
        (Some(per_rank), Ok(set)) => Some(rank::Owners::new(&set.indices(), per_rank)),
        _ => None,
    };
    // What the command gets, or exit 75's explanation.
    let mut plan = chosen.map(|selection| {
        let mut plan = match &config.per_rank {
            Some(per_rank) => Plan::for_rank(
                selection,
                per_rank.own(),
                per_rank.own_only,
                config.visible_as,
                config.framework_env,
            ),
            None => Plan::new(selection, config.visible_as, config.framework_env),
        };
        if config.cpu_bind == CpuBind::Numa {
            let own = launch::affinity::own_cpus();
            plan.cpus = launch::affinity::numa_cpus(&plan.selection, &machine, &own, config.cpu_bind_asked);
        }
        plan
    });
    // A container run gets the GPUs as the runtime's options; its client gets no host-index
    // CUDA_VISIBLE_DEVICES (podman --env-host would pass it in, where it would mean nothing).
    let prepared = match (&config.container, plan.as_mut(), goal) {
        (Some(run), Ok(plan), Goal::Run { command } | Goal::DryRun { command, .. })
            if !plan.selection.is_empty() =>
        {
            let uuids: Vec<String> = plan.selection.devices.iter().filter_map(|d| d.uuid.clone()).collect();
            let indices = plan.variable("GPURUN_GPUS").unwrap_or_default().to_owned();
            let chosen = launch::container::Chosen {
                uuids: &uuids,
                indices: &indices,
                framework_env: config.framework_env,
            };
            let launching = matches!(goal, Goal::Run { .. });
            let prepared =
                launch::container::Prepared::new(run, command, &chosen, config.container_use, launching)
                    .map_err(|error| {
                        Error::Usage(format!(
                            "cannot make a private directory for the container's ID: {error}"
                        ))
                    })?;
            plan.variables.retain(|(name, _)| name != "CUDA_VISIBLE_DEVICES" && name != "GPU_DEVICE_ORDINAL");
            Some(prepared)
        }
        _ => None,
    };
    let json =
        |dry_run| listing::json(&machine, &config.library(), &decision.assessments, &live, &shared, dry_run);
    let show = |text: String| print(&text).map(|()| Exit::Code(0)).map_err(Error::Output);
    match goal {
        Goal::List { json: false, links } => {
            let mut text = listing::table(&machine, &decision.assessments, &live, &shared);
            if *links {
                text.push_str(&listing::link_matrix(&machine));
            }
            show(text)
        }
        Goal::List { json: true, .. } => show(json(None)),
        // Printed on exit 75 too, with a null selection and environment.
        Goal::DryRun { json: true, command } => {
            let sizing = config.sizing.as_deref();
            let asked = listing::DryRun {
                requested: config.request.count,
                command: prepared.as_ref().map_or(command, |p| &p.command),
                plan: plan.as_ref().ok(),
                sizing,
                passed_over: &decision.passed_over,
            };
            show(json(Some(&asked))).and_then(|exit| plan.map(|_| exit).map_err(Error::NotEnoughGpus))
        }
        Goal::DryRun { json: false, command } => {
            let chosen = plan.map_err(Error::NotEnoughGpus)?;
            let sizing = config.sizing.as_deref();
            let asked = listing::DryRun {
                requested: config.request.count,
                command: prepared.as_ref().map_or(command, |p| &p.command),
                plan: Some(&chosen),
                sizing,
                passed_over: &decision.passed_over,
            };
            show(listing::dry_run(&machine, &decision.assessments, &live, &chosen, &asked))
        }
        Goal::Export => show(env::export_lines(&plan.map_err(Error::NotEnoughGpus)?.variables)),
        Goal::Run { command } => Ok(launch::run_command(launch::Job {
            command: prepared.as_ref().map_or(command, |p| &p.command),
            container: prepared.as_ref(),
            supervision: &config.supervision,
            machine: &machine,
            plan: &plan.map_err(Error::NotEnoughGpus)?,
            leases,
            group,
            ranks: config.per_rank.as_ref().zip(owners),
            nvml: nvml.as_mut(),
            receiver,
            request: &config.request,
            request_text: &config.request_text,
            sizing: config.sizing.as_deref(),
        })?),
    }
}

/// A sick GPU that was chosen is said so: degraded ones come after every healthy one, and
/// `--health ignore` takes unhealthy ones too.
fn warn_sick(
    machine: &crate::probe::gpu::Machine,
    selection: &crate::select::selection::Selection,
    health: HealthUse,
) {
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
    let text = if json { output::history::json(&matching) } else { output::history::table(&matching) };
    print(&text).map_err(Error::Output)?;
    Ok(Exit::Code(0))
}

/// `--doctor`: its findings on stdout; 125 when NVML is unusable.
fn doctor(config: &Config, receiver: &Receiver) -> Result<Exit, Error> {
    let mut nvml = NvmlThread::start().map_err(Error::Thread)?;
    let diagnosis = doctor::diagnose(&mut nvml, receiver, config).map_err(Error::Interrupted)?;
    print(&diagnosis.text).map_err(Error::Output)?;
    Ok(Exit::Code(if diagnosis.usable { 0 } else { exit_code::GPURUN_ERROR }))
}

/// Opens NVML on its own thread (when the request needs GPUs at all: `--gpus 0` works on a
/// machine without the driver) and acquires: probe, select, reserve. NVML that does not answer
/// in time is an error, or no GPU with `--fallback cpu`.
fn acquire(config: &Config, receiver: &Receiver) -> Result<(Option<NvmlThread>, Acquisition), Error> {
    let looking = matches!(config.mode, Mode::Select(Goal::List { .. } | Goal::DryRun { .. }));
    if config.request.count.is_none() && !looking {
        return Ok((None, Acquisition::no_gpu(config.request.count)));
    }
    let mut nvml = NvmlThread::start().map_err(Error::Thread)?;
    let acquired = nvml
        .open(config.nvml_lib.clone(), receiver, config.nvml_timeout)
        .map_err(AcquireError::from)
        .and_then(|()| match &config.per_rank {
            Some(per_rank) => {
                rank::acquire(&mut nvml, receiver, &Inherited::from_env(), config.acquire_options(), per_rank)
            }
            None => acquire::acquire(&mut nvml, receiver, &Inherited::from_env(), &config.acquire_options()),
        });
    match acquired {
        Ok(acquisition) => Ok((Some(nvml), acquisition)),
        Err(AcquireError::Stalled(why)) if config.request.fallback == Some(Fallback::Cpu) && !looking => {
            tracing::warn!("{why}; running with no GPU visible (--fallback cpu)");
            Ok((None, Acquisition::no_gpu(config.request.count)))
        }
        // A machine without GPUs for this user (a laptop, a CI box: no library, no driver, no
        // access) is what --fallback cpu is for. A library that is not NVML, or an NVML that
        // fails otherwise, stays an error: that is a broken install, not a machine without GPUs.
        Err(AcquireError::Nvml(
            error @ (OpenError::LibraryMissing { .. } | OpenError::DriverNotLoaded | OpenError::NoPermission),
        )) if config.request.fallback == Some(Fallback::Cpu) && !looking => {
            tracing::warn!("{error}; running with no GPU visible (--fallback cpu)");
            Ok((None, Acquisition::no_gpu(config.request.count)))
        }
        Err(error) => Err(Error::acquire(error, config)),
    }
}

/// `main`: fds 0-2, then the caller's signal state and gpurun's own (before any thread), then
/// the pipeline; print `gpurun: <error>` once on failure and exit with the documented code.
pub fn main_exit() -> ! {
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
    let code = match run(std::env::args_os().collect(), &receiver) {
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
