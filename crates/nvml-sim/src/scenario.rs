//! The scenario file: what the simulated machine looks like. Format: `scenarios/README.md`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The scenario used when `NVML_SIM_SCENARIO` is unset: a mixed 8-GPU server.
pub const EMBEDDED_DEFAULT: &str = include_str!("../scenarios/default.toml");

/// Environment variable naming the scenario file.
pub const SCENARIO_ENV: &str = "NVML_SIM_SCENARIO";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// `nvmlSystemGetDriverVersion`.
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion{,_v2}`, as CUDA encodes it (12040 = 12.4).
    #[serde(default = "default_cuda_driver_version")]
    pub cuda_driver_version: i32,
    #[serde(default)]
    pub init: InitSpec,
    /// How long each call takes, as on a real driver (`latency.rs`); omitted: at once.
    #[serde(default)]
    pub latency: crate::latency::LatencySpec,
    /// nvmlInit starts a helper thread, as the real library may: a thread the caller did not
    /// create, which inherits the caller's signal mask at that moment and nothing else.
    #[serde(default)]
    pub helper_thread: bool,
    /// Added to the PIDs of live (sim-cuda) processes: NVML in a container reports host PIDs.
    #[serde(default)]
    pub pid_offset: u32,
    /// Driver bugs to reproduce. `v3_stride_32`: nvmlDeviceGetComputeRunningProcesses_v3 writes
    /// 32-byte entries (with usedGpuCcProtectedMemory) where nvml.h says 24, as drivers 535.43
    /// to 535.86 did.
    #[serde(default)]
    pub quirks: Vec<String>,
    #[serde(default)]
    pub cuda: CudaSpec,
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<GpuSpec>,
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessSpec>,
    #[serde(default, rename = "error")]
    pub errors: Vec<ErrorSpec>,
    #[serde(default, rename = "hang")]
    pub hangs: Vec<HangSpec>,
    #[serde(default, rename = "crash")]
    pub crashes: Vec<CrashSpec>,
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    /// MIG instances (a GPU instance with one compute instance each), on GPUs with
    /// `mig_mode = "enabled"`; a GPU's instances are its MIG devices 0, 1, ... in file order.
    #[serde(default, rename = "mig")]
    pub migs: Vec<MigSpec>,
    /// GPUs the driver excluded (`nvmlGetExcludedDeviceCount`/`InfoByIndex`): not among the
    /// devices at all.
    #[serde(default, rename = "excluded")]
    pub excluded: Vec<ExcludedSpec>,
    /// Xid errors the driver raises (`nvmlEventSetWait_v2`, `nvmlEventTypeXidCriticalError`).
    #[serde(default, rename = "xid")]
    pub xids: Vec<XidSpec>,
    /// Confidential computing (`nvmlSystemGetConfComputeState`, `...GpusReadyState`); omitted:
    /// NOT_SUPPORTED, as on a machine without it.
    pub confidential_computing: Option<ConfComputeSpec>,
}

/// Confidential computing: `feature` (`enabled` or `disabled`), whether the GPUs accept work
/// (`ready`: set once attested), and the devtools mode.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfComputeSpec {
    pub feature: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub dev_tools: bool,
}

/// A GPU's place in the NVLink fabric (`nvmlDeviceGetGpuFabricInfoV`): its registration `state`
/// with the fabric manager (`not-started`, `in-progress`, `completed`; `not-supported` answers
/// SUCCESS with state NOT_SUPPORTED, as a real standalone H200 does), the probe's `status`
/// (an NVML error name, `SUCCESS` by default), clique and cluster, and the health mask's fields
/// (omitted: NOT_SUPPORTED in the mask) and summary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    #[serde(default = "default_fabric_state")]
    pub state: String,
    #[serde(default = "default_fabric_status")]
    pub status: String,
    #[serde(default)]
    pub clique_id: u32,
    #[serde(default)]
    pub cluster_uuid: String,
    pub degraded_bw: Option<bool>,
    pub route_recovery: Option<bool>,
    pub route_unhealthy: Option<bool>,
    pub access_timeout_recovery: Option<bool>,
    /// `none`, `sysguid`, `chassis-sn`, `no-partition`, `insufficient-nvlinks`,
    /// `incompatible-gpu-fw`, `invalid-location`, `gpu-state-invalid`.
    pub incorrect_configuration: Option<String>,
    /// `healthy`, `unhealthy`, `limited-capacity` (the v3 layout's summary).
    pub summary: Option<String>,
}

impl FabricSpec {
    fn validate(&self) -> Result<(), String> {
        let one_of = |what: &str, value: &str, known: Vec<&str>| match known.contains(&value) {
            true => Ok(()),
            false => Err(format!("{what} {value:?} is not one of {}", known.join(", "))),
        };
        one_of("state", &self.state, FABRIC_STATES.iter().map(|(name, _)| *name).collect())?;
        if self.status != "SUCCESS" && error_code(&self.status).is_none() {
            return Err(format!("status {:?} is not SUCCESS or an NVML error name", self.status));
        }
        if let Some(incorrect) = &self.incorrect_configuration {
            one_of(
                "incorrect_configuration",
                incorrect,
                INCORRECT_CONFIGURATIONS.iter().map(|c| c.0).collect(),
            )?;
        }
        if let Some(summary) = &self.summary {
            one_of("summary", summary, HEALTH_SUMMARIES.iter().map(|(name, _)| *name).collect())?;
        }
        Ok(())
    }
}

/// `NVML_GPU_FABRIC_STATE_*`.
pub const FABRIC_STATES: &[(&str, u8)] =
    &[("not-supported", 0), ("not-started", 1), ("in-progress", 2), ("completed", 3)];
/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*`, at shift 8, 4 bits wide.
pub const INCORRECT_CONFIGURATIONS: &[(&str, u32, &str)] = &[
    ("none", 1, "NONE"),
    ("sysguid", 2, "INCORRECT_SYSGUID"),
    ("chassis-sn", 3, "INCORRECT_CHASSIS_SN"),
    ("no-partition", 4, "NO_PARTITION"),
    ("insufficient-nvlinks", 5, "INSUFFICIENT_NVLINKS"),
    ("incompatible-gpu-fw", 6, "INCOMPATIBLE_GPU_FW"),
    ("invalid-location", 7, "INVALID_LOCATION"),
    ("gpu-state-invalid", 8, "GPU_STATE_INVALID"),
];
/// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`.
pub const HEALTH_SUMMARIES: &[(&str, u8)] =
    &[("not-supported", 0), ("healthy", 1), ("unhealthy", 2), ("limited-capacity", 3)];

