//! The chosen devices, in one shape for everyone after selection: the environment, the leases,
//! the monitor, the report and the listing.

use serde::Serialize;

use crate::options::count::Count;
use crate::probe::gpu::Gpu;
use crate::select::visibility::cuda_pci_ordinal;

/// One chosen GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// NVML index (PCI order, nvidia-smi's).
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// The index CUDA gives it under `CUDA_DEVICE_ORDER=PCI_BUS_ID` in the command: the NVML
    /// index, unless a device cgroup hides GPUs before it.
    #[serde(skip)]
    pub cuda_ordinal: u32,
    /// Total memory, for reservations given as a share of it.
    #[serde(skip)]
    pub total_bytes: Option<u64>,
}

/// The chosen GPUs, best first (CUDA's device 0 is the first), and what `--gpus` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub devices: Vec<Device>,
    pub requested: Count,
}

impl Selection {
    /// No GPU, for a request of `requested` (`--gpus 0`, or `--fallback cpu`).
    pub fn none(requested: Count) -> Selection {
        Selection { devices: Vec::new(), requested }
    }

    /// `chosen`: NVML indices, best first, each one of `gpus`.
    pub fn new(gpus: &[Gpu], chosen: &[u32], requested: Count) -> Selection {
        let devices = chosen
            .iter()
            .filter_map(|&index| gpus.iter().find(|gpu| gpu.index == index))
            .map(|gpu| Device {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                name: gpu.name.clone(),
                cuda_ordinal: cuda_pci_ordinal(gpus, gpu.index).unwrap_or(gpu.index),
                total_bytes: gpu.memory.map(|m| m.total_bytes),
            })
            .collect();
        Selection { devices, requested }
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn indices(&self) -> Vec<u32> {
        self.devices.iter().map(|d| d.index).collect()
    }

    /// `GPU 3 (NVIDIA A100-SXM4-80GB), GPU 5 (...)`, or `no GPU`.
    pub fn describe(&self) -> String {
        if self.devices.is_empty() {
            return "no GPU".to_owned();
        }
        self.devices
            .iter()
            .map(|d| format!("GPU {} ({})", d.index, d.name.as_deref().unwrap_or("unknown model")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
