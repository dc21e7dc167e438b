//! The lock directory shared by every gpurun on the machine (default `/run/lock/gpurun`).
//!
//! - It is opened once, without following symlinks, and checked on the open descriptor: a
//!   directory, owned by root or by this user, sticky if others may write to it. Everything in
//!   it is reached relative to that descriptor and never through a symlink.
//! - gpurun sets the mode (1777) only of a directory it has just created itself; an existing
//!   directory is checked and used or refused, never changed.
//! - Selection and reservation run under an exclusive `flock` on the directory itself (a fresh
//!   open of it, so the lock is gpurun's alone). No file in the directory can be swapped,
//!   made unreadable or replaced by another user to stop every launch; a user can still hold
//!   the lock to delay launches, and a launch that waits for it says who holds it.
//! - Reading the reservations (`--list`, `--dry-run`, `--doctor`) takes no lock at all.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{openat, Flock, FlockArg, OFlag};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::stat::{fstat, Mode};

use crate::process::procfs;

/// After this long waiting for the directory lock, say who holds it.
const SAY_WHO_HOLDS_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockDirError {
    #[error("lock directory {path}: {problem}; fix it or choose another with --lock-dir (or --no-lock)")]
    Untrusted { path: String, problem: String },
    #[error("lock directory {path}: {source}")]
    Io { path: String, source: io::Error },
    /// The machine's shared directory is missing, and this user may not make it: one they made
    /// would be theirs, and every other user's gpurun would refuse it (issue 65).
    #[error(
        "lock directory {path} does not exist: it is the machine's shared reservation directory, which \
         only root makes (the package's tmpfiles.d entry makes it at boot; `sudo install -d -m 1777 \
         {path}` makes it now). Until then: --lock-dir DIR of your own (reservations there are not \
         shared with other users), or --no-lock"
    )]
    NotMade { path: String },
    /// A signal that ends gpurun arrived while it waited for the lock.
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
}

/// An open, checked lock directory.
pub(crate) struct LockDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// How `LockDir::lock` waits: on the descriptor, at most the duration; `Err(signal)` ends the
/// wait for a signal that ends gpurun.
pub(crate) type LockWait<'a> = dyn FnMut(BorrowedFd<'_>, Duration) -> Result<(), i32> + 'a;

/// The directory lock, held until dropped.
pub(crate) struct DirLock {
    _lock: Flock<OwnedFd>,
}

pub(crate) fn current_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

