//! The host NUMA node a GPU hangs off, as `nvidia-smi topo -m` shows it ("NUMA Affinity"), and
//! the CPUs of a node. NVML's memory affinity at node scope comes first; where the driver does
//! not answer it, the kernel's own word for the PCI device (`/sys/bus/pci/devices/*/numa_node`).
//! `nvmlDeviceGetNumaNodeId` is something else: the node that is the GPU's own memory, on
//! platforms where GPU memory is a NUMA node (coherent systems such as Grace Hopper); NVIDIA's
//! nvml.h: "This only applies to platforms where the GPUs are NUMA nodes". On a PCIe host real
//! drivers answer it NOT_SUPPORTED.

use std::path::Path;

/// `NVML_AFFINITY_SCOPE_NODE` (nvml.h): affinity by NUMA node rather than by socket.
pub(crate) const AFFINITY_SCOPE_NODE: u32 = 0;

/// Words of the node mask asked for: 64 x 16 = 1024 nodes.
pub(crate) const NODE_WORDS: usize = 16;

/// The lowest node set in NVML's node mask (a GPU is local to one node; a mask with several,
/// as on some multi-die packages, names the first as numactl would show it first).
pub(crate) fn first_node(mask: &[u64]) -> Option<u32> {
    mask.iter()
        .enumerate()
        .find(|(_, word)| **word != 0)
        .map(|(at, word)| at as u32 * 64 + word.trailing_zeros())
}

/// The sysfs name of a PCI device from NVML's bus id: `00000000:07:00.0` -> `0000:07:00.0`.
fn sysfs_name(bus_id: &str) -> Option<String> {
    let (domain, rest) = bus_id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:04x}:{}", rest.to_ascii_lowercase()))
}

/// The kernel's NUMA node of the PCI device `bus_id` (NVML's form); `None` where the kernel
/// says -1 (no NUMA, or firmware that does not tell) or the device is not there.
pub(crate) fn sysfs_node(bus_id: &str) -> Option<u32> {
    let path = Path::new("/sys/bus/pci/devices").join(sysfs_name(bus_id)?).join("numa_node");
    std::fs::read_to_string(path).ok()?.trim().parse::<i64>().ok().and_then(|node| u32::try_from(node).ok())
}

/// The CPUs of NUMA node `node`, from the kernel.
pub(crate) fn node_cpus(node: u32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    parse_cpu_list(text.trim())
}

/// `0-7,16-23` (the kernel's cpulist format); an empty list is no CPUs.
fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|part| !part.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => cpus.extend(first.parse::<u32>().ok()?..=last.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_masks_and_names() {
        assert_eq!(first_node(&[0, 0]), None);
        assert_eq!(first_node(&[0b100, 0]), Some(2));
        assert_eq!(first_node(&[0, 1]), Some(64));
        assert_eq!(sysfs_name("00000000:C7:00.0").as_deref(), Some("0000:c7:00.0"));
        assert_eq!(sysfs_name("00010000:07:00.0").as_deref(), Some("10000:07:00.0"));
        assert_eq!(sysfs_name("nonsense"), None);
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
