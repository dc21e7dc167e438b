//! Processes the command left behind. gpurun is a child subreaper (PR_SET_CHILD_SUBREAPER), so
//! orphans of the command's tree become gpurun's children instead of init's; when the command
//! exits, those still alive (a DataLoader worker, a daemonised helper) would keep holding GPU
//! memory after gpurun returns. They get SIGTERM (and SIGCONT, so that a stopped one can act on
//! it), then SIGKILL after a grace period, and gpurun reaps every one before it exits: it is
//! done only when it has no child left at all, zombies included.
//!
//! The leftovers are found from gpurun down (`/proc/self/task/*/children`), so the cost does
//! not depend on how many processes the host runs.
//!
//! Only the command's descendants are leftovers. gpurun may have inherited children from the
//! process it replaced (`(sleep 3 & exec gpurun -- job)`): the command never started those, and
//! like `timeout` gpurun leaves them (and what they started) alone. They are told apart by
//! being gpurun's children before the command existed, and by having started before it.

use std::time::{Duration, Instant};

use crate::process::signals::send_to;
use crate::process::{procfs, reap, Reaped};

/// How long orphans get between SIGTERM and SIGKILL.
pub(crate) const GRACE: Duration = Duration::from_secs(3);
/// How long gpurun waits for SIGKILLed leftovers to be gone (a process in an uninterruptible
/// wait dies only when the kernel lets it).
const AFTER_KILL: Duration = Duration::from_secs(2);

pub(crate) fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Reaps every child that has ended, without blocking. Returns false once gpurun has no child
/// left at all.
pub(crate) fn reap_ended() -> bool {
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

/// The children gpurun had before it started the command, each by PID and start time (a PID
/// alone could be reused).
#[derive(Debug, Clone, Default)]
pub(crate) struct Inherited {
    children: Vec<(u32, u64)>,
}

impl Inherited {
    /// Call before the command is started.
    pub(crate) fn capture() -> Inherited {
        let children = procfs::children(std::process::id())
            .into_iter()
            .filter_map(|pid| Some((pid, procfs::stat(pid)?.start_ticks)))
            .collect();
        Inherited { children }
    }

    fn contains(&self, pid: u32, start_ticks: u64) -> bool {
        self.children.contains(&(pid, start_ticks))
    }
}

/// Who the leftovers are: below gpurun, not inherited (nor below an inherited child), started
/// no earlier than the command.
pub(crate) struct Leftovers {
    pub(crate) inherited: Inherited,
    /// The command's start time, in clock ticks after boot.
    pub(crate) command_started: u64,
    /// Processes already said to be ended (an --on-start hook): ended like the rest, not named
    /// as the command's.
    pub(crate) announced: Vec<u32>,
}

impl Leftovers {
    /// The leftovers now, from gpurun down, zombies included: gpurun is done only when it has
    /// reaped every one (a zombie seen here is reaped by the next `reap_ended`, or by its own
    /// parent before that parent ends and hands it to gpurun).
    fn remaining(&self) -> Vec<u32> {
        let own_pid = std::process::id();
        let mut found = Vec::new();
        let mut queue = vec![own_pid];
        while let Some(pid) = queue.pop() {
            for child in procfs::children(pid) {
                if child == own_pid || found.contains(&child) {
                    continue;
                }
                let Some(stat) = procfs::stat(child) else { continue };
                if pid == own_pid && self.inherited.contains(child, stat.start_ticks) {
                    continue;
                }
                queue.push(child);
                if stat.start_ticks >= self.command_started {
                    found.push(child);
                }
            }
        }
        found
    }
}

/// TERM, grace, KILL for the command's processes still running below gpurun; returns once they
/// are gone and reaped (or, for one the kernel will not let die, after a bounded wait).
pub(crate) fn end_all(leftovers: &Leftovers) {
    reap_ended();
    let mut signalled = leftovers.remaining();
    if signalled.is_empty() {
        return;
    }
    let named: Vec<u32> =
        signalled.iter().copied().filter(|pid| !leftovers.announced.contains(pid)).collect();
    if !named.is_empty() {
        tracing::warn!(
            "the command left {} process{} running (PID {}); sending SIGTERM",
            named.len(),
            if named.len() == 1 { "" } else { "es" },
            listed(&named)
        );
    }
    for pid in &signalled {
        send_to(*pid, libc::SIGTERM);
        send_to(*pid, libc::SIGCONT);
    }
    let deadline = Instant::now() + GRACE;
    loop {
        reap_ended();
        let live = leftovers.remaining();
        if live.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        // Processes that appear meanwhile (started by a leftover) get the same.
        for pid in live {
            if !signalled.contains(&pid) {
                send_to(pid, libc::SIGTERM);
                send_to(pid, libc::SIGCONT);
                signalled.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!(
        "still running after {}s: sending SIGKILL to PID {}",
        GRACE.as_secs(),
        listed(&leftovers.remaining())
    );
    let killed_at = Instant::now();
    while killed_at.elapsed() < AFTER_KILL {
        reap_ended();
        let live = leftovers.remaining();
        if live.is_empty() {
            return;
        }
        for pid in live {
            send_to(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
