//! The runtime the command's GPU code runs on: CUDA on NVIDIA's GPUs, ROCm (HIP over ROCr) on
//! AMD's. The rules that differ between them are here, so that a stage asks the runtime and
//! never tests the vendor (issue 64): which variable says what the command sees, and what a
//! process on a GPU it was not given most likely did. A third runtime is one more arm in each
//! method, each one flagged by the compiler.

pub(crate) mod cuda;
pub(crate) mod inherited;
pub(crate) mod rocm;

pub(crate) use inherited::{Inherited, Visibility};

use crate::options::VisibleAs;
use crate::probe::gpu::{Gpu, Machine};
use crate::probe::vendor::{Vendor, VendorChoice};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Cuda,
    Rocm,
}

/// What gpurun made the command see: the runtime, and the value it set its visibility
/// variable to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Visible {
    pub(crate) runtime: Runtime,
    pub(crate) given: String,
}

/// How the command's runtime names one device it is given: its place among the devices the
/// runtime enumerates here, and the UUID that names it alone, where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Address {
    pub(crate) ordinal: u32,
    pub(crate) uuid: Option<String>,
    /// Named by its UUID whatever `--visible-as` says (CUDA takes a MIG device no other way).
    pub(crate) uuid_only: bool,
}

/// The variables that give the command its devices, in the runtime's words: `naming` names
/// them (first in the environment, before gpurun's own), `renumbered` are inherited variables
/// that pick among them, rewritten so that they pick all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) naming: Vec<(String, String)>,
    pub(crate) renumbered: Vec<(String, String)>,
}

/// The inherited variables a runtime renumbers (`Written::renumbered`), of every runtime:
/// what the plan must know of the caller's environment to write them.
pub(crate) const RENUMBERED: &[&str] = &["GPU_DEVICE_ORDINAL", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"];

/// Where a runtime's device nodes are: the files of `folder` whose names start with `prefix`,
/// and `also`, a node of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceNodes {
    pub(crate) folder: &'static str,
    pub(crate) prefix: &'static str,
    pub(crate) also: Option<&'static str>,
    /// What `--doctor` says where there are none.
    pub(crate) none: &'static str,
}

/// Why a process of the command is on a GPU it was not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrongGpuCause {
    pub(crate) text: String,
    /// The process's environment was changed (a variable overridden or removed); otherwise the
    /// program picked the GPU itself.
    pub(crate) environment_changed: bool,
}

/// What the caller's environment leaves gpurun to choose from on `machine`, read as its GPUs'
/// runtime reads it. gpurun selects only inside that set and never widens it.
pub(crate) fn visibility(machine: &Machine, inherited: &Inherited) -> Visibility {
    match Runtime::of(machine.vendor) {
        Runtime::Cuda => cuda::resolve(machine, inherited),
        Runtime::Rocm => rocm::resolve(machine, inherited),
    }
}

impl Runtime {
    /// The runtime of `vendor`'s GPUs.
    pub(crate) fn of(vendor: Vendor) -> Runtime {
        match vendor {
            Vendor::Nvidia => Runtime::Cuda,
            Vendor::Amd => Runtime::Rocm,
        }
    }

    /// The runtime `--vendor` names; `None` for `auto`, which the machine decides.
    pub(crate) fn chosen(choice: VendorChoice) -> Option<Runtime> {
        match choice {
            VendorChoice::Nvidia => Some(Runtime::Cuda),
            VendorChoice::Amd => Some(Runtime::Rocm),
            VendorChoice::Auto => None,
        }
    }

    /// How this runtime names `gpu` of `machine` in the command.
    pub(crate) fn address(self, machine: &Machine, gpu: &Gpu) -> Address {
        match self {
            Runtime::Cuda => cuda::address(machine, gpu),
            Runtime::Rocm => rocm::address(machine, gpu),
        }
    }

    /// The variables that give the command the devices at `addresses` (best first), named as
    /// `visible_as` says; `inherited`: whether the caller's environment has a variable.
    pub(crate) fn variables(
        self,
        addresses: &[&Address],
        visible_as: VisibleAs,
        inherited: &dyn Fn(&str) -> bool,
    ) -> Written {
        match self {
            Runtime::Cuda => cuda::variables(addresses, visible_as, inherited),
            Runtime::Rocm => rocm::variables(addresses, visible_as, inherited),
        }
    }

    /// How the visibility variable names a GPU unless `--visible-as` says: ROCr takes a GPU by
    /// its UUID, immune to renumbering; CUDA by its PCI-order index (what `nvidia-smi` shows).
    pub(crate) fn default_visible_as(self) -> VisibleAs {
        match self {
            Runtime::Cuda => VisibleAs::Index,
            Runtime::Rocm => VisibleAs::Uuid,
        }
    }

    /// Whether it has a multi-process server a client can join (`--mps`): CUDA's MPS. ROCm
    /// has none.
    pub(crate) fn has_mps(self) -> bool {
        match self {
            Runtime::Cuda => true,
            Runtime::Rocm => false,
        }
    }

    /// Whether gpurun can give its GPUs to a container (`--container`): CDI or `--gpus` for
    /// NVIDIA's; AMD's device nodes are not mapped yet.
    pub(crate) fn runs_in_containers(self) -> bool {
        match self {
            Runtime::Cuda => true,
            Runtime::Rocm => false,
        }
    }