fn default_fabric_state() -> String {
    "completed".to_owned()
}

fn default_fabric_status() -> String {
    "SUCCESS".to_owned()
}

/// An Xid error on one GPU, delivered once to each event set registered for it, `after_ms`
/// after the registration (0: at once). An entry added while a client waits is delivered too.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidSpec {
    pub gpu: u32,
    pub code: u64,
    #[serde(default)]
    pub after_ms: u64,
}

/// A GPU the driver excluded from use (NVreg_ExcludedGpus, or a failure at load).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExcludedSpec {
    pub pci_bus_id: String,
    pub uuid: String,
}

/// Row remapping (`nvmlDeviceGetRemappedRows`, field values 142-145), Ampere and newer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRowsSpec {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failure: bool,
}

/// One MIG device: what `nvmlDeviceGetMigDeviceHandleByIndex` hands out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    /// The parent GPU's NVML index.
    pub gpu: u32,
    /// `MIG-` and a UUID.
    pub uuid: String,
    /// The profile, as `nvidia-smi mig -lgip` names it: `1g.10gb`, `3g.40gb`.
    pub profile: String,
    pub gpu_instance_id: u32,
    #[serde(default)]
    pub compute_instance_id: u32,
    pub memory_total: Size,
    /// In use beyond the listed processes.
    #[serde(default)]
    pub memory_used: Size,
}

/// The most MIG devices one GPU can hold (A100, H100, H200: seven 1g slices).
pub const MAX_MIG_DEVICES: u32 = 7;

fn default_driver_version() -> String {
    "550.54.15".to_owned()
}

