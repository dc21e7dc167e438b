//! `--job-map-dir`: dcgm-exporter's HPC job mapping, kept for the run (issue 52). dcgm-exporter
//! (`--hpc-job-mapping-dir`, `DCGM_HPC_JOB_MAPPING_DIR`) reads, at every scrape, each file of
//! that directory whose name is a number: the GPU of that index, one job id per line, and
//! labels the GPU's metrics `hpc_job=<id>` (its `internal/pkg/transformation/hpc.go`). gpurun
//! adds its job id to the file of each chosen GPU (a MIG device's: its GPU's) as the command
//! starts and takes it out when the run ends, so unmodified dcgm-exporter labels the job.
//!
//! A shared GPU's file holds every job on it, one per line: each change is a read, edit and
//! rename under an flock of `.gpurun.lock` (a name dcgm-exporter skips), so two runs never lose
//! each other's line. Nothing is followed: a file planted as a symlink is left alone, and the
//! new file is made beside it (`O_EXCL`) and renamed over it. A job id that was already in a
//! file (an enclosing gpurun of the same job) is left there at the end. Any failure is a
//! warning: dashboards are never the job's problem. A gpurun killed with SIGKILL leaves its
//! lines, as a Slurm prolog without its epilog would.
//!
//! The directory may be shared with users who plant things (issue 65): nothing there is
//! opened that could block (every open is O_NONBLOCK, and what is not a regular file, a FIFO
//! or a device, is left alone), a file over `MOST_READ` is left alone rather than read or
//! written back, and a job id that could not be taken out again (a line break, a control
//! character, blanks around it) is never written.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a change waits for the lock (held for microseconds by a healthy run).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The most of a GPU's file that is read: thousands of job ids. A bigger one (a planted 2 GiB
/// sparse file) is left alone, never read whole nor written back.
const MOST_READ: u64 = 64 * 1024;

/// The job's lines, written; taken out by `leave`.
pub(crate) struct JobMap {
    dir: PathBuf,
    id: String,
    /// The GPU indices whose file got the line (not those that had it already).
    added: Vec<u32>,
}

impl JobMap {
    /// Adds `id` to the file of each of `gpus` in `dir`.
    pub(crate) fn enter(dir: &Path, id: &str, gpus: &[u32]) -> JobMap {
        let mut map = JobMap { dir: dir.to_owned(), id: id.to_owned(), added: Vec::new() };
        if id.trim() != id || id.is_empty() || id.chars().any(char::is_control) {
            tracing::warn!(
                "--job-map-dir {}: the job id {id:?} has blanks around it or a control character, which a \
                 file of one id per line cannot hold: the job is not mapped",
                dir.display()
            );
            return map;
        }
        let mut gpus = gpus.to_vec();
        gpus.sort_unstable();
        gpus.dedup();
        let result = map.locked(|map| {
            for gpu in gpus {
                match map.change(gpu, |lines, id| match lines.iter().any(|line| line == id) {
                    true => false,
                    false => {
                        lines.push(id.to_owned());
                        true
                    }
                }) {
                    Ok(true) => map.added.push(gpu),
                    Ok(false) => {}
                    Err(error) => warn(&map.dir, gpu, "add the job to", &error),
                }
            }
        });
        if let Err(error) = result {
            tracing::warn!(
                "--job-map-dir {}: cannot lock .gpurun.lock there: {error}; the job is not mapped",
                dir.display()
            );
        }
        map
    }

    /// Takes the job's lines out again; a file left with none is removed.
    pub(crate) fn leave(mut self) {
        let added = std::mem::take(&mut self.added);
        if added.is_empty() {
            return;
        }
        let result = self.locked(|map| {
            for gpu in added {
                let taken = map.change(gpu, |lines, id| {
                    let before = lines.len();
                    lines.retain(|line| line != id);
                    lines.len() != before
                });
                if let Err(error) = taken {
                    warn(&map.dir, gpu, "take the job out of", &error);
                }
            }
        });
        if let Err(error) = result {
            tracing::warn!(
                "--job-map-dir {}: cannot lock .gpurun.lock there: {error}; the job stays mapped",
                self.dir.display()
            );
        }
    }

