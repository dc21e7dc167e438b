//! `--parent-death-signal`: if gpurun itself dies (SIGKILL, the OOM killer), the command gets
//! this signal, exactly once.
//!
//! Not through PR_SET_PDEATHSIG in the command: that signal is sent each time the command is
//! reparented, and gpurun has more than one thread (its probe thread, and any thread the NVML
//! library starts), so a dying gpurun would hand the command the signal once per thread that
//! outlived the one that forked it. Instead a small watcher process, started once the command
//! exists (before gpurun tells it to go), holds the read end of a pipe whose write end only
//! gpurun holds. It runs in gpurun's memory (`vm_child`): a fork's copy of gpurun's page
//! tables cost a fifth of a launch. The end of gpurun, however it
//! comes, closes that pipe, and only then, once, the watcher sends the signal through a pidfd
//! (which cannot reach a reused PID). When the command ends first, or gpurun stops it, the
//! watcher just exits. It blocks every signal, like gpurun, and sits in gpurun's process group.
//!
//! For a container run the command is the container's client, and the container is the
//! runtime's: after signalling the client, the watcher becomes `<client> kill --signal N <ID>`
//! (the ID read from the --cidfile then), so the container gets the signal whatever the
//! client's --sig-proxy.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{pipe2, Pid};

use crate::process::vm_child::{self, Stack};

/// What the watcher runs: kept alive while it may run (it reads this in gpurun's memory).
type Body = Box<dyn Fn() -> i32>;

/// The watcher, from gpurun's side.
pub(crate) struct Watcher {
    pid: Pid,
    /// Dropped (closed) only by gpurun's death or `stop`.
    pipe: OwnedFd,
    /// Its body and stack, freed once it has been reaped (`stop`); never freed while it may
    /// still run, since it may outlive gpurun.
    kept: Option<(Body, Stack)>,
}

/// pidfd_open(2) and pidfd_send_signal(2), which nix does not wrap. `None` when the kernel is
/// older than 5.3, or `pid` is not running. A pidfd becomes readable when its process ends,
/// whoever's child it is.
pub(crate) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a PID and flags; a descriptor it returns is new, and ours alone.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        (fd >= 0).then(|| <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32))
    }
}

fn pidfd_send_signal(pidfd: BorrowedFd, signal: i32) {
    // SAFETY: pidfd_send_signal with a valid descriptor, a signal number and no siginfo.
    unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, std::ptr::null::<u8>(), 0)
    };
}

/// `<client> <globals> kill --signal N`, prepared before the watcher starts (it allocates nothing),
/// and the file the container's ID is in.
pub(crate) struct ContainerKill {
    pub(crate) argv: Vec<std::ffi::CString>,
    pub(crate) cidfile: std::ffi::CString,
}

/// At most this many words before the ID (a client with more global options than this is
/// only signalled).
const MAX_KILL_WORDS: usize = 30;

