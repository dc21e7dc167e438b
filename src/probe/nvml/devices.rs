//! A GPU and its MIG devices, read whole; the links between GPUs.

use nvml_wrapper::enum_wrappers::device::{
    ComputeMode as NvmlComputeMode, P2pCapabilitiesIndex, P2pStatus, TemperatureSensor, TopologyLevel,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::health::{fabric_findings, health_findings};
use super::{describe, Queries, Session};
use crate::options::cpus;
use crate::probe::deferred::Deferred;
use crate::probe::gpu::{mig_key, ComputeMode, Gpu, Link, Memory, MigInfo, Topology, Utilization};
use crate::probe::health::{classify, Findings};
use crate::probe::numa;

impl Session {
    /// The link between every pair of `gpus` (two NVML calls a pair: NVLink by P2P status, else
    /// the common PCIe ancestor).
    pub(crate) fn links(&mut self, gpus: &[u32]) -> Topology {
        let calls = self.calls.clone();
        let mut topology = Topology::default();
        let readable: Vec<(u32, Device)> = gpus
            .iter()
            .filter_map(|&index| {
                calls
                    .run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))
                    .ok()
                    .map(|d| (index, d))
            })
            .collect();
        for (at, (a, first)) in readable.iter().enumerate() {
            for (b, second) in &readable[at + 1..] {
                let nvlink = calls
                    .run("nvmlDeviceGetP2PStatus", Some(*a), || {
                        first.p2p_status(second, P2pCapabilitiesIndex::NvLink)
                    })
                    .is_ok_and(|status| status == P2pStatus::Ok);
                let link = if nvlink {
                    Some(Link::Nvlink)
                } else {
                    // The wrapper takes the second handle by value: a fresh one (handles are plain).
                    calls
                        .run("nvmlDeviceGetTopologyCommonAncestor", Some(*a), || {
                            self.nvml
                                .device_by_index(*b)
                                .and_then(|other| first.topology_common_ancestor(other))
                        })
                        .ok()
                        .map(link_of)
                };
                if let Some(link) = link {
                    topology.insert(*a, *b, link);
                }
            }
        }
        topology
    }

    /// The MIG devices of a GPU in MIG mode, slot by slot (an empty slot is NOT_FOUND).
    pub(super) fn probe_migs(&mut self, parent: &Gpu) -> Vec<Gpu> {
        let calls = self.calls.clone();
        let index = parent.index;
        let Ok(device) =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))
        else {
            return Vec::new();
        };
        let slots = calls
            .run("nvmlDeviceGetMaxMigDeviceCount", Some(index), || device.mig_device_count())
            .unwrap_or(0);
        let mut found = Vec::new();
        for slot in 0..slots.min(8) {
            let mig = match calls
                .run("nvmlDeviceGetMigDeviceHandleByIndex", Some(index), || device.mig_device_by_index(slot))
            {
                Ok(mig) => mig,
                Err(NvmlError::NotFound) => continue,
                Err(error) => {
                    tracing::debug!("GPU {index}: MIG device {slot}: {error}");
                    continue;
                }
            };
            let mut queries =
                Queries { calls: &calls, gpu: index, first_error: None, lost: false, failed: Vec::new() };
            let uuid = queries.ask("uuid", "nvmlDeviceGetUUID", true, || mig.uuid());
            let name = queries.ask("name", "nvmlDeviceGetName", false, || mig.name());
            let memory = queries
                .ask("memory", "nvmlDeviceGetMemoryInfo_v2", true, || memory_info(self.nvml, &mig))
                .map(memory_of);
            let (processes, mps) = self.processes_and_mps(&mig, &mut queries);
            let (gpu_instance_id, compute_instance_id) =
                calls.run("nvmlDeviceGetGpuInstanceId", Some(index), || instance_ids(self.nvml, &mig));
            let profile =
                name.as_deref().and_then(|n| n.rsplit_once(" MIG ")).map(|(_, profile)| profile.to_owned());
            found.push(Gpu {
                index: mig_key(index, slot),
                uuid,
                name,
                memory,
                processes,
                mps,
                fabric: parent.fabric.clone(),
                compute_mode: parent.compute_mode,
                health: parent.health.clone(),
                numa_node: parent.numa_node,
                gpu_numa_id: parent.gpu_numa_id,
                cpus: parent.cpus.clone(),
                mig: Some(MigInfo { parent: index, slot, profile, gpu_instance_id, compute_instance_id }),
                error: queries.first_error,
                ..Gpu::unknown(mig_key(index, slot))
            });
        }
        found
    }

    pub(super) fn probe_gpu(&mut self, index: u32, needs: crate::probe::Needs) -> Gpu {
        let calls = self.calls.clone();
        let mut queries =
            Queries { calls: &calls, gpu: index, first_error: None, lost: false, failed: Vec::new() };
        let handle =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index));
        let handle_refused = matches!(handle, Err(NvmlError::NoPermission));
        let device = match handle {
            Ok(device) => device,
            Err(error) => {
                let health =
                    classify(&Findings { lost: matches!(error, NvmlError::GpuLost), ..Findings::default() });
                let error = match error {
                    NvmlError::NotSupported => "handle: not supported".to_owned(),
                    other => format!("handle: {}", describe(&other)),
                };
                return Gpu { error: Some(error), handle_refused, health, ..Gpu::unknown(index) };
            }
        };
        let uuid = queries.ask("uuid", "nvmlDeviceGetUUID", true, || device.uuid());
        let name = queries.ask("name", "nvmlDeviceGetName", false, || device.name());
        let pci_bus_id =
            queries.ask("pci info", "nvmlDeviceGetPciInfo_v3", false, || device.pci_info()).map(|p| p.bus_id);
        let (memory, unified_memory) = queries.memory(name.as_deref(), || memory_info(self.nvml, &device));
        let mig_mode = queries.ask("MIG mode", "nvmlDeviceGetMigMode", true, || device.mig_mode());
        let mig_enabled = mig_mode.as_ref().map(|m| m.current == 1);
        let mig_pending = mig_mode.as_ref().map(|m| m.pending == 1);
        // A GPU in MIG mode is read whole: its MIG devices take their health from it.
        let deferred = !needs.every_reading && mig_enabled != Some(true);
        let utilization = match deferred {
            true => None,
            false => utilization(&device, &mut queries),
        };
        // Shown, never chosen by: asked only where shown (`Needs`).
        let temperature_c = needs
            .sensors
            .then(|| {
                queries.ask("temperature", "nvmlDeviceGetTemperature", false, || {
                    device.temperature(TemperatureSensor::Gpu)
                })
            })
            .flatten();
        let power_watts = needs
            .sensors
            .then(|| queries.ask("power", "nvmlDeviceGetPowerUsage", false, || device.power_usage()))
            .flatten()
            .map(|mw| f64::from(mw) / 1000.0);
        let compute_mode = queries
            .ask("compute mode", "nvmlDeviceGetComputeMode", false, || device.compute_mode())
            .map(compute_mode_of);
        let persistence_mode = queries.ask("persistence mode", "nvmlDeviceGetPersistenceMode", false, || {
            device.is_in_persistent_mode()
        });
        let (numa_node, gpu_numa_id, cpus) = match needs.placement {
            true => placement(&device, &mut queries, pci_bus_id.as_deref()),
            false => (None, None, None),
        };
        let (processes, mps) = self.processes_and_mps(&device, &mut queries);
        let findings = match deferred {
            true => fabric_findings(self.nvml, &device, &mut queries),
            false => health_findings(self.nvml, &device, &mut queries, mig_enabled),
        };
        let (health, fabric) = (classify(&findings), findings.fabric);
        Gpu {
            index,
            uuid,
            name,
            pci_bus_id,
            memory,
            unified_memory,
            utilization,
            temperature_c,
            power_watts,
            compute_mode,
            persistence_mode,
            mig_enabled,
            mig_pending,
            mig: None,
            partition: None,
            rocr_uuid: None,
            hip_id: None,
            numa_node,
            gpu_numa_id,
            cpus,
            health,
            processes,
            mps,
            fabric,
            blocked: None,
            error: queries.first_error,
            handle_refused,
            readings_deferred: deferred,
        }
    }

    /// The readings a probe deferred (`probe::deferred`), of `gpus`: each one's utilization
    /// and its whole health. A GPU whose handle is refused now is left out.
    pub(crate) fn deferred_readings(&mut self, gpus: &[u32]) -> Vec<Deferred> {
        let calls = self.calls.clone();
        let mut read = Vec::with_capacity(gpus.len());
        for &index in gpus {
            let mut queries =
                Queries { calls: &calls, gpu: index, first_error: None, lost: false, failed: Vec::new() };
            let Ok(device) =
                calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))
            else {
                continue;
            };
            let utilization = utilization(&device, &mut queries);
            let findings = health_findings(self.nvml, &device, &mut queries, None);
            read.push(Deferred {
                gpu: index,
                utilization,
                health: classify(&findings),
                fabric: findings.fabric,
            });
        }
        read
    }
}

