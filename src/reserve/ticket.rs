//! The wait queue. A launch that has to wait holds `ticket.<nanoseconds>.<pid>`, locked while it
//! waits, naming the GPUs it could ever use. Waiters are served first come, first served, but a
//! waiter holds back only the GPUs it could use: a later launch may start at once on GPUs that
//! no earlier waiter qualifies for.
//!
//! Tickets are checked like leases and more, since a ticket that cannot be trusted must not
//! stall anyone: it must be locked, owned by the user it names, name a live process of that
//! user, and not claim a place earlier than the file itself (a backdated ticket would jump the
//! queue). Anything else is ignored. A waiter killed by a signal that can be caught removes its
//! ticket; one killed outright leaves a ticket whose lock is gone, which stops counting at once
//! and is removed by the owner's next launch.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
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
pub struct Waiter {
    pub pid: u32,
    pub uid: u32,
    pub user: String,
    /// Nanoseconds since the epoch when it joined the queue (also in the file name).
    pub since_ns: u64,
    /// UUIDs of the GPUs it could ever use.
    pub gpus: Vec<String>,
    /// The request, as the user would type it.
    pub request: String,
    /// What it needs of those GPUs, to tell whether it could be served now.
    pub needs: Needs,
}

/// The load part of a waiter's request (the rest is in `gpus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Needs {
    pub count: Count,
    pub min_free: Option<Threshold>,
    pub max_util: Option<u32>,
    pub exclusive: bool,
    pub policy: Policy,
}

impl Waiter {
    fn key(&self) -> (u64, u32) {
        (self.since_ns, self.pid)
    }
}

/// This launch's place in the queue; dropping it leaves the queue (file removed first).
pub struct Ticket {
    _entry: Entry,
    _lock: Flock<File>,
    key: (u64, u32),
}

fn parse_name(name: &str) -> Option<(u64, u32)> {
    let mut parts = name.strip_prefix("ticket.")?.split('.');
    let since = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((since, pid))
}

/// Joins the queue; call with the directory lock held, so that tickets are ordered.
pub fn take(dir: &LockDir, gpus: Vec<String>, request: &str, needs: Needs) -> Result<Ticket, LockDirError> {
    let since_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let pid = std::process::id();
    let uid = current_uid();
    let name = format!("ticket.{since_ns:020}.{pid}");
    let file = dir.create(&name).map_err(|e| dir.io(e))?;
    let entry = Entry::new(dir, name)?;
    let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| dir.io(e))?;
    let waiter =
        Waiter { pid, uid, user: procfs::user_name(uid), since_ns, gpus, request: request.to_owned(), needs };
    let text = serde_json::to_string(&waiter).expect("plain data serialises");
    (&*lock).write_all(text.as_bytes()).map_err(|e| dir.io(e))?;
    Ok(Ticket { _entry: entry, _lock: lock, key: (since_ns, pid) })
}

/// Every waiter whose ticket can be trusted, first come first. `may_clean`: the caller holds
/// the directory lock, so dead tickets of this user can be removed.
pub fn waiters(dir: &LockDir, may_clean: bool) -> Vec<Waiter> {
    let mut found = Vec::new();
    for HeldEntry { name, metadata, text } in dir.held_entries(|name| parse_name(name).is_some(), may_clean) {
        let Some((since_ns, pid)) = parse_name(&name) else { continue };
        let text = text.unwrap_or_default();
        let changed_ns = i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec());
        let problem = match serde_json::from_str::<Waiter>(&text) {
            Err(_) => Some("content unreadable".to_owned()),
            Ok(waiter) if waiter.uid != metadata.uid() => {
                Some(format!("claims uid {} but is owned by uid {}", waiter.uid, metadata.uid()))
            }
            Ok(waiter) if waiter.key() != (since_ns, pid) => {
                Some("content does not match its name".to_owned())
            }
            Ok(_) if changed_ns - i128::from(since_ns) > BACKDATING_SLACK_NS => {
                Some("claims a place earlier than the file itself".to_owned())
            }
            Ok(_) if procfs::uid_of(pid) != Some(metadata.uid()) || !procfs::is_alive(pid) => {
                Some(format!("PID {pid} is not a live process of its owner"))
            }
            Ok(waiter) => {
                found.push(waiter);
                None
            }
        };
        if let Some(problem) = problem {
            tracing::debug!("ignoring ticket {name} in {}: {problem}", dir.path().display());
        }
    }
    found.sort_by_key(Waiter::key);
    found
}

/// The waiters ahead of `ticket`: those that came earlier, or every one for a launch that has
/// no ticket yet (a new launch queues behind the waiters).
pub fn ahead<'a>(waiters: &'a [Waiter], ticket: Option<&Ticket>) -> impl Iterator<Item = &'a Waiter> {
    let own = ticket.map(|t| t.key);
    waiters.iter().filter(move |w| own.is_none_or(|key| w.key() < key) && Some(w.key()) != own)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> Needs {
        Needs {
            count: Count::exactly(1),
            min_free: None,
            max_util: None,
            exclusive: true,
            policy: Policy::MostFree,
        }
    }

    fn dir() -> (tempfile::TempDir, LockDir) {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        (base, dir)
    }

    #[test]
    fn tickets_queue_in_order_and_leave_on_drop() {
        let (_base, dir) = dir();
        let first = take(&dir, vec!["GPU-a".to_owned()], "--gpus 1", needs()).unwrap();
        let second = take(&dir, vec!["GPU-b".to_owned()], "--gpus 1", needs()).unwrap();
        let all = waiters(&dir, true);
        assert_eq!(all.len(), 2);
        assert_eq!(ahead(&all, Some(&first)).count(), 0);
        assert_eq!(
            ahead(&all, Some(&second)).map(|w| w.gpus.clone()).collect::<Vec<_>>(),
            vec![vec!["GPU-a"]]
        );
        assert_eq!(ahead(&all, None).count(), 2, "a launch without a ticket is behind everyone");
        drop(first);
        assert_eq!(waiters(&dir, true).len(), 1);
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
        let _backdated = forged(&format!("ticket.{:020}.{pid}", 1), &honest);
        let other_uid = Waiter { uid: current_uid() + 1, since_ns: 2, ..honest.clone() };
        let _wrong_owner = forged(&format!("ticket.{:020}.{pid}", 2), &other_uid);
        let _garbage = {
            let file = dir.create(&format!("ticket.{:020}.{pid}", 3)).unwrap();
            Flock::lock(file, FlockArg::LockExclusive).unwrap()
        };
        assert!(waiters(&dir, false).is_empty());
    }
}
