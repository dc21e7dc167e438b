//! The shared-server rule (DESIGN 4): a GPU running someone's job is never taken for a better
//! link or a matched model while a qualifying GPU that is not busy is left out. A data-parallel
//! job runs at the pace of its slowest rank, and a card shared with a busy job gives it well
//! under half its compute, far more than a PCIe hop across the socket costs; it also slows the
//! colleague.

use crate::probe::gpu::Gpu;

/// Utilization at or above this is busy (the seed's own line).
pub(crate) const BUSY_PERCENT: u32 = 50;

/// Whether the rule counts `gpu` as busy. Unknown utilization counts as busy here (and only
/// here: `--max-util` refuses it instead). A MIG device has no utilization counters at all, so
/// the rule does not apply to it.
pub(crate) fn is_busy(gpu: &Gpu) -> bool {
    gpu.mig.is_none() && gpu.utilization.is_none_or(|u| u.gpu_percent >= BUSY_PERCENT)
}

/// `busy: 60% utilization, 2 processes of bob`.
pub(crate) fn describe(gpu: &Gpu) -> String {
    let mut text = match gpu.utilization {
        Some(u) => format!("busy: {}% utilization", u.gpu_percent),
        None => "busy: utilization unknown (counted as busy)".to_owned(),
    };
    let processes = gpu.processes.as_deref().unwrap_or_default();
    if !processes.is_empty() {
        let mut users: Vec<&str> = processes.iter().filter_map(|p| p.user.as_deref()).collect();
        users.sort_unstable();
        users.dedup();
        let known = processes.iter().all(|p| p.user.is_some());
        let count = processes.len();
        text.push_str(&format!(", {count} process{}", if count == 1 { "" } else { "es" }));
        match (users.is_empty(), known) {
            (true, _) => {}
            (false, true) => text.push_str(&format!(" of {}", and_list(&users))),
            (false, false) => {
                users.push("others");
                text.push_str(&format!(" of {}", and_list(&users)))
            }
        }
    }
    text
}

/// `a`, `a and b`, `a, b and c`.
pub(crate) fn and_list<T: AsRef<str>>(items: &[T]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_owned(),
        [rest @ .., last] => {
            format!("{} and {}", rest.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", "), last.as_ref())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::{test_gpu, GpuProcess, Utilization};

    fn process(pid: u32, user: Option<&str>) -> GpuProcess {
        GpuProcess { pid, used_bytes: None, user: user.map(str::to_owned), command: None }
    }

    #[test]
    fn busy_is_half_or_more_and_unknown_counts() {
        let mut gpu = test_gpu(0);
        gpu.utilization = Some(Utilization { gpu_percent: 49, memory_percent: Some(0) });
        assert!(!is_busy(&gpu));
        gpu.utilization = Some(Utilization { gpu_percent: 50, memory_percent: Some(0) });
        assert!(is_busy(&gpu));
        gpu.utilization = None;
        assert!(is_busy(&gpu));
    }

    #[test]
    fn the_reason_names_the_load_and_whose_it_is() {
        let mut gpu = test_gpu(0);
        gpu.utilization = Some(Utilization { gpu_percent: 60, memory_percent: Some(0) });
        gpu.processes = Some(vec![process(1, Some("bob")), process(2, Some("bob"))]);
        assert_eq!(describe(&gpu), "busy: 60% utilization, 2 processes of bob");
        gpu.processes = Some(vec![process(1, Some("bob")), process(2, Some("carol")), process(3, None)]);
        assert_eq!(describe(&gpu), "busy: 60% utilization, 3 processes of bob, carol and others");
        gpu.processes = Some(vec![process(1, None)]);
        assert_eq!(describe(&gpu), "busy: 60% utilization, 1 process");
        gpu.utilization = None;
        gpu.processes = Some(Vec::new());
        assert_eq!(describe(&gpu), "busy: utilization unknown (counted as busy)");
        assert_eq!(and_list(&["0", "4", "5"]), "0, 4 and 5");
    }
}
