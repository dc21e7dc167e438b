//! Leases: `<uuid>.<pid>.<random>.lease`, one per reserved GPU, created with O_EXCL|O_NOFOLLOW
//! and kept alive by an exclusive `flock` held for the command's whole life. A lease is live
//! exactly while it is locked: a crashed or SIGKILLed gpurun frees it at once, and a reused PID
//! cannot fake one.
//!
//! A lease is world-readable (every gpurun must count it), so it names the command by its
//! program alone (`python`): arguments can hold secrets (`--api-key=...`) that `/proc` with
//! `hidepid` hides from other users. Its owner and root see the whole command line, read from
//! `/proc` where the kernel lets them (`shown_command`).
//!
//! Fail closed: a lease whose lock is held counts even when its content cannot be trusted
//! (unreadable, half written, or claiming a user other than the file's owner). It is then a
//! reservation of its whole GPU (the UUID in its name) by the file's owner.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};

use crate::process::procfs;
use crate::reserve::lockdir::{current_uid, Entry, HeldEntry, LockDir, LockDirError};
use crate::reserve::ticket::KnownGpus;

/// What a lease file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub(crate) uuid: String,
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) user: String,
    /// Memory promised to the command; counted against the GPU until its processes show in NVML.
    pub(crate) reserved_bytes: u64,
    pub(crate) exclusive: bool,
    /// The command's program name only (never its arguments).
    pub(crate) command: String,
    /// Unix time the lease was taken.
    pub(crate) started: u64,
    /// Not a lease file: a `--per-rank` group's GPU held for this rank, which has not taken its
    /// lease yet (`rank::group::unclaimed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) for_rank: Option<u32>,
}

/// A lease this gpurun holds. Dropping it removes the file (first), releases the lock, then
/// wakes the first waiter that could use its GPU (`ticket::wake_first`).
pub(crate) struct HeldLease {
    // Tuple order is drop order: unlink, then unlock.
    held: Option<(Entry, Flock<File>)>,
    /// The lock directory, the machine's GPUs and the GPU's bit, for the wake-up.
    waker: (LockDir, Arc<KnownGpus>, u64),
}

