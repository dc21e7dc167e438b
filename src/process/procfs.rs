//! Everything gpurun reads from `/proc`, in one place: a process's state, parent, owner, command
//! line and environment, its children, who holds a file lock, and gpurun's own signal sets.
//! `None` where it cannot be read (gone, another PID namespace, hidepid).
//!
//! Nothing here walks all of `/proc`: the cost of a question depends on the processes it is
//! about, never on how many processes the host runs.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

/// The fields of `/proc/PID/stat` gpurun uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// `R`, `S`, `D`, `T`, `t`, `Z`, `X`...
    pub(crate) state: char,
    pub(crate) parent: u32,
    /// When it started, in clock ticks after boot: with the PID, names one process for good.
    pub(crate) start_ticks: u64,
}

impl Stat {
    pub(crate) fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }

    /// In a job-control stop (or traced).
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }
}

/// Parses a `stat` line. The command name may hold spaces and parentheses, so the fields resume
/// after the last `)`.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let mut fields = line[line.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    // Field 22; `state` was field 3.
    let start_ticks = fields.nth(22 - 5)?.parse().ok()?;
    Some(Stat { state, parent, start_ticks })
}

pub(crate) fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether a process with this PID exists in this PID namespace (zombies included).
pub(crate) fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A live process: it exists and is not a zombie.
pub(crate) fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|stat| !stat.is_zombie())
}

pub(crate) fn uid_of(pid: u32) -> Option<u32> {
    Some(std::fs::metadata(format!("/proc/{pid}")).ok()?.uid())
}

/// The owning user's name, or the numeric uid when it has no passwd entry.
pub(crate) fn owner(pid: u32) -> Option<String> {
    uid_of(pid).map(user_name)
}

/// A uid as a name, or as the number when it has no passwd entry.
pub(crate) fn user_name(uid: u32) -> String {
    // Looked up once per uid: each lookup is a walk through NSS (nscd's socket, nsswitch.conf,
    // /etc/passwd), and a launch names its own user for every lease and for the history.
    static KNOWN: std::sync::Mutex<BTreeMap<u32, String>> = std::sync::Mutex::new(BTreeMap::new());
    let mut known = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    known
        .entry(uid)
        .or_insert_with(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map(|user| user.name)
                .unwrap_or_else(|| uid.to_string())
        })
        .clone()
}

/// `alice (uid 1001)`, or `uid 4242` for a uid without a passwd entry.
pub(crate) fn describe_uid(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        format!("{name} (uid {uid})")
    }
}

/// The short name (`comm`).
pub(crate) fn short_name(pid: u32) -> Option<String> {
    Some(std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_owned())
}

/// The command line, arguments joined by spaces; `[name]` for kernel threads and processes
/// whose cmdline is empty.
pub(crate) fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        return Some(format!("[{}]", short_name(pid)?));
    }
    Some(words.join(" "))
}

/// One variable of a process's initial environment: `None` when the environment cannot be read
/// (another user's process), `Some(None)` when the variable is not set.
pub(crate) fn environment_variable(pid: u32, name: &str) -> Option<Option<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    Some(
        raw.split(|&b| b == 0)
            .find(|entry| entry.starts_with(prefix.as_bytes()))
            .map(|entry| String::from_utf8_lossy(&entry[prefix.len()..]).into_owned()),
    )
}

/// The children of `pid` (zombies included), from `/proc/PID/task/*/children`: a child belongs
/// to the thread that forked it, or that it was reparented to, so every thread is read.
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else { continue };
        found.extend(list.split_whitespace().filter_map(|word| word.parse::<u32>().ok()));
    }
    found
}

/// Every descendant of `root`, found from `root` down (zombies included).
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children(pid) {
            // A racing /proc could in theory show a cycle; never loop on it.
            if child != root && !found.contains(&child) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Whether `ancestor` is `pid` or one of its ancestors.
pub(crate) fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    // A bounded walk: PID chains are short, and a loop in a racing /proc must not hang us.
    for _ in 0..256 {
        if current == ancestor {
            return true;
        }
        let Some(parent) = stat(current).map(|s| s.parent) else { return false };
        if parent == 0 || parent == current {
            return false;
        }
        current = parent;
    }
    false
}

/// The PIDs holding a lock on the file with this device and inode, from `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 4321 fd:01:1234 0 EOF`; waiters are `->` lines). POSIX lines
/// count too: NFS, 9p and CIFS carry `flock(2)` as POSIX locks. The device there is the inode's
/// superblock, which is not always what `stat(2)` says (btrfs subvolumes, overlayfs across
/// filesystems), so a line with the same inode on another device counts when its PID has the
/// file open. Empty where the kernel lists no such lock: a holder in a PID namespace the
/// mounted /proc does not show, a lock that only a file server keeps.
pub(crate) fn flock_holders(dev: u64, inode: u64) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else { return Vec::new() };
    let locks: Vec<(u32, u64, u64)> =
        text.lines().filter(|line| !line.contains("->")).filter_map(lock_line).collect();
    let on_device = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let mut exact: Vec<u32> = locks
        .iter()
        .filter(|&&(_, device, ino)| {
            ino == inode && device == nix::sys::stat::makedev(on_device.0, on_device.1)
        })
        .map(|&(pid, ..)| pid)
        .collect();
    if exact.is_empty() {
        exact = locks
            .iter()
            .filter(|&&(pid, _, ino)| ino == inode && has_open(pid, dev, inode))
            .map(|&(pid, ..)| pid)
            .collect();
    }
    // /proc/locks is read in pages while other locks come and go: a line may be read twice
    // (seen: this process's own lock, twice, about once in 360 runs of the test below).
    exact.sort_unstable();
    exact.dedup();
    exact
}

