//! The chosen devices, in one shape for everyone after selection: the environment, the leases,
//! the monitor, the report and the listing.

use serde::Serialize;

use crate::options::count::Count;
use crate::probe::gpu::{label, Machine};
use crate::runtime::{Address, Runtime};

/// One chosen GPU or MIG device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Device {
    /// NVML index (PCI order, nvidia-smi's); a MIG device's key (`probe::gpu::mig_key`).
    #[serde(skip)]
    pub(crate) index: u32,
    /// The GPU's NVML index: the parent's for a MIG device (what GPURUN_GPUS says). The JSON
    /// calls it `index`, with `mig_index` (the slot) for a MIG device.
    #[serde(rename = "index")]
    pub(crate) gpu_index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mig_index: Option<u32>,
    /// A MIG device: CUDA takes it by its `MIG-` UUID only.
    #[serde(skip)]
    pub(crate) mig: bool,
    pub(crate) uuid: Option<String>,
    /// What its lease names it by (`Gpu::lease_id`).
    #[serde(skip)]
    pub(crate) lease_id: Option<String>,
    pub(crate) name: Option<String>,
    /// How the command's runtime names it (`Runtime::address`).
    #[serde(skip)]
    pub(crate) address: Address,
    /// Total memory, for reservations given as a share of it.
    #[serde(skip)]
    pub(crate) total_bytes: Option<u64>,
    /// Its memory is the system's (an integrated GPU, such as GB10): said in the JSON.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unified_memory: bool,
}

impl Device {
    /// `GPU 3 (NVIDIA A100-SXM4-80GB)`; `GPU 0 (NVIDIA GB10, unified memory)`.
    pub(crate) fn described(&self) -> String {
        let shared = if self.unified_memory { ", unified memory" } else { "" };
        // The model as the driver gave it, its control characters written out (issue 65).
        let name = crate::process::stdio::escaped(self.name.as_deref().unwrap_or("unknown model"));
        format!("{} ({name}{shared})", label(self.index))
    }
}

/// The chosen GPUs, best first (CUDA's device 0 is the first), and what `--gpus` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    pub(crate) devices: Vec<Device>,
    pub(crate) requested: Count,
    /// The runtime its GPUs run (`none`: CUDA's, whose variables hide every GPU from HIP too).
    pub(crate) runtime: Runtime,
}

impl Selection {
    /// `devices` of `runtime`. No device is CUDA's: an empty CUDA_VISIBLE_DEVICES hides every
    /// GPU from HIP too, where an empty ROCR_VISIBLE_DEVICES is not so sure a thing.
    pub(crate) fn of(devices: Vec<Device>, requested: Count, runtime: Runtime) -> Selection {
        let runtime = if devices.is_empty() { Runtime::Cuda } else { runtime };
        Selection { devices, requested, runtime }
    }

    /// No GPU, for a request of `requested` (`--gpus 0`, or `--fallback cpu`).
    pub(crate) fn none(requested: Count) -> Selection {
        Selection { devices: Vec::new(), requested, runtime: Runtime::Cuda }
    }

    /// `chosen`: device keys, best first, each one of the machine's.
    pub(crate) fn new(machine: &Machine, chosen: &[u32], requested: Count) -> Selection {
        let runtime = Runtime::of(machine.vendor);
        let devices = chosen
            .iter()
            .filter_map(|&index| machine.device(index))
            .map(|gpu| Device {
                index: gpu.index,
                gpu_index: gpu.mig.as_ref().map_or(gpu.index, |mig| mig.parent),
                mig_index: gpu.mig.as_ref().map(|mig| mig.slot),
                mig: gpu.mig.is_some(),
                uuid: gpu.uuid.clone(),
                lease_id: gpu.lease_id(),
                name: gpu.name.clone(),
                unified_memory: gpu.unified_memory,
                address: runtime.address(machine, gpu),
                total_bytes: gpu.memory.map(|m| m.total_bytes),
            })
            .collect();
        Selection::of(devices, requested, runtime)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub(crate) fn indices(&self) -> Vec<u32> {
        self.devices.iter().map(|d| d.index).collect()
    }

    /// Where the chosen GPUs are not all one model (name and memory size): what they are,
    /// and the smallest, which bounds what each rank can hold. A data-parallel job runs at the
    /// pace of its slowest card, which gpurun cannot rank; the models are named for the user to.
    /// `mixed models: 2 x NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-40GB: the
    /// job runs at the pace of the slowest, and NVIDIA A100-SXM4-40GB (40 GiB) bounds what each
    /// rank can hold`.
    pub(crate) fn mixed_models(&self) -> Option<String> {
        let mut models: Vec<(&str, Option<u64>, usize)> = Vec::new();
        for device in &self.devices {
            let model = (device.name.as_deref().unwrap_or("unknown model"), device.total_bytes);
            match models.iter_mut().find(|(name, total, _)| (*name, *total) == model) {
                Some((.., count)) => *count += 1,
                None => models.push((model.0, model.1, 1)),
            }
        }
        if models.len() < 2 {
            return None;
        }
        let named: Vec<String> = models
            .iter()
            .map(|(name, _, count)| (crate::process::stdio::escaped(name), *count))
            .map(|(name, count)| if count > 1 { format!("{count} x {name}") } else { name.into_owned() })
            .collect();
        let smallest =
            models.iter().filter(|(_, total, _)| total.is_some()).min_by_key(|(_, total, _)| *total);
        let bound = smallest.map(|(name, total, _)| {
            format!(
                ", and {} ({}) bounds what each rank can hold",
                crate::process::stdio::escaped(name),
                crate::options::size::human(total.unwrap_or(0))
            )
        });
        Some(format!(
            "mixed models: {}: the job runs at the pace of the slowest{} (--same-model takes one model only)",
            named.join(", "),
            bound.unwrap_or_default()
        ))
    }

    /// `GPU 3 (NVIDIA A100-SXM4-80GB), GPU 5 (...)`, or `no GPU`.
    pub(crate) fn describe(&self) -> String {
        if self.devices.is_empty() {
            return "no GPU".to_owned();
        }
        self.devices.iter().map(Device::described).collect::<Vec<_>>().join(", ")
    }
}
