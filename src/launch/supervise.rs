//! The supervisor loop: wait for signals and child state changes, forward what the policy in
//! `signals` says, follow the child's job-control stops, and end when the child ends.

use std::time::{Duration, Instant};

use crate::cli::config::Supervision;
use crate::launch::signals::{self, Action, Receiver};
use crate::launch::spawn::End;
use crate::verify::monitor::Monitor;

/// How long `--verify strict` gives a command on the wrong GPU between SIGTERM and SIGKILL,
/// unless `--kill-after` says otherwise.
const STRICT_GRACE: Duration = Duration::from_secs(5);

/// How supervision ended.
pub struct Supervised {
    pub end: End,
    /// `--verify strict` ended the command for being on the wrong GPU: this detail.
    pub strict_failure: Option<String>,
}

/// Whether `pid` is in a job-control stop, from /proc.
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|end| stat[end + 1..].trim_start().starts_with(['T', 't'])))
        .unwrap_or(false)
}

fn in_our_process_group(pid: u32) -> bool {
    // SAFETY: plain syscalls without memory arguments.
    unsafe { libc::getpgid(pid as libc::pid_t) == libc::getpgrp() }
}

fn ends_the_job(signal: libc::c_int) -> bool {
    matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP)
}

/// Runs until the child ends; reaps any other child (orphans) on the way, and lets the monitor
/// poll NVML when it is due.
pub fn run(
    child: u32,
    receiver: &Receiver,
    options: &Supervision,
    mut monitor: Option<&mut Monitor>,
) -> Supervised {
    let mut strict_failure = None;
    let own_pid = std::process::id();
    let mut kill_deadline: Option<Instant> = None;
    // The SIGCONT that resumed gpurun after a job-control stop reached the child directly (or
    // was sent to it below): it is not forwarded again.
    let mut resumed_from_stop = false;
    loop {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            if pid <= 0 {
                break;
            }
            if pid as u32 != child {
                tracing::debug!("reaped PID {pid}");
                continue;
            }
            if libc::WIFSTOPPED(status) {
                resumed_from_stop |= follow_stop(child, libc::WSTOPSIG(status));
                continue;
            }
            if let Some(end) = End::from_wait_status(status) {
                return Supervised { end, strict_failure };
            }
        }
        if kill_deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            tracing::warn!(
                "the command is still running {:?} after it was asked to stop: sending SIGKILL",
                options.kill_after.unwrap_or_default()
            );
            signals::send(child, libc::SIGKILL);
            kill_deadline = None;
        }
        if let Some(monitor) = monitor.as_deref_mut() {
            if let Some(detail) = monitor.tick(own_pid) {
                signals::send(child, libc::SIGTERM);
                kill_deadline = Some(Instant::now() + options.kill_after.unwrap_or(STRICT_GRACE));
                strict_failure = Some(detail);
            }
        }
        let wake = [kill_deadline, monitor.as_deref().map(Monitor::next_poll)].into_iter().flatten().min();
        let timeout = wake.map(|at| at.saturating_duration_since(Instant::now()));
        for received in receiver.wait(timeout) {
            let action =
                signals::decide(received, child, own_pid, in_our_process_group(child), &options.no_forward);
            let reached_child = match action {
                Action::Reap => false,
                Action::Forward if received.signal == libc::SIGCONT && resumed_from_stop => {
                    resumed_from_stop = false;
                    false
                }
                Action::Forward => {
                    tracing::debug!(
                        "forwarding {} to PID {child}",
                        crate::options::signal::name(received.signal)
                    );
                    signals::send(child, received.signal)
                }
                // Terminal signals reached the child through its process group, a launcher's
                // directly.
                Action::Drop => match received.origin {
                    signals::Origin::Kernel => in_our_process_group(child),
                    signals::Origin::Launcher(_) => true,
                    _ => false,
                },
            };
            if reached_child && ends_the_job(received.signal) && kill_deadline.is_none() {
                kill_deadline = options.kill_after.map(|after| Instant::now() + after);
            }
        }
    }
}

/// The child stopped (Ctrl-Z, SIGSTOP from someone): stop gpurun too, so the shell sees the
/// whole job stopped; when gpurun is continued, make sure the child is too. Returns whether
/// gpurun stopped (and so was resumed by a SIGCONT).
fn follow_stop(child: u32, stop_signal: libc::c_int) -> bool {
    tracing::debug!("the command stopped ({}); stopping too", crate::options::signal::name(stop_signal));
    // It may already have been continued (a quick `fg`): then there is nothing to follow.
    if !is_stopped(child) {
        return false;
    }
    signals::stop_self();
    if is_stopped(child) {
        signals::send(child, libc::SIGCONT);
    }
    true
}
