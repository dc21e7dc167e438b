//! A `--per-rank` rank that is not its group's chooser (DESIGN 4b): what it makes of the group's
//! record at each look. The set not chosen yet is waited for, up to `--rank-timeout` (or the
//! chooser's `--wait`); a chosen set is checked (started alike, visible here, this rank's GPUs
//! not taken) before this rank claims its own part of it.

use std::time::{Duration, Instant};

use crate::options::duration;
use crate::probe::gpu::{label, Machine};
use crate::reserve::error::AcquireError;
use crate::reserve::group::{GroupFailure, Member, Record};
use crate::reserve::lease::{Claim, Lease};
use crate::runtime::Visibility;

/// After this long waiting for the set, a rank says whom it waits for.
const SAY_WAITING_AFTER: Duration = Duration::from_secs(1);

/// The rank, for its messages.
pub(crate) struct Rank<'a> {
    /// `torchrun local rank 1 of 4`, as `rank::launcher::Rank` says it.
    pub(crate) who: &'a str,
    /// The variable that numbers the ranks (`LOCAL_RANK`, `SLURM_LOCALID`).
    pub(crate) variable: &'a str,
    pub(crate) member: &'a Member,
    /// This rank's positions in the set.
    pub(crate) own: std::ops::Range<usize>,
}

fn group_error(why: String, failure: GroupFailure) -> AcquireError {
    AcquireError::Group { why, failure }
}

/// The chooser failed: this rank fails with its reason, at once.
pub(super) fn chooser_failed(rank: &Rank, record: &Record, why: &str, failure: GroupFailure) -> AcquireError {
    group_error(
        format!(
            "{}: rank {} of the group (gpurun PID {}) could not choose: {why}",
            rank.who, record.chooser_rank, record.chooser_pid
        ),
        failure,
    )
}

/// How long a rank has waited for the set, until when it may, and whether it said so.
pub(super) struct Waited {
    pub(super) since: Instant,
    pub(super) deadline: Option<Instant>,
    pub(super) said: bool,
}

/// The chooser is still choosing: past the deadline this rank gives up; after a second it says
/// whom it waits for (once: the set normally comes within milliseconds).
pub(super) fn while_choosing(rank: &Rank, record: &Record, waited: &mut Waited) -> Result<(), AcquireError> {
    if waited.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
        return Err(group_error(
            format!(
                "{}: the group's GPUs were not chosen within --rank-timeout {}: rank {} (gpurun PID {}) is still choosing",
                rank.who,
                duration::compact(rank.member.timeout),
                record.chooser_rank,
                record.chooser_pid
            ),
            GroupFailure::Busy,
        ));
    }
    if !waited.said && waited.since.elapsed() >= SAY_WAITING_AFTER {
        tracing::info!(
            "{}: waiting for rank {} (gpurun PID {}) to choose the group's GPUs",
            rank.who,
            record.chooser_rank,
            record.chooser_pid
        );
        waited.said = true;
    }
    Ok(())
}

/// The chosen set, checked against this rank: started alike, of the size this version writes,
/// every GPU visible here. Its NVML indices on `machine`, in set order.
pub(super) fn check_set(
    rank: &Rank,
    record: &Record,
    set: &[Claim],
    machine: &Machine,
    visibility: &Visibility,
) -> Result<Vec<u32>, AcquireError> {
    let member = rank.member;
    if record.local_size != member.local_size || record.per_rank != member.per_rank {
        return Err(group_error(
            format!(
                "{}: the group was chosen for {} ranks of {} GPU(s) each by rank {} (gpurun PID {}), but this rank asks for {} of {}: every rank must be started alike",
                rank.who, record.local_size, record.per_rank, record.chooser_rank, record.chooser_pid, member.local_size, member.per_rank
            ),
            GroupFailure::Broken,
        ));
    }
    let expected = member.local_size.saturating_mul(member.per_rank) as usize;
    if !set.is_empty() && set.len() != expected {
        return Err(group_error(
            format!(
                "{}: the group's record names {} GPUs, not {expected}: it was not written by this version of gpurun",
                rank.who,
                set.len()
            ),
            GroupFailure::Broken,
        ));
    }
    set.iter()
        .map(|gpu| match machine.devices().find(|d| d.is_leased_as(&gpu.uuid)) {
            Some(device) if visibility.allows(device.index) => Ok(device.index),
            _ => Err(group_error(
                format!(
                    "{}: the group's {} ({}) is not visible to this rank (its CUDA_VISIBLE_DEVICES or the launcher's allocation): give every rank the same GPUs (srun --gpus=N, not --gpus-per-task)",
                    rank.who, label(gpu.index), gpu.uuid
                ),
                GroupFailure::Broken,
            )),
        })
        .collect()
}

/// This rank's own part of the set, unless a real lease already holds one of its GPUs (the
/// group's own hold on it is not in the way).
pub(super) fn own_part(rank: &Rank, set: &[Claim], live: &[Lease]) -> Result<Vec<Claim>, AcquireError> {
    let own = set.get(rank.own.clone()).unwrap_or_default();
    let taken =
        own.iter().find_map(|gpu| live.iter().find(|lease| lease.uuid == gpu.uuid).map(|lease| (gpu, lease)));
    if let Some((gpu, lease)) = taken {
        return Err(group_error(
            format!(
                "{}: its GPU in the group, {}, is reserved by gpurun PID {} of {} ({}): another rank has the same {}, or this rank came after the group's --rank-timeout, when its GPU was no longer held for it",
                rank.who, label(gpu.index), lease.pid, lease.user, lease.command, rank.variable
            ),
            GroupFailure::Busy,
        ));
    }
    Ok(own.to_vec())
}
