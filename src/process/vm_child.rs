//! Children that share gpurun's memory until they exec or exit: clone(2) with CLONE_VM, as
//! glibc's posix_spawn does, but without CLONE_VFORK, so gpurun runs on meanwhile (the
//! command's child waits for gpurun's go, and the watcher waits for gpurun's end).
//!
//! A fork copies gpurun's page tables (the NVML library, its heap), makes every page gpurun
//! writes afterwards fault once more for its copy, and tears the copy down again at the exec or
//! the exit: about 0.3 ms per child, and the command's child and the watcher were a fifth of a
//! launch (doc/performance.md). Such a child costs what a thread does.
//!
//! What the child may do is narrower than after a fork, and every caller keeps to it:
//! - Memory it reads (its body and what the body borrows) must stay valid until it has exec'd
//!   or exited: gpurun frees nothing the child uses before then, or never frees it.
//! - It shares its thread-local storage with the thread that cloned it, errno included: a
//!   failing call in the child writes the parent thread's errno. Each caller says why the
//!   parent thread reads no errno while its child can fail a call (or makes none that fail).
//! - No allocation, no locks (as after a fork): async-signal-safe calls only.
//! - Signal dispositions are the child's own copy (no CLONE_SIGHAND), its mask its own.
//! - Its descriptors are a copy of gpurun's table (no CLONE_FILES), gpurun's ends of the pipes
//!   made for it included: it closes those first, or gpurun's death would not read as their
//!   end of file.
//!
//! Where such a child is refused (qemu-user, a seccomp filter) or would abort the process
//! (valgrind), the child is forked instead: the same body, the same guarantees (the go barrier,
//! exec errors through the pipe), at a fork's cost.

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, mprotect, munmap, MapFlags, ProtFlags};
use nix::unistd::Pid;

/// A child's stack: mapped without reserving memory (only the pages it touches are
/// resident), with a guard page below it, so that an overflow faults instead of writing
/// over gpurun's memory.
pub(crate) struct Stack {
    base: NonNull<c_void>,
    length: usize,
}

const GUARD: usize = 4096;

impl Stack {
    pub(crate) fn new(length: usize) -> nix::Result<Stack> {
        let length = length.max(2 * GUARD);
        // SAFETY: a new private anonymous mapping, aliasing nothing.
        let base = unsafe {
            mmap_anonymous(
                None,
                NonZeroUsize::new(length).expect("a stack has a length"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_STACK | MapFlags::MAP_NORESERVE,
            )?
        };
        // SAFETY: the lowest page of the mapping just made, which nothing uses yet.
        if let Err(error) = unsafe { mprotect(base, GUARD, ProtFlags::PROT_NONE) } {
            // SAFETY: the mapping just made, unused.
            let _ = unsafe { munmap(base, length) };
            return Err(error);
        }
        Ok(Stack { base, length })
    }

    /// Kept for as long as gpurun lives: for a child that may outlive every point at which
    /// gpurun could know it no longer needs its stack.
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }

    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, 16-byte aligned (mappings are page-aligned).
        unsafe { self.base.as_ptr().cast::<u8>().add(self.length).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, and (by `start`'s contract) no child uses it any more.
        let _ = unsafe { munmap(self.base, self.length) };
    }
}

/// Starts `body` as a child process on `stack`, in gpurun's memory where the kernel lets it
/// (else as a fork: see `shared_memory_refused`); the child's exit status is what `body`
/// returns, if it returns.
///
/// # Safety
/// The module's rules: `body` and `stack` outlive the child's use of them (until its exec or
/// exit), and `body` makes async-signal-safe calls only, whose errno the parent thread does
/// not read meanwhile.
pub(crate) unsafe fn start<F: Fn() -> i32>(stack: &Stack, body: &F) -> nix::Result<Pid> {
    extern "C" fn run<F: Fn() -> i32>(body: *mut c_void) -> libc::c_int {
        // SAFETY: `start`'s caller keeps the body alive while the child runs.
        let body = unsafe { &*(body as *const F) };
        body()
    }
    if !shared_memory_refused() {
        // SAFETY: the flags share only memory (not descriptors, handlers or the thread group);
        // the stack and the argument are valid for the child's life, by the caller's promise.
        let pid = unsafe {
            libc::clone(
                run::<F>,
                stack.top(),
                libc::CLONE_VM | libc::SIGCHLD,
                body as *const F as *mut c_void,
            )
        };
        match Errno::result(pid) {
            Ok(pid) => return Ok(Pid::from_raw(pid)),
            // qemu-user refuses a CLONE_VM without the thread flags (EINVAL), a seccomp filter
            // may answer EPERM or ENOSYS: the fork below gives the same child, only dearer.
            Err(Errno::EINVAL | Errno::EPERM | Errno::ENOSYS) => REFUSED.store(true, Ordering::Relaxed),
            Err(error) => return Err(error),
        }
    }
    // SAFETY: the child runs only `body`, which keeps to async-signal-safe calls (what a fork
    // of a process with threads allows), then _exits without running gpurun's exit handlers.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(child),
        nix::unistd::ForkResult::Child => {
            let status = body();
            // SAFETY: ends the child alone.
            unsafe { libc::_exit(status) }
        }
    }
}

/// Set once a CLONE_VM child was refused: later children are forked without asking again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether children must be forked: the kernel (or an emulator or filter in front of it) refused
/// a CLONE_VM child before, or gpurun runs under valgrind, which aborts the whole process on a
/// clone whose flags it does not know ("Unsupported clone() flags: 0x111") instead of failing
/// the call. valgrind's preload library in LD_PRELOAD is how its tools are recognised (it puts
/// itself there for the program it runs, and takes itself out for the programs that one execs).
fn shared_memory_refused() -> bool {
    static UNDER_VALGRIND: OnceLock<bool> = OnceLock::new();
    REFUSED.load(Ordering::Relaxed)
        || *UNDER_VALGRIND.get_or_init(|| {
            std::env::var_os("LD_PRELOAD")
                .is_some_and(|preload| preload.as_encoded_bytes().windows(10).any(|w| w == b"vgpreload_"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn the_child_writes_the_parents_memory_and_exits_with_its_status() {
        let seen = AtomicU32::new(0);
        let stack = Stack::new(64 * 1024).unwrap();
        let body = || {
            seen.store(std::process::id() + 1, Ordering::SeqCst);
            // SAFETY: ends the child alone.
            unsafe { libc::_exit(7) }
        };
        // SAFETY: `body` and `stack` outlive the child (it is reaped below); it makes one store
        // and _exit, which fails no call.
        let child = unsafe { start(&stack, &body) }.unwrap();
        let status = nix::sys::wait::waitpid(child, None).unwrap();
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 7));
        // A process of its own (getpid there was the child's), writing the parent's memory.
        assert_ne!(child.as_raw() as u32, std::process::id());
        assert_eq!(seen.load(Ordering::SeqCst), child.as_raw() as u32 + 1);
    }
}
