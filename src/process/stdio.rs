//! Descriptors 0, 1 and 2. Started from cron, a daemon or `2>&-`, gpurun may find them closed;
//! then the first file it opens (a lease, the `--report-json` file) would become its stdout or
//! stderr and receive its log lines. So before anything else each closed one is filled with
//! `/dev/null`, as daemons and coreutils do. The placeholders are close-on-exec: the command
//! still starts with exactly the caller's descriptors.

use std::os::fd::{AsRawFd, IntoRawFd};

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use crate::process::procfs;

/// Which of 0-2 the caller left closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Closed {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

static CLOSED: std::sync::OnceLock<Closed> = std::sync::OnceLock::new();

/// What `ensure_open` found at startup.
pub fn closed_at_start() -> Closed {
    CLOSED.get().copied().unwrap_or_default()
}

/// Fills every closed descriptor among 0-2 with `/dev/null`; says which were closed.
pub fn ensure_open() -> Closed {
    let closed = [0, 1, 2].map(|fd| !procfs::is_open(fd));
    for (fd, _) in closed.iter().enumerate().filter(|(_, closed)| **closed) {
        // open() returns the lowest free number: the closed one, as 0..fd are open by now.
        // (Anything else, such as a /proc that is not mounted, is closed again on drop.)
        if let Ok(null) = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()) {
            if null.as_raw_fd() == fd as i32 {
                // Kept for the life of the process.
                let _ = null.into_raw_fd();
            }
        }
    }
    let closed = Closed { stdin: closed[0], stdout: closed[1], stderr: closed[2] };
    let _ = CLOSED.set(closed);
    closed
}

/// Writes a mode's output (`--list`, `--export`, help...) to stdout. Failing to write it is an
/// error, as in coreutils: a closed stdout (which gpurun filled with /dev/null for itself) or a
/// full disk must not look like success.
pub fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if closed_at_start().stdout {
        return Err(std::io::Error::from_raw_os_error(libc::EBADF));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
}