fn default_cuda_driver_version() -> i32 {
    12040
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitSpec {
    /// Every init call fails with this NVML error name (`DRIVER_NOT_LOADED`, `NO_PERMISSION`...).
    pub error: Option<String>,
    /// Init takes this long, like a cold driver on a big machine.
    #[serde(default)]
    pub delay_ms: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaSpec {
    /// CUDA's default device order (`CUDA_DEVICE_ORDER` unset or `FASTEST_FIRST`), as NVML
    /// indices: `[2, 0, 1]` means CUDA device 0 is NVML GPU 2. Omitted: PCI order.
    pub fastest_first: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub name: String,
    pub uuid: String,
    /// Extended form, as NVML's `busId`: `00000000:07:00.0`.
    pub pci_bus_id: String,
    /// `(device id << 16) | vendor id`.
    #[serde(default = "default_pci_device_id")]
    pub pci_device_id: u32,
    pub memory_total: Size,
    /// Driver/firmware reservation (NVML v2 `reserved`).
    #[serde(default)]
    pub memory_reserved: Size,
    /// In use beyond the listed processes (other contexts, graphics).
    #[serde(default)]
    pub memory_used: Size,
    /// An integrated GPU sharing the system's memory (GB10, DGX Spark): the memory calls
    /// answer NOT_SUPPORTED, as nvml.h says of "certain SOC platforms".
    #[serde(default)]
    pub unified_memory: bool,
    /// Percent; omitted means NVML answers NOT_SUPPORTED.
    pub utilization_gpu: Option<u32>,
    pub utilization_memory: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    /// `default`, `exclusive_thread`, `prohibited`, `exclusive_process`; omitted: NOT_SUPPORTED.
    pub compute_mode: Option<String>,
    /// `enabled` or `disabled`; omitted: NOT_SUPPORTED (pre-Ampere).
    pub mig_mode: Option<String>,
    /// The pending MIG mode, when it differs from `mig_mode` (a GPU reset is needed).
    pub mig_pending: Option<String>,
    /// CPU list as in `/sys/devices/system/cpu/online`: `0-15,32-47`.
    pub cpu_affinity: Option<String>,
    /// The host NUMA node the GPU is attached to: `nvmlDeviceGetMemoryAffinity` at node scope
    /// (nvidia-smi's "NUMA Affinity"), and the default topology of pairs without a `[[link]]`.
    pub numa_node: Option<u32>,
    /// `enabled` (the default: a server's driver runs in persistence mode) or `disabled`:
    /// `nvmlDeviceGetPersistenceMode`.
    pub persistence_mode: Option<String>,
    /// `"8.0"`: `nvmlDeviceGetCudaComputeCapability`; omitted: from the model name (V100 7.0,
    /// A100 8.0, H100 and H200 9.0), else NOT_SUPPORTED.
    pub compute_capability: Option<String>,
    /// The performance state (0 = P0, maximum performance): `nvmlDeviceGetPerformanceState`.
    #[serde(default)]
    pub pstate: u32,
    /// `nvmlDeviceGetPowerManagementLimit` in milliwatts; omitted: NOT_SUPPORTED.
    pub power_limit_mw: Option<u32>,
    /// `enabled` or `disabled`: `nvmlDeviceGetEccMode`; omitted: a board without ECC
    /// (NOT_SUPPORTED, and so are the ECC counters).
    pub ecc_mode: Option<String>,
    /// ECC error counters (`nvmlDeviceGetTotalEccErrors`), while ECC is enabled.
    #[serde(default)]
    pub ecc_volatile_uncorrected: u64,
    #[serde(default)]
    pub ecc_volatile_corrected: u64,
    #[serde(default)]
    pub ecc_aggregate_uncorrected: u64,
    #[serde(default)]
    pub ecc_aggregate_corrected: u64,
    /// Row remapping; omitted on Ampere and newer: nothing remapped. Before Ampere the calls
    /// answer NOT_SUPPORTED.
    pub remapped_rows: Option<RemappedRowsSpec>,
    /// Pages pending retirement (before Ampere; Ampere and newer remap rows instead).
    #[serde(default)]
    pub retired_pages_pending: bool,
    /// Its place in the NVLink fabric (HGX, GB200/GB300 NVL); omitted: NOT_SUPPORTED.
    pub fabric: Option<FabricSpec>,
    /// Active clock event reasons: `idle`, `applications_clocks`, `sw_power_cap`,
    /// `hw_slowdown`, `sync_boost`, `sw_thermal`, `hw_thermal`, `power_brake`, `display_clocks`,
    /// `board_limit`, `reliability`. Omitted: `idle` when utilization is 0, else none.
    pub clocks_event_reasons: Option<Vec<String>>,
    /// The driver's throttle counters (`nvmlDeviceGetFieldValues`, nanoseconds held back since
    /// the driver loaded) by reason: `sw_power_cap`, `sync_boost`, `sw_thermal`, `hw_thermal`,
    /// `power_brake`, `board_limit`, `reliability`; unlisted ones are 0. Omitted: a driver
    /// without them (NOT_SUPPORTED), whose clients sample the clock event reasons instead.
    pub throttle_ns: Option<std::collections::BTreeMap<String, u64>>,
    /// `nvmlDeviceGetTotalEnergyConsumption`: `true` answers the energy drawn at `power_mw`
    /// since the Unix epoch (as if the driver loaded then), `false` NOT_SUPPORTED. Omitted: a
    /// Volta or newer board with `power_mw` has it (nvml.h: "For Volta or newer").
    pub energy_counter: Option<bool>,
    /// Current and maximum PCIe link width (default 16 and 16).
    pub pcie_width: Option<u32>,
    pub pcie_max_width: Option<u32>,
    /// The NUMA node that is the GPU's own memory, on a coherent platform (Grace Hopper):
    /// `nvmlDeviceGetNumaNodeId`. Omitted, as on every PCIe host: NOT_SUPPORTED.
    pub gpu_numa_id: Option<u32>,
    /// False when the device node is not accessible (Slurm device cgroup): NVML refuses the
    /// handle with NO_PERMISSION and CUDA does not enumerate the GPU.
    #[serde(default = "yes")]
    pub accessible: bool,
}

/// `nvmlClocksEventReason*` bits by the scenario's names.
pub const CLOCKS_EVENT_REASONS: &[(&str, u64)] = &[
    ("idle", 0x1),
    ("applications_clocks", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("power_brake", 0x80),
    ("display_clocks", 0x100),
    ("board_limit", 0x200),
    ("reliability", 0x400),
];

/// The throttle counters' names, with their `NVML_FI_DEV_*` field and the clock event reason
/// bit each counts.
pub const THROTTLE_COUNTERS: &[(&str, u32, u64)] = &[
    ("sw_power_cap", 74, 0x4),
    ("sync_boost", 76, 0x10),
    ("board_limit", 77, 0x200),
    ("reliability", 79, 0x400),
    ("sw_thermal", 269, 0x20),
    ("hw_thermal", 270, 0x40),
    ("power_brake", 271, 0x80),
];

impl GpuSpec {
    /// Whether `nvmlDeviceGetTotalEnergyConsumption` answers on this board.
    pub fn has_energy_counter(&self) -> bool {
        self.energy_counter.unwrap_or(
            self.power_mw.is_some() && self.compute_capability().is_some_and(|(major, _)| major >= 7),
        )
    }

    /// Ampere (compute capability 8.0) or newer: row remapping instead of page retirement.
    pub fn ampere_or_newer(&self) -> bool {
        self.compute_capability().is_some_and(|(major, _)| major >= 8)
    }

    /// The active clock event reasons as nvml.h's bitmask.
    pub fn clocks_event_bits(&self) -> u64 {
        match &self.clocks_event_reasons {
            Some(names) => names
                .iter()
                .filter_map(|name| CLOCKS_EVENT_REASONS.iter().find(|(known, _)| known == name))
                .fold(0, |bits, (_, bit)| bits | bit),
            None if self.utilization_gpu == Some(0) => 0x1,
            None => 0,
        }
    }

    /// `compute_capability`, else the model's (CUDA's published numbers).
    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        if let Some(text) = &self.compute_capability {
            let (major, minor) = text.split_once('.')?;
            return Some((major.parse().ok()?, minor.parse().ok()?));
        }
        let name = self.name.to_ascii_uppercase();
        [("V100", (7, 0)), ("A100", (8, 0)), ("H100", (9, 0)), ("H200", (9, 0))]
            .into_iter()
            .find(|(model, _)| name.contains(model))
            .map(|(_, capability)| capability)
    }
}

fn default_pci_device_id() -> u32 {
    0x20b5_10de
}

fn yes() -> bool {
    true
}

/// A process of another user, listed by NVML on one GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub gpu: u32,
    /// The MIG instance (its `MIG-` UUID) the process runs in, on a GPU in MIG mode.
    pub mig: Option<String>,
    pub pid: u32,
    /// Omitted: NVML reports "not available" (as under WDDM or without permission).
    pub used: Option<Size>,
    /// `"server"`: an MPS server (in the compute list); `"client"`: an MPS client (only in the
    /// MPS list).
    #[serde(default, deserialize_with = "mps_role")]
    pub mps: Option<sim_shared::registry::MpsRole>,
    /// What `nvmlSystemGetProcessName` answers for it (`nvidia-cuda-mps-server`); omitted:
    /// NOT_FOUND.
    pub name: Option<String>,
}

fn mps_role<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<sim_shared::registry::MpsRole>, D::Error> {
    use sim_shared::registry::MpsRole;
    match <Option<String> as Deserialize>::deserialize(d)?.as_deref() {
        None => Ok(None),
        Some("server") => Ok(Some(MpsRole::Server)),
        Some("client") => Ok(Some(MpsRole::Client)),
        Some(other) => {
            Err(serde::de::Error::custom(format!("mps = {other:?}: expected \"server\" or \"client\"")))
        }
    }
}

/// An injected failure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    /// NVML function name without its version suffix (`nvmlDeviceGetMemoryInfo` covers
    /// `nvmlDeviceGetMemoryInfo_v2`), or `*` for every per-device call. The memory and process
    /// list calls also answer to their versioned names alone (`nvmlDeviceGetMemoryInfo_v2`,
    /// `nvmlDeviceGetComputeRunningProcesses_v3`): a driver older than that entry point.
    pub call: String,
    /// Only this NVML index; omitted: every device (and system calls).
    pub gpu: Option<u32>,
    /// NVML error name without the `NVML_ERROR_` prefix.
    pub error: String,
    /// Transient: only the first N matching calls of each process fail.
    pub times: Option<u32>,
}

