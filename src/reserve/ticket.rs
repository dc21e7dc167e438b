//! The wait queue. A launch that has to wait holds `ticket.<nanoseconds>.<pid>.<mask>`, locked
//! while it waits, naming the GPUs it could ever use (`mask`: their NVML indices as bits, so that
//! who waits for which GPU can be read from the names alone). Waiters are served first come, first served, but a
//! waiter holds back only the GPUs it could use: a later launch may start at once on GPUs that
//! no earlier waiter qualifies for.
//!
//! Tickets are checked like leases and more, since a ticket that cannot be trusted must not
//! stall anyone: it must be locked, owned by the user it names, name a live process of that
//! user, and not claim a place earlier than the file itself (a backdated ticket would jump the
//! queue). Anything else is ignored. A waiter killed by a signal that can be caught removes its
//! ticket; one killed outright leaves a ticket whose lock is gone, which stops counting at once
//! and is removed by the owner's next launch.
//!
//! Hand-offs are event-driven (DESIGN 13), with no daemon: each waiter sleeps on its own FIFO,
//! `wake.<nanoseconds>.<pid>`. A gpurun whose leases end writes to the FIFO of the first waiter
//! that could use one of its GPUs; a waiter that leaves the queue (it started, gave up, was
//! interrupted) wakes the next one that shares a GPU with it. So one hand-off wakes one waiter,
//! whatever the queue's length, and no waiter scans the queue's contents: a waiter reads only
//! the tickets ahead of it, and the names tell it whether it is a head (no live ticket ahead
//! shares a GPU with it; the first such name is opened and checked, as every ticket is, since
//! a name alone is anybody's to plant). Only heads poll NVML, every `SAFETY_POLL`, for GPUs freed outside
//! gpurun and for lost wake-ups (a waker killed outright); the others look at the names every
//! `ROLE_CHECK`, which finds a head that died without passing its turn on. A FIFO rather than a
//! signal: another user's gpurun cannot signal this one, but may write to its FIFO (mode 0622;
//! a stray byte only costs a look, and looks are paced).
//!
//! A waiter holds its place only while it can be seen to act on its wake-ups: its FIFO exists
//! and is open, and a byte written to it is read (the reader sets the FIFO's access time)
//! within `UNRESPONSIVE`. A head that hangs, or a planted ticket held by some process of its
//! owner that is not a gpurun, stops holding anyone up once it leaves a wake-up unread.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};

use crate::options::count::Count;
use crate::options::size::Threshold;
use crate::options::Policy;
use crate::process::procfs;
use crate::reserve::lockdir::{current_uid, Entry, HeldEntry, LockDir, LockDirError};

/// How far a ticket's claimed time may precede its file's last change.
const BACKDATING_SLACK_NS: i128 = 5_000_000_000;

/// What a ticket file says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Waiter {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) user: String,
    /// Nanoseconds since the epoch when it joined the queue (also in the file name).
    pub(crate) since_ns: u64,
    /// UUIDs of the GPUs it could ever use.
    pub(crate) gpus: Vec<String>,
    /// The request, as the user would type it.
    pub(crate) request: String,
    /// What it needs of those GPUs, to tell whether it could be served now.
    pub(crate) needs: Needs,
}

/// The load part of a waiter's request (the rest is in `gpus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Needs {
    pub(crate) count: Count,
    pub(crate) min_free: Option<Threshold>,
    pub(crate) max_util: Option<u32>,
    pub(crate) exclusive: bool,
    pub(crate) policy: Policy,
}

impl Waiter {
    /// Its place in the queue: when it joined, then its PID.
    pub(crate) fn key(&self) -> (u64, u32) {
        (self.since_ns, self.pid)
    }
}

/// A head of the queue probes NVML this often while nothing wakes it: GPUs freed outside gpurun
/// (a foreign process ending) and lost wake-ups are found within it.
pub(crate) const SAFETY_POLL: Duration = Duration::from_secs(2);
/// A waiter behind a head looks at the ticket names this often (no NVML, no file read), to
/// notice that it became a head.
pub(crate) const ROLE_CHECK: Duration = Duration::from_secs(2);

