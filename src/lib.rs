//! gpurun: put a command on the right NVIDIA GPU and tell the truth about it.
//!
//! `run` is the pipeline of DESIGN.md, one module per step.

pub mod cli;
pub mod exit_code;
pub mod launch;
pub mod options;
pub mod output;
pub mod probe;
pub mod reserve;
pub mod select;
pub mod verify;

use std::ffi::OsString;
use std::io::Write;
use std::time::Instant;

use clap::error::ErrorKind;

use crate::cli::config::{Config, Mode};
use crate::cli::{self as args_cli, Cli};
use crate::cli::{config, settings, shebang};
use crate::launch::signals::CallerState;
use crate::launch::{env, orphans, signals, spawn as child, supervise};
use crate::options::VerifyMode;
use crate::output::listing::{self, Plan};
use crate::output::{doctor, logging};
use crate::probe::gpu::Gpu;
use crate::probe::nvml;
use crate::reserve::{acquire, lockdir as lease};
use crate::select::policy;
use crate::select::visibility::Inherited;
use crate::verify::monitor::Monitor;
use crate::verify::report;

/// gpurun's own failures, each with the exit code it means.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Nvml(#[from] nvml::OpenError),
    #[error(transparent)]
    Devices(#[from] policy::DeviceError),
    #[error(transparent)]
    Lease(#[from] lease::LeaseError),
    #[error(transparent)]
    Settings(#[from] settings::SettingsError),
    /// Exit 75, with the table of reasons.
    #[error("{0}")]
    NotEnoughGpus(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error(transparent)]
    Launch(#[from] child::LaunchError),
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
    #[error("cannot create the --report-json file {0}: {1}")]
    ReportFile(String, std::io::Error),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotEnoughGpus(_) => exit_code::NOT_ENOUGH_GPUS,
            Error::Launch(launch) => launch.exit_code(),
            _ => exit_code::GPURUN_ERROR,
        }
    }
}

/// Parses argv; `--help` and `--version` print and return early, before anything touches NVML.
fn parse_args(args: Vec<OsString>) -> Result<Result<Cli, u8>, Error> {
    let args = shebang::expand(args).map_err(Error::Usage)?;
    let args = settings::layered(args)?;
    match args_cli::parse(args) {
        Ok(cli) => Ok(Ok(cli)),
        Err(error) if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = error.print();
            Ok(Err(0))
        }
        Err(error) => {
            // clap renders "error: <what>\n\n<usage>"; keep gpurun's one-line prefix convention.
            let rendered = error.render().to_string();
            let message = rendered.trim_end().strip_prefix("error: ").unwrap_or(&rendered).to_owned();
            Err(Error::Usage(message))
        }
    }
}

