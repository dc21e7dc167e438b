//! The order a policy puts the qualifying GPUs in.

use std::cmp::Ordering;

use crate::options::Policy;
use crate::probe::gpu::Gpu;
use crate::probe::health::HealthState;
use crate::select::busy::is_busy;

/// Which part of the order a GPU belongs to: healthy before degraded (before unhealthy, which
/// only `--health ignore` lets this far), and within each, not busy before busy.
pub(crate) fn tier(gpu: &Gpu) -> (HealthState, bool) {
    (gpu.health.state, is_busy(gpu))
}

/// The policy's order under the health and busy rules: healthy GPUs that are not busy first,
/// then healthy busy ones, then degraded ones the same way; each part in the policy's order.
/// Set choice keeps this order for its ties.
pub(crate) fn tiered(gpus: &[&Gpu], policy: Policy, seed: u64) -> Vec<u32> {
    let mut tiers: Vec<(HealthState, bool)> = gpus.iter().map(|gpu| tier(gpu)).collect();
    tiers.sort_unstable();
    tiers.dedup();
    let mut order = Vec::with_capacity(gpus.len());
    for part in tiers {
        let members: Vec<&Gpu> = gpus.iter().copied().filter(|gpu| tier(gpu) == part).collect();
        order.extend(rank(&members, policy, seed));
    }
    order
}

/// Ranking keys: a known value beats an unknown one.
pub(crate) fn rank(gpus: &[&Gpu], policy: Policy, seed: u64) -> Vec<u32> {
    let free = |gpu: &Gpu| gpu.memory.map(|m| m.free_bytes);
    let util = |gpu: &Gpu| gpu.utilization.map(|u| u.gpu_percent);
    // Known first, then ascending.
    let ascending = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    let descending = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => b.cmp(&a),
        _ => ascending(a, b),
    };
    let util64 = |gpu: &Gpu| util(gpu).map(u64::from);
    let balanced = |gpu: &Gpu| match (free(gpu), util(gpu)) {
        (Some(free), Some(util)) => balanced_score(free, util),
        _ => f64::NEG_INFINITY,
    };
    let mut ranked: Vec<&Gpu> = gpus.to_vec();
    ranked.sort_by(|a, b| {
        let order = match policy {
            Policy::MostFree => descending(free(a), free(b)).then(ascending(util64(a), util64(b))),
            Policy::LeastUtil => ascending(util64(a), util64(b)).then(descending(free(a), free(b))),
            Policy::Balanced => balanced(b).total_cmp(&balanced(a)),
            Policy::Pack => ascending(free(a), free(b)).then(ascending(util64(a), util64(b))),
            Policy::Index | Policy::Random => Ordering::Equal,
        };
        order.then(a.index.cmp(&b.index))
    });
    let mut indices: Vec<u32> = ranked.into_iter().map(|gpu| gpu.index).collect();
    if policy == Policy::Random {
        shuffle(&mut indices, seed);
    }
    indices
}

/// `--policy balanced`: 0.7 x free GiB + 0.3 x (100 - utilization %), highest first. A GiB of
/// free memory is worth about half a point of idle time: 10 GiB more free beats 20 points
/// more busy.
fn balanced_score(free_bytes: u64, util_percent: u32) -> f64 {
    0.7 * (free_bytes as f64 / (1u64 << 30) as f64) + 0.3 * (100.0 - f64::from(util_percent))
}

