//! How long each call takes (issue 63): a real driver answers in milliseconds what the
//! simulator answers in microseconds, so a scenario may give each call a latency, to measure on
//! any machine what a launch costs on a real driver (`make bench`). A GPU's first handle in a
//! process is the dear one (the driver brings the device up for it); later ones cost little.
//!
//! `[latency]` in a scenario: `profile = "h200-580"` (the real H200's figures below), and/or
//! `ms = { nvmlDeviceGetMemoryAffinity = 11.7, ... }` (per call, without the version suffix;
//! these win over the profile's), `first_handle_ms = 6.6`.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    pub profile: Option<String>,
    #[serde(default)]
    pub ms: BTreeMap<String, f64>,
    pub first_handle_ms: Option<f64>,
}

/// One H200 in a VM, driver 580.159.04: each call's time in ms the first time this process
/// makes it on a GPU (or at all, for a system call), and later, where later ones cost otherwise.
/// First times from `gpurun -vv --list --json` (tests/real-gpu/h200-2026-12-04/
/// gpurun-list-vv-trace.txt); later ones, the receipt's energy counter and event registration
/// from a launch's trace (tests/real-gpu/h200-2026-12-04-c/gpurun-launch-vv-trace.txt: power,
/// utilization and clock events answer in microseconds once asked, the energy counter takes
/// 15.5 ms and then 8.3 ms, `nvmlDeviceGetSamples` about 2.6 ms every time: two C calls).
const H200_580: &[(&str, f64, Option<f64>)] = &[
    ("nvmlInit", 12.072, None),
    ("nvmlSystemGetDriverVersion", 0.001, None),
    ("nvmlDeviceGetCount", 0.006, None),
    ("nvmlDeviceGetHandleByIndex", 6.612, Some(0.005)),
    ("nvmlDeviceGetUUID", 0.012, None),
    ("nvmlDeviceGetName", 0.006, None),
    ("nvmlDeviceGetPciInfo", 0.019, None),
    ("nvmlDeviceGetMemoryInfo", 0.014, None),
    ("nvmlDeviceGetUtilizationRates", 3.752, Some(0.003)),
    ("nvmlDeviceGetTemperature", 0.243, None),
    ("nvmlDeviceGetPowerUsage", 1.444, Some(0.006)),
    ("nvmlDeviceGetComputeMode", 0.008, None),
    ("nvmlDeviceGetPersistenceMode", 0.011, None),
    ("nvmlDeviceGetMemoryAffinity", 11.705, None),
    ("nvmlDeviceGetNumaNodeId", 0.045, None),
    ("nvmlDeviceGetCpuAffinity", 0.004, None),
    ("nvmlDeviceGetMigMode", 0.416, None),
    ("nvmlDeviceGetComputeRunningProcesses", 0.040, Some(0.1)),
    ("nvmlDeviceGetEccMode", 2.050, None),
    ("nvmlDeviceGetTotalEccErrors", 1.815, None),
    // The row-remapping fields first (5 us), the throttle counters later (0.69 and 0.23 ms).
    ("nvmlDeviceGetFieldValues", 0.005, Some(0.459)),
    ("nvmlDeviceGetCurrentClocksEventReasons", 0.490, Some(0.003)),
    ("nvmlDeviceGetGpuFabricInfoV", 0.015, None),
    ("nvmlDeviceGetCurrPcieLinkWidth", 0.099, None),
    ("nvmlDeviceGetMaxPcieLinkWidth", 0.035, None),
    ("nvmlSystemGetCudaDriverVersion", 0.029, None),
    ("nvmlGetExcludedDeviceCount", 0.001, None),
    ("nvmlSystemGetConfComputeState", 0.048, None),
    // Per C call: nvml-wrapper asks the count, then the samples, 2.64 ms the pair on the H200.
    ("nvmlDeviceGetSamples", 1.32, None),
    ("nvmlDeviceGetTotalEnergyConsumption", 15.498, Some(8.305)),
    ("nvmlDeviceGetEnforcedPowerLimit", 0.004, None),
    ("nvmlDeviceRegisterEvents", 0.935, None),
];

/// The profiles a scenario can name.
pub const PROFILES: &[&str] = &["h200-580"];

impl LatencySpec {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(profile) = &self.profile {
            if !PROFILES.contains(&profile.as_str()) {
                return Err(format!("profile {profile:?} is not one of {}", PROFILES.join(", ")));
            }
        }
        let negative = self.ms.iter().find(|(_, ms)| !ms.is_finite() || **ms < 0.0);
        if let Some((call, ms)) = negative {
            return Err(format!("ms.{call} = {ms} is not a number of milliseconds"));
        }
        Ok(())
    }

    /// How long `call` takes (without its version suffix); `first`: this process makes it for
    /// the first time (on that GPU).
    pub fn of(&self, call: &str, first: bool) -> f64 {
        let base = unversioned(call);
        if first && base == "nvmlDeviceGetHandleByIndex" {
            if let Some(ms) = self.first_handle_ms {
                return ms;
            }
        }
        if let Some(ms) = self.ms.get(base) {
            return *ms;
        }
        let profiled = match self.profile.as_deref() {
            Some("h200-580") => H200_580.iter().find(|(name, _, _)| *name == base),
            _ => None,
        };
        match profiled {
            Some((_, first_ms, later)) if !first => later.unwrap_or(*first_ms),
            Some((_, first_ms, _)) => *first_ms,
            None => 0.0,
        }
    }
}

/// A call's name without its version suffix (`nvmlDeviceGetMemoryInfo_v2` ->
/// `nvmlDeviceGetMemoryInfo`; `nvmlDeviceGetGpuFabricInfoV` is a name of its own).
pub(crate) fn unversioned(call: &str) -> &str {
    call.rsplit_once("_v")
        .filter(|(_, version)| !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()))
        .map_or(call, |(base, _)| base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_own_latency_beats_the_profiles_and_a_first_call_is_dear() {
        let spec = LatencySpec {
            profile: Some("h200-580".to_owned()),
            ms: [("nvmlDeviceGetUtilizationRates".to_owned(), 1.0)].into_iter().collect(),
            first_handle_ms: None,
        };
        assert_eq!(spec.of("nvmlDeviceGetUtilizationRates", false), 1.0);
        assert_eq!(spec.of("nvmlDeviceGetMemoryAffinity", false), 11.705);
        assert_eq!(spec.of("nvmlDeviceGetMemoryInfo_v2", false), 0.014);
        assert_eq!(spec.of("nvmlDeviceGetHandleByIndex", true), 6.612);
        assert_eq!(spec.of("nvmlDeviceGetHandleByIndex", false), 0.005);
        assert_eq!(spec.of("nvmlSomethingElse", false), 0.0);
        // Once asked, power answers in microseconds; the energy counter stays dear.
        assert_eq!(spec.of("nvmlDeviceGetPowerUsage", true), 1.444);
        assert_eq!(spec.of("nvmlDeviceGetPowerUsage", false), 0.006);
        assert_eq!(spec.of("nvmlDeviceGetTotalEnergyConsumption", false), 8.305);
        assert_eq!(LatencySpec::default().of("nvmlInit", false), 0.0);
        assert!(LatencySpec { profile: Some("a100".to_owned()), ..LatencySpec::default() }
            .validate()
            .is_err());
    }
}