/// The pipeline; returns the exit status (or ends gpurun by the child's signal).
pub fn run(args: Vec<OsString>, caller: CallerState) -> Result<u8, Error> {
    let cli = match parse_args(args)? {
        Ok(cli) => cli,
        Err(early_exit) => return Ok(early_exit),
    };
    let config = Config::from_cli(cli)?;
    logging::init(&config.verbosity, config.log_format);

    if config.mode == Mode::Doctor {
        let diagnosis = doctor::diagnose(config.nvml_lib.as_deref(), config.lock_dir.as_deref());
        print(&diagnosis.text)?;
        return Ok(if diagnosis.usable { 0 } else { exit_code::GPURUN_ERROR });
    }
    // A command that gets no GPU needs nothing from NVML: `--gpus 0` works on a machine
    // without the driver (the child simply sees CUDA_VISIBLE_DEVICES="").
    let needs_nvml =
        config.request.count > 0 || matches!(config.mode, Mode::List { .. } | Mode::DryRun { .. });
    let session = needs_nvml.then(|| nvml::open(config.nvml_lib.as_deref())).transpose()?;
    let listing_only = matches!(config.mode, Mode::List { .. });
    let acquisition = match &session {
        Some(session) => acquire::acquire(
            session,
            &Inherited::from_env(),
            &acquire::Options {
                request: &config.request,
                lock_dir: config.lock_dir.clone(),
                wait: if listing_only { None } else { config.wait },
                hold: matches!(config.mode, Mode::Run { .. }),
                command: match &config.mode {
                    Mode::Run { command } => shown_command(command),
                    _ => String::new(),
                },
            },
        )?,
        None => acquire::Acquisition::no_gpu(),
    };
    let acquire::Acquisition { machine, decision, chosen, leases, live } = acquisition;

    if let Mode::List { json } = config.mode {
        let text = if json {
            listing::json(&machine, session_library(&session), &decision.assessments, &live, None)
        } else {
            listing::table(&machine, &decision.assessments, &live)
        };
        print(&text)?;
        return Ok(0);
    }

    // What the command would get, or exit 75's explanation.
    let inherited_var = |name: &str| std::env::var_os(name);
    let plan = chosen.map(|chosen| {
        let variables = env::child_variables(
            &machine.gpus,
            &chosen,
            config.visible_as,
            config.framework_env,
            inherited_var,
        );
        let selected: Vec<&Gpu> =
            chosen.iter().filter_map(|&index| machine.gpus.iter().find(|gpu| gpu.index == index)).collect();
        (chosen, selected, variables)
    });
    if config.mode == (Mode::DryRun { json: true }) {
        // Printed on exit 75 too, with null selection and environment.
        let json_plan = Plan {
            selected: plan.as_ref().ok().map(|(_, selected, _)| selected.clone()),
            env: plan.as_ref().ok().map(|(_, _, variables)| &variables[..]),
        };
        print(&listing::json(
            &machine,
            session_library(&session),
            &decision.assessments,
            &live,
            Some(json_plan),
        ))?;
    }
    let (chosen, selected, variables) = plan.map_err(Error::NotEnoughGpus)?;

    match config.mode {
        Mode::List { .. } | Mode::Doctor => unreachable!("handled above"),
        Mode::DryRun { json: true } => Ok(0),
        Mode::DryRun { json: false } => {
            print(&listing::dry_run(&machine, &decision.assessments, &live, &selected, &variables))?;
            Ok(0)
        }
        Mode::Export => {
            print(&env::export_lines(&variables))?;
            Ok(0)
        }
        Mode::Run { command } => {
            tracing::info!("running {} on {}", shown_command(&command), shown_gpus(&selected));
            let launch = child::Launch {
                command: &command,
                variables: &variables,
                caller,
                parent_death_signal: config.supervision.parent_death_signal,
            };
            let supervision = &config.supervision;
            if supervision.exec {
                // The locked lease descriptors are inherited: the reservation lives as long as
                // the command.
                leases.into_iter().for_each(lease::HeldLease::hand_over_to_exec);
                return Err(child::exec(&launch).into());
            }
            let report_file = match &supervision.report_json {
                Some(path) => Some(
                    std::fs::File::create(path)
                        .map_err(|e| Error::ReportFile(path.display().to_string(), e))?,
                ),
                None => None,
            };
            let watching =
                session.as_ref().filter(|_| supervision.verify != VerifyMode::Off && !chosen.is_empty());
            let monitor = watching.map(|session| {
                let watched =
                    machine.gpus.iter().filter(|gpu| gpu.error.is_none()).map(|gpu| gpu.index).collect();
                let before_launch = machine
                    .gpus
                    .iter()
                    .flat_map(|gpu| gpu.processes.iter().flatten().map(|p| p.pid))
                    .collect();
                let visible_given = variables
                    .iter()
                    .find(|(name, _)| name == "CUDA_VISIBLE_DEVICES")
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default();
                Monitor::new(
                    session,
                    supervision.verify,
                    &chosen,
                    watched,
                    before_launch,
                    visible_given,
                    supervision.verify_timeout,
                )
            });
            let reporting = Reporting {
                summary: supervision.report,
                json_file: report_file,
                selected: &selected,
                uuids: machine.gpus.iter().filter_map(|gpu| Some((gpu.index, gpu.uuid.clone()?))).collect(),
                started: Instant::now(),
            };
            run_command(&launch, supervision, monitor, reporting, leases)
        }
    }
}

/// What the end-of-run report needs besides the outcome.
struct Reporting<'a> {
    summary: bool,
    json_file: Option<std::fs::File>,
    selected: &'a [&'a Gpu],
    /// NVML index -> UUID of every GPU, for the per-GPU peaks.
    uuids: std::collections::BTreeMap<u32, String>,
    started: Instant,
}

