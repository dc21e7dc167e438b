//! Reservations (DESIGN 5): the lock directory, leases and the wait queue.
//!
//! - The directory (default `/run/lock/gpurun`, mode 1777) is opened once, without following
//!   symlinks, and checked on the open descriptor: a directory, owned by root or by us, sticky if
//!   others may write to it. Everything else is reached relative to that descriptor.
//! - `.lock`: selection runs under an exclusive `flock` on it (readers take it shared).
//! - `<uuid>.<pid>.<random>.lease`: one per reserved GPU, created with O_EXCL|O_NOFOLLOW and kept
//!   alive by an exclusive `flock` held for the command's whole life. A lease is live exactly
//!   while it is locked: a crashed or SIGKILLed gpurun frees it at once, and a reused PID cannot
//!   fake one. A lease whose file owner differs from the uid it claims is ignored (forged).
//! - `ticket.<nanoseconds>.<pid>`: a waiter's place in the queue, locked while it waits; waiters
//!   are served in ticket order, and a crashed waiter's ticket stops counting at once.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub const DEFAULT_DIR: &str = "/run/lock/gpurun";

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lock directory {path}: {problem}; fix it or choose another with --lock-dir (or --no-lock)")]
    Unsafe { path: String, problem: String },
    #[error("lock directory {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// What a lease file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub uuid: String,
    pub pid: u32,
    pub uid: u32,
    pub user: String,
    /// Memory promised to the command; counted against the GPU until its processes show in NVML.
    pub reserved_bytes: u64,
    pub exclusive: bool,
    pub command: String,
    /// Unix time the lease was taken.
    pub started: u64,
}

/// An open, checked lock directory.
pub struct LockDir {
    path: PathBuf,
    fd: OwnedFd,
}

fn cstring(name: &str) -> CString {
    CString::new(name).expect("lease names have no NUL")
}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: fstat fills a zeroed stat for a valid descriptor.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut stat) != 0 {
            return Err(errno());
        }
        Ok(stat)
    }
}

fn flock(fd: RawFd, operation: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a valid descriptor.
        if unsafe { libc::flock(fd, operation) } == 0 {
            return Ok(());
        }
        let error = errno();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The start time of the lock: a shared or exclusive hold on `.lock`, released on drop.
pub struct DirGuard {
    _file: File,
}

/// A lease this gpurun holds. Dropping it removes the file and releases the lock.
pub struct HeldLease {
    file: File,
    name: CString,
    /// The lock directory, held open as long as the lease (the LockDir may be gone).
    dir: OwnedFd,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // Unlink first: a lease file is never left locked-looking without an owner.
        // SAFETY: unlinkat relative to the directory descriptor this lease owns.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) };
    }
}

impl HeldLease {
    /// For `--exec`: the locked descriptor is inherited by the command, so the reservation lives
    /// exactly as long as the command does.
    pub fn hand_over_to_exec(self) {
        // SAFETY: clears FD_CLOEXEC on a descriptor we own; then the descriptor is leaked on
        // purpose (the exec'd command holds the lock).
        unsafe {
            let fd = self.file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
        }
        std::mem::forget(self);
    }
}

/// A waiter's place in the queue; dropping it leaves the queue.
pub struct Ticket {
    _file: File,
    name: CString,
    dir: OwnedFd,
    key: (u128, u32),
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // SAFETY: as for HeldLease.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) };
    }
}

