//! GPU memory still held once the command and its leftovers have ended (issue 52): a process of
//! the command's tree still running on a chosen GPU (left by `--keep-orphans`, or one that did
//! not end), a zombie nobody reaped, or a context whose process has exited while another
//! process still holds its device files (a fork after CUDA started: the driver keeps the
//! context, and NVML goes on listing the PID that made it). Each is a `memory-held` diagnosis
//! naming the PID and the bytes; `--list` marks the last two (`leftover`).

use std::collections::BTreeSet;

use crate::options::size::human;
use crate::probe::gpu::label;
use crate::verify::diagnosis::Diagnosis;

/// What is left of a process NVML still lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Left {
    /// Running: its command line.
    Running(String),
    /// A zombie: its parent, which has not reaped it.
    Zombie(u32),
    /// No such process any more.
    Exited,
}

/// One process of the command's that NVML still lists on a chosen GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) pid: u32,
    pub(crate) gpu: u32,
    pub(crate) bytes: Option<u64>,
    pub(crate) left: Left,
}

impl Held {
    /// Whether the driver may still be tearing it down (worth another look in a moment): a
    /// running process keeps its memory until it ends.
    pub(crate) fn may_go_by_itself(&self) -> bool {
        !matches!(self.left, Left::Running(_))
    }
}

/// What is left of `pid`, from /proc.
pub(crate) fn left_of(pid: u32) -> Left {
    match crate::process::procfs::stat(pid) {
        Some(stat) if stat.is_zombie() => Left::Zombie(stat.parent),
        Some(_) => Left::Running(crate::process::procfs::command_line(pid).unwrap_or_else(|| "?".to_owned())),
        None => Left::Exited,
    }
}

/// `memory-held`: the diagnosis of one.
pub(crate) fn diagnosis(held: &Held, kept: bool) -> Diagnosis {
    let memory = held.bytes.map_or_else(|| "memory".to_owned(), human);
    let gpu = label(held.gpu);
    let detail = match &held.left {
        Left::Running(command) => format!(
            "PID {} ({}) still holds {memory} on {gpu} after the command ended: {}",
            held.pid,
            crate::process::stdio::clip_command(command, 60),
            if kept { "--keep-orphans left it running" } else { "it did not end when asked (TERM, then KILL)" }
        ),
        Left::Zombie(parent) => format!(
            "PID {} is a zombie its parent (PID {parent}) has not reaped, and its context still holds {memory} on \
             {gpu}: it is freed when PID {parent} reaps it or exits",
            held.pid
        ),
        Left::Exited => format!(
            "PID {} has exited, but its context still holds {memory} on {gpu}: another process holds its GPU \
             device files (one forked after CUDA started, such as a worker left running); the memory comes back \
             when that process ends (fuser -v /dev/nvidia* names it)",
            held.pid
        ),
    };
    Diagnosis {
        kind: "memory-held",
        gpu: Some(held.gpu),
        detail,
        code: None,
        minutes: None,
        pid: Some(held.pid),
        bytes: held.bytes,
    }
}

/// A process NVML lists that is a zombie, or that has exited where one of your gpurun runs
/// found it holding memory at its end (`memory-held`, in the history: `recorded`): its memory
/// is held by a context nobody will use. `--list` marks it (JSON: `leftover`). A PID that is
/// merely not there is not enough: another user's process under hidepid, or one of another
/// PID namespace, is not there either.
pub(crate) fn leftover(pid: u32, recorded: &BTreeSet<u32>) -> Option<&'static str> {
    match crate::process::procfs::stat(pid) {
        Some(stat) if stat.is_zombie() => Some("zombie"),
        Some(_) => None,
        // kill(pid, 0) tells "no such process" (ESRCH) from "not yours" (EPERM).
        None if recorded.contains(&pid)
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None)
                == Err(nix::errno::Errno::ESRCH) =>
        {
            Some("exited")
        }
        None => None,
    }
}

/// The PIDs the history's recent runs (the last day's) found holding memory at their end. Read
/// again only when the history changed (its size and time): a listing asks once per GPU, and
/// `--list --watch` at every refresh.
pub(crate) fn recorded_pids() -> BTreeSet<u32> {
    type Seen = Option<((u64, Option<std::time::SystemTime>), BTreeSet<u32>)>;
    static READ: std::sync::Mutex<Seen> = std::sync::Mutex::new(None);
    let Some(path) = crate::history::path() else { return BTreeSet::new() };
    let version = std::fs::metadata(&path).map_or((0, None), |m| (m.len(), m.modified().ok()));
    let mut read = READ.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, pids)) = read.as_ref().filter(|(seen, _)| *seen == version) {
        return pids.clone();
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let pids: BTreeSet<u32> = crate::history::read(&path)
        .iter()
        .filter(|record| now - record.started < 86_400.0)
        .flat_map(|record| {
            record.report.get("diagnosis").and_then(|d| d.as_array()).cloned().unwrap_or_default()
        })
        .filter(|found| found["kind"] == "memory-held")
        .filter_map(|found| found["pid"].as_u64().map(|pid| pid as u32))
        .collect();
    *read = Some((version, pids.clone()));
    pids
}

/// How `--list` marks a leftover (`leftover`'s word).
pub(crate) fn mark(word: &str) -> String {
    format!("[{word}: its context still holds the memory]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_leftover_says_what_holds_the_memory() {
        let held = |left| Held { pid: 42, gpu: 3, bytes: Some(1 << 30), left };
        let running = diagnosis(&held(Left::Running("python train.py".to_owned())), true);
        assert_eq!(running.kind, "memory-held");
        assert_eq!(
            running.detail,
            "PID 42 (python train.py) still holds 1 GiB on GPU 3 after the command ended: --keep-orphans left it running"
        );
        assert!(diagnosis(&held(Left::Zombie(7)), false)
            .detail
            .starts_with("PID 42 is a zombie its parent (PID 7)"));
        assert!(diagnosis(&held(Left::Exited), false)
            .detail
            .starts_with("PID 42 has exited, but its context still holds 1 GiB on GPU 3"));
        assert!(!held(Left::Running(String::new())).may_go_by_itself());
        assert!(held(Left::Exited).may_go_by_itself());
    }
}
