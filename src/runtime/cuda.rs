//! CUDA's inherited visibility: which GPUs this process may use at all, from the
//! `CUDA_VISIBLE_DEVICES` it inherited (Slurm, a container, a parent script). gpurun selects
//! only inside that set and never widens it.
//!
//! Entries are read the way the CUDA runtime reads them, with one deliberate difference:
//! integers are always taken in PCI order (nvidia-smi's), because that is the only order NVML can
//! see. When `CUDA_DEVICE_ORDER` is not `PCI_BUS_ID` and the GPUs differ in model, CUDA's own
//! reading (fastest first) may differ, so gpurun warns that the inherited indices are ambiguous.
//!
//! CUDA only enumerates devices whose node it can open. Under a device cgroup NVML may still list
//! the others but refuses their handles (NO_PERMISSION); those are skipped when counting, so an
//! inherited `0,1` means the first two GPUs this process can reach, as it does for CUDA.

use crate::options::VisibleAs;
use crate::probe::gpu::{Gpu, Machine};
use crate::runtime::inherited::{Inherited, Visibility};
use crate::runtime::{Address, Written};

/// Said when an exported restriction turns GPUs away: it is easy to forget in a long session.
pub(crate) const UNDO_EXPORT: &str = "CUDA_VISIBLE_DEVICES was set by an earlier eval \"$(gpurun --export)\" in \
this shell, and gpurun never widens it; to choose among every GPU again: unset CUDA_VISIBLE_DEVICES GPURUN_GPUS \
GPURUN_GPU_UUIDS";

/// CUDA's name for `gpu`: its ordinal under `CUDA_DEVICE_ORDER=PCI_BUS_ID` (the NVML index,
/// unless a device cgroup hides GPUs before it), and its UUID (a MIG device's `MIG-` one,
/// the only name CUDA takes it by).
pub(super) fn address(machine: &Machine, gpu: &Gpu) -> Address {
    Address {
        ordinal: cuda_pci_ordinal(&machine.gpus, gpu.index).unwrap_or(gpu.index),
        uuid: gpu.uuid.clone(),
        uuid_only: gpu.mig.is_some(),
    }
}

/// `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER=PCI_BUS_ID`; an inherited
/// `GPU_DEVICE_ORDINAL` (Slurm sets it beside CUDA_VISIBLE_DEVICES: a stale one would point
/// elsewhere) is rewritten to the ordinals. Under a device cgroup CUDA numbers only the GPUs
/// it can open, so the ordinal among those is written, not the NVML index.
pub(super) fn variables(
    addresses: &[&Address],
    visible_as: VisibleAs,
    inherited: &dyn Fn(&str) -> bool,
) -> Written {
    let join = |items: Vec<String>| items.join(",");
    let ordinals = join(addresses.iter().map(|a| a.ordinal.to_string()).collect());
    let visible = join(
        addresses
            .iter()
            .map(|a| match (a.uuid_only, visible_as) {
                (false, VisibleAs::Index) => a.ordinal.to_string(),
                _ => a.uuid.clone().unwrap_or_default(),
            })
            .collect(),
    );
    let naming = vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), visible),
        ("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()),
    ];
    let renumbered = match inherited("GPU_DEVICE_ORDINAL") {
        true => vec![("GPU_DEVICE_ORDINAL".to_owned(), ordinals)],
        false => Vec::new(),
    };
    Written { naming, renumbered }
}

/// GPUs CUDA can enumerate, in PCI order.
fn enumerable(gpus: &[Gpu]) -> impl Iterator<Item = &Gpu> {
    gpus.iter().filter(|gpu| !gpu.handle_refused)
}

/// The index CUDA gives `index` under `CUDA_DEVICE_ORDER=PCI_BUS_ID` in this process: the NVML
/// index itself, unless a device cgroup hides GPUs before it.
fn cuda_pci_ordinal(gpus: &[Gpu], index: u32) -> Option<u32> {
    enumerable(gpus).position(|gpu| gpu.index == index).map(|p| p as u32)
}

