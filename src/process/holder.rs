//! The holder of `--hold` (issue 66): a process of its own that keeps a reservation for a
//! while, with no command and no daemon. The caller's gpurun forks before anything else starts
//! (no thread exists yet); the child chooses and reserves, says the choice on the caller's
//! stdout, then tells the parent so and leaves the caller's terminal and session. The parent
//! exits 0 then, or, where the child ended first (a refusal: 75, 125), with the child's status,
//! so that `gpurun --hold` answers as a launch would.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::ForkResult;

/// Which side of the fork this is.
pub(crate) enum Forked {
    /// The caller's gpurun: its exit status, once the holder has said how it went.
    Caller(i32),
    /// The holder, with the pipe that tells the caller it holds.
    Holder(Report),
}

/// The holder's end of the pipe to the caller.
pub(crate) struct Report(std::fs::File);

/// Forks the holder. Call before any thread exists (the probe thread starts in the holder).
pub(crate) fn fork() -> std::io::Result<Forked> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: no other thread exists yet (the caller's contract), so the child may run any code.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => {
            drop(read);
            Ok(Forked::Holder(Report(std::fs::File::from(write))))
        }
        ForkResult::Parent { child } => {
            drop(write);
            Ok(Forked::Caller(wait_for_word(read, child)))
        }
    }
}

/// 0 once the holder says it holds; else the holder's own status when it ends without saying.
fn wait_for_word(read: OwnedFd, child: nix::unistd::Pid) -> i32 {
    let mut word = [0u8; 1];
    let said = std::fs::File::from(read).read(&mut word).unwrap_or(0);
    if said == 1 {
        return 0;
    }
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, signal, _)) => return 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return crate::exit_code::GPURUN_ERROR.into(),
        }
    }
}

impl Report {
    /// Tells the caller the GPUs are held (it exits 0), then leaves its terminal and session:
    /// stdin, stdout and stderr become /dev/null, and the holder a session of its own, so
    /// that neither the caller's shell ending nor its Ctrl-C ends the hold.
    pub(crate) fn detach(mut self) -> std::io::Result<()> {
        self.0.write_all(&[0])?;
        drop(self);
        let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
        nix::unistd::dup2_stdin(&null)?;
        nix::unistd::dup2_stdout(&null)?;
        nix::unistd::dup2_stderr(&null)?;
        nix::unistd::setsid()?;
        Ok(())
    }
}