/// A call that does not return for a while, or ever: a GPU off the bus, a wedged driver.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangSpec {
    /// As for `[[error]]`: the NVML function without its version suffix, or `*`.
    pub call: String,
    pub gpu: Option<u32>,
    /// This many matching calls of each process return normally first.
    #[serde(default)]
    pub after: u32,
    /// How long each hanging call takes; omitted: it never returns.
    pub ms: Option<u64>,
    /// Only this many calls hang (after `after`); omitted: every one.
    pub times: Option<u32>,
}

/// A call that crashes the calling process with a real memory fault (SIGSEGV from the kernel,
/// not a signal someone sent), as a buggy driver library would.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashSpec {
    pub call: String,
    pub gpu: Option<u32>,
}

/// Topology between two GPUs, for `nvmlDeviceGetTopologyCommonAncestor`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub gpus: [u32; 2],
    /// `internal`, `single`, `multiple`, `hostbridge`, `node`, `system`.
    pub level: String,
    /// The pair is also joined by NVLink (`nvmlDeviceGetP2PStatus` with the NVLINK index).
    #[serde(default)]
    pub nvlink: bool,
}

pub use sim_shared::{parse_size, Size};

/// Where the scenario comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Embedded,
}

impl Source {
    pub fn from_env() -> Source {
        match std::env::var_os(SCENARIO_ENV) {
            Some(path) if !path.is_empty() => Source::File(PathBuf::from(path)),
            _ => Source::Embedded,
        }
    }

