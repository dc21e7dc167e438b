//! `--cpu-bind numa`: the command runs on the CPUs local to its GPUs, within gpurun's own
//! affinity, so a Slurm or cgroup cpuset is never widened.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::options::cpus;
use crate::probe::gpu::{label, Machine};
use crate::select::selection::Selection;

/// The CPUs gpurun itself may run on.
pub(crate) fn own_cpus() -> Vec<u32> {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else { return Vec::new() };
    (0..CpuSet::count() as u32).filter(|&cpu| set.is_set(cpu as usize).unwrap_or(false)).collect()
}

/// The union of the chosen devices' local CPUs, within `own`. `None`, with a warning (a line
/// with -v where the binding is `--per-rank`'s default, not asked for), where NVML does not
/// say or nothing is left: the command keeps gpurun's CPUs.
pub(crate) fn numa_cpus(
    selection: &Selection,
    machine: &Machine,
    own: &[u32],
    asked: bool,
) -> Option<Vec<u32>> {
    let say = |text: String| match asked {
        true => tracing::warn!("{text}"),
        false => tracing::debug!("{text}"),
    };
    let mut local = Vec::new();
    for device in &selection.devices {
        let Some(found) = machine.device(device.index).and_then(|gpu| gpu.cpus.clone()) else {
            say(format!(
                "--cpu-bind numa: NVML does not say which CPUs are local to {}; the command keeps gpurun's CPUs",
                label(device.index)
            ));
            return None;
        };
        local.extend(found);
    }
    let bound: Vec<u32> = local.iter().copied().filter(|cpu| own.contains(cpu)).collect();
    if bound.is_empty() && !selection.devices.is_empty() {
        say(format!(
            "--cpu-bind numa: the GPUs' local CPUs ({}) are all outside gpurun's own ({}); the command keeps gpurun's",
            cpus::list(&local),
            cpus::list(own)
        ));
    }
    (!bound.is_empty()).then(|| {
        let mut bound = bound;
        bound.sort_unstable();
        bound.dedup();
        bound
    })
}

/// Sets process `pid`'s CPUs (the command, between its fork and its exec).
pub(crate) fn bind(pid: u32, cpus: &[u32]) -> nix::Result<()> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize)?;
    }
    sched_setaffinity(Pid::from_raw(pid as i32), &set)
}