/// Becomes the container's `kill`, if its ID is there: async-signal-safe calls only (open,
/// read, execve), into buffers on the stack.
fn exec_kill(kill: &ContainerKill) {
    if kill.argv.is_empty() || kill.argv.len() > MAX_KILL_WORDS {
        return;
    }
    // Without blocking, and a regular file only: the user's own --cidfile may be a FIFO.
    // SAFETY: a NUL-terminated path; the descriptor is ours and closed below.
    let fd =
        unsafe { libc::open(kill.cidfile.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    // SAFETY: a stat buffer is plain data, valid when zeroed.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of our descriptor into our buffer.
    let status = unsafe { libc::fstat(fd, &mut stat) };
    let regular = status == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFREG;
    let mut id = [0u8; 130];
    // SAFETY: reads at most 128 bytes into the 130-byte buffer.
    let read = if regular { unsafe { libc::read(fd, id.as_mut_ptr().cast(), 128) } } else { 0 };
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    let length = id[..read.max(0) as usize].iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if length < 12 {
        return;
    }
    id[length] = 0;
    let mut argv = [std::ptr::null::<libc::c_char>(); MAX_KILL_WORDS + 2];
    for (slot, word) in argv.iter_mut().zip(&kill.argv) {
        *slot = word.as_ptr();
    }
    argv[kill.argv.len()] = id.as_ptr().cast();
    // stdout belongs to the command: the client's kill prints the ID there. Its stderr too goes
    // away: with the client's signal proxy on, the container has often ended already, and
    // "can only kill running containers" on the job's terminal after gpurun's death is no news.
    // SAFETY: a NUL-terminated path; dup2 onto 1 and 2 and closing our copy touch no memory.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
    }
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: argv is NULL-terminated and points at strings that outlive the call (it only
    // returns on failure); environ is the process's own.
    unsafe { libc::execve(argv[0], argv.as_ptr(), environ) };
}

/// The watcher's whole life: in gpurun's memory (`vm_child`), on descriptors of its own.
/// While gpurun lives it makes no call that can fail (and so writes no errno it shares with
/// gpurun's main thread): it names itself and waits in poll(2), with every signal blocked.
fn watch(fds: WatcherFds, command: u32, signal: i32, container: Option<&ContainerKill>) -> i32 {
    let _ = nix::sys::prctl::set_name(c"gpurun-watcher");
    // Its copy of gpurun's end: with it open, gpurun's death would never read as end of file.
    let _ = nix::unistd::close(fds.gpuruns_end);
    // SAFETY: the watcher's own copies of descriptors gpurun made for it.
    let pipe = unsafe { BorrowedFd::borrow_raw(fds.pipe) };
    // SAFETY: as above.
    let pidfd = fds.pidfd.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    if wait_for_end(pipe, pidfd) {
        match pidfd {
            Some(pidfd) => pidfd_send_signal(pidfd, signal),
            // No pidfds (a kernel older than 5.3): the PID is safe to use while the command is
            // gpurun's unreaped child, which it is until gpurun (which then tells us to stop)
            // or its death.
            None => {
                crate::process::signals::send_to(command, signal);
            }
        }
        if let Some(kill) = container {
            exec_kill(kill);
        }
    }
    // _exit: the watcher alone (it is no thread of gpurun's), running no exit handler.
    signal_hook::low_level::exit(0)
}

/// Waits until gpurun dies (true), or says stop, or the command ends (false).
fn wait_for_end(pipe: BorrowedFd, command: Option<BorrowedFd>) -> bool {
    loop {
        let mut fds =
            [PollFd::new(pipe, PollFlags::POLLIN), PollFd::new(command.unwrap_or(pipe), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        if command.is_some() && fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return false;
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            let mut byte = [0u8];
            return nix::unistd::read(pipe, &mut byte) == Ok(0);
        }
    }
}

/// The descriptors in the watcher's copy of gpurun's table.
#[derive(Clone, Copy)]
struct WatcherFds {
    /// The read end of the pipe whose write end only gpurun holds.
    pipe: RawFd,
    gpuruns_end: RawFd,
    /// The command's, where the kernel has pidfds.
    pidfd: Option<RawFd>,
}

impl Watcher {
    /// Starts the watcher of `command` (gpurun's child, not yet told to go). Returns None if
    /// that fails (the command then runs without a parent-death signal, which is said).
    pub(crate) fn start(command: u32, signal: i32, container: Option<ContainerKill>) -> Option<Watcher> {
        let started = Self::clone_watcher(command, signal, container);
        if let Err(error) = &started {
            tracing::warn!("no parent-death signal for the command: cannot start its watcher: {error}");
        }
        started.ok()
    }

    fn clone_watcher(command: u32, signal: i32, container: Option<ContainerKill>) -> nix::Result<Watcher> {
        let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC)?;
        // Opened here, not in the watcher: a pidfd_open that fails there would write the errno
        // it shares with gpurun's main thread.
        let pidfd = pidfd_open(command as i32);
        let fds = WatcherFds {
            pipe: read_end.as_raw_fd(),
            gpuruns_end: write_end.as_raw_fd(),
            pidfd: pidfd.as_ref().map(AsRawFd::as_raw_fd),
        };
        let stack = Stack::new(64 * 1024)?;
        // On the heap, where it stays put when the Box moves into the Watcher: the watcher
        // reads the closure itself, not the Box.
        let body = Box::new(move || watch(fds, command, signal, container.as_ref()));
        // SAFETY: the body and the stack are freed only once the watcher is reaped (`stop`),
        // else never (`Drop`), and `watch` keeps to vm_child's rules (async-signal-safe calls,
        // none failing while gpurun lives).
        let pid = unsafe { vm_child::start(&stack, &*body) }?;
        Ok(Watcher { pid, pipe: write_end, kept: Some((body as Body, stack)) })
    }

    /// gpurun lives on to the end: the watcher leaves, and is reaped (then what it read can go).
    pub(crate) fn stop(mut self) {
        let _ = nix::unistd::write(&self.pipe, &[1]);
        if nix::sys::wait::waitpid(self.pid, None).is_ok() {
            drop(self.kept.take());
        }
    }
}

impl Drop for Watcher {
    /// Not stopped: the watcher may still run in gpurun's memory, so its body and stack stay.
    fn drop(&mut self) {
        if let Some((body, stack)) = self.kept.take() {
            std::mem::forget(body);
            stack.keep();
        }
    }
}
