//! Stage 4b, `--per-rank` (DESIGN 4b): under a launcher that starts one process per rank, the
//! node's ranks choose one set together through the lock directory (the first to arrive
//! chooses, by the usual rules), each takes the lease of its own GPUs, sees the whole set with
//! its own at position LOCAL_RANK, and is verified on its own GPUs.

pub(crate) mod launcher;

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::exit_code;
use crate::options::count::Count;
use crate::options::Wait;
use crate::probe::gpu::{label, Machine};
use crate::probe::worker::NvmlThread;
use crate::process::signals::Receiver;
use crate::rank::launcher::Rank;
use crate::reserve::acquire::{self, AcquireError, Acquisition, GroupFailure, GroupShare};
use crate::reserve::group::{self, Found, Member, Membership, State};
use crate::reserve::lease;
use crate::reserve::lockdir::{DirLock, LockDir};
use crate::select::policy::Decision;
use crate::select::selection::Selection;
use crate::select::visibility::{self, Inherited};

/// How long a rank that is not the chooser sleeps between looks at the group's record while
/// the set is being chosen (a few ranks, a cheap look: no NVML).
const LOOK_AGAIN: Duration = Duration::from_millis(20);
/// After this long waiting for the set, a rank says whom it waits for.
const SAY_WAITING_AFTER: Duration = Duration::from_secs(1);

/// What `--per-rank` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerRank {
    pub(crate) rank: Rank,
    /// `--gpus N`: GPUs per rank.
    pub(crate) gpus_per_rank: u32,
    /// `--rank-timeout`.
    pub(crate) timeout: Duration,
    /// `--per-rank=own`: each rank sees only its own GPUs.
    pub(crate) own_only: bool,
}

impl PerRank {
    /// The whole group's count, which the chooser asks the policy for.
    /// (Checked when `--per-rank` is read: see `group_size`.)
    pub(crate) fn group_count(&self) -> Count {
        Count::exactly(self.rank.local_size.saturating_mul(self.gpus_per_rank))
    }

    /// The group's size in words, for messages: `4 ranks x 2 GPUs = 8`.
    pub(crate) fn count_words(&self) -> String {
        let (ranks, each) = (self.rank.local_size, self.gpus_per_rank);
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        format!("{ranks} rank{} x {each} GPU{} = {}", plural(ranks), plural(each), self.group_count().min)
    }

    /// This rank's positions in the set.
    pub(crate) fn own(&self) -> Range<usize> {
        let n = self.gpus_per_rank as usize;
        self.rank.local_rank as usize * n..(self.rank.local_rank as usize + 1) * n
    }
}

/// Chooses the group's set (the first rank) or takes this rank's part of it (every other), and
/// reserves this rank's GPUs. Only looking (`--dry-run`, `--export`): the set the first rank
/// would choose now, nothing recorded.
pub(crate) fn acquire(
    nvml: &mut NvmlThread,
    receiver: &Receiver,
    inherited: &Inherited,
    options: acquire::Options<'_>,
    per_rank: &PerRank,
) -> Result<Acquisition, AcquireError> {
    let path = match (&options.lock_dir, options.hold) {
        (Some(path), true) => path.clone(),
        _ => {
            let options =
                acquire::Options { group: Some(GroupShare { own: per_rank.own(), record: None }), ..options };
            return acquire::acquire(nvml, receiver, inherited, &options);
        }
    };
    let dir = LockDir::open(&path, true)?;
    let started = Instant::now();
    // The set normally comes in milliseconds; a chooser waiting for GPUs (--wait) holds the
    // others as long as the wait may last.
    let deadline = match options.wait {
        Wait::No => Some(started + per_rank.timeout),
        Wait::Forever => None,
        Wait::AtMost(wait) => Some(started + wait.max(per_rank.timeout)),
    };
    let mut machine: Option<Machine> = None;
    let mut said_waiting = false;
    let group_key = per_rank.rank.group_key();
    let member = Member {
        job: &group_key,
        node: &per_rank.rank.node,
        launcher: per_rank.rank.launcher,
        local_rank: per_rank.rank.local_rank,
        local_size: per_rank.rank.local_size,
        per_rank: per_rank.gpus_per_rank,
        timeout: per_rank.timeout,
    };
    loop {
        let guard = acquire::lock(&dir, receiver)?;
        let membership = match group::find_or_make(&dir, &member)? {
            Found::Choose(membership) => {
                drop(guard);
                tracing::debug!(
                    "{}: the first of the group here, choosing {} GPUs for it",
                    per_rank.rank,
                    per_rank.group_count()
                );
                return choose(nvml, receiver, inherited, options, per_rank, membership);
            }
            Found::Joined(membership) => membership,
        };
        let record = &membership.record;
        match &record.state {
            State::Failed { why, status } => {
                return Err(AcquireError::Group {
                    why: format!(
                        "{}: rank {} of the group (gpurun PID {}) could not choose: {why}",
                        per_rank.rank, record.chooser_rank, record.chooser_pid
                    ),
                    failure: GroupFailure::of_status(*status),
                })
            }
            State::Choosing => {
                drop(guard);
                let waited = Waited { started, deadline, said: &mut said_waiting };
                while_choosing(per_rank, record, waited)?;
                drop(membership);
                receiver.pause(LOOK_AGAIN).map_err(AcquireError::Interrupted)?;
            }
            State::Chosen { gpus, exclusive, .. } => {
                let Some(probed) = machine.take() else {
                    // Probed outside the lock, then looked at again under it.
                    drop(guard);
                    drop(membership);
                    let probe = nvml.probe(receiver, options.nvml_timeout, None, &mut |_| {});
                    machine = Some(probe.map_err(AcquireError::from)?);
                    continue;
                };
                let part = Part { gpus: gpus.clone(), exclusive: *exclusive, probed };
                return take_part(&dir, part, per_rank, inherited, &options, guard, membership);
            }
        }
    }
}

