//! How the CUDA runtime turns `CUDA_DEVICE_ORDER` and `CUDA_VISIBLE_DEVICES` into devices.
//!
//! This is the simulator's model of CUDA, kept apart from gpurun's own resolution on purpose:
//! the tests check gpurun against it, so the two must not share code.
//!
//! - Order: `CUDA_DEVICE_ORDER=PCI_BUS_ID` enumerates in PCI (= NVML) order; anything else,
//!   unset included, is FASTEST_FIRST, which the scenario defines.
//! - GPUs whose device node is not accessible (device cgroup) are not enumerated at all.
//! - `CUDA_VISIBLE_DEVICES` unset: every GPU. Empty: none. Otherwise a comma-separated list of
//!   ordinals into that order, `GPU-` UUIDs or unique UUID prefixes, or `MIG-` UUIDs;
//!   enumeration stops at the first entry that is invalid, ambiguous, out of range or a repeat,
//!   keeping the devices before it.
//! - MIG: a GPU in MIG mode keeps its place in the order but is no usable device (its index or
//!   UUID gives nothing); a `MIG-` entry first in the list is the one device (one process can
//!   use one MIG device, so enumeration ends there); unset on a machine with only MIG GPUs, the
//!   first MIG device.

use crate::scenario::Scenario;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDevice {
    /// What the program calls it: `cuda:N`.
    pub ordinal: u32,
    /// The GPU's NVML index (a MIG device's parent's).
    pub nvml_index: u32,
    /// `GPU-...`, or `MIG-...` for a MIG device.
    pub uuid: String,
}

pub fn visible_devices(
    scenario: &Scenario,
    device_order: Option<&str>,
    visible: Option<&str>,
) -> Vec<CudaDevice> {
    let order: Vec<u32> = if device_order == Some("PCI_BUS_ID") {
        (0..scenario.gpus.len() as u32).collect()
    } else {
        scenario.fastest_first()
    };
    let in_mig_mode = |i: u32| scenario.gpus[i as usize].mig_mode.as_deref() == Some("enabled");
    let enumerated: Vec<u32> = order.into_iter().filter(|&i| scenario.gpus[i as usize].accessible).collect();
    let uuid = |index: u32| scenario.gpus[index as usize].uuid.clone();
    let mig_device = |position: usize| (scenario.migs[position].gpu, scenario.migs[position].uuid.clone());
    let reachable_migs: Vec<usize> = (0..scenario.migs.len())
        .filter(|&p| scenario.gpus[scenario.migs[p].gpu as usize].accessible)
        .collect();

    let chosen: Vec<(u32, String)> = match visible {
        None if enumerated.iter().all(|&i| in_mig_mode(i)) => {
            reachable_migs.first().map(|&p| mig_device(p)).into_iter().collect()
        }
        None => enumerated.iter().filter(|&&i| !in_mig_mode(i)).map(|&i| (i, uuid(i))).collect(),
        Some(list) => {
            let mut chosen: Vec<(u32, String)> = Vec::new();
            for entry in list.split(',').map(str::trim) {
                if entry.starts_with("MIG-") {
                    let mut matches =
                        reachable_migs.iter().filter(|&&p| scenario.migs[p].uuid.starts_with(entry));
                    if let (Some(&only), None, true) = (matches.next(), matches.next(), chosen.is_empty()) {
                        chosen.push(mig_device(only));
                    }
                    break;
                }
                let found = if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
                    entry.parse::<usize>().ok().and_then(|n| enumerated.get(n).copied())
                } else if entry.starts_with("GPU-") {
                    let mut matches = enumerated.iter().filter(|&&i| uuid(i).starts_with(entry));
                    match (matches.next(), matches.next()) {
                        (Some(&only), None) => Some(only),
                        _ => None,
                    }
                } else {
                    None
                };
                match found {
                    Some(index) if in_mig_mode(index) => {}
                    Some(index) if !chosen.iter().any(|(i, _)| *i == index) => {
                        chosen.push((index, uuid(index)))
                    }
                    _ => break,
                }
            }
            chosen
        }
    };
    chosen
        .into_iter()
        .enumerate()
        .map(|(ordinal, (nvml_index, uuid))| CudaDevice { ordinal: ordinal as u32, nvml_index, uuid })
        .collect()
}

/// Where a CUDA program looks for the MPS control daemon, and the daemon makes its files:
/// CUDA_MPS_PIPE_DIRECTORY, else NVIDIA's default (nvidia-cuda-mps-control(1)).
pub fn mps_pipe_directory() -> std::path::PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| std::path::PathBuf::from("/tmp/nvidia-mps"), std::path::PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;

    fn nvml_indices(order: Option<&str>, visible: Option<&str>) -> Vec<u32> {
        let scenario = scenario::parse(scenario::EMBEDDED_DEFAULT).unwrap();
        visible_devices(&scenario, order, visible).iter().map(|d| d.nvml_index).collect()
    }

    #[test]
    fn default_order_is_fastest_first() {
        assert_eq!(nvml_indices(None, Some("0")), vec![4]);
        assert_eq!(nvml_indices(Some("FASTEST_FIRST"), Some("0,1")), vec![4, 5]);
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), Some("0,1")), vec![0, 1]);
    }

    #[test]
    fn unset_empty_and_stops() {
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), None).len(), 8);
        assert!(nvml_indices(Some("PCI_BUS_ID"), Some("")).is_empty());
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), Some("2,9,3")), vec![2]);
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), Some("2,2,3")), vec![2]);
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), Some("3,x,1")), vec![3]);
        assert_eq!(nvml_indices(Some("PCI_BUS_ID"), Some("-1")), Vec::<u32>::new());
    }

    #[test]
    fn uuids_and_prefixes() {
        assert_eq!(nvml_indices(None, Some("GPU-c0ffee00-1234-4abc-9def-0123456789a5")), vec![5]);
        // Ambiguous prefix (both H100s) stops enumeration.
        assert_eq!(nvml_indices(None, Some("GPU-5a1c,GPU-c0ffee")), vec![] as Vec<u32>);
        assert_eq!(nvml_indices(None, Some("GPU-0b1d2f3a-4c5e-4d6f-8a9b-1c2d3e4f5a67,1")), vec![7, 5]);
    }

    #[test]
    fn one_mig_device_and_no_mig_gpu() {
        let scenario = scenario::parse(include_str!("../../../tests/scenarios/mig.toml")).unwrap();
        let uuids = |visible: Option<&str>| -> Vec<String> {
            visible_devices(&scenario, Some("PCI_BUS_ID"), visible).into_iter().map(|d| d.uuid).collect()
        };
        let first = "MIG-a1a10000-0000-4000-8000-000000000001";
        assert_eq!(uuids(Some(&format!("{first},MIG-b2b10000-0000-4000-8000-000000000004"))), [first]);
        assert_eq!(visible_devices(&scenario, None, Some(first))[0].nvml_index, 1);
        // GPU 1 is in MIG mode: its index names no device, and the list goes on.
        assert_eq!(uuids(Some("1,0")), ["GPU-a1000000-0000-4000-8000-000000000000"]);
        assert_eq!(uuids(None).len(), 2, "the whole GPUs");
        assert_eq!(uuids(Some("0,MIG-b2b1")), ["GPU-a1000000-0000-4000-8000-000000000000"]);
    }
}