impl LockDir {
    /// Opens (creating it with mode 1777 if missing) and checks the lock directory.
    pub fn open(path: &Path) -> Result<LockDir, LeaseError> {
        let shown = path.display().to_string();
        let io_error = |source| LeaseError::Io { path: shown.clone(), source };
        let unsafe_dir =
            |problem: &str| LeaseError::Unsafe { path: shown.clone(), problem: problem.to_owned() };
        let c_path =
            CString::new(path.as_os_str().as_bytes()).map_err(|_| unsafe_dir("the path holds a NUL byte"))?;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(unsafe_dir("it is a symbolic link"));
        }
        // mkdir applies the umask; the exact mode is set below, through the opened descriptor
        // (never by path: /run/lock is writable by others, who could swap the entry).
        // SAFETY: mkdir with a valid C string; an existing entry is fine and checked below.
        if unsafe { libc::mkdir(c_path.as_ptr(), 0o1777) } != 0
            && errno().kind() != io::ErrorKind::AlreadyExists
        {
            return Err(io_error(errno()));
        }
        // SAFETY: open with a valid C string; O_NOFOLLOW refuses a symlink in the last component.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let error = errno();
            return Err(match error.raw_os_error() {
                Some(libc::ELOOP) => unsafe_dir("it is a symbolic link"),
                Some(libc::ENOTDIR) => unsafe_dir("it is not a directory"),
                _ => io_error(error),
            });
        }
        // SAFETY: open returned a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut stat = fstat(fd.as_raw_fd()).map_err(io_error)?;
        let me = current_uid();
        if stat.st_uid == me && stat.st_mode & 0o7777 != 0o1777 {
            // Ours (just created, or created under a tight umask): make it shareable.
            // SAFETY: fchmod on our own open directory.
            if unsafe { libc::fchmod(fd.as_raw_fd(), 0o1777) } == 0 {
                stat = fstat(fd.as_raw_fd()).map_err(io_error)?;
            }
        }
        if stat.st_uid != 0 && stat.st_uid != me {
            return Err(unsafe_dir(&format!(
                "it is owned by uid {}, not by root or you, so its owner could forge or remove reservations",
                stat.st_uid
            )));
        }
        if stat.st_mode & 0o002 != 0 && stat.st_mode & libc::S_ISVTX == 0 {
            return Err(unsafe_dir("it is writable by everyone but not sticky (mode 1777 expected), so anyone could remove reservations"));
        }
        Ok(LockDir { path: path.to_path_buf(), fd })
    }

    fn openat(&self, name: &CStr, flags: libc::c_int, mode: libc::c_uint) -> io::Result<File> {
        // SAFETY: openat relative to our directory descriptor with a valid C string.
        let fd = unsafe {
            libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode)
        };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: a fresh descriptor.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn io(&self, source: io::Error) -> LeaseError {
        LeaseError::Io { path: self.path.display().to_string(), source }
    }

    /// Holds `.lock`: exclusively to select and reserve, shared to read.
    pub fn lock(&self, exclusive: bool) -> Result<DirGuard, LeaseError> {
        let name = cstring(".lock");
        let file = match self.openat(&name, libc::O_RDONLY | libc::O_CREAT | libc::O_NONBLOCK, 0o644) {
            Ok(file) => file,
            Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
                return Err(LeaseError::Unsafe {
                    path: self.path.display().to_string(),
                    problem: ".lock is a symbolic link".to_owned(),
                })
            }
            Err(error) => return Err(self.io(error)),
        };
        let stat = fstat(file.as_raw_fd()).map_err(|e| self.io(e))?;
        if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(LeaseError::Unsafe {
                path: self.path.display().to_string(),
                problem: ".lock is not a regular file".to_owned(),
            });
        }
        flock(file.as_raw_fd(), if exclusive { libc::LOCK_EX } else { libc::LOCK_SH })
            .map_err(|e| self.io(e))?;
        Ok(DirGuard { _file: file })
    }

    fn entries(&self) -> Vec<Vec<u8>> {
        let listing = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let Ok(entries) = std::fs::read_dir(listing) else { return Vec::new() };
        entries.flatten().map(|entry| entry.file_name().as_bytes().to_vec()).collect()
    }

    /// Opens an entry that may belong to anyone, for reading: no symlinks, no FIFOs, regular
    /// files only. Returns the file and its owner.
    fn open_foreign(&self, name: &[u8]) -> Option<(File, u32)> {
        let name = CString::new(name).ok()?;
        let file = self.openat(&name, libc::O_RDONLY | libc::O_NONBLOCK, 0).ok()?;
        let stat = fstat(file.as_raw_fd()).ok()?;
        (stat.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((file, stat.st_uid))
    }

    /// Whether someone holds the lock on `file` (then the lease or ticket is live).
    fn is_held(file: &File) -> bool {
        // SAFETY: flock on a valid descriptor; a shared lock we obtain is released by unlocking.
        unsafe {
            if libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 {
                libc::flock(file.as_raw_fd(), libc::LOCK_UN);
                false
            } else {
                true
            }
        }
    }

    /// Removes a dead entry if it is ours (only the owner may, in a sticky directory).
    fn remove_if_mine_and_dead(&self, name: &[u8], owner: u32, may_clean: bool) {
        if may_clean && owner == current_uid() {
            if let Ok(name) = CString::new(name) {
                // SAFETY: unlinkat relative to our directory.
                unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
            }
        }
    }

    /// Every live lease. `may_clean`: the caller holds `.lock` exclusively, so dead leases of
    /// this user can be removed.
    pub fn live_leases(&self, may_clean: bool) -> Vec<Lease> {
        let mut leases = Vec::new();
        for name in self.entries().into_iter().filter(|n| n.ends_with(b".lease")) {
            let Some((mut file, owner)) = self.open_foreign(&name) else { continue };
            if !Self::is_held(&file) {
                self.remove_if_mine_and_dead(&name, owner, may_clean);
                continue;
            }
            let mut text = String::new();
            if (&mut file).take(64 * 1024).read_to_string(&mut text).is_err() {
                continue;
            }
            match serde_json::from_str::<Lease>(&text) {
                Ok(lease) if lease.uid == owner => leases.push(lease),
                Ok(lease) => tracing::debug!(
                    "ignoring lease {} claiming uid {} but owned by uid {owner}",
                    String::from_utf8_lossy(&name),
                    lease.uid
                ),
                Err(error) => {
                    tracing::debug!("ignoring unreadable lease {}: {error}", String::from_utf8_lossy(&name))
                }
            }
        }
        leases.sort_by(|a, b| (a.started, a.pid, &a.uuid).cmp(&(b.started, b.pid, &b.uuid)));
        leases
    }

    /// Takes a lease on each GPU; call with `.lock` held exclusively.
    pub fn reserve(
        &self,
        gpus: &[(String, u64)],
        exclusive: bool,
        command: &str,
    ) -> Result<Vec<HeldLease>, LeaseError> {
        let started = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let uid = current_uid();
        let user = crate::probe::procfs::user_name(uid).unwrap_or_else(|| uid.to_string());
        let mut held = Vec::new();
        for (uuid, reserved_bytes) in gpus {
            let lease = Lease {
                uuid: uuid.clone(),
                pid: std::process::id(),
                uid,
                user: user.clone(),
                reserved_bytes: *reserved_bytes,
                exclusive,
                command: command.to_owned(),
                started,
            };
            let safe_uuid: String = uuid.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            let (file, name) =
                self.create_unique(&format!("{safe_uuid}.{}", std::process::id()), ".lease")?;
            flock(file.as_raw_fd(), libc::LOCK_EX).map_err(|e| self.io(e))?;
            let mut writer = &file;
            writer
                .write_all(serde_json::to_string(&lease).expect("plain data").as_bytes())
                .map_err(|e| self.io(e))?;
            held.push(HeldLease { file, name, dir: self.fd.try_clone().map_err(|e| self.io(e))? });
        }
        Ok(held)
    }

    /// Creates `<stem>.<random><suffix>` exclusively (never over an existing entry or link).
    fn create_unique(&self, stem: &str, suffix: &str) -> Result<(File, CString), LeaseError> {
        for attempt in 0..16u32 {
            let random =
                std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), attempt) & 0xffff_ffff;
            let name = cstring(&format!("{stem}.{random:08x}{suffix}"));
            match self.openat(&name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o644) {
                Ok(file) => return Ok((file, name)),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(self.io(error)),
            }
        }
        Err(self.io(io::Error::new(io::ErrorKind::AlreadyExists, "cannot create a unique entry")))
    }

    /// Joins the wait queue; call with `.lock` held exclusively so tickets are ordered.
    pub fn take_ticket(&self) -> Result<Ticket, LeaseError> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let pid = std::process::id();
        let name = cstring(&format!("ticket.{nanos:020}.{pid}"));
        let file =
            self.openat(&name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o644).map_err(|e| self.io(e))?;
        flock(file.as_raw_fd(), libc::LOCK_EX).map_err(|e| self.io(e))?;
        Ok(Ticket { _file: file, name, dir: self.fd.try_clone().map_err(|e| self.io(e))?, key: (nanos, pid) })
    }

    /// How many live tickets are ahead of `ticket`.
    pub fn ahead_of(&self, ticket: &Ticket, may_clean: bool) -> usize {
        let mut ahead = 0;
        for name in self.entries() {
            let Some(key) = parse_ticket(&name) else { continue };
            if key >= ticket.key {
                continue;
            }
            let Some((file, owner)) = self.open_foreign(&name) else { continue };
            if Self::is_held(&file) {
                ahead += 1;
            } else {
                self.remove_if_mine_and_dead(&name, owner, may_clean);
            }
        }
        ahead
    }
}

