//! The set a node's ranks share under `--per-rank` (DESIGN 4b), as a record in the lock directory:
//! `group.<uid>.<job hash>.<random>`, one per job, owned by the job's user.
//!
//! - The first rank to arrive creates it (state `choosing`), chooses the whole set by the usual
//!   rules and writes it (`chosen`), in rank order, under the directory lock that its own
//!   lease is taken under. Every rank then takes the lease of its own GPUs.
//! - Every rank holds a shared `flock` on the record for as long as it holds its lease: the
//!   record is live exactly while one is held (a crash frees it, a reused PID cannot fake it),
//!   and the last rank to leave removes it.
//! - The set's GPUs whose rank has no lease yet count as that job's reservations for everyone
//!   else, for at most the chooser's `--rank-timeout` after the choice: a rank that never
//!   comes holds nothing past it.
//! - Another user's file is never trusted: a record counts only when its owner is the user it
//!   names, and a rank only looks at records its own user owns.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::process::procfs;
use crate::reserve::lease::{Claim, Lease};
use crate::reserve::lockdir::{current_uid, LockDir, LockDirError};

/// What a group's record says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The job on its node, as the launcher names them (`torchrun:...@host`, `slurm:77:0@n2`).
    pub(crate) job: String,
    /// The node the group is (for `--list`; older records have none).
    #[serde(default)]
    pub(crate) node: String,
    pub(crate) launcher: String,
    pub(crate) local_size: u32,
    /// GPUs per rank.
    pub(crate) per_rank: u32,
    pub(crate) uid: u32,
    pub(crate) user: String,
    /// The rank that chose, and its gpurun's PID.
    pub(crate) chooser_rank: u32,
    pub(crate) chooser_pid: u32,
    #[serde(flatten)]
    pub(crate) state: State,
    /// Unix time the record was made.
    pub(crate) started: f64,
    pub(crate) rank_timeout_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub(crate) enum State {
    /// The chooser is choosing (or waiting for GPUs with --wait).
    Choosing,
    /// The set, in rank order: rank r's GPUs are `gpus[r*per_rank..(r+1)*per_rank]`.
    Chosen { gpus: Vec<Claim>, exclusive: bool, at: f64 },
    /// The chooser could not choose: its message, and whether a retry may do.
    Failed { why: String, failure: GroupFailure },
}

/// Why a rank could not take its part of its group's set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GroupFailure {
    /// Not now: the GPUs were not to be had, or the set did not come in time (a retry may do).
    Busy,
    /// Not as started: the ranks disagree, or the record cannot be used here.
    Broken,
}

