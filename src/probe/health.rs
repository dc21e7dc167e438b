//! A GPU's health (DESIGN 3): what the probe found, classified into `ok`, `degraded`, `unknown`
//! or `unhealthy` with the reasons in words. Pure: the NVML queries are in `probe::nvml`. A
//! query that is not supported adds nothing (a board without ECC is not sick); one that failed
//! otherwise makes the health unknown, never `ok`: the errors it could not read may be there.

use serde::Serialize;

/// The three states, worst last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HealthState {
    #[default]
    Ok,
    /// Takes work, but after every healthy GPU: remap pending, retired pages pending,
    /// hardware slowdown, a narrow PCIe link.
    Degraded,
    /// A health query failed (not as NOT_SUPPORTED): taken after every healthy and degraded
    /// GPU, refused by `--health strict`.
    Unknown,
    /// Never chosen (unless `--health ignore`): volatile uncorrectable ECC errors, a failed row
    /// remapping, a lost GPU.
    Unhealthy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Health {
    pub(crate) state: HealthState,
    pub(crate) reasons: Vec<String>,
    /// What an admin does about the reasons, for `--doctor`: a reset, reboot or RMA only for a
    /// fault a counter or a state reports, never for a value NVML could not read.
    #[serde(skip)]
    pub(crate) advice: Vec<&'static str>,
}

impl Health {
    pub(crate) fn is_ok(&self) -> bool {
        self.state == HealthState::Ok
    }

    /// `degraded: row remapping pending (...)`.
    pub(crate) fn describe(&self) -> String {
        let state = match self.state {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::Unknown => "unknown",
            HealthState::Unhealthy => "unhealthy",
        };
        match self.reasons.is_empty() {
            true => state.to_owned(),
            false => format!("{state}: {}", self.reasons.join("; ")),
        }
    }
}

/// `nvmlClocksEventReasonGpuIdle`: nothing runs, which is no throttling.
const GPU_IDLE: u64 = 0x1;
/// `nvmlClocksEventReason*` bits that mean the hardware is holding the clocks down.
pub(crate) const HW_SLOWDOWN: u64 = 0x8;
pub(crate) const HW_THERMAL_SLOWDOWN: u64 = 0x40;
pub(crate) const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;

/// What the probe read; `None`: NVML could not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Findings {
    /// Volatile uncorrectable ECC errors, while ECC is on.
    pub(crate) ecc_volatile_uncorrected: Option<u64>,
    /// AMD: uncorrectable ECC errors since the driver loaded (amdsmi_get_gpu_total_ecc_count).
    pub(crate) ecc_uncorrectable_since_load: Option<u64>,
    pub(crate) remap_pending: Option<bool>,
    pub(crate) remap_failure: Option<bool>,
    pub(crate) retired_pages_pending: Option<bool>,
    /// Active clock event reasons.
    pub(crate) clock_events: Option<u64>,
    /// Current and maximum PCIe link width.
    pub(crate) pcie_width: Option<(u32, u32)>,
    /// A query answered GPU_IS_LOST.
    pub(crate) lost: bool,
    /// Its place in the NVLink fabric, judged.
    pub(crate) fabric: Option<crate::probe::fabric::Fabric>,
    /// Health queries that failed otherwise than NOT_SUPPORTED, in words.
    pub(crate) unreadable: Vec<String>,
}

pub(crate) fn classify(found: &Findings) -> Health {
    let mut unhealthy = Vec::new();
    let mut degraded = Vec::new();
    let mut advice = Vec::new();
    let mut advise = |what: &'static str| {
        if !advice.contains(&what) {
            advice.push(what);
        }
    };
    if found.lost {
        unhealthy.push(
            "lost: the GPU has fallen off the bus (see dmesg for Xid 79; drain the node and reset or reboot)"
                .to_owned(),
        );
        advise(LOST);
    }
    if let Some(count) = found.ecc_volatile_uncorrected.filter(|count| *count > 0) {
        unhealthy.push(format!(
            "{count} volatile uncorrectable ECC error{} (reset the GPU; repeated errors mean RMA)",
            if count == 1 { "" } else { "s" }
        ));
        advise(RESET_FOR_ERRORS);
    }
    if let Some(count) = found.ecc_uncorrectable_since_load.filter(|count| *count > 0) {
        unhealthy.push(format!(
            "{count} uncorrectable ECC error{} since the driver loaded (reset the GPU; repeated errors mean RMA)",
            if count == 1 { "" } else { "s" }
        ));
        advise(RESET_FOR_ERRORS);
    }
    if found.remap_failure == Some(true) {
        unhealthy.push("row remapping failed (the GPU needs service: RMA)".to_owned());
        advise(REMAP_FAILED);
    }
    if found.remap_pending == Some(true) {
        degraded.push("row remapping pending (takes effect at the next GPU reset)".to_owned());
        advise(RESET_PENDING);
    }
    if found.retired_pages_pending == Some(true) {
        degraded.push("retired pages pending (take effect at the next GPU reset)".to_owned());
        advise(RESET_PENDING);
    }
    if let Some(events) = found.clock_events {
        for (bit, what) in [
            (HW_SLOWDOWN, "clocks held down by the hardware (HW slowdown)"),
            (HW_THERMAL_SLOWDOWN, "clocks held down by the hardware for heat (HW thermal slowdown)"),
            (HW_POWER_BRAKE_SLOWDOWN, "clocks held down by the power brake (HW power brake)"),
        ] {
            if events & bit != 0 {
                degraded.push(what.to_owned());
                advise(SLOWDOWN);
            }
        }
    }
    if let Some(fabric) = &found.fabric {
        match fabric.health.state {
            "unhealthy" => unhealthy.extend(fabric.health.reasons.iter().cloned()),
            _ => degraded.extend(fabric.health.reasons.iter().cloned()),
        }
        match (fabric.health.state, fabric.state) {
            ("ok", _) => {}
            (_, "completed") => advise(FABRIC),
            _ => advise(FABRIC_UNREGISTERED),
        }
    }
    // Width only: the link generation drops at idle by design. A width of 0 is one the driver
    // does not know (VMs report it), and some boards narrow the link at idle too: only a busy
    // GPU's narrow link is a fault.
    let busy = found.clock_events.is_some_and(|events| events & GPU_IDLE == 0);
    let narrow = |(current, most): &(u32, u32)| *current > 0 && current < most && busy;
    if let Some((current, most)) = found.pcie_width.filter(narrow) {
        degraded.push(format!("PCIe link x{current} of x{most} (reseat the card or check the riser)"));
        advise(NARROW_LINK);
    }
    let unknown: Vec<String> = found.unreadable.iter().map(|what| format!("cannot read {what}")).collect();
    let (state, reasons) = match (unhealthy.is_empty(), degraded.is_empty(), unknown.is_empty()) {
        (true, true, true) => return Health::default(),
        (true, false, true) => (HealthState::Degraded, degraded),
        (true, _, false) => (HealthState::Unknown, unknown.into_iter().chain(degraded).collect()),
        (false, _, _) => {
            unhealthy.extend(degraded);
            unhealthy.extend(unknown);
            (HealthState::Unhealthy, unhealthy)
        }
    };
    Health { state, reasons, advice }
}

