//! The plan's input (DESIGN 1): the parsed command line (`cli::Parsed`) resolved once, against
//! the world, into one immutable `Config` (as ripgrep's HiArgs is from its LowArgs). Resolving
//! reads what the command line alone cannot say: the history for `--min-free auto`, the house
//! rules, the launcher's variables for `--per-rank`, the MPS control pipe, the container or
//! launcher the command is. Nothing changes it after it is built; it hands each stage what it
//! needs (`acquire_options`, `plan_input`, `supervision`). No NVML here.

mod per_rank;
mod resolve;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use resolve::resolve;

use crate::cli::limits::Limits;
use crate::options::{CpuBind, LogFormat, Verbosity, Wait};
use crate::plan::container::{CidUse, ContainerError};
use crate::plan::launchers::LauncherError;
use crate::plan::supervision::Supervision;
use crate::plan::{Asked, PlanInput, Shaping};
use crate::rank::PerRank;
use crate::reserve::acquire;
use crate::select::policy::Request;

/// What gpurun was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `--doctor`: check the machine and say what is wrong.
    Doctor,
    /// `--history [PATTERN]`: list recent runs.
    History { json: bool, pattern: Option<String> },
    /// `--release`: end the caller's own holds.
    Release,
    /// Everything else probes, selects and then does one of these.
    Select(Goal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Goal {
    /// `--list`: show the machine (and, with filters, what qualifies) and exit; `links`: the
    /// link matrix too (`--list --topology`); `watch`: again every so often until Ctrl-C.
    List { json: bool, links: bool, watch: Option<std::time::Duration> },
    /// `--dry-run [COMMAND]`: show the choice, the child's environment and the command, and exit.
    DryRun { json: bool, command: Vec<OsString> },
    /// `--export`: print `export` lines for `eval`, and exit.
    Export,
    /// Run COMMAND.
    Run { command: Vec<OsString> },
    /// `--hold DURATION`: reserve for that long without a command (a detached holder).
    Hold { duration: std::time::Duration, for_pid: Option<u32> },
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) mode: Mode,
    pub(crate) request: Request,
    /// What shapes what the command gets and where it runs: the plan's settings.
    pub(crate) shaping: Shaping,
    /// How the command is run and watched, within the house rules.
    pub(crate) supervision: Supervision,
    /// `--vendor`, `--nvml-lib`, `--amd-smi-lib`: what the probe thread opens.
    pub(crate) libraries: crate::probe::vendor::Libraries,
    pub(crate) nvml_timeout: Duration,
    pub(crate) logging: Logging,
    /// `None`: `--no-lock`.
    pub(crate) lock_dir: Option<PathBuf>,
    /// `--wait`, within the house rule max-wait.
    pub(crate) wait: Wait,
    /// The house rules (already applied to the request and the wait; kept to show them).
    pub(crate) limits: Limits,
    /// What the user said, and how it was read.
    pub(crate) said: Said,
}

/// `-q`/`-v` and `--log-format`.
#[derive(Debug, Clone)]
pub(crate) struct Logging {
    pub(crate) verbosity: Verbosity,
    pub(crate) format: LogFormat,
}

/// What the user said, and how it was read: for the wait queue, the history and `-v`.
#[derive(Debug, Clone)]
pub(crate) struct Said {
    /// Options whose value came from a configuration file or a variable: long name -> where
    /// (`/etc/gpurun/config.toml:3` or `GPURUN_MIN_FREE`).
    pub(crate) origins: BTreeMap<String, String>,
    /// The user's own option words, for the wait queue ("--gpus 2 --min-free 20G").
    pub(crate) request_text: String,
    /// What `--min-free` was read as, or what `--min-free auto` decided, and why.
    pub(crate) sizing: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("no COMMAND given; usage: gpurun [OPTIONS] [--] COMMAND [ARGS]..., or gpurun --list")]
    NoCommand,
    #[error("{flag} takes no COMMAND, but got {command:?}")]
    CommandWithMode { flag: &'static str, command: String },
    #[error(
        "--wait {word}: {word} is not a command; did you mean --wait={word}? (a limit is attached with =; \
         a bare --wait waits forever)"
    )]
    WaitLimitAsCommand { word: String },
    #[error("--json goes with --list, --dry-run or --history")]
    JsonWithoutMode,
    #[error("--history takes one PATTERN (a part of the command), but got {0}")]
    HistoryPatterns(String),
    #[error("--hold holds GPUs, and --gpus 0 (or --fallback cpu) asks for none: give --gpus N")]
    HoldNothing,
    #[error("{origin}--model is empty; give part of a model name, like A100")]
    EmptyModel { origin: String },
    /// A house rule forbids what was asked.
    #[error("{0}")]
    HouseRule(String),
    /// `--per-rank` cannot work as asked (no launcher variables, a range, --no-lock).
    #[error("{0}")]
    PerRank(String),
    /// `--mps` cannot work as asked.
    #[error("{0}")]
    Mps(String),
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error(transparent)]
    Launcher(#[from] LauncherError),
}