fn utilization(device: &Device, queries: &mut Queries) -> Option<Utilization> {
    queries
        .ask("utilization", "nvmlDeviceGetUtilizationRates", false, || device.utilization_rates())
        .map(|u| Utilization { gpu_percent: u.gpu, memory_percent: Some(u.memory) })
}

/// Where the GPU sits: its host NUMA node (memory affinity at node scope, else sysfs), the NUMA
/// node that is its own memory where it is one, and its local CPUs (16 words: 1024 CPUs; where
/// NVML does not say, the node's). Memory affinity alone costs a real driver 11.7 ms: asked only
/// where placement is used (`Needs`).
fn placement(
    device: &Device,
    queries: &mut Queries,
    pci_bus_id: Option<&str>,
) -> (Option<u32>, Option<u32>, Option<Vec<u32>>) {
    let numa_node = queries
        .ask("NUMA node", "nvmlDeviceGetMemoryAffinity", false, || {
            device.memory_affinity(numa::NODE_WORDS, numa::AFFINITY_SCOPE_NODE)
        })
        .and_then(|mask| numa::first_node(&mask))
        .or_else(|| pci_bus_id.and_then(numa::sysfs_node));
    let gpu_numa_id = queries.ask("GPU NUMA ID", "nvmlDeviceGetNumaNodeId", false, || device.numa_node_id());
    let cpus = queries
        .ask("CPU affinity", "nvmlDeviceGetCpuAffinity", false, || device.cpu_affinity(16))
        .map(|words| cpus::from_mask(&words))
        .or_else(|| numa_node.and_then(numa::node_cpus));
    (numa_node, gpu_numa_id, cpus)
}

