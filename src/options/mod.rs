//! The vocabulary every stage shares: the value types of the command line's options and the
//! small grammars that read them (sizes, durations, signals, device references, model patterns).
//! Nothing here depends on the rest of gpurun, so any stage may use it without a cycle.

pub(crate) mod clock;
pub(crate) mod count;
pub(crate) mod cpus;
pub(crate) mod devices;
pub(crate) mod duration;
pub(crate) mod model;
pub(crate) mod shell;
pub(crate) mod signal;
pub(crate) mod size;
pub(crate) mod split_string;
pub(crate) mod wrappers;

use clap::ValueEnum;

/// `--wait`: whether a launch that cannot start now waits for GPUs, and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// No `--wait`: not enough GPUs now is exit 75 now.
    No,
    /// `--wait` (or `--wait=forever`).
    Forever,
    /// `--wait=DURATION`.
    AtMost(std::time::Duration),
}

impl Wait {
    /// `None`: no waiting; `Some(None)`: for ever; `Some(Some(t))`: until `t`.
    pub(crate) fn until(self, from: std::time::Instant) -> Option<Option<std::time::Instant>> {
        match self {
            Wait::No => None,
            Wait::Forever => Some(None),
            Wait::AtMost(limit) => Some(Some(from + limit)),
        }
    }
}

/// Where the leases live unless `--lock-dir` or the system file says otherwise.
pub(crate) const DEFAULT_LOCK_DIR: &str = "/run/lock/gpurun";

/// `--vendor`: whose GPUs (the probe's `Vendor` is what answered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum VendorChoice {
    /// NVML where it loads and lists GPUs, else AMD SMI where it does.
    #[default]
    Auto,
    Nvidia,
    Amd,
}

/// `--policy`: how the GPUs that qualify are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Policy {
    /// Most free memory first, then lowest utilization, then lowest index.
    MostFree,
    /// Lowest utilization first, then most free memory.
    LeastUtil,
    /// Highest 0.7 x free GiB + 0.3 x (100 - utilization %).
    Balanced,
    /// Least free memory that still fits: keeps big cards whole for big jobs.
    Pack,
    /// Lowest index first.
    Index,
    /// Any qualifying GPU, at random.
    Random,
}

/// `--fallback`: what to do when too few GPUs qualify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Fallback {
    /// Take the best-ranked GPUs anyway, relaxing --min-free, --max-util and --exclusive.
    Best,
    /// Run the command with no GPU visible.
    Cpu,
}

/// `--verify`: what to do about where the command landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum VerifyMode {
    /// Do not check.
    Off,
    /// Log the verdict.
    Warn,
    /// On wrong-gpu, terminate the command (TERM, KILL after the grace) and exit 125.
    Strict,
}

/// `--mig`: whether MIG devices are candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum MigUse {
    /// Whole GPUs and, for a one-device request, MIG devices alike.
    #[default]
    Auto,
    /// MIG devices only.
    Only,
    /// Whole GPUs only.
    Never,
}

/// `--topology`: how the links between the chosen GPUs count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum TopologyUse {
    /// Among the sets that qualify, the one with the best worst link (then the policy's order).
    #[default]
    Prefer,
    /// Links do not count.
    Ignore,
    /// Every pair joined by NVLink.
    Nvlink,
    /// Every pair joined by XGMI (AMD's Infinity Fabric).
    Xgmi,
    /// Every pair within one PCIe switch (or better).
    Switch,
    /// Every pair within one NUMA node (or better).
    Node,
}

/// `--health`: how a GPU's health counts (DESIGN 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum HealthUse {
    /// Unhealthy GPUs are never chosen; degraded ones only after every healthy one, with a
    /// warning.
    #[default]
    Normal,
    /// Degraded GPUs are not chosen either.
    Strict,
    /// Any GPU may be chosen, whatever its health; each sick one chosen is warned about.
    Ignore,
}

/// `--per-rank[=VIEW]`: what each rank's CUDA_VISIBLE_DEVICES holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum RankView {
    /// The whole group's GPUs, the rank's own at position LOCAL_RANK.
    #[default]
    All,
    /// The rank's own GPUs alone (for programs that use cuda:0).
    Own,
}

/// `--cpu-bind`: which CPUs the command may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum CpuBind {
    /// gpurun's own CPUs (the inherited affinity).
    #[default]
    None,
    /// The CPUs local to the chosen GPUs, within gpurun's own.
    Numa,
}

/// `--launcher`: whether a launcher that sets its ranks' GPUs itself (`deepspeed`, `accelerate
/// launch`) gets gpurun's choice in its own flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum LauncherUse {
    /// deepspeed: --include localhost:IDS in place of --num_gpus; accelerate: --gpu_ids IDS.
    #[default]
    Auto,
    /// Leave the command alone (verification then names the launcher's override).
    Off,
}

/// `--container`: whether a container run gets the chosen GPUs as the runtime's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum ContainerUse {
    /// podman and docker run/create: CDI devices for podman (and docker whose daemon has CDI
    /// on), docker's --gpus otherwise.
    #[default]
    Auto,
    /// CDI devices (--device nvidia.com/gpu=UUID) for docker too.
    Cdi,
    /// docker's --gpus "device=UUID,..." (podman takes CDI devices whatever this says).
    Gpus,
    /// Leave the command alone.
    Off,
}

/// `--visible-as`: how `CUDA_VISIBLE_DEVICES` names the chosen GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum VisibleAs {
    /// PCI-order indices (what nvidia-smi shows), with CUDA_DEVICE_ORDER=PCI_BUS_ID.
    Index,
    /// GPU-... UUIDs: immune to any renumbering.
    Uuid,
}

/// `--log-format`: how stderr lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// `gpurun: warning: message`.
    Text,
    /// `{"time": .., "level": "warn", "message": ..}`, one object per line.
    Json,
}

/// `-q`, `-v`, `-vv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    Quiet,
    Normal,
    Debug,
    Trace,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Wait;

    #[test]
    fn a_wait_ends_never_at_once_or_at_its_limit() {
        let now = Instant::now();
        assert_eq!(Wait::No.until(now), None);
        assert_eq!(Wait::Forever.until(now), Some(None));
        assert_eq!(Wait::AtMost(Duration::from_secs(5)).until(now), Some(Some(now + Duration::from_secs(5))));
    }
}