/// `--doctor`'s advice, one per kind of fault a counter or a state reports.
const LOST: &str = "A lost GPU: check dmesg for Xid 79, drain the node and reboot.";
const RESET_FOR_ERRORS: &str =
    "Uncorrectable ECC errors: drain it, then reset it (nvidia-smi -r -i N, with no \
     process on it) or reboot; if they come back, the board needs an RMA.";
const REMAP_FAILED: &str = "A failed row remap: the board needs service (RMA).";
const RESET_PENDING: &str =
    "Pending row remaps and page retirements apply at the next reset: drain it, then \
     nvidia-smi -r -i N (or reboot).";
const SLOWDOWN: &str = "Hardware slowdown: check cooling, power cables and the BMC's event log.";
const NARROW_LINK: &str = "A narrow PCIe link under load: reseat the card or the riser.";
const FABRIC_UNREGISTERED: &str = "The fabric manager has not registered it (CUDA fails there until it \
     does): check systemctl status nvidia-fabricmanager and its log.";
const FABRIC: &str = "An NVLink fabric fault: read the fabric manager's log (nvidia-fabricmanager) and the \
     NVSwitch health; a registration that fails again after a reset needs service.";

/// A GPU the driver excluded from use: it is not among NVML's devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Excluded {
    pub(crate) pci_bus_id: Option<String>,
    pub(crate) uuid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_finding_has_its_class() {
        assert_eq!(classify(&Findings::default()), Health::default());
        let unknown = Findings { ecc_volatile_uncorrected: None, clock_events: None, ..Findings::default() };
        assert!(classify(&unknown).is_ok());
        let ecc = classify(&Findings { ecc_volatile_uncorrected: Some(2), ..Findings::default() });
        assert_eq!(ecc.state, HealthState::Unhealthy);
        assert!(ecc.reasons[0].starts_with("2 volatile uncorrectable ECC errors"));
        let pending = classify(&Findings { remap_pending: Some(true), ..Findings::default() });
        assert_eq!(pending.state, HealthState::Degraded);
        let both = classify(&Findings {
            remap_pending: Some(true),
            remap_failure: Some(true),
            ..Findings::default()
        });
        assert_eq!(both.state, HealthState::Unhealthy);
        assert_eq!(both.reasons.len(), 2);
        // Idle (0x1) and a software power cap (0x4) are not faults; HW slowdown is.
        assert!(classify(&Findings { clock_events: Some(0x5), ..Findings::default() }).is_ok());
        assert_eq!(classify(&Findings { clock_events: Some(0x88), ..Findings::default() }).reasons.len(), 2);
        assert!(classify(&Findings { pcie_width: Some((16, 16)), ..Findings::default() }).is_ok());
        let narrow =
            classify(&Findings { pcie_width: Some((8, 16)), clock_events: Some(0), ..Findings::default() });
        assert_eq!(narrow.describe(), "degraded: PCIe link x8 of x16 (reseat the card or check the riser)");
        // A width the driver does not know (0, as VMs say), a link narrowed while the GPU is
        // idle, or one whose idleness is unknown: no fault.
        for (width, events) in [((0, 16), Some(0)), ((16, 0), Some(0)), ((8, 16), Some(0x1)), ((8, 16), None)]
        {
            let found = Findings { pcie_width: Some(width), clock_events: events, ..Findings::default() };
            assert!(classify(&found).is_ok(), "{width:?} {events:?}");
        }
        assert_eq!(classify(&Findings { lost: true, ..Findings::default() }).state, HealthState::Unhealthy);
        // A failed health query is unknown, never ok; a known fault still says unhealthy.
        let unread = vec!["ECC errors (nvmlDeviceGetTotalEccErrors: Unknown Error)".to_owned()];
        let unknown = classify(&Findings { unreadable: unread.clone(), ..Findings::default() });
        assert_eq!(
            unknown.describe(),
            "unknown: cannot read ECC errors (nvmlDeviceGetTotalEccErrors: Unknown Error)"
        );
        let sick =
            classify(&Findings { unreadable: unread, remap_failure: Some(true), ..Findings::default() });
        assert_eq!(sick.state, HealthState::Unhealthy);
        assert!(HealthState::Ok < HealthState::Degraded && HealthState::Degraded < HealthState::Unknown);
    }
}
