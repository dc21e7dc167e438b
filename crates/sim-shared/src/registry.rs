//! Processes that registered themselves as running on a simulated GPU (what a CUDA context is
//! to the real driver). One file per process in the state directory; the simulated NVML lists
//! an entry only while its process is alive and not a zombie, as the driver does.
//!
//! A process in a container knows only its PID there, while the driver (and so NVML, on the
//! host and in the container alike) reports host PIDs. A registration therefore names its PID
//! namespace (`<pid>.ns<inode>.proc`); a reader in another namespace (the host) finds the
//! process whose `/proc/PID/ns/pid` is that namespace and whose last `NSpid` is that PID, once
//! per registration. A reader in the same namespace lists the PID as written: from inside a
//! container it has no host PIDs to give (a deviation from the driver, which gives host PIDs
//! there too).

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One process's memory on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub pid: u32,
    pub uuid: String,
    pub used_bytes: u64,
    /// Its part in MPS on that GPU, if any.
    pub mps: Option<MpsRole>,
    /// Registered from a PID namespace this reader cannot see into (the host, or another
    /// container, read from inside a container): drivers since 535.113.01 leave such a process
    /// out of the lists of a caller in its own namespace, while its memory is still in use.
    pub outside: bool,
}

/// A process's part in MPS: the server is in the GPU's compute list, each client only in its
/// MPS list (nvml.h, nvmlDeviceGetMPSComputeRunningProcesses_v3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpsRole {
    Server,
    Client,
}

impl MpsRole {
    fn word(self) -> &'static str {
        match self {
            MpsRole::Server => "mps-server",
            MpsRole::Client => "mps-client",
        }
    }

    fn from_word(word: &str) -> Option<MpsRole> {
        [MpsRole::Server, MpsRole::Client].into_iter().find(|role| role.word() == word)
    }
}

/// The registration file of `pid` in `dir`.
pub fn entry_path(dir: &Path, pid: u32) -> PathBuf {
    match own_pid_namespace() {
        Some(namespace) => dir.join(format!("{pid}.ns{namespace}.proc")),
        None => dir.join(format!("{pid}.proc")),
    }
}

/// The inode of a process's PID namespace (`pid:[4026531836]`), "self" for this one.
fn pid_namespace(process: &str) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{process}/ns/pid")).ok()?;
    link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

fn own_pid_namespace() -> Option<u64> {
    pid_namespace("self")
}

/// The initial PID namespace's inode (PROC_PID_INIT_INO): the host's, from which every other
/// namespace's processes can be seen.
const INIT_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

fn in_init_pid_namespace(own: Option<u64>) -> bool {
    own.is_none_or(|own| own == INIT_PID_NAMESPACE)
}

/// The host PID of the process that is `pid` in PID namespace `namespace`: the one process
/// whose namespace that is and whose innermost `NSpid` is `pid`.
fn host_pid(namespace: u64, pid: u32) -> Option<u32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let host: u32 = entry.file_name().to_str()?.parse().ok()?;
        if pid_namespace(&host.to_string())? != namespace {
            return None;
        }
        let status = fs::read_to_string(format!("/proc/{host}/status")).ok()?;
        let innermost: u32 =
            status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()?;
        (innermost == pid).then_some(host)
    })
}

/// `<pid>.proc` or `<pid>.ns<inode>.proc`: the PID as registered, and its namespace.
fn parse_entry_name(name: &str) -> Option<(u32, Option<u64>)> {
    let stem = name.strip_suffix(".proc")?;
    match stem.split_once(".ns") {
        Some((pid, namespace)) => Some((pid.parse().ok()?, Some(namespace.parse().ok()?))),
        None => Some((stem.parse().ok()?, None)),
    }
}

/// Field 22 of `/proc/PID/stat`: the start time, which tells a reused PID from the original.
/// `None` for a process that is gone or a zombie.
fn live_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // `rest` starts at field 3 (state); start time is field 22.
    fields.nth(18)?.parse().ok()
}

