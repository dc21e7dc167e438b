//! A GPU's place in the NVLink fabric (DESIGN 3; HGX and GB200/GB300 NVL), from
//! `nvmlDeviceGetGpuFabricInfoV`: its registration with the fabric manager, the probe's
//! status, clique and cluster, and the health mask. Pure: the call is in `probe::nvml`.

use serde::Serialize;

/// What the fabric says of one GPU, as nvml.h's `nvmlGpuFabricInfo_v3_t` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Fabric {
    /// `not-supported`, `not-started`, `in-progress`, `completed` (`NVML_GPU_FABRIC_STATE_*`).
    pub(crate) state: &'static str,
    pub(crate) clique_id: u32,
    /// The cluster's UUID, as 32 hex digits in the usual groups.
    pub(crate) cluster_uuid: String,
    /// `ok`, `degraded` or `unhealthy`, and why.
    pub(crate) health: FabricHealth,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FabricHealth {
    pub(crate) state: &'static str,
    pub(crate) reasons: Vec<String>,
}

/// The raw answer: state, status (0: SUCCESS, else the NVML error in words), clique, cluster
/// UUID bytes, health mask (0 where the v2 layout was not answered), summary (v3 only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FabricInfo {
    pub(crate) state: u8,
    pub(crate) status: Option<String>,
    pub(crate) clique_id: u32,
    pub(crate) cluster_uuid: [u8; 16],
    pub(crate) health_mask: u32,
    pub(crate) summary: u8,
}

const STATES: [&str; 4] = ["not-supported", "not-started", "in-progress", "completed"];
const NOT_SUPPORTED: u8 = 0;
const COMPLETED: u8 = 3;

/// A 2-bit field of the health mask at `shift`: 1 is TRUE (`NVML_GPU_FABRIC_HEALTH_MASK_*_TRUE`).
fn flag(mask: u32, shift: u32) -> bool {
    (mask >> shift) & 0x3 == 1
}

