//! Descriptors 0, 1 and 2. Started from cron, a daemon or `2>&-`, gpurun may find them closed;
//! then the first file it opens (a lease, the `--report-json` file) would become its stdout or
//! stderr and receive its log lines. So before anything else each closed one is filled with
//! `/dev/null`, as daemons and coreutils do. The placeholders are close-on-exec: the command
//! still starts with exactly the caller's descriptors.

use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use crate::process::procfs;

/// Whether the caller left stdout closed: then a mode's output cannot be written.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Fills every closed descriptor among 0-2 with `/dev/null`.
pub fn ensure_open() {
    for fd in (0..3).filter(|fd| !procfs::is_open(*fd)) {
        if fd == 1 {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
        // open() returns the lowest free number: the closed one, as 0..fd are open by now.
        // (Anything else, such as a /proc that is not mounted, is closed again on drop.)
        if let Ok(null) = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()) {
            if null.as_raw_fd() == fd {
                // Kept for the life of the process.
                let _ = null.into_raw_fd();
            }
        }
    }
}

/// Writes a mode's output (`--list`, `--export`, help...) to stdout. Failing to write it is an
/// error, as in coreutils: a closed stdout (which gpurun filled with /dev/null for itself) or a
/// full disk must not look like success.
pub fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Err(std::io::Error::from_raw_os_error(libc::EBADF));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
}
