//! What a process inherits about GPU visibility (its environment), and what gpurun may choose
//! from as a result: read per runtime by `cuda` (CUDA's variables, and Slurm's) and `rocm`
//! (ROCm's).

/// What the caller's environment says about GPU visibility.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Inherited {
    pub(crate) cuda_visible_devices: Option<String>,
    /// What an earlier gpurun told its command (an `eval "$(gpurun --export)"` sets them too).
    pub(crate) gpurun_gpus: Option<String>,
    pub(crate) gpurun_gpu_uuids: Option<String>,
    pub(crate) cuda_device_order: Option<String>,
    pub(crate) slurm_step_gpus: Option<String>,
    pub(crate) slurm_job_gpus: Option<String>,
    /// Slurm's MPS allocation (`--gres=mps:N`): the job's id and the share Slurm gave it.
    pub(crate) slurm_job_id: Option<String>,
    pub(crate) mps_thread_percentage: Option<String>,
    /// AMD GPUs: ROCr's and HIP's restrictions (`runtime::rocm`).
    pub(crate) rocr_visible_devices: Option<String>,
    pub(crate) hip_visible_devices: Option<String>,
}

impl Inherited {
    pub(crate) fn from_env() -> Inherited {
        let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        Inherited {
            cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"),
            gpurun_gpus: var("GPURUN_GPUS"),
            gpurun_gpu_uuids: var("GPURUN_GPU_UUIDS"),
            cuda_device_order: var("CUDA_DEVICE_ORDER"),
            slurm_step_gpus: var("SLURM_STEP_GPUS"),
            slurm_job_gpus: var("SLURM_JOB_GPUS"),
            slurm_job_id: var("SLURM_JOB_ID"),
            mps_thread_percentage: var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            rocr_visible_devices: var("ROCR_VISIBLE_DEVICES"),
            hip_visible_devices: var("HIP_VISIBLE_DEVICES"),
        }
    }

    /// A Slurm job that holds a share of a GPU through MPS (`--gres=mps:N`): Slurm sets
    /// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_VISIBLE_DEVICES=0, "relative to those resources
    /// under MPS server control", always 0 (one GPU per node in MPS mode), and no GPU ids of a
    /// gres/gpu allocation (gres.html, MPS Management). Its prolog starts the MPS server on the
    /// GPU it gave. Shards (`--gres=shard:N`, SLURM_SHARDS_ON_NODE) are not this: their
    /// CUDA_VISIBLE_DEVICES is set "the same as if it were a GPU".
    pub(crate) fn slurm_mps(&self) -> bool {
        self.slurm_job_id.is_some()
            && self.mps_thread_percentage.is_some()
            && self.slurm_step_gpus.is_none()
            && self.slurm_job_gpus.is_none()
            && self.cuda_visible_devices.as_deref().is_none_or(|list| list.trim() == "0")
    }
}

/// The GPUs gpurun may choose from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Visibility {
    /// NVML indices, in the inherited order; `None`: every GPU.
    pub(crate) allowed: Option<Vec<u32>>,
    /// Where the restriction came from, for messages: `CUDA_VISIBLE_DEVICES=0,1`.
    pub(crate) source: Option<String>,
    pub(crate) warnings: Vec<String>,
    /// The restriction is exactly what an earlier gpurun exported into this shell: how to undo
    /// it (the vendor's variables), said when it turns GPUs away.
    pub(crate) exported: Option<&'static str>,
}

impl Visibility {
    pub(crate) fn allows(&self, index: u32) -> bool {
        self.allowed.as_ref().is_none_or(|allowed| allowed.contains(&index))
    }
}