    pub fn load(&self) -> Result<Scenario, String> {
        match self {
            Source::Embedded => parse(EMBEDDED_DEFAULT).map_err(|e| format!("embedded default: {e}")),
            Source::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
                parse(&text).map_err(|e| format!("{}: {e}", path.display()))
            }
        }
    }
}

pub fn parse(text: &str) -> Result<Scenario, String> {
    let scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
    scenario.validate()?;
    Ok(match container_view() {
        Some(visible) => scenario.restricted_to(&visible),
        None => scenario,
    })
}

/// In a container, the GPUs its runtime injected: a CDI device of the simulator's spec sets
/// `NVML_SIM_VISIBLE_<n>=<UUID>`, one variable per device (podman keeps the last value when
/// two devices set the same variable), as the driver's device nodes are what a container of
/// the real machine is given.
pub const VISIBLE_PREFIX: &str = "NVML_SIM_VISIBLE_";

fn container_view() -> Option<Vec<String>> {
    let visible: Vec<String> = std::env::vars_os()
        .filter(|(name, _)| name.to_str().is_some_and(|name| name.starts_with(VISIBLE_PREFIX)))
        .filter_map(|(_, value)| value.into_string().ok())
        .collect();
    (!visible.is_empty()).then_some(visible)
}

impl Scenario {
    /// The machine as NVML in a container sees it: only the GPUs `visible` names (by UUID),
    /// renumbered from 0 in the machine's (PCI) order, with what refers to them (processes,
    /// links, MIG devices, injected errors, Xids, CUDA's order); the rest is not there.
    pub fn restricted_to(mut self, visible: &[String]) -> Scenario {
        let kept: Vec<u32> = (0..self.gpus.len() as u32)
            .filter(|&index| visible.contains(&self.gpus[index as usize].uuid))
            .collect();
        let renumber = |old: u32| kept.iter().position(|&k| k == old).map(|new| new as u32);
        let optional = |gpu: Option<u32>| match gpu {
            None => Some(None),
            Some(old) => renumber(old).map(Some),
        };
        self.gpus = kept.iter().map(|&index| self.gpus[index as usize].clone()).collect();
        self.processes.retain_mut(|p| renumber(p.gpu).map(|gpu| p.gpu = gpu).is_some());
        self.migs.retain_mut(|m| renumber(m.gpu).map(|gpu| m.gpu = gpu).is_some());
        self.xids.retain_mut(|x| renumber(x.gpu).map(|gpu| x.gpu = gpu).is_some());
        self.errors.retain_mut(|e| optional(e.gpu).map(|gpu| e.gpu = gpu).is_some());
        self.hangs.retain_mut(|h| optional(h.gpu).map(|gpu| h.gpu = gpu).is_some());
        self.crashes.retain_mut(|c| optional(c.gpu).map(|gpu| c.gpu = gpu).is_some());
        self.links.retain_mut(|link| match (renumber(link.gpus[0]), renumber(link.gpus[1])) {
            (Some(a), Some(b)) => {
                link.gpus = [a, b];
                true
            }
            _ => false,
        });
        if let Some(order) = &mut self.cuda.fastest_first {
            *order = order.iter().filter_map(|&old| renumber(old)).collect();
        }
        self
    }

