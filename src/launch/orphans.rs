//! Processes the command left behind. gpurun is a child subreaper (PR_SET_CHILD_SUBREAPER), so
//! orphans of the command's tree become gpurun's children instead of init's; when the command
//! exits, those still alive (a DataLoader worker, a daemonised helper) would keep holding GPU
//! memory after gpurun returns. They get SIGTERM (and SIGCONT, so that a stopped one can act on
//! it), then SIGKILL after a grace period, and gpurun reaps every one before it exits: it is
//! done only when it has no child left at all, zombies included.
//!
//! The leftovers are found from gpurun down (`/proc/self/task/*/children`), so the cost does
//! not depend on how many processes the host runs.

use std::time::{Duration, Instant};

use crate::process::signals::send;
use crate::process::{procfs, reap, Reaped};

/// How long orphans get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);
/// How long gpurun waits for SIGKILLed leftovers to be gone (a process in an uninterruptible
/// wait dies only when the kernel lets it).
const AFTER_KILL: Duration = Duration::from_secs(2);

pub fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Reaps every child that has ended, without blocking. Returns false once gpurun has no child
/// left at all.
pub fn reap_ended() -> bool {
    loop {
        match reap(None, false) {
            Reaped::Child(pid, _) => tracing::debug!("reaped PID {pid}"),
            Reaped::Nothing => return true,
            Reaped::NoChildren => return false,
        }
    }
}

fn listed(pids: &[u32]) -> String {
    pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// TERM, grace, KILL for everything still running below gpurun; returns once every child has
/// been reaped (or, for one the kernel will not let die, after a bounded wait).
pub fn end_all() {
    let own_pid = std::process::id();
    if !reap_ended() {
        return;
    }
    let live = |pids: Vec<u32>| pids.into_iter().filter(|pid| procfs::is_alive(*pid)).collect::<Vec<_>>();
    let mut signalled = live(procfs::descendants(own_pid));
    if !signalled.is_empty() {
        tracing::warn!(
            "the command left {} process{} running (PID {}); sending SIGTERM",
            signalled.len(),
            if signalled.len() == 1 { "" } else { "es" },
            listed(&signalled)
        );
    }
    for pid in &signalled {
        send(*pid, libc::SIGTERM);
        send(*pid, libc::SIGCONT);
    }
    let deadline = Instant::now() + GRACE;
    while reap_ended() {
        if Instant::now() >= deadline {
            break;
        }
        // Processes that appear meanwhile (started by a leftover) get the same.
        for pid in live(procfs::descendants(own_pid)) {
            if !signalled.contains(&pid) {
                send(pid, libc::SIGTERM);
                send(pid, libc::SIGCONT);
                signalled.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if !reap_ended() {
        return;
    }
    let left = live(procfs::descendants(own_pid));
    tracing::warn!("still running after {}s: sending SIGKILL to PID {}", GRACE.as_secs(), listed(&left));
    let killed_at = Instant::now();
    while reap_ended() && killed_at.elapsed() < AFTER_KILL {
        for pid in procfs::descendants(own_pid) {
            send(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
