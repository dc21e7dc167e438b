//! The only module that talks to NVML (through `nvml-wrapper`). It opens the library once per
//! run and hands plain data (`gpu::Machine`, `gpu::GpuProcess`) to the rest.

use std::path::{Path, PathBuf};

use nvml_wrapper::enum_wrappers::device::{ComputeMode as NvmlComputeMode, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::probe::gpu::{ComputeMode, Gpu, GpuProcess, Machine, Memory, Utilization};
use crate::probe::procfs;

/// The library NVML is normally loaded as (what the driver package installs).
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Why NVML could not be opened. Each has its own one-line message with a hint.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "cannot load the NVML library {library}: {detail}; is the NVIDIA driver installed? \
         Name the library with --nvml-lib PATH or GPURUN_NVML_LIB"
    )]
    LibraryMissing { library: String, detail: String },
    #[error(
        "{library} is not a usable NVML library ({detail}); \
         point --nvml-lib or GPURUN_NVML_LIB at the driver's libnvidia-ml.so.1"
    )]
    NotNvml { library: String, detail: String },
    #[error(
        "the NVIDIA driver is not loaded (NVML: driver not loaded); check that `nvidia-smi` works \
         and that the nvidia kernel module is loaded (`lsmod | grep nvidia`)"
    )]
    DriverNotLoaded,
    #[error(
        "no permission to talk to the NVIDIA driver (NVML: insufficient permissions); check the \
         permissions of /dev/nvidia* and that your user may use the GPUs"
    )]
    NoPermission,
    #[error("NVML failed to initialise: {0}")]
    Other(NvmlError),
    #[error("NVML cannot count the GPUs: {0}")]
    DeviceCount(NvmlError),
}

/// An open NVML library.
pub struct Session {
    nvml: Nvml,
    library: PathBuf,
    /// Use the `_v2` process list: the driver writes `_v3` entries wider than nvml.h says.
    v3_misread: std::cell::Cell<bool>,
}

/// Drivers 535.43 to 535.86 write 32-byte `_v3` process entries where nvml.h (and nvml-wrapper
/// 0.13) expect 24, so every entry after the first is misread (pynvml PR #48, go-nvml #75).
fn has_535_v3_bug(driver_version: &str) -> bool {
    let mut parts = driver_version.split('.').map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(535)), Some(Some(minor))) if (43..=86).contains(&minor))
}

/// A process with a compute context on one GPU, as NVML lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// Opens NVML from `library` (default: `libnvidia-ml.so.1`, found like any shared library).
pub fn open(library: Option<&Path>) -> Result<Session, OpenError> {
    let library = library.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY));
    let shown = library.display().to_string();
    let nvml = Nvml::builder().lib_path(library.as_os_str()).init().map_err(|error| match error {
        NvmlError::LibloadingError(detail) => {
            OpenError::LibraryMissing { library: shown.clone(), detail: detail.to_string() }
        }
        NvmlError::FailedToLoadSymbol(detail) => OpenError::NotNvml { library: shown.clone(), detail },
        NvmlError::DriverNotLoaded => OpenError::DriverNotLoaded,
        NvmlError::NoPermission => OpenError::NoPermission,
        other => OpenError::Other(other),
    })?;
    tracing::debug!("NVML initialised from {shown}");
    let v3_misread = nvml.sys_driver_version().is_ok_and(|version| has_535_v3_bug(&version));
    if v3_misread {
        tracing::debug!("driver 535.43-535.86: reading process lists with the _v2 call");
    }
    Ok(Session { nvml, library, v3_misread: std::cell::Cell::new(v3_misread) })
}

/// Collects the first failed query of a GPU: the GPU is then listed with it and not eligible.
/// `NOT_SUPPORTED` is not a failure, only an unknown value.
struct Queries {
    first_error: Option<String>,
}

impl Queries {
    fn value<T>(&mut self, what: &str, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::NotSupported) => None,
            Err(error) => {
                tracing::debug!("{what}: {error}");
                self.first_error.get_or_insert_with(|| format!("{what}: {}", describe(&error)));
                None
            }
        }
    }
}