/// A waiter behind a head looks at the machine past it this often, where a GPU it could use
/// has no lease (a head that could start would take it: `reserve::stalled`).
pub(crate) const HEAD_CHECK: Duration = Duration::from_secs(2);

/// The UUIDs of this machine's GPUs and MIG devices with their NVML index keys, as this launch
/// probed them: a ticket listing a GPU this machine does not have, or whose name marks other
/// GPUs than the ones it lists, is not a waiter of this machine.
#[derive(Debug, Default)]
pub(crate) struct KnownGpus(HashMap<String, u32>);

impl KnownGpus {
    pub(crate) fn of(machine: &crate::probe::gpu::Machine) -> Arc<KnownGpus> {
        Arc::new(KnownGpus(machine.devices().filter_map(|gpu| Some((gpu.lease_id()?, gpu.index))).collect()))
    }

    /// The mask of the listed GPUs, or the first UUID this machine does not have.
    fn mask_of<'a>(&self, uuids: &'a [String]) -> Result<u64, &'a str> {
        let keys: Result<Vec<u32>, &str> =
            uuids.iter().map(|uuid| self.0.get(uuid).copied().ok_or(uuid.as_str())).collect();
        keys.map(mask_of)
    }
}

/// This launch's place in the queue; dropping it leaves the queue (files removed first) and
/// passes the turn to the next waiter that shares a GPU with it.
pub(crate) struct Ticket {
    _entry: Entry,
    _lock: Flock<File>,
    key: (u64, u32),
    /// The NVML indices of the GPUs it could use, as bits (index mod 64).
    mask: u64,
    /// Its FIFO's read end (non-blocking), and the FIFO's entry; `None` where the FIFO could
    /// not be made (it then polls like a head).
    wake: Option<(OwnedFd, Entry)>,
    dir: LockDir,
    known: Arc<KnownGpus>,
}

/// The bits of these NVML indices (a MIG device counts as its GPU).
pub(crate) fn mask_of(indices: impl IntoIterator<Item = u32>) -> u64 {
    indices
        .into_iter()
        .map(|key| crate::probe::gpu::mig_parts(key).map_or(key, |(parent, _)| parent))
        .fold(0, |mask, index| mask | 1 << (index % 64))
}

/// `ticket.<ns>.<pid>.<mask>` -> ((ns, pid), mask).
fn parse_name(name: &str) -> Option<((u64, u32), u64)> {
    let mut parts = name.strip_prefix("ticket.")?.split('.');
    let since = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let mask = u64::from_str_radix(parts.next()?, 16).ok()?;
    parts.next().is_none().then_some(((since, pid), mask))
}

fn wake_name((since_ns, pid): (u64, u32)) -> String {
    format!("wake.{since_ns:020}.{pid}")
}

/// Joins the queue, in the order of the ticket names (their time, then the PID): the directory
/// lock is not needed for that. `mask`: `mask_of` the GPUs it could ever use.
pub(crate) fn take(
    dir: &LockDir,
    known: &Arc<KnownGpus>,
    gpus: Vec<String>,
    mask: u64,
    request: &str,
    needs: Needs,
) -> Result<Ticket, LockDirError> {
    let pid = std::process::id();
    let uid = current_uid();
    // A ticket someone else locked the moment it was made (`create_locked`) is given up for
    // one a little later.
    let mut tries = 0;
    let (since_ns, wake, entry, lock) = loop {
        let since_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        // The FIFO first: a waker that sees the ticket finds its FIFO.
        let wake = dir
            .make_fifo(&wake_name((since_ns, pid)))
            .ok()
            .and_then(|fifo| Some((fifo, Entry::new(dir, wake_name((since_ns, pid))).ok()?)));
        let name = format!("ticket.{since_ns:020}.{pid}.{mask:016x}");
        match dir.create_locked(&name) {
            Ok(lock) => break (since_ns, wake, Entry::new(dir, name)?, lock),
            Err(nix::errno::Errno::EWOULDBLOCK | nix::errno::Errno::EEXIST) if tries < 16 => tries += 1,
            Err(error) => return Err(dir.io(error)),
        }
    };
    let waiter =
        Waiter { pid, uid, user: procfs::user_name(uid), since_ns, gpus, request: request.to_owned(), needs };
    let text = serde_json::to_string(&waiter).expect("plain data serialises");
    (&*lock).write_all(text.as_bytes()).map_err(|e| dir.io(e))?;
    Ok(Ticket {
        _entry: entry,
        _lock: lock,
        key: (since_ns, pid),
        mask,
        wake,
        dir: dir.duplicate()?,
        known: Arc::clone(known),
    })
}

