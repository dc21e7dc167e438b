//! gpurun's own process, which every stage shares: descriptors 0-2, the signals it reads
//! instead of letting them act, what `/proc` says about processes, and the children gpurun
//! starts (the command, its parent-death watcher). Every `unsafe` of gpurun's own outside the
//! driver's seam (probe/nvml/) is in this folder: the rest of the tree calls safe functions.

pub(crate) mod death;
pub(crate) mod environment;
pub(crate) mod exec_file;
pub(crate) mod holder;
pub(crate) mod logging;
pub(crate) mod procfs;
pub(crate) mod replace;
pub(crate) mod signals;
pub(crate) mod spawn;
pub(crate) mod stdio;
pub(crate) mod vm_child;
pub(crate) mod wake;

/// One malloc arena for all of gpurun's threads: the probe thread (and any thread the library
/// starts) would otherwise get an arena of its own, a few hundred KiB of resident memory that
/// gpurun, resident for the command's whole life, does not need (DESIGN 13: under 4 MiB).
pub(crate) fn one_malloc_arena() {
    // SAFETY: mallopt only changes an allocator setting; called before any thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// 32 random bits (std's per-process hash keys, salted), for names made exclusively, that
/// another user should not guess: the retry after a name already taken uses another `salt`.
pub(crate) fn random_bits(salt: u32) -> u32 {
    std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), salt) as u32
}

/// A change in a child's state, as waitpid(2) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildEvent {
    Exited(u8),
    /// Killed by this signal (real-time ones included, which nix's `WaitStatus` cannot hold).
    Signaled(i32),
    Stopped(i32),
    /// Continued by a SIGCONT (reported where stops are).
    Continued,
}

/// What one non-blocking wait for children found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaped {
    Child(u32, ChildEvent),
    /// Children exist, none has changed.
    Nothing,
    /// gpurun has no children left at all (ECHILD).
    NoChildren,
}

/// Collects one child's state change without blocking. `pid` None: any child. `stops`: also
/// report job-control stops (WUNTRACED).
pub(crate) fn reap(pid: Option<u32>, stops: bool) -> Reaped {
    let mut status = 0;
    let flags = libc::WNOHANG | if stops { libc::WUNTRACED | libc::WCONTINUED } else { 0 };
    let target = pid.map(|p| p as libc::pid_t).unwrap_or(-1);
    // SAFETY: waitpid writes the status into a local.
    let found = unsafe { libc::waitpid(target, &mut status, flags) };
    match found {
        0 => Reaped::Nothing,
        n if n < 0 => match nix::errno::Errno::last() {
            nix::errno::Errno::ECHILD => Reaped::NoChildren,
            _ => Reaped::Nothing,
        },
        n => {
            let event = if libc::WIFEXITED(status) {
                ChildEvent::Exited(libc::WEXITSTATUS(status) as u8)
            } else if libc::WIFSIGNALED(status) {
                ChildEvent::Signaled(libc::WTERMSIG(status))
            } else if libc::WIFSTOPPED(status) {
                ChildEvent::Stopped(libc::WSTOPSIG(status))
            } else if libc::WIFCONTINUED(status) {
                ChildEvent::Continued
            } else {
                return Reaped::Nothing;
            };
            Reaped::Child(n as u32, event)
        }
    }
}
