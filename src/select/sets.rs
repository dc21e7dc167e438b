//! Multi-GPU set choice: one model, then the best links, then the policy's order.

use crate::options::TopologyUse;
use crate::probe::gpu::{Gpu, Link, Topology};
use crate::probe::health::HealthState;
use crate::select::ranking::tier;
use crate::select::request::Request;

/// The model a GPU counts as for `--same-model`: its name and total memory.
pub(crate) fn model_of(gpu: &Gpu) -> (Option<&str>, Option<u64>) {
    (gpu.name.as_deref(), gpu.memory.map(|m| m.total_bytes))
}

/// The level `--topology` requires of every pair, if any.
pub(crate) fn required_link(request: &Request) -> Option<Link> {
    match request.topology {
        TopologyUse::Nvlink => Some(Link::Nvlink),
        TopologyUse::Xgmi => Some(Link::Xgmi),
        TopologyUse::Switch => Some(Link::Switch),
        TopologyUse::Node => Some(Link::Node),
        TopologyUse::Prefer | TopologyUse::Ignore => None,
    }
}

/// What a set costs the rules above links: how many of its GPUs are sick (degraded, or
/// unhealthy under `--health ignore`), then how many are busy. Fewer is better.
pub(crate) type Load = (usize, usize);

/// The best `k` of `pool` (in the policy's order, sick and busy GPUs last) by links: for each level
/// from NVLink down, grow a set from each GPU in turn, adding GPUs in that order that reach every
/// member at that level or better. Fewest busy GPUs first, then the best level, then the first
/// set found; a set with as few busy GPUs as `pool` allows ends the search (every worse level
/// could only match it). Never more than levels x n x n steps.
pub(crate) fn best_connected(
    pool: &[u32],
    k: usize,
    topology: &Topology,
    required: Option<Link>,
    load: &dyn Fn(&[u32]) -> Load,
) -> Option<(Load, Link, Vec<u32>)> {
    let levels = [
        Link::Nvlink,
        Link::Xgmi,
        Link::Board,
        Link::Switch,
        Link::Switches,
        Link::Hostbridge,
        Link::Node,
        Link::System,
    ];
    // `pool` is in tier order, so its first `k` carry the least load any set of `k` can.
    let fewest = load(&pool[..k.min(pool.len())]);
    let mut best: Option<(Load, Link, Vec<u32>)> = None;
    for level in levels.into_iter().filter(|level| required.is_none_or(|r| *level <= r)) {
        for &seed in pool {
            let mut set = vec![seed];
            for &gpu in pool.iter().filter(|&&gpu| gpu != seed) {
                if set.len() == k {
                    break;
                }
                if set.iter().all(|&member| topology.link(gpu, member) <= level) {
                    set.push(gpu);
                }
            }
            if set.len() < k {
                continue;
            }
            let load = load(&set);
            if best.as_ref().is_none_or(|(fewest_so_far, _, _)| load < *fewest_so_far) {
                // Best first, as the policy ranks them (CUDA's device 0 is the best).
                set.sort_by_key(|gpu| pool.iter().position(|p| p == gpu));
                best = Some((load, level, set));
            }
            if load == fewest {
                return best;
            }
        }
    }
    best
}