    /// The device nodes a program of this runtime opens, for `--doctor`.
    pub(crate) fn device_nodes(self) -> DeviceNodes {
        match self {
            Runtime::Cuda => DeviceNodes {
                folder: "/dev",
                prefix: "nvidia",
                also: None,
                none: "no /dev/nvidia* device nodes",
            },
            // ROCm's compute interface and the render nodes: a ROCm program opens both.
            Runtime::Rocm => DeviceNodes {
                folder: "/dev/dri",
                prefix: "renderD",
                also: Some("/dev/kfd"),
                none: "no /dev/kfd or /dev/dri/renderD* device nodes",
            },
        }
    }

    /// What the link names of `--list --topology` mean, in the words of the vendor's own tool
    /// (`nvidia-smi topo -m`, `amd-smi topology`).
    pub(crate) fn link_legend(self) -> &'static str {
        match self {
            Runtime::Cuda => {
                "NV: NVLink; BRD: one board; PIX: one PCIe switch; PXB: several switches; PHB: the host bridge; \
                 NODE: one NUMA node; SYS: across sockets"
            }
            Runtime::Rocm => "XGMI: AMD Infinity Fabric; NODE: PCIe, one NUMA node; SYS: PCIe, across sockets",
        }
    }

    /// The variable gpurun sets to the chosen GPUs, the one whose change in a process moves it
    /// to another GPU: HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES only choose among what
    /// ROCR_VISIBLE_DEVICES keeps on AMD.
    pub(crate) fn visibility_variable(self) -> &'static str {
        match self {
            Runtime::Cuda => "CUDA_VISIBLE_DEVICES",
            Runtime::Rocm => "ROCR_VISIBLE_DEVICES",
        }
    }

    /// Why a process of the command may be on a GPU it was not given, from its environment at
    /// exec (`variable`: `None` unreadable, `Some(None)` unset). `given`: the value gpurun set.
    pub(crate) fn wrong_gpu_cause(
        self,
        variable: impl Fn(&str) -> Option<Option<String>>,
        given: &str,
    ) -> WrongGpuCause {
        let changed = |text: String| WrongGpuCause { text, environment_changed: true };
        let name = self.visibility_variable();
        match variable(name) {
            Some(Some(value)) if value != given => {
                return changed(format!(
                    "{name} was overridden to {value:?} in that process (gpurun set {given:?})"
                ))
            }
            Some(None) => return changed(format!("{name} was removed from that process's environment")),
            _ => {}
        }
        if self == Runtime::Cuda {
            match variable("CUDA_DEVICE_ORDER") {
                Some(Some(order)) if order == "PCI_BUS_ID" => {}
                Some(_) => {
                    return changed(
                        "CUDA_DEVICE_ORDER is not PCI_BUS_ID in that process, so CUDA numbered the GPUs \
                         fastest first, not as nvidia-smi does"
                            .to_owned(),
                    )
                }
                None => {}
            }
        }
        let picked = match self {
            Runtime::Cuda => "a hard-coded device index (cuda:N, torch.cuda.set_device)",
            Runtime::Rocm => "a hard-coded device index (cuda:N, hipSetDevice)",
        };
        WrongGpuCause {
            text: format!("{picked}, a library that picks GPUs itself, or {name} changed inside the program"),
            environment_changed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment<'a>(
        set: &'a [(&'a str, Option<&'a str>)],
    ) -> impl Fn(&str) -> Option<Option<String>> + 'a {
        move |name| set.iter().find(|(n, _)| *n == name).map(|(_, value)| value.map(str::to_owned))
    }

    #[test]
    fn each_runtime_names_its_own_variable() {
        let moved = environment(&[("ROCR_VISIBLE_DEVICES", Some("1")), ("CUDA_VISIBLE_DEVICES", None)]);
        let cause = Runtime::Rocm.wrong_gpu_cause(&moved, "GPU-aa");
        assert_eq!(
            cause.text,
            "ROCR_VISIBLE_DEVICES was overridden to \"1\" in that process (gpurun set \"GPU-aa\")"
        );
        assert!(cause.environment_changed);
        // On CUDA the same process's removed CUDA_VISIBLE_DEVICES is the cause.
        let cause = Runtime::Cuda.wrong_gpu_cause(&moved, "0");
        assert_eq!(cause.text, "CUDA_VISIBLE_DEVICES was removed from that process's environment");
        let unchanged = environment(&[("ROCR_VISIBLE_DEVICES", Some("GPU-aa")), ("CUDA_DEVICE_ORDER", None)]);
        let cause = Runtime::Rocm.wrong_gpu_cause(&unchanged, "GPU-aa");
        assert!(!cause.environment_changed && cause.text.contains("hipSetDevice"), "{cause:?}");
        let fastest =
            environment(&[("CUDA_VISIBLE_DEVICES", Some("0")), ("CUDA_DEVICE_ORDER", Some("FASTEST_FIRST"))]);
        assert!(Runtime::Cuda.wrong_gpu_cause(&fastest, "0").text.starts_with("CUDA_DEVICE_ORDER"));
    }
}
