//! gpurun's own signal state: what the caller gave it, the signals it reads from a signalfd
//! instead of letting them act, waiting on them, and ending by one.
//!
//! At startup, before any thread can exist (the NVML library and gpurun's probe thread start
//! threads later), every catchable signal the caller did not ignore is blocked and routed to a
//! signalfd. Threads inherit the mask, so a signal sent to the process can only be read from the
//! signalfd: no library thread can take it with a default action that kills gpurun. Synchronous
//! faults (a real SIGSEGV in gpurun or the driver) still kill gpurun: the kernel forces those
//! through any mask. gpurun never installs a handler, so the command, which starts with the
//! caller's mask, inherits nothing of this.
//!
//! (signalfd rather than signal-hook's handler-and-pipe: a handler runs on whatever thread the
//! kernel picks and sees no sender; the signalfd gives the sender's PID and si_code, which the
//! forwarding rule needs, and blocking is what keeps library threads out of it.)

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::process::procfs;

/// The caller's signal state, captured before gpurun changes anything, for the command.
#[derive(Clone)]
pub(crate) struct CallerState {
    /// The caller's signal mask, as the kernel holds it (real-time signals included).
    pub(crate) mask: SigSet,
    /// Signals the caller ignored: bit N-1 is signal N.
    ignored: u64,
}

impl CallerState {
    pub(crate) fn capture() -> CallerState {
        let mask = SigSet::thread_get_mask().unwrap_or_else(|_| SigSet::empty());
        let (ignored, _) = procfs::own_signal_sets();
        CallerState { mask, ignored }
    }

    pub(crate) fn is_ignored(&self, signal: i32) -> bool {
        (1..=64).contains(&signal) && self.ignored & (1u64 << (signal - 1)) != 0
    }
}

/// What the default action of a signal does (signal(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DefaultAction {
    Terminate,
    Stop,
    Ignore,
}

pub(crate) fn default_action(signal: i32) -> DefaultAction {
    match signal {
        libc::SIGCHLD | libc::SIGCONT | libc::SIGURG | libc::SIGWINCH => DefaultAction::Ignore,
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU | libc::SIGSTOP => DefaultAction::Stop,
        _ => DefaultAction::Terminate,
    }
}

/// The SI_KERNEL code: the kernel itself sent the signal (the terminal driver, for one).
const SI_KERNEL: i32 = 0x80;

/// Who sent a signal, as far as the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// kill(2) and friends, by this PID.
    Process(u32),
    /// The kernel: terminal keys, hangup, window size.
    Kernel,
    /// Anything else (a timer, I/O readiness, a child's state change).
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) signal: i32,
    pub(crate) origin: Origin,
}

/// The signals gpurun reads instead of letting them act.
pub(crate) struct Receiver {
    fd: SignalFd,
    caller: CallerState,
}

impl Receiver {
    /// Blocks every catchable signal the caller did not ignore (SIGCHLD always, to reap) and
    /// opens a signalfd for them. Call before any thread exists.
    pub(crate) fn open(caller: CallerState) -> io::Result<Receiver> {
        // sigfillset: glibc leaves out its own internal signals (thread cancellation, setxid).
        let mut blocked = SigSet::all();
        for signal in Signal::iterator() {
            if caller.is_ignored(signal as i32) && signal != Signal::SIGCHLD {
                blocked.remove(signal);
            }
        }
        if caller.is_ignored(libc::SIGCHLD) {
            // An ignored SIGCHLD makes the kernel reap children before their status can be
            // read; the command gets the caller's SIG_IGN back (spawn).
            // SAFETY: SIG_DFL installs no handler; no other thread exists yet.
            unsafe { nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl) }
                .map_err(io::Error::from)?;
        }
        blocked.thread_block().map_err(io::Error::from)?;
        let fd = SignalFd::with_flags(&blocked, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(io::Error::from)?;
        Ok(Receiver { fd, caller })
    }

    pub(crate) fn caller(&self) -> &CallerState {
        &self.caller
    }

    /// Every signal that has arrived, without waiting.
    pub(crate) fn drain(&self) -> Vec<Received> {
        let mut received = Vec::new();
        while let Ok(Some(info)) = self.fd.read_signal() {
            let signal = info.ssi_signo as i32;
            let origin = match info.ssi_code {
                code if code <= 0 => Origin::Process(info.ssi_pid),
                SI_KERNEL => Origin::Kernel,
                _ => Origin::Other,
            };
            received.push(Received { signal, origin });
        }
        received
    }

    /// Waits until a signal arrives, `also` becomes readable, or `timeout` passes (None:
    /// forever). Returns the signals and whether `also` is readable.
    pub(crate) fn wait(
        &self,
        also: Option<BorrowedFd<'_>>,
        timeout: Option<Duration>,
    ) -> (Vec<Received>, bool) {
        let mut fds = vec![PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        if let Some(fd) = also {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        let timeout = match timeout {
            None => PollTimeout::NONE,
            // Rounded up, so that a deadline is never polled a millisecond early in a loop.
            Some(t) => PollTimeout::try_from(t.as_millis().saturating_add(1).min(i32::MAX as u128 - 1))
                .unwrap_or(PollTimeout::MAX),
        };
        let ready = poll(&mut fds, timeout).unwrap_or(0);
        if ready <= 0 {
            return (Vec::new(), false);
        }
        let readable =
            |fd: &PollFd| fd.revents().is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP));
        let also_ready = fds.get(1).is_some_and(readable);
        (self.drain(), also_ready)
    }