/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*` past NONE, in words.
const INCORRECT: [&str; 7] = [
    "the system GUID",
    "the chassis serial number",
    "no partition",
    "too few NVLinks",
    "incompatible GPU firmware",
    "an invalid location",
    "an invalid GPU state",
];

impl FabricInfo {
    /// What gpurun makes of it. `None`: the GPU has no fabric. Real drivers say so with SUCCESS
    /// and state NOT_SUPPORTED (one H200 in a VM, driver 580.159) where nvml.h documents the
    /// error NOT_SUPPORTED: a standalone or PCIe card, which is no fault (DESIGN 3).
    /// On a GPU that has a fabric: unhealthy while it is not registered (not started, in
    /// progress: CUDA fails there), when registration failed (`status`, read only once the
    /// state is COMPLETED, as nvml.h says), a route is unhealthy or being recovered,
    /// access-timeout recovery runs, or the configuration is incorrect; degraded for degraded
    /// bandwidth alone. The same split as the health summary NVIDIA's mock fabric manager
    /// derives (k8s-test-infra, mocknvml).
    pub(crate) fn judge(&self) -> Option<Fabric> {
        let state = *STATES.get(usize::from(self.state))?;
        if self.state == NOT_SUPPORTED {
            return None;
        }
        let mut unhealthy = Vec::new();
        let mut degraded = Vec::new();
        if self.state != COMPLETED {
            unhealthy.push(format!("NVLink fabric: not registered with the fabric manager (state {state})"));
        } else if let Some(status) = &self.status {
            unhealthy.push(format!("NVLink fabric: registration failed ({status})"));
        }
        let mask = self.health_mask;
        if flag(mask, 4) {
            unhealthy.push("NVLink fabric: route unhealthy".to_owned());
        }
        if flag(mask, 2) {
            unhealthy.push("NVLink fabric: route recovery in progress".to_owned());
        }
        if flag(mask, 6) {
            unhealthy.push("NVLink fabric: access-timeout recovery in progress".to_owned());
        }
        let incorrect = (mask >> 8) & 0xf;
        if let Some(what) = incorrect.checked_sub(2).and_then(|at| INCORRECT.get(at as usize)) {
            unhealthy.push(format!("NVLink fabric: incorrect configuration ({what})"));
        }
        if self.summary == 2 && unhealthy.is_empty() {
            unhealthy.push("NVLink fabric: the driver's health summary says unhealthy".to_owned());
        }
        if flag(mask, 0) {
            degraded.push("NVLink fabric: degraded bandwidth".to_owned());
        }
        if self.summary == 3 && degraded.is_empty() && unhealthy.is_empty() {
            degraded.push("NVLink fabric: limited capacity (the driver's health summary)".to_owned());
        }
        let health = match (unhealthy.is_empty(), degraded.is_empty()) {
            (false, _) => {
                FabricHealth { state: "unhealthy", reasons: unhealthy.into_iter().chain(degraded).collect() }
            }
            (true, false) => FabricHealth { state: "degraded", reasons: degraded },
            (true, true) => FabricHealth { state: "ok", reasons: Vec::new() },
        };
        let hex: String = self.cluster_uuid.iter().map(|byte| format!("{byte:02x}")).collect();
        let cluster_uuid =
            format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
        Some(Fabric { state, clique_id: self.clique_id, cluster_uuid, health })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: u8, mask: u32) -> FabricInfo {
        FabricInfo {
            state,
            status: None,
            clique_id: 1,
            cluster_uuid: [0xab; 16],
            health_mask: mask,
            summary: 0,
        }
    }

    #[test]
    fn each_condition_has_its_class() {
        let healthy = info(3, 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8).judge().unwrap();
        assert_eq!((healthy.state, healthy.health.state), ("completed", "ok"));
        assert_eq!(healthy.cluster_uuid, "abababab-abab-abab-abab-abababababab");
        assert_eq!(
            info(2, 0).judge().unwrap().health.reasons,
            ["NVLink fabric: not registered with the fabric manager (state in-progress)"]
        );
        assert_eq!(info(3, 1 << 4).judge().unwrap().health.reasons, ["NVLink fabric: route unhealthy"]);
        assert_eq!(info(3, 1 << 6).judge().unwrap().health.state, "unhealthy");
        assert_eq!(
            info(3, 5 << 8).judge().unwrap().health.reasons,
            ["NVLink fabric: incorrect configuration (too few NVLinks)"]
        );
        assert_eq!(info(3, 1).judge().unwrap().health.state, "degraded");
        assert_eq!(
            info(3, 1 << 2).judge().unwrap().health.reasons,
            ["NVLink fabric: route recovery in progress"]
        );
        let failed = FabricInfo { status: Some("Unknown Error".to_owned()), ..info(3, 0) };
        assert_eq!(failed.judge().unwrap().health.state, "unhealthy");
        // The status is read only once the state is COMPLETED (nvml.h).
        let early = FabricInfo { status: Some("Unknown Error".to_owned()), ..info(1, 0) };
        assert_eq!(
            early.judge().unwrap().health.reasons,
            ["NVLink fabric: not registered with the fabric manager (state not-started)"]
        );
        // 0 in every field: the driver does not say, which is no fault.
        assert_eq!(info(3, 0).judge().unwrap().health.state, "ok");
    }

    #[test]
    fn state_not_supported_is_no_fabric_whatever_else_the_struct_holds() {
        // What the H200 of shared/real-gpu/h200-2026-12-04 answered: SUCCESS, state 0, zeros.
        let standalone = FabricInfo { cluster_uuid: [0; 16], clique_id: 0, ..info(0, 0) };
        assert_eq!(standalone.judge(), None);
        // Garbage in the other fields of a NOT_SUPPORTED answer is not read either.
        let noisy = FabricInfo { status: Some("Unknown Error".to_owned()), summary: 2, ..info(0, 1 << 4) };
        assert_eq!(noisy.judge(), None);
        // A state past nvml.h's four is not a state gpurun can judge: no fabric said.
        assert_eq!(info(9, 0).judge(), None);
    }
}