/// Records that `pid` holds `entries` (uuid, bytes). Written to a temporary name and renamed,
/// so a reader never sees half a file.
pub fn register(dir: &Path, pid: u32, entries: &[(String, u64)]) -> std::io::Result<()> {
    register_as(dir, pid, entries, None)
}

/// As `register`, in an MPS part on each of those GPUs.
pub fn register_as(
    dir: &Path,
    pid: u32,
    entries: &[(String, u64)],
    mps: Option<MpsRole>,
) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let start_time = live_start_time(pid).unwrap_or(0);
    let mut text = format!("start {start_time}\n");
    for (uuid, bytes) in entries {
        match mps {
            Some(role) => text.push_str(&format!("{uuid} {bytes} {}\n", role.word())),
            None => text.push_str(&format!("{uuid} {bytes}\n")),
        }
    }
    let temporary = dir.join(format!(".{pid}.tmp"));
    let mut file = fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    fs::rename(temporary, entry_path(dir, pid))
}

/// Records that `holder` holds `pid`'s context too (it inherited the device files): NVML
/// lists `pid`'s entries while either lives, as the driver keeps the context.
pub fn add_holder(dir: &Path, pid: u32, holder: u32) -> std::io::Result<()> {
    let path = entry_path(dir, pid);
    let mut text = fs::read_to_string(&path)?;
    text.push_str(&format!("held-by {holder} {}\n", live_start_time(holder).unwrap_or(0)));
    let temporary = dir.join(format!(".{pid}.tmp"));
    fs::write(&temporary, text)?;
    fs::rename(temporary, path)
}

pub fn unregister(dir: &Path, pid: u32) {
    let _ = fs::remove_file(entry_path(dir, pid));
}

/// The registrations read so far, so that a call reads only what changed: the files by name and
/// inode (a registration is written to a new file and renamed into place), each process's life
/// by a pidfd, which is readable once the process has ended (a zombie, which NVML does not
/// list) and can never name a reused PID. One listing and one poll per call, and as exact as
/// reading everything: a probe asks for every GPU's processes and memory in a row, and reading
/// each file and /proc twice per process for each was most of a launch's CPU in a burst.
#[derive(Default)]
pub struct Cache {
    known: std::collections::HashMap<std::ffi::OsString, Known>,
}

struct Known {
    inode: u64,
    /// The PID as this reader's namespace sees it (the host PID of a container's process).
    pid: u32,
    /// `None`: no pidfd (a kernel before 5.3): the start time in /proc is read at each call.
    pidfd: Option<std::os::fd::OwnedFd>,
    start_time: Option<u64>,
    dead: bool,
    entries: Vec<Registration>,
    /// Other processes that hold the context too (PID, start time): a child that inherited the
    /// device files keeps the driver's context, and NVML goes on listing the PID that made it,
    /// after that process has exited.
    holders: Vec<(u32, u64)>,
}

fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes a PID and flags; a descriptor it returns is new and ours alone.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        (fd >= 0).then(|| <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32))
    }
}

/// Whether a pidfd's process has ended (the descriptor is readable).
fn ended(pidfd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, which outlives the call; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0
}

