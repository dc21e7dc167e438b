//! Plain data about GPUs, as the rest of gpurun sees them: no NVML types past this point.
//! `None` always means "NVML could not tell", never zero.

use serde::Serialize;

/// MIG devices share the key space of GPUs (`Gpu::index`), above every NVML index: the
/// device in slot S of GPU P is `MIG_KEYS + 8 x P + S` (a GPU has at most 7 slots).
pub(crate) const MIG_KEYS: u32 = 1 << 16;

pub(crate) fn mig_key(parent: u32, slot: u32) -> u32 {
    MIG_KEYS + parent * 8 + slot
}

/// (parent NVML index, slot) of a MIG device's key; `None` for a GPU.
pub(crate) fn mig_parts(key: u32) -> Option<(u32, u32)> {
    (key >= MIG_KEYS).then(|| ((key - MIG_KEYS) / 8, (key - MIG_KEYS) % 8))
}

/// How messages name a device: `GPU 3`, or `MIG 1:0` (slot 0 of GPU 1, as nvitop shows it).
pub(crate) fn label(key: u32) -> String {
    match mig_parts(key) {
        Some((parent, slot)) => format!("MIG {parent}:{slot}"),
        None => format!("GPU {key}"),
    }
}

/// `GPU 3`, `GPUs 3, 5` for plain GPUs; each device by its label otherwise (`MIG 1:0`).
pub(crate) fn labels(keys: &[u32]) -> String {
    match keys {
        [_, _, ..] if keys.iter().all(|&key| mig_parts(key).is_none()) => {
            format!("GPUs {}", keys.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
        }
        _ => keys.iter().map(|&key| label(key)).collect::<Vec<_>>().join(", "),
    }
}

/// What makes a MIG device one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MigInfo {
    /// The parent GPU's NVML index.
    pub(crate) parent: u32,
    /// Its MIG device index on the parent (nvmlDeviceGetMigDeviceHandleByIndex).
    pub(crate) slot: u32,
    /// `3g.40gb`, from the name NVML gives it (`NVIDIA A100-SXM4-80GB MIG 3g.40gb`).
    pub(crate) profile: Option<String>,
    pub(crate) gpu_instance_id: Option<u32>,
    pub(crate) compute_instance_id: Option<u32>,
}

