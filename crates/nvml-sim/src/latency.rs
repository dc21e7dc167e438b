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

/// `gpurun -vv --list --json` on one H200 in a VM, driver 580.159.04
/// (tests/real-gpu/h200-2026-12-04/gpurun-list-vv-trace.txt; nvmlDeviceGetSamples from the
/// -c capture's launch trace): each call's time in ms.
const H200_580: &[(&str, f64)] = &[
    ("nvmlInit", 12.072),
    ("nvmlSystemGetDriverVersion", 0.001),
    ("nvmlDeviceGetCount", 0.006),
    ("nvmlDeviceGetHandleByIndex", 0.005),
    ("nvmlDeviceGetUUID", 0.012),
    ("nvmlDeviceGetName", 0.006),
    ("nvmlDeviceGetPciInfo", 0.019),
    ("nvmlDeviceGetMemoryInfo", 0.014),
    ("nvmlDeviceGetUtilizationRates", 3.752),
    ("nvmlDeviceGetTemperature", 0.243),
    ("nvmlDeviceGetPowerUsage", 1.444),
    ("nvmlDeviceGetComputeMode", 0.008),
    ("nvmlDeviceGetPersistenceMode", 0.011),
    ("nvmlDeviceGetMemoryAffinity", 11.705),
    ("nvmlDeviceGetNumaNodeId", 0.045),
    ("nvmlDeviceGetCpuAffinity", 0.004),
    ("nvmlDeviceGetMigMode", 0.416),
    ("nvmlDeviceGetComputeRunningProcesses", 0.040),
    ("nvmlDeviceGetEccMode", 2.050),
    ("nvmlDeviceGetTotalEccErrors", 1.815),
    ("nvmlDeviceGetFieldValues", 0.005),
    ("nvmlDeviceGetCurrentClocksEventReasons", 0.490),
    ("nvmlDeviceGetGpuFabricInfoV", 0.015),
    ("nvmlDeviceGetCurrPcieLinkWidth", 0.099),
    ("nvmlDeviceGetMaxPcieLinkWidth", 0.035),
    ("nvmlSystemGetCudaDriverVersion", 0.029),
    ("nvmlGetExcludedDeviceCount", 0.001),
    ("nvmlSystemGetConfComputeState", 0.048),
    ("nvmlDeviceGetSamples", 2.64),
];
const H200_580_FIRST_HANDLE: f64 = 6.612;

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

    /// How long `call` takes (without its version suffix); `first_handle`: it is a GPU's
    /// first `nvmlDeviceGetHandleByIndex` in this process.
    pub fn of(&self, call: &str, first_handle: bool) -> f64 {
        let base = unversioned(call);
        let profile = self.profile.as_deref() == Some("h200-580");
        if first_handle {
            let first = self.first_handle_ms.or(profile.then_some(H200_580_FIRST_HANDLE));
            if let Some(ms) = first {
                return ms;
            }
        }
        self.ms
            .get(base)
            .copied()
            .or_else(|| {
                profile.then(|| H200_580.iter().find(|(name, _)| *name == base).map(|(_, ms)| *ms)).flatten()
            })
            .unwrap_or(0.0)
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
    fn a_calls_own_latency_beats_the_profiles_and_the_first_handle_is_dear() {
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
        assert_eq!(LatencySpec::default().of("nvmlInit", false), 0.0);
        assert!(LatencySpec { profile: Some("a100".to_owned()), ..LatencySpec::default() }
            .validate()
            .is_err());
    }
}
