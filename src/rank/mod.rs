//! Stage 4b, `--per-rank` (DESIGN 4b): under a launcher that starts one process per rank, the
//! node's ranks choose one set together through the lock directory (the first to arrive
//! chooses, by the usual rules), each takes the lease of its own GPUs, sees the whole set with
//! its own at position LOCAL_RANK, and is verified on its own GPUs. This module is the rank
//! (from the launcher's variables) and whose each GPU is; the acquisition itself is the one
//! loop of `reserve::acquire`, which the rank's `GroupShare` parameterises.

pub(crate) mod launcher;

use std::ops::Range;
use std::time::Duration;

use crate::options::count::Count;
use crate::rank::launcher::Rank;
use crate::reserve::acquire::GroupShare;
use crate::reserve::group::Member;

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

    /// What the acquisition needs of this rank: the first of the group here chooses the
    /// group's set (and records it), every other takes its own part of it; only looking
    /// (`--dry-run`, `--export`), the set the first rank would choose now, nothing recorded.
    pub(crate) fn group_share(&self) -> GroupShare {
        GroupShare {
            own: self.own(),
            member: Member {
                job: self.rank.group_key(),
                node: self.rank.node.clone(),
                launcher: self.rank.launcher.to_owned(),
                local_rank: self.rank.local_rank,
                local_size: self.rank.local_size,
                per_rank: self.gpus_per_rank,
                timeout: self.timeout,
            },
            who: self.rank.to_string(),
            rank_variable: self.rank.rank_variable,
        }
    }
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