/// `k` of the GPUs `ranked` (the policy's order, sick and busy GPUs last) for a multi-GPU
/// request: as few degraded GPUs, then as few busy ones, as the qualifying ones allow (never a
/// sick or busy card for a better link or a matched model), then GPUs of one model (required with `--same-model`), then the best worst link
/// (unless `--topology ignore`; at least the required level), then the policy's order. `None`
/// when no set meets what is required.
pub(crate) fn choose_set(
    ranked: &[u32],
    k: usize,
    request: &Request,
    gpus: &[Gpu],
    topology: Option<&Topology>,
) -> Option<Vec<u32>> {
    if k < 2 {
        return Some(ranked.iter().copied().take(k).collect());
    }
    let gpu = |index: u32| gpus.iter().find(|gpu| gpu.index == index);
    let tiers: Vec<(u32, (HealthState, bool))> =
        ranked.iter().filter_map(|&index| Some((index, tier(gpu(index)?)))).collect();
    let load = |set: &[u32]| -> Load {
        let of = |index: &u32| tiers.iter().find(|(at, _)| at == index).map(|(_, tier)| *tier);
        let sick =
            set.iter().filter(|index| of(index).is_some_and(|(health, _)| health != HealthState::Ok)).count();
        let busy = set.iter().filter(|index| of(index).is_some_and(|(_, busy)| busy)).count();
        (sick, busy)
    };
    let model = |index: u32| gpu(index).map(model_of);
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for &gpu in ranked {
        match groups.iter_mut().find(|group| model(group[0]) == model(gpu)) {
            Some(group) => group.push(gpu),
            None => groups.push(vec![gpu]),
        }
    }
    groups.retain(|group| group.len() >= k);
    // An NVLink fabric's clique (HGX, GB200/GB300 NVL): GPUs of one clique reach each other
    // over the fabric, so a set prefers one; on machines without a fabric every GPU is in the
    // same (no) clique.
    let clique = |index: u32| {
        gpu(index)
            .and_then(|gpu| gpu.fabric.as_ref())
            .map(|fabric| (fabric.cluster_uuid.clone(), fabric.clique_id))
    };
    let mut cliques: Vec<Vec<u32>> = Vec::new();
    for &gpu in ranked.iter().filter(|&&gpu| clique(gpu).is_some()) {
        match cliques.iter_mut().find(|group| clique(group[0]) == clique(gpu)) {
            Some(group) => group.push(gpu),
            None => cliques.push(vec![gpu]),
        }
    }
    cliques.retain(|group| group.len() >= k && group.len() < ranked.len());
    // Without --same-model, a mixed set is a candidate too: one model never outweighs a
    // busy card.
    let mut pools: Vec<(bool, &[u32])> = groups.iter().map(|group| (true, group.as_slice())).collect();
    pools.extend(cliques.iter().map(|group| (false, group.as_slice())));
    if !request.same_model {
        pools.push((false, ranked));
    }
    let required = required_link(request);
    let none = Topology::default();
    let links = match request.topology {
        TopologyUse::Ignore => None,
        _ => Some(topology.unwrap_or(&none)),
    };
    let ranks = |set: &[u32]| -> Vec<usize> {
        let mut ranks: Vec<usize> =
            set.iter().filter_map(|gpu| ranked.iter().position(|r| r == gpu)).collect();
        ranks.sort_unstable();
        ranks
    };
    // Sets compare by their busy GPUs, whether they are one model, one fabric clique, their
    // worst link, then the policy's ranks of their members.
    type Key = (Load, bool, bool, Link, Vec<usize>);
    let mut best: Option<(Key, Vec<u32>)> = None;
    for (one_model, pool) in pools {
        let found = match links {
            None => {
                let set = pool[..k].to_vec();
                Some((load(&set), Link::System, set))
            }
            Some(links) => best_connected(pool, k, links, required, &load),
        };
        if let Some((load, level, set)) = found {
            let one_model = one_model || set.iter().all(|&gpu| model(gpu) == model(set[0]));
            let one_clique = set.iter().all(|&gpu| clique(gpu) == clique(set[0]));
            let key = (load, !one_model, !one_clique, level, ranks(&set));
            if best.as_ref().is_none_or(|(best_key, _)| key < *best_key) {
                best = Some((key, set));
            }
        }
    }
    best.map(|(_, set)| set)
}

