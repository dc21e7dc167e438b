//! Job history (DESIGN 9): every supervised run appends its report, with when, who, where and
//! what was asked, to `$XDG_STATE_HOME/gpurun/history.jsonl`. Read back by `--history` and by
//! `--min-free auto` (see `sizing`).
//!
//! One record is one line, written with one `write` on an `O_APPEND` descriptor under an
//! exclusive `flock` of the file, so concurrent runs never interleave; when the file grows past
//! `LIMIT_BYTES` the newest half is kept (rewritten and renamed under the same lock, and a
//! writer that locked the old file looks again). Failing to keep history never fails a job.
//!
//! The file may sit where someone else can reach (`sudo -E` keeps the caller's `HOME`), so it is
//! handled as hostile: the `gpurun` folder and the file must belong to the user running gpurun
//! and be neither symlinks nor writable by others; everything inside the folder goes through a
//! descriptor of it (`openat`), the trim writes a file created exclusively under a random name
//! and renames it; opens never block (a FIFO), reads take the tail only and go byte by byte, so
//! one bad line costs that line and a 2 GiB file costs no more than an 8 MiB one.

pub(crate) mod sizing;

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

/// The file is trimmed back to half of this when a record takes it past it (about 10,000 runs);
/// reading looks at no more than this much of its end.
pub(crate) const LIMIT_BYTES: u64 = 8 << 20;

const FILE_NAME: &str = "history.jsonl";

/// The folder and the name of the file at `path`.
fn split(path: &Path) -> (&Path, &std::ffi::OsStr) {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    (folder, path.file_name().unwrap_or(std::ffi::OsStr::new(FILE_NAME)))
}
/// One run, as the file holds it: the `--report-json` object plus these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Unix time the command started, in seconds.
    pub(crate) started: f64,
    pub(crate) user: String,
    /// The working directory it ran in.
    pub(crate) directory: String,
    /// gpurun's own options, as typed (`--gpus 2 --min-free 20G`).
    pub(crate) request: String,
    #[serde(flatten)]
    pub(crate) report: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    /// The command's words.
    pub(crate) fn command(&self) -> Vec<&str> {
        self.report
            .get("command")
            .and_then(|c| c.as_array())
            .map(|words| words.iter().filter_map(|w| w.as_str()).collect())
            .unwrap_or_default()
    }

    /// The tree's peak memory on each GPU, by UUID.
    pub(crate) fn peaks(&self) -> Vec<(String, u64)> {
        self.report
            .get("peak_memory_bytes")
            .and_then(|p| p.as_object())
            .map(|peaks| {
                peaks.iter().filter_map(|(uuid, bytes)| Some((uuid.clone(), bytes.as_u64()?))).collect()
            })
            .unwrap_or_default()
    }
}

/// `$XDG_STATE_HOME/gpurun/history.jsonl`, else `~/.local/state/gpurun/history.jsonl`. A
/// relative `XDG_STATE_HOME` is ignored, as the XDG specification says (the history would
/// depend on the directory gpurun runs in).
pub(crate) fn path() -> Option<PathBuf> {
    let absolute = |p: &PathBuf| p.is_absolute();
    let base = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(absolute).or_else(|| {
        std::env::var_os("HOME").map(PathBuf::from).filter(absolute).map(|h| h.join(".local/state"))
    })?;
    Some(base.join("gpurun").join(FILE_NAME))
}

/// Why the history cannot be used as it is.
fn refuse(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, what.to_string())
}

/// The file's folder, opened without following a symlink, and checked: a directory of the user
/// running gpurun that nobody else can write. `create`: make it (mode 700) when it is missing.
fn open_folder(folder: &Path, create: bool) -> std::io::Result<OwnedFd> {
    if create && std::fs::symlink_metadata(folder).is_err() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(folder)?;
    }
    let fd = nix::fcntl::open(
        folder,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| match errno {
        Errno::ELOOP | Errno::ENOTDIR => {
            refuse(format!("{} is not a directory (a symlink?)", folder.display()))
        }
        other => std::io::Error::from(other),
    })?;
    let meta = nix::sys::stat::fstat(&fd)?;
    check_owner(folder, meta.st_uid, meta.st_mode)?;
    Ok(fd)
}

fn check_owner(path: &Path, uid: u32, mode: u32) -> std::io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if uid != me {
        return Err(refuse(format!(
            "{} belongs to {}, not to {} who runs gpurun",
            path.display(),
            crate::process::procfs::describe_uid(uid),
            crate::process::procfs::describe_uid(me)
        )));
    }
    if mode & 0o022 != 0 {
        return Err(refuse(format!("{} is writable by others (mode {:o})", path.display(), mode & 0o7777)));
    }
    Ok(())
}

