//! What `/proc` says about a process: owner and command line. `None` where it cannot be read
//! (gone, another PID namespace, hidepid).

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::unix::fs::MetadataExt;

/// The owning user's name, or the numeric uid when it has no passwd entry.
pub fn owner(pid: u32) -> Option<String> {
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(user_name(uid).unwrap_or_else(|| uid.to_string()))
}

pub fn user_name(uid: u32) -> Option<String> {
    let mut record: libc::passwd = zeroed_passwd();
    let mut buffer = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are to live, correctly sized buffers owned by this frame;
    // getpwuid_r writes only within them.
    let status = unsafe { libc::getpwuid_r(uid, &mut record, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if status != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buffer`.
    Some(unsafe { CStr::from_ptr(record.pw_name) }.to_string_lossy().into_owned())
}

fn zeroed_passwd() -> libc::passwd {
    // SAFETY: passwd is plain C data; all-zero (null pointers, zero ids) is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The command line, arguments joined by spaces; the short name for kernel threads and
/// processes whose cmdline is empty.
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(format!("[{}]", comm.trim_end()));
    }
    Some(words.join(" "))
}

/// (pid, parent pid, state) of every process in /proc.
fn process_table() -> Vec<(u32, u32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
            let state = fields.next()?.chars().next()?;
            let parent: u32 = fields.next()?.parse().ok()?;
            Some((pid, parent, state))
        })
        .collect()
}

/// Live (non-zombie) descendants of `root`.
pub fn descendants(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, parent, _) in &table {
        children.entry(*parent).or_default().push(*pid);
    }
    let zombie: Vec<u32> = table.iter().filter(|(_, _, state)| *state == 'Z').map(|(pid, ..)| *pid).collect();
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if !zombie.contains(child) {
                found.push(*child);
            }
            queue.push(*child);
        }
    }
    found
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

/// Whether `ancestor` is `pid` or one of its ancestors.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    // A bounded walk: PID chains are short, and a loop in a racing /proc must not hang us.
    for _ in 0..128 {
        if current == ancestor {
            return true;
        }
        let Some(parent) = parent_of(current) else { return false };
        if parent == 0 || parent == current {
            return false;
        }
        current = parent;
    }
    false
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// Whether a process with this PID exists in this PID namespace.
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(command_line(pid).is_some());
        assert!(owner(pid).is_some());
    }

    #[test]
    fn descendants_and_environment() {
        let mut child = std::process::Command::new("sleep").arg("5").env("PROCFS_TEST", "x").spawn().unwrap();
        let pid = child.id();
        assert!(descendants(std::process::id()).contains(&pid));
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
    }
}
