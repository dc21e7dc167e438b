//! Plain data about GPUs, as the rest of gpurun sees them: no NVML types past this point.
//! `None` always means "NVML could not tell", never zero.

use serde::Serialize;

/// One GPU as probed. A GPU with `error` set is listed but never eligible.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// NVML index: PCI bus order, the order `nvidia-smi` shows.
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub memory: Option<Memory>,
    pub utilization: Option<Utilization>,
    pub temperature_c: Option<u32>,
    pub power_watts: Option<f64>,
    pub compute_mode: Option<ComputeMode>,
    pub mig_enabled: Option<bool>,
    /// Compute processes on this GPU; `None` when NVML cannot list them.
    pub processes: Option<Vec<GpuProcess>>,
    /// The first query that failed, if any: the GPU is then not eligible.
    pub error: Option<String>,
    /// NVML refused a handle with NO_PERMISSION: the device node is outside this process's
    /// device cgroup (Slurm, containers), so CUDA does not enumerate it either.
    #[serde(skip)]
    pub handle_refused: bool,
}

impl Gpu {
    /// A GPU NVML gave nothing about but its index.
    pub fn unknown(index: u32) -> Gpu {
        Gpu {
            index,
            uuid: None,
            name: None,
            pci_bus_id: None,
            memory: None,
            utilization: None,
            temperature_c: None,
            power_watts: None,
            compute_mode: None,
            mig_enabled: None,
            processes: None,
            error: None,
            handle_refused: false,
        }
    }
}

/// NVML's own numbers (the v2 view): `free = total - reserved - used`, and `used` does not
/// include the driver's reservation. gpurun reports `free` as NVML gives it, never `total - used`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub total_bytes: u64,
    pub reserved_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Utilization {
    pub gpu_percent: u32,
    pub memory_percent: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

/// A process with a compute context on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// `None`: NVML reports the value as not available.
    pub used_bytes: Option<u64>,
    /// Owner and command line from `/proc`, where readable (not for other PID namespaces).
    pub user: Option<String>,
    pub command: Option<String>,
}

/// What the machine looks like, once, at the start of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, as `12.4`.
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

/// A healthy, idle 80 GiB test GPU; tests change what they need.
#[cfg(test)]
pub fn test_gpu(index: u32) -> Gpu {
    Gpu {
        index,
        uuid: Some(format!("GPU-0000{index:04}-1111-4222-8333-444455556666")),
        name: Some("NVIDIA A100-SXM4-80GB".to_owned()),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", index + 1)),
        memory: Some(Memory {
            total_bytes: 80 << 30,
            reserved_bytes: 0,
            used_bytes: 0,
            free_bytes: 80 << 30,
        }),
        utilization: Some(Utilization { gpu_percent: 0, memory_percent: 0 }),
        temperature_c: Some(30),
        power_watts: Some(60.0),
        compute_mode: Some(ComputeMode::Default),
        mig_enabled: Some(false),
        processes: Some(Vec::new()),
        error: None,
        handle_refused: false,
    }
}
