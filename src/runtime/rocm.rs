//! Inherited visibility on AMD GPUs: `ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` (or
//! `CUDA_VISIBLE_DEVICES`, which HIP reads alike when `HIP_VISIBLE_DEVICES` is unset), read as
//! the ROCm runtime reads them (ROCm's "GPU isolation techniques"): ROCr keeps the GPUs its list
//! names, by index among the GPUs it can open (AMD SMI's order) or by `GPU-` UUID; HIP then
//! numbers those from 0, and its list picks among those numbers. gpurun selects only inside
//! what both leave and never widens it. An entry that names nothing, or a repeat, ends a list
//! (the runtime shows nothing after it).

use crate::options::VisibleAs;
use crate::probe::gpu::{Gpu, Machine};
use crate::runtime::inherited::{Inherited, Visibility};
use crate::runtime::{Address, Written};

/// Said when an exported restriction turns GPUs away, as `visibility::UNDO_EXPORT` on NVIDIA.
const UNDO_EXPORT: &str = "ROCR_VISIBLE_DEVICES was set by an earlier eval \"$(gpurun --export)\" in this shell, \
and gpurun never widens it; to choose among every GPU again: unset ROCR_VISIBLE_DEVICES GPURUN_GPUS GPURUN_GPU_UUIDS";

/// `list`'s entries among `candidates` (AMD SMI indices): by position, or by ROCr UUID where
/// `by_uuid`; up to the first entry that names none of them or one already named.
fn pick(name: &str, list: &str, candidates: &[&Gpu], by_uuid: bool, warnings: &mut Vec<String>) -> Vec<u32> {
    let mut picked = Vec::new();
    if list.trim().is_empty() {
        return picked;
    }
    for entry in list.split(',').map(str::trim) {
        let by_position = entry.parse::<usize>().ok().and_then(|n| candidates.get(n)).map(|gpu| gpu.index);
        let named = by_position.or_else(|| {
            by_uuid
                .then(|| {
                    candidates.iter().find(|gpu| {
                        gpu.rocr_uuid.as_deref().is_some_and(|uuid| uuid.eq_ignore_ascii_case(entry))
                    })
                })
                .flatten()
                .map(|gpu| gpu.index)
        });
        match named {
            Some(index) if !picked.contains(&index) => picked.push(index),
            _ => {
                warnings.push(format!(
                    "{name}={list}: entry {entry:?} ends the list (it names no GPU here, or one named before); \
                     the ROCm runtime ignores it and every entry after it"
                ));
                break;
            }
        }
    }
    picked
}

/// The GPUs ROCr enumerates here, in its order: those it can open, by HIP_ID (AMD SMI's own
/// order where the library does not say).
fn rocr_order(gpus: &[Gpu]) -> Vec<&Gpu> {
    let mut reachable: Vec<&Gpu> = gpus.iter().filter(|gpu| !gpu.handle_refused).collect();
    reachable.sort_by_key(|gpu| (gpu.hip_id.unwrap_or(u32::MAX), gpu.index));
    reachable
}

/// ROCr's index of GPU `index` here (what `ROCR_VISIBLE_DEVICES=N` names).
fn rocr_index(gpus: &[Gpu], index: u32) -> Option<u32> {
    rocr_order(gpus).iter().position(|gpu| gpu.index == index).map(|at| at as u32)
}

/// ROCr's name for `gpu`: its index among the GPUs ROCr enumerates here, and its `GPU-` UUID
/// where that names it alone (the partitions of one card may share it).
pub(super) fn address(machine: &Machine, gpu: &Gpu) -> Address {
    let alone = |uuid: &String| {
        machine.gpus.iter().filter(|other| other.rocr_uuid.as_ref() == Some(uuid)).count() == 1
    };
    Address {
        ordinal: rocr_index(&machine.gpus, gpu.index).unwrap_or(gpu.index),
        uuid: gpu.rocr_uuid.clone().filter(alone),
        uuid_only: false,
    }
}

/// ROCm's "GPU isolation techniques" (DESIGN 3c): the chosen GPUs in `ROCR_VISIBLE_DEVICES`
/// by UUID (or ROCr index: `--visible-as index`), and HIP's own numbering left to start at 0
/// over them. HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES (HIP reads it alike) and
/// GPU_DEVICE_ORDINAL index into what ROCr shows, so an inherited one is rewritten to show all
/// of the chosen (`0,1`): left as it was, it would pick among them again, or hide them. No
/// CUDA_DEVICE_ORDER: HIP does not read it.
pub(super) fn variables(
    addresses: &[&Address],
    visible_as: VisibleAs,
    inherited: &dyn Fn(&str) -> bool,
) -> Written {
    let visible: Vec<String> = addresses
        .iter()
        .map(|address| match (visible_as, &address.uuid) {
            (VisibleAs::Uuid, Some(uuid)) => uuid.clone(),
            _ => address.ordinal.to_string(),
        })
        .collect();
    let all_of_them = (0..addresses.len()).map(|n| n.to_string()).collect::<Vec<_>>().join(",");
    let renumbered = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"]
        .into_iter()
        .filter(|name| inherited(name))
        .map(|name| (name.to_owned(), all_of_them.clone()))
        .collect();
    Written { naming: vec![("ROCR_VISIBLE_DEVICES".to_owned(), visible.join(","))], renumbered }
}

