//! gpurun: put a command on the right NVIDIA GPU and tell the truth about it.
//!
//! `run` is the pipeline of DESIGN.md, one module per step.

pub mod cli;
pub mod config;
pub mod exit_code;
pub mod gpu;
mod listing;
mod logging;
pub mod nvml;
mod procfs;
pub mod size;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::cli::Cli;
use crate::config::{Config, Mode};

/// gpurun's own failures, each with the exit code it means.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Nvml(#[from] nvml::OpenError),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("running a COMMAND is not available in this build yet; use --list")]
    RunUnavailable,
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        exit_code::GPURUN_ERROR
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
    match config.mode {
        Mode::List { json } => {
            let text = if json {
                listing::json(&machine, session.library())
            } else {
                listing::table(&machine)
            };
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(Error::Output)?;
            Ok(ExitCode::SUCCESS)
        }
        Mode::Run { .. } => Err(Error::RunUnavailable),
    }
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