impl Ticket {
    /// What a wait sleeps on: readable when another gpurun passes the turn here.
    pub(crate) fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.wake.as_ref().map(|(fd, _)| fd.as_fd())
    }

    /// Empties the FIFO after a wake-up; whether a lease ended (not only a waiter ahead left).
    pub(crate) fn drain(&self) -> bool {
        let mut lease_ended = false;
        if let Some((fd, _)) = &self.wake {
            let mut buffer = [0u8; 4096];
            let mut read_any = false;
            while let Ok(read @ 1..) = nix::unistd::read(fd, &mut buffer) {
                lease_ended |= buffer[..read].contains(&LEASE_ENDED);
                read_any = true;
                tracing::trace!(
                    "woken: {read} byte{} in the FIFO ({})",
                    if read == 1 { "" } else { "s" },
                    if lease_ended { "a lease ended" } else { "the waiter ahead left" }
                );
            }
            // Read, said in the FIFO's access time (set here, whatever the mount's atime
            // rule): the waiters behind see that this one acts on its wake-ups (`unresponsive`).
            if read_any {
                use nix::sys::time::TimeSpec;
                let _ = nix::sys::stat::futimens(fd, &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_OMIT);
            }
        }
        lease_ended
    }

    /// Whether this waiter, not a head, should look at the machine past the heads ahead
    /// (`stalled`): after `HEAD_CHECK` (longer the more names are ahead, so that a long queue
    /// costs a few probes, not one per waiter), and only where a GPU it could use has no lease
    /// at all (`leased`: the UUIDs the lease names hold), the one way a head that could start
    /// would be holding free GPUs. Names only: no NVML, no file read.
    pub(crate) fn look_past_the_heads(&self, names: &[Vec<u8>], leased: &[String], waited: Duration) -> bool {
        let ahead = names
            .iter()
            .filter_map(|name| parse_name(std::str::from_utf8(name).ok()?))
            .filter(|(key, mask)| *key < self.key && mask & self.mask != 0)
            .count();
        if waited < HEAD_CHECK * (1 + ahead as u32 / 16) {
            return false;
        }
        self.known.0.iter().any(|(uuid, key)| mask_of([*key]) & self.mask != 0 && !leased.contains(uuid))
    }

    /// Whether no waiter ahead shares a GPU with this one: the names say which tickets could,
    /// and the first that can be trusted (`trusted`) settles it. A name alone is anybody's to
    /// plant: another user's `ticket.1.1.ffff` must not make every waiter behind it sleep as
    /// if it were the head.
    pub(crate) fn is_head(&self, dir: &LockDir) -> bool {
        if self.wake.is_none() {
            return true;
        }
        !queue_names(dir).iter().any(|(name, (key, mask))| {
            *key < self.key && mask & self.mask != 0 && trusted_at(dir, &self.known, name)
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Out of the queue first (the entries go with the fields, after this), then the turn
        // passes to the next waiter that could use one of these GPUs.
        self.dir.remove_if_mine(self._entry.name.as_bytes(), current_uid());
        wake_first(&self.dir, &self.known, self.mask, Some(self.key), TURN_PASSED);
    }
}

/// What a wake-up byte says: a lease ended (NVML may show its GPU free a moment later, so the
/// waiter looks again soon if it cannot start yet), or the waiter ahead left the queue.
pub(crate) const LEASE_ENDED: u8 = 1;
pub(crate) const TURN_PASSED: u8 = 2;

/// Takes the SIGPIPE a failed FIFO write left pending, if any (without waiting).
fn take_pending_sigpipe() {
    crate::process::signals::take_pending(nix::sys::signal::Signal::SIGPIPE);
}

/// How many waiters are queued, if together they could use every GPU of `mask` (from the names
/// alone: a dead ticket still counted only makes a launch queue, where it is then a head);
/// `None` otherwise.
pub(crate) fn queue_covers(dir: &LockDir, known: &KnownGpus, mask: u64) -> Option<usize> {
    let sharing: Vec<(String, u64)> = queue_names(dir)
        .into_iter()
        .filter(|(_, (_, ticket_mask))| ticket_mask & mask != 0)
        .map(|(name, (_, ticket_mask))| (name, ticket_mask))
        .collect();
    // Only tickets that can be trusted cover (a planted name must not queue every launch);
    // usually the first does, and the rest are not opened.
    let mut covered = 0u64;
    for (name, ticket_mask) in &sharing {
        if covered & mask == mask {
            break;
        }
        if trusted_at(dir, known, name) {
            covered |= ticket_mask;
        }
    }
    (covered & mask == mask).then_some(sharing.len())
}

/// A ticket's name, and what it says: ((time, PID), mask).
type Named = (String, ((u64, u32), u64));

/// The ticket names in the directory, with their (key, mask), first come first.
fn queue_names(dir: &LockDir) -> Vec<Named> {
    let mut names: Vec<Named> = dir
        .entries()
        .into_iter()
        .filter_map(|name| {
            let name = String::from_utf8(name).ok()?;
            let parsed = parse_name(&name)?;
            Some((name, parsed))
        })
        .collect();
    names.sort_unstable_by_key(|(_, (key, _))| *key);
    names
}

/// Whether the ticket `name` is a live waiter's (see `trusted`).
fn trusted_at(dir: &LockDir, known: &KnownGpus, name: &str) -> bool {
    dir.held_entry(name).and_then(|entry| trusted(dir, known, entry)).is_some()
}

/// Wakes the first waiter (after `after`, if given) that could use one of the GPUs in `mask`:
/// a byte in its FIFO. A waiter gone without its FIFO, or whose FIFO nobody reads, is skipped.
/// Returns whether one was woken.
pub(crate) fn wake_first(
    dir: &LockDir,
    known: &KnownGpus,
    mask: u64,
    after: Option<(u64, u32)>,
    why: u8,
) -> bool {
    let queue = queue_names(dir)
        .into_iter()
        .filter(|(_, (key, ticket_mask))| ticket_mask & mask != 0 && after.is_none_or(|after| *key > after));
    for (name, (key, _)) in queue {
        // Only a live waiter's own FIFO: a planted ticket, or a FIFO of another owner held
        // open to take the wake-ups, is passed over.
        let Some(waiter) = dir.held_entry(&name).and_then(|entry| trusted(dir, known, entry)) else {
            continue;
        };
        let Some(fifo) = dir.open_fifo_of(&wake_name(key), waiter.uid) else { continue };
        match nix::unistd::write(&fifo, &[why]) {
            Ok(_) => return true,
            // The waiter closed its FIFO between the open and the write: the kernel raised
            // SIGPIPE at this thread, where it waits, blocked, for the signalfd that would take
            // it for a signal meant to end gpurun. It is this write's, not anyone's request.
            Err(nix::errno::Errno::EPIPE) => take_pending_sigpipe(),
            Err(_) => {}
        }
    }
    false
}

/// The waiters ahead of `ticket` (every one without a ticket): only their files are read, so a
/// waiter's look costs what is ahead of it, not the queue's length.
pub(crate) fn waiters_ahead(
    dir: &LockDir,
    known: &KnownGpus,
    ticket: Option<&Ticket>,
    may_clean: bool,
) -> Vec<Waiter> {
    let before = ticket.map(|t| t.key);
    let wanted = |name: &str| parse_name(name).is_some_and(|(key, _)| before.is_none_or(|own| key < own));
    let mut found: Vec<Waiter> = dir
        .held_entries(wanted, may_clean)
        .into_iter()
        .filter_map(|entry| trusted(dir, known, entry))
        .collect();
    found.sort_by_key(Waiter::key);
    found
}

/// The waiter a locked ticket stands for, if it can be trusted: its content names its owner,
/// matches its name, lists only GPUs of this machine and marks exactly those in its name,
/// claims no place earlier than the file itself, and its PID is a live process of that owner
/// that is not stopped. Anything else is ignored (said at debug level).
fn trusted(
    dir: &LockDir,
    known: &KnownGpus,
    HeldEntry { name, metadata, text }: HeldEntry,
) -> Option<Waiter> {
    let ((since_ns, pid), mask) = parse_name(&name)?;
    let text = text.unwrap_or_default();
    let changed_ns = i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec());
    let problem = match serde_json::from_str::<Waiter>(&text) {
        Err(_) => "content unreadable".to_owned(),
        Ok(waiter) if waiter.uid != metadata.uid() => {
            format!("claims uid {} but is owned by uid {}", waiter.uid, metadata.uid())
        }
        Ok(waiter) if waiter.key() != (since_ns, pid) => "content does not match its name".to_owned(),
        // A real waiter's name marks the GPUs it lists (a MIG device marks its GPU, so never more
        // marks than GPUs), and it waits only for a request some state of the machine could
        // meet (others are refused with 125 before they queue): a name that covers every GPU
        // over an empty list, or a request for more GPUs than it lists, holds nothing.
        Ok(waiter) if waiter.gpus.is_empty() || mask.count_ones() as usize > waiter.gpus.len() => {
            format!("its name marks {} GPUs but it lists {}", mask.count_ones(), waiter.gpus.len())
        }
        // The name's mask is what `take` computed from the listed GPUs' indices: any other one
        // (an all-GPU mask over invented UUIDs) would hold back GPUs the ticket never lists.
        Ok(waiter) if known.mask_of(&waiter.gpus) != Ok(mask) => match known.mask_of(&waiter.gpus) {
            Err(uuid) => format!("it lists {uuid}, which is not a GPU of this machine"),
            Ok(listed) => format!("its name marks GPUs {mask:#x} but it lists GPUs {listed:#x}"),
        },
        Ok(waiter) if waiter.needs.count.min as usize > waiter.gpus.len() => format!(
            "it asks for {} GPUs but lists {} it could use: no state of the machine meets that",
            waiter.needs.count.min,
            waiter.gpus.len()
        ),
        Ok(_) if changed_ns - i128::from(since_ns) > BACKDATING_SLACK_NS => {
            "claims a place earlier than the file itself".to_owned()
        }
        Ok(_) if procfs::uid_of(pid) != Some(metadata.uid()) || !procfs::is_alive(pid) => {
            format!("PID {pid} is not a live process of its owner")
        }
        // Stopped (Ctrl-Z, SIGSTOP) it cannot act on a wake-up: while stopped it holds no place
        // and no GPU, and the waiters behind it go first; continued, it has its place again.
        Ok(_) if procfs::stat(pid).is_some_and(|stat| stat.is_stopped()) => {
            format!("PID {pid} is stopped")
        }
        Ok(waiter) => match unresponsive(dir, (since_ns, pid), metadata.uid()) {
            None => {
                tracing::trace!("ticket {name}: PID {pid} of {} waits for {}", waiter.user, waiter.request);
                return Some(waiter);
            }
            Some(problem) => problem,
        },
    };
    tracing::debug!("ignoring ticket {name} in {}: {problem}", dir.path().display());
    None
}