impl HeldLease {
    /// For `--exec`: the locked descriptor is inherited by the command, so the reservation lives
    /// exactly as long as the command does (and the head's safety poll finds it gone).
    pub(crate) fn hand_over_to_exec(mut self) {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        if let Some((entry, lock)) = self.held.take() {
            let _ = fcntl(&*lock, FcntlArg::F_SETFD(FdFlag::empty()));
            // Neither removed nor unlocked: the command holds it now.
            std::mem::forget(lock);
            std::mem::forget(entry);
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if self.held.take().is_some() {
            use crate::reserve::ticket;
            let (dir, known, mask) = &self.waker;
            ticket::wake_first(dir, known, *mask, None, ticket::LEASE_ENDED);
        }
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// For messages: how long ago a lease was taken.
pub(crate) fn age_seconds(lease: &Lease) -> u64 {
    now().saturating_sub(lease.started)
}

/// The program's name of a command, as a lease shows it to everyone: `python` for
/// `/usr/bin/python train.py --api-key=...`.
pub(crate) fn program_name(command: &[std::ffi::OsString]) -> String {
    command
        .first()
        .map(|program| {
            let path = std::path::Path::new(program);
            path.file_name().unwrap_or(program.as_os_str()).to_string_lossy().into_owned()
        })
        .unwrap_or_default()
}

/// The command of a lease as `viewer` may see it: its whole command line (from `/proc`: the
/// command is the holding gpurun's first child, or the holder itself after `--exec`) for the
/// lease's owner and root, the program's name for anyone else.
pub(crate) fn shown_command(lease: &Lease, viewer: u32) -> String {
    if (viewer != 0 && viewer != lease.uid) || lease.for_rank.is_some() {
        return lease.command.clone();
    }
    let Some(holder) = procfs::command_line(lease.pid) else { return lease.command.clone() };
    let program = holder.split(' ').next().unwrap_or_default();
    if std::path::Path::new(program).file_name().is_none_or(|name| name != "gpurun") {
        return holder;
    }
    // gpurun's own forks (its parent-death watcher) show gpurun's command line: not those.
    procfs::children(lease.pid)
        .into_iter()
        .filter_map(|pid| Some((procfs::stat(pid)?.start_ticks, procfs::command_line(pid)?)))
        .filter(|(_, line)| *line != holder)
        .min()
        .map_or_else(|| lease.command.clone(), |(_, line)| line)
}

/// `GPU-...` and the PID from a lease file's name.
pub(crate) fn parse_name(name: &str) -> Option<(String, u32)> {
    let stem = name.strip_suffix(".lease")?;
    let mut parts = stem.rsplitn(3, '.');
    let _random = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    let uuid = parts.next()?;
    (!uuid.is_empty()).then(|| (uuid.to_owned(), pid))
}

/// Every live lease. `may_clean`: the caller holds the directory lock, so dead leases of this
/// user can be removed.
pub(crate) fn live(dir: &LockDir, may_clean: bool) -> Vec<Lease> {
    live_among(dir, dir.entries(), may_clean)
}

/// `live` among `names`, a listing of the directory.
pub(crate) fn live_among(dir: &LockDir, names: Vec<Vec<u8>>, may_clean: bool) -> Vec<Lease> {
    let mut leases = Vec::new();
    for HeldEntry { name, metadata, text } in
        dir.held_entries_among(names, |name| name.ends_with(".lease"), may_clean)
    {
        let owner = metadata.uid();
        let parsed = text.as_ref().map(|text| serde_json::from_str::<Lease>(text));
        let why = match parsed {
            Ok(Ok(lease)) if lease.uid == owner => {
                tracing::trace!(
                    "lease {name}: {} held by gpurun PID {} of {} ({} reserved{})",
                    lease.uuid,
                    lease.pid,
                    lease.user,
                    crate::options::size::human(lease.reserved_bytes),
                    if lease.exclusive { ", exclusive" } else { "" }
                );
                leases.push(lease);
                continue;
            }
            Ok(Ok(lease)) => format!("claims uid {} but is owned by uid {owner}", lease.uid),
            Ok(Err(_)) => "content unreadable".to_owned(),
            Err(error) => format!("unreadable: {error}"),
        };
        let Some((uuid, pid)) = parse_name(&name) else {
            tracing::warn!(
                "ignoring lease {name} in {}: {why}, and its name names no GPU",
                dir.path().display()
            );
            continue;
        };
        tracing::debug!("lease {name} is held but {why}: counting it as an exclusive reservation");
        leases.push(Lease {
            uuid,
            pid,
            uid: owner,
            user: procfs::user_name(owner),
            reserved_bytes: 0,
            exclusive: true,
            command: format!("(lease file {why})"),
            started: metadata.mtime().max(0) as u64,
            for_rank: None,
        });
    }
    leases.sort_by(|a, b| (a.started, a.pid, &a.uuid).cmp(&(b.started, b.pid, &b.uuid)));
    leases
}

/// One GPU to lease: its UUID, what the lease reserves of it (`--min-free`'s bytes there), and
/// its NVML index (the lease's end wakes the waiters for it). A `--per-rank` group's record
/// lists its set as these, in rank order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Claim {
    pub(crate) uuid: String,
    pub(crate) index: u32,
    pub(crate) reserved_bytes: u64,
}

/// Takes a lease on each GPU claimed; call with the directory lock held. On any failure (a full
/// disk, say) nothing is left behind: leases taken so far are dropped.
pub(crate) fn reserve(
    dir: &LockDir,
    known: &Arc<KnownGpus>,
    claims: &[Claim],
    exclusive: bool,
    command: &str,
) -> Result<Vec<HeldLease>, LockDirError> {
    let uid = current_uid();
    let pid = std::process::id();
    let mut held = Vec::new();
    for Claim { uuid, reserved_bytes, index } in claims {
        let lease = Lease {
            uuid: uuid.clone(),
            pid,
            uid,
            user: procfs::user_name(uid),
            reserved_bytes: *reserved_bytes,
            exclusive,
            command: command.to_owned(),
            started: now(),
            for_rank: None,
        };
        let safe_uuid: String = uuid.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        let (lock, entry) = create_unique(dir, &format!("{safe_uuid}.{pid}"), ".lease")?;
        let text = serde_json::to_string(&lease).expect("plain data serialises");
        (&*lock).write_all(text.as_bytes()).map_err(|e| dir.io(e))?;
        let waker = (dir.duplicate()?, Arc::clone(known), crate::reserve::ticket::mask_of([*index]));
        held.push(HeldLease { held: Some((entry, lock)), waker });
    }
    Ok(held)
}

/// Creates `<stem>.<random><suffix>` exclusively and locked (`LockDir::create_locked`); the
/// entry is removed again when dropped.
fn create_unique(dir: &LockDir, stem: &str, suffix: &str) -> Result<(Flock<File>, Entry), LockDirError> {
    for attempt in 0..16u32 {
        let random = crate::process::random_bits(attempt);
        let name = format!("{stem}.{random:08x}{suffix}");
        match dir.create_locked(&name) {
            Ok(lock) => return Ok((lock, Entry::new(dir, name)?)),
            Err(nix::errno::Errno::EEXIST | nix::errno::Errno::EWOULDBLOCK) => continue,
            Err(error) => return Err(dir.io(error)),
        }
    }
    Err(dir.io(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "cannot create a unique entry")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::FlockArg;

    #[test]
    fn names_give_the_gpu_and_the_pid() {
        assert_eq!(parse_name("GPU-12ab-34.4321.0badf00d.lease"), Some(("GPU-12ab-34".to_owned(), 4321)));
        assert_eq!(parse_name("junk.lease"), None);
        assert_eq!(parse_name("GPU-1.x.0.lease"), None);
    }

    #[test]
    fn leases_live_while_held_and_vanish_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("locks");
        let dir = LockDir::open(&path, true).unwrap();
        let claim = Claim { uuid: "GPU-abc".to_owned(), index: 0, reserved_bytes: 42 };
        let held = reserve(&dir, &Arc::default(), &[claim], true, "train").unwrap();
        let leases = live(&dir, true);
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].reserved_bytes, 42);
        assert!(leases[0].exclusive);
        drop(held);
        assert!(live(&dir, true).is_empty());
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0, "nothing is left");
    }

    #[test]
    fn a_held_lease_with_garbage_counts_as_an_exclusive_reservation() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let file = dir.create("GPU-dead-beef.77.00000001.lease").unwrap();
        (&file).write_all(b"gpurun: warning: not JSON").unwrap();
        let _lock = Flock::lock(file, FlockArg::LockExclusive).unwrap();
        let leases = live(&dir, true);
        assert_eq!(leases.len(), 1, "{leases:?}");
        assert_eq!(
            (leases[0].uuid.as_str(), leases[0].pid, leases[0].exclusive),
            ("GPU-dead-beef", 77, true)
        );
    }
}