pub(super) fn resolve(machine: &Machine, inherited: &Inherited) -> Visibility {
    if inherited.slurm_mps() {
        return behind_mps_server(machine, inherited);
    }
    let gpus = &machine.gpus[..];
    let mut warnings = Vec::new();
    let Some(list) = &inherited.cuda_visible_devices else {
        return slurm_hint(gpus, inherited);
    };
    let source = format!("CUDA_VISIBLE_DEVICES={list}");
    let reachable: Vec<&Gpu> = enumerable(gpus).collect();
    let mut allowed: Vec<u32> = Vec::new();
    let mut used_integers = false;
    if !list.is_empty() {
        for entry in list.split(',').map(str::trim) {
            let found = if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
                used_integers = true;
                entry.parse::<usize>().ok().and_then(|n| reachable.get(n)).map(|gpu| gpu.index)
            } else if entry.starts_with("GPU-") {
                let mut matches = reachable
                    .iter()
                    .filter(|gpu| gpu.uuid.as_deref().is_some_and(|uuid| uuid.starts_with(entry)));
                match (matches.next(), matches.next()) {
                    (Some(only), None) => Some(only.index),
                    _ => None,
                }
            } else if entry.starts_with("MIG-") {
                // Slurm MIG GRES and the Kubernetes device plugin hand out MIG UUIDs; gpurun
                // chooses among them (CUDA would use only the first).
                let reachable_parent = |mig: &&Gpu| {
                    mig.mig
                        .as_ref()
                        .is_some_and(|info| gpus.get(info.parent as usize).is_some_and(|p| !p.handle_refused))
                };
                let mut matches = machine
                    .migs
                    .iter()
                    .filter(reachable_parent)
                    .filter(|mig| mig.uuid.as_deref().is_some_and(|uuid| uuid.starts_with(entry)));
                match (matches.next(), matches.next()) {
                    (Some(only), None) => Some(only.index),
                    _ => None,
                }
            } else {
                None
            };
            match found {
                Some(index) if !allowed.contains(&index) => allowed.push(index),
                _ => {
                    let why = "it is not a device CUDA would accept (or a repeat)";
                    warnings.push(format!(
                        "{source}: entry {entry:?} ends the list ({why}); CUDA ignores it and every entry after it"
                    ));
                    break;
                }
            }
        }
    }
    let mixed_models = {
        let mut names = reachable.iter().filter_map(|gpu| gpu.name.as_deref());
        let first = names.next();
        names.any(|name| Some(name) != first)
    };
    if used_integers && inherited.cuda_device_order.as_deref() != Some("PCI_BUS_ID") && mixed_models {
        warnings.push(format!(
            "{source} uses indices but CUDA_DEVICE_ORDER is not PCI_BUS_ID and the GPUs differ in model: \
             CUDA's default order (fastest first) may number them differently from nvidia-smi; \
             gpurun reads them in PCI order (nvidia-smi's)"
        ));
    }
    let exported = !list.is_empty()
        && [&inherited.gpurun_gpus, &inherited.gpurun_gpu_uuids]
            .iter()
            .any(|told| told.as_deref() == Some(list));
    Visibility {
        allowed: Some(allowed),
        source: Some(source),
        warnings,
        exported: exported.then_some(UNDO_EXPORT),
    }
}