/// A waiter that has not read a wake-up this long after it was written is not acting on them
/// (hung, or not a gpurun at all): the safety net's period twice, and a second.
const UNRESPONSIVE: Duration = Duration::from_secs(5);

/// Why the waiter `key` cannot be seen to act on a wake-up, if it cannot: its FIFO is gone, is
/// not its owner's, has no reader (nobody could be woken), or holds a byte written more than
/// `UNRESPONSIVE` ago and not read since (a waiter sets the FIFO's access time when it reads).
fn unresponsive(dir: &LockDir, key: (u64, u32), owner: u32) -> Option<String> {
    let pid = key.1;
    let Some(fifo) = dir.open_fifo_of(&wake_name(key), owner) else {
        return Some(format!("PID {pid} has no FIFO open to be woken through"));
    };
    let stat = nix::sys::stat::fstat(&fifo).ok()?;
    let written = Duration::new(stat.st_mtime.max(0) as u64, stat.st_mtime_nsec as u32);
    let read = Duration::new(stat.st_atime.max(0) as u64, stat.st_atime_nsec as u32);
    let unread_for = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.saturating_sub(written);
    (written > read && unread_for > UNRESPONSIVE)
        .then(|| format!("PID {pid} has not read the wake-up written {} s ago", unread_for.as_secs()))
}