fn parse_ticket(name: &[u8]) -> Option<(u128, u32)> {
    let text = std::str::from_utf8(name).ok()?;
    let mut parts = text.strip_prefix("ticket.")?.split('.');
    let nanos = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    Some((nanos, pid))
}

/// For messages: how long ago a lease was taken.
pub fn age_seconds(lease: &Lease) -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    now.saturating_sub(lease.started)
}

/// The lock directory from `--lock-dir` (or its GPURUN_LOCK_DIR variable, see settings.rs), or
/// the default.
pub fn resolve_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> (tempfile::TempDir, PathBuf) {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("locks");
        (base, path)
    }

    #[test]
    fn created_sticky_and_world_writable() {
        let (_base, path) = temp_dir();
        LockDir::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777, 0o1777);
    }

    #[test]
    fn leases_live_while_held_and_vanish_on_drop() {
        let (_base, path) = temp_dir();
        let dir = LockDir::open(&path).unwrap();
        let _guard = dir.lock(true).unwrap();
        let held = dir.reserve(&[("GPU-abc".to_owned(), 42)], true, "train").unwrap();
        let leases = dir.live_leases(true);
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].reserved_bytes, 42);
        assert!(leases[0].exclusive);
        drop(held);
        assert!(dir.live_leases(true).is_empty());
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 1, "only .lock is left");
    }

    #[test]
    fn tickets_queue_in_order() {
        let (_base, path) = temp_dir();
        let dir = LockDir::open(&path).unwrap();
        let first = dir.take_ticket().unwrap();
        let second = dir.take_ticket().unwrap();
        assert_eq!(dir.ahead_of(&first, true), 0);
        assert_eq!(dir.ahead_of(&second, true), 1);
        drop(first);
        assert_eq!(dir.ahead_of(&second, true), 0);
    }
}
