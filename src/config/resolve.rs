//! The parsed command line -> one `Config`, resolved against the world in one pass: every
//! value is worked out first (the mode, the rank, the container or launcher the command is,
//! `--min-free auto` from the history, the house rules over `--min-free` and `--wait`), then
//! the `Config` is built once and never changed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};

use crate::cli::limits::Limits;
use crate::cli::{self, Cli, Parsed, WaitLimit};
use crate::config::{per_rank, Config, ConfigError, Goal, Logging, Mode, Said};
use crate::history::{self, sizing};
use crate::options::count::Count;
use crate::options::model::ModelPattern;
use crate::options::size::{MinFree, Threshold};
use crate::options::{duration, shell};
use crate::options::{CpuBind, LauncherUse, VisibleAs, Wait, DEFAULT_LOCK_DIR};
use crate::plan::env::MpsJoin;
use crate::plan::launchers::LauncherRun;
use crate::plan::supervision::{self, Hooks, Records, Supervision, TimeLimit};
use crate::plan::Shaping;
use crate::probe::vendor::Libraries;
use crate::rank::PerRank;
use crate::select::policy::Request;

/// Resolves the parsed command line into the run's `Config` (logging is set up: what the
/// resolution decides is said as it is decided).
pub(crate) fn resolve(parsed: Parsed) -> Result<Config, ConfigError> {
    let Parsed { cli, origins, request_text, limits, .. } = parsed;
    log_origins(&origins, &limits);
    let mode_flag = ModeFlag::of(&cli);
    let takes_words = |flag: &ModeFlag| matches!(flag, ModeFlag::DryRun | ModeFlag::History);
    if let (Some(flag), Some(first)) = (mode_flag.filter(|f| !takes_words(f)), cli.command.first()) {
        let command = first.to_string_lossy().into_owned();
        return Err(ConfigError::CommandWithMode { flag: flag.name(), command });
    }
    if cli.json && !(cli.list || cli.dry_run || cli.history) {
        return Err(ConfigError::JsonWithoutMode);
    }
    let chooses = matches!(mode_flag, None | Some(ModeFlag::DryRun | ModeFlag::Export));
    let per_rank = per_rank::per_rank(&cli, chooses, mode_flag.is_none(), &origins)?;
    // A launch, or a dry run of one: only one that takes GPUs is rewritten.
    let container = match mode_flag {
        None | Some(ModeFlag::DryRun) if !cli.gpus.is_none() => {
            crate::plan::container::recognise(&cli.command, cli.container)?
        }
        _ => None,
    };
    let on_host = container.is_none() && per_rank.is_none();
    let (launcher, gpus) = launcher(&cli, on_host.then_some(mode_flag))?;
    let mode = mode(mode_flag, &cli, &origins)?;
    if cli.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        let origin = origins.get("model").map(|o| format!("{o}: ")).unwrap_or_default();
        return Err(ConfigError::EmptyModel { origin });
    }
    let lock_dir = cli.lock_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_LOCK_DIR));
    let reserves = requests_gpus(&mode, gpus);
    let root = nix::unistd::geteuid().is_root();
    if let Some(why) = limits.lock_escape(cli.no_lock, &lock_dir, root).filter(|_| reserves) {
        return Err(ConfigError::HouseRule(why));
    }
    let supervision = supervision(&cli, &limits, reserves)?;
    let mps = mps_join(&cli, container.is_some())?;
    let selects = matches!(mode, Mode::Select(_));
    let (asked, sizing) = min_free_asked(cli.min_free, &mode, selects);
    let (min_free, min_free_auto) = match selects {
        true => (house_min_free(asked.threshold, mps.as_ref(), &limits), asked.from_history),
        false => (asked.threshold, false),
    };
    let wait = cli.wait.map_or(Wait::No, |WaitLimit(limit)| limit.map_or(Wait::Forever, Wait::AtMost));
    let wait = if selects { house_wait(wait, &limits) } else { wait };
    let count = per_rank.as_ref().map_or(gpus, PerRank::group_count);
    let request = request(&cli, count, (min_free, min_free_auto), per_rank.as_ref(), &limits)?;
    let shaping = shaping(&cli, per_rank, container, mps, launcher);
    Ok(Config {
        mode,
        request,
        shaping,
        supervision,
        libraries: Libraries::new(cli.vendor, cli.nvml_lib.clone(), cli.amd_smi_lib.clone()),
        nvml_timeout: cli.nvml_timeout,
        logging: Logging { verbosity: cli::verbosity(cli.quiet, cli.verbose), format: cli.log_format },
        lock_dir: (!cli.no_lock).then_some(lock_dir),
        wait,
        limits,
        said: Said { origins, request_text, sizing },
    })
}

