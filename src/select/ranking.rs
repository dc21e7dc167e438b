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
        (Some(free), Some(util)) => {
            0.7 * (free as f64 / (1u64 << 30) as f64) + 0.3 * (100.0 - f64::from(util))
        }
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

/// Fisher-Yates with xorshift64*: no dependency, and reproducible from the seed in tests.
fn shuffle(items: &mut [u32], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let random = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        items.swap(i, (random % (i as u64 + 1)) as usize);
    }
}
