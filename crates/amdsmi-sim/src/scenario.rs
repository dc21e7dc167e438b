//! The simulated machine, read from a TOML scenario (`scenarios/README.md` has the format):
//! `AMDSMI_SIM_SCENARIO=/path/to/file.toml`, else the embedded MI300X server.

use std::path::{Path, PathBuf};

use serde::Deserialize;
pub use sim_shared::Size;

pub const SCENARIO_ENV: &str = "AMDSMI_SIM_SCENARIO";
const EMBEDDED_DEFAULT: &str = include_str!("../scenarios/mi300x.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// amdgpu's version, `amdsmi_get_gpu_driver_info`.
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// `amdsmi_get_lib_version`: major, minor, release.
    #[serde(default = "default_lib_version")]
    pub lib_version: [u32; 3],
    /// `amdsmi_init` fails with this status name (`DRIVER_NOT_LOADED`, `NO_PERM`, `INIT_ERROR`).
    #[serde(default)]
    pub init_error: Option<String>,
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<GpuSpec>,
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessSpec>,
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    #[serde(default, rename = "hang")]
    pub hangs: Vec<HangSpec>,
    /// Library bugs to reproduce: `"process_on_every_gpu"` lists every GPU process under every
    /// GPU, with no memory on the GPUs it does not use, as AMD SMI did before its per-GPU
    /// attribution fix (ROCm/legacy-rocm-build#2292, ROCm/rocm-systems#8396).
    #[serde(default)]
    pub quirks: Vec<String>,
}

/// A call that does not return (a wedged driver), or takes `ms`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangSpec {
    /// The function, `amdsmi_get_gpu_process_list`.
    pub call: String,
    /// Only on this processor; omitted: on every one.
    pub gpu: Option<u32>,
    /// How long; omitted: an hour, which no caller waits out.
    pub ms: Option<u64>,
}

fn default_driver_version() -> String {
    "6.14.14".to_owned()
}

fn default_lib_version() -> [u32; 3] {
    [26, 0, 2]
}

fn yes() -> bool {
    true
}

/// One processor as AMD SMI lists it: a whole GPU, or one partition of one (CPX, DPX ...).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// `amdsmi_get_gpu_asic_info`'s market name: `AMD Instinct MI300X`.
    pub market_name: String,
    /// `amdsmi_get_gpu_device_uuid`: amd-smi's own, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// ROCr's and HIP's UUID, `GPU-` and 16 hex digits (`rocminfo`, `ROCR_VISIBLE_DEVICES`):
    /// `amdsmi_get_gpu_enumeration_info`'s `hip_uuid`.
    pub hip_uuid: String,
    /// HIP's (and ROCr's) number for it with nothing set, `amd-smi list`'s HIP_ID, where it
    /// differs from AMD SMI's order; omitted: its place among the accessible processors.
    pub hip_id: Option<u32>,
    /// `0000:0c:00.0`. The partitions of one card share it.
    pub bdf: String,
    #[serde(default = "default_device_id")]
    pub device_id: u64,
    pub vram_total: Size,
    /// In use beyond the listed processes.
    #[serde(default)]
    pub vram_used: Size,
    /// Percent; omitted: `NOT_SUPPORTED`.
    pub gfx_activity: Option<u32>,
    pub umc_activity: Option<u32>,
    /// Hotspot (junction) temperature; omitted: `NOT_SUPPORTED`.
    pub temperature_c: Option<i64>,
    /// Socket power in watts; omitted: `NOT_SUPPORTED` (a partition other than the first).
    pub power_w: Option<u32>,
    /// `SPX`, `DPX`, `QPX`, `CPX`; omitted: `NOT_SUPPORTED` (MI200).
    pub compute_partition: Option<String>,
    /// `NPS1`, `NPS4`; omitted: `NOT_SUPPORTED`.
    pub memory_partition: Option<String>,
    /// This processor's partition on its card (`amdsmi_get_gpu_kfd_info`).
    #[serde(default)]
    pub partition_id: u32,
    pub numa_node: Option<u32>,
    /// Cards in one XGMI hive are linked by XGMI; others by PCIe.
    pub xgmi_hive: Option<u64>,
    /// RAS on (`amdsmi_get_gpu_total_ecc_count` answers); `false`: `NOT_SUPPORTED`.
    #[serde(default = "yes")]
    pub ecc: bool,
    #[serde(default)]
    pub ecc_correctable: u64,
    #[serde(default)]
    pub ecc_uncorrectable: u64,
    /// Retired pages (`amdsmi_get_gpu_bad_page_info`, status RESERVED), and pages pending
    /// retirement at the next reset (PENDING).
    #[serde(default)]
    pub bad_pages_retired: u32,
    #[serde(default)]
    pub bad_pages_pending: u32,
    /// `false`: its device node is outside this job's cgroup: AMD SMI answers `NO_PERM` for
    /// it, and ROCr does not enumerate it.
    #[serde(default = "yes")]
    pub accessible: bool,
}