/// What the request asks of the GPUs: `count` (the group's under `--per-rank`), the
/// `--min-free` under the house rules (and whether `auto` sized it from the history).
fn request(
    cli: &Cli,
    count: Count,
    (min_free, min_free_auto): (Option<Threshold>, bool),
    per_rank: Option<&PerRank>,
    limits: &Limits,
) -> Result<Request, ConfigError> {
    Ok(Request {
        count,
        min_free,
        min_total: cli.min_total,
        max_util: cli.max_util,
        exclusive: cli.exclusive,
        devices: cli.devices.clone().map(|list| list.0),
        exclude: cli.exclude.clone().map(|list| list.0).unwrap_or_default(),
        model: cli.model.clone().map(ModelPattern),
        policy: cli.policy,
        fallback: cli.fallback,
        mig: cli.mig,
        index_only: cli.visible_as == Some(VisibleAs::Index),
        same_model: cli.same_model,
        topology: cli.topology.unwrap_or_default(),
        health: cli.health,
        seed: RandomState::new().hash_one(std::process::id()),
        min_free_floor: limits.default_min_free,
        min_free_auto,
        count_words: per_rank.map(PerRank::count_words),
        mps: cli.mps,
        mps_daemon: match cli.mps {
            true => Some(mps_daemon()?),
            false => None,
        },
    })
}

/// What shapes what the command gets and where it runs: the plan's settings. `--per-rank`
/// binds each rank to its GPUs' CPUs unless told otherwise; the launcher is handed the
/// choice under `--launcher auto`, and under `off` only explains a wrong GPU.
fn shaping(
    cli: &Cli,
    per_rank: Option<PerRank>,
    container: Option<crate::plan::container::ContainerRun>,
    mps: Option<MpsJoin>,
    launcher: Option<LauncherRun>,
) -> Shaping {
    let cpu_bind = cli.cpu_bind.unwrap_or(if per_rank.is_some() { CpuBind::Numa } else { CpuBind::None });
    let launcher_note =
        launcher.as_ref().filter(|_| cli.launcher == LauncherUse::Off).and_then(|run| run.override_note());
    Shaping {
        visible_as: cli.visible_as,
        framework_env: !cli.no_framework_env,
        cpu_bind,
        cpu_bind_asked: cli.cpu_bind.is_some(),
        per_rank,
        container: container.map(|run| (run, cli.container)),
        surroundings: surroundings(cpu_bind),
        mps,
        launcher: launcher.filter(|_| cli.launcher == LauncherUse::Auto),
        launcher_note,
    }
}

/// What the plan needs of gpurun's own environment and process, read once here: an inherited
/// Slurm MPS allocation, gpurun's CPUs (for `--cpu-bind numa`), and the caller's variables the
/// command's are written from.
fn surroundings(cpu_bind: CpuBind) -> crate::plan::Surroundings {
    crate::plan::Surroundings {
        slurm_mps: crate::runtime::Inherited::from_env().slurm_mps(),
        own_cpus: match cpu_bind {
            CpuBind::Numa => crate::plan::affinity::own_cpus(),
            _ => Vec::new(),
        },
        caller_variables: crate::plan::env::CallerVariables::read(|name| std::env::var_os(name)),
    }
}