/// The file in `folder`, opened without following a symlink and without blocking, and checked:
/// a regular file of the user's with one name.
fn open_file(folder: &OwnedFd, shown: &Path, flags: OFlag) -> std::io::Result<File> {
    let fd = openat(
        folder,
        split(shown).1,
        flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|errno| match errno {
        Errno::ELOOP => refuse(format!("{} is a symlink", shown.display())),
        other => std::io::Error::from(other),
    })?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(refuse(format!("{} is not a regular file", shown.display())));
    }
    if meta.nlink() > 1 {
        return Err(refuse(format!("{} has other names (hard links)", shown.display())));
    }
    check_owner(shown, meta.uid(), meta.mode())?;
    Ok(file)
}

/// Appends `record` to the file at `path` (creating it and its folder, private to the user).
/// A torn last line (a full disk cut a record) is closed first, so this record stays whole.
pub(crate) fn append(path: &Path, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let folder = open_folder(split(path).0, true)?;
    let file = locked(&folder, path)?;
    let before = file.metadata()?.len();
    if before > 0 {
        let mut last = [0u8];
        if file.read_at(&mut last, before - 1)? == 1 && last[0] != b'\n' {
            line.insert(0, b'\n');
        }
    }
    (&*file).write_all(&line)?;
    let after = file.metadata()?.len();
    if after > LIMIT_BYTES {
        trim(&folder, split(path).1, &file, after, after.saturating_sub(line.len() as u64))?;
    }
    Ok(())
}

/// The longest a run's end waits for another run's hold on the history (a stuck or stopped
/// gpurun must not keep this one from exiting).
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The file, opened for appending and locked; opened again if a trim replaced it while this
/// process waited for the lock.
fn locked(folder: &OwnedFd, path: &Path) -> std::io::Result<Flock<File>> {
    let give_up = Instant::now() + LOCK_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        let file = open_file(folder, path, OFlag::O_RDWR | OFlag::O_APPEND | OFlag::O_CREAT)?;
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => file,
            Err((_, Errno::EWOULDBLOCK)) if Instant::now() < give_up => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
                continue;
            }
            Err((_, errno)) => return Err(std::io::Error::from(errno)),
        };
        let current =
            nix::sys::stat::fstatat(folder, split(path).1, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
        let held = file.metadata()?;
        if current.st_ino == held.ino() && current.st_dev == held.dev() {
            return Ok(file);
        }
    }
}

