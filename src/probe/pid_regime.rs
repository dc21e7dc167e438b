//! What NVML's PIDs are to a gpurun that runs in a PID namespace of its own (a container), by
//! the driver's version (issue 62): drivers since 535.113.01 list the PIDs of the caller's own
//! namespace and leave out the others, with each process's memory since 565.57.01 (the
//! driver's source; a real H200 on 580.159 verified a job in `unshare -pf --mount-proc` as
//! PID 4); older drivers report host PIDs, which the namespace cannot match.

/// The first driver that lists the caller's own PID namespace.
const OWN_PIDS_SINCE: [u32; 3] = [535, 113, 1];
/// The first that also gives those processes' memory.
const OWN_MEMORY_SINCE: [u32; 3] = [565, 57, 1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Regime {
    /// NVML reports host PIDs: verification may say "unverifiable".
    HostPids,
    /// NVML lists this namespace's own PIDs (`memory`: and their memory).
    OwnPids { memory: bool },
}

/// `535.113.01` as numbers; `None` where it is not such a version.
fn parse(version: &str) -> Option<[u32; 3]> {
    let mut parts = version.trim().split('.').map(|part| part.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some([major, minor, patch])
}

/// The regime of an NVIDIA driver; `None` where its version cannot be read, or the driver is
/// another vendor's (whose branches say nothing of this).
pub(crate) fn of(vendor: crate::probe::vendor::Vendor, driver_version: &str) -> Option<Regime> {
    if vendor != crate::probe::vendor::Vendor::Nvidia {
        return None;
    }
    let version = parse(driver_version)?;
    Some(match version >= OWN_PIDS_SINCE {
        false => Regime::HostPids,
        true => Regime::OwnPids { memory: version >= OWN_MEMORY_SINCE },
    })
}

impl Regime {
    /// `--doctor`'s words, for a gpurun in a PID namespace of its own.
    pub(crate) fn words(self, driver: &str) -> String {
        match self {
            Regime::HostPids => format!(
                "driver {driver} reports host PIDs (before 535.113.01), so verification may say 'unverifiable'"
            ),
            Regime::OwnPids { memory: true } => format!(
                "driver {driver} lists this namespace's own PIDs and their memory (since 565.57.01): \
                 verification works here; processes outside this namespace are not listed"
            ),
            Regime::OwnPids { memory: false } => format!(
                "driver {driver} lists this namespace's own PIDs (since 535.113.01) but not their memory \
                 (before 565.57.01): verification works here, peak memory per process is unknown"
            ),
        }
    }
}

/// What a context costs beyond what NVML gives its process: on a real H200 (driver 580) the
/// GPU's used memory exceeded its one process's figure by 624 MiB. Memory no listed process
/// accounts for is said held outside only past this much for each listed process.
const CONTEXT_OVERHEAD: u64 = 768 << 20;
/// And past this much on a GPU with no listed process (idle, the H200 used 0 beside its
/// reservation).
const IDLE_SLACK: u64 = 64 << 20;

/// In a PID namespace of its own, the memory in use on a GPU that no listed process accounts
/// for, less what the listed processes' contexts may hold beyond their figures: at least what
/// processes outside the namespace hold, which NVML lists nowhere here. `None` on the host,
/// where unknown, or within the slack.
pub(crate) fn held_outside(in_own_namespace: bool, used: Option<u64>, listed: Option<&[u64]>) -> Option<u64> {
    if !in_own_namespace {
        return None;
    }
    let listed = listed?;
    let accounted: u64 = listed.iter().sum();
    let contexts = CONTEXT_OVERHEAD * listed.len() as u64;
    let outside = used?.saturating_sub(accounted).saturating_sub(contexts);
    (outside > IDLE_SLACK).then_some(outside)
}

/// What processes outside this PID namespace hold on `gpu`, where gpurun runs in one of its
/// own (`held_outside`): from what the probe read, for what shows it (`--list`).
pub(crate) fn held_outside_of(gpu: &crate::probe::gpu::Gpu) -> Option<u64> {
    let listed: Option<Vec<u64>> =
        gpu.processes.as_ref().and_then(|listed| listed.iter().map(|process| process.used_bytes).collect());
    held_outside(
        !crate::process::procfs::in_host_pid_namespace(),
        gpu.memory.map(|memory| memory.used_bytes),
        listed.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_driver_branch_has_its_regime() {
        use crate::probe::vendor::Vendor::{Amd, Nvidia};
        assert_eq!(of(Nvidia, "470.256.02"), Some(Regime::HostPids));
        assert_eq!(of(Nvidia, "535.104.05"), Some(Regime::HostPids));
        assert_eq!(of(Nvidia, "535.113.01"), Some(Regime::OwnPids { memory: false }));
        assert_eq!(of(Nvidia, "550.54.15"), Some(Regime::OwnPids { memory: false }));
        assert_eq!(of(Nvidia, "565.57.01"), Some(Regime::OwnPids { memory: true }));
        assert_eq!(of(Nvidia, "580.159.04"), Some(Regime::OwnPids { memory: true }));
        // A version without its patch part compares as .0.
        assert_eq!(of(Nvidia, "565.57"), Some(Regime::OwnPids { memory: false }));
        assert_eq!(of(Nvidia, "unknown"), None);
        assert_eq!(of(Nvidia, ""), None);
        assert_eq!(of(Amd, "6.8.5"), None);
    }

    #[test]
    fn memory_no_listed_process_accounts_for_is_held_outside_past_the_contexts_slack() {
        let gib = 1u64 << 30;
        // The host sees every process: nothing is outside.
        assert_eq!(held_outside(false, Some(10 * gib), Some(&[])), None);
        // In a namespace, an idle-looking GPU with 2 GiB in use.
        assert_eq!(held_outside(true, Some(2 * gib), Some(&[])), Some(2 * gib));
        // The real H200's own process: 2566 MiB listed, 3190 MiB used: the context, not outside.
        assert_eq!(held_outside(true, Some(3190 << 20), Some(&[2566 << 20])), None);
        // Unknown memory or lists: unknown.
        assert_eq!(held_outside(true, None, Some(&[])), None);
        assert_eq!(held_outside(true, Some(gib), None), None);
    }
}
