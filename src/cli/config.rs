//! The parsed command line (settings included) -> one validated `Config`. No NVML here.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::limits::Limits;
use crate::cli::{Cli, WaitLimit};
use crate::history::{self, sizing};
use crate::launch::Supervision;
use crate::options::model::ModelPattern;
use crate::options::size::{MinFree, Threshold};
use crate::options::{duration, shell};
use crate::options::{CpuBind, LogFormat, Verbosity, VisibleAs};
use crate::probe::nvml::DEFAULT_LIBRARY;
use crate::rank::{launcher, PerRank};
use crate::reserve::acquire;
use crate::select::policy::Request;

/// What gpurun was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `--doctor`: check the machine and say what is wrong.
    Doctor,
    /// `--history [PATTERN]`: list recent runs.
    History { json: bool, pattern: Option<String> },
    /// Everything else probes, selects and then does one of these.
    Select(Goal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Goal {
    /// `--list`: show the machine (and, with filters, what qualifies) and exit; `links`: the
    /// link matrix too (`--list --topology`).
    List { json: bool, links: bool },
    /// `--dry-run [COMMAND]`: show the choice, the child's environment and the command, and exit.
    DryRun { json: bool, command: Vec<OsString> },
    /// `--export`: print `export` lines for `eval`, and exit.
    Export,
    /// Run COMMAND.
    Run { command: Vec<OsString> },
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) mode: Mode,
    pub(crate) request: Request,
    /// `None`: indices, and MIG devices by UUID.
    pub(crate) visible_as: Option<VisibleAs>,
    pub(crate) cpu_bind: CpuBind,
    /// `--cpu-bind` was given (not `--per-rank`'s default).
    pub(crate) cpu_bind_asked: bool,
    pub(crate) framework_env: bool,
    pub(crate) nvml_lib: Option<PathBuf>,
    pub(crate) nvml_timeout: Duration,
    pub(crate) verbosity: Verbosity,
    pub(crate) log_format: LogFormat,
    /// `None`: `--no-lock`.
    pub(crate) lock_dir: Option<PathBuf>,
    /// `Some(None)`: wait forever.
    pub(crate) wait: Option<Option<Duration>>,
    pub(crate) supervision: Supervision,
    /// Options whose value came from a configuration file or a variable: long name -> where
    /// (`/etc/gpurun/config.toml:3` or `GPURUN_MIN_FREE`).
    pub(crate) origins: BTreeMap<String, String>,
    /// The user's own option words, for the wait queue ("--gpus 2 --min-free 20G").
    pub(crate) request_text: String,
    /// `--min-free auto[:SIZE]`: the size for when there is no history (request.min_free is
    /// filled in by `size_min_free`).
    pub(crate) min_free_auto: Option<Option<Threshold>>,
    /// What `--min-free auto` decided, and why.
    pub(crate) sizing: Option<String>,
    /// The house rules (applied by `apply_limits`).
    pub(crate) limits: Limits,
    /// `--per-rank`: this rank, and what the group asks for.
    pub(crate) per_rank: Option<PerRank>,
    /// `--container`, and the container run the command is (checked here: a conflict is
    /// refused before anything is probed or started).
    pub(crate) container_use: crate::options::ContainerUse,
    pub(crate) container: Option<crate::launch::container::ContainerRun>,
    /// `--mps`: the client settings the command gets.
    pub(crate) mps: Option<crate::launch::env::MpsJoin>,
    /// `--launcher`, and the launcher the command is (refused here where several nodes or a
    /// hostfile are asked for, before anything is probed).
    pub(crate) launcher_use: crate::options::LauncherUse,
    pub(crate) launcher: Option<crate::launch::launchers::LauncherRun>,
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
    Container(#[from] crate::launch::container::ContainerError),
    #[error(transparent)]
    Launcher(#[from] crate::launch::launchers::LauncherError),
}

/// `--mps`: the control pipe a client of this user would use, and whether a daemon reads it.
fn mps_daemon() -> (PathBuf, bool) {
    let pipe = crate::launch::env::mps_control_pipe();
    let read = crate::process::stdio::fifo_has_reader(&pipe) == Some(true);
    (pipe, read)
}

/// `--mps`: the client settings, or why they cannot be: an MPS server numbers the devices its
/// own way (so they go by UUID), and a container would need the pipe directory mounted.
fn mps_join(cli: &Cli, container: bool) -> Result<Option<crate::launch::env::MpsJoin>, ConfigError> {
    if !cli.mps {
        return Ok(None);
    }
    if cli.visible_as == Some(VisibleAs::Index) {
        return Err(ConfigError::Mps(
            "--mps names the GPUs by UUID (an MPS server numbers devices its own way): drop --visible-as index"
                .to_owned(),
        ));
    }
    if container {
        return Err(ConfigError::Mps(
            "--mps with a container run: the container needs the MPS pipe directory mounted and its \
             variables set; pass them to the runtime yourself"
                .to_owned(),
        ));
    }
    Ok(Some(crate::launch::env::MpsJoin { threads: cli.mps_threads, pinned_bytes: cli.mps_mem }))
}

/// What a `--min-free` in decimal units was read as (`8 GB = 7.45 GiB`), for the dry run, the
/// report and `-v`; `None` for binary units and percentages, which read as typed.
fn read_as(threshold: Threshold) -> Option<String> {
    let Threshold::Bytes(bytes) = threshold else { return None };
    let exact = crate::options::size::exact(bytes);
    (exact != crate::options::size::human(bytes))
        .then(|| format!("{exact} (KB, MB, GB, TB are decimal; K, M, G, T and KiB..TiB binary)"))
}

/// `-q`, `-v`, `-vv`.
fn verbosity(quiet: bool, verbose: u8) -> Verbosity {
    match (quiet, verbose) {
        (true, _) => Verbosity::Quiet,
        (false, 0) => Verbosity::Normal,
        (false, 1) => Verbosity::Debug,
        (false, _) => Verbosity::Trace,
    }
}

/// The launcher the command is, for a launch or a dry run on this host (`None` for a rank or
/// a container run: a launcher that starts ranks gets the choice, not what runs under it);
/// deepspeed's `--num_gpus N` without `--gpus` makes the request N GPUs.
fn launcher(
    cli: &mut Cli,
    mode_flag: Option<Option<ModeFlag>>,
) -> Result<Option<crate::launch::launchers::LauncherRun>, ConfigError> {
    let launcher = match mode_flag {
        Some(None | Some(ModeFlag::DryRun)) if !cli.gpus.is_none() => {
            crate::launch::launchers::recognise(&cli.command)?
        }
        _ => None,
    };
    if let Some(asked) = launcher.as_ref().and_then(|run| run.asked_count()) {
        if !cli.gpus_given && cli.launcher == crate::options::LauncherUse::Auto {
            cli.gpus = crate::options::count::Count::exactly(asked);
        }
    }
    Ok(launcher)
}

impl Config {
    pub(crate) fn from_cli(
        mut cli: Cli,
        origins: BTreeMap<String, String>,
        request_text: String,
        limits: Limits,
    ) -> Result<Config, ConfigError> {
        let mode_flag = ModeFlag::of(&cli);
        let takes_words = |flag: &ModeFlag| matches!(flag, ModeFlag::DryRun | ModeFlag::History);
        if let (Some(flag), Some(first)) = (mode_flag.filter(|f| !takes_words(f)), cli.command.first()) {
            let command = first.to_string_lossy().into_owned();
            return Err(ConfigError::CommandWithMode { flag: flag.name(), command });
        }
        if cli.json && !(cli.list || cli.dry_run || cli.history) {
            return Err(ConfigError::JsonWithoutMode);
        }
        let per_rank = per_rank(&cli, mode_flag, &origins)?;
        // A launch, or a dry run of one: only one that takes GPUs is rewritten.
        let container = match mode_flag {
            None | Some(ModeFlag::DryRun) if !cli.gpus.is_none() => {
                crate::launch::container::recognise(&cli.command, cli.container)?
            }
            _ => None,
        };
        let on_host = container.is_none() && per_rank.is_none();
        let launcher = launcher(&mut cli, on_host.then_some(mode_flag))?;
        let mode = mode(mode_flag, &mut cli, &origins)?;
        if cli.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            let origin = origins.get("model").map(|o| format!("{o}: ")).unwrap_or_default();
            return Err(ConfigError::EmptyModel { origin });
        }
        let lock_dir = crate::reserve::lockdir::resolve_dir(cli.lock_dir.as_deref());
        let reserves = matches!(mode, Mode::Select(Goal::Run { .. })) && !cli.gpus.is_none();
        let root = nix::unistd::geteuid().is_root();
        if let Some(why) = limits.lock_escape(cli.no_lock, &lock_dir, root).filter(|_| reserves) {
            return Err(ConfigError::HouseRule(why));
        }
        let (min_free, min_free_auto) = match cli.min_free {
            Some(MinFree::Given(threshold)) => (Some(threshold), None),
            Some(MinFree::Auto { fallback }) => (None, Some(fallback)),
            None => (None, None),
        };
        let supervision = supervision(&mut cli);
        let mps = mps_join(&cli, container.is_some())?;
        let request = Request {
            count: per_rank.as_ref().map_or(cli.gpus, PerRank::group_count),
            min_free,
            min_total: cli.min_total,
            max_util: cli.max_util,
            exclusive: cli.exclusive,
            devices: cli.devices.map(|list| list.0),
            exclude: cli.exclude.map(|list| list.0).unwrap_or_default(),
            model: cli.model.map(ModelPattern),
            policy: cli.policy,
            fallback: cli.fallback,
            mig: cli.mig,
            index_only: cli.visible_as == Some(VisibleAs::Index),
            same_model: cli.same_model,
            topology: cli.topology.unwrap_or_default(),
            health: cli.health,
            seed: RandomState::new().hash_one(std::process::id()),
            min_free_floor: limits.default_min_free,
            min_free_auto: false,
            count_words: per_rank.as_ref().map(PerRank::count_words),
            mps: cli.mps,
            mps_daemon: cli.mps.then(mps_daemon),
        };

        Ok(Config {
            mode,
            request,
            visible_as: cli.visible_as,
            cpu_bind_asked: cli.cpu_bind.is_some(),
            cpu_bind: cli.cpu_bind.unwrap_or(match per_rank {
                Some(_) => CpuBind::Numa,
                None => CpuBind::None,
            }),
            framework_env: !cli.no_framework_env,
            nvml_lib: cli.nvml_lib,
            nvml_timeout: cli.nvml_timeout,
            verbosity: verbosity(cli.quiet, cli.verbose),
            log_format: cli.log_format,
            lock_dir: (!cli.no_lock).then_some(lock_dir),
            wait: cli.wait.map(|limit| limit.0),
            supervision,
            origins,
            request_text,
            min_free_auto,
            sizing: min_free.and_then(read_as),
            limits,
            per_rank,
            container_use: cli.container,
            container,
            launcher_use: cli.launcher,
            launcher,
            mps,
        })
    }

    /// The settings resolved against the world before anything is probed: for a mode that
    /// chooses GPUs, `--min-free auto` sized from the history and the house rules applied.
    pub(crate) fn resolve(mut self) -> Config {
        if let (Some(read), None) = (&self.sizing, self.min_free_auto) {
            tracing::debug!("--min-free {read}");
        }
        if let Mode::Select(_) = self.mode {
            self.size_min_free();
            self.apply_limits();
        }
        self
    }

    /// Sizes `--min-free auto` from the history for the command run (or shown by --dry-run),
    /// in the working directory: `request.min_free` and `sizing` are set, and the reason is
    /// logged.
    fn size_min_free(&mut self) {
        let Some(fallback) = self.min_free_auto else { return };
        let command: Vec<&str> = match &self.mode {
            Mode::Select(Goal::Run { command } | Goal::DryRun { command, .. }) => {
                command.iter().filter_map(|word| word.to_str()).collect()
            }
            _ => Vec::new(),
        };
        let sizing = if command.is_empty() {
            let then = if fallback.is_some() { "; using the given size" } else { ": no memory filter" };
            sizing::Sizing {
                threshold: fallback,
                why: format!("auto: no command to size for (give one: --dry-run -- COMMAND){then}"),
                from_history: false,
            }
        } else {
            let directory = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
            // --no-history stops the writing, not the reading.
            let records = history::path().map(|path| history::read(&path)).unwrap_or_default();
            sizing::size_for(&records, &command, &directory, fallback)
        };
        tracing::info!("--min-free {}", sizing.why);
        self.request.min_free_auto = sizing.from_history;
        self.request.min_free = sizing.threshold;
        self.sizing = Some(sizing.why);
    }

    /// The house rules over what was asked: --wait within max-wait, --min-free at least
    /// default-min-free. Each change is said once.
    fn apply_limits(&mut self) {
        // What an MPS client pins is reserved as --min-free would be, so that co-scheduled
        // MPS jobs budget memory like other jobs.
        if let Some(pinned) = self.mps.as_ref().and_then(|mps| mps.pinned_bytes) {
            let pinned = Threshold::Bytes(pinned);
            self.request.min_free =
                Some(self.request.min_free.map_or(pinned, |asked| asked.at_least(pinned)));
        }
        let capped = self.limits.cap_wait(self.wait);
        if capped != self.wait {
            let rule =
                self.limits.rule("max-wait", &duration::compact(self.limits.max_wait.unwrap_or_default()));
            tracing::info!("--wait limited by the house rule {rule}");
            self.wait = capped;
        }
        if let Some(floor) = self.limits.default_min_free {
            let raised = self.request.min_free.map_or(floor, |asked| asked.at_least(floor));
            if Some(raised) != self.request.min_free {
                tracing::info!(
                    "--min-free is {raised} by the house rule {}",
                    self.limits.rule("default-min-free", &floor.to_string())
                );
                self.request.min_free = Some(raised);
            }
        }
    }

    /// The NVML library to load, as the user named it.
    pub(crate) fn library(&self) -> PathBuf {
        self.nvml_lib.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY))
    }

    /// Where an option's value came from, when not from the command line.
    pub(crate) fn origin(&self, long: &str) -> Option<&str> {
        self.origins.get(long).map(String::as_str)
    }

    /// `-v`: which settings came from which file or variable.
    pub(crate) fn log_origins(&self) {
        if let Some(notice) = &self.limits.notice {
            tracing::debug!("{notice}");
        }
        for (long, origin) in &self.origins {
            tracing::debug!("--{long} from {origin}");
        }
    }

    pub(crate) fn acquire_options(&self) -> acquire::Options<'_> {
        // Leases are world-readable: the program's name, never the arguments.
        let command = match &self.mode {
            Mode::Select(Goal::Run { command }) => crate::reserve::lease::program_name(command),
            _ => String::new(),
        };
        let listing = matches!(self.mode, Mode::Select(Goal::List { .. }));
        acquire::Options {
            request: &self.request,
            lock_dir: self.lock_dir.clone(),
            wait: if listing { None } else { self.wait },
            hold: matches!(self.mode, Mode::Select(Goal::Run { .. })),
            command,
            request_text: self.request_text.clone(),
            nvml_timeout: self.nvml_timeout,
            json_logs: self.log_format == LogFormat::Json,
            listing,
            max_gpus_per_user: self
                .limits
                .max_gpus_per_user
                .map(|max| (max, self.limits.rule("max-gpus-per-user", &max.to_string()))),
            // Pairwise NVML calls: only where links are chosen by or shown.
            topology: match &self.mode {
                Mode::Select(Goal::List { json, links }) => *json || *links,
                _ => self.request.wants_several() && !self.request.count.is_none(),
            },
            group: None,
        }
    }
}