/// One GPU, or one MIG device (`mig` set), as probed. One with `error` set is listed but never
/// eligible.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Gpu {
    /// NVML index: PCI bus order, the order `nvidia-smi` shows; for a MIG device, its key
    /// (`mig_key`).
    pub(crate) index: u32,
    pub(crate) uuid: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) pci_bus_id: Option<String>,
    pub(crate) memory: Option<Memory>,
    /// The GPU has no memory of its own (an integrated GPU such as GB10's, whose NVML answers
    /// the memory calls NOT_SUPPORTED): `memory` is the system's, from /proc/meminfo.
    pub(crate) unified_memory: bool,
    pub(crate) utilization: Option<Utilization>,
    pub(crate) temperature_c: Option<u32>,
    pub(crate) power_watts: Option<f64>,
    pub(crate) compute_mode: Option<ComputeMode>,
    /// `nvmlDeviceGetPersistenceMode`: without it the driver tears the GPU down when its last
    /// client exits, and the next first handle pays for bringing it up again.
    pub(crate) persistence_mode: Option<bool>,
    pub(crate) mig_enabled: Option<bool>,
    /// The MIG mode after the next GPU reset, when NVML tells (differs from `mig_enabled`
    /// until then).
    pub(crate) mig_pending: Option<bool>,
    /// Set for a MIG device.
    #[serde(skip)]
    pub(crate) mig: Option<MigInfo>,
    /// An AMD GPU's partition modes and its place in them (MI300X: SPX..CPX, NPS1/NPS4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition: Option<Partition>,
    /// ROCr's and HIP's UUID of an AMD GPU (`GPU-` and 16 hex digits, as `rocminfo` shows it):
    /// what `ROCR_VISIBLE_DEVICES` names it by. `uuid` is AMD SMI's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rocr_uuid: Option<String>,
    /// HIP's and ROCr's number for an AMD GPU with nothing set (`amd-smi list`'s HIP_ID): their
    /// order, which need not be AMD SMI's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hip_id: Option<u32>,
    /// The host NUMA node the GPU hangs off (nvidia-smi's "NUMA Affinity": NVML's memory
    /// affinity, else sysfs), and the CPUs local to it (NVML's CPU affinity, else the node's).
    pub(crate) numa_node: Option<u32>,
    /// The NUMA node that is the GPU's own memory, on coherent systems where GPU memory is one
    /// (nvidia-smi's "GPU NUMA ID"); `None` on PCIe hosts.
    pub(crate) gpu_numa_id: Option<u32>,
    #[serde(serialize_with = "crate::options::cpus::serialize")]
    pub(crate) cpus: Option<Vec<u32>>,
    /// ECC, row remapping, retired pages, clock events, link width, lost (a MIG device: its
    /// GPU's).
    pub(crate) health: crate::probe::health::Health,
    /// Compute processes on this GPU; `None` when NVML cannot list them.
    pub(crate) processes: Option<Vec<GpuProcess>>,
    /// Its MPS server and clients, where it runs MPS.
    pub(crate) mps: Option<crate::probe::mps::Mps>,
    /// Its place in the NVLink fabric, where it has one (a MIG device: its GPU's).
    pub(crate) fabric: Option<crate::probe::fabric::Fabric>,
    /// Why the driver takes no work on any GPU now (confidential computing not ready).
    #[serde(skip)]
    pub(crate) blocked: Option<&'static str>,
    /// The first query that failed, if any: the GPU is then not eligible.
    pub(crate) error: Option<String>,
    /// NVML refused a handle with NO_PERMISSION: the device node is outside this process's
    /// device cgroup (Slurm, containers), so CUDA does not enumerate it either.
    #[serde(skip)]
    pub(crate) handle_refused: bool,
    /// Its utilization and health (fabric aside) were not asked yet: a launch asks them only
    /// of the GPUs its choice takes (`probe::deferred`). Until then `utilization` is `None` and
    /// `health` says only what the fabric said.
    #[serde(skip)]
    pub(crate) readings_deferred: bool,
}

impl Gpu {
    /// A GPU NVML gave nothing about but its index.
    pub(crate) fn unknown(index: u32) -> Gpu {
        Gpu {
            index,
            uuid: None,
            name: None,
            pci_bus_id: None,
            memory: None,
            unified_memory: false,
            utilization: None,
            temperature_c: None,
            power_watts: None,
            compute_mode: None,
            persistence_mode: None,
            mig_enabled: None,
            mig_pending: None,
            mig: None,
            partition: None,
            rocr_uuid: None,
            hip_id: None,
            numa_node: None,
            gpu_numa_id: None,
            health: Default::default(),
            cpus: None,
            processes: None,
            mps: None,
            fabric: None,
            blocked: None,
            error: None,
            handle_refused: false,
            readings_deferred: false,
        }
    }

    /// A GPU in MIG mode: not a device of its own (its MIG devices are).
    pub(crate) fn in_mig_mode(&self) -> bool {
        self.mig.is_none() && self.mig_enabled == Some(true)
    }

    /// What reservations, tickets and group records name it by: its UUID, else (a driver that
    /// answers the UUID query NOT_SUPPORTED) its PCI bus id, which names it as alone and as
    /// stably. `None` only when NVML gave neither, which no driver has been seen to do.
    pub(crate) fn lease_id(&self) -> Option<String> {
        self.uuid.clone().or_else(|| {
            let bus: String =
                self.pci_bus_id.as_deref()?.chars().filter(char::is_ascii_alphanumeric).collect();
            Some(format!("PCI-{bus}"))
        })
    }

    /// Whether a lease (ticket, group record) names this GPU: `lease_id`, compared without
    /// making one where the GPU has its UUID (every lookup of every lease, at every launch).
    pub(crate) fn is_leased_as(&self, id: &str) -> bool {
        match &self.uuid {
            Some(uuid) => uuid == id,
            None => self.lease_id().as_deref() == Some(id),
        }
    }
}