pub(super) fn resolve(machine: &Machine, inherited: &Inherited) -> Visibility {
    let reachable = rocr_order(&machine.gpus);
    let mut warnings = Vec::new();
    let mut sources = Vec::new();
    let mut kept: Option<Vec<u32>> = None;
    if let Some(list) = &inherited.rocr_visible_devices {
        kept = Some(pick("ROCR_VISIBLE_DEVICES", list, &reachable, true, &mut warnings));
        sources.push(format!("ROCR_VISIBLE_DEVICES={list}"));
    }
    let hip = match (&inherited.hip_visible_devices, &inherited.cuda_visible_devices) {
        (Some(list), _) => Some(("HIP_VISIBLE_DEVICES", list)),
        (None, Some(list)) => Some(("CUDA_VISIBLE_DEVICES", list)),
        (None, None) => None,
    };
    if let Some((name, list)) = hip {
        let numbered: Vec<&Gpu> = match &kept {
            Some(kept) => {
                kept.iter().filter_map(|&index| machine.gpus.iter().find(|gpu| gpu.index == index)).collect()
            }
            None => reachable.clone(),
        };
        kept = Some(pick(name, list, &numbered, false, &mut warnings));
        sources.push(format!("{name}={list}"));
    }
    let exported = kept.as_ref().is_some_and(|kept| {
        let told = kept.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        !kept.is_empty() && inherited.gpurun_gpus.as_deref() == Some(told.as_str())
    });
    let source = (!sources.is_empty()).then(|| sources.join(" "));
    Visibility { allowed: kept, source, warnings, exported: exported.then_some(UNDO_EXPORT) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::test_gpu;

    fn machine() -> Machine {
        let gpus = (0..4)
            .map(|index| Gpu { rocr_uuid: Some(format!("GPU-00000000000000a{index}")), ..test_gpu(index) })
            .collect();
        Machine::of(crate::probe::vendor::Vendor::Amd, gpus)
    }

    fn allowed(rocr: Option<&str>, hip: Option<&str>, cuda: Option<&str>) -> Option<Vec<u32>> {
        let inherited = Inherited {
            rocr_visible_devices: rocr.map(str::to_owned),
            hip_visible_devices: hip.map(str::to_owned),
            cuda_visible_devices: cuda.map(str::to_owned),
            ..Inherited::default()
        };
        resolve(&machine(), &inherited).allowed
    }

    #[test]
    fn rocr_keeps_by_index_or_uuid_and_hip_picks_among_what_it_kept() {
        assert_eq!(allowed(None, None, None), None);
        assert_eq!(allowed(Some("GPU-00000000000000a3,1"), None, None), Some(vec![3, 1]));
        assert_eq!(allowed(Some("2,3"), Some("1"), None), Some(vec![3]));
        // CUDA_VISIBLE_DEVICES counts as HIP's where HIP_VISIBLE_DEVICES is unset.
        assert_eq!(allowed(Some("2,3"), None, Some("0")), Some(vec![2]));
        assert_eq!(allowed(Some("2,3"), Some("1"), Some("0")), Some(vec![3]));
        // The trap: the same physical index in both hides the GPU.
        assert_eq!(allowed(Some("2"), Some("2"), None), Some(vec![]));
        assert_eq!(allowed(Some("1,7,2"), None, None), Some(vec![1]));
        assert_eq!(allowed(Some(""), None, None), Some(vec![]));
    }

    #[test]
    fn rocr_indices_follow_hip_ids_not_amd_smis_order() {
        let mut machine = machine();
        machine.gpus[0].hip_id = Some(1);
        machine.gpus[1].hip_id = Some(0);
        let inherited = Inherited { rocr_visible_devices: Some("0".to_owned()), ..Inherited::default() };
        assert_eq!(resolve(&machine, &inherited).allowed, Some(vec![1]));
        assert_eq!(rocr_index(&machine.gpus, 0), Some(1));
        assert_eq!(rocr_index(&machine.gpus, 2), Some(2));
    }

    #[test]
    fn a_gpu_outside_the_cgroup_is_not_counted() {
        let mut machine = machine();
        machine.gpus[0].handle_refused = true;
        let inherited = Inherited { rocr_visible_devices: Some("0".to_owned()), ..Inherited::default() };
        assert_eq!(resolve(&machine, &inherited).allowed, Some(vec![1]));
    }
}