impl Cache {
    /// Every registration of a live process: listed only while its process is alive and not a
    /// zombie, and was the process that registered (its start time).
    pub fn live(&mut self, dir: &Path) -> Vec<Registration> {
        use std::os::unix::fs::DirEntryExt;
        let Ok(listing) = fs::read_dir(dir) else {
            self.known.clear();
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        let own_namespace = own_pid_namespace();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let Some((registered, namespace)) = name.to_str().and_then(parse_entry_name) else {
                continue;
            };
            let inode = entry.ino();
            if self.known.get(&name).is_none_or(|known| known.inode != inode) {
                // Registered in another PID namespace (a container): its host PID, if it lives.
                let foreign = namespace.filter(|namespace| Some(*namespace) != own_namespace);
                let pid = match foreign {
                    Some(namespace) => host_pid(namespace, registered),
                    None => Some(registered),
                };
                let known = match pid {
                    Some(pid) => read_entry(&entry.path(), pid, inode),
                    // From inside a container nothing outside it can be seen, its liveness
                    // included: the registration stands while its file does (sim-cuda removes
                    // it at its end and on SIGTERM).
                    None if foreign.is_some() && !in_init_pid_namespace(own_namespace) => {
                        read_entry(&entry.path(), registered, inode).map(|known| Known {
                            dead: false,
                            pidfd: None,
                            start_time: None,
                            entries: known
                                .entries
                                .into_iter()
                                .map(|entry| Registration { outside: true, ..entry })
                                .collect(),
                            ..known
                        })
                    }
                    None => Some(Known {
                        inode,
                        pid: registered,
                        pidfd: None,
                        start_time: None,
                        dead: true,
                        entries: Vec::new(),
                        holders: Vec::new(),
                    }),
                };
                let Some(known) = known else { continue };
                self.known.insert(name.clone(), known);
            }
            seen.insert(name.clone());
            let known = &self.known[&name];
            let outside = known.entries.iter().any(|entry| entry.outside);
            let alive = !known.dead
                && match &known.pidfd {
                    Some(pidfd) => !ended(pidfd),
                    None if outside => true,
                    None => {
                        live_start_time(known.pid).is_some_and(|started| Some(started) == known.start_time)
                    }
                };
            let held = known.holders.iter().any(|(pid, start)| live_start_time(*pid) == Some(*start));
            let alive = alive || held;
            if alive {
                found.extend(known.entries.iter().cloned());
            }
        }
        self.known.retain(|name, _| seen.contains(name));
        found.sort_by_key(|r| r.pid);
        found
    }
}

/// One registration file, checked against the process it names: `None` when unreadable.
fn read_entry(path: &Path, pid: u32, inode: u64) -> Option<Known> {
    let text = fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let start_time = lines.next().and_then(|l| l.strip_prefix("start ")).and_then(|t| t.parse::<u64>().ok());
    // Opened before the start time is compared: if it matches, the pidfd is that process's.
    let pidfd = pidfd_open(pid);
    // Gone, or the PID now another process's: this file is never listed again.
    let dead = live_start_time(pid).is_none_or(|started| Some(started) != start_time);
    let (held, lines): (Vec<&str>, Vec<&str>) = lines.partition(|line| line.starts_with("held-by "));
    let holders = held
        .iter()
        .filter_map(|line| {
            let mut words = line.split(' ').skip(1);
            Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
        })
        .collect();
    let entries = lines
        .into_iter()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (uuid, bytes) = (words.next()?, words.next()?);
            let mps = words.next().and_then(MpsRole::from_word);
            Some(Registration {
                pid,
                uuid: uuid.to_owned(),
                used_bytes: bytes.parse().ok()?,
                mps,
                outside: false,
            })
        })
        .collect();
    Some(Known { inode, pid, pidfd: pidfd.filter(|_| !dead), start_time, dead, entries, holders })
}

/// Every registration of a live process, read afresh.
pub fn live(dir: &Path) -> Vec<Registration> {
    Cache::default().live(dir)
}

/// The registration file to remove from a signal handler, where allocating is not allowed.
static mut REGISTRATION_PATH: Option<CString> = None;

