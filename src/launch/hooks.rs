//! `--on-start CMD` and `--on-exit CMD`: `/bin/sh -c CMD` with a JSON object on stdin and the
//! run's variables in the environment (mail when a queued job starts, a webhook when it ends).
//!
//! A hook is gpurun's child like the command's orphans: the supervisor's reaping loop sees it
//! end, and kills it once `LIMIT` has passed (with a warning). Starting one costs a fork and an
//! exec, never a wait; a hook's failure or its end never changes gpurun's exit status.

use std::io::Write;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::procfs;
use crate::process::signals::send;
use crate::process::{reap, ChildEvent, Reaped};

/// How long a hook may run.
pub const LIMIT: Duration = Duration::from_secs(30);

pub struct Hook {
    pub pid: u32,
    /// `--on-start` or `--on-exit`, for messages.
    name: &'static str,
    deadline: Instant,
    /// Reaped, or killed and reaped.
    done: bool,
}

impl Hook {
    /// Starts `sh -c line`, writes `input` to its stdin and closes it. `None` (with a warning)
    /// when it cannot start.
    pub fn start(
        name: &'static str,
        line: &str,
        input: &str,
        variables: &[(String, String)],
    ) -> Option<Hook> {
        // stdout belongs to the command: what a hook prints goes to stderr, beside gpurun's lines.
        let to_stderr =
            std::io::stderr().as_fd().try_clone_to_owned().map(Stdio::from).unwrap_or_else(|_| Stdio::null());
        let spawned = Command::new("/bin/sh")
            .arg("-c")
            .arg(line)
            .envs(variables.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(to_stderr)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                tracing::warn!("{name} hook could not start: {error}");
                return None;
            }
        };
        // A hook that does not read its input must not hold gpurun: the JSON is small (it fits
        // a pipe's buffer), and a broken pipe is the hook's choice.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        tracing::debug!("{name} hook started: PID {}", child.id());
        Some(Hook { pid: child.id(), name, deadline: Instant::now() + LIMIT, done: false })
    }

    /// When the supervisor must look at the hook again (its deadline), while it runs.
    pub fn wake(&self) -> Option<Instant> {
        (!self.done).then_some(self.deadline)
    }

    /// The reaping loop found `pid` ended: whether it was this hook.
    pub fn reaped(&mut self, pid: u32, event: ChildEvent) -> bool {
        if self.done || pid != self.pid {
            return false;
        }
        match event {
            ChildEvent::Stopped(_) => return true,
            ChildEvent::Exited(0) => {}
            ChildEvent::Exited(code) => tracing::warn!("{} hook exited with status {code}", self.name),
            ChildEvent::Signaled(signal) => {
                tracing::warn!("{} hook was killed by {}", self.name, crate::options::signal::name(signal))
            }
        }
        self.done = true;
        true
    }

    /// Past the deadline: SIGKILL to the hook and what it started (`sh -c 'sleep 300'` forks
    /// the sleep); the hook's PID is still ours until it is reaped.
    pub fn enforce(&mut self, now: Instant) {
        if !self.done && now >= self.deadline {
            tracing::warn!("{} hook still running after {} s: killing it", self.name, LIMIT.as_secs());
            for pid in procfs::descendants(self.pid) {
                send(pid, libc::SIGKILL);
            }
            send(self.pid, libc::SIGKILL);
            self.deadline = now + LIMIT;
        }
    }

    /// Waits for the hook to end (killing it at its deadline) and reaps it.
    pub fn finish(mut self) {
        while !self.done {
            match reap(Some(self.pid), false) {
                Reaped::Child(pid, event) => {
                    self.reaped(pid, event);
                }
                Reaped::NoChildren => self.done = true,
                Reaped::Nothing => {
                    self.enforce(Instant::now());
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
