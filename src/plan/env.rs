//! The selection -> the variables the child gets (DESIGN 6). Everything not listed here passes
//! through untouched, byte for byte.

use crate::plan::mps_control::{MPS_LOG_DIRECTORY, MPS_PIPE_DIRECTORY};
use crate::runtime::Address;
use std::ffi::OsString;

use crate::options::shell;
use crate::options::VisibleAs;
use crate::select::selection::Selection;

/// What the command gets: the chosen GPUs and the variables that name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) selection: Selection,
    pub(crate) variables: Vec<(String, String)>,
    /// `--cpu-bind numa`: the command's CPUs (None: gpurun's own).
    pub(crate) cpus: Option<Vec<u32>>,
    /// The chosen set mixes GPU models: the warning (for a `--per-rank` rank, the whole
    /// group's set, which its ranks run on together).
    pub(crate) mixed_models: Option<String>,
}

impl Plan {
    /// The plan for `selection`, given what the caller's environment holds (`inherited`).
    pub(crate) fn new(
        selection: Selection,
        visible_as: Option<VisibleAs>,
        framework_env: bool,
        inherited: &CallerVariables,
    ) -> Plan {
        let visible_as = visible_as.unwrap_or(selection.runtime.default_visible_as());
        let variables = child_variables(&selection, visible_as, framework_env, |name| inherited.get(name));
        let mixed_models = selection.mixed_models();
        Plan { selection, variables, cpus: None, mixed_models }
    }

    /// The plan of one `--per-rank` rank, whose GPUs are the positions `own` of the group's
    /// `set` (PCI order): the whole set in `CUDA_VISIBLE_DEVICES`, the rank's own from position
    /// LOCAL_RANK x N on (so `cuda:LOCAL_RANK` is its own, and CUDA IPC and NCCL peer access
    /// between the ranks work), or with `own_only` (`--per-rank=own`) its own GPUs alone.
    /// `GPURUN_GPUS` and `GPURUN_GPU_UUIDS` name its own, and the plan's selection is its own:
    /// the lease, the CPUs, verification and the report are about them.
    pub(crate) fn for_rank(
        set: Selection,
        own: std::ops::Range<usize>,
        own_only: bool,
        visible_as: Option<VisibleAs>,
        framework_env: bool,
        inherited: &CallerVariables,
    ) -> Plan {
        let requested = crate::options::count::Count::exactly(own.len() as u32);
        let mixed_models = set.mixed_models();
        let own = Selection::of(
            set.devices.get(own).map(<[_]>::to_vec).unwrap_or_default(),
            requested,
            set.runtime,
        );
        if own_only {
            return Plan { mixed_models, ..Plan::new(own, visible_as, framework_env, inherited) };
        }
        let mut plan = Plan::new(set, visible_as, framework_env, inherited);
        let alone = Plan::new(own.clone(), visible_as, framework_env, inherited);
        for name in ["GPURUN_GPUS", "GPURUN_GPU_UUIDS"] {
            if let (Some(slot), Some(value)) =
                (plan.variables.iter_mut().find(|(n, _)| n == name), alone.variable(name))
            {
                slot.1 = value.to_owned();
            }
        }
        plan.selection = own;
        plan.mixed_models = mixed_models;
        plan
    }

    pub(crate) fn variable(&self, name: &str) -> Option<&str> {
        self.variables.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The caller's variables the plan reads where it writes the command's: a framework default
/// the user set (the user's value wins), those a runtime renumbers, and the MPS directories.
/// Read once, in resolution: the plan itself reads no environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CallerVariables {
    values: Vec<(String, OsString)>,
}

impl CallerVariables {
    /// Every variable the plan may ask about.
    fn names() -> impl Iterator<Item = &'static str> {
        let framework = FRAMEWORK_DEFAULTS.iter().map(|(name, _)| *name);
        let mps = ["CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"];
        framework.chain(crate::runtime::RENUMBERED.iter().copied()).chain(mps)
    }

    /// The values `read` gives for the plan's variables.
    pub(crate) fn read(read: impl Fn(&str) -> Option<OsString>) -> CallerVariables {
        CallerVariables {
            values: CallerVariables::names()
                .filter_map(|name| Some((name.to_owned(), read(name)?)))
                .collect(),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<OsString> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, value)| value.clone())
    }
}

/// `--mps`: what the command gets as a client of its user's MPS server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MpsJoin {
    /// `--mps-threads`: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
    pub(crate) threads: Option<u32>,
    /// `--mps-mem`: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, for each client device.
    pub(crate) pinned_bytes: Option<u64>,
}

