//! The compute processes on a device, and MPS: the server in the compute list, its clients in
//! the MPS list (with the `_v2` calls where a 535 driver misreads `_v3`).

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::{Queries, Session};
use crate::probe::gpu::{mig_parts, GpuProcess};
use crate::probe::mps::{Mps, MpsClient};
use crate::probe::watch::{ListError, Listed};
use crate::process::procfs;

/// Drivers 535.43 to 535.86 write 32-byte `_v3` process entries where nvml.h (and nvml-wrapper
/// 0.13) expect 24, so every entry after the first is misread (pynvml PR #48, go-nvml #75).
pub(super) fn has_535_v3_bug(driver_version: &str) -> bool {
    let mut parts = driver_version.split('.').map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(535)), Some(Some(minor))) if (43..=86).contains(&minor))
}

impl From<NvmlError> for ListError {
    fn from(error: NvmlError) -> ListError {
        ListError { lost: matches!(error, NvmlError::GpuLost), text: error.to_string() }
    }
}

/// The MPS clients on a device (`nvmlDeviceGetMPSComputeRunningProcesses_v3`); through the `_v2`
/// call where the `_v3` one is misread (the 535 drivers) or missing.
fn mps_listed(nvml: &Nvml, device: &Device, v3_misread: bool) -> Result<Vec<Listed>, NvmlError> {
    if !v3_misread {
        match device.mps_running_compute_processes() {
            Err(NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_)) => {}
            other => return other.map(to_listed),
        }
    }
    mps_listed_v2(nvml, device)
}

/// `nvmlDeviceGetMPSComputeRunningProcesses_v2`, which nvml-wrapper 0.13 does not wrap: the
/// count first, then the entries (`nvmlProcessInfo_v2_t`), with room for a few more that may
/// have started between the two calls.
fn mps_listed_v2(nvml: &Nvml, device: &Device) -> Result<Vec<Listed>, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlProcessInfo_v2_t;
    let symbol = nvml
        .lib()
        .nvmlDeviceGetMPSComputeRunningProcesses_v2
        .as_ref()
        .map_err(|_| NvmlError::FunctionNotFound)?;
    let empty = nvmlProcessInfo_v2_t { pid: 0, usedGpuMemory: 0, gpuInstanceId: 0, computeInstanceId: 0 };
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: a live handle; a zero count with a null buffer asks for the count (nvml.h).
    let code = unsafe { symbol(device.handle(), &mut count, std::ptr::null_mut()) };
    match nvml_wrapper::error::nvml_try(code) {
        Ok(()) => return Ok(Vec::new()),
        Err(NvmlError::InsufficientSize(_)) => {}
        Err(error) => return Err(error),
    }
    count += 5;
    let mut infos = vec![empty; count as usize];
    // SAFETY: `infos` has room for `count` entries of the layout the symbol writes.
    let code = unsafe { symbol(device.handle(), &mut count, infos.as_mut_ptr()) };
    nvml_wrapper::error::nvml_try(code)?;
    infos.truncate(count as usize);
    Ok(infos
        .into_iter()
        .map(|info| Listed {
            pid: info.pid,
            used_bytes: (info.usedGpuMemory != u64::MAX).then_some(info.usedGpuMemory),
            mps_client: true,
        })
        .collect())
}

impl Session {
    /// A device's compute processes, and its MPS: the server from the compute list, the
    /// clients from the MPS list. Process lists can be refused where everything else works
    /// (some containers, locked down drivers): that makes them unknown, not the GPU unusable;
    /// an MPS list that cannot be read leaves what the compute list says.
    pub(super) fn processes_and_mps(
        &mut self,
        device: &Device,
        queries: &mut Queries,
    ) -> (Option<Vec<GpuProcess>>, Option<Mps>) {
        let v3_misread = &mut self.v3_misread;
        let listed =
            queries.ask("processes", "nvmlDeviceGetComputeRunningProcesses_v3", true, || {
                match listed(device, v3_misread) {
                    Err(NvmlError::NoPermission) => Err(NvmlError::NotSupported),
                    other => other,
                }
            });
        let processes: Option<Vec<GpuProcess>> =
            listed.map(|listed| listed.into_iter().map(process_of).collect());
        // As a poll does (`processes`): the MPS list only where a server may be listed.
        let serves =
            processes.iter().flatten().any(|p| crate::probe::mps::may_be_server(p.command.as_deref()));
        if !serves {
            return (processes, None);
        }
        let v3_misread = self.v3_misread;
        let clients: Vec<MpsClient> = queries
            .calls
            .run("nvmlDeviceGetMPSComputeRunningProcesses_v3", Some(queries.gpu), || {
                mps_listed(self.nvml, device, v3_misread)
            })
            .unwrap_or_default()
            .into_iter()
            .map(|client| MpsClient {
                pid: client.pid,
                user: procfs::owner(client.pid),
                used_bytes: client.used_bytes,
            })
            .collect();
        let own_uid = nix::unistd::getuid().as_raw();
        let mut processes = processes;
        // A client is in the MPS list; a real driver (580) lists it in the compute list too:
        // one process, one row, as a client.
        if let Some(listed) = processes.as_mut() {
            listed.retain(|process| !clients.iter().any(|client| client.pid == process.pid));
        }
        // A process /proc cannot name (hidepid, another PID namespace) is named by NVML, which
        // knows every process on its GPUs: the MPS server is found there too.
        for process in processes.iter_mut().flatten().filter(|p| p.command.is_none()) {
            let pid = process.pid;
            let named = queries.calls.run("nvmlSystemGetProcessName", Some(queries.gpu), || {
                self.nvml.sys_process_name(pid, PROCESS_NAME_MOST)
            });
            process.command = named.ok().filter(|name| !name.is_empty());
        }
        let server = processes
            .iter()
            .flatten()
            .find(|process| crate::probe::mps::is_server(process.command.as_deref()))
            .map(|server| (server.pid, server.user.clone()));
        let mps = Mps::from_lists(server, clients, procfs::uid_of, own_uid);
        (processes, mps)
    }

