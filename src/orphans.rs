//! Processes the command left behind. gpurun is a child subreaper (PR_SET_CHILD_SUBREAPER), so
//! orphans of the command's tree become gpurun's children instead of init's; when the command
//! exits, those still alive (a DataLoader worker, a daemonised helper) would keep holding GPU
//! memory after gpurun returns. They get SIGTERM, then SIGKILL after a grace period.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::signals;

/// How long orphans get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// (pid, parent pid, state) of every process in /proc.
fn process_table() -> Vec<(u32, u32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
            let state = fields.next()?.chars().next()?;
            let parent: u32 = fields.next()?.parse().ok()?;
            Some((pid, parent, state))
        })
        .collect()
}

/// Live (non-zombie) descendants of `root`.
pub fn descendants(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, parent, _) in &table {
        children.entry(*parent).or_default().push(*pid);
    }
    let zombie: Vec<u32> = table.iter().filter(|(_, _, state)| *state == 'Z').map(|(pid, ..)| *pid).collect();
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if !zombie.contains(child) {
                found.push(*child);
            }
            queue.push(*child);
        }
    }
    found
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