/// Why no set of `k` can be had from `pool` (`of`: how to call them), in one line.
pub(crate) fn set_refusal(request: &Request, k: usize, gpus: &[Gpu], pool: &[u32], of: &str) -> String {
    let asked = request.count_text();
    match (request.same_model, required_link(request)) {
        (true, None) => {
            let mut models: Vec<String> = Vec::new();
            for &index in pool {
                if let Some(name) = gpus.iter().find(|g| g.index == index).and_then(|g| g.name.clone()) {
                    if !models.contains(&name) {
                        models.push(name);
                    }
                }
            }
            format!("--same-model {asked}: no {k} of {of} are of one model (models: {})", models.join(", "))
        }
        (same_model, required) => format!(
            "--topology {} {asked}: no {k} of {of}{} are joined pairwise by {} or better (see gpurun --list --topology)",
            required.map_or("prefer", Link::name),
            if same_model { ", of one model," } else { "" },
            match required {
                Some(Link::Nvlink) => "NVLink",
                Some(Link::Xgmi) => "XGMI",
                Some(Link::Switch) => "one PCIe switch",
                _ => "one NUMA node",
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::count::Count;
    use crate::probe::gpu::{test_gpu, Memory, Utilization};

    fn links(pairs: &[(u32, u32, Link)]) -> Topology {
        let mut topology = Topology::default();
        for &(a, b, link) in pairs {
            topology.insert(a, b, link);
        }
        topology
    }

    fn request(k: u32) -> Request {
        Request { count: Count::exactly(k), ..Request::default() }
    }

    fn named(index: u32, name: &str) -> Gpu {
        Gpu { name: Some(name.to_owned()), ..test_gpu(index) }
    }

    fn busy(index: u32) -> Gpu {
        Gpu { utilization: Some(Utilization { gpu_percent: 90, memory_percent: Some(0) }), ..test_gpu(index) }
    }

    #[test]
    fn a_model_is_its_name_and_its_total_memory() {
        let gpu = test_gpu(0);
        assert_eq!(model_of(&gpu), (Some("NVIDIA A100-SXM4-80GB"), Some(80 << 30)));
        let request = |topology| Request { topology, ..Request::default() };
        assert_eq!(required_link(&request(TopologyUse::Nvlink)), Some(Link::Nvlink));
        assert_eq!(required_link(&request(TopologyUse::Switch)), Some(Link::Switch));
        assert_eq!(required_link(&request(TopologyUse::Node)), Some(Link::Node));
        assert_eq!(required_link(&request(TopologyUse::Prefer)), None);
        assert_eq!(required_link(&request(TopologyUse::Ignore)), None);
    }

    /// The best worst link wins, its members in the policy's order; `--topology ignore` takes
    /// the policy's first; one GPU needs no links.
    #[test]
    fn the_set_with_the_best_worst_link_is_taken_in_the_policys_order() {
        let gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        let nvlinked = links(&[(2, 3, Link::Nvlink), (0, 1, Link::Switch)]);
        assert_eq!(choose_set(&[0, 1, 2, 3], 2, &request(2), &gpus, Some(&nvlinked)), Some(vec![2, 3]));
        assert_eq!(choose_set(&[3, 2, 1, 0], 2, &request(2), &gpus, Some(&nvlinked)), Some(vec![3, 2]));
        let ignore = Request { topology: TopologyUse::Ignore, ..request(2) };
        assert_eq!(choose_set(&[0, 1, 2, 3], 2, &ignore, &gpus, Some(&nvlinked)), Some(vec![0, 1]));
        assert_eq!(choose_set(&[1, 0], 1, &request(1), &gpus, Some(&nvlinked)), Some(vec![1]));
        // Three: the worst pair decides. 0-1-2 all within a switch beats 1-2-3 with a system hop.
        let three =
            links(&[(0, 1, Link::Switch), (0, 2, Link::Switch), (1, 2, Link::Nvlink), (2, 3, Link::Nvlink)]);
        assert_eq!(choose_set(&[3, 2, 1, 0], 3, &request(3), &gpus, Some(&three)), Some(vec![2, 1, 0]));
        // Without a topology every pair is equal: the policy's first.
        assert_eq!(choose_set(&[3, 2, 1, 0], 2, &request(2), &gpus, None), Some(vec![3, 2]));
    }

    /// A required level is met by every pair or by no set; the next level down does not do.
    #[test]
    fn a_required_link_is_every_pairs_or_none() {
        let gpus: Vec<Gpu> = (0..3).map(test_gpu).collect();
        let switch = links(&[(0, 1, Link::Switch), (1, 2, Link::Switches)]);
        let nvlink = Request { topology: TopologyUse::Nvlink, ..request(2) };
        assert_eq!(choose_set(&[0, 1, 2], 2, &nvlink, &gpus, Some(&switch)), None);
        let within = Request { topology: TopologyUse::Switch, ..request(2) };
        assert_eq!(choose_set(&[0, 1, 2], 2, &within, &gpus, Some(&switch)), Some(vec![0, 1]));
        assert_eq!(
            choose_set(&[0, 1, 2], 3, &Request { count: Count::exactly(3), ..within }, &gpus, Some(&switch)),
            None
        );
    }

    /// One model before links, busy cards after everything: a colleague's job is worth more
    /// than an NVLink hop.
    #[test]
    fn fewer_busy_then_one_model_then_links() {
        let mixed = [test_gpu(0), named(1, "NVIDIA H100 80GB HBM3"), test_gpu(2)];
        let pcie = links(&[(0, 1, Link::Nvlink)]);
        assert_eq!(choose_set(&[0, 1, 2], 2, &request(2), &mixed, Some(&pcie)), Some(vec![0, 2]));
        let same = Request { same_model: true, ..request(2) };
        assert_eq!(choose_set(&[0, 1, 2], 2, &same, &mixed, Some(&pcie)), Some(vec![0, 2]));
        assert_eq!(choose_set(&[0, 1], 2, &same, &mixed, Some(&pcie)), None);
        // Same name, other memory size: another model.
        let mut small = test_gpu(2);
        small.memory =
            Some(Memory { total_bytes: 40 << 30, reserved_bytes: 0, used_bytes: 0, free_bytes: 40 << 30 });
        let sizes = [test_gpu(0), test_gpu(1), small];
        assert_eq!(choose_set(&[0, 2, 1], 2, &same, &sizes, None), Some(vec![0, 1]));
        // Idle 0 and 1 over the system bus beat an NVLink pair with a busy card.
        let gpus = [test_gpu(0), test_gpu(1), test_gpu(2), busy(3)];
        let pair = links(&[(2, 3, Link::Nvlink)]);
        assert_eq!(choose_set(&[0, 1, 2, 3], 2, &request(2), &gpus, Some(&pair)), Some(vec![0, 1]));
        // Where one busy card is unavoidable, the link decides among the sets with one.
        assert_eq!(choose_set(&[2, 3], 2, &request(2), &gpus, Some(&pair)), Some(vec![2, 3]));
    }

    #[test]
    fn a_set_refusal_says_the_rule_and_the_models() {
        let gpus = [test_gpu(0), named(1, "NVIDIA H100 80GB HBM3"), test_gpu(2)];
        let same = Request { same_model: true, ..request(2) };
        assert_eq!(
            set_refusal(&same, 2, &gpus, &[0, 1, 2], "those"),
            "--same-model --gpus 2: no 2 of those are of one model (models: NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3)"
        );
        let nvlink = Request { topology: TopologyUse::Nvlink, ..request(2) };
        assert_eq!(
            set_refusal(&nvlink, 2, &gpus, &[0, 1], "the GPUs gpurun may use"),
            "--topology nvlink --gpus 2: no 2 of the GPUs gpurun may use are joined pairwise by NVLink or better (see gpurun --list --topology)"
        );
        let both = Request { same_model: true, topology: TopologyUse::Switch, ..request(2) };
        assert_eq!(
            set_refusal(&both, 2, &gpus, &[0, 1], "those"),
            "--topology switch --gpus 2: no 2 of those, of one model, are joined pairwise by one PCIe switch or better (see gpurun --list --topology)"
        );
    }

    fn in_clique(gpu: Gpu, clique_id: u32) -> Gpu {
        use crate::probe::fabric::{Fabric, FabricHealth};
        let fabric = Fabric {
            state: "completed",
            clique_id,
            cluster_uuid: "c".to_owned(),
            health: FabricHealth { state: "ok", reasons: Vec::new() },
        };
        Gpu { fabric: Some(fabric), ..gpu }
    }

    /// A fabric clique is a pool of its own only when it is smaller than all the GPUs and big
    /// enough for the set: one clique of everything must not let `--same-model` take a mixed
    /// set, and a clique of one must not be a pool for two (with `--topology ignore` that would
    /// slice past its end).
    #[test]
    fn a_clique_is_a_pool_only_between_the_set_and_the_whole() {
        let mixed = [in_clique(test_gpu(0), 1), in_clique(named(1, "NVIDIA H100 80GB HBM3"), 1)];
        let same = Request { same_model: true, ..request(2) };
        assert_eq!(choose_set(&[0, 1], 2, &same, &mixed, None), None);
        let singles = [in_clique(test_gpu(0), 1), in_clique(test_gpu(1), 2), in_clique(test_gpu(2), 3)];
        let ignore = Request { topology: TopologyUse::Ignore, ..request(2) };
        assert_eq!(choose_set(&[2, 1, 0], 2, &ignore, &singles, None), Some(vec![2, 1]));
    }
}