/// Slurm's MPS allocation: device 0 is the GPU behind the job's MPS server, the one GPU this
/// process can reach that runs an MPS server of its user (NVML lists the server there); else,
/// under a device cgroup that leaves one GPU, that GPU. Anything else is not guessed at: no GPU
/// is allowed, and the source says why.
fn behind_mps_server(machine: &Machine, inherited: &Inherited) -> Visibility {
    let reachable: Vec<&Gpu> = enumerable(&machine.gpus).collect();
    let servers: Vec<u32> = reachable
        .iter()
        .filter(|gpu| gpu.mps.as_ref().is_some_and(|mps| !mps.foreign && mps.server_pid.is_some()))
        .map(|gpu| gpu.index)
        .collect();
    let share = inherited.mps_thread_percentage.as_deref().unwrap_or_default();
    let given = format!(
        "Slurm's MPS allocation (CUDA_VISIBLE_DEVICES={}, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={share})",
        inherited.cuda_visible_devices.as_deref().unwrap_or("unset")
    );
    let (allowed, source) = match (&servers[..], &reachable[..]) {
        ([one], _) => (vec![*one], format!("{given}: GPU {one}, where your MPS server runs")),
        ([], [only]) => {
            (vec![only.index], format!("{given}: GPU {}, the only one this job can reach", only.index))
        }
        ([], _) => (
            Vec::new(),
            format!(
                "{given}: device 0 is the GPU behind your MPS server, and none of yours runs here (the job's \
                 prolog starts it); gpurun does not guess which GPU Slurm gave"
            ),
        ),
        (several, _) => (
            Vec::new(),
            format!(
                "{given}: device 0 is the GPU behind your MPS server, and yours run on GPUs {}; gpurun does \
                 not guess which one Slurm gave",
                several.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
        ),
    };
    Visibility { allowed: Some(allowed), source: Some(source), ..Visibility::default() }
}

/// `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS` are only a hint: Slurm sets `CUDA_VISIBLE_DEVICES` with
/// them, and that wins. Without it, the allocation's global ids are taken as NVML indices when
/// they all name GPUs this process can reach.
fn slurm_hint(gpus: &[Gpu], inherited: &Inherited) -> Visibility {
    let unrestricted = Visibility::default();
    let (name, list) = match (&inherited.slurm_step_gpus, &inherited.slurm_job_gpus) {
        (Some(list), _) => ("SLURM_STEP_GPUS", list),
        (None, Some(list)) => ("SLURM_JOB_GPUS", list),
        (None, None) => return unrestricted,
    };
    let ids: Option<Vec<u32>> = list.split(',').map(|id| id.trim().parse().ok()).collect();
    match ids {
        Some(ids) if !ids.is_empty() && ids.iter().all(|&id| enumerable(gpus).any(|gpu| gpu.index == id)) => {
            Visibility { allowed: Some(ids), source: Some(format!("{name}={list}")), ..Visibility::default() }
        }
        _ => Visibility {
            warnings: vec![format!(
                "{name}={list} does not name GPUs NVML shows here; ignoring it (CUDA_VISIBLE_DEVICES is unset)"
            )],
            ..unrestricted
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::{test_gpu, test_mig};

    fn on(gpus: &[Gpu]) -> Machine {
        Machine::of(Default::default(), gpus.to_vec())
    }

    #[test]
    fn mig_entries_are_chosen_among() {
        let mut machine = on(&(0..2).map(test_gpu).collect::<Vec<_>>());
        machine.gpus[1].mig_enabled = Some(true);
        machine.migs = vec![test_mig(1, 0, "3g.40gb", 40), test_mig(1, 1, "3g.40gb", 40)];
        let (a, b) = (machine.migs[0].uuid.clone().unwrap(), machine.migs[1].uuid.clone().unwrap());
        let both = resolve(&machine, &inherited(Some(&format!("{a},{b}")), None));
        assert_eq!(both.allowed, Some(vec![machine.migs[0].index, machine.migs[1].index]));
        assert!(both.warnings.is_empty(), "{:?}", both.warnings);
        // A prefix that names both MIG devices is ambiguous: the list ends there, as in CUDA.
        let ambiguous = resolve(&machine, &inherited(Some("MIG-0000"), None));
        assert_eq!(ambiguous.allowed, Some(vec![]));
    }

    fn machine() -> Vec<Gpu> {
        let mut gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        gpus[2].name = Some("NVIDIA H100".to_owned());
        gpus
    }

    fn inherited(visible: Option<&str>, order: Option<&str>) -> Inherited {
        Inherited {
            cuda_visible_devices: visible.map(str::to_owned),
            cuda_device_order: order.map(str::to_owned),
            ..Inherited::default()
        }
    }

    #[test]
    fn slurms_mps_device_0_is_the_gpu_of_the_users_server() {
        let mps = |visible: Option<&str>| Inherited {
            slurm_job_id: Some("7".to_owned()),
            mps_thread_percentage: Some("50".to_owned()),
            ..inherited(visible, None)
        };
        assert!(mps(None).slurm_mps() && mps(Some("0")).slurm_mps());
        assert!(!mps(Some("1")).slurm_mps(), "a list Slurm's MPS never gives: read as it is");
        let gres_gpu = Inherited { slurm_step_gpus: Some("2".to_owned()), ..mps(Some("0")) };
        assert!(!gres_gpu.slurm_mps(), "a gres/gpu allocation with its own MPS share");
        let mut gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        let none = resolve(&on(&gpus), &mps(Some("0")));
        assert_eq!(none.allowed, Some(vec![]));
        assert!(none.source.unwrap().contains("none of yours runs here"));
        gpus[2].mps = crate::probe::mps::Mps::from_lists(Some((99, None)), Vec::new(), |_| Some(0), 0);
        let found = resolve(&on(&gpus), &mps(Some("0")));
        assert_eq!(found.allowed, Some(vec![2]));
        assert!(found.source.unwrap().ends_with("GPU 2, where your MPS server runs"));
        // Someone else's server is not the job's.
        gpus[2].mps = crate::probe::mps::Mps::from_lists(Some((99, None)), Vec::new(), |_| Some(1000), 0);
        assert_eq!(resolve(&on(&gpus), &mps(None)).allowed, Some(vec![]));
    }

    #[test]
    fn unset_is_unrestricted() {
        let visibility = resolve(&on(&machine()), &inherited(None, None));
        assert_eq!(visibility.allowed, None);
        assert!(visibility.allows(3));
    }

    #[test]
    fn empty_means_no_gpu() {
        let visibility = resolve(&on(&machine()), &inherited(Some(""), None));
        assert_eq!(visibility.allowed, Some(vec![]));
        assert!(visibility.warnings.is_empty());
    }

    #[test]
    fn integers_in_pci_order_and_stop_at_invalid() {
        let pci = Some("PCI_BUS_ID");
        assert_eq!(resolve(&on(&machine()), &inherited(Some("3,1"), pci)).allowed, Some(vec![3, 1]));
        let stopped = resolve(&on(&machine()), &inherited(Some("1,7,2"), pci));
        assert_eq!(stopped.allowed, Some(vec![1]));
        assert!(stopped.warnings[0].contains("\"7\""), "{:?}", stopped.warnings);
        assert_eq!(resolve(&on(&machine()), &inherited(Some("1,1,2"), pci)).allowed, Some(vec![1]));
        assert_eq!(resolve(&on(&machine()), &inherited(Some("-1"), pci)).allowed, Some(vec![]));
    }

    #[test]
    fn uuids_and_unique_prefixes() {
        let gpus = machine();
        let full = gpus[2].uuid.clone().unwrap();
        assert_eq!(resolve(&on(&gpus), &inherited(Some(&full), None)).allowed, Some(vec![2]));
        // Every test GPU's UUID starts with GPU-0000: ambiguous.
        assert_eq!(resolve(&on(&gpus), &inherited(Some("GPU-0000"), None)).allowed, Some(vec![]));
        let prefix = &full[..full.len() - 2];
        assert_eq!(resolve(&on(&gpus), &inherited(Some(prefix), None)).allowed, Some(vec![2]));
    }

    #[test]
    fn ambiguous_indices_warn_only_on_mixed_models_without_pci_order() {
        let warned = resolve(&on(&machine()), &inherited(Some("0"), None));
        assert!(warned.warnings.iter().any(|w| w.contains("ambiguous") || w.contains("CUDA_DEVICE_ORDER")));
        assert!(resolve(&on(&machine()), &inherited(Some("0"), Some("PCI_BUS_ID"))).warnings.is_empty());
        let uniform: Vec<Gpu> = (0..4).map(test_gpu).collect();
        assert!(resolve(&on(&uniform), &inherited(Some("0"), None)).warnings.is_empty());
    }

    #[test]
    fn device_cgroup_renumbers_like_cuda() {
        let mut gpus = machine();
        gpus[0].handle_refused = true;
        gpus[1].handle_refused = true;
        // CUDA sees GPUs 2 and 3 as devices 0 and 1.
        let visibility = resolve(&on(&gpus), &inherited(Some("0,1"), Some("PCI_BUS_ID")));
        assert_eq!(visibility.allowed, Some(vec![2, 3]));
        assert_eq!(cuda_pci_ordinal(&gpus, 3), Some(1));
        assert_eq!(cuda_pci_ordinal(&gpus, 0), None);
    }

    #[test]
    fn slurm_ids_are_a_hint_only() {
        let gpus = machine();
        let step = Inherited { slurm_step_gpus: Some("2,3".to_owned()), ..Inherited::default() };
        assert_eq!(resolve(&on(&gpus), &step).allowed, Some(vec![2, 3]));
        let with_cvd = Inherited { cuda_visible_devices: Some("1".to_owned()), ..step.clone() };
        assert_eq!(resolve(&on(&gpus), &with_cvd).allowed, Some(vec![1]));
        let bogus = Inherited { slurm_step_gpus: Some("9".to_owned()), ..Inherited::default() };
        let visibility = resolve(&on(&gpus), &bogus);
        assert_eq!(visibility.allowed, None);
        assert_eq!(visibility.warnings.len(), 1);
    }

    /// A restriction is "exported" (and a refusal says how to undo it) only when it is exactly
    /// what an earlier gpurun told: GPURUN_GPUS or GPURUN_GPU_UUIDS, and not empty.
    #[test]
    fn an_exported_restriction_is_exactly_what_gpurun_told() {
        let machine = on(&machine());
        let told = |visible: &str, gpus: Option<&str>, uuids: Option<&str>| {
            let inherited = Inherited {
                gpurun_gpus: gpus.map(str::to_owned),
                gpurun_gpu_uuids: uuids.map(str::to_owned),
                ..inherited(Some(visible), Some("PCI_BUS_ID"))
            };
            resolve(&machine, &inherited).exported.is_some()
        };
        assert!(told("0,1", Some("0,1"), None));
        let uuid = machine.gpus[3].uuid.clone().unwrap();
        assert!(told(&uuid, Some("3"), Some(&uuid)));
        assert!(!told("0,1", Some("1,0"), None));
        assert!(!told("0", None, None));
        assert!(!told("", Some(""), None), "an empty variable hides everything, whoever set it");
    }

    /// Without CUDA_VISIBLE_DEVICES, Slurm's allocation is the restriction, named as its
    /// variable (the step's first).
    #[test]
    fn a_slurm_allocation_is_named_in_refusals() {
        let machine = on(&machine());
        let slurm = Inherited {
            slurm_step_gpus: Some("1,2".to_owned()),
            slurm_job_gpus: Some("0,1,2".to_owned()),
            ..Inherited::default()
        };
        let step = resolve(&machine, &slurm);
        assert_eq!((step.allowed, step.source.as_deref()), (Some(vec![1, 2]), Some("SLURM_STEP_GPUS=1,2")));
        let job = resolve(&machine, &Inherited { slurm_step_gpus: None, ..slurm });
        assert_eq!(job.source.as_deref(), Some("SLURM_JOB_GPUS=0,1,2"));
    }
}
