//! Which vendor's library answers the probe (DESIGN 3c). The probe is the only stage that
//! knows; past it, the vendor's GPUs are known by the runtime they run (`runtime::Runtime`:
//! CUDA or ROCm), which owns the rules that differ.

use std::path::PathBuf;

use serde::Serialize;

/// The library that answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Vendor {
    /// NVML (`libnvidia-ml.so.1`).
    #[default]
    Nvidia,
    /// AMD SMI (`libamd_smi.so`, ROCm 7.0 and later).
    Amd,
}

impl Vendor {
    /// `NVML`, `AMD SMI`: the library, as messages name it.
    pub(crate) fn library(self) -> &'static str {
        match self {
            Vendor::Nvidia => "NVML",
            Vendor::Amd => "AMD SMI",
        }
    }

    /// What `--doctor` says of the driver: its version, and CUDA's that it supports.
    pub(crate) fn driver_line(self, driver: Option<&str>, cuda: Option<&str>) -> String {
        let driver = driver.unwrap_or("unknown");
        match self {
            Vendor::Nvidia => format!("driver {driver}, supports CUDA {}", cuda.unwrap_or("unknown")),
            Vendor::Amd => format!("amdgpu driver {driver}"),
        }
    }

    /// Whether its GPUs run CUDA MPS, whose control daemon `--mps` joins: NVIDIA's alone.
    pub(crate) fn has_mps(self) -> bool {
        self == Vendor::Nvidia
    }

    /// Whether its GPUs may belong to an NVLink fabric that a fabric manager registers them
    /// with: NVIDIA's alone (AMD's XGMI has no such registration).
    pub(crate) fn has_nvlink_fabric(self) -> bool {
        self == Vendor::Nvidia
    }
}

pub(crate) use crate::options::VendorChoice;

impl Libraries {
    /// As the command line names them (`look_beside` is the mode's: `Config::libraries_to_open`).
    pub(crate) fn new(vendor: VendorChoice, nvml: Option<PathBuf>, amd_smi: Option<PathBuf>) -> Libraries {
        Libraries { vendor, nvml, amd_smi, look_beside: false }
    }

    /// The vendor `--vendor` names; NVIDIA's for `auto` (before a library has answered).
    pub(crate) fn vendor_if_chosen(&self) -> Vendor {
        match self.vendor {
            VendorChoice::Amd => Vendor::Amd,
            VendorChoice::Nvidia | VendorChoice::Auto => Vendor::Nvidia,
        }
    }
}

/// What the probe thread opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Libraries {
    pub(crate) vendor: VendorChoice,
    /// `--nvml-lib`; `None`: `libnvidia-ml.so.1`.
    pub(crate) nvml: Option<PathBuf>,
    /// `--amd-smi-lib`; `None`: `libamd_smi.so`, then `/opt/rocm/lib/libamd_smi.so`.
    pub(crate) amd_smi: Option<PathBuf>,
    /// `--list` under `auto` with NVIDIA GPUs: also count AMD SMI's, to say they are there. A
    /// launch never asks (an AMD driver that hangs must not hold up an NVIDIA job).
    pub(crate) look_beside: bool,
}