/// How long a rank has waited for the set, until when it may, and whether it said so.
struct Waited<'a> {
    started: Instant,
    deadline: Option<Instant>,
    said: &'a mut bool,
}

/// A rank whose chooser is still choosing: past --rank-timeout it gives up; after a second it
/// says whom it waits for (once: the set normally comes within milliseconds).
fn while_choosing(per_rank: &PerRank, record: &group::Record, waited: Waited) -> Result<(), AcquireError> {
    let Waited { started, deadline, said: said_waiting } = waited;
    if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
        return Err(AcquireError::Group {
            why: format!(
                "{}: the group's GPUs were not chosen within --rank-timeout {}: rank {} (gpurun PID {}) is still choosing",
                per_rank.rank,
                crate::options::duration::compact(per_rank.timeout),
                record.chooser_rank,
                record.chooser_pid
            ),
            failure: GroupFailure::Busy,
        });
    }
    // The set normally comes within milliseconds: said only when it does not.
    if !*said_waiting && started.elapsed() >= SAY_WAITING_AFTER {
        tracing::info!(
            "{}: waiting for rank {} (gpurun PID {}) to choose the group's GPUs",
            per_rank.rank,
            record.chooser_rank,
            record.chooser_pid
        );
        *said_waiting = true;
    }
    Ok(())
}

/// The group's set as the chooser recorded it, and this rank's fresh look at the machine.
struct Part {
    gpus: Vec<group::Chosen>,
    exclusive: bool,
    probed: Machine,
}

/// A rank that joined a chosen set: checks that the record is one this rank can use (alike,
/// visible here, its own GPUs not taken), then takes its own GPUs' leases, under `guard`.
fn take_part(
    dir: &LockDir,
    part: Part,
    per_rank: &PerRank,
    inherited: &Inherited,
    options: &acquire::Options<'_>,
    guard: DirLock,
    membership: Membership,
) -> Result<Acquisition, AcquireError> {
    let Part { gpus, exclusive, probed } = part;
    let record = &membership.record;
    if record.local_size != per_rank.rank.local_size || record.per_rank != per_rank.gpus_per_rank {
        return Err(AcquireError::Group {
            why: format!(
                "{}: the group was chosen for {} ranks of {} GPU(s) each by rank {} (gpurun PID {}), but this rank asks for {} of {}: every rank must be started alike",
                per_rank.rank, record.local_size, record.per_rank, record.chooser_rank, record.chooser_pid, per_rank.rank.local_size, per_rank.gpus_per_rank
            ),
            failure: GroupFailure::Broken,
        });
    }
    let expected = per_rank.group_count().min as usize;
    if gpus.is_empty() {
        // The chooser runs with no GPU (--fallback cpu): so does every rank.
        drop(guard);
        tracing::warn!(
            "{}: the group runs with no GPU visible (its chooser's --fallback cpu)",
            per_rank.rank
        );
        let mut acquisition = Acquisition::no_gpu(per_rank.group_count());
        acquisition.machine = probed;
        acquisition.group = Some(membership);
        return Ok(acquisition);
    }
    if gpus.len() != expected {
        return Err(AcquireError::Group {
            why: format!(
                "{}: the group's record names {} GPUs, not {expected}: it was not written by this version of gpurun",
                per_rank.rank,
                gpus.len()
            ),
            failure: GroupFailure::Broken,
        });
    }
    let visibility = visibility::resolve(&probed, inherited);
    let mut indices = Vec::new();
    for gpu in &gpus {
        match probed.devices().find(|d| d.uuid.as_deref() == Some(gpu.uuid.as_str())) {
            Some(device) if visibility.allows(device.index) => indices.push(device.index),
            _ => {
                return Err(AcquireError::Group {
                    why: format!(
                        "{}: the group's {} ({}) is not visible to this rank (its CUDA_VISIBLE_DEVICES or the launcher's allocation): give every rank the same GPUs (srun --gpus=N, not --gpus-per-task)",
                        per_rank.rank, label(gpu.index), gpu.uuid
                    ),
                    failure: GroupFailure::Broken,
                })
            }
        }
    }
    // Real leases only: the group's own hold on this rank's GPU is not in the way.
    let live = lease::live(dir, true);
    let own = &gpus[per_rank.own()];
    let taken =
        own.iter().find_map(|gpu| live.iter().find(|lease| lease.uuid == gpu.uuid).map(|lease| (gpu, lease)));
    if let Some((gpu, lease)) = taken {
        return Err(AcquireError::Group {
            why: format!(
                "{}: its GPU in the group, {}, is reserved by gpurun PID {} of {} ({}): another rank has the same {}, or this rank came after the group's --rank-timeout, when its GPU was no longer held for it",
                per_rank.rank, label(gpu.index), lease.pid, lease.user, lease.command, per_rank.rank.rank_variable
            ),
            failure: GroupFailure::Busy,
        });
    }
    let reserve: Vec<(String, u64, u32)> =
        own.iter().map(|gpu| (gpu.uuid.clone(), gpu.reserved_bytes, gpu.index)).collect();
    let known = crate::reserve::ticket::KnownGpus::of(&probed);
    let leases = lease::reserve(dir, &known, &reserve, exclusive, &options.command)?;
    drop(guard);
    let selection = Selection::new(&probed, &indices, per_rank.group_count());
    let decision = Decision::selected(indices);
    Ok(Acquisition {
        machine: probed,
        decision,
        chosen: Ok(selection),
        leases,
        live,
        queue: Vec::new(),
        group: Some(membership),
    })
}

