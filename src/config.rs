//! argv (and the `GPURUN_*` variables clap reads) -> one validated `Config`. No NVML here.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cli::Cli;

/// What gpurun was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `--list`: show the machine and exit.
    List { json: bool },
    /// Run COMMAND.
    Run { command: Vec<OsString> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Debug,
    Trace,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub nvml_lib: Option<PathBuf>,
    pub verbosity: Verbosity,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no COMMAND given; usage: gpurun [OPTIONS] [--] COMMAND [ARGS]..., or gpurun --list")]
    NoCommand,
    #[error("--list takes no COMMAND, but got {0:?}")]
    CommandWithList(String),
}

impl Config {
    pub fn from_cli(cli: Cli) -> Result<Config, ConfigError> {
        let mode = match (cli.list, cli.command.is_empty()) {
            (true, true) => Mode::List { json: cli.json },
            (true, false) => {
                return Err(ConfigError::CommandWithList(
                    cli.command[0].to_string_lossy().into_owned(),
                ))
            }
            (false, true) => return Err(ConfigError::NoCommand),
            (false, false) => Mode::Run {
                command: cli.command,
            },
        };
        // Flag, else the variable; an empty variable counts as unset, as in most tools.
        let nvml_lib = cli.nvml_lib.or_else(|| {
            std::env::var_os("GPURUN_NVML_LIB")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let verbosity = match (cli.quiet, cli.verbose) {
            (true, _) => Verbosity::Quiet,
            (false, 0) => Verbosity::Normal,
            (false, 1) => Verbosity::Debug,
            (false, _) => Verbosity::Trace,
        };
        Ok(Config {
            mode,
            nvml_lib,
            verbosity,
        })
    }
}