fn default_device_id() -> u64 {
    0x74a1
}

/// Another user's process on a GPU (what the driver's fdinfo shows to amd-smi).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub gpu: u32,
    pub pid: u32,
    #[serde(default)]
    pub name: String,
    pub vram: Size,
}

/// How two processors are joined, for `amdsmi_topo_get_link_type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub gpus: [u32; 2],
    /// `xgmi` or `pcie`.
    #[serde(rename = "type")]
    pub kind: String,
    pub hops: u64,
}

/// AMD SMI's link types (amdsmi.h, ROCm 7.0: INTERNAL 0, PCIE 1, XGMI 2).
pub const LINK_PCIE: u32 = 1;
pub const LINK_XGMI: u32 = 2;

impl Scenario {
    fn validate(&self) -> Result<(), String> {
        for (index, gpu) in self.gpus.iter().enumerate() {
            let hex = gpu.hip_uuid.strip_prefix("GPU-").unwrap_or("");
            if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "gpu {index}: hip_uuid {:?} is not GPU- and 16 hex digits",
                    gpu.hip_uuid
                ));
            }
            if gpu.uuid.len() >= 38 {
                return Err(format!("gpu {index}: uuid {:?} is longer than AMDSMI_GPU_UUID_SIZE", gpu.uuid));
            }
        }
        let mut hip_ids: Vec<u32> = (0..self.gpus.len() as u32).filter_map(|i| self.hip_id(i)).collect();
        hip_ids.sort_unstable();
        if hip_ids.iter().enumerate().any(|(at, &id)| id != at as u32) {
            return Err(format!("hip_id: {hip_ids:?} are not 0.. once each over the accessible GPUs"));
        }
        let count = self.gpus.len() as u32;
        let bad = |gpu: u32| gpu >= count;
        if let Some(process) = self.processes.iter().find(|p| bad(p.gpu)) {
            return Err(format!(
                "process {}: gpu {} is not one of the {count} GPUs",
                process.pid, process.gpu
            ));
        }
        if let Some(link) = self.links.iter().find(|l| l.gpus.iter().any(|&g| bad(g))) {
            return Err(format!("link {:?}: not two of the {count} GPUs", link.gpus));
        }
        if let Some(link) = self.links.iter().find(|l| l.kind != "xgmi" && l.kind != "pcie") {
            return Err(format!("link {:?}: type {:?} is not xgmi or pcie", link.gpus, link.kind));
        }
        Ok(())
    }

    /// HIP's number for processor `index`: the scenario's `hip_id`, else its place among the
    /// accessible processors. `None` for one ROCr cannot open.
    pub fn hip_id(&self, index: u32) -> Option<u32> {
        let gpu = self.gpus.get(index as usize).filter(|gpu| gpu.accessible)?;
        Some(
            gpu.hip_id.unwrap_or_else(|| {
                self.gpus[..index as usize].iter().filter(|g| g.accessible).count() as u32
            }),
        )
    }

    /// The link type and hops between two processors: a `[[link]]`, else XGMI (one hop)
    /// within a hive or a card, else PCIe (two hops on one NUMA node, three across).
    pub fn link(&self, a: u32, b: u32) -> (u32, u64) {
        let pair = |l: &&LinkSpec| l.gpus == [a, b] || l.gpus == [b, a];
        if let Some(link) = self.links.iter().find(pair) {
            return (if link.kind == "xgmi" { LINK_XGMI } else { LINK_PCIE }, link.hops);
        }
        let (first, second) = (&self.gpus[a as usize], &self.gpus[b as usize]);
        let hive = first.xgmi_hive.is_some() && first.xgmi_hive == second.xgmi_hive;
        match (hive || first.bdf == second.bdf, first.numa_node == second.numa_node) {
            (true, _) => (LINK_XGMI, 1),
            (false, true) => (LINK_PCIE, 2),
            (false, false) => (LINK_PCIE, 3),
        }
    }

    /// How long `call` on processor `gpu` hangs, if a `[[hang]]` says it does.
    pub fn hang_of(&self, call: &str, gpu: u32) -> Option<std::time::Duration> {
        let hang = self.hangs.iter().find(|h| h.call == call && h.gpu.is_none_or(|g| g == gpu))?;
        Some(std::time::Duration::from_millis(hang.ms.unwrap_or(3_600_000)))
    }

    /// The cards (sockets): processors that share a PCI address are partitions of one card.
    pub fn sockets(&self) -> Vec<Vec<u32>> {
        let mut sockets: Vec<(String, Vec<u32>)> = Vec::new();
        for (index, gpu) in self.gpus.iter().enumerate() {
            match sockets.iter_mut().find(|(bdf, _)| *bdf == gpu.bdf) {
                Some((_, members)) => members.push(index as u32),
                None => sockets.push((gpu.bdf.clone(), vec![index as u32])),
            }
        }
        sockets.into_iter().map(|(_, members)| members).collect()
    }
}

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
        let text = match self {
            Source::Embedded => EMBEDDED_DEFAULT.to_owned(),
            Source::File(path) => {
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
            }
        };
        let scenario: Scenario = toml::from_str(&text).map_err(|e| e.to_string())?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Where live processes register: `AMDSMI_SIM_STATE_DIR`, else `<scenario>.state` beside
    /// the file, else a per-user directory for the embedded default.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(dir) = std::env::var_os("AMDSMI_SIM_STATE_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        match self {
            Source::File(path) => {
                let mut name = path.file_name().unwrap_or_default().to_os_string();
                name.push(".state");
                path.parent().unwrap_or(Path::new(".")).join(name)
            }
            Source::Embedded => {
                // SAFETY: getuid cannot fail and touches no memory.
                let uid = unsafe { libc::getuid() };
                std::env::temp_dir().join(format!("amdsmi-sim-{uid}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_server_is_eight_mi300x_in_one_hive() {
        let scenario = Source::Embedded.load().unwrap();
        assert_eq!(scenario.gpus.len(), 8);
        assert_eq!(scenario.link(0, 7), (LINK_XGMI, 1));
        assert_eq!(scenario.sockets().len(), 8);
    }

    #[test]
    fn partitions_share_a_card_and_a_bad_hip_uuid_is_refused() {
        let gpu = |id: u32| {
            format!(
                "[[gpu]]\nmarket_name = \"AMD Instinct MI300X\"\nuuid = \"u{id}\"\nhip_uuid = \"GPU-00000000000000a{id}\"\n\
                 bdf = \"0000:0c:00.0\"\nvram_total = \"24GiB\"\npartition_id = {id}\n"
            )
        };
        let text = format!("{}{}", gpu(0), gpu(1));
        let scenario: Scenario = toml::from_str(&text).unwrap();
        scenario.validate().unwrap();
        assert_eq!(scenario.sockets(), vec![vec![0, 1]]);
        assert_eq!(scenario.link(0, 1), (LINK_XGMI, 1));
        let bad: Scenario = toml::from_str(&text.replace("GPU-00000000000000a1", "GPU-12")).unwrap();
        assert!(bad.validate().unwrap_err().contains("hip_uuid"));
    }
}