/// The waiters ahead of `ticket`: those that came earlier, or every one for a launch that has
/// no ticket yet (a new launch queues behind the waiters).
pub(crate) fn ahead<'a>(waiters: &'a [Waiter], ticket: Option<&Ticket>) -> impl Iterator<Item = &'a Waiter> {
    let own = ticket.map(|t| t.key);
    waiters.iter().filter(move |w| own.is_none_or(|key| w.key() < key) && Some(w.key()) != own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::FlockArg;

    fn needs() -> Needs {
        Needs {
            count: Count::exactly(1),
            min_free: None,
            max_util: None,
            exclusive: true,
            policy: Policy::MostFree,
        }
    }

    fn known() -> Arc<KnownGpus> {
        Arc::new(KnownGpus([("GPU-a".to_owned(), 0), ("GPU-b".to_owned(), 1)].into_iter().collect()))
    }

    fn dir() -> (tempfile::TempDir, LockDir) {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        (base, dir)
    }

    #[test]
    fn tickets_queue_in_order_and_leave_on_drop() {
        let (_base, dir) = dir();
        let first = take(&dir, &known(), vec!["GPU-a".to_owned()], 0b01, "--gpus 1", needs()).unwrap();
        let second = take(&dir, &known(), vec!["GPU-b".to_owned()], 0b10, "--gpus 1", needs()).unwrap();
        // Different GPUs: each is a head of its own.
        assert!(first.is_head(&dir) && second.is_head(&dir));
        let third =
            take(&dir, &known(), vec!["GPU-a".to_owned(), "GPU-b".to_owned()], 0b11, "--gpus 2", needs())
                .unwrap();
        assert!(!third.is_head(&dir), "behind both");
        // A lease ending on GPU 1 wakes the first waiter for it (second), not first.
        assert!(wake_first(&dir, &known(), 0b10, None, LEASE_ENDED));
        assert!(second.drain(), "woken, for a lease's end");
        assert!(!first.drain() && !third.drain());
        drop(third);
        let all = waiters_ahead(&dir, &known(), None, true);
        assert_eq!(all.len(), 2);
        assert_eq!(ahead(&all, Some(&first)).count(), 0);
        assert_eq!(
            ahead(&all, Some(&second)).map(|w| w.gpus.clone()).collect::<Vec<_>>(),
            vec![vec!["GPU-a"]]
        );
        assert_eq!(ahead(&all, None).count(), 2, "a launch without a ticket is behind everyone");
        drop(first);
        assert_eq!(waiters_ahead(&dir, &known(), None, true).len(), 1);
    }

    #[test]
    fn forged_and_backdated_tickets_are_ignored() {
        let (_base, dir) = dir();
        let pid = std::process::id();
        let forged = |name: &str, waiter: &Waiter| {
            let file = dir.create(name).unwrap();
            (&file).write_all(serde_json::to_string(waiter).unwrap().as_bytes()).unwrap();
            Flock::lock(file, FlockArg::LockExclusive).unwrap()
        };
        let honest = Waiter {
            pid,
            uid: current_uid(),
            user: "me".to_owned(),
            since_ns: 1,
            gpus: vec!["GPU-a".to_owned()],
            request: String::new(),
            needs: needs(),
        };
        // Place 1 ns after the epoch: far earlier than the file.
        let _backdated = forged(&format!("ticket.{:020}.{pid}.0000000000000001", 1), &honest);
        let other_uid = Waiter { uid: current_uid() + 1, since_ns: 2, ..honest.clone() };
        let _wrong_owner = forged(&format!("ticket.{:020}.{pid}.0000000000000001", 2), &other_uid);
        let _garbage = {
            let file = dir.create(&format!("ticket.{:020}.{pid}.0000000000000001", 3)).unwrap();
            Flock::lock(file, FlockArg::LockExclusive).unwrap()
        };
        assert!(waiters_ahead(&dir, &known(), None, false).is_empty());
    }
}
