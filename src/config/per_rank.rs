//! `--per-rank` read from the launcher's variables: this rank, the node's rank count and the job
//! (torchrun, Open MPI, MPICH or Slurm), checked before anything is probed.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cli::Cli;
use crate::config::ConfigError;
use crate::rank::{launcher, PerRank};

/// The most GPUs a `--per-rank` group may ask for: far above any node (NVLink domains of 72
/// GPUs span several), far below where a product of two u32 counts could wrap.
const MAX_GROUP_GPUS: u32 = 1 << 16;

/// The default `--rank-timeout`.
const RANK_TIMEOUT: Duration = Duration::from_secs(60);

/// `--per-rank`, checked and read from the launcher's variables (`chooses`: for a launch, a
/// dry run or an export; --list shows the machine whatever the rank; `runs`: a launch).
/// `--group` and `--rank-timeout` given on the command line without it are a mistake; from a
/// file or variable they are defaults.
pub(super) fn per_rank(
    cli: &Cli,
    chooses: bool,
    runs: bool,
    origins: &BTreeMap<String, String>,
) -> Result<Option<PerRank>, ConfigError> {
    let typed = |long: &str| !origins.contains_key(long);
    let Some(view) = cli.per_rank.filter(|_| chooses) else {
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
