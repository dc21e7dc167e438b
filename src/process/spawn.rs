//! Starting the command: a child in gpurun's memory (`vm_child`: no copy of its page tables),
//! then exec in the child with the caller's signal state and the chosen environment; or
//! `--exec`, which replaces gpurun.
//!
//! gpurun starts its child by hand rather than through `std::process::Command` for one reason:
//! a terminal signal (Ctrl-C) that reaches gpurun just before the clone was never seen by the
//! command, one that arrives just after reaches both, and from the signalfd the two look the
//! same. So the child waits, its signals still blocked, until gpurun has read every signal that
//! arrived so far and passed those on (`before_go`); a signal sent to the child that it already
//! has is merged with the pending one by the kernel, so it arrives exactly once either way. Only
//! then does the child restore the caller's mask and exec. The exec's own failure (not found,
//! not executable) comes back through a close-on-exec pipe, so gpurun knows the command really
//! started before it says so.

use std::ffi::{c_char, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::unistd::pipe2;

use crate::exit_code;
use crate::process::signals::CallerState;
use crate::process::vm_child::{self, Stack};

/// How to start the command.
pub(crate) struct Launch<'a> {
    pub(crate) command: &'a [OsString],
    /// Set in the command's environment, over what gpurun inherited.
    pub(crate) variables: &'a [(String, String)],
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("{0}: command not found{hint}", hint = near_miss(.0))]
    NotFound(String),
    #[error("{0}: cannot execute: {1}")]
    NotExecutable(String, io::Error),
    #[error("cannot start {0}: {1}")]
    Setup(String, io::Error),
    #[error("cannot create the --report-json file {0}: {1}")]
    ReportFile(String, io::Error),
}

/// A bare program name that is not on PATH where its `3` is (`python`, `pip` on a system with
/// only `python3`, `pip3`): said, as the shell's command-not-found handler would.
fn near_miss(program: &str) -> String {
    if program.contains('/') {
        return String::new();
    }
    let three = format!("{program}3");
    match on_path(&three) {
        Some(_) => format!(" ({three} is: -- {three} ...)"),
        None => String::new(),
    }
}

/// Where `program` (a bare name) is on PATH, as execvp would find it: the first file of that
/// name with an execute bit.
pub(crate) fn on_path(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

impl LaunchError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            LaunchError::NotFound(_) => exit_code::NOT_FOUND,
            LaunchError::NotExecutable(..) => exit_code::NOT_EXECUTABLE,
            LaunchError::Setup(..) | LaunchError::ReportFile(..) => exit_code::GPURUN_ERROR,
        }
    }

    fn from_errno(program: &OsStr, errno: Errno) -> LaunchError {
        let shown = program.to_string_lossy().into_owned();
        match errno {
            Errno::ENOENT => LaunchError::NotFound(shown),
            other => LaunchError::NotExecutable(shown, io::Error::from(other)),
        }
    }
}

/// Everything exec needs, built before the child starts: the child must not allocate (another
/// thread may hold the allocator's lock, and the allocator is gpurun's own).
struct Prepared {
    program: CString,
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_pointers: Vec<*const c_char>,
    envp_pointers: Vec<*const c_char>,
}

fn c_string(bytes: &[u8], program: &OsStr) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| {
        LaunchError::NotExecutable(
            program.to_string_lossy().into_owned(),
            io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte"),
        )
    })
}

fn prepare(launch: &Launch) -> Result<Prepared, LaunchError> {
    let program_name = launch.command[0].as_os_str();
    let program = c_string(program_name.as_bytes(), program_name)?;
    let argv: Vec<CString> = launch
        .command
        .iter()
        .map(|word| c_string(word.as_bytes(), program_name))
        .collect::<Result<_, _>>()?;
    let mut envp = Vec::new();
    // The environment as gpurun was given it (`environment::held`: what its own NVML must not
    // see), under the plan's variables.
    let inherited = std::env::vars_os().chain(crate::process::environment::held().iter().cloned());
    for (name, value) in inherited {
        if launch.variables.iter().any(|(set, _)| OsStr::new(set) == name) {
            continue;
        }
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        // The kernel's environment cannot hold a NUL inside an entry: skip rather than fail.
        if let Ok(entry) = CString::new(entry) {
            envp.push(entry);
        }
    }
    for (name, value) in launch.variables {
        envp.push(c_string(format!("{name}={value}").as_bytes(), program_name)?);
    }
    let pointers = |strings: &[CString]| {
        strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect::<Vec<_>>()
    };
    Ok(Prepared {
        program,
        argv_pointers: pointers(&argv),
        envp_pointers: pointers(&envp),
        _argv: argv,
        _envp: envp,
    })
}