/// `--min-free` as asked: a size (with what a decimal one was read as), or `auto` sized from
/// the history for the command run (or shown by --dry-run) in the working directory, for a
/// mode that chooses GPUs. The sizing's reason is logged.
fn min_free_asked(given: Option<MinFree>, mode: &Mode, selects: bool) -> (sizing::Sizing, Option<String>) {
    let fallback = match given {
        None => return (sizing::Sizing { threshold: None, why: String::new(), from_history: false }, None),
        Some(MinFree::Given(threshold)) => {
            let read = read_as(threshold);
            if let Some(read) = &read {
                tracing::debug!("--min-free {read}");
            }
            return (
                sizing::Sizing { threshold: Some(threshold), why: String::new(), from_history: false },
                read,
            );
        }
        Some(MinFree::Auto { fallback }) => fallback,
    };
    if !selects {
        return (sizing::Sizing { threshold: None, why: String::new(), from_history: false }, None);
    }
    let command: Vec<&str> = match mode {
        Mode::Select(Goal::Run { command } | Goal::DryRun { command, .. }) => {
            command.iter().filter_map(|word| word.to_str()).collect()
        }
        _ => Vec::new(),
    };
    let sized = if command.is_empty() {
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
    tracing::info!("--min-free {}", sized.why);
    let why = Some(sized.why.clone());
    (sized, why)
}

/// `--min-free` under the house rules: at least what an MPS client pins (reserved as
/// --min-free would be, so that co-scheduled MPS jobs budget memory like other jobs), and at
/// least default-min-free (said when it raises the request).
fn house_min_free(asked: Option<Threshold>, mps: Option<&MpsJoin>, limits: &Limits) -> Option<Threshold> {
    let mut min_free = asked;
    if let Some(pinned) = mps.and_then(|mps| mps.pinned_bytes) {
        let pinned = Threshold::Bytes(pinned);
        min_free = Some(min_free.map_or(pinned, |asked| asked.at_least(pinned)));
    }
    let Some(floor) = limits.default_min_free else { return min_free };
    let raised = min_free.map_or(floor, |asked| asked.at_least(floor));
    if Some(raised) != min_free {
        tracing::info!(
            "--min-free is {raised} by the house rule {}",
            limits.rule("default-min-free", &floor.to_string())
        );
    }
    Some(raised)
}

/// `--wait` within the house rule max-wait (said when it shortens the wait).
fn house_wait(wait: Wait, limits: &Limits) -> Wait {
    let capped = limits.cap_wait(wait);
    if capped != wait {
        let rule = limits.rule("max-wait", &duration::compact(limits.max_wait.unwrap_or_default()));
        tracing::info!("--wait limited by the house rule {rule}");
    }
    capped
}

/// `-v`: which settings came from which file or variable.
fn log_origins(origins: &BTreeMap<String, String>, limits: &Limits) {
    if let Some(notice) = &limits.notice {
        tracing::debug!("{notice}");
    }
    for (long, origin) in origins {
        tracing::debug!("--{long} from {origin}");
    }
}

/// `--mps`: the control pipe a client of this user would use, and whether a daemon serves it
/// (whether or not its server runs yet: the first client starts it);
/// refused where it is not the caller's or root's (another user's planted pipe).
fn mps_daemon() -> Result<(PathBuf, bool), ConfigError> {
    let pipe = crate::plan::mps_control::mps_control_pipe();
    if let Some(why) = crate::plan::mps_control::untrusted_mps_pipe(&pipe) {
        return Err(ConfigError::Mps(format!(
            "--mps: {why}; set CUDA_MPS_PIPE_DIRECTORY to your own daemon's directory"
        )));
    }
    let serves = crate::plan::mps_control::mps_control_daemon(&pipe).is_some();
    Ok((pipe, serves))
}

/// `--mps`: the client settings, or why they cannot be: an MPS server numbers the devices its
/// own way (so they go by UUID), and a container would need the pipe directory mounted.
fn mps_join(cli: &Cli, container: bool) -> Result<Option<MpsJoin>, ConfigError> {
    if !cli.mps {
        return Ok(None);
    }
    if cli.visible_as == Some(VisibleAs::Index) {
        return Err(ConfigError::Mps(
            "--mps names the GPUs by UUID (an MPS server numbers devices its own way): drop --visible-as index"
                .to_owned(),
        ));
    }
    if crate::runtime::Runtime::chosen(cli.vendor).is_some_and(|runtime| !runtime.has_mps()) {
        return Err(ConfigError::Mps(
            "--mps joins NVIDIA's CUDA MPS; AMD GPUs (--vendor amd) have none: drop --mps".to_owned(),
        ));
    }
    if container {
        return Err(ConfigError::Mps(
            "--mps with a container run: the container needs the MPS pipe directory mounted and its \
             variables set; pass them to the runtime yourself"
                .to_owned(),
        ));
    }
    Ok(Some(MpsJoin { threads: cli.mps_threads, pinned_bytes: cli.mps_mem }))
}

/// What a `--min-free` in decimal units was read as (`8 GB = 7.45 GiB`), for the dry run, the
/// report and `-v`; `None` for binary units and percentages, which read as typed.
fn read_as(threshold: Threshold) -> Option<String> {
    let Threshold::Bytes(bytes) = threshold else { return None };
    let exact = crate::options::size::exact(bytes);
    (exact != crate::options::size::human(bytes))
        .then(|| format!("{exact} (KB, MB, GB, TB are decimal; K, M, G, T and KiB..TiB binary)"))
}

/// The launcher the command is, for a launch or a dry run on this host (`None` for a rank or
/// a container run: a launcher that starts ranks gets the choice, not what runs under it);
/// deepspeed's `--num_gpus N` without `--gpus` makes the request N GPUs: the count asked for
/// is returned beside it.
fn launcher(
    cli: &Cli,
    mode_flag: Option<Option<ModeFlag>>,
) -> Result<(Option<LauncherRun>, Count), ConfigError> {
    let launcher = match mode_flag {
        Some(None | Some(ModeFlag::DryRun)) if !cli.gpus.is_none() => {
            crate::plan::launchers::recognise(&cli.command)?
        }
        _ => None,
    };
    let count = match launcher.as_ref().and_then(|run| run.asked_count()) {
        Some(asked) if !cli.gpus_given && cli.launcher == crate::options::LauncherUse::Auto => {
            Count::exactly(asked)
        }
        _ => cli.gpus,
    };
    Ok((launcher, count))
}

/// A launch that takes GPUs, and what answers for one (a dry run, an export): the house rules
/// hold for all three, so that a dry run says 125 where the launch would.
fn requests_gpus(mode: &Mode, gpus: Count) -> bool {
    matches!(mode, Mode::Select(Goal::Run { .. } | Goal::DryRun { .. } | Goal::Export | Goal::Hold { .. }))
        && !gpus.is_none()
}

/// How the command is run and watched, as the command line says, within the house rules (a
/// run that takes GPUs gets the house rule max-time-limit, and `--exec`, which leaves no
/// gpurun to end it, is refused under it).
fn supervision(cli: &Cli, limits: &Limits, reserves: bool) -> Result<Supervision, ConfigError> {
    if reserves {
        limits.time_limit(cli.time_limit).map_err(ConfigError::HouseRule)?;
    }
    if cli.hold.is_some() && (cli.gpus.is_none() || cli.fallback == Some(crate::options::Fallback::Cpu)) {
        return Err(ConfigError::HoldNothing);
    }
    // A hold is a run without a command: held to the same rule.
    if let (Some(hold), Some(max), true) = (cli.hold, limits.max_time_limit, reserves) {
        if hold > max {
            return Err(ConfigError::HouseRule(format!(
                "--hold {}: the house rule {} ends every run by then",
                duration::compact(hold),
                limits.rule("max-time-limit", &duration::compact(max))
            )));
        }
    }
    let asked = cli.time_limit.filter(|limit| !limit.is_zero());
    // The user's limit with their signal; the rule's as well (SIGTERM, then SIGKILL after the
    // rule's grace), which a user's --signal or a trapped signal cannot outlast.
    let mut time_limits: Vec<TimeLimit> = asked
        .map(|after| TimeLimit { after, signal: cli.signal.unwrap_or(libc::SIGTERM), rule: None })
        .into_iter()
        .collect();
    if let (Some(max), true) = (limits.max_time_limit, reserves) {
        let rule = limits.rule("max-time-limit", &duration::compact(max));
        time_limits.push(TimeLimit { after: max, signal: libc::SIGTERM, rule: Some((rule, limits.grace())) });
    }
    if let (Some(max), true, true) = (limits.max_time_limit, cli.exec, reserves) {
        return Err(ConfigError::HouseRule(format!(
            "--exec: the house rule {} needs gpurun to stay and end the command",
            limits.rule("max-time-limit", &duration::compact(max))
        )));
    }
    let idle = match reserves {
        true => crate::verify::idle::IdleRules::within(
            cli.idle_warn.0,
            limits.idle_limit.map(|(after, end)| (after, end, limits.idle_rule().unwrap_or_default())),
        ),
        false => crate::verify::idle::IdleRules::warn(cli.idle_warn.0),
    };
    if let (Some((_, rule)), true) =
        (&idle.end_after, cli.exec || cli.verify == crate::options::VerifyMode::Off)
    {
        let what = if cli.exec { "--exec" } else { "--verify off" };
        return Err(ConfigError::HouseRule(format!(
            "{what}: the house rule {rule} needs gpurun to watch the GPUs' utilization and end the command"
        )));
    }
    Ok(Supervision {
        limits: supervision::Limits {
            // 0 is never, as timeout(1)'s -k 0.
            kill_after: cli.kill_after.filter(|after| !after.is_zero()),
            time_limits,
            rule_grace: limits.grace(),
        },
        no_forward: cli.no_forward.clone().map(|list| list.0).unwrap_or_default(),
        parent_death_signal: cli.parent_death_signal.0,
        keep_orphans: cli.keep_orphans,
        exec: cli.exec,
        verify: cli.verify,
        verify_timeout: cli.verify_timeout,
        idle,
        records: Records {
            report: cli.report,
            report_json: cli.report_json.clone(),
            history: if cli.no_history { None } else { history::path() },
            job_map_dir: cli.job_map_dir.clone(),
            prom_file: cli.prom_file.clone(),
        },
        hooks: Hooks { on_start: cli.on_start.clone(), on_exit: cli.on_exit.clone() },
    })
}

/// A mode flag: what gpurun was asked to do instead of running a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModeFlag {
    List,
    DryRun,
    Export,
    Doctor,
    History,
    Hold,
    Release,
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
            (cli.hold.is_some(), ModeFlag::Hold),
            (cli.release, ModeFlag::Release),
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
            ModeFlag::Hold => "--hold",
            ModeFlag::Release => "--release",
        }
    }
}