    /// Before the command exists, a signal does to gpurun what its default action would (the
    /// caller's ignored ones stay ignored): `Err(signal)` for one that ends gpurun, so that the
    /// caller can clean up (queue tickets, the progress line) and then `die_by` it; a stop
    /// signal stops gpurun until it is continued.
    pub(crate) fn act_before_launch(&self, received: &[Received]) -> Result<(), i32> {
        for signal in received.iter().map(|r| r.signal).filter(|s| !self.caller.is_ignored(*s)) {
            match default_action(signal) {
                DefaultAction::Terminate => return Err(signal),
                DefaultAction::Stop => stop_self(),
                DefaultAction::Ignore => {}
            }
        }
        Ok(())
    }

    /// Sleeps up to `duration`, acting on signals as before the launch.
    pub(crate) fn pause(&self, duration: Duration) -> Result<(), i32> {
        let deadline = std::time::Instant::now() + duration;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let (received, _) = self.wait(None, Some(left));
            self.act_before_launch(&received)?;
        }
    }
}

/// A process to signal: one process, never a group. kill(2) reads 0 as "my process group" and
/// a negative number as a group (-1: every process there is), so a PID that is 0 or does not
/// fit in a positive pid_t (a wrapped u32) cannot be made into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pid(libc::pid_t);

impl Pid {
    /// The process `raw`, if it can be one (1 to pid_t's maximum).
    fn of(raw: u32) -> Option<Pid> {
        libc::pid_t::try_from(raw).ok().filter(|pid| *pid > 0).map(Pid)
    }
}

/// Sends any signal, real-time ones included (nix's `Signal` has only the standard ones), to
/// one process.
fn send(pid: Pid, signal: i32) -> bool {
    // SAFETY: kill(2) has no memory arguments; the PID is positive, so it names one process.
    unsafe { libc::kill(pid.0, signal) == 0 }
}

/// `send` to a PID read as a number (a child's, one from /proc): nothing is sent to 0 or to a
/// number that would name a process group.
pub(crate) fn send_to(raw: u32, signal: i32) -> bool {
    Pid::of(raw).is_some_and(|pid| send(pid, signal))
}

/// Stops gpurun itself, like a job-control stop; execution resumes on SIGCONT.
pub(crate) fn stop_self() {
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
}

/// Ends gpurun the way the command ended: by the same signal, so that a shell sees 128+N and a
/// `for` loop stops on Ctrl-C. gpurun's own core dump is disabled first (the command's is the
/// one that matters). Where the default action cannot end gpurun (PID 1), it exits 128+N.
pub(crate) fn die_by(signal: i32) -> ! {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    // By hand rather than signal-hook's emulate_default_handler, which aborts when the raise
    // does not end the process: as PID 1 that is the normal case, and 128+N is the answer.
    // SAFETY: SIG_DFL installs no handler; the set is initialised by sigemptyset before use,
    // and raise has no memory arguments.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::raise(signal);
    }
    signal_hook::low_level::exit(128 + signal)
}

/// Takes `signal` if it is pending for this thread (blocked and raised), without waiting: a
/// SIGPIPE a failed write left behind, say.
pub(crate) fn take_pending(signal: Signal) {
    let mut set = SigSet::empty();
    set.add(signal);
    let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid signal set and timespec; no siginfo is asked for.
    unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &now) };
}

/// A `std::process::Command` whose child execs with `mask` as its signal mask (gpurun's own
/// has its forwarded signals blocked; a hook gets the caller's). std has no safe way to.
pub(crate) fn exec_with_mask(command: &mut std::process::Command, mask: SigSet) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and makes one system call
    // (sigprocmask, async-signal-safe) on a mask copied in by value; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&mask), None)
                .map_err(Into::into)
        })
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pid_is_one_process_never_a_group() {
        assert_eq!(super::Pid::of(0), None, "kill(0) is the caller's process group");
        assert_eq!(super::Pid::of(u32::MAX), None, "as a pid_t, -1: every process");
        assert_eq!(super::Pid::of(1 << 31), None, "a negative pid_t: a process group");
        assert_eq!(super::Pid::of(1), Some(super::Pid(1)));
        assert_eq!(super::Pid::of(i32::MAX as u32), Some(super::Pid(i32::MAX)));
        assert!(!super::send_to(0, 0), "nothing is sent to 0");
        assert!(super::send_to(std::process::id(), 0), "signal 0 to ourselves is a liveness check");
    }

    use super::*;

    #[test]
    fn default_actions() {
        assert_eq!(default_action(libc::SIGTERM), DefaultAction::Terminate);
        assert_eq!(default_action(libc::SIGABRT), DefaultAction::Terminate);
        assert_eq!(default_action(libc::SIGRTMIN() + 2), DefaultAction::Terminate);
        assert_eq!(default_action(libc::SIGTSTP), DefaultAction::Stop);
        assert_eq!(default_action(libc::SIGWINCH), DefaultAction::Ignore);
        assert_eq!(default_action(libc::SIGCHLD), DefaultAction::Ignore);
    }
}
