//! Processes the command left behind. gpurun is a child subreaper (PR_SET_CHILD_SUBREAPER), so
//! orphans of the command's tree become gpurun's children instead of init's; when the command
//! exits, those still alive (a DataLoader worker, a daemonised helper) would keep holding GPU
//! memory after gpurun returns. They get SIGTERM, then SIGKILL after a grace period.

use std::time::{Duration, Instant};

use crate::launch::signals;
use crate::probe::procfs::descendants;

/// How long orphans get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Reaps every child that has ended, without blocking.
pub fn reap_ended() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
        tracing::debug!("reaped PID {pid}");
    }
}

/// TERM, grace, KILL for everything still running below gpurun. Returns what was ended.
pub fn end_all(own_pid: u32) -> Vec<u32> {
    reap_ended();
    let orphans = descendants(own_pid);
    if orphans.is_empty() {
        return orphans;
    }
    tracing::warn!(
        "the command left {} process{} running (PID {}); sending SIGTERM",
        orphans.len(),
        if orphans.len() == 1 { "" } else { "es" },
        orphans.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    );
    for pid in &orphans {
        signals::send(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + GRACE;
    loop {
        reap_ended();
        let left = descendants(own_pid);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                "still running after {}s: sending SIGKILL to PID {}",
                GRACE.as_secs(),
                left.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            );
            for pid in &left {
                signals::send(*pid, libc::SIGKILL);
            }
            let killed_at = Instant::now();
            while !descendants(own_pid).is_empty() && killed_at.elapsed() < Duration::from_secs(2) {
                reap_ended();
                std::thread::sleep(Duration::from_millis(10));
            }
            reap_ended();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    orphans
}
