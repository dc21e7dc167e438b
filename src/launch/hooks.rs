//! `--on-start CMD` and `--on-exit CMD`: `/bin/sh -c CMD` with a JSON object on stdin and the
//! run's variables in the environment (mail when a queued job starts, a webhook when it ends).
//!
//! A hook is gpurun's child like the command's orphans: the supervisor's reaping loop sees it
//! end, and kills it once `LIMIT` has passed (with a warning). Starting one costs a fork and an
//! exec, never a wait; a hook's failure or its end never changes gpurun's exit status.
//!
//! Its input never blocks gpurun: stdin is one end of a socket pair, written with
//! `MSG_DONTWAIT | MSG_NOSIGNAL` as far as it takes (a command line of megabytes does not fit),
//! the rest each time the supervisor looks again, and given up at the deadline. A socket
//! rather than a pipe: a hook that exits without reading would make a pipe raise SIGPIPE on
//! gpurun's own thread, where the signalfd would read it as a signal to forward.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::SigSet;
use nix::sys::socket::{socketpair, AddressFamily, MsgFlags, SockFlag, SockType};

use crate::process::procfs;
use crate::process::signals::send_to;
use crate::process::{reap, ChildEvent, Reaped};

/// How long a hook may run.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

pub(crate) struct Hook {
    pub(crate) pid: u32,
    /// `--on-start` or `--on-exit`, for messages.
    name: &'static str,
    deadline: Instant,
    /// Reaped, or killed and reaped.
    done: bool,
    /// The input not yet taken, and gpurun's end of the hook's stdin (closed once all of it
    /// went, to give the hook its end of file).
    input: Vec<u8>,
    written: usize,
    stdin: Option<OwnedFd>,
}

/// How often the supervisor offers the rest of a hook's input.
const FEED_EVERY: Duration = Duration::from_millis(10);

impl Hook {
    /// Starts `sh -c line` with `input` offered on its stdin. `None` (with a warning) when it
    /// cannot start.
    /// `mask`: the caller's signal mask, which the hook starts with like the command (gpurun's
    /// own has every forwarded signal blocked; a hook with those blocked could not be ended).
    pub(crate) fn start(
        name: &'static str,
        line: &str,
        input: &str,
        variables: &[(String, String)],
        mask: SigSet,
    ) -> Option<Hook> {
        // stdout belongs to the command: what a hook prints goes to stderr, beside gpurun's lines.
        let to_stderr =
            std::io::stderr().as_fd().try_clone_to_owned().map(Stdio::from).unwrap_or_else(|_| Stdio::null());
        let pair = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC);
        let (ours, theirs) = match pair {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!("{name} hook could not start: {error}");
                return None;
            }
        };
        // The hook reads only: half-closing its write side is no business of gpurun's.
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(line)
            // As the command gets it: what gpurun's own NVML must not see is given back.
            .envs(crate::process::environment::held().iter().map(|(name, value)| (name, value)))
            .envs(variables.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::from(theirs))
            .stdout(to_stderr);
        crate::process::signals::exec_with_mask(&mut command, mask);
        let spawned = command.spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                tracing::warn!("{name} hook could not start: {error}");
                return None;
            }
        };
        tracing::debug!("{name} hook started: PID {}", child.id());
        let mut hook = Hook {
            pid: child.id(),
            name,
            deadline: Instant::now() + LIMIT,
            done: false,
            input: input.as_bytes().to_vec(),
            written: 0,
            stdin: Some(ours),
        };
        hook.feed();
        Some(hook)
    }

    /// Writes what the hook's stdin takes now, never waiting; closes it when all went, when the
    /// hook stopped reading for good, or at the deadline.
    pub(crate) fn feed(&mut self) {
        let Some(stdin) = &self.stdin else { return };
        while self.written < self.input.len() {
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match nix::sys::socket::send(stdin.as_raw_fd(), &self.input[self.written..], flags) {
                Ok(sent) => self.written += sent,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) if Instant::now() < self.deadline && !self.done => return,
                Err(Errno::EAGAIN) => {
                    tracing::warn!(
                        "{} hook did not read its input ({} of {} bytes taken); giving up on it",
                        self.name,
                        self.written,
                        self.input.len()
                    );
                    break;
                }
                // It closed its stdin or ended: the rest is not wanted.
                Err(_) => break,
            }
        }
        self.stdin = None;
    }

    /// When the supervisor must look at the hook again (its deadline, or soon while input is
    /// left to give), while it runs.
    pub(crate) fn wake(&self) -> Option<Instant> {
        let feed = self.stdin.as_ref().map(|_| (Instant::now() + FEED_EVERY).min(self.deadline));
        (!self.done).then_some(feed.unwrap_or(self.deadline))
    }

    /// Whether this hook is still running.
    pub(crate) fn is_running(&self) -> bool {
        !self.done
    }

    /// The reaping loop found `pid` ended: whether it was this hook.
    pub(crate) fn reaped(&mut self, pid: u32, event: ChildEvent) -> bool {
        if self.done || pid != self.pid {
            return false;
        }
        match event {
            ChildEvent::Stopped(_) | ChildEvent::Continued => return true,
            ChildEvent::Exited(0) => {}
            ChildEvent::Exited(code) => tracing::warn!("{} hook exited with status {code}", self.name),
            ChildEvent::Signaled(signal) => {
                tracing::warn!("{} hook was killed by {}", self.name, crate::options::signal::name(signal))
            }
        }
        self.done = true;
        self.stdin = None;
        true
    }

    /// Past the deadline: SIGKILL to the hook and what it started (`sh -c 'sleep 300'` forks
    /// the sleep); the hook's PID is still ours until it is reaped.
    pub(crate) fn enforce(&mut self, now: Instant) {
        self.feed();
        if !self.done && now >= self.deadline {
            tracing::warn!("{} hook still running after {} s: killing it", self.name, LIMIT.as_secs());
            for pid in procfs::descendants(self.pid) {
                send_to(pid, libc::SIGKILL);
            }
            send_to(self.pid, libc::SIGKILL);
            self.deadline = now + LIMIT;
        }
    }

    /// Waits for the hook to end (killing it at its deadline) and reaps it.
    pub(crate) fn wait_out(mut self) {
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