    fn validate(&self) -> Result<(), String> {
        self.latency.validate().map_err(|e| format!("latency: {e}"))?;
        let count = self.gpus.len() as u32;
        for (index, gpu) in self.gpus.iter().enumerate() {
            if !gpu.uuid.starts_with("GPU-") {
                return Err(format!("gpu {index}: uuid {:?} must start with GPU-", gpu.uuid));
            }
            if self.gpus[..index].iter().any(|other| other.uuid == gpu.uuid) {
                return Err(format!("gpu {index}: uuid {} appears twice", gpu.uuid));
            }
            if let Some(mode) = &gpu.compute_mode {
                compute_mode_code(mode).ok_or_else(|| {
                    format!("gpu {index}: compute_mode {mode:?} is not default, exclusive_thread, prohibited or exclusive_process")
                })?;
            }
            if let Some(mode) = &gpu.mig_mode {
                mig_mode_code(mode)
                    .ok_or_else(|| format!("gpu {index}: mig_mode {mode:?} is not enabled or disabled"))?;
            }
            if let Some(list) = &gpu.cpu_affinity {
                parse_cpu_list(list).map_err(|e| format!("gpu {index}: cpu_affinity: {e}"))?;
            }
            if let Some(mode) = &gpu.ecc_mode {
                mig_mode_code(mode)
                    .ok_or_else(|| format!("gpu {index}: ecc_mode {mode:?} is not enabled or disabled"))?;
            }
            if let Some(fabric) = &gpu.fabric {
                fabric.validate().map_err(|e| format!("gpu {index}: fabric: {e}"))?;
            }
            for name in gpu.clocks_event_reasons.iter().flatten() {
                if !CLOCKS_EVENT_REASONS.iter().any(|(known, _)| known == name) {
                    let known: Vec<&str> = CLOCKS_EVENT_REASONS.iter().map(|(known, _)| *known).collect();
                    return Err(format!(
                        "gpu {index}: clocks event reason {name:?} is not one of {}",
                        known.join(", ")
                    ));
                }
            }
            for name in gpu.throttle_ns.iter().flat_map(|counters| counters.keys()) {
                if !THROTTLE_COUNTERS.iter().any(|(known, _, _)| known == name) {
                    let known: Vec<&str> = THROTTLE_COUNTERS.iter().map(|(known, _, _)| *known).collect();
                    return Err(format!(
                        "gpu {index}: throttle_ns {name:?} is not one of {}",
                        known.join(", ")
                    ));
                }
            }
        }
        if let Some(cc) = &self.confidential_computing {
            if cc.feature != "enabled" && cc.feature != "disabled" {
                return Err(format!(
                    "confidential_computing.feature {:?} is not enabled or disabled",
                    cc.feature
                ));
            }
        }
        if let Some(order) = &self.cuda.fastest_first {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            if sorted != (0..count).collect::<Vec<_>>() {
                return Err(format!(
                    "cuda.fastest_first {order:?} is not a permutation of the {count} GPU indices"
                ));
            }
        }
        for (at, mig) in self.migs.iter().enumerate() {
            let parent = self
                .gpus
                .get(mig.gpu as usize)
                .ok_or_else(|| format!("mig {}: gpu {} does not exist", mig.uuid, mig.gpu))?;
            if parent.mig_mode.as_deref() != Some("enabled") {
                return Err(format!(
                    "mig {}: gpu {} is not in MIG mode (mig_mode = \"enabled\")",
                    mig.uuid, mig.gpu
                ));
            }
            if !mig.uuid.starts_with("MIG-") || self.migs[..at].iter().any(|other| other.uuid == mig.uuid) {
                return Err(format!("mig {}: the uuid must start with MIG- and be unique", mig.uuid));
            }
            if self.migs_of(mig.gpu).count() as u32 > MAX_MIG_DEVICES {
                return Err(format!("gpu {}: more than {MAX_MIG_DEVICES} MIG devices", mig.gpu));
            }
        }
        for (index, gpu) in self.gpus.iter().enumerate() {
            if let Some(mode) = &gpu.mig_pending {
                mig_mode_code(mode)
                    .ok_or_else(|| format!("gpu {index}: mig_pending {mode:?} is not enabled or disabled"))?;
            }
        }
        for process in &self.processes {
            if process.gpu >= count {
                return Err(format!("process {}: gpu {} does not exist", process.pid, process.gpu));
            }
            if let Some(uuid) = &process.mig {
                if !self.migs_of(process.gpu).any(|mig| &mig.uuid == uuid) {
                    return Err(format!(
                        "process {}: gpu {} has no MIG device {uuid}",
                        process.pid, process.gpu
                    ));
                }
            }
        }
        for error in &self.errors {
            error_code(&error.error)
                .ok_or_else(|| format!("error {:?}: unknown NVML error name", error.error))?;
        }
        for quirk in &self.quirks {
            if !KNOWN_QUIRKS.contains(&quirk.as_str()) {
                return Err(format!("quirk {quirk:?} is unknown; known: {}", KNOWN_QUIRKS.join(", ")));
            }
        }
        if let Some(name) = &self.init.error {
            error_code(name).ok_or_else(|| format!("init.error {name:?}: unknown NVML error name"))?;
        }
        for link in &self.links {
            topology_level(&link.level).ok_or_else(|| format!("link level {:?} is unknown", link.level))?;
            if link.gpus.iter().any(|&gpu| gpu >= count) {
                return Err(format!("link {:?}: no such GPU", link.gpus));
            }
        }
        Ok(())
    }

