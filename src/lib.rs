//! gpurun: put a command on the right NVIDIA GPU and tell the truth about it.
//!
//! `run` is the pipeline of DESIGN.md, one module per step.

pub mod cli;
pub mod config;
pub mod env;
pub mod exit_code;
pub mod gpu;
mod listing;
mod logging;
pub mod nvml;
pub mod policy;
mod procfs;
pub mod size;
pub mod visibility;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::cli::Cli;
use crate::config::{Config, Mode};
use crate::gpu::{Gpu, Machine};
use crate::listing::Plan;
use crate::policy::{Decision, Outcome};
use crate::visibility::Inherited;

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
    /// Exit 75, with the table of reasons.
    #[error("{0}")]
    NotEnoughGpus(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("running a COMMAND is not available in this build yet; use --list")]
    RunUnavailable,
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotEnoughGpus(_) => exit_code::NOT_ENOUGH_GPUS,
            _ => exit_code::GPURUN_ERROR,
        }
    }
}

/// Parses argv; `--help` and `--version` print and return early, before anything touches NVML.
fn parse_args(args: Vec<OsString>) -> Result<Result<Cli, ExitCode>, Error> {
    match cli::parse(args) {
        Ok(cli) => Ok(Ok(cli)),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            Ok(Err(ExitCode::SUCCESS))
        }
        Err(error) => {
            // clap renders "error: <what>\n\n<usage>"; keep gpurun's one-line prefix convention.
            let rendered = error.render().to_string();
            let message = rendered
                .trim_end()
                .strip_prefix("error: ")
                .unwrap_or(&rendered)
                .to_owned();
            Err(Error::Usage(message))
        }
    }
}

pub fn run(args: Vec<OsString>) -> Result<ExitCode, Error> {
    let cli = match parse_args(args)? {
        Ok(cli) => cli,
        Err(early_exit) => return Ok(early_exit),
    };
    let config = Config::from_cli(cli)?;
    logging::init(&config.verbosity);

    let session = nvml::open(config.nvml_lib.as_deref())?;
    let machine = session.probe()?;
    let visibility = visibility::resolve(&machine.gpus, &Inherited::from_env());
    for warning in &visibility.warnings {
        tracing::warn!("{warning}");
    }
    let decision = policy::decide(&machine.gpus, &visibility, &config.request)?;

    if let Mode::List { json } = config.mode {
        let text = if json {
            listing::json(&machine, session.library(), &decision.assessments, None)
        } else {
            listing::table(&machine, &decision.assessments)
        };
        print(&text)?;
        return Ok(ExitCode::SUCCESS);
    }

    let chosen = match chosen_gpus(&machine, &decision, config.request.count) {
        Ok(chosen) => chosen,
        Err(refusal) => {
            if config.mode == (Mode::DryRun { json: true }) {
                let plan = Plan {
                    selected: None,
                    env: None,
                };
                print(&listing::json(
                    &machine,
                    session.library(),
                    &decision.assessments,
                    Some(plan),
                ))?;
            }
            return Err(refusal);
        }
    };
    let inherited_var = |name: &str| std::env::var_os(name);
    let variables = env::child_variables(
        &machine.gpus,
        &chosen,
        config.visible_as,
        config.framework_env,
        inherited_var,
    );
    let selected: Vec<&Gpu> = chosen
        .iter()
        .filter_map(|&index| machine.gpus.iter().find(|gpu| gpu.index == index))
        .collect();

    match config.mode {
        Mode::List { .. } => unreachable!("handled above"),
        Mode::DryRun { json: true } => {
            let plan = Plan {
                selected: Some(selected),
                env: Some(&variables),
            };
            print(&listing::json(
                &machine,
                session.library(),
                &decision.assessments,
                Some(plan),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Mode::DryRun { json: false } => {
            print(&listing::dry_run(
                &machine,
                &decision.assessments,
                &selected,
                &variables,
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Mode::Export => {
            print(&env::export_lines(&variables))?;
            Ok(ExitCode::SUCCESS)
        }
        Mode::Run { .. } => Err(Error::RunUnavailable),
    }
}

/// The NVML indices to give the child, or exit 75's explanation. Fallbacks say what they did.
fn chosen_gpus(machine: &Machine, decision: &Decision, requested: u32) -> Result<Vec<u32>, Error> {
    match &decision.outcome {
        Outcome::Selected(chosen) => Ok(chosen.clone()),
        Outcome::FallbackBest(chosen) => {
            for index in chosen {
                let assessment = decision.assessments.iter().find(|a| a.index == *index);
                if let Some(a) = assessment.filter(|a| !a.eligible()) {
                    tracing::warn!(
                        "taking GPU {index} anyway (--fallback best): {}",
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
        Outcome::Refused { qualified } => Err(Error::NotEnoughGpus(listing::refusal(
            machine,
            &decision.assessments,
            requested,
            *qualified,
        ))),
    }
}

fn print(text: &str) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(Error::Output)
}

/// `main`: run, print `gpurun: <error>` once on failure, exit with the documented code.
pub fn main_exit() -> ExitCode {
    match run(std::env::args_os().collect()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("gpurun: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