/// The first rank: the usual acquisition for the whole set, recorded for the others; what it
/// could not do is recorded too, so that the others fail with its reason at once.
fn choose(
    nvml: &mut NvmlThread,
    receiver: &Receiver,
    inherited: &Inherited,
    options: acquire::Options<'_>,
    per_rank: &PerRank,
    membership: Membership,
) -> Result<Acquisition, AcquireError> {
    let options = acquire::Options {
        group: Some(GroupShare { own: per_rank.own(), record: Some(&membership) }),
        ..options
    };
    let acquired = acquire::acquire(nvml, receiver, inherited, &options);
    match &acquired {
        Ok(Acquisition { chosen: Err(why), .. }) => membership.failed(why, exit_code::NOT_ENOUGH_GPUS),
        Ok(_) => {}
        Err(AcquireError::Interrupted(_)) => {}
        Err(error) => membership.failed(&error.to_string(), exit_code::GPURUN_ERROR),
    }
    drop(options);
    Ok(Acquisition { group: Some(membership), ..acquired? })
}

/// For verification and its messages: whose GPU each of the set's is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owners {
    pub(crate) own_rank: u32,
    /// (NVML index, rank) for every GPU of the set.
    pub(crate) gpus: Vec<(u32, u32)>,
}

impl Owners {
    pub(crate) fn new(set: &[u32], per_rank: &PerRank) -> Owners {
        let n = per_rank.gpus_per_rank.max(1) as usize;
        Owners {
            own_rank: per_rank.rank.local_rank,
            gpus: set.iter().enumerate().map(|(position, &index)| (index, (position / n) as u32)).collect(),
        }
    }

    pub(crate) fn rank_of(&self, index: u32) -> Option<u32> {
        self.gpus.iter().find(|(gpu, _)| *gpu == index).map(|(_, rank)| *rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_rank(local_rank: u32, n: u32, own_only: bool) -> PerRank {
        PerRank {
            rank: Rank {
                local_rank,
                local_size: 4 / n,
                job: "group:t".to_owned(),
                node: "vm".to_owned(),
                launcher: "torchrun",
                rank_variable: "LOCAL_RANK",
                size_variable: "LOCAL_WORLD_SIZE",
            },
            gpus_per_rank: n,
            timeout: Duration::from_secs(60),
            own_only,
        }
    }

    #[test]
    fn owners_say_whose_each_gpu_is() {
        let owners = Owners::new(&[2, 3, 4, 5], &per_rank(1, 2, false));
        assert_eq!(owners.own_rank, 1);
        assert_eq!((owners.rank_of(3), owners.rank_of(4), owners.rank_of(7)), (Some(0), Some(1), None));
        assert_eq!(per_rank(1, 2, false).own(), 2..4);
        assert_eq!(per_rank(3, 1, false).group_count(), Count::exactly(4));
    }
}