impl LockDir {
    /// Opens and checks the lock directory; `create`: make it (mode 1777) when missing.
    pub(crate) fn open(path: &Path, create: bool) -> Result<LockDir, LockDirError> {
        let shown = path.display().to_string();
        let io_error = |source: Errno| LockDirError::Io { path: shown.clone(), source: source.into() };
        let refuse =
            |problem: &str| LockDirError::Untrusted { path: shown.clone(), problem: problem.to_owned() };
        if path.as_os_str().as_bytes().contains(&0) {
            return Err(refuse("the path holds a NUL byte"));
        }
        let created = create
            && match nix::unistd::mkdir(path, Mode::from_bits_truncate(0o1777)) {
                Ok(()) => true,
                Err(Errno::EEXIST) => false,
                Err(error) => return Err(io_error(error)),
            };
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|error| match error {
            Errno::ELOOP => refuse("it is a symbolic link"),
            // O_DIRECTORY wins over O_NOFOLLOW for a link to a directory.
            Errno::ENOTDIR if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                refuse("it is a symbolic link")
            }
            Errno::ENOTDIR => refuse("it is not a directory"),
            other => io_error(other),
        })?;
        let mut stat = fstat(&fd).map_err(io_error)?;
        let me = current_uid();
        if created && stat.st_uid == me && stat.st_mode & 0o7777 != 0o1777 {
            // Ours, just made under the umask: make it shareable (through the descriptor, never
            // by path: /run/lock is writable by others, who could swap the entry).
            if nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o1777)).is_ok() {
                stat = fstat(&fd).map_err(io_error)?;
            }
        }
        if stat.st_uid != 0 && stat.st_uid != me {
            return Err(refuse(&format!(
                "it is owned by {}, not by root or you, so its owner could forge or remove reservations",
                procfs::describe_uid(stat.st_uid)
            )));
        }
        if stat.st_mode & 0o002 != 0 && stat.st_mode & libc::S_ISVTX == 0 {
            return Err(refuse(
                "it is writable by everyone but not sticky (mode 1777 expected), so anyone could remove reservations",
            ));
        }
        let dir = LockDir { path: path.to_path_buf(), fd };
        // A directory made for reservations: the shared kind (sticky, writable by all), or one
        // holding nothing but gpurun's entries. Root passes every owner check, and a root-owned
        // system directory (/etc) must not get lease files.
        let shared = stat.st_mode & 0o1777 == 0o1777;
        if !shared {
            let others: Vec<String> = dir
                .entries()
                .into_iter()
                .filter(|name| !is_gpurun_entry(name))
                .map(|name| String::from_utf8_lossy(&name).into_owned())
                .collect();
            if let Some(first) = others.first() {
                return Err(refuse(&format!(
                    "it holds {} that {} not gpurun's ({first}{}): a lock directory is one made for it, \
                     the shared kind (mode 1777) or one that holds only reservations",
                    if others.len() == 1 { "an entry" } else { "entries" },
                    if others.len() == 1 { "is" } else { "are" },
                    if others.len() > 1 { format!(" and {} more", others.len() - 1) } else { String::new() }
                )));
            }
        }
        Ok(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn io(&self, source: impl Into<io::Error>) -> LockDirError {
        LockDirError::Io { path: self.path.display().to_string(), source: source.into() }
    }

    /// Takes the exclusive directory lock. While another process holds it, a helper thread
    /// blocks in `flock` and this one waits through `wait` (on the helper's eventfd, with a
    /// timeout; it ends the wait on a signal that ends gpurun), and after a second says who
    /// holds the lock. The kernel hands a blocking `flock` the lock the moment it is released;
    /// retrying without blocking slept up to 20 ms between tries, however soon it was free.
    pub(crate) fn lock(&self, wait: &mut LockWait<'_>) -> Result<DirLock, LockDirError> {
        let fresh =
            openat(&self.fd, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| self.io(e))?;
        let fd = match Flock::lock(fresh, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(DirLock { _lock: lock }),
            Err((back, Errno::EWOULDBLOCK)) => back,
            Err((_, error)) => return Err(self.cannot_lock(error)),
        };
        let ready =
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| self.io(e))?;
        let ready = std::sync::Arc::new(ready);
        let (send, taken) = std::sync::mpsc::sync_channel(1);
        let notify = std::sync::Arc::clone(&ready);
        // Given up (a signal ended the wait), the helper still gets the lock in the end: its
        // send fails and the lock it took is dropped there, released at once.
        std::thread::Builder::new()
            .name("gpurun-lockdir".to_owned())
            .stack_size(64 * 1024)
            .spawn(move || {
                let _ = send.send(Flock::lock(fd, FlockArg::LockExclusive).map_err(|(_, error)| error));
                let _ = notify.write(1);
            })
            .map_err(|e| self.io(e))?;
        let started = Instant::now();
        let mut said = false;
        loop {
            let timeout = match said {
                true => Duration::from_secs(60),
                false => SAY_WHO_HOLDS_AFTER.saturating_sub(started.elapsed()),
            };
            wait(ready.as_fd(), timeout).map_err(LockDirError::Interrupted)?;
            match taken.try_recv() {
                Ok(Ok(lock)) => return Ok(DirLock { _lock: lock }),
                Ok(Err(error)) => return Err(self.io(error)),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(self.io(io::Error::other("the lock's helper thread ended")))
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            if !said && started.elapsed() >= SAY_WHO_HOLDS_AFTER {
                tracing::info!("waiting for the lock directory {}, {}", self.path.display(), self.holder());
                said = true;
            }
        }
    }

    /// A directory whose filesystem takes no flock (NFS without its lock manager, some FUSE
    /// filesystems): no reservation could hold there, so none is made.
    fn cannot_lock(&self, error: Errno) -> LockDirError {
        match error {
            Errno::ENOLCK | Errno::EOPNOTSUPP | Errno::EINVAL => LockDirError::Untrusted {
                path: self.path.display().to_string(),
                problem: format!(
                    "its filesystem cannot flock ({error}), so no reservation would hold; on NFS, flock needs \
                     the lock manager (NFSv4, or NFSv3 with lockd and rpc.statd running)"
                ),
            },
            other => self.io(other),
        }
    }

    /// "held by PID N (user, command)", from /proc/locks: another user's command line, shown
    /// escaped and clipped.
    fn holder(&self) -> String {
        use crate::process::stdio::clip_command;
        let Ok(stat) = fstat(&self.fd) else { return "held by another process".to_owned() };
        let holders = procfs::flock_holders(stat.st_dev, stat.st_ino);
        match holders.first() {
            Some(&pid) => format!(
                "held by PID {pid} ({}, {})",
                procfs::owner(pid).unwrap_or_else(|| "?".to_owned()),
                procfs::command_line(pid).map_or_else(|| "?".to_owned(), |line| clip_command(&line, 80))
            ),
            None => "held by another process".to_owned(),
        }
    }

    /// The names in the directory.
    pub(crate) fn entries(&self) -> Vec<Vec<u8>> {
        // A fresh open of the directory: reading it moves the descriptor's position.
        let Ok(fresh) =
            openat(&self.fd, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        else {
            return Vec::new();
        };
        let Ok(mut listing) = nix::dir::Dir::from_fd(fresh) else { return Vec::new() };
        listing
            .iter()
            .flatten()
            .map(|entry| entry.file_name().to_bytes().to_vec())
            .filter(|name| name != b"." && name != b"..")
            .collect()
    }

    /// Opens an entry that may belong to anyone, for reading: no symlinks, no FIFOs (never
    /// blocks), regular files only. Returns the file and its metadata.
    pub(crate) fn open_foreign(&self, name: &[u8]) -> Option<(File, std::fs::Metadata)> {
        let name = std::ffi::OsStr::from_bytes(name);
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let file = File::from(fd);
        let metadata = file.metadata().ok()?;
        metadata.file_type().is_file().then_some((file, metadata))
    }

    /// Whether someone holds the lock on `file` (then the lease or ticket is live).
    pub(crate) fn is_held(file: &File) -> bool {
        let Ok(copy) = file.try_clone() else { return true };
        // A lock we could take is released again when `probe` is dropped.
        match Flock::lock(copy, FlockArg::LockSharedNonblock) {
            Ok(_probe) => false,
            Err(_) => true,
        }
    }

    /// The entries whose name `wanted` accepts and whose lock someone holds (a lease or ticket
    /// that is live), with their metadata and content (at most 64 KiB; the error if unreadable).
    /// `may_clean`: the caller holds the directory lock, so dead entries of this user go.
    pub(crate) fn held_entries(&self, wanted: impl Fn(&str) -> bool, may_clean: bool) -> Vec<HeldEntry> {
        self.held_entries_among(self.entries(), wanted, may_clean)
    }

    /// `held_entries` among `names` (one listing of the directory, shared by several readers).
    pub(crate) fn held_entries_among(
        &self,
        names: Vec<Vec<u8>>,
        wanted: impl Fn(&str) -> bool,
        may_clean: bool,
    ) -> Vec<HeldEntry> {
        let mut held = Vec::new();
        for name in names {
            let Ok(name) = String::from_utf8(name) else { continue };
            if !wanted(&name) {
                continue;
            }
            let Some((file, metadata)) = self.open_foreign(name.as_bytes()) else { continue };
            if !Self::is_held(&file) {
                if may_clean {
                    let owner = std::os::unix::fs::MetadataExt::uid(&metadata);
                    self.remove_if_mine(name.as_bytes(), owner);
                    // A dead waiter's FIFO goes with its ticket (`wake.<ns>.<pid>`).
                    if let Some(rest) = name.strip_prefix("ticket.") {
                        let stem: Vec<&str> = rest.splitn(3, '.').take(2).collect();
                        self.remove_if_mine(format!("wake.{}", stem.join(".")).as_bytes(), owner);
                    }
                }
                continue;
            }
            held.push(HeldEntry::read(name, &file, metadata));
        }
        held
    }

    /// One entry, if it is a regular file whose lock someone holds, as `held_entries` reads it.
    pub(crate) fn held_entry(&self, name: &str) -> Option<HeldEntry> {
        let (file, metadata) = self.open_foreign(name.as_bytes())?;
        Self::is_held(&file).then(|| HeldEntry::read(name.to_owned(), &file, metadata))
    }

    /// An entry's status, not through a symlink.
    pub(crate) fn stat(&self, name: &str) -> Option<nix::sys::stat::FileStat> {
        nix::sys::stat::fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()
    }

    /// Removes a dead entry if it is ours (only the owner may, in a sticky directory).
    pub(crate) fn remove_if_mine(&self, name: &[u8], owner: u32) {
        if owner == current_uid() {
            let _ = nix::unistd::unlinkat(
                &self.fd,
                std::ffi::OsStr::from_bytes(name),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }

    /// Creates `name` exclusively (never over an existing entry or through a link), mode 0644.
    pub(crate) fn create(&self, name: &str) -> Result<File, Errno> {
        openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map(File::from)
    }

    /// Creates `name` as `create` does and takes its exclusive lock without waiting. Any user
    /// may open a fresh entry (it is world-readable) and flock it before its maker does: a
    /// blocking lock would then wait for ever, the directory lock held behind it. Such an entry
    /// is removed again and EWOULDBLOCK returned, for the caller to try another name.
    pub(crate) fn create_locked(&self, name: &str) -> Result<Flock<File>, Errno> {
        let file = self.create(name)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(lock),
            Err((_, error)) => {
                let _ = nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
                Err(error)
            }
        }
    }

    /// Makes the FIFO `name` (mode 0622 whatever the umask: any user's gpurun may pass the turn
    /// to this waiter) and opens it without blocking, for reading and writing: a FIFO whose
    /// last writer has closed it reads as end-of-file and polls as hung up until another
    /// writer comes, so a waiter holding only the read end, once woken, found it ready at every
    /// wait and looked at the machine in a loop, a whole core for as long as it waited. Holding
    /// a write end itself, it is ready only while a wake-up is unread (Linux opens a FIFO for
    /// both without blocking; fifo(7)).
    pub(crate) fn make_fifo(&self, name: &str) -> Result<OwnedFd, Errno> {
        nix::sys::stat::mknodat(
            &self.fd,
            name,
            nix::sys::stat::SFlag::S_IFIFO,
            Mode::from_bits_truncate(0o600),
            0,
        )?;
        let fifo = openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        let fifo = match fifo {
            Ok(fifo) => fifo,
            Err(error) => {
                let _ = nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
                return Err(error);
            }
        };
        nix::sys::stat::fchmod(&fifo, Mode::from_bits_truncate(0o622))?;
        Ok(fifo)
    }

    /// A duplicate of the directory descriptor, for an entry that outlives this `LockDir`.
    pub(crate) fn fd_clone(&self) -> Result<OwnedFd, LockDirError> {
        self.fd.as_fd().try_clone_to_owned().map_err(|e| self.io(e))
    }

    /// The same directory on a duplicate descriptor, for a lease or ticket that outlives this one.
    pub(crate) fn duplicate(&self) -> Result<LockDir, LockDirError> {
        Ok(LockDir { path: self.path.clone(), fd: self.fd_clone()? })
    }

    /// Opens the FIFO `name` to write a byte to it without blocking: only a FIFO that `owner`
    /// owns and someone reads.
    pub(crate) fn open_fifo_of(&self, name: &str, owner: u32) -> Option<OwnedFd> {
        let fifo = openat(
            &self.fd,
            name,
            OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let stat = fstat(&fifo).ok()?;
        (stat.st_mode & libc::S_IFMT == libc::S_IFIFO && stat.st_uid == owner).then_some(fifo)
    }
}

/// Whether a directory entry is one gpurun makes: a lease, a ticket, a waiter's FIFO, a
/// `--per-rank` group record.
fn is_gpurun_entry(name: &[u8]) -> bool {
    name.ends_with(b".lease")
        || [&b"ticket."[..], b"wake.", b"group."].iter().any(|prefix| name.starts_with(prefix))
}

/// A live entry of the lock directory, as read.
pub(crate) struct HeldEntry {
    pub(crate) name: String,
    pub(crate) metadata: std::fs::Metadata,
    pub(crate) text: Result<String, io::Error>,
}

impl HeldEntry {
    /// At most 64 KiB of `file`: an entry is a few hundred bytes, whoever wrote it.
    fn read(name: String, file: &File, metadata: std::fs::Metadata) -> HeldEntry {
        let mut text = String::new();
        let read = std::io::Read::read_to_string(&mut std::io::Read::take(file, 64 * 1024), &mut text);
        HeldEntry { name, metadata, text: read.map(|_| text) }
    }
}

/// An entry this gpurun created in the lock directory: removed when dropped.
pub(crate) struct Entry {
    pub(crate) name: String,
    dir: OwnedFd,
}

impl Entry {
    pub(crate) fn new(dir: &LockDir, name: String) -> Result<Entry, LockDirError> {
        Ok(Entry { name, dir: dir.fd_clone()? })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let _ = nix::unistd::unlinkat(&self.dir, self.name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filesystem_that_cannot_flock_is_refused_with_the_reason() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let refused = dir.cannot_lock(Errno::ENOLCK).to_string();
        assert!(
            refused.contains("its filesystem cannot flock") && refused.contains("--lock-dir"),
            "{refused}"
        );
        assert!(matches!(dir.cannot_lock(Errno::EIO), LockDirError::Io { .. }));
    }

    #[test]
    fn an_entry_is_made_locked_and_never_over_another() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let lock = dir.create_locked("x.lease").unwrap();
        assert_eq!(dir.create_locked("x.lease").err(), Some(Errno::EEXIST));
        let (other, _) = dir.open_foreign(b"x.lease").unwrap();
        assert!(LockDir::is_held(&other), "made locked");
        drop(lock);
        assert!(!LockDir::is_held(&other));
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_sticky_and_world_writable() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("locks");
        LockDir::open(&path, true).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o1777);
    }

    #[test]
    fn an_existing_directory_is_never_changed() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("private");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        LockDir::open(&path, true).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o700);
    }

    #[test]
    fn looking_does_not_create() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("absent");
        assert!(LockDir::open(&path, false).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn the_lock_is_exclusive_and_says_who_holds_it() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let mut no_wait = |_: BorrowedFd<'_>, _: Duration| -> Result<(), i32> { Ok(()) };
        let held = dir.lock(&mut no_wait).unwrap();
        let other = LockDir::open(dir.path(), false).unwrap();
        let mut waits = 0;
        let result = other.lock(&mut |fd, timeout| {
            waits += 1;
            // The helper does not get the lock while it is held here.
            let mut ready = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
            let ms =
                nix::poll::PollTimeout::try_from(timeout.min(Duration::from_millis(50)).as_millis() as i32)
                    .unwrap();
            assert_eq!(nix::poll::poll(&mut ready, ms).unwrap(), 0);
            if waits > 3 {
                Err(libc::SIGTERM)
            } else {
                Ok(())
            }
        });
        assert!(matches!(result, Err(LockDirError::Interrupted(libc::SIGTERM))));
        assert!(other.holder().contains(&format!("PID {}", std::process::id())), "{}", other.holder());
        // Released, the lock goes to a waiter blocked in the helper as soon as it is.
        let third = LockDir::open(dir.path(), false).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let started = Instant::now();
        let mut poll_wait = |fd: BorrowedFd<'_>, timeout: Duration| -> Result<(), i32> {
            let mut ready = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
            let ms = nix::poll::PollTimeout::try_from(timeout.as_millis().min(10_000) as i32).unwrap();
            nix::poll::poll(&mut ready, ms).unwrap();
            Ok(())
        };
        let lock = third.lock(&mut poll_wait).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(90), "{:?}", started.elapsed());
        release.join().unwrap();
        drop(lock);
        other.lock(&mut no_wait).unwrap();
    }
}
