//! A container's processes, as verification finds them on the host: they are the runtime's
//! children (conmon, containerd-shim), not gpurun's, and NVML reports their host PIDs.

use std::path::Path;

/// The container ID the runtime wrote to `cidfile` (`--cidfile`), once it has.
pub fn read_id(cidfile: &Path) -> Option<String> {
    let text = std::fs::read_to_string(cidfile).ok()?;
    let id = text.trim();
    (id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
}

/// Whether `pid` runs in the container `id`: its cgroup path names the ID (podman's
/// `libpod-<ID>.scope` or `libpod-<ID>`, docker's `docker-<ID>.scope` or `docker/<ID>`, on
/// cgroup v1 and v2 alike). Only the few PIDs NVML lists are looked at.
pub fn runs_in(pid: u32, id: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| text.contains(id))
}