    /// The MIG devices of GPU `gpu`, in slot order.
    pub fn migs_of(&self, gpu: u32) -> impl Iterator<Item = &MigSpec> {
        self.migs.iter().filter(move |mig| mig.gpu == gpu)
    }

    pub fn has_quirk(&self, quirk: &str) -> bool {
        self.quirks.iter().any(|q| q == quirk)
    }

    /// CUDA's FASTEST_FIRST order as NVML indices.
    pub fn fastest_first(&self) -> Vec<u32> {
        self.cuda.fastest_first.clone().unwrap_or_else(|| (0..self.gpus.len() as u32).collect())
    }
}

pub const QUIRK_V3_STRIDE_32: &str = "v3_stride_32";
/// An MPS client is in the GPU's compute list as well as its MPS list, as a real H200 on
/// driver 580.159 listed one (tests/real-gpu/h200-2026-12-04: `--list` showed it twice).
pub const QUIRK_MPS_CLIENTS_IN_COMPUTE_LIST: &str = "mps_clients_in_compute_list";
const KNOWN_QUIRKS: &[&str] = &[QUIRK_V3_STRIDE_32, QUIRK_MPS_CLIENTS_IN_COMPUTE_LIST];

/// `nvmlComputeMode_t`.
pub fn compute_mode_code(name: &str) -> Option<u32> {
    Some(match name {
        "default" => 0,
        "exclusive_thread" => 1,
        "prohibited" => 2,
        "exclusive_process" => 3,
        _ => return None,
    })
}

/// `NVML_DEVICE_MIG_DISABLE` / `NVML_DEVICE_MIG_ENABLE`.
pub fn mig_mode_code(name: &str) -> Option<u32> {
    Some(match name {
        "disabled" => 0,
        "enabled" => 1,
        _ => return None,
    })
}

/// `nvmlGpuTopologyLevel_t`.
pub fn topology_level(name: &str) -> Option<u32> {
    Some(match name {
        "internal" => 0,
        "single" => 10,
        "multiple" => 20,
        "hostbridge" => 30,
        "node" => 40,
        "system" => 50,
        _ => return None,
    })
}

/// `nvmlReturn_t` by name, as in nvml.h without the `NVML_ERROR_` prefix.
pub fn error_code(name: &str) -> Option<u32> {
    ERROR_NAMES.iter().find(|(_, known)| *known == name).map(|(code, _)| *code)
}

pub const ERROR_NAMES: &[(u32, &str)] = &[
    (1, "UNINITIALIZED"),
    (2, "INVALID_ARGUMENT"),
    (3, "NOT_SUPPORTED"),
    (4, "NO_PERMISSION"),
    (5, "ALREADY_INITIALIZED"),
    (6, "NOT_FOUND"),
    (7, "INSUFFICIENT_SIZE"),
    (8, "INSUFFICIENT_POWER"),
    (9, "DRIVER_NOT_LOADED"),
    (10, "TIMEOUT"),
    (11, "IRQ_ISSUE"),
    (12, "LIBRARY_NOT_FOUND"),
    (13, "FUNCTION_NOT_FOUND"),
    (14, "CORRUPTED_INFOROM"),
    (15, "GPU_IS_LOST"),
    (16, "RESET_REQUIRED"),
    (17, "OPERATING_SYSTEM"),
    (18, "LIB_RM_VERSION_MISMATCH"),
    (19, "IN_USE"),
    (20, "MEMORY"),
    (21, "NO_DATA"),
    (25, "ARGUMENT_VERSION_MISMATCH"),
    (27, "NOT_READY"),
    (28, "GPU_NOT_FOUND"),
    (29, "INVALID_STATE"),
    (999, "UNKNOWN"),
];

