//! How the command is run and watched, as resolved from the command line and the house rules:
//! what supervision, verification and the end of the run work by. Grouped by who reads it: the
//! limits (the supervisor loop's deadlines), what is written about the run, and the hooks.

use std::path::PathBuf;
use std::time::Duration;

use crate::options::VerifyMode;
use crate::verify::idle::IdleRules;

/// How the command is run and watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Supervision {
    /// What ends the run on time.
    pub(crate) limits: Limits,
    /// `--no-forward`: signals gpurun does not pass on.
    pub(crate) no_forward: Vec<i32>,
    pub(crate) parent_death_signal: Option<i32>,
    pub(crate) keep_orphans: bool,
    pub(crate) exec: bool,
    pub(crate) verify: VerifyMode,
    pub(crate) verify_timeout: Duration,
    /// `--idle-warn` and the house rule on idle GPUs.
    pub(crate) idle: IdleRules,
    /// What is written about the run, and where.
    pub(crate) records: Records,
    /// `--on-start`, `--on-exit`: shell command lines.
    pub(crate) hooks: Hooks,
}

/// What ends a run on time: `--time-limit` and the house rule max-time-limit, each with the
/// signal it sends, and the graces before SIGKILL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `--kill-after` (None: never).
    pub(crate) kill_after: Option<Duration>,
    pub(crate) time_limits: Vec<TimeLimit>,
    /// The house rules' grace between SIGTERM and SIGKILL.
    pub(crate) rule_grace: Duration,
}

/// `--time-limit`, or the house rule max-time-limit: how long the command may run, and the
/// signal that ends it then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeLimit {
    pub(crate) after: Duration,
    pub(crate) signal: i32,
    /// The house rule's (its words, and its grace before SIGKILL); `None`: the user's.
    pub(crate) rule: Option<(String, Duration)>,
}

/// What is written about the run: the report (logged, as JSON), the history, and what
/// dashboards read (`--job-map-dir`, `--prom-file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Records {
    pub(crate) report: bool,
    pub(crate) report_json: Option<PathBuf>,
    /// Where the run's record goes (None: --no-history).
    pub(crate) history: Option<PathBuf>,
    pub(crate) job_map_dir: Option<PathBuf>,
    pub(crate) prom_file: Option<PathBuf>,
}

/// `--on-start` and `--on-exit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hooks {
    pub(crate) on_start: Option<String>,
    pub(crate) on_exit: Option<String>,
}