/// Fisher-Yates, each draw SipHash of (seed, position) with std's fixed keys: no dependency,
/// the same order for the same seed, and seeds that differ in one bit shuffle differently.
fn shuffle(items: &mut [u32], seed: u64) {
    use std::hash::{Hash, Hasher};
    for i in (1..items.len()).rev() {
        let mut draw = std::collections::hash_map::DefaultHasher::new();
        (seed, i).hash(&mut draw);
        items.swap(i, (draw.finish() % (i as u64 + 1)) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::{test_gpu, Utilization};

    const GIB: u64 = 1 << 30;

    /// A GPU with `free` GiB free (None: unknown) and `util` % busy (None: unknown).
    fn loaded(index: u32, free: Option<u64>, util: Option<u32>) -> Gpu {
        let mut gpu = test_gpu(index);
        gpu.memory = free.map(|free| crate::probe::gpu::Memory {
            total_bytes: 80 * GIB,
            reserved_bytes: 0,
            used_bytes: 80 * GIB - free * GIB,
            free_bytes: free * GIB,
        });
        gpu.utilization = util.map(|gpu_percent| Utilization { gpu_percent, memory_percent: Some(0) });
        gpu
    }

    fn order(gpus: &[Gpu], policy: Policy) -> Vec<u32> {
        rank(&gpus.iter().collect::<Vec<_>>(), policy, 7)
    }

    #[test]
    fn the_balanced_score_is_its_documented_weights() {
        assert_eq!(balanced_score(0, 100), 0.0);
        assert_eq!(balanced_score(0, 0), 30.0);
        assert_eq!(balanced_score(10 * GIB, 100), 7.0);
        assert_eq!(balanced_score(40 * GIB, 0), 58.0);
        assert_eq!(balanced_score(50 * GIB, 50), 50.0);
        assert_eq!(balanced_score(GIB / 2, 100), 0.35);
    }

    /// Three GPUs each policy puts in another order: balanced weighs what the others each
    /// take alone. (free GiB, util %): 0 (10, 0) = 37, 1 (40, 60) = 40, 2 (30, 0) = 51.
    #[test]
    fn each_policy_has_its_own_order() {
        let gpus =
            [loaded(0, Some(10), Some(0)), loaded(1, Some(40), Some(60)), loaded(2, Some(30), Some(0))];
        assert_eq!(order(&gpus, Policy::Balanced), [2, 1, 0]);
        assert_eq!(order(&gpus, Policy::MostFree), [1, 2, 0]);
        assert_eq!(order(&gpus, Policy::LeastUtil), [2, 0, 1]);
        assert_eq!(order(&gpus, Policy::Pack), [0, 2, 1]);
        assert_eq!(order(&gpus, Policy::Index), [0, 1, 2]);
    }

    /// Ties: most-free and pack break them by utilization (least first), least-util by free
    /// memory (most first), then every policy by index.
    #[test]
    fn ties_break_by_the_other_key_then_by_index() {
        let same_free =
            [loaded(0, Some(40), Some(30)), loaded(1, Some(40), Some(10)), loaded(2, Some(40), Some(10))];
        assert_eq!(order(&same_free, Policy::MostFree), [1, 2, 0]);
        assert_eq!(order(&same_free, Policy::Pack), [1, 2, 0]);
        let same_util =
            [loaded(0, Some(10), Some(5)), loaded(1, Some(40), Some(5)), loaded(2, Some(40), Some(5))];
        assert_eq!(order(&same_util, Policy::LeastUtil), [1, 2, 0]);
        let same = [loaded(0, Some(40), Some(5)), loaded(1, Some(40), Some(5))];
        for policy in [Policy::MostFree, Policy::LeastUtil, Policy::Balanced, Policy::Pack] {
            assert_eq!(order(&same, policy), [0, 1], "{policy:?}");
        }
    }

    /// A known value beats an unknown one, whichever way the policy sorts.
    #[test]
    fn unknown_values_come_last() {
        let free = [loaded(0, None, Some(0)), loaded(1, Some(10), Some(0)), loaded(2, Some(70), Some(0))];
        assert_eq!(order(&free, Policy::MostFree), [2, 1, 0]);
        assert_eq!(order(&free, Policy::Pack), [1, 2, 0]);
        assert_eq!(order(&free, Policy::Balanced), [2, 1, 0]);
        let util = [loaded(0, Some(40), None), loaded(1, Some(40), Some(90)), loaded(2, Some(40), Some(10))];
        assert_eq!(order(&util, Policy::LeastUtil), [2, 1, 0]);
        assert_eq!(order(&util, Policy::MostFree), [2, 1, 0]);
        assert_eq!(order(&util, Policy::Balanced), [2, 1, 0]);
        let both = [loaded(0, None, None), loaded(1, None, None)];
        assert_eq!(order(&both, Policy::MostFree), [0, 1]);
    }

    /// Random is a permutation fixed by the seed, and seeds differ.
    #[test]
    fn random_is_a_permutation_of_its_seed() {
        let gpus: Vec<Gpu> = (0..8).map(|i| loaded(i, Some(40), Some(0))).collect();
        let refs: Vec<&Gpu> = gpus.iter().collect();
        let one = rank(&refs, Policy::Random, 1);
        assert_eq!(one, rank(&refs, Policy::Random, 1));
        let mut sorted = one.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        let orders: std::collections::BTreeSet<Vec<u32>> =
            (0..20).map(|seed| rank(&refs, Policy::Random, seed)).collect();
        // 8! orders: 20 seeds give 20 (one in about 2,000 pairs may collide).
        assert!(orders.len() >= 19, "{} orders of 20 seeds", orders.len());
        // Every position may keep its GPU (a draw over 0..=i, not 0..i: that would shuffle
        // in one cycle and never leave a GPU where it was).
        let kept =
            (0..50).map(|seed| rank(&refs, Policy::Random, seed)).filter(|order| order[7] == 7).count();
        assert!(kept > 0, "the last GPU never stayed last in 50 seeds");
    }

    /// Healthy before degraded, and within each, not busy before busy; each part in the
    /// policy's order.
    #[test]
    fn tiers_order_health_then_busy_then_policy() {
        let mut gpus = [
            loaded(0, Some(70), Some(90)),
            loaded(1, Some(10), Some(0)),
            loaded(2, Some(40), Some(0)),
            loaded(3, Some(79), Some(0)),
        ];
        gpus[3].health.state = HealthState::Degraded;
        let refs: Vec<&Gpu> = gpus.iter().collect();
        assert_eq!(tiered(&refs, Policy::MostFree, 0), [2, 1, 0, 3]);
        assert_eq!(tiered(&refs, Policy::Pack, 0), [1, 2, 0, 3]);
    }
}
