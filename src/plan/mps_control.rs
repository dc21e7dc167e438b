//! The user's MPS control daemon, as `--mps` would join it: the pipe a client would use, whether
//! it is safe to use (not another user's), and whether a daemon serves it. Read in resolution,
//! by `--doctor` and by `--list --json`; the plan only writes the client's variables.

/// NVIDIA's defaults for the MPS pipe and log directories (nvidia-cuda-mps-control(1)).
pub(crate) const MPS_PIPE_DIRECTORY: &str = "/tmp/nvidia-mps";
pub(crate) const MPS_LOG_DIRECTORY: &str = "/var/log/nvidia-mps";

/// The MPS control daemon's pipe a client of this user would use: `control` in
/// CUDA_MPS_PIPE_DIRECTORY, else in NVIDIA's default directory.
pub(crate) fn mps_control_pipe() -> std::path::PathBuf {
    let directory = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").filter(|dir| !dir.is_empty());
    std::path::PathBuf::from(directory.unwrap_or_else(|| MPS_PIPE_DIRECTORY.into())).join("control")
}

/// Why an MPS client of this user must not connect through `control` (the pipe `--mps` would
/// use): its directory or the pipe belongs to another user than the caller or root, or the
/// directory can be written by others without the sticky bit (who could put their own pipe
/// there). A client's CUDA
/// context goes to whichever server that pipe's daemon starts: another user's, holding the
/// job's memory and its faults. `None`: it is safe, or there is none (nothing to connect to).
pub(crate) fn untrusted_mps_pipe(control: &std::path::Path) -> Option<String> {
    use nix::sys::stat::{lstat, stat, Mode};
    let caller = nix::unistd::getuid().as_raw();
    let directory = control.parent().unwrap_or(std::path::Path::new("/"));
    let trusted = |uid: u32| uid == caller || uid == 0;
    let owner = |uid: u32| crate::process::procfs::user_name(uid);
    // The directory a client would use: a symlink's target (a link of the caller's to another
    // user's directory is that user's directory).
    let Ok(dir) = stat(directory) else { return None };
    if !trusted(dir.st_uid) {
        return Some(format!(
            "the MPS pipe directory {} belongs to user {}: an MPS client of yours would connect to that \
             user's control daemon and server",
            directory.display(),
            owner(dir.st_uid)
        ));
    }
    let mode = Mode::from_bits_truncate(dir.st_mode);
    // Sticky (as /tmp): others may add names, not replace the control pipe, checked below.
    if mode.intersects(Mode::S_IWGRP | Mode::S_IWOTH) && !mode.contains(Mode::S_ISVTX) {
        return Some(format!(
            "the MPS pipe directory {} can be written by others (mode {:o}): anyone could put their own \
             control pipe there",
            directory.display(),
            dir.st_mode & 0o7777
        ));
    }
    match lstat(control) {
        Ok(pipe) if !trusted(pipe.st_uid) => Some(format!(
            "the MPS control pipe {} belongs to user {}: an MPS client of yours would connect to that \
             user's daemon and server",
            control.display(),
            owner(pipe.st_uid)
        )),
        _ => None,
    }
}

/// The MPS control daemon that serves a pipe directory: its PID where its pid file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ControlDaemon {
    pub(crate) pid: Option<u32>,
    /// Whose: the caller's, or root's (a system daemon, which starts each user's server as
    /// that user).
    pub(crate) uid: Option<u32>,
}

/// The daemon's pid file in its pipe directory (nvidia-cuda-mps-control(1)).
const MPS_PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// Whether an MPS control daemon serves `control`, and which. The real daemon (driver 580)
/// makes `control` a Unix socket and starts no server until the first client connects: it
/// serves when its pid file (the caller's or root's) names a live `nvidia-cuda-mps-control` of
/// the caller's or root's (under hidepid=2, where a user cannot see root's processes: a live
/// process named in a pid file of root's). Older daemons read a FIFO: that one serves while a
/// reader holds it. Nothing is connected to or written. Who owns the pipe itself is
/// `untrusted_mps_pipe`'s.
pub(crate) fn mps_control_daemon(control: &std::path::Path) -> Option<ControlDaemon> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let caller = nix::unistd::getuid().as_raw();
    let trusted = |uid: u32| uid == caller || uid == 0;
    let directory = control.parent()?;
    let pid_file = directory.join(MPS_PID_FILE);
    let daemon = std::fs::symlink_metadata(&pid_file)
        .ok()
        .filter(|meta| meta.is_file() && trusted(meta.uid()))
        .and_then(|_| crate::process::stdio::read_small_file(&pid_file, 32))
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&pid| pid > 1)
        .and_then(|pid| match crate::process::procfs::uid_of(pid) {
            Some(uid) => {
                let command = crate::process::procfs::command_line(pid);
                let daemon = crate::probe::mps::runs(command.as_deref(), "nvidia-cuda-mps-control");
                (trusted(uid) && daemon).then_some(ControlDaemon { pid: Some(pid), uid: Some(uid) })
            }
            // /proc hides it (hidepid=2: a system daemon of root's, seen by a user): a live
            // process of another user's (kill(0) says EPERM, never ESRCH) whose pid file root
            // wrote is root's daemon.
            None => {
                let root_wrote = std::fs::symlink_metadata(&pid_file).is_ok_and(|meta| meta.uid() == 0);
                let hidden = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None)
                    == Err(nix::errno::Errno::EPERM);
                (root_wrote && hidden).then_some(ControlDaemon { pid: Some(pid), uid: Some(0) })
            }
        });
    let kind = std::fs::symlink_metadata(control).ok()?.file_type();
    if kind.is_socket() {
        return daemon;
    }
    match kind.is_fifo() && crate::process::stdio::fifo_has_reader(control) == Some(true) {
        true => Some(daemon.unwrap_or(ControlDaemon { pid: None, uid: None })),
        false => None,
    }
}
