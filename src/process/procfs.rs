//! Everything gpurun reads from `/proc`, in one place: a process's state, parent, owner, command
//! line and environment, its children, who holds a file lock, and gpurun's own signal sets.
//! `None` where it cannot be read (gone, another PID namespace, hidepid).
//!
//! Nothing here walks all of `/proc`: the cost of a question depends on the processes it is
//! about, never on how many processes the host runs.

use std::os::unix::fs::MetadataExt;

/// The fields of `/proc/PID/stat` gpurun uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `T`, `t`, `Z`, `X`...
    pub state: char,
    pub parent: u32,
}

impl Stat {
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }

    /// In a job-control stop (or traced).
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }
}

/// Parses a `stat` line. The command name may hold spaces and parentheses, so the fields resume
/// after the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let mut fields = line[line.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some(Stat { state, parent })
}

pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether a process with this PID exists in this PID namespace (zombies included).
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A live process: it exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|stat| !stat.is_zombie())
}

pub fn uid_of(pid: u32) -> Option<u32> {
    Some(std::fs::metadata(format!("/proc/{pid}")).ok()?.uid())
}

/// The owning user's name, or the numeric uid when it has no passwd entry.
pub fn owner(pid: u32) -> Option<String> {
    uid_of(pid).map(user_name)
}

/// A uid as a name, or as the number when it has no passwd entry.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|user| user.name)
        .unwrap_or_else(|| uid.to_string())
}

/// `alice (uid 1001)`, or `uid 4242` for a uid without a passwd entry.
pub fn describe_uid(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        format!("{name} (uid {uid})")
    }
}

/// The short name (`comm`).
pub fn short_name(pid: u32) -> Option<String> {
    Some(std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_owned())
}

/// The command line, arguments joined by spaces; `[name]` for kernel threads and processes
/// whose cmdline is empty.
pub fn command_line(pid: u32) -> Option<String> {
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
pub fn environment_variable(pid: u32, name: &str) -> Option<Option<String>> {
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
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else { continue };
        found.extend(list.split_whitespace().filter_map(|word| word.parse::<u32>().ok()));
    }
    found
}

/// Every descendant of `root`, found from `root` down (zombies included).
pub fn descendants(root: u32) -> Vec<u32> {
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
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
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

/// The PIDs holding an exclusive `flock` on the file with this device and inode, from
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 4321 fd:01:1234 0 EOF`; waiters are `->` lines).
pub fn flock_holders(major: u64, minor: u64, inode: u64) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else { return Vec::new() };
    let wanted = format!("{major:02x}:{minor:02x}:{inode}");
    text.lines()
        .filter(|line| !line.contains("->"))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields[..] {
                [_, "FLOCK", _, _, pid, file, ..] if file == wanted => pid.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

/// Whether descriptor `fd` of this process is open (it has a `/proc/self/fd` entry).
pub fn is_open(fd: i32) -> bool {
    std::fs::symlink_metadata(format!("/proc/self/fd/{fd}")).is_ok()
}

/// Whether this process sees the host's PID namespace: PID 2 is the kernel's kthreadd there.
pub fn in_host_pid_namespace() -> bool {
    short_name(2).is_some_and(|name| name == "kthreadd")
}

/// gpurun's own ignored and blocked signals as `/proc/self/status` shows them (`SigIgn`,
/// `SigBlk`): bit N-1 is signal N, real-time signals included.
pub fn own_signal_sets() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
        .unwrap_or_default();
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
        assert_eq!(parse_stat(line), Some(Stat { state: 'S', parent: 7 }));
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
    fn flock_holders_are_found() {
        use std::os::unix::fs::MetadataExt;
        let file = tempfile::tempfile().unwrap();
        let meta = file.metadata().unwrap();
        let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
        let dev = meta.dev();
        let holders = flock_holders(nix::sys::stat::major(dev), nix::sys::stat::minor(dev), meta.ino());
        assert_eq!(holders, vec![std::process::id()]);
        drop(locked);
    }
}
