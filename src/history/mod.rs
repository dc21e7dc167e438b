//! Job history (DESIGN 9): every supervised run appends its report, with when, who, where and
//! what was asked, to `$XDG_STATE_HOME/gpurun/history.jsonl`. Read back by `--history` and by
//! `--min-free auto` (see `sizing`).
//!
//! One record is one line, written with one `write` on an `O_APPEND` descriptor under an
//! exclusive `flock` of the file, so concurrent runs never interleave; when the file grows past
//! `LIMIT_BYTES` the newest half is kept (rewritten and renamed under the same lock, and a
//! writer that locked the old file looks again). Failing to keep history never fails a job.

pub mod sizing;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

/// The file is trimmed back to half of this when a record takes it past it (about 10,000 runs).
pub const LIMIT_BYTES: u64 = 8 << 20;

/// One run, as the file holds it: the `--report-json` object plus these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Unix time the command started, in seconds.
    pub started: f64,
    pub user: String,
    /// The working directory it ran in.
    pub directory: String,
    /// gpurun's own options, as typed (`--gpus 2 --min-free 20G`).
    pub request: String,
    #[serde(flatten)]
    pub report: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    /// The command's words.
    pub fn command(&self) -> Vec<&str> {
        self.report
            .get("command")
            .and_then(|c| c.as_array())
            .map(|words| words.iter().filter_map(|w| w.as_str()).collect())
            .unwrap_or_default()
    }

    /// The tree's peak memory on each GPU, by UUID.
    pub fn peaks(&self) -> Vec<(String, u64)> {
        self.report
            .get("peak_memory_bytes")
            .and_then(|p| p.as_object())
            .map(|peaks| {
                peaks.iter().filter_map(|(uuid, bytes)| Some((uuid.clone(), bytes.as_u64()?))).collect()
            })
            .unwrap_or_default()
    }
}

/// `$XDG_STATE_HOME/gpurun/history.jsonl`, else `~/.local/state/gpurun/history.jsonl`.
pub fn path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state")))?;
    Some(base.join("gpurun/history.jsonl"))
}

/// Appends `record` to the file at `path` (creating it and its directory, private to the user).
pub fn append(path: &Path, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let file = locked(path)?;
    (&*file).write_all(line.as_bytes())?;
    if file.metadata()?.len() > LIMIT_BYTES {
        trim(path)?;
    }
    Ok(())
}

/// The longest a run's end waits for another run's hold on the history (a stuck or stopped
/// gpurun must not keep this one from exiting).
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The file at `path`, opened for appending and locked; opened again if a trim replaced it
/// while this process waited for the lock. A regular file only (a FIFO would block the trim).
fn locked(path: &Path) -> std::io::Result<Flock<File>> {
    let give_up = Instant::now() + LOCK_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        let file = OpenOptions::new()
            .append(true)
            .read(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        if !file.metadata()?.file_type().is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => file,
            Err((_, Errno::EWOULDBLOCK)) if Instant::now() < give_up => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
                continue;
            }
            Err((_, errno)) => return Err(std::io::Error::from(errno)),
        };
        let current = std::fs::symlink_metadata(path)?;
        let held = file.metadata()?;
        if current.ino() == held.ino() && current.dev() == held.dev() {
            return Ok(file);
        }
    }
}

/// Keeps the newest half of the file: whole lines, written to a new file renamed over it.
/// Called with the file locked.
fn trim(path: &Path) -> std::io::Result<()> {
    let text = std::fs::read(path)?;
    // The first whole line after the point that leaves half the limit.
    let cut = text.len().saturating_sub((LIMIT_BYTES / 2) as usize);
    let start = text[cut..].iter().position(|&b| b == b'\n').map_or(text.len(), |at| cut + at + 1);
    let fresh = path.with_extension("jsonl.trim");
    let mut out = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&fresh)?;
    out.write_all(&text[start..])?;
    std::fs::rename(&fresh, path)
}

/// Every record in the file, oldest first; lines that do not parse are skipped.
pub fn read(path: &Path) -> Vec<Record> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> Record {
        let mut report = serde_json::Map::new();
        report.insert("command".into(), serde_json::json!(["job", n.to_string()]));
        report.insert("peak_memory_bytes".into(), serde_json::json!({"GPU-a": n}));
        Record { started: n as f64, user: "u".into(), directory: "/d".into(), request: String::new(), report }
    }

    #[test]
    fn records_round_trip_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/gpurun/history.jsonl");
        append(&path, &record(1)).unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{half a line\n").unwrap();
        append(&path, &record(2)).unwrap();
        let read = read(&path);
        assert_eq!(read, vec![record(1), record(2)]);
        assert_eq!(read[1].command(), ["job", "2"]);
        assert_eq!(read[1].peaks(), [("GPU-a".to_owned(), 2)]);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_held_lock_or_a_fifo_costs_at_most_the_patience() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        append(&path, &record(1)).unwrap();
        let holder = Flock::lock(std::fs::File::open(&path).unwrap(), FlockArg::LockExclusive).unwrap();
        let started = Instant::now();
        assert!(append(&path, &record(2)).is_err());
        assert!(started.elapsed() < LOCK_PATIENCE + Duration::from_secs(1));
        drop(holder);
        append(&path, &record(3)).unwrap();
        assert_eq!(read(&path).len(), 2);
        let fifo = dir.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(append(&fifo, &record(4)).is_err());
    }

    #[test]
    fn trimming_keeps_whole_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let padding = "x".repeat(100_000);
        let mut n = 0;
        while std::fs::metadata(&path).map_or(0, |m| m.len()) <= LIMIT_BYTES - 200_000 {
            let mut big = record(n);
            big.request = padding.clone();
            append(&path, &big).unwrap();
            n += 1;
        }
        let mut big = record(n);
        big.request = padding.clone();
        append(&path, &big).unwrap();
        append(&path, &big).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= LIMIT_BYTES / 2 + 200_000, "{size}");
        let kept = read(&path);
        assert_eq!(kept.last().unwrap().started, n as f64);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), kept.len(), "only whole records");
    }
}
