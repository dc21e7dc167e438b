//! `--hold` and `--release` on the reservation side (issue 66): what a hold's lease says it is,
//! and ending one's own holds. A hold is an ordinary lease whose holder is a detached gpurun
//! with no command (`process::holder`); it ends at its deadline, or at a TERM from `--release`.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::reserve::lease::{self, Lease};
use crate::reserve::lockdir::{current_uid, LockDir};

/// What names a hold in its lease (and so in `--list`): how long, and until when.
const HOLD: &str = "gpurun --hold";

/// A hold's lease command: `gpurun --hold 2h (until 2026-12-04T19:30:00Z)`.
pub(crate) fn lease_command(duration: Duration) -> String {
    let until = crate::options::clock::rfc3339(SystemTime::now() + duration);
    format!("{HOLD} {} (until {until})", crate::options::duration::compact(duration))
}

/// The caller's own live holds in `dir`.
fn own_holds(dir: &LockDir) -> Vec<Lease> {
    let me = current_uid();
    lease::live(dir, false)
        .into_iter()
        .filter(|lease| lease.uid == me && lease.command.starts_with(HOLD))
        .collect()
}

/// How long `--release` waits for a holder to let go once told.
const LET_GO: Duration = Duration::from_secs(5);

/// Ends the caller's holds (TERM to each holder), and waits until they have let go. Returns
/// what was released, in words.
pub(crate) fn release(lock_dir: &Path) -> Result<Vec<String>, String> {
    if !lock_dir.exists() {
        return Ok(Vec::new());
    }
    let dir = LockDir::open(lock_dir, false).map_err(|error| error.to_string())?;
    let holds = own_holds(&dir);
    let mut holders: Vec<u32> = holds.iter().map(|lease| lease.pid).collect();
    holders.sort_unstable();
    holders.dedup();
    for &pid in &holders {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    }
    let deadline = Instant::now() + LET_GO;
    while Instant::now() < deadline && own_holds(&dir).iter().any(|lease| holders.contains(&lease.pid)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(holds
        .iter()
        .map(|lease| format!("{} (holder PID {}: {})", lease.uuid, lease.pid, lease.command))
        .collect())
}