impl Plan {
    /// Makes the command an MPS client: its directories passed on (the caller's, or NVIDIA's
    /// defaults), and the thread share and pinned memory asked for. `devices`: how many it
    /// sees (the client's ordinals 0..n, each with the same limit).
    pub(crate) fn join_mps(&mut self, mps: &MpsJoin, inherited: &CallerVariables) {
        let devices = self.variable("CUDA_VISIBLE_DEVICES").map_or(0, |list| list.split(',').count());
        for (name, default) in
            [("CUDA_MPS_PIPE_DIRECTORY", MPS_PIPE_DIRECTORY), ("CUDA_MPS_LOG_DIRECTORY", MPS_LOG_DIRECTORY)]
        {
            let value =
                inherited.get(name).map(|v| v.to_string_lossy().into_owned()).filter(|v| !v.is_empty());
            self.variables.push((name.to_owned(), value.unwrap_or_else(|| default.to_owned())));
        }
        if let Some(percent) = mps.threads {
            self.variables.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), percent.to_string()));
        }
        if let Some(bytes) = mps.pinned_bytes {
            let limit = pinned_limit(bytes);
            let each: Vec<String> = (0..devices).map(|ordinal| format!("{ordinal}={limit}")).collect();
            self.variables.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), each.join(",")));
        }
    }
}

/// A size as CUDA_MPS_PINNED_DEVICE_MEM_LIMIT takes it (`4G`, `512M`): whole GiB where it is
/// one, else MiB rounded up (never less than was asked).
fn pinned_limit(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    match bytes % (1 << 30) {
        0 => format!("{}G", bytes >> 30),
        _ => format!("{}M", bytes.div_ceil(MIB)),
    }
}

/// Framework variables set unless the user already set them (the user's value wins):
/// TensorFlow and JAX otherwise grab most of the card's memory at start.
const FRAMEWORK_DEFAULTS: &[(&str, &str)] =
    &[("TF_FORCE_GPU_ALLOW_GROWTH", "true"), ("XLA_PYTHON_CLIENT_PREALLOCATE", "false")];

/// The variables to set in the child, in a stable order: the runtime's, gpurun's own, the
/// inherited ones the runtime renumbers, and the framework defaults. `inherited` answers for
/// the caller's environment (a function, so tests need not touch the real one).
pub(crate) fn child_variables(
    selection: &Selection,
    visible_as: VisibleAs,
    framework_env: bool,
    inherited: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, String)> {
    let addresses: Vec<&Address> = selection.devices.iter().map(|device| &device.address).collect();
    let written = selection.runtime.variables(&addresses, visible_as, &|name| inherited(name).is_some());
    let mut variables = written.naming;
    variables.extend(gpurun_variables(selection));
    variables.extend(written.renumbered);
    framework_defaults(&mut variables, framework_env, &inherited);
    variables
}

/// `GPURUN_GPUS` (NVML or AMD SMI indices; a MIG device's parent's) and `GPURUN_GPU_UUIDS`.
fn gpurun_variables(selection: &Selection) -> [(String, String); 2] {
    let join = |items: Vec<String>| items.join(",");
    [
        ("GPURUN_GPUS".to_owned(), join(selection.devices.iter().map(|d| d.gpu_index.to_string()).collect())),
        (
            "GPURUN_GPU_UUIDS".to_owned(),
            join(selection.devices.iter().map(|d| d.uuid.clone().unwrap_or_default()).collect()),
        ),
    ]
}

fn framework_defaults(
    variables: &mut Vec<(String, String)>,
    framework_env: bool,
    inherited: &impl Fn(&str) -> Option<OsString>,
) {
    if framework_env {
        for (name, value) in FRAMEWORK_DEFAULTS {
            if inherited(name).is_none() {
                variables.push(((*name).to_owned(), (*value).to_owned()));
            }
        }
    }
}