/// How the command is run and watched, as the command line says.
fn supervision(cli: &mut Cli) -> Supervision {
    Supervision {
        no_forward: cli.no_forward.take().map(|list| list.0).unwrap_or_default(),
        kill_after: cli.kill_after,
        parent_death_signal: cli.parent_death_signal.0,
        keep_orphans: cli.keep_orphans,
        exec: cli.exec,
        verify: cli.verify,
        verify_timeout: cli.verify_timeout,
        report: cli.report,
        report_json: cli.report_json.take(),
        history: if cli.no_history { None } else { history::path() },
        on_start: cli.on_start.take(),
        on_exit: cli.on_exit.take(),
    }
}

/// A mode flag: what gpurun was asked to do instead of running a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModeFlag {
    List,
    DryRun,
    Export,
    Doctor,
    History,
}

impl ModeFlag {
    /// The first mode flag given (clap lets only one through).
    fn of(cli: &Cli) -> Option<ModeFlag> {
        [
            (cli.list, ModeFlag::List),
            (cli.dry_run, ModeFlag::DryRun),
            (cli.export, ModeFlag::Export),
            (cli.doctor, ModeFlag::Doctor),
            (cli.history, ModeFlag::History),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    fn name(self) -> &'static str {
        match self {
            ModeFlag::List => "--list",
            ModeFlag::DryRun => "--dry-run",
            ModeFlag::Export => "--export",
            ModeFlag::Doctor => "--doctor",
            ModeFlag::History => "--history",
        }
    }
}

/// The mode, with the command's words (taken from `cli`) where it has them.
fn mode(
    mode_flag: Option<ModeFlag>,
    cli: &mut Cli,
    origins: &BTreeMap<String, String>,
) -> Result<Mode, ConfigError> {
    let command = std::mem::take(&mut cli.command);
    Ok(match mode_flag {
        Some(ModeFlag::List) => Mode::Select(Goal::List { json: cli.json, links: cli.topology.is_some() }),
        Some(ModeFlag::DryRun) => Mode::Select(Goal::DryRun { json: cli.json, command }),
        Some(ModeFlag::Doctor) => Mode::Doctor,
        // `--history train.py --json` as well as `--history --json train.py`: the words
        // after a PATTERN would be a command's, but --history runs none.
        Some(ModeFlag::History) => match &command[..] {
            [] => Mode::History { json: cli.json, pattern: None },
            [word] => Mode::History { json: cli.json, pattern: Some(word.to_string_lossy().into_owned()) },
            [word, json] if json == "--json" => {
                Mode::History { json: true, pattern: Some(word.to_string_lossy().into_owned()) }
            }
            words => return Err(ConfigError::HistoryPatterns(shell::quote(words))),
        },
        Some(ModeFlag::Export) => Mode::Select(Goal::Export),
        None if command.is_empty() => return Err(ConfigError::NoCommand),
        None if cli.wait == Some(WaitLimit(None)) && !origins.contains_key("wait") => {
            if let Some(word) = duration_taken_for_a_command(&command[0]) {
                return Err(ConfigError::WaitLimitAsCommand { word });
            }
            Mode::Select(Goal::Run { command })
        }
        None => Mode::Select(Goal::Run { command }),
    })
}

/// The most GPUs a `--per-rank` group may ask for: far above any node (NVLink domains of 72
/// GPUs span several), far below where a product of two u32 counts could wrap.
const MAX_GROUP_GPUS: u32 = 1 << 16;

/// The default `--rank-timeout`.
const RANK_TIMEOUT: Duration = Duration::from_secs(60);

/// `--per-rank`, checked and read from the launcher's variables (for a launch, a dry run or an
/// export; --list shows the machine whatever the rank). `--group` and `--rank-timeout` given on
/// the command line without it are a mistake; from a file or variable they are defaults.
fn per_rank(
    cli: &Cli,
    mode_flag: Option<ModeFlag>,
    origins: &BTreeMap<String, String>,
) -> Result<Option<PerRank>, ConfigError> {
    let typed = |long: &str| !origins.contains_key(long);
    let runs = mode_flag.is_none();
    let Some(view) =
        cli.per_rank.filter(|_| matches!(mode_flag, None | Some(ModeFlag::DryRun | ModeFlag::Export)))
    else {
        if cli.per_rank.is_none() {
            for (given, flag) in
                [(cli.group.is_some(), "group"), (cli.rank_timeout.is_some(), "rank-timeout")]
            {
                if given && typed(flag) {
                    return Err(ConfigError::PerRank(format!("--{flag} goes with --per-rank")));
                }
            }
        }
        return Ok(None);
    };
    let count = cli.gpus;
    if count.max != Some(count.min) || count.min == 0 {
        return Err(ConfigError::PerRank(format!(
            "--per-rank --gpus {count}: under --per-rank, --gpus is how many GPUs each rank gets, a number from 1"
        )));
    }
    if cli.no_lock && runs {
        return Err(ConfigError::PerRank(
            "--per-rank needs the lock directory (the ranks find each other there): drop --no-lock"
                .to_owned(),
        ));
    }
    if let Some(name) = cli.group.as_deref().filter(|name| name.is_empty()) {
        return Err(ConfigError::PerRank(format!("--group {name:?} is empty: name the job")));
    }
    let parent = nix::unistd::getppid().as_raw() as u32;
    let parent = crate::process::procfs::stat(parent).map(|stat| (parent, stat.start_ticks));
    let host = nix::unistd::gethostname().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let rank = launcher::detect(|name| std::env::var(name).ok(), cli.group.as_deref(), parent, &host)
        .map_err(ConfigError::PerRank)?;
    // The group's size comes from the environment: a product that does not fit is no request.
    // (No node has more than a few dozen GPUs; a count NVML's u32 indices could not name is a
    // launcher's variable gone wrong.)
    if rank.local_size.checked_mul(count.min).is_none_or(|total| total > MAX_GROUP_GPUS) {
        return Err(ConfigError::PerRank(format!(
            "--per-rank: {}={} ranks x --gpus {} is more GPUs than any node has (at most {MAX_GROUP_GPUS}): is {} right?",
            rank.size_variable, rank.local_size, count.min, rank.size_variable
        )));
    }
    Ok(Some(PerRank {
        rank,
        gpus_per_rank: count.min,
        timeout: cli.rank_timeout.unwrap_or(RANK_TIMEOUT),
        own_only: view == crate::options::RankView::Own,
    }))
}

/// `word` when it reads as a duration and names no program (`gpurun --wait 10m python x.py`):
/// the user meant `--wait=10m`.
fn duration_taken_for_a_command(word: &OsString) -> Option<String> {
    let word = word.to_str()?;
    duration::parse(word).ok()?;
    let runnable = |path: &Path| nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok();
    let found = match word.contains('/') {
        true => runnable(Path::new(word)),
        false => std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| runnable(&dir.join(word)))),
    };
    (!found).then(|| word.to_owned())
}