/// Parses a Linux CPU list (`0-3,8,10-11`) into CPU numbers.
pub fn parse_cpu_list(list: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} is not a CPU number or range");
        match part.split_once('-') {
            Some((first, last)) => {
                let first: u32 = first.trim().parse().map_err(|_| bad())?;
                let last: u32 = last.trim().parse().map_err(|_| bad())?;
                if first > last || last > 65535 {
                    return Err(bad());
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

/// Where live processes register: `NVML_SIM_STATE_DIR`, else `<scenario>.state` beside the
/// scenario file, else a per-user directory for the embedded default.
pub fn state_dir(source: &Source) -> PathBuf {
    if let Some(dir) = std::env::var_os("NVML_SIM_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match source {
        Source::File(path) => {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(".state");
            path.parent().unwrap_or(Path::new(".")).join(name)
        }
        // SAFETY: getuid cannot fail and touches no memory.
        Source::Embedded => std::env::temp_dir().join(format!("nvml-sim-{}", unsafe { libc::getuid() })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_sees_only_its_gpus_renumbered_with_what_refers_to_them() {
        let gpu = |n: u32, uuid: &str| {
            format!(
                "[[gpu]]\nname = \"A100\"\nuuid = \"{uuid}\"\npci_bus_id = \"00000000:0{n}:00.0\"\nmemory_total = \"80GiB\"\n"
            )
        };
        let gpus = format!("{}{}{}", gpu(1, "GPU-a"), gpu(2, "GPU-b"), gpu(3, "GPU-c"));
        let machine = parse(&format!(
            "{gpus}\
             [[process]]\ngpu = 0\npid = 7\n[[process]]\ngpu = 2\npid = 8\n\
             [[link]]\ngpus = [0, 2]\nlevel = \"single\"\n[[link]]\ngpus = [0, 1]\nlevel = \"single\"\n\
             [[error]]\ncall = \"nvmlDeviceGetName\"\ngpu = 2\nerror = \"UNKNOWN\"\n\
             [[error]]\ncall = \"nvmlDeviceGetName\"\ngpu = 1\nerror = \"UNKNOWN\"\n\
             [cuda]\nfastest_first = [2, 1, 0]\n"
        ))
        .unwrap();
        // GPUs a and c, given in either order: 0 and 1 in the machine's order.
        let seen = machine.restricted_to(&["GPU-c".to_owned(), "GPU-a".to_owned()]);
        assert_eq!(seen.gpus.iter().map(|g| g.uuid.as_str()).collect::<Vec<_>>(), ["GPU-a", "GPU-c"]);
        assert_eq!(seen.processes.iter().map(|p| (p.gpu, p.pid)).collect::<Vec<_>>(), [(0, 7), (1, 8)]);
        assert_eq!(seen.links.iter().map(|l| l.gpus).collect::<Vec<_>>(), [[0, 1]]);
        assert_eq!(seen.errors.iter().map(|e| e.gpu).collect::<Vec<_>>(), [Some(1)]);
        assert_eq!(seen.cuda.fastest_first, Some(vec![1, 0]));
    }

    #[test]
    fn embedded_default_is_valid() {
        let scenario = parse(EMBEDDED_DEFAULT).unwrap();
        assert_eq!(scenario.gpus.len(), 8);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("8G").is_err());
        assert!(parse_size("GiB").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,8"), Ok(vec![0, 1, 2, 8]));
        assert!(parse_cpu_list("3-1").is_err());
    }

    #[test]
    fn rejects_bad_permutation() {
        let text = r#"
            [cuda]
            fastest_first = [0, 0]
            [[gpu]]
            name = "a"
            uuid = "GPU-a"
            pci_bus_id = "00000000:01:00.0"
            memory_total = "1GiB"
            [[gpu]]
            name = "b"
            uuid = "GPU-b"
            pci_bus_id = "00000000:02:00.0"
            memory_total = "1GiB"
        "#;
        assert!(parse(text).unwrap_err().contains("permutation"));
    }
}
