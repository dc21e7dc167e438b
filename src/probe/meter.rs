//! What a chosen GPU drew and did while the command ran (the receipt, DESIGN 9), as NVML
//! reads it: plain data, read by `nvml::Session::meter` on the probe thread.
//!
//! Each poll reads what a running figure needs (power, utilization, the clock event reasons);
//! the counters that only make sense as a difference (energy, the throttle nanoseconds) and
//! the power limit are read at the start and the end only.

use std::time::Instant;

/// A clock event reason that holds the GPU back: its name in the receipt, its
/// `nvmlClocksEventReason*` bit, and the `NVML_FI_DEV_*` field that counts its nanoseconds
/// where the driver has one (nvml.h 12.x/13.x; older drivers answer NOT_SUPPORTED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reason {
    pub(crate) name: &'static str,
    pub(crate) bit: u64,
    pub(crate) counter: Option<u32>,
}

/// The reasons that count as throttling. Not among them: `gpu_idle` (0x1: nothing to run) and
/// `applications_clocks` (0x2: clocks an administrator set, not a limit reached).
pub(crate) const THROTTLE_REASONS: &[Reason] = &[
    Reason { name: "sw_power_cap", bit: 0x4, counter: Some(74) },
    Reason { name: "hw_slowdown", bit: 0x8, counter: None },
    Reason { name: "sync_boost", bit: 0x10, counter: Some(76) },
    Reason { name: "sw_thermal", bit: 0x20, counter: Some(269) },
    Reason { name: "hw_thermal", bit: 0x40, counter: Some(270) },
    Reason { name: "hw_power_brake", bit: 0x80, counter: Some(271) },
    Reason { name: "display_clocks", bit: 0x100, counter: None },
    Reason { name: "board_limit", bit: 0x200, counter: Some(77) },
    Reason { name: "reliability", bit: 0x400, counter: Some(79) },
];

/// What to read on each GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    /// NVML indices of whole GPUs (a MIG device shares its GPU's power: none is metered).
    pub(crate) gpus: Vec<u32>,
    /// The start or the end: the energy counter, the throttle counters and the power limit too.
    pub(crate) bounds: bool,
    /// The memory in use too (gpurun runs in a PID namespace of its own).
    pub(crate) memory: bool,
}

/// One GPU's reading. `None`: not supported, or the call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) gpu: u32,
    pub(crate) at: Instant,
    pub(crate) power_mw: Option<u32>,
    pub(crate) gpu_percent: Option<u32>,
    /// The driver's own utilization samples since the last reading (`nvmlDeviceGetSamples`,
    /// NVML_GPU_UTILIZATION_SAMPLES: each its CPU timestamp in us and its percent), as
    /// nvidia-smi and DCGM read them; `None` where the driver has none (then the looks are all
    /// there is).
    pub(crate) utilization_samples: Option<Vec<(u64, u32)>>,
    /// The GPU's memory in use, read only where gpurun runs in a PID namespace of its own:
    /// what no listed process accounts for is held outside it (an intruder the lists cannot
    /// show).
    pub(crate) memory_used: Option<u64>,
    pub(crate) clock_events: Option<u64>,
    /// Start and end readings only: mJ since the driver loaded.
    pub(crate) energy_mj: Option<u64>,
    /// Start and end readings only: the enforced power limit.
    pub(crate) limit_mw: Option<u32>,
    /// Start and end readings only: each of `THROTTLE_REASONS`' counters in ns, in that order
    /// (`None` where the reason has no counter or the driver answers none).
    pub(crate) throttle_ns: Vec<Option<u64>>,
}

impl Reading {
    /// The busiest the GPU was, as this reading saw it: the look, and every driver sample
    /// since the last reading.
    pub(crate) fn busiest_percent(&self) -> Option<u32> {
        let sampled = self.utilization_samples.iter().flatten().map(|(_, percent)| *percent).max();
        match (self.gpu_percent, sampled) {
            (Some(look), Some(sample)) => Some(look.max(sample)),
            (look, sample) => look.or(sample),
        }
    }
}
