//! Why each GPU that qualified was not chosen (`--dry-run`, `passed_over` in its JSON, `-v`):
//! a user switching from another tool, or wondering why a card that looks free was left, can
//! see which rule decided.

use crate::options::{Policy, TopologyUse};
use crate::probe::gpu::{Gpu, Link, Topology};
use crate::select::busy::{and_list, describe, is_busy};
use crate::select::request::Request;
use crate::select::sets::model_of;

/// For every GPU of `eligible` not in `chosen` (both NVML indices; `ranked` is the order the
/// choice was made in), the reason in words.
pub(crate) fn passed_over(
    chosen: &[u32],
    ranked: &[u32],
    request: &Request,
    gpus: &[Gpu],
    topology: Option<&Topology>,
) -> Vec<(u32, String)> {
    let gpu = |index: u32| gpus.iter().find(|gpu| gpu.index == index);
    let chosen_busy = chosen.iter().any(|&index| gpu(index).is_some_and(is_busy));
    let chosen_sick = chosen.iter().any(|&index| gpu(index).is_some_and(|g| !g.health.is_ok()));
    let one_model = chosen.len() > 1
        && chosen.iter().all(|&index| gpu(index).map(model_of) == gpu(chosen[0]).map(model_of));
    let links = topology.filter(|_| request.topology != TopologyUse::Ignore && chosen.len() > 1);
    // The fabric clique a multi-GPU choice kept to, if it kept to one.
    let clique =
        |gpu: &Gpu| gpu.fabric.as_ref().map(|fabric| (fabric.cluster_uuid.clone(), fabric.clique_id));
    let cliques: Vec<_> = chosen.iter().filter_map(|&index| gpu(index)).map(clique).collect();
    let one_clique = cliques
        .first()
        .cloned()
        .flatten()
        .filter(|first| chosen.len() > 1 && cliques.iter().all(|other| other.as_ref() == Some(first)));
    let set_name = name_of(chosen);
    // Whether the qualifying GPUs of a GPU's model could have made a set of their own.
    let enough_of = |passed: &Gpu| {
        ranked
            .iter()
            .filter_map(|&index| gpu(index))
            .filter(|other| model_of(other) == model_of(passed))
            .count()
            >= chosen.len()
    };
    ranked
        .iter()
        .filter(|index| !chosen.contains(index))
        .filter_map(|&index| Some((index, gpu(index)?)))
        .map(|(index, passed)| {
            let reason = if !passed.health.is_ok() && !chosen_sick {
                passed.health.describe()
            } else if is_busy(passed) && !chosen_busy {
                describe(passed)
            } else if one_model
                && gpu(chosen[0]).map(model_of) != Some(model_of(passed))
                && !enough_of(passed)
            {
                // Only where its own model could not make a set: else something else decided.
                format!("the {} {set_name} is one model", noun(chosen))
            } else if one_clique.is_some() && clique(passed) != one_clique {
                format!("the {} {set_name} is one NVLink fabric clique", noun(chosen))
            } else if let Some((level, topology)) = links.map(|t| (t.worst(chosen), t)) {
                match chosen.iter().map(|&member| topology.link(index, member)).max() {
                    Some(own) if own > level => {
                        format!("{} {} {set_name} links better", article(level), noun(chosen))
                    }
                    _ => ranked_after(index, chosen, ranked, request.policy),
                }
            } else {
                ranked_after(index, chosen, ranked, request.policy)
            };
            (index, reason)
        })
        .collect()
}

/// `ranked after 0 and 4 by most-free`.
fn ranked_after(index: u32, chosen: &[u32], ranked: &[u32], policy: Policy) -> String {
    let position = |gpu: u32| ranked.iter().position(|r| *r == gpu);
    let ahead: Vec<String> =
        chosen.iter().filter(|&&gpu| position(gpu) < position(index)).map(u32::to_string).collect();
    // As --policy spells it.
    let policy = clap::ValueEnum::to_possible_value(&policy)
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default();
    match ahead.is_empty() {
        false => format!("ranked after {} by {policy}", and_list(&ahead)),
        true => format!("the {} {} was the better choice", noun(chosen), name_of(chosen)),
    }
}

/// `6-7` for a pair (as `nvidia-smi topo` names it), `0,1,2,3` for more.
fn name_of(set: &[u32]) -> String {
    let mut sorted = set.to_vec();
    sorted.sort_unstable();
    let names: Vec<String> = sorted.iter().map(u32::to_string).collect();
    names.join(if set.len() == 2 { "-" } else { "," })
}

fn noun(set: &[u32]) -> &'static str {
    if set.len() == 2 {
        "pair"
    } else {
        "set"
    }
}

/// `an NVLink`, `a PCIe switch`: the link a set is joined by, as an adjective.
fn article(level: Link) -> &'static str {
    match level {
        Link::Nvlink => "an NVLink",
        Link::Xgmi => "an XGMI",
        Link::Board => "a one-board",
        Link::Switch => "a PCIe switch",
        Link::Switches => "a PCIe switches",
        Link::Hostbridge => "a host-bridge",
        Link::Node => "a NUMA-node",
        Link::System => "a cross-socket",
    }
}