/// NVML's own numbers (the v2 view): `free = total - reserved - used`, and `used` does not
/// include the driver's reservation. gpurun reports `free` as NVML gives it, never `total - used`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Memory {
    pub(crate) total_bytes: u64,
    pub(crate) reserved_bytes: u64,
    pub(crate) used_bytes: u64,
    pub(crate) free_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Utilization {
    pub(crate) gpu_percent: u32,
    /// `None` where the driver gives the GPU's activity but not its memory's (AMD SMI's
    /// UMC activity on some boards): one missing figure never hides the other.
    pub(crate) memory_percent: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

/// An AMD GPU's partitioning (amdsmi_get_gpu_compute_partition, ..._memory_partition): the
/// partitions of one card are processors of their own and share its PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Partition {
    /// `SPX`, `DPX`, `QPX`, `CPX`.
    pub(crate) compute: Option<String>,
    /// `NPS1`, `NPS4`.
    pub(crate) memory: Option<String>,
    /// This processor's partition on its card (amdsmi_get_gpu_kfd_info).
    pub(crate) id: Option<u32>,
}

/// A process with a compute context on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuProcess {
    pub(crate) pid: u32,
    /// `None`: NVML reports the value as not available.
    pub(crate) used_bytes: Option<u64>,
    /// Owner and command line from `/proc`, where readable (not for other PID namespaces).
    pub(crate) user: Option<String>,
    pub(crate) command: Option<String>,
}

/// How two GPUs are connected, best first: NVLink, then the closest common PCIe ancestor
/// (`nvmlDeviceGetTopologyCommonAncestor`): the same board, one PCIe switch, several switches,
/// the host bridge, the NUMA node, across sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Link {
    Nvlink,
    /// AMD's Infinity Fabric between GPUs (amdsmi_topo_get_link_type); never beside NVLink on
    /// one machine.
    Xgmi,
    Board,
    Switch,
    Switches,
    Hostbridge,
    Node,
    System,
}

impl Link {
    /// As `nvidia-smi topo -m` writes it.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Link::Nvlink => "NV",
            Link::Xgmi => "XGMI",
            Link::Board => "BRD",
            Link::Switch => "PIX",
            Link::Switches => "PXB",
            Link::Hostbridge => "PHB",
            Link::Node => "NODE",
            Link::System => "SYS",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Link::Nvlink => "nvlink",
            Link::Xgmi => "xgmi",
            Link::Board => "board",
            Link::Switch => "switch",
            Link::Switches => "switches",
            Link::Hostbridge => "hostbridge",
            Link::Node => "node",
            Link::System => "system",
        }
    }
}

/// The links between pairs of GPUs, by NVML index. A pair NVML did not answer for is across
/// sockets (the worst: nothing is assumed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Topology {
    links: std::collections::BTreeMap<(u32, u32), Link>,
}

impl Topology {
    pub(crate) fn insert(&mut self, a: u32, b: u32, link: Link) {
        self.links.insert((a.min(b), a.max(b)), link);
    }

    pub(crate) fn link(&self, a: u32, b: u32) -> Link {
        self.links.get(&(a.min(b), a.max(b))).copied().unwrap_or(Link::System)
    }

    /// Every pair known, lower index first.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (u32, u32, Link)> + '_ {
        self.links.iter().map(|(&(a, b), &link)| (a, b, link))
    }

    /// The worst link among `gpus` (`Nvlink` for fewer than two).
    pub(crate) fn worst(&self, gpus: &[u32]) -> Link {
        let mut worst = Link::Nvlink;
        for (at, &a) in gpus.iter().enumerate() {
            for &b in &gpus[at + 1..] {
                worst = worst.max(self.link(a, b));
            }
        }
        worst
    }
}