/// `export NAME='value'` lines for `eval`: values in single quotes, a quote as `'\''`.
pub(crate) fn export_lines(variables: &[(String, String)]) -> String {
    variables.iter().map(|(name, value)| format!("export {name}={}\n", shell::single_quoted(value))).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_mps_pinned_limit_never_asks_for_less_than_given() {
        assert_eq!(super::pinned_limit(4 << 30), "4G");
        assert_eq!(super::pinned_limit(512 << 20), "512M");
        // 1.5 GiB + 1 byte: MiB rounded up.
        assert_eq!(super::pinned_limit((3 << 29) + 1), "1537M");
    }

    use super::*;
    use crate::options::count::Count;
    use crate::probe::gpu::{test_gpu, Gpu};

    fn machine_of(gpus: &[Gpu]) -> crate::probe::gpu::Machine {
        crate::probe::gpu::Machine::of(Default::default(), gpus.to_vec())
    }

    fn none(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn every_rank_sees_the_set_and_its_own_gpu_at_its_position() {
        let gpus: Vec<Gpu> = (0..8).map(test_gpu).collect();
        let set = Selection::new(&machine_of(&gpus), &[2, 3, 4, 5], Count::exactly(4));
        for rank in 0..4usize {
            let plan =
                Plan::for_rank(set.clone(), rank..rank + 1, false, None, true, &CallerVariables::default());
            assert_eq!(plan.variable("CUDA_VISIBLE_DEVICES"), Some("2,3,4,5"));
            assert_eq!(plan.variable("GPURUN_GPUS"), Some((rank + 2).to_string().as_str()));
            assert_eq!(plan.selection.indices(), vec![rank as u32 + 2]);
            let own =
                Plan::for_rank(set.clone(), rank..rank + 1, true, None, true, &CallerVariables::default());
            assert_eq!(own.variable("CUDA_VISIBLE_DEVICES"), Some((rank + 2).to_string().as_str()));
        }
        // Two per rank: rank 1 has positions 2 and 3.
        let plan = Plan::for_rank(set, 2..4, false, None, true, &CallerVariables::default());
        assert_eq!(plan.variable("GPURUN_GPUS"), Some("4,5"));
        assert_eq!(plan.variable("CUDA_VISIBLE_DEVICES"), Some("2,3,4,5"));
    }

    #[test]
    fn indices_uuids_and_order() {
        let gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        let variables = child_variables(
            &Selection::new(&machine_of(&gpus), &[3, 1], Count::exactly(2)),
            VisibleAs::Index,
            true,
            none,
        );
        let get = |name: &str| variables.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("3,1"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(get("GPURUN_GPUS"), Some("3,1"));
        assert_eq!(
            get("GPURUN_GPU_UUIDS"),
            Some(format!("{},{}", gpus[3].uuid.as_ref().unwrap(), gpus[1].uuid.as_ref().unwrap()).as_str())
        );
        assert_eq!(get("TF_FORCE_GPU_ALLOW_GROWTH"), Some("true"));
        assert_eq!(get("XLA_PYTHON_CLIENT_PREALLOCATE"), Some("false"));
        assert_eq!(get("GPU_DEVICE_ORDINAL"), None);

        let by_uuid = child_variables(
            &Selection::new(&machine_of(&gpus), &[2], Count::exactly(1)),
            VisibleAs::Uuid,
            false,
            none,
        );
        assert_eq!(by_uuid[0].1, gpus[2].uuid.clone().unwrap());
        assert!(by_uuid.iter().all(|(n, _)| !n.starts_with("TF_") && !n.starts_with("XLA_")));
    }

    #[test]
    fn users_framework_values_win_and_gpu_device_ordinal_follows() {
        let gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        let inherited = |name: &str| match name {
            "TF_FORCE_GPU_ALLOW_GROWTH" => Some(OsString::from("false")),
            "GPU_DEVICE_ORDINAL" => Some(OsString::from("0,1")),
            _ => None,
        };
        let variables = child_variables(
            &Selection::new(&machine_of(&gpus), &[2], Count::exactly(1)),
            VisibleAs::Index,
            true,
            inherited,
        );
        let names: Vec<&str> = variables.iter().map(|(n, _)| n.as_str()).collect();
        assert!(!names.contains(&"TF_FORCE_GPU_ALLOW_GROWTH"));
        assert!(names.contains(&"XLA_PYTHON_CLIENT_PREALLOCATE"));
        assert!(variables.contains(&("GPU_DEVICE_ORDINAL".to_owned(), "2".to_owned())));
    }

    #[test]
    fn cgroup_renumbering() {
        let mut gpus: Vec<Gpu> = (0..4).map(test_gpu).collect();
        gpus[0].handle_refused = true;
        let variables = child_variables(
            &Selection::new(&machine_of(&gpus), &[2], Count::exactly(1)),
            VisibleAs::Index,
            false,
            none,
        );
        assert_eq!(variables[0].1, "1");
        assert_eq!(variables[2].1, "2");
    }

    #[test]
    fn export_quotes_for_eval() {
        let lines = export_lines(&[("A".to_owned(), "x'y $(z)".to_owned()), ("B".to_owned(), String::new())]);
        assert_eq!(lines, "export A='x'\\''y $(z)'\nexport B=''\n");
    }
}
