//! The runtime the command's GPU code runs on: CUDA on NVIDIA's GPUs, ROCm (HIP over ROCr) on
//! AMD's. The rules that differ between them are here, so that a stage asks the runtime and
//! never tests the vendor (issue 64): which variable says what the command sees, and what a
//! process on a GPU it was not given most likely did. A third runtime is one more arm in each
//! method, each one flagged by the compiler.

use crate::probe::vendor::Vendor;

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

/// Why a process of the command is on a GPU it was not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrongGpuCause {
    pub(crate) text: String,
    /// The process's environment was changed (a variable overridden or removed); otherwise the
    /// program picked the GPU itself.
    pub(crate) environment_changed: bool,
}

impl Runtime {
    /// The runtime of `vendor`'s GPUs.
    pub(crate) fn of(vendor: Vendor) -> Runtime {
        match vendor {
            Vendor::Nvidia => Runtime::Cuda,
            Vendor::Amd => Runtime::Rocm,
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