/// spawn -> supervise (verify) -> clean up -> report -> exit with the child's status.
fn run_command(
    launch: &child::Launch,
    supervision: &config::Supervision,
    mut monitor: Option<Monitor>,
    reporting: Reporting,
    leases: Vec<lease::HeldLease>,
) -> Result<u8, Error> {
    let receiver = signals::Receiver::open(&launch.caller).map_err(Error::Signals)?;
    if !supervision.keep_orphans {
        orphans::become_subreaper();
    }
    let pid = child::spawn(launch)?;
    let supervised = supervise::run(pid, &receiver, supervision, monitor.as_mut());
    if !supervision.keep_orphans {
        orphans::end_all(std::process::id());
    }
    // The GPUs are free once the command and its leftovers are gone.
    drop(leases);
    let status = match (&supervised.strict_failure, supervised.end) {
        (Some(_), _) => i32::from(exit_code::GPURUN_ERROR),
        (None, child::End::Exited(code)) => i32::from(code),
        (None, child::End::Signaled(signal)) => 128 + signal,
    };
    if reporting.summary || reporting.json_file.is_some() {
        let verification = match monitor.as_mut() {
            Some(monitor) => {
                let (verdict, detail) = monitor.finish();
                report::Verification { verdict: Some(verdict), detail }
            }
            None if supervision.verify == VerifyMode::Off => {
                report::Verification { verdict: None, detail: "--verify off".to_owned() }
            }
            None => report::Verification { verdict: None, detail: "no GPU was selected".to_owned() },
        };
        let uuid_of =
            |index: &u32| reporting.uuids.get(index).cloned().unwrap_or_else(|| format!("GPU {index}"));
        let peak_memory_bytes = monitor
            .as_ref()
            .map(|m| m.peak_bytes.iter().map(|(index, bytes)| (uuid_of(index), *bytes)).collect())
            .unwrap_or_default();
        let summary = report::Report {
            command: launch.command.iter().map(|word| word.to_string_lossy().into_owned()).collect(),
            selected: report::Report::selected_from(reporting.selected),
            verification,
            peak_memory_bytes,
            wall_seconds: reporting.started.elapsed().as_secs_f64(),
            exit: report::Report::exit_from(supervised.end),
            gpurun_exit_status: status,
        };
        if reporting.summary {
            logging::print_outside(
                "info",
                &summary.summary(),
                Some(("report", serde_json::to_value(&summary).expect("plain data"))),
            );
        }
        if let Some(file) = reporting.json_file {
            summary.write_json(file);
        }
    } else if let Some(monitor) = monitor.as_mut() {
        monitor.finish();
    }
    match (supervised.strict_failure, supervised.end) {
        (Some(_), _) => Ok(exit_code::GPURUN_ERROR),
        (None, child::End::Exited(code)) => Ok(code),
        (None, child::End::Signaled(signal)) => {
            tracing::debug!("the command was killed by {}", crate::options::signal::name(signal));
            signals::die_by(signal)
        }
    }
}

fn session_library(session: &Option<nvml::Session>) -> &std::path::Path {
    session.as_ref().map(nvml::Session::library).unwrap_or(std::path::Path::new(nvml::DEFAULT_LIBRARY))
}

fn shown_command(command: &[OsString]) -> String {
    command.iter().map(|word| word.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

fn shown_gpus(selected: &[&Gpu]) -> String {
    let names: Vec<String> = selected
        .iter()
        .map(|gpu| format!("GPU {} ({})", gpu.index, gpu.name.as_deref().unwrap_or("unknown model")))
        .collect();
    if names.is_empty() {
        "no GPU".to_owned()
    } else {
        names.join(", ")
    }
}

fn print(text: &str) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).map_err(Error::Output)
}

/// `main`: run, print `gpurun: <error>` once on failure, exit with the documented code.
pub fn main_exit() -> i32 {
    // First of all: the caller's signal mask and ignored signals, for the child.
    let caller = CallerState::capture();
    match run(std::env::args_os().collect(), caller) {
        Ok(code) => i32::from(code),
        Err(error) => {
            logging::print_outside("error", &error.to_string(), None);
            i32::from(error.exit_code())
        }
    }
}