/// Keeps the newest half of the file, whole lines, and always the record just appended (it
/// starts at `own_record`): written to a new file created exclusively in the folder, renamed
/// over the old one. Reads the tail only. Called with the file locked.
fn trim(
    folder: &OwnedFd,
    name: &std::ffi::OsStr,
    file: &File,
    length: u64,
    own_record: u64,
) -> std::io::Result<()> {
    let from = length.saturating_sub(LIMIT_BYTES / 2).min(own_record);
    let mut tail = vec![0u8; (length - from) as usize];
    file.read_exact_at(&mut tail, from)?;
    // The first whole line: after a newline (or the record just appended, which is whole).
    let start = if from == own_record {
        0
    } else {
        tail.iter().position(|&b| b == b'\n').map_or(tail.len(), |at| at + 1)
    };
    let (fresh, temporary) = create_exclusive(folder, name)?;
    let written = (&fresh)
        .write_all(&tail[start..])
        .and_then(|()| renameat(folder, temporary.as_str(), folder, name).map_err(std::io::Error::from));
    if written.is_err() {
        let _ = nix::unistd::unlinkat(folder, temporary.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// `.<name>.<random>.trim` in the folder, created exclusively (never over an entry,
/// never through a symlink), mode 600.
fn create_exclusive(folder: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<(File, String)> {
    for attempt in 0..16u32 {
        let random = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), attempt);
        let name = format!(".{}.{random:016x}.trim", name.to_string_lossy());
        match openat(
            folder,
            name.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => return Ok((File::from(fd), name)),
            Err(Errno::EEXIST) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "cannot create a unique file"))
}

/// Every record in the newest `LIMIT_BYTES` of the file, oldest first; lines that are not a
/// record (torn, not UTF-8, not JSON) are skipped. Nothing when the file cannot be trusted.
pub(crate) fn read(path: &Path) -> Vec<Record> {
    let Ok(folder) = open_folder(split(path).0, false) else { return Vec::new() };
    let Ok(file) = open_file(&folder, path, OFlag::O_RDONLY) else { return Vec::new() };
    let length = file.metadata().map_or(0, |m| m.len());
    let from = length.saturating_sub(LIMIT_BYTES);
    let mut tail = vec![0u8; (length - from) as usize];
    let Ok(()) = file.read_exact_at(&mut tail, from) else { return Vec::new() };
    let mut lines = tail.split(|&b| b == b'\n');
    if from > 0 {
        // Started inside a line.
        lines.next();
    }
    lines.filter_map(|line| serde_json::from_slice(line).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, ["history.jsonl"], "no trim file is left");
    }

    /// An 8 MiB file with no newline in its newest half: the run's own record is still kept.
    #[test]
    fn the_runs_own_record_survives_any_trim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut junk = vec![b'{'; LIMIT_BYTES as usize];
        junk.push(b'\n');
        std::fs::write(&path, &junk).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        append(&path, &record(7)).unwrap();
        assert_eq!(read(&path), vec![record(7)]);
        assert!(std::fs::metadata(&path).unwrap().len() < 1000);
    }

    #[test]
    fn a_planted_trim_symlink_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("passwd");
        std::fs::write(&victim, "root:x:0:0\n").unwrap();
        let folder = dir.path().join("gpurun");
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = folder.join("history.jsonl");
        // The old fixed name and any guess at a new one point at the victim.
        std::os::unix::fs::symlink(&victim, folder.join("history.jsonl.trim")).unwrap();
        let line = serde_json::to_string(&record(1)).unwrap() + "\n";
        std::fs::write(&path, line.repeat(LIMIT_BYTES as usize / line.len() + 1)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        append(&path, &record(2)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
        assert_eq!(read(&path).last(), Some(&record(2)));
        assert!(std::fs::metadata(&path).unwrap().len() <= LIMIT_BYTES / 2 + 1000);
    }

    #[test]
    fn symlinks_and_foreign_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
        // The file a symlink: refused, target untouched.
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, real.join("history.jsonl")).unwrap();
        let error = append(&real.join("history.jsonl"), &record(1)).unwrap_err();
        assert!(error.to_string().contains("is a symlink"), "{error}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // The folder a symlink.
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&real, &linked).unwrap();
        assert!(append(&linked.join("history.jsonl"), &record(1)).is_err());
        // A folder others can write.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = append(&open.join("history.jsonl"), &record(1)).unwrap_err();
        assert!(error.to_string().contains("writable by others"), "{error}");
        // A hard link of another file.
        let other = dir.path().join("other");
        std::fs::write(&other, "x").unwrap();
        std::fs::hard_link(&other, real.join("h2.jsonl")).unwrap();
        std::fs::remove_file(real.join("history.jsonl")).unwrap();
        std::fs::rename(real.join("h2.jsonl"), real.join("history.jsonl")).unwrap();
        assert!(append(&real.join("history.jsonl"), &record(1))
            .unwrap_err()
            .to_string()
            .contains("hard links"));
    }

    #[test]
    fn bad_bytes_cost_one_line_and_a_torn_line_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        append(&path, &record(1)).unwrap();
        let mut torn = serde_json::to_vec(&record(2)).unwrap();
        torn.truncate(torn.len() - 5);
        torn.extend_from_slice("\u{e9}".as_bytes().split_at(1).0);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&torn).unwrap();
        append(&path, &record(3)).unwrap();
        assert_eq!(read(&path), vec![record(1), record(3)]);
    }

    #[test]
    fn a_huge_file_is_read_by_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(3 * LIMIT_BYTES).unwrap();
        drop(file);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let line = "\n".to_owned() + &serde_json::to_string(&record(9)).unwrap() + "\n";
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(line.as_bytes()).unwrap();
        assert_eq!(read(&path), vec![record(9)]);
    }

    #[test]
    fn a_relative_state_home_is_ignored() {
        // Read in a child process: the variables are this process's.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "history::tests::print_path", "--nocapture", "--include-ignored"])
            .env("XDG_STATE_HOME", "relative/state")
            .env("HOME", "/home/someone")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("PATH=/home/someone/.local/state/gpurun/history.jsonl"), "{text}");
    }

    #[test]
    #[ignore = "run by a_relative_state_home_is_ignored"]
    fn print_path() {
        println!("PATH={}", path().unwrap().display());
    }
}