/// Who answered the probe, as `--list --json` opens with it: the vendor, the other vendor's
/// GPUs beside them, the driver, and the library loaded (keyed by whose it is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Answered {
    /// `nvidia` (NVML answered) or `amd` (AMD SMI did).
    vendor: crate::probe::vendor::Vendor,
    /// Under `--vendor auto` on NVIDIA GPUs, the AMD GPUs beside them (`--vendor amd` lists them).
    #[serde(skip_serializing_if = "Option::is_none")]
    also_amd_gpus: Option<usize>,
    driver_version: Option<String>,
    cuda_driver_version: Option<String>,
    /// The library that answered, as the user named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    nvml_library: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    amd_smi_library: Option<String>,
}

impl Answered {
    /// `machine`'s, answered by `library`.
    pub(crate) fn of(machine: &Machine, library: &std::path::Path) -> Answered {
        let shown = Some(library.display().to_string());
        let (nvml_library, amd_smi_library) = match machine.vendor {
            crate::probe::vendor::Vendor::Nvidia => (shown, None),
            crate::probe::vendor::Vendor::Amd => (None, shown),
        };
        Answered {
            vendor: machine.vendor,
            also_amd_gpus: machine.also_amd_gpus,
            driver_version: machine.driver_version.clone(),
            cuda_driver_version: machine.cuda_driver_version.clone(),
            nvml_library,
            amd_smi_library,
        }
    }
}

/// What the machine looks like, once, at the start of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Machine {
    /// Whose library answered.
    pub(crate) vendor: crate::probe::vendor::Vendor,
    /// Under `--vendor auto` on NVIDIA GPUs: how many AMD GPUs AMD SMI lists beside them (a run
    /// never mixes the two; `--vendor amd` takes those).
    #[serde(skip)]
    pub(crate) also_amd_gpus: Option<usize>,
    pub(crate) driver_version: Option<String>,
    /// CUDA version the driver supports, as `12.4`.
    pub(crate) cuda_driver_version: Option<String>,
    /// The physical GPUs, in NVML index order.
    pub(crate) gpus: Vec<Gpu>,
    /// The MIG devices of the GPUs in MIG mode (each with `mig` set and a `mig_key` index).
    pub(crate) migs: Vec<Gpu>,
    /// The links between the GPUs, when the probe was asked for them (multi-GPU requests,
    /// `--list --topology`, `--list --json`).
    #[serde(skip)]
    pub(crate) topology: Option<Topology>,
    /// GPUs the driver excluded (not among the GPUs above).
    pub(crate) excluded: Vec<crate::probe::health::Excluded>,
    /// Confidential computing, where the driver has it.
    pub(crate) confidential_computing: Option<ConfCompute>,
}

/// Confidential computing (`nvmlSystemGetConfComputeState`, `...GpusReadyState`): while it is
/// on and the GPUs are not ready (not yet attested and set ready), no GPU takes work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct ConfCompute {
    pub(crate) on: bool,
    pub(crate) ready: Option<bool>,
}

impl ConfCompute {
    /// Why no GPU can take work now, if that is so.
    pub(crate) fn refusal(&self) -> Option<&'static str> {
        (self.on && self.ready == Some(false)).then_some(
            "confidential computing is on and the GPUs are not ready to accept work \
             (nvmlSystemGetConfComputeGpusReadyState): they must be attested and set ready first",
        )
    }
}

impl Machine {
    /// The listing's first line: `NVIDIA driver 580.95.05, CUDA 13.0, 8 GPUs`.
    pub(crate) fn heading(&self) -> String {
        let gpus = self.gpus.len();
        let count = format!("{gpus} GPU{}", if gpus == 1 { "" } else { "s" });
        let or_dash = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
        match self.vendor {
            crate::probe::vendor::Vendor::Nvidia => format!(
                "NVIDIA driver {}, CUDA {}, {count}",
                or_dash(&self.driver_version),
                or_dash(&self.cuda_driver_version)
            ),
            crate::probe::vendor::Vendor::Amd => {
                format!("AMD amdgpu driver {} (AMD SMI), {count}", or_dash(&self.driver_version))
            }
        }
    }