    /// The compute processes on GPU or MIG device `key`.
    pub(crate) fn processes(&mut self, key: u32) -> Result<Vec<Listed>, NvmlError> {
        let calls = self.calls.clone();
        let (index, slot) = mig_parts(key).map_or((key, None), |(parent, slot)| (parent, Some(slot)));
        let mut device =
            calls.run("nvmlDeviceGetHandleByIndex_v2", Some(index), || self.nvml.device_by_index(index))?;
        if let Some(slot) = slot {
            device = calls.run("nvmlDeviceGetMigDeviceHandleByIndex", Some(index), || {
                device.mig_device_by_index(slot)
            })?;
        }
        let v3_misread = &mut self.v3_misread;
        let mut found = calls
            .run("nvmlDeviceGetComputeRunningProcesses_v3", Some(index), || listed(&device, v3_misread))?;
        // MPS clients are only in the MPS list, asked for where the compute list shows the MPS
        // server (a poll on a machine without MPS costs no second call per GPU); a driver
        // without the list (NOT_SUPPORTED) has none.
        let serves =
            found.iter().any(|p| crate::probe::mps::may_be_server(procfs::command_line(p.pid).as_deref()));
        if !serves {
            return Ok(found);
        }
        let v3_misread = self.v3_misread;
        let clients = calls
            .run("nvmlDeviceGetMPSComputeRunningProcesses_v3", Some(index), || {
                mps_listed(self.nvml, &device, v3_misread)
            })
            .unwrap_or_default();
        // A real driver (580) lists a client in the compute list as well: one sighting, as a
        // client.
        for client in clients {
            match found.iter_mut().find(|listed| listed.pid == client.pid) {
                Some(listed) => listed.mps_client = true,
                None => found.push(Listed { mps_client: true, ..client }),
            }
        }
        Ok(found)
    }
}

/// The longest process name asked of NVML (nvml.h crops it to the buffer).
const PROCESS_NAME_MOST: usize = 256;

fn process_of(p: Listed) -> GpuProcess {
    GpuProcess {
        pid: p.pid,
        used_bytes: p.used_bytes,
        user: procfs::owner(p.pid),
        command: procfs::command_line(p.pid),
    }
}

fn to_listed(infos: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>) -> Vec<Listed> {
    infos
        .into_iter()
        .map(|info| Listed {
            pid: info.pid,
            used_bytes: match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
            mps_client: false,
        })
        .collect()
}

fn listed(device: &Device, v3_misread: &mut bool) -> Result<Vec<Listed>, NvmlError> {
    if *v3_misread {
        return device.running_compute_processes_v2().map(to_listed);
    }
    // A driver before the _v3 call (R470) lists through _v2.
    let listed = match device.running_compute_processes() {
        Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound) => {
            return device.running_compute_processes_v2().map(to_listed);
        }
        other => to_listed(other?),
    };
    // A PID 0 after the first entry is the 535 misread on a driver that did not say so.
    if listed.iter().skip(1).any(|p| p.pid == 0) {
        tracing::debug!("the _v3 process list looks misread (PID 0): using the _v2 call");
        *v3_misread = true;
        return device.running_compute_processes_v2().map(to_listed);
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use nvml_wrapper::struct_wrappers::device::ProcessInfo;

    use super::*;

    #[test]
    fn a_list_entry_without_its_memory_is_unknown_not_zero() {
        let info = |pid, used_gpu_memory| ProcessInfo {
            pid,
            used_gpu_memory,
            gpu_instance_id: None,
            compute_instance_id: None,
        };
        let listed = to_listed(vec![info(7, UsedGpuMemory::Used(0)), info(8, UsedGpuMemory::Unavailable)]);
        assert_eq!(
            listed,
            [
                Listed { pid: 7, used_bytes: Some(0), mps_client: false },
                Listed { pid: 8, used_bytes: None, mps_client: false }
            ]
        );
    }

    #[test]
    fn only_gpu_is_lost_makes_a_list_error_a_lost_gpu() {
        assert!(ListError::from(NvmlError::GpuLost).lost);
        for error in [NvmlError::NoPermission, NvmlError::Unknown, NvmlError::NotSupported] {
            let text = error.to_string();
            assert_eq!(ListError::from(error), ListError { lost: false, text });
        }
    }

    #[test]
    fn affected_drivers() {
        for version in ["535.43.02", "535.54.03", "535.86.05"] {
            assert!(has_535_v3_bug(version), "{version}");
        }
        for version in ["535.104.05", "535.42.01", "550.54.15", "525.85.12", "garbage"] {
            assert!(!has_535_v3_bug(version), "{version}");
        }
    }
}
