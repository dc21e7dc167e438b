//! Processes that registered themselves as running on a simulated GPU (what a CUDA context is
//! to the real driver). One file per process in the state directory; the simulated NVML lists
//! an entry only while its process is alive and not a zombie, as the driver does.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One process's memory on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub pid: u32,
    pub uuid: String,
    pub used_bytes: u64,
}

fn entry_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.proc"))
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
    fs::create_dir_all(dir)?;
    let start_time = live_start_time(pid).unwrap_or(0);
    let mut text = format!("start {start_time}\n");
    for (uuid, bytes) in entries {
        text.push_str(&format!("{uuid} {bytes}\n"));
    }
    let temporary = dir.join(format!(".{pid}.tmp"));
    let mut file = fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    fs::rename(temporary, entry_path(dir, pid))
}

pub fn unregister(dir: &Path, pid: u32) {
    let _ = fs::remove_file(entry_path(dir, pid));
}

/// Every registration of a live process.
pub fn live(dir: &Path) -> Vec<Registration> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) =
            name.to_str().and_then(|n| n.strip_suffix(".proc")).and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut lines = text.lines();
        let recorded_start =
            lines.next().and_then(|l| l.strip_prefix("start ")).and_then(|t| t.parse::<u64>().ok());
        if live_start_time(pid).is_none_or(|started| Some(started) != recorded_start) {
            continue;
        }
        for line in lines {
            if let Some((uuid, bytes)) = line.split_once(' ') {
                if let Ok(used_bytes) = bytes.parse() {
                    found.push(Registration { pid, uuid: uuid.to_owned(), used_bytes });
                }
            }
        }
    }
    found.sort_by_key(|r| r.pid);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_live_until_unregistered() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-registry-{}", std::process::id()));
        let pid = std::process::id();
        register(&dir, pid, &[("GPU-x".to_owned(), 42)]).unwrap();
        assert_eq!(live(&dir), vec![Registration { pid, uuid: "GPU-x".to_owned(), used_bytes: 42 }]);
        unregister(&dir, pid);
        assert!(live(&dir).is_empty());
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