/// The mode, with the command's words (taken from `cli`) where it has them.
fn mode(
    mode_flag: Option<ModeFlag>,
    cli: &Cli,
    origins: &BTreeMap<String, String>,
) -> Result<Mode, ConfigError> {
    let command = cli.command.clone();
    Ok(match mode_flag {
        Some(ModeFlag::List) => {
            Mode::Select(Goal::List { json: cli.json, links: cli.topology.is_some(), watch: cli.watch })
        }
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
        Some(ModeFlag::Hold) => {
            Mode::Select(Goal::Hold { duration: cli.hold.unwrap_or_default(), for_pid: cli.hold_for })
        }
        Some(ModeFlag::Release) => Mode::Release,
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

/// `word` when it reads as a duration and names no program (`gpurun --wait 10m python x.py`):
/// the user meant `--wait=10m`.
fn duration_taken_for_a_command(word: &OsString) -> Option<String> {
    let word = word.to_str()?;
    duration::parse(word).ok()?;
    let found = match word.contains('/') {
        true => nix::unistd::access(Path::new(word), nix::unistd::AccessFlags::X_OK).is_ok(),
        false => crate::process::spawn::on_path(word).is_some(),
    };
    (!found).then(|| word.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits(max_wait: Option<u64>, floor: Option<Threshold>) -> Limits {
        Limits {
            max_gpus_per_user: None,
            max_wait: max_wait.map(Duration::from_secs),
            max_time_limit: None,
            default_min_free: floor,
            idle_limit: None,
            kill_after: None,
            file: None,
            lock_dir: None,
            notice: None,
        }
    }

    #[test]
    fn the_house_floor_and_an_mps_pin_raise_min_free_and_never_lower_it() {
        let gib = |n: u64| Threshold::Bytes(n << 30);
        let pinned = MpsJoin { threads: None, pinned_bytes: Some(4 << 30) };
        assert_eq!(house_min_free(None, None, &limits(None, None)), None);
        assert_eq!(house_min_free(Some(gib(2)), Some(&pinned), &limits(None, None)), Some(gib(4)));
        assert_eq!(house_min_free(Some(gib(9)), Some(&pinned), &limits(None, None)), Some(gib(9)));
        assert_eq!(house_min_free(None, None, &limits(None, Some(gib(8)))), Some(gib(8)));
        assert_eq!(house_min_free(Some(gib(16)), None, &limits(None, Some(gib(8)))), Some(gib(16)));
    }

    #[test]
    fn max_wait_bounds_every_wait_and_adds_none() {
        let rules = limits(Some(600), None);
        assert_eq!(house_wait(Wait::Forever, &rules), Wait::AtMost(Duration::from_secs(600)));
        assert_eq!(
            house_wait(Wait::AtMost(Duration::from_secs(30)), &rules),
            Wait::AtMost(Duration::from_secs(30))
        );
        assert_eq!(house_wait(Wait::No, &rules), Wait::No);
        assert_eq!(house_wait(Wait::Forever, &limits(None, None)), Wait::Forever);
    }

    #[test]
    fn a_given_min_free_is_taken_as_typed_and_auto_is_sized_only_where_gpus_are_chosen() {
        let run = Mode::Select(Goal::Export);
        let (asked, read) = min_free_asked(Some(MinFree::Given(Threshold::Bytes(8_000_000_000))), &run, true);
        assert_eq!(asked.threshold, Some(Threshold::Bytes(8_000_000_000)));
        assert!(read.is_some_and(|read| read.contains("decimal")));
        let (asked, read) = min_free_asked(Some(MinFree::Given(Threshold::Bytes(8 << 30))), &run, true);
        assert_eq!((asked.threshold, read), (Some(Threshold::Bytes(8 << 30)), None));
        // No command to size for: the fallback, said so.
        let auto = MinFree::Auto { fallback: Some(Threshold::Bytes(2 << 30)) };
        let (asked, why) = min_free_asked(Some(auto), &run, true);
        assert_eq!((asked.threshold, asked.from_history), (Some(Threshold::Bytes(2 << 30)), false));
        assert!(why.is_some_and(|why| why.contains("no command to size for")));
        // --doctor, --history: nothing is chosen, nothing sized.
        let (asked, why) = min_free_asked(Some(auto), &Mode::Doctor, false);
        assert_eq!((asked.threshold, why), (None, None));
    }
}