/// NVML's error in the words a user searches for.
fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::GpuLost => "GPU is lost (fallen off the bus; see dmesg for Xid errors)".to_owned(),
        NvmlError::NoPermission => "no permission (outside this job's device cgroup?)".to_owned(),
        other => other.to_string(),
    }
}

impl Session {
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Everything gpurun needs to know about the machine, in one pass.
    pub fn probe(&self) -> Result<Machine, OpenError> {
        let count = self.nvml.device_count().map_err(OpenError::DeviceCount)?;
        let gpus: Vec<Gpu> = (0..count).map(|index| self.probe_gpu(index)).collect();
        Ok(Machine {
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_driver_version: self
                .nvml
                .sys_cuda_driver_version()
                .ok()
                .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
            gpus,
        })
    }

    fn probe_gpu(&self, index: u32) -> Gpu {
        let mut queries = Queries { first_error: None };
        let handle = self.nvml.device_by_index(index);
        let handle_refused = matches!(handle, Err(NvmlError::NoPermission));
        let device = queries.value("handle", handle);
        let Some(device) = device else {
            return Gpu {
                index,
                uuid: None,
                name: None,
                pci_bus_id: None,
                memory: None,
                utilization: None,
                temperature_c: None,
                power_watts: None,
                compute_mode: None,
                mig_enabled: None,
                processes: None,
                error: Some(queries.first_error.unwrap_or_else(|| "handle: not supported".to_owned())),
                handle_refused,
            };
        };
        let uuid = queries.value("uuid", device.uuid());
        let name = queries.value("name", device.name());
        let pci_bus_id = queries.value("pci info", device.pci_info()).map(|p| p.bus_id);
        let memory = queries.value("memory", device.memory_info()).map(|m| Memory {
            total_bytes: m.total,
            reserved_bytes: m.reserved,
            used_bytes: m.used,
            free_bytes: m.free,
        });
        let utilization = queries
            .value("utilization", device.utilization_rates())
            .map(|u| Utilization { gpu_percent: u.gpu, memory_percent: u.memory });
        let temperature_c = queries.value("temperature", device.temperature(TemperatureSensor::Gpu));
        let power_watts = queries.value("power", device.power_usage()).map(|mw| f64::from(mw) / 1000.0);
        let compute_mode = queries.value("compute mode", device.compute_mode()).map(|mode| match mode {
            NvmlComputeMode::Default => ComputeMode::Default,
            NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
            NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
            NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
        });
        let mig_enabled = queries.value("MIG mode", device.mig_mode()).map(|m| m.current == 1);
        // Process lists can be refused where everything else works (some containers, locked
        // down drivers): that makes them unknown, not the GPU unusable.
        let listed = match self.listed(&device) {
            Err(NvmlError::NoPermission) => Err(NvmlError::NotSupported),
            other => other,
        };
        let processes = queries.value("processes", listed).map(|listed| {
            listed
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    used_bytes: p.used_bytes,
                    user: procfs::owner(p.pid),
                    command: procfs::command_line(p.pid),
                })
                .collect()
        });
        Gpu {
            index,
            uuid,
            name,
            pci_bus_id,
            memory,
            utilization,
            temperature_c,
            power_watts,
            compute_mode,
            mig_enabled,
            processes,
            error: queries.first_error,
            handle_refused,
        }
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
        })
        .collect()
}

impl Session {
    /// The compute processes on GPU `index`.
    pub fn processes(&self, index: u32) -> Result<Vec<Listed>, NvmlError> {
        let device = self.nvml.device_by_index(index)?;
        self.listed(&device)
    }

    fn listed(&self, device: &Device) -> Result<Vec<Listed>, NvmlError> {
        if self.v3_misread.get() {
            return device.running_compute_processes_v2().map(to_listed);
        }
        let listed = to_listed(device.running_compute_processes()?);
        // A PID 0 after the first entry is the 535 misread on a driver that did not say so.
        if listed.iter().skip(1).any(|p| p.pid == 0) {
            tracing::debug!("the _v3 process list looks misread (PID 0): using the _v2 call");
            self.v3_misread.set(true);
            return device.running_compute_processes_v2().map(to_listed);
        }
        Ok(listed)
    }
}

#[cfg(test)]
mod tests {
    use super::has_535_v3_bug;

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
