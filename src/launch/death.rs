//! `--parent-death-signal`: if gpurun itself dies (SIGKILL, the OOM killer), the command gets
//! this signal, exactly once.
//!
//! Not through PR_SET_PDEATHSIG in the command: that signal is sent each time the command is
//! reparented, and gpurun has more than one thread (its NVML thread, and any thread the NVML
//! library starts), so a dying gpurun would hand the command the signal once per thread that
//! outlived the one that forked it. Instead a small watcher process, forked before the command,
//! holds the read end of a pipe whose write end only gpurun holds. The end of gpurun, however it
//! comes, closes that pipe, and only then, once, the watcher sends the signal through a pidfd
//! (which cannot reach a reused PID). When the command ends first, or gpurun stops it, the
//! watcher just exits. It blocks every signal, like gpurun, and sits in gpurun's process group.
//!
//! For a container run the command is the container's client, and the container is the
//! runtime's: after signalling the client, the watcher becomes `<client> kill --signal N <ID>`
//! (the ID read from the --cidfile then), so the container gets the signal whatever the
//! client's --sig-proxy.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{fork, pipe2, ForkResult, Pid};

/// The watcher, from gpurun's side.
pub struct Watcher {
    pid: Pid,
    /// Dropped (closed) only by gpurun's death or `stop`.
    pipe: OwnedFd,
}

/// pidfd_open(2) and pidfd_send_signal(2), which nix does not wrap. `None` when the kernel is
/// older than 5.3.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a PID and flags; a descriptor it returns is new, and ours alone.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        (fd >= 0).then(|| <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32))
    }
}

fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) {
    // SAFETY: pidfd_send_signal with a valid descriptor, a signal number and no siginfo.
    unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, std::ptr::null::<u8>(), 0)
    };
}

/// `<client> <globals> kill --signal N`, prepared before the fork (no allocation after it),
/// and the file the container's ID is in.
pub struct ContainerKill {
    pub argv: Vec<std::ffi::CString>,
    pub cidfile: std::ffi::CString,
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
    // stdout belongs to the command: the client's kill prints the ID there.
    // SAFETY: a NUL-terminated path; dup2 onto 1 and closing our copy touch no memory.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
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

/// The watcher's whole life, after the fork: async-signal-safe calls only.
fn watch(pipe: OwnedFd, signal: i32, container: Option<ContainerKill>) -> ! {
    let _ = nix::sys::prctl::set_name(c"gpurun-watcher");
    let mut pid = [0u8; 4];
    // The command's PID comes first; EOF before it: gpurun ended before starting it.
    if nix::unistd::read(&pipe, &mut pid) != Ok(4) {
        signal_hook::low_level::exit(0);
    }
    let pid = i32::from_ne_bytes(pid);
    let Some(command) = pidfd_open(pid) else {
        // No pidfds: the PID is safe to use while the command is gpurun's unreaped child,
        // which it is until gpurun (which then tells us to stop) or its death.
        if wait_for_end(&pipe, None) {
            crate::process::signals::send(pid as u32, signal);
        }
        signal_hook::low_level::exit(0)
    };
    if wait_for_end(&pipe, Some(&command)) {
        pidfd_send_signal(&command, signal);
        if let Some(kill) = &container {
            exec_kill(kill);
        }
    }
    signal_hook::low_level::exit(0)
}

/// Waits until gpurun dies (true), or says stop, or the command ends (false).
fn wait_for_end(pipe: &OwnedFd, command: Option<&OwnedFd>) -> bool {
    loop {
        let mut fds = [
            PollFd::new(std::os::fd::AsFd::as_fd(pipe), PollFlags::POLLIN),
            PollFd::new(std::os::fd::AsFd::as_fd(command.unwrap_or(pipe)), PollFlags::POLLIN),
        ];
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

impl Watcher {
    /// Forks the watcher. Returns None if that fails (the command then runs without a
    /// parent-death signal, which is said).
    pub fn start(signal: i32, container: Option<ContainerKill>) -> Option<Watcher> {
        let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC).ok()?;
        // SAFETY: the child runs only `watch`: async-signal-safe calls on descriptors it owns,
        // ending in _exit.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(write_end);
                watch(read_end, signal, container)
            }
            Ok(ForkResult::Parent { child }) => Some(Watcher { pid: child, pipe: write_end }),
            Err(error) => {
                tracing::warn!("no parent-death signal for the command: cannot start its watcher: {error}");
                None
            }
        }
    }

    /// Tells the watcher which process to signal.
    pub fn track(&self, command: u32) {
        let _ = nix::unistd::write(&self.pipe, &(command as i32).to_ne_bytes());
    }

    /// gpurun lives on to the end: the watcher leaves, and is reaped.
    pub fn stop(self) {
        let _ = nix::unistd::write(&self.pipe, &[1]);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}
