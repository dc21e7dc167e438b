//! argv (and the `GPURUN_*` variables) -> one validated `Config`. No NVML here.

use std::ffi::OsString;
use std::hash::{BuildHasher, RandomState};
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Cli;
use crate::options::model::ModelPattern;
use crate::options::{LogFormat, Verbosity, VerifyMode, VisibleAs};
use crate::select::policy::Request;

/// What gpurun was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `--list`: show the machine (and, with filters, what qualifies) and exit.
    List { json: bool },
    /// `--dry-run`: show the choice and the child's environment, and exit.
    DryRun { json: bool },
    /// `--export`: print `export` lines for `eval`, and exit.
    Export,
    /// `--doctor`: check the machine and say what is wrong.
    Doctor,
    /// Run COMMAND.
    Run { command: Vec<OsString> },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub request: Request,
    pub visible_as: VisibleAs,
    pub framework_env: bool,
    pub nvml_lib: Option<PathBuf>,
    pub verbosity: Verbosity,
    pub log_format: LogFormat,
    /// `None`: `--no-lock`.
    pub lock_dir: Option<PathBuf>,
    /// `Some(None)`: wait forever.
    pub wait: Option<Option<Duration>>,
    pub supervision: Supervision,
}

/// How the command is run and watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    pub no_forward: Vec<libc::c_int>,
    pub kill_after: Option<Duration>,
    pub parent_death_signal: Option<libc::c_int>,
    pub keep_orphans: bool,
    pub exec: bool,
    pub verify: VerifyMode,
    pub verify_timeout: Duration,
    pub report: bool,
    pub report_json: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no COMMAND given; usage: gpurun [OPTIONS] [--] COMMAND [ARGS]..., or gpurun --list")]
    NoCommand,
    #[error("{flag} takes no COMMAND, but got {command:?}")]
    CommandWithMode { flag: &'static str, command: String },
    #[error("--json goes with --list or --dry-run")]
    JsonWithoutMode,
    #[error("--model is empty; give part of a model name, like A100")]
    EmptyModel,
}

impl Config {
    pub fn from_cli(cli: Cli) -> Result<Config, ConfigError> {
        let mode_flag = [
            (cli.list, "--list"),
            (cli.dry_run, "--dry-run"),
            (cli.export, "--export"),
            (cli.doctor, "--doctor"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag));
        if let (Some(flag), Some(first)) = (mode_flag, cli.command.first()) {
            return Err(ConfigError::CommandWithMode { flag, command: first.to_string_lossy().into_owned() });
        }
        if cli.json && !(cli.list || cli.dry_run) {
            return Err(ConfigError::JsonWithoutMode);
        }
        let mode = match mode_flag {
            Some("--list") => Mode::List { json: cli.json },
            Some("--dry-run") => Mode::DryRun { json: cli.json },
            Some("--doctor") => Mode::Doctor,
            Some(_) => Mode::Export,
            None if cli.command.is_empty() => return Err(ConfigError::NoCommand),
            None => Mode::Run { command: cli.command },
        };
        if cli.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(ConfigError::EmptyModel);
        }
        let nvml_lib = cli.nvml_lib;
        let verbosity = match (cli.quiet, cli.verbose) {
            (true, _) => Verbosity::Quiet,
            (false, 0) => Verbosity::Normal,
            (false, 1) => Verbosity::Debug,
            (false, _) => Verbosity::Trace,
        };
        let request = Request {
            count: cli.gpus,
            min_free: cli.min_free,
            min_total: cli.min_total,
            max_util: cli.max_util,
            exclusive: cli.exclusive,
            devices: cli.devices.map(|list| list.0),
            exclude: cli.exclude.map(|list| list.0).unwrap_or_default(),
            model: cli.model.map(ModelPattern),
            policy: cli.policy,
            fallback: cli.fallback,
            seed: RandomState::new().hash_one(std::process::id()),
        };
        Ok(Config {
            mode,
            request,
            visible_as: cli.visible_as,
            framework_env: !cli.no_framework_env,
            nvml_lib,
            verbosity,
            log_format: cli.log_format,
            lock_dir: (!cli.no_lock).then(|| crate::reserve::lockdir::resolve_dir(cli.lock_dir.as_deref())),
            wait: cli.wait.map(|limit| limit.0),
            supervision: Supervision {
                no_forward: cli.no_forward.map(|list| list.0).unwrap_or_default(),
                kill_after: cli.kill_after,
                parent_death_signal: cli.parent_death_signal.0,
                keep_orphans: cli.keep_orphans,
                exec: cli.exec,
                verify: cli.verify,
                verify_timeout: cli.verify_timeout,
                report: cli.report,
                report_json: cli.report_json,
            },
        })
    }
}
