//! A container's processes, as verification finds them on the host: they are the runtime's
//! children (conmon, containerd-shim), not gpurun's, and NVML reports their host PIDs.

use std::path::Path;

/// The most a container ID file holds: 64 hex digits and a newline.
const ID_FILE_BYTES: u64 = 128;

/// The container ID the runtime wrote to `cidfile` (`--cidfile`), once it has. The user's own
/// `--cidfile` may name anything: a FIFO must not hold the supervisor (opened without
/// blocking, and only a regular file is read), nor a device or a huge file be read whole.
pub(crate) fn read_id(cidfile: &Path) -> Option<String> {
    let text = crate::process::stdio::read_small_file(cidfile, ID_FILE_BYTES)?;
    let id = text.trim();
    (id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
}

/// Whether `pid` runs in the container `id`: its cgroup path names the ID (podman's
/// `libpod-<ID>.scope` or `libpod-<ID>`, docker's `docker-<ID>.scope` or `docker/<ID>`, on
/// cgroup v1 and v2 alike). Only the few PIDs NVML lists are looked at.
pub(crate) fn runs_in(pid: u32, id: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| text.contains(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_read_from_a_regular_file_only_and_never_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let id = "a".repeat(64);
        std::fs::write(dir.path().join("cid"), format!("{id}\n")).unwrap();
        assert_eq!(read_id(&dir.path().join("cid")), Some(id));
        std::fs::write(dir.path().join("short"), "abc").unwrap();
        assert_eq!(read_id(&dir.path().join("short")), None);
        // A FIFO nobody writes, and a device that never ends: an answer at once, no ID.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (sender, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send((read_id(&fifo), read_id(Path::new("/dev/zero"))));
        });
        let answered = answer.recv_timeout(std::time::Duration::from_secs(5)).expect("read_id waited");
        assert_eq!(answered, (None, None));
    }
}