/// One `/proc/locks` line of a FLOCK or POSIX lock: (pid, device, inode).
fn lock_line(line: &str) -> Option<(u32, u64, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [_, "FLOCK" | "POSIX", _, _, pid, file, ..] = fields[..] else { return None };
    let mut parts = file.split(':');
    let major = u64::from_str_radix(parts.next()?, 16).ok()?;
    let minor = u64::from_str_radix(parts.next()?, 16).ok()?;
    let inode = parts.next()?.parse().ok()?;
    Some((pid.parse().ok()?, nix::sys::stat::makedev(major, minor), inode))
}

/// Whether process `pid` has a descriptor open on the file with this device and inode.
fn has_open(pid: u32, dev: u64, inode: u64) -> bool {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    entries.flatten().any(|entry| {
        std::fs::metadata(entry.path()).is_ok_and(|meta| meta.dev() == dev && meta.ino() == inode)
    })
}

/// Whether this process sees the host's PID namespace: PID 2 is the kernel's kthreadd there.
pub(crate) fn in_host_pid_namespace() -> bool {
    short_name(2).is_some_and(|name| name == "kthreadd")
}

/// gpurun's own ignored and blocked signals as `/proc/self/status` shows them (`SigIgn`,
/// `SigBlk`): bit N-1 is signal N, real-time signals included.
pub(crate) fn own_signal_sets() -> (u64, u64) {
    // Into room for the usual 1.5 KB at once (read_to_string alone starts at 32 bytes and
    // doubles: eight reads), to the end however long (a Groups line can be long).
    let read = |path: &str| {
        let mut text = String::with_capacity(4096);
        std::io::Read::read_to_string(&mut std::fs::File::open(path)?, &mut text).map(|_| text)
    };
    let status = read("/proc/thread-self/status").or_else(|_| read("/proc/self/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0)
    };
    (field("SigIgn:"), field("SigBlk:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(Stat { state: 'S', parent: 7, start_ticks: 987654 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(command_line(pid).is_some());
        assert!(owner(pid).is_some());
        assert!(is_alive(pid));
    }

    #[test]
    fn children_descendants_and_environment() {
        let mut child = std::process::Command::new("sleep").arg("5").env("PROCFS_TEST", "x").spawn().unwrap();
        let pid = child.id();
        assert!(children(std::process::id()).contains(&pid));
        assert!(descendants(std::process::id()).contains(&pid));
        assert!(descends_from(pid, std::process::id()));
        // Until the exec, /proc shows the forked copy of this process.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while command_line(pid).as_deref() != Some("sleep 5") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(environment_variable(pid, "PROCFS_TEST"), Some(Some("x".to_owned())));
        assert_eq!(environment_variable(pid, "PROCFS_TEST_UNSET"), Some(None));
        assert!(exists(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!descendants(std::process::id()).contains(&pid));
    }

    #[test]
    fn missing_process_is_unknown() {
        // Above the largest pid_max Linux allows (2^22).
        assert_eq!(command_line(4_194_305), None);
        assert_eq!(owner(4_194_305), None);
        assert!(!descends_from(4_194_305, 1));
    }

    #[test]
    fn lock_lines() {
        let line = "1: FLOCK  ADVISORY  WRITE 4321 fd:2a:1234 0 EOF";
        assert_eq!(lock_line(line), Some((4321, nix::sys::stat::makedev(0xfd, 0x2a), 1234)));
        let nfs = "2: POSIX  ADVISORY  WRITE 77 00:35:99 0 EOF";
        assert_eq!(lock_line(nfs), Some((77, nix::sys::stat::makedev(0, 0x35), 99)));
        assert_eq!(lock_line("3: OFDLCK ADVISORY  READ  -1 00:05:1 0 EOF"), None);
        assert_eq!(lock_line("garbage"), None);
    }

    #[test]
    fn flock_holders_are_found() {
        let file = tempfile::tempfile().unwrap();
        let meta = file.metadata().unwrap();
        let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
        let holders = flock_holders(meta.dev(), meta.ino());
        // Where the kernel lists this process's lock at all (nearly everywhere), it is found,
        // on whatever device the list names it.
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let listed = locks
            .lines()
            .filter_map(lock_line)
            .any(|(pid, _, ino)| pid == std::process::id() && ino == meta.ino());
        if listed {
            assert_eq!(holders, vec![std::process::id()], "/proc/locks:\n{locks}");
        } else {
            eprintln!("/proc/locks does not list this process's lock here: {locks}");
            assert!(holders.is_empty());
        }
        drop(locked);
    }
}