    /// Runs `then` holding the directory's lock (waiting `LOCK_WAIT` at most for it).
    fn locked(&mut self, then: impl FnOnce(&mut JobMap)) -> std::io::Result<()> {
        use nix::errno::Errno;
        use nix::fcntl::{Flock, FlockArg};
        let path = self.dir.join(".gpurun.lock");
        let open = |options: &mut std::fs::OpenOptions| {
            options.read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(&path)
        };
        // Another user's lock file in a sticky directory: readable, which is enough for flock.
        let mut file = open(std::fs::OpenOptions::new().write(true).create(true).mode(0o644))
            .or_else(|_| open(&mut std::fs::OpenOptions::new()))
            .and_then(crate::process::stdio::only_regular)?;
        let give_up = Instant::now() + LOCK_WAIT;
        let held = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(held) => break held,
                Err((back, Errno::EWOULDBLOCK)) if Instant::now() < give_up => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(std::io::Error::other("another process holds it"))
                }
                Err((_, errno)) => return Err(errno.into()),
            }
        };
        then(self);
        drop(held);
        Ok(())
    }

    /// Edits GPU `gpu`'s file with `edit` (true: it changed), writing it back by rename.
    fn change(&self, gpu: u32, edit: impl FnOnce(&mut Vec<String>, &str) -> bool) -> std::io::Result<bool> {
        let path = self.dir.join(gpu.to_string());
        let mut lines = read_lines(&path)?;
        if !edit(&mut lines, &self.id) {
            return Ok(false);
        }
        if lines.is_empty() {
            std::fs::remove_file(&path)?;
            return Ok(true);
        }
        crate::process::replace::replace_file(&path, &format!("{}\n", lines.join("\n"))).map(|()| true)
    }
}

/// A file's job ids (none if it does not exist); a symlink is refused, not followed, and so is
/// anything but a regular file of at most `MOST_READ` bytes.
fn read_lines(path: &Path) -> std::io::Result<Vec<String>> {
    let mut text = String::new();
    match crate::process::stdio::open_regular(path, libc::O_NOFOLLOW) {
        Ok(file) => {
            // One byte more than the most: a bigger file is left alone, not cut and written back.
            let read = file.take(MOST_READ + 1).read_to_string(&mut text)?;
            if read as u64 > MOST_READ {
                return Err(std::io::Error::other(format!(
                    "it is over {} KiB, more than any job map holds: left alone",
                    MOST_READ / 1024
                )));
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(std::io::Error::other("it is a symbolic link, not a file: left alone"))
        }
        Err(error) => return Err(error),
    }
    Ok(text.lines().map(str::trim).filter(|line| !line.is_empty()).map(str::to_owned).collect())
}

fn warn(dir: &Path, gpu: u32, what: &str, error: &std::io::Error) {
    use std::os::unix::fs::PermissionsExt;
    // Under the sticky bit (mode 1777) only a file's owner may rename over it: the second user
    // on a shared GPU can never add a line.
    let sticky = error.kind() == std::io::ErrorKind::PermissionDenied
        && std::fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o1000 != 0);
    let hint = match sticky {
        true => {
            "; the directory is sticky, so only the file's owner may replace it: make it group-writable \
                 without the sticky bit (chmod 2775) for the group that shares the GPUs"
        }
        false => "",
    };
    tracing::warn!(
        "--job-map-dir: cannot {what} {}: {error}{hint} (dcgm-exporter's labels for GPU {gpu} are off)",
        dir.join(gpu.to_string()).display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_added_shared_and_taken_out() {
        let dir = tempfile::tempdir().unwrap();
        let read = |gpu: u32| std::fs::read_to_string(dir.path().join(gpu.to_string())).ok();
        std::fs::write(dir.path().join("3"), "other\n").unwrap();
        let mine = JobMap::enter(dir.path(), "4242", &[3, 5, 5]);
        assert_eq!(read(3).as_deref(), Some("other\n4242\n"));
        assert_eq!(read(5).as_deref(), Some("4242\n"));
        // An enclosing run of the same job already has it: left to that run.
        let inner = JobMap::enter(dir.path(), "4242", &[5]);
        assert!(inner.added.is_empty());
        inner.leave();
        assert_eq!(read(5).as_deref(), Some("4242\n"));
        mine.leave();
        assert_eq!(read(3).as_deref(), Some("other\n"));
        assert_eq!(read(5), None, "a file left with no job is removed");
        // A planted symlink is neither followed nor replaced.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("7")).unwrap();
        let planted = JobMap::enter(dir.path(), "4242", &[7]);
        assert!(planted.added.is_empty());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    }
}