impl Queries<'_> {
    /// The memory, and whether it is the system's: nvml.h says "On certain SOC platforms, the
    /// integrated GPU (iGPU) does not use a dedicated framebuffer but instead shares memory
    /// with the system. As a result, NVML_ERROR_NOT_SUPPORTED will be returned" (GB10, DGX
    /// Spark). There CUDA allocates from system memory, so free and total are the kernel's
    /// MemAvailable and MemTotal: what NVIDIA's own unified-memory code reads (its DGX Spark
    /// change to llama.cpp's CUDA backend, ggml-org/llama.cpp#17368).
    ///
    /// Only an integrated GPU shares the system's memory: a discrete GPU whose memory query is
    /// not supported (a locked-down vGPU, a driver bug) has memory gpurun does not know, which
    /// fails every memory filter, never the host's RAM. NVML has no "integrated" flag (CUDA's
    /// `integrated` attribute is the runtime's), so the model says it: `is_integrated`.
    fn memory(
        &mut self,
        name: Option<&str>,
        query: impl FnOnce() -> Result<nvml_wrapper::struct_wrappers::device::MemoryInfo, NvmlError>,
    ) -> (Option<Memory>, bool) {
        let failures = self.failures();
        match self.ask("memory", "nvmlDeviceGetMemoryInfo_v2", true, query) {
            Some(info) => (Some(memory_of(info)), false),
            None if self.failures() == failures && name.is_some_and(is_integrated) => {
                match crate::probe::meminfo::system_memory() {
                    Some(system) => (Some(system), true),
                    None => (None, false),
                }
            }
            None => (None, false),
        }
    }
}

/// `nvmlDeviceGetMemoryInfo_v2`, else the unversioned call where the driver lacks v2 (before
/// R510: the R470 branch that still runs Kepler machines). v1 has no `reserved`: its `used`
/// counts the driver's reservation, as nvidia-smi on those drivers shows it.
pub(super) fn memory_info(
    nvml: &Nvml,
    device: &Device,
) -> Result<nvml_wrapper::struct_wrappers::device::MemoryInfo, NvmlError> {
    match device.memory_info() {
        Err(error @ (NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound)) => {
            let Ok(symbol) = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref() else { return Err(error) };
            let mut memory = nvml_wrapper_sys::bindings::nvmlMemory_t { total: 0, free: 0, used: 0 };
            // SAFETY: the symbol has nvml.h's signature (nvml-wrapper-sys's bindings); the handle
            // is live for `device`'s lifetime, and `memory` is a valid place for the one write.
            let code = unsafe { symbol(device.handle(), &mut memory) };
            nvml_wrapper::error::nvml_try(code)?;
            Ok(nvml_wrapper::struct_wrappers::device::MemoryInfo {
                free: memory.free,
                reserved: 0,
                total: memory.total,
                used: memory.used,
                version: 1,
            })
        }
        other => other,
    }
}

