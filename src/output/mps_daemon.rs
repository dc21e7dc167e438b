//! The MPS control daemon a client of the caller's would reach, as `--doctor` and `--list`
//! say it (DESIGN 3, issue 62): a real daemon starts no server before its first client, so a
//! daemon with no server yet is one `--mps` joins.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plan::mps_control::ControlDaemon;
use crate::probe::gpu::Machine;

/// `--list --json`'s `mps_control_daemon`.
#[derive(Serialize)]
pub(crate) struct Entry {
    pid: Option<u32>,
    pipe_directory: String,
    /// Whether a server of the caller's runs: a daemon starts none before its first client.
    server_running: bool,
}

/// The daemon `--mps` would join, unless the pipe is not the caller's to trust.
fn found(machine: &Machine) -> Option<(ControlDaemon, PathBuf)> {
    if !machine.vendor.has_mps() {
        return None;
    }
    let control = crate::plan::mps_control::mps_control_pipe();
    if crate::plan::mps_control::untrusted_mps_pipe(&control).is_some() {
        return None;
    }
    let daemon = crate::plan::mps_control::mps_control_daemon(&control)?;
    Some((daemon, control.parent().unwrap_or(Path::new("/")).to_path_buf()))
}

pub(crate) fn entry(machine: &Machine) -> Option<Entry> {
    found(machine).map(|(daemon, dir)| Entry {
        pid: daemon.pid,
        pipe_directory: dir.display().to_string(),
        server_running: machine.devices().filter_map(|gpu| gpu.mps.as_ref()).any(|mps| !mps.foreign),
    })
}

/// `--list`'s line under the table.
pub(crate) fn line(machine: &Machine) -> Option<String> {
    found(machine).map(|(daemon, dir)| words(daemon, &dir, Some(machine)))
}

/// `MPS control daemon of yours (PID 812) at /tmp/mps; its server starts with the first
/// client`: the same words in `--doctor` and `--list`. A daemon without a pid file (an older
/// one reading a FIFO) is said as it is seen.
pub(crate) fn words(
    daemon: crate::plan::mps_control::ControlDaemon,
    pipe: &Path,
    machine: Option<&Machine>,
) -> String {
    let own = nix::unistd::getuid().as_raw();
    let whose = match daemon.uid {
        Some(uid) if uid == own => "of yours".to_owned(),
        Some(uid) => format!("of {}", crate::process::procfs::user_name(uid)),
        None => String::new(),
    };
    let pid = daemon.pid.map(|pid| format!(" (PID {pid})")).unwrap_or_default();
    let server = machine
        .into_iter()
        .flat_map(Machine::devices)
        .filter_map(|gpu| gpu.mps.as_ref())
        .find(|mps| !mps.foreign);
    let state = match server {
        Some(mps) => {
            format!("its server runs ({}): CUDA programs of yours become its clients", mps.server_words())
        }
        None => "its server starts with the first client".to_owned(),
    };
    match daemon.pid {
        Some(_) => format!("MPS control daemon {whose}{pid} at {}; {state}", pipe.display()),
        None => format!("an MPS control daemon reads {}; {state}", pipe.join("control").display()),
    }
}