/// Gives the process the caller's signal state back and execs; returns only on failure.
fn restore_and_exec(prepared: &Prepared, caller: &CallerState) -> Errno {
    let _ = caller.mask.thread_set_mask();
    // SAFETY: signal() with SIG_IGN installs no handler; execvpe gets NUL-terminated strings
    // and NULL-terminated pointer arrays that `prepared` keeps alive.
    unsafe {
        if caller.is_ignored(libc::SIGCHLD) {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        }
        libc::execvpe(
            prepared.program.as_ptr(),
            prepared.argv_pointers.as_ptr(),
            prepared.envp_pointers.as_ptr(),
        );
    }
    Errno::last()
}

/// The pipes' descriptors in the child's copy of the table: its own ends, and the parent's.
#[derive(Clone, Copy)]
struct ChildEnds {
    go: RawFd,
    report: RawFd,
    parents: [RawFd; 2],
}

/// The child's side: async-signal-safe calls only, no allocation, no locks, on memory the
/// parent keeps until the child has exec'd or exited (`vm_child`).
fn child(prepared: &Prepared, caller: &CallerState, ends: ChildEnds) -> i32 {
    let ChildEnds { go, report, parents } = ends;
    let mut byte = [0u8];
    // SAFETY: the child's own copies of descriptors the parent made for it, read into and
    // written from its stack; the parent's ends are closed first (else gpurun's death would
    // never read as the end of the go pipe).
    unsafe {
        parents.iter().for_each(|fd| {
            libc::close(*fd);
        });
        if libc::read(go, byte.as_mut_ptr().cast(), 1) != 1 {
            // gpurun is gone before saying go.
            libc::_exit(i32::from(exit_code::GPURUN_ERROR));
        }
        let errno = restore_and_exec(prepared, caller) as i32;
        libc::write(report, (&errno as *const i32).cast(), 4);
        libc::_exit(i32::from(exit_code::NOT_FOUND))
    }
}

/// Starts the command as gpurun's child and returns its PID once it has exec'd. `before_go`
/// runs while the child exists but waits with its signals blocked (see the module comment).
pub(crate) fn spawn(
    launch: &Launch,
    caller: &CallerState,
    before_go: impl FnOnce(u32),
) -> Result<u32, LaunchError> {
    let prepared = prepare(launch)?;
    let shown = || launch.command[0].to_string_lossy().into_owned();
    let setup = |error: Errno| LaunchError::Setup(shown(), io::Error::from(error));
    let (go_read, go_write) = pipe2(OFlag::O_CLOEXEC).map_err(setup)?;
    let (report_read, report_write) = pipe2(OFlag::O_CLOEXEC).map_err(setup)?;
    // Room for execvpe's own: a path buffer, and the argument vector it builds for a script
    // without a #! line (what glibc's posix_spawn allows for).
    let stack =
        Stack::new(64 * 1024 + (launch.command.len() + 2) * std::mem::size_of::<usize>()).map_err(setup)?;
    let ends = ChildEnds {
        go: go_read.as_raw_fd(),
        report: report_write.as_raw_fd(),
        parents: [go_write.as_raw_fd(), report_read.as_raw_fd()],
    };
    let body = || child(&prepared, caller, ends);
    // SAFETY: `body` and `stack` live until the child has exec'd (the report pipe's end of
    // file) or has exited (it is reaped below), and `child` keeps to vm_child's rules. Its
    // failed execs write this thread's errno: meanwhile this thread only writes the go byte,
    // closes its end and blocks reading the report, none of which reads errno.
    let pid = unsafe { vm_child::start(&stack, &body) }.map_err(setup)?;
    drop(go_read);
    drop(report_write);
    before_go(pid.as_raw() as u32);
    let _ = nix::unistd::write(&go_write, &[1]);
    drop(go_write);
    let mut errno = [0u8; 4];
    match read_full(&report_read, &mut errno) {
        4 => {
            // The child has ended (it wrote and _exited): collect it.
            let _ = nix::sys::wait::waitpid(pid, None);
            Err(LaunchError::from_errno(&launch.command[0], Errno::from_raw(i32::from_ne_bytes(errno))))
        }
        _ => Ok(pid.as_raw() as u32),
    }
}

fn read_full(fd: &OwnedFd, buffer: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buffer.len() {
        match nix::unistd::read(fd, &mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    filled
}

/// `--exec`: becomes the command. Returns only if that failed.
pub(crate) fn exec(launch: &Launch, caller: &CallerState) -> LaunchError {
    match prepare(launch) {
        Ok(prepared) => LaunchError::from_errno(&launch.command[0], restore_and_exec(&prepared, caller)),
        Err(error) => error,
    }
}