/// NVML's memory info as the probe's plain data.
fn memory_of(info: nvml_wrapper::struct_wrappers::device::MemoryInfo) -> Memory {
    Memory {
        total_bytes: info.total,
        reserved_bytes: info.reserved,
        used_bytes: info.used,
        free_bytes: info.free,
    }
}

/// NVIDIA's integrated GPUs, which have no memory of their own: the GB10 of DGX Spark and the
/// Tegra parts (Jetson Orin, Thor, Xavier). Every other NVIDIA GPU is discrete.
fn is_integrated(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["gb10", "orin", "thor", "xavier", "tegra"]
        .iter()
        .any(|part| name.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| word == *part))
}

/// The PCIe path between two GPUs, by their common ancestor (`nvidia-smi topo -m`'s PIX, PXB,
/// PHB, NODE, SYS; on one board, the board's own switch).
fn link_of(level: TopologyLevel) -> Link {
    match level {
        TopologyLevel::Internal => Link::Board,
        TopologyLevel::Single => Link::Switch,
        TopologyLevel::Multiple => Link::Switches,
        TopologyLevel::HostBridge => Link::Hostbridge,
        TopologyLevel::Node => Link::Node,
        TopologyLevel::System => Link::System,
    }
}

fn compute_mode_of(mode: NvmlComputeMode) -> ComputeMode {
    match mode {
        NvmlComputeMode::Default => ComputeMode::Default,
        NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
        NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    }
}

/// A MIG device's (GPU instance id, compute instance id): nvmlDeviceGetGpuInstanceId and
/// nvmlDeviceGetComputeInstanceId, which nvml-wrapper 0.13 does not wrap. `None` where the
/// library lacks them or they fail.
fn instance_ids(nvml: &Nvml, device: &Device) -> (Option<u32>, Option<u32>) {
    let lib = nvml.lib();
    let (Ok(gpu_instance), Ok(compute_instance)) =
        (lib.nvmlDeviceGetGpuInstanceId.as_ref(), lib.nvmlDeviceGetComputeInstanceId.as_ref())
    else {
        return (None, None);
    };
    let (mut gi, mut ci): (std::ffi::c_uint, std::ffi::c_uint) = (0, 0);
    // SAFETY: `device` is a live handle of this library (the borrow keeps the library open);
    // each function writes one unsigned int through the pointer it is given, as nvml.h declares.
    let (gi_result, ci_result) = unsafe {
        let handle = device.handle();
        (gpu_instance(handle, &mut gi), compute_instance(handle, &mut ci))
    };
    ((gi_result == 0).then_some(gi), (ci_result == 0).then_some(ci))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_nvml_level_is_its_own_link_from_nearest_to_farthest() {
        let levels = [
            TopologyLevel::Internal,
            TopologyLevel::Single,
            TopologyLevel::Multiple,
            TopologyLevel::HostBridge,
            TopologyLevel::Node,
            TopologyLevel::System,
        ];
        let links: Vec<Link> = levels.into_iter().map(link_of).collect();
        assert_eq!(
            links,
            [Link::Board, Link::Switch, Link::Switches, Link::Hostbridge, Link::Node, Link::System]
        );
    }

    #[test]
    fn only_nvidia_soc_gpus_are_integrated() {
        for integrated in ["NVIDIA GB10", "Orin (nvgpu)", "NVIDIA Jetson AGX Thor", "Xavier"] {
            assert!(is_integrated(integrated), "{integrated}");
        }
        for discrete in
            ["NVIDIA H200", "NVIDIA GB200", "NVIDIA RTX PRO 6000 Blackwell", "NVIDIA GB100", "Tesla T4"]
        {
            assert!(!is_integrated(discrete), "{discrete}");
        }
    }

    #[test]
    fn each_compute_mode_is_its_own() {
        let modes = [
            (NvmlComputeMode::Default, ComputeMode::Default),
            (NvmlComputeMode::ExclusiveThread, ComputeMode::ExclusiveThread),
            (NvmlComputeMode::Prohibited, ComputeMode::Prohibited),
            (NvmlComputeMode::ExclusiveProcess, ComputeMode::ExclusiveProcess),
        ];
        for (nvml, ours) in modes {
            assert_eq!(compute_mode_of(nvml), ours);
        }
    }
}