impl Config {
    /// The libraries the probe thread opens for this run (`--list` also looks beside NVML).
    pub(crate) fn libraries_to_open(&self) -> crate::probe::vendor::Libraries {
        let look_beside = matches!(self.mode, Mode::Select(Goal::List { .. }));
        crate::probe::vendor::Libraries { look_beside, ..self.libraries.clone() }
    }

    /// Where an option's value came from, when not from the command line.
    pub(crate) fn origin(&self, long: &str) -> Option<&str> {
        self.said.origins.get(long).map(String::as_str)
    }

    pub(crate) fn acquire_options(&self) -> acquire::Options<'_> {
        // Leases are world-readable: the program's name, never the arguments.
        let command = match &self.mode {
            Mode::Select(Goal::Run { command }) => crate::reserve::lease::program_name(command),
            Mode::Select(Goal::Hold { duration, .. }) => crate::reserve::holder::lease_command(*duration),
            _ => String::new(),
        };
        let listing = matches!(self.mode, Mode::Select(Goal::List { .. }));
        acquire::Options {
            request: &self.request,
            lock_dir: self.lock_dir.clone(),
            wait: if listing { Wait::No } else { self.wait },
            hold: matches!(self.mode, Mode::Select(Goal::Run { .. } | Goal::Hold { .. })),
            command,
            request_text: self.said.request_text.clone(),
            nvml_timeout: self.nvml_timeout,
            json_logs: self.logging.format == LogFormat::Json,
            listing,
            max_gpus_per_user: self
                .limits
                .max_gpus_per_user
                .map(|max| (max, self.limits.rule("max-gpus-per-user", &max.to_string()))),
            // Pairwise NVML calls: only where links are chosen by or shown.
            topology: match &self.mode {
                Mode::Select(Goal::List { json, links, .. }) => *json || *links,
                _ => self.request.wants_several() && !self.request.count.is_none(),
            },
            group: self.shaping.per_rank.as_ref().map(PerRank::group_share),
            needs: self.probe_needs(),
            system_lock_dir: self.lock_dir.as_deref().is_some_and(|dir| self.limits.is_system_lock_dir(dir)),
        }
    }

    /// What this run shows or uses beyond what any request needs (DESIGN 13: on a real driver
    /// memory affinity alone costs 11.7 ms a GPU): a listing or a dry run shows everything;
    /// `--cpu-bind numa` (`--per-rank`'s default) binds by the GPUs' local CPUs; `-v` says why
    /// each GPU was passed over, for which it reads every GPU's utilization and health.
    fn probe_needs(&self) -> crate::probe::Needs {
        let shown = matches!(self.mode, Mode::Select(Goal::List { .. } | Goal::DryRun { .. }));
        let explained = tracing::enabled!(tracing::Level::DEBUG);
        crate::probe::Needs {
            placement: shown || self.shaping.cpu_bind == CpuBind::Numa,
            sensors: shown,
            every_reading: shown || explained,
        }
    }

    /// What the plan is built from, for this goal: `min_free`, the `--min-free` the decision
    /// applied, and `sizing`, what `--min-free auto` decided.
    pub(crate) fn plan_input<'a>(
        &'a self,
        goal: &'a Goal,
        min_free: Option<crate::options::size::Threshold>,
        sizing: Option<String>,
    ) -> PlanInput<'a> {
        PlanInput {
            shaping: &self.shaping,
            command: match goal {
                Goal::Run { command } if self.supervision.exec => Some((command.as_slice(), CidUse::Left)),
                Goal::Run { command } => Some((command.as_slice(), CidUse::Made)),
                Goal::DryRun { command, .. } => Some((command.as_slice(), CidUse::Shown)),
                Goal::List { .. } | Goal::Export | Goal::Hold { .. } => None,
            },
            supervision: &self.supervision,
            asked: Asked { min_free, request_text: self.said.request_text.clone(), sizing },
        }
    }
}