impl Record {
    /// Whose GPU `position` is.
    pub(crate) fn rank_of(&self, position: usize) -> u32 {
        (position / self.per_rank.max(1) as usize) as u32
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// A stable 64-bit FNV-1a: the same job gives the same name in every rank's process.
fn job_hash(job: &str) -> u64 {
    job.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

fn prefix_of(job: &str, uid: u32) -> String {
    format!("group.{uid}.{:016x}.", job_hash(job))
}

/// A record's live state: someone holds a shared lock on it (a rank that is running, or the
/// chooser). A shared probe could not tell: it would succeed beside the ranks' shared locks.
fn is_live(file: &File) -> bool {
    let Ok(copy) = file.try_clone() else { return true };
    match Flock::lock(copy, FlockArg::LockExclusiveNonblock) {
        Ok(_probe) => false,
        Err(_) => true,
    }
}

/// A shared lock on a record, never waited for: the only exclusive locks on a record are other
/// launches' liveness probes, which last a moment, or one held on purpose (any user may flock a
/// file they can read), which must not hold this launch, and the directory lock with it, for
/// ever. `None` when it stays locked for a few milliseconds.
fn lock_shared(mut file: File) -> Option<Flock<File>> {
    for _ in 0..20 {
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(lock) => return Some(lock),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => {
                file = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return None,
        }
    }
    None
}

/// This rank's hold on its group's record: dropped after its leases; the last rank to drop its
/// hold removes the record.
pub(crate) struct Membership {
    lock: Option<Flock<File>>,
    name: String,
    dir: LockDir,
    pub(crate) record: Record,
}

impl Membership {
    /// For `--exec`: the command inherits the shared lock, so the record lives as long as it.
    pub(crate) fn hand_over_to_exec(mut self) {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        if let Some(lock) = self.lock.take() {
            let _ = fcntl(&*lock, FcntlArg::F_SETFD(FdFlag::empty()));
            std::mem::forget(lock);
        }
    }

    /// Rewrites the record with `state` (the chooser, under the directory lock).
    fn write(&self, state: State) -> Result<(), LockDirError> {
        let record = Record { state, ..self.record.clone() };
        let text = serde_json::to_string(&record).expect("plain data serialises");
        let Some(lock) = &self.lock else { return Ok(()) };
        lock.set_len(0).map_err(|e| self.dir.io(e))?;
        lock.write_all_at(text.as_bytes(), 0).map_err(|e| self.dir.io(e))
    }

    /// The chooser's set, in rank order, written under the directory lock its own lease is
    /// taken under.
    pub(crate) fn chosen(&self, set: &[Claim], exclusive: bool) -> Result<(), LockDirError> {
        self.write(State::Chosen { gpus: set.to_vec(), exclusive, at: now() })
    }

    /// The chooser could not choose: the other ranks fail with its reason instead of each
    /// choosing again.
    pub(crate) fn failed(&self, why: &str, failure: GroupFailure) {
        if let Err(error) = self.write(State::Failed { why: why.to_owned(), failure }) {
            tracing::debug!("cannot record the group's failure: {error}");
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let Some(lock) = self.lock.take() else { return };
        // Converting the shared lock to an exclusive one succeeds only when no other rank holds
        // it: then this is the last, and the record goes. Only the same file: a record made
        // since under the same name is another's.
        if lock.relock(FlockArg::LockExclusiveNonblock).is_ok() {
            let same = lock
                .metadata()
                .ok()
                .zip(self.dir.stat(&self.name))
                .is_some_and(|(mine, named)| mine.ino() == named.st_ino && mine.dev() == named.st_dev);
            if same {
                self.dir.remove_if_mine(self.name.as_bytes(), current_uid());
            }
        }
    }
}

/// The rank looking for its group, as the record needs it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// What names the job on this node (`rank::launcher::Rank::group_key`).
    pub(crate) job: String,
    /// The node (`rank::launcher::Rank::node`).
    pub(crate) node: String,
    pub(crate) launcher: String,
    pub(crate) local_rank: u32,
    pub(crate) local_size: u32,
    /// GPUs per rank.
    pub(crate) per_rank: u32,
    /// `--rank-timeout`.
    pub(crate) timeout: Duration,
}

/// What a rank found for its job, under the directory lock.
pub(crate) enum Found {
    /// No live record: this rank chooses (the record is made, `choosing`, and held).
    Choose(Membership),
    /// A live record, now held by this rank too.
    Joined(Membership),
}

/// Finds this job's live record (removing a dead one of this user's), or makes one. Call with
/// the directory lock held.
pub(crate) fn find_or_make(dir: &LockDir, rank: &Member) -> Result<Found, LockDirError> {
    let uid = current_uid();
    let prefix = prefix_of(&rank.job, uid);
    for name in dir.entries() {
        let Ok(name) = String::from_utf8(name) else { continue };
        if !name.starts_with(&prefix) {
            continue;
        }
        let Some((file, metadata)) = dir.open_foreign(name.as_bytes()) else { continue };
        if metadata.uid() != uid {
            // Planted by someone else under this user's name: never read, never in the way.
            tracing::debug!("ignoring {name} in {}: owned by uid {}", dir.path().display(), metadata.uid());
            continue;
        }
        if !is_live(&file) {
            dir.remove_if_mine(name.as_bytes(), uid);
            continue;
        }
        let Some(lock) = lock_shared(file) else {
            tracing::debug!(
                "{name} in {}: locked exclusively by another process; not joining it",
                dir.path().display()
            );
            continue;
        };
        // Removed by its last rank between the look and the lock: not this job's any more.
        if lock.metadata().map_or(true, |m| m.nlink() == 0) {
            continue;
        }
        let Some(record) = read(&lock).filter(|record| record.job == rank.job && record.uid == uid) else {
            continue;
        };
        return Ok(Found::Joined(Membership { lock: Some(lock), name, dir: dir.duplicate()?, record }));
    }
    let record = Record {
        job: rank.job.to_owned(),
        node: rank.node.to_owned(),
        launcher: rank.launcher.to_owned(),
        local_size: rank.local_size,
        per_rank: rank.per_rank,
        uid,
        user: procfs::user_name(uid),
        chooser_rank: rank.local_rank,
        chooser_pid: std::process::id(),
        state: State::Choosing,
        started: now(),
        rank_timeout_seconds: rank.timeout.as_secs_f64(),
    };
    for attempt in 0..16u32 {
        let random = crate::process::random_bits(attempt);
        let name = format!("{prefix}{random:08x}");
        let file = match dir.create(&name) {
            Ok(file) => file,
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(error) => return Err(dir.io(error)),
        };
        let Some(lock) = lock_shared(file) else {
            // Locked by someone else in the moment after it was made: not a record of ours.
            dir.remove_if_mine(name.as_bytes(), uid);
            continue;
        };
        let membership = Membership { lock: Some(lock), name, dir: dir.duplicate()?, record: record.clone() };
        membership.write(State::Choosing)?;
        return Ok(Found::Choose(membership));
    }
    Err(dir.io(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "cannot create a unique entry")))
}

fn read(file: &File) -> Option<Record> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, 64 * 1024), &mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Every group's GPUs that no rank has a lease on yet, within its rank timeout, as the leases
/// they are about to be: everyone else's selection, --list and the house rules count them.
/// `names`: the directory's `group.` entries; `live`: the real leases.
pub(crate) fn unclaimed(dir: &LockDir, names: Vec<Vec<u8>>, live: &[Lease]) -> Vec<Lease> {
    let mut held = Vec::new();
    let now = now();
    for name in names {
        if !name.starts_with(b"group.") {
            continue;
        }
        let Some((file, metadata)) = dir.open_foreign(&name) else { continue };
        let Some(record) = read(&file).filter(|record| record.uid == metadata.uid()) else { continue };
        let State::Chosen { gpus, exclusive, at } = &record.state else { continue };
        if now >= at + record.rank_timeout_seconds || !is_live(&file) {
            continue;
        }
        for (position, gpu) in gpus.iter().enumerate() {
            if live.iter().any(|lease| lease.uuid == gpu.uuid) {
                continue;
            }
            held.push(Lease {
                uuid: gpu.uuid.clone(),
                pid: record.chooser_pid,
                uid: record.uid,
                user: record.user.clone(),
                reserved_bytes: gpu.reserved_bytes,
                exclusive: *exclusive,
                command: match record.node.is_empty() {
                    true => format!("(for rank {}, not started yet)", record.rank_of(position)),
                    false => format!(
                        "(for rank {} on node {}, not started yet)",
                        record.rank_of(position),
                        record.node
                    ),
                },
                started: *at as u64,
                for_rank: Some(record.rank_of(position)),
            });
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Writes a record under `name`, as another process (or user) could have.
    fn plant(dir: &LockDir, name: &str, record: &Record) -> File {
        let mut file = dir.create(name).unwrap();
        file.write_all(serde_json::to_string(record).unwrap().as_bytes()).unwrap();
        file
    }

    fn rank(local_rank: u32) -> Member {
        Member {
            job: "group:test".to_owned(),
            node: "vm".to_owned(),
            launcher: "torchrun".to_owned(),
            local_rank,
            local_size: 2,
            per_rank: 1,
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_first_rank_chooses_the_others_join_and_the_last_removes_it() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let Found::Choose(chooser) = find_or_make(&dir, &rank(0)).unwrap() else {
            panic!("the first rank chooses")
        };
        let claim = |uuid: &str, index| Claim { uuid: uuid.to_owned(), index, reserved_bytes: 0 };
        chooser.chosen(&[claim("GPU-a", 0), claim("GPU-b", 1)], false).unwrap();
        // Rank 1 has no lease yet: its GPU counts as reserved for everyone else.
        let unclaimed = unclaimed(&dir, dir.entries(), &[]);
        assert_eq!(unclaimed.iter().map(|l| l.uuid.as_str()).collect::<Vec<_>>(), ["GPU-a", "GPU-b"]);
        assert!(unclaimed[1].command.contains("rank 1"), "{}", unclaimed[1].command);
        let Found::Joined(joined) = find_or_make(&dir, &rank(1)).unwrap() else {
            panic!("the second rank joins")
        };
        assert!(matches!(&joined.record.state, State::Chosen { gpus, .. } if gpus.len() == 2));
        assert_eq!(joined.record.rank_of(1), 1);
        drop(chooser);
        assert_eq!(std::fs::read_dir(base.path().join("locks")).unwrap().count(), 1, "rank 1 still holds it");
        drop(joined);
        assert_eq!(
            std::fs::read_dir(base.path().join("locks")).unwrap().count(),
            0,
            "the last rank removed it"
        );
    }

    #[test]
    fn a_dead_record_or_another_users_is_not_joined() {
        let base = tempfile::tempdir().unwrap();
        let dir = LockDir::open(&base.path().join("locks"), true).unwrap();
        let uid = current_uid();
        let record = Record {
            job: "group:test".to_owned(),
            node: "vm".to_owned(),
            launcher: "torchrun".to_owned(),
            local_size: 2,
            per_rank: 1,
            uid,
            user: "me".to_owned(),
            chooser_rank: 0,
            chooser_pid: 1,
            state: State::Failed { why: "planted".to_owned(), failure: GroupFailure::Busy },
            started: 0.0,
            rank_timeout_seconds: 60.0,
        };
        // Nobody holds it: dead, removed, and this rank chooses.
        let name = format!("{}00000000", prefix_of("group:test", uid));
        drop(plant(&dir, &name, &record));
        assert!(matches!(find_or_make(&dir, &rank(0)).unwrap(), Found::Choose(_)));
    }
}
