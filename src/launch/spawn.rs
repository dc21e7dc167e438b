//! Starting the command: its environment, the caller's signal state, the parent-death signal,
//! and what its end means as an exit status.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;

use crate::exit_code;
use crate::launch::signals::CallerState;

/// How to start the command.
pub struct Launch<'a> {
    pub command: &'a [OsString],
    pub variables: &'a [(String, String)],
    pub caller: CallerState,
    /// Sent to the child if gpurun dies first (PR_SET_PDEATHSIG); None: nothing.
    pub parent_death_signal: Option<libc::c_int>,
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}: cannot execute: {1}")]
    NotExecutable(String, io::Error),
}

impl LaunchError {
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::NotFound(_) => exit_code::NOT_FOUND,
            LaunchError::NotExecutable(..) => exit_code::NOT_EXECUTABLE,
        }
    }

    fn from_io(program: &OsStr, error: io::Error) -> LaunchError {
        let shown = program.to_string_lossy().into_owned();
        match error.kind() {
            io::ErrorKind::NotFound => LaunchError::NotFound(shown),
            _ => LaunchError::NotExecutable(shown, error),
        }
    }
}

/// `replaces_gpurun`: for --exec, where there is no parent to outlive (the parent-death signal
/// would be about gpurun's own parent, which may rightly end first).
fn command(launch: &Launch, replaces_gpurun: bool) -> Command {
    let mut command = Command::new(&launch.command[0]);
    command.args(&launch.command[1..]);
    for (name, value) in launch.variables {
        command.env(name, value);
    }
    let caller = launch.caller;
    let death_signal = if replaces_gpurun { None } else { launch.parent_death_signal };
    // SAFETY: getpid is async-signal-safe; the value is read before fork.
    let parent_pid = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (sigaction, sigprocmask, prctl, getppid, raise), allocating nothing.
    unsafe {
        command.pre_exec(move || {
            caller.restore_in_child();
            if let Some(signal) = death_signal {
                libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0);
                // gpurun may have died before the prctl took effect: then act on it now.
                if libc::getppid() != parent_pid {
                    libc::raise(signal);
                }
            }
            Ok(())
        });
    }
    command
}

/// Starts the command as gpurun's child; returns its PID.
pub fn spawn(launch: &Launch) -> Result<u32, LaunchError> {
    let child = command(launch, false).spawn().map_err(|e| LaunchError::from_io(&launch.command[0], e))?;
    // The Child handle is dropped without waiting: the supervisor reaps with waitpid.
    Ok(child.id())
}

/// `--exec`: becomes the command. Returns only if that failed.
pub fn exec(launch: &Launch) -> LaunchError {
    let mut launch_command = command(launch, true);
    LaunchError::from_io(&launch.command[0], launch_command.exec())
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Exited(u8),
    Signaled(libc::c_int),
}

impl End {
    pub fn from_wait_status(status: libc::c_int) -> Option<End> {
        let status = std::process::ExitStatus::from_raw(status);
        match (status.code(), status.signal()) {
            (Some(code), _) => Some(End::Exited(code as u8)),
            (None, Some(signal)) => Some(End::Signaled(signal)),
            _ => None,
        }
    }
}