extern "C" fn release_and_die(signal: libc::c_int) {
    // SAFETY: only async-signal-safe calls (unlink, signal, raise) on a path prepared before the
    // handler was installed and never changed after.
    unsafe {
        if let Some(path) = (*std::ptr::addr_of!(REGISTRATION_PATH)).as_ref() {
            libc::unlink(path.as_ptr());
        }
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// Removes the registration at `registration` when SIGTERM or SIGINT ends this process (a real
/// program's context ends with it), then dies by that signal.
pub fn release_on_termination(registration: PathBuf) {
    let path = CString::new(registration.into_os_string().into_encoded_bytes()).ok();
    // SAFETY: set once, before the handlers that read it exist.
    unsafe { REGISTRATION_PATH = path };
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: installing a handler that only makes async-signal-safe calls. A signal the
        // caller ignored (nohup, background job) stays ignored, as in a real program.
        unsafe {
            let previous =
                libc::signal(signal, release_and_die as extern "C" fn(libc::c_int) as libc::sighandler_t);
            if previous == libc::SIG_IGN {
                libc::signal(signal, libc::SIG_IGN);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_from_a_pid_namespace_is_listed_with_its_host_pid() {
        // A process that is PID 1 of a new PID namespace (root only; elsewhere nothing to do).
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "sleep", "30"])
            .stderr(std::process::Stdio::null())
            .spawn()
        else {
            return;
        };
        let unshare = child.id();
        let mut inner = None;
        for _ in 0..200 {
            inner = fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                .ok()
                .and_then(|text| text.split_whitespace().next()?.parse::<u32>().ok());
            if inner.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let Some(host) = inner else {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("SKIPPED: unshare --pid needs root");
            return;
        };
        let namespace = pid_namespace(&host.to_string()).unwrap();
        assert_ne!(Some(namespace), own_pid_namespace());
        let dir = std::env::temp_dir().join(format!("nvml-sim-registry-ns-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // As sim-cuda inside writes it: PID 1 of its namespace, its start time.
        let started = live_start_time(host).unwrap();
        fs::write(dir.join(format!("1.ns{namespace}.proc")), format!("start {started}\nGPU-x 5\n")).unwrap();
        assert_eq!(
            live(&dir),
            vec![Registration {
                pid: host,
                uuid: "GPU-x".to_owned(),
                used_bytes: 5,
                mps: None,
                outside: false
            }]
        );
        // Gone: not listed.
        let _ = nix_kill(host);
        let _ = child.wait();
        assert!(wait_for(|| live(&dir).is_empty()), "{:?}", live(&dir));
        let _ = fs::remove_dir_all(dir);
    }

    fn nix_kill(pid: u32) -> i32 {
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) }
    }

    fn wait_for(condition: impl Fn() -> bool) -> bool {
        (0..500).any(|_| {
            let holds = condition();
            if !holds {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            holds
        })
    }

    #[test]
    fn own_process_is_live_until_unregistered() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-registry-{}", std::process::id()));
        let pid = std::process::id();
        register(&dir, pid, &[("GPU-x".to_owned(), 42)]).unwrap();
        assert_eq!(
            live(&dir),
            vec![Registration { pid, uuid: "GPU-x".to_owned(), used_bytes: 42, mps: None, outside: false }]
        );
        unregister(&dir, pid);
        assert!(live(&dir).is_empty());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn the_cache_sees_every_change_at_once() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-registry-cache-{}", std::process::id()));
        let mut cache = Cache::default();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        register(&dir, pid, &[("GPU-x".to_owned(), 1)]).unwrap();
        assert_eq!(
            cache.live(&dir),
            vec![Registration { pid, uuid: "GPU-x".to_owned(), used_bytes: 1, mps: None, outside: false }]
        );
        // Registered again (a new file renamed over the old): the new figure, at once.
        register(&dir, pid, &[("GPU-x".to_owned(), 2)]).unwrap();
        assert_eq!(cache.live(&dir)[0].used_bytes, 2);
        // Ended without unregistering: a zombie is not listed, from the next call on.
        child.kill().unwrap();
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(cache.live(&dir).is_empty());
        child.wait().unwrap();
        assert!(cache.live(&dir).is_empty());
        // Unregistered: gone from the cache too.
        let own = std::process::id();
        register(&dir, own, &[("GPU-y".to_owned(), 3)]).unwrap();
        assert_eq!(cache.live(&dir).len(), 1);
        unregister(&dir, own);
        assert!(cache.live(&dir).is_empty());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn dead_process_is_not_listed() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-registry-dead-{}", std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        fs::create_dir_all(&dir).unwrap();
        fs::write(entry_path(&dir, pid), "start 1\nGPU-x 1\n").unwrap();
        assert!(live(&dir).is_empty());
        let _ = fs::remove_dir_all(dir);
    }
}
