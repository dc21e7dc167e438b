//! What a selection starts from: the request as the user asked for it, what stands in its way
//! (other launches' reservations, GPUs kept for earlier waiters), a GPU's assessment against
//! it, and the `--devices`/`--exclude` references resolved to GPUs.

use crate::options::count::Count;
use crate::options::devices::{normalize_pci_bus_id, DeviceRef};
use crate::options::model::ModelPattern;
use crate::options::size::Threshold;
use crate::options::{Fallback, HealthUse, MigUse, Policy, TopologyUse};
use crate::probe::gpu::Gpu;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub(crate) count: Count,
    pub(crate) min_free: Option<Threshold>,
    pub(crate) min_total: Option<u64>,
    pub(crate) max_util: Option<u32>,
    pub(crate) exclusive: bool,
    pub(crate) devices: Option<Vec<DeviceRef>>,
    pub(crate) exclude: Vec<DeviceRef>,
    pub(crate) model: Option<ModelPattern>,
    pub(crate) policy: Policy,
    pub(crate) fallback: Option<Fallback>,
    /// Seed for `--policy random`.
    pub(crate) seed: u64,
    pub(crate) mig: MigUse,
    /// `--visible-as index` was asked for: CUDA takes a MIG device by its UUID only.
    pub(crate) index_only: bool,
    pub(crate) same_model: bool,
    pub(crate) topology: TopologyUse,
    pub(crate) health: HealthUse,
    /// The house rule default-min-free: below it a GPU is never taken, `--fallback best` or not.
    pub(crate) min_free_floor: Option<Threshold>,
    /// `min_free` was sized by `--min-free auto` from recorded peaks: it is lowered to what the
    /// largest card of the request could ever have free rather than refusing for good.
    pub(crate) min_free_auto: bool,
    /// How the count was asked for when it is not the user's `--gpus N` (`--per-rank`:
    /// "4 ranks x 2 GPUs = 8"), so that messages never name a `--gpus` nobody typed.
    pub(crate) count_words: Option<String>,
    /// `--mps`: only GPUs where an MPS server of the caller's runs, or (`mps_daemon`) where
    /// none of another user's does and the control daemon would start the caller's.
    pub(crate) mps: bool,
    /// `--mps`: the MPS control pipe a client would use, and whether a daemon reads it (it
    /// starts a user's server at the user's first client).
    pub(crate) mps_daemon: Option<(std::path::PathBuf, bool)>,
}

impl Request {
    /// Whether it may take more than one device: then MIG devices are out (one process can
    /// use one MIG device).
    pub(crate) fn wants_several(&self) -> bool {
        self.count.max.is_none_or(|most| most > 1)
    }

    /// The count as the user asked for it: `--gpus 2`, or `4 ranks x 2 GPUs = 8`.
    pub(crate) fn count_text(&self) -> String {
        self.count_words.clone().unwrap_or_else(|| format!("--gpus {}", self.count))
    }
}

impl Default for Request {
    fn default() -> Request {
        Request {
            count: Count::default(),
            min_free: None,
            min_total: None,
            max_util: None,
            exclusive: false,
            devices: None,
            exclude: Vec::new(),
            model: None,
            policy: Policy::MostFree,
            fallback: None,
            seed: 0,
            mig: MigUse::Auto,
            index_only: false,
            same_model: false,
            topology: TopologyUse::Prefer,
            health: HealthUse::Normal,
            min_free_floor: None,
            min_free_auto: false,
            count_words: None,
            mps: false,
            mps_daemon: None,
        }
    }
}

/// Another gpurun's live reservation of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) index: u32,
    pub(crate) pid: u32,
    pub(crate) user: String,
    /// Reserved memory not yet visible in NVML (its processes have not shown up yet).
    pub(crate) pending_bytes: u64,
    pub(crate) exclusive: bool,
    /// Not a lease yet: what an earlier waiter that can be served now is about to take.
    pub(crate) queued: bool,
}

impl Reservation {
    pub(crate) fn holder(&self) -> String {
        if self.queued {
            format!("held for gpurun PID {} ({}), which came first", self.pid, self.user)
        } else {
            format!("gpurun PID {} ({})", self.pid, self.user)
        }
    }
}

/// A GPU kept for a launch that has waited longer (first come, first served).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldBack {
    pub(crate) index: u32,
    pub(crate) pid: u32,
    pub(crate) user: String,
}

/// Why one GPU may or may not be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assessment {
    pub(crate) index: u32,
    /// Reasons no state of the machine changes.
    pub(crate) permanent: Vec<String>,
    /// Reasons no fallback relaxes, that may change.
    pub(crate) hard: Vec<String>,
    /// Reasons that depend on the load.
    pub(crate) soft: Vec<String>,
    /// The GPU's health turns it away (unhealthy; degraded with `--health strict`): not relaxed
    /// by `--fallback best`, and may change with a reset.
    pub(crate) health: Vec<String>,
}

impl Assessment {
    pub(crate) fn eligible(&self) -> bool {
        self.permanent.is_empty() && self.hard.is_empty() && self.soft.is_empty() && self.health.is_empty()
    }

    /// Turned away for its health alone: `--health ignore` would take it.
    pub(crate) fn only_health(&self) -> bool {
        !self.health.is_empty() && self.permanent.is_empty() && self.hard.is_empty() && self.soft.is_empty()
    }

    /// Whether some state of the machine would let this GPU qualify.
    pub(crate) fn possible(&self) -> bool {
        self.permanent.is_empty()
    }

    pub(crate) fn reasons(&self) -> Vec<String> {
        self.permanent.iter().chain(&self.hard).chain(&self.health).chain(&self.soft).cloned().collect()
    }
}

/// A `--devices`/`--exclude` entry that names no GPU, or more than one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {entry}: {problem}")]
pub(crate) struct DeviceError {
    pub(crate) flag: &'static str,
    pub(crate) entry: String,
    pub(crate) problem: String,
}

pub(crate) fn resolve_refs(
    gpus: &[Gpu],
    refs: &[DeviceRef],
    flag: &'static str,
) -> Result<Vec<u32>, DeviceError> {
    refs.iter()
        .map(|reference| {
            let matching: Vec<u32> = gpus
                .iter()
                .filter(|gpu| match reference {
                    DeviceRef::Index(index) => gpu.index == *index,
                    DeviceRef::Uuid(prefix) => {
                        gpu.uuid.as_deref().is_some_and(|u| u.starts_with(prefix.as_str()))
                    }
                    DeviceRef::PciBusId(bus_id) => {
                        gpu.pci_bus_id.as_deref().and_then(normalize_pci_bus_id).as_deref() == Some(bus_id)
                    }
                })
                .map(|gpu| gpu.index)
                .collect();
            let error = |problem: String| DeviceError { flag, entry: reference.to_string(), problem };
            match matching[..] {
                [index] => Ok(index),
                [] => Err(error(format!(
                    "no such GPU; this machine has {} (see gpurun --list)",
                    match gpus.iter().filter(|gpu| gpu.mig.is_none()).count() {
                        0 => "no GPUs".to_owned(),
                        n => format!("GPUs 0-{}", n - 1),
                    }
                ))),
                _ => Err(error(format!(
                    "matches GPUs {}; give more of the UUID",
                    matching.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                ))),
            }
        })
        .collect()
}