    /// The other vendor's GPUs beside the ones listed, and how to use them.
    pub(crate) fn also_here(&self) -> Option<String> {
        self.also_amd_gpus.map(|count| {
            let plural = if count == 1 { "" } else { "s" };
            format!("also here: {count} AMD GPU{plural} (AMD SMI); gpurun --vendor amd lists and uses them")
        })
    }

    /// `gpus` of `vendor`, and nothing else known (no driver version, MIG devices, links).
    pub(crate) fn of(vendor: crate::probe::vendor::Vendor, gpus: Vec<Gpu>) -> Machine {
        Machine {
            vendor,
            also_amd_gpus: None,
            driver_version: None,
            cuda_driver_version: None,
            gpus,
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        }
    }

    /// Every device a job could be given: the GPUs, then the MIG devices.
    pub(crate) fn devices(&self) -> impl Iterator<Item = &Gpu> {
        self.gpus.iter().chain(&self.migs)
    }

    /// The GPU or MIG device with this key.
    pub(crate) fn device(&self, key: u32) -> Option<&Gpu> {
        self.devices().find(|gpu| gpu.index == key)
    }

    /// The devices, as a slice selection works on.
    pub(crate) fn all_devices(&self) -> Vec<Gpu> {
        self.devices().cloned().collect()
    }
}

/// A healthy, idle 80 GiB test GPU; tests change what they need.
#[cfg(test)]
pub(crate) fn test_gpu(index: u32) -> Gpu {
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
        unified_memory: false,
        utilization: Some(Utilization { gpu_percent: 0, memory_percent: Some(0) }),
        temperature_c: Some(30),
        power_watts: Some(60.0),
        compute_mode: Some(ComputeMode::Default),
        persistence_mode: Some(true),
        mig_enabled: Some(false),
        mig_pending: Some(false),
        mig: None,
        partition: None,
        rocr_uuid: None,
        hip_id: None,
        numa_node: None,
        gpu_numa_id: None,
        health: Default::default(),
        cpus: None,
        processes: Some(Vec::new()),
        mps: None,
        fabric: None,
        blocked: None,
        error: None,
        handle_refused: false,
        readings_deferred: false,
    }
}

/// A test MIG device of `profile` with `total_gib`, in slot `slot` of GPU `parent`.
#[cfg(test)]
pub(crate) fn test_mig(parent: u32, slot: u32, profile: &str, total_gib: u64) -> Gpu {
    Gpu {
        index: mig_key(parent, slot),
        uuid: Some(format!("MIG-0000{parent:02}{slot:02}-1111-4222-8333-444455556666")),
        name: Some(format!("NVIDIA A100-SXM4-80GB MIG {profile}")),
        utilization: None,
        mig_enabled: None,
        mig_pending: None,
        mig: Some(MigInfo {
            parent,
            slot,
            profile: Some(profile.to_owned()),
            gpu_instance_id: Some(slot + 1),
            compute_instance_id: Some(0),
        }),
        memory: Some(Memory {
            total_bytes: total_gib << 30,
            reserved_bytes: 0,
            used_bytes: 0,
            free_bytes: total_gib << 30,
        }),
        ..test_gpu(parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_leased_by_its_uuid_else_by_its_pci_bus_id() {
        let gpu = test_gpu(3);
        let uuid = gpu.uuid.clone().unwrap();
        assert_eq!(gpu.lease_id().as_deref(), Some(uuid.as_str()));
        assert!(gpu.is_leased_as(&uuid) && !gpu.is_leased_as("PCI-00000000030"));
        let nameless = Gpu { uuid: None, pci_bus_id: Some("00000000:03:00.0".to_owned()), ..test_gpu(3) };
        assert_eq!(nameless.lease_id().as_deref(), Some("PCI-0000000003000"));
        assert!(nameless.is_leased_as("PCI-0000000003000") && !nameless.is_leased_as(&uuid));
        assert_eq!(Gpu { uuid: None, ..Gpu::unknown(3) }.lease_id(), None);
    }
}
