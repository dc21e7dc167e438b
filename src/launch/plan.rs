//! The plan: what the command gets, built once from the resolved settings and the acquisition,
//! and matched on by every later stage: its GPUs, variables and CPUs (`launch::env::Plan`),
//! where it runs (`Target`), and its rank in a `--per-rank` group.

use std::ffi::OsString;

use crate::launch::affinity;
use crate::launch::container::{self, CidUse, ContainerRun, Prepared};
use crate::launch::env;
use crate::launch::launchers::{Chosen, LauncherError, LauncherRun};
use crate::options::{ContainerUse, CpuBind, VisibleAs};
use crate::probe::gpu::Machine;
use crate::rank::{Owners, PerRank};
use crate::select::selection::Selection;

/// What the plan is built from: the resolved settings that shape what the command gets.
pub(crate) struct PlanInput<'a> {
    pub(crate) visible_as: Option<VisibleAs>,
    pub(crate) framework_env: bool,
    pub(crate) cpu_bind: CpuBind,
    /// `--cpu-bind` was given (not `--per-rank`'s default).
    pub(crate) cpu_bind_asked: bool,
    pub(crate) per_rank: Option<&'a PerRank>,
    /// The container run the command is, and `--container`.
    pub(crate) container: Option<(&'a ContainerRun, ContainerUse)>,
    /// The command shown (a dry run) or launched (with or without `--exec`), and so what
    /// becomes of a container's ID file; none for a listing or an export.
    pub(crate) command: Option<(&'a [OsString], CidUse)>,
    /// `--mps`: the command joins its user's MPS server.
    pub(crate) mps: Option<&'a env::MpsJoin>,
    /// The launcher the command is (`deepspeed`, `accelerate launch`), unless `--launcher off`.
    pub(crate) launcher: Option<&'a LauncherRun>,
    /// `--launcher off`: how the launcher left alone overrides CUDA_VISIBLE_DEVICES, if it does.
    pub(crate) launcher_note: Option<String>,
    /// What the plan needs of gpurun's own environment and process, read in resolution.
    pub(crate) surroundings: &'a Surroundings,
}

/// What a plan needs of gpurun's own environment and process, read once in resolution
/// (`config::resolve`), so that `Plan::build` reads neither (issue 64).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Surroundings {
    /// An inherited Slurm MPS allocation: its server numbers the devices its own way.
    pub(crate) slurm_mps: bool,
    /// gpurun's own CPUs, within which `--cpu-bind numa` binds (read only for it).
    pub(crate) own_cpus: Vec<u32>,
    /// The inherited CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY, for `--mps`.
    pub(crate) mps_directories: Vec<(String, OsString)>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("cannot make a private directory for the container's ID: {0}")]
    ContainerId(#[from] std::io::Error),
    #[error(transparent)]
    Launcher(#[from] LauncherError),
    #[error(
        "AMD GPUs are not passed into containers yet (ROCm's /dev/kfd and /dev/dri/renderD* devices): give \
         them to the container by hand, with --container off"
    )]
    NotInContainers,
}

/// Where the command runs.
pub(crate) enum Target {
    /// On this host, as gpurun's child, with the GPUs in its environment.
    Host,
    /// In a container its client starts: the GPUs go in as the runtime's options.
    Container(Box<Prepared>),
    /// On this host, through a launcher that sets its ranks' GPUs itself: the command with
    /// gpurun's choice in the launcher's own flags.
    Launcher(Vec<OsString>),
}

impl Target {
    /// Whether gpurun reaps what the command leaves: a container's processes are the
    /// runtime's (conmon, containerd-shim), so that the runtime ends and removes its container
    /// as it does without gpurun; gpurun ends a container by its ID when it must.
    pub(crate) fn gpurun_reaps_leftovers(&self) -> bool {
        !matches!(self, Target::Container(_))
    }

    /// What the parent-death watcher ends besides the command: a container, by its ID.
    pub(crate) fn death_kill(&self, signal: i32) -> Option<crate::process::death::ContainerKill> {
        match self {
            Target::Container(prepared) => prepared.death_kill(signal),
            Target::Host | Target::Launcher(_) => None,
        }
    }

    /// Where verification finds the command's processes besides its tree: a container's ID
    /// file.
    pub(crate) fn cidfile(&self) -> Option<std::path::PathBuf> {
        match self {
            Target::Container(prepared) => Some(prepared.cidfile.clone()),
            Target::Host | Target::Launcher(_) => None,
        }
    }

    /// What is said as the command starts: signals that go to a container's client only.
    pub(crate) fn warn_at_start(&self) {
        if let Target::Container(prepared) = self {
            if prepared.run.sig_proxy_off {
                tracing::warn!(
                    "--sig-proxy=false: signals reach the {} client, not the container (gpurun still ends the container by its ID when it must)",
                    prepared.run.client.name()
                );
            }
        }
    }

    /// The report's container: the client, the image, the ID.
    pub(crate) fn report(&self) -> Option<crate::verify::report::ContainerReport> {
        match self {
            Target::Container(prepared) => Some(crate::verify::report::ContainerReport {
                client: prepared.run.client.name().to_owned(),
                image: prepared.run.image.clone(),
                id: prepared.id(),
            }),
            Target::Host | Target::Launcher(_) => None,
        }
    }
}

/// One rank of a `--per-rank` group: who it is, and whose each of the group's GPUs is.
pub(crate) struct Member {
    pub(crate) per_rank: PerRank,
    pub(crate) owners: Owners,
}

pub(crate) struct Plan {
    pub(crate) gpus: env::Plan,
    pub(crate) target: Target,
    pub(crate) rank: Option<Member>,
    /// `--launcher off`: why the launcher's ranks may land elsewhere (a wrong-gpu's cause).
    pub(crate) launcher_note: Option<String>,
}

impl Plan {
    /// The plan for `selection`.
    pub(crate) fn build(
        input: &PlanInput,
        machine: &Machine,
        selection: Selection,
    ) -> Result<Plan, PlanError> {
        let rank = input.per_rank.map(|per_rank| Member {
            owners: Owners::new(&selection.indices(), per_rank),
            per_rank: per_rank.clone(),
        });
        // An MPS server numbers the devices its own way: a client is given them by UUID (so is
        // the client Slurm's MPS allocation makes, whose server was started on its GPU).
        let visible_as = match (input.mps, input.surroundings.slurm_mps) {
            (Some(_), _) | (None, true) => Some(VisibleAs::Uuid),
            (None, false) => input.visible_as,
        };
        let mut gpus = match &rank {
            Some(Member { per_rank, .. }) => env::Plan::for_rank(
                selection,
                per_rank.own(),
                per_rank.own_only,
                visible_as,
                input.framework_env,
            ),
            None => env::Plan::new(selection, visible_as, input.framework_env),
        };
        if let (Some(mps), false) = (input.mps, gpus.selection.is_empty()) {
            let inherited = &input.surroundings.mps_directories;
            gpus.join_mps(mps, |name| {
                inherited.iter().find(|(n, _)| n == name).map(|(_, value)| value.clone())
            });
        }
        if input.cpu_bind == CpuBind::Numa {
            let own = &input.surroundings.own_cpus;
            gpus.cpus = affinity::numa_cpus(&gpus.selection, machine, own, input.cpu_bind_asked);
        }
        let target = match (input.container, input.command) {
            (Some(_), Some(_)) if !gpus.selection.runtime.runs_in_containers() => {
                return Err(PlanError::NotInContainers);
            }
            (Some((run, mode)), Some((command, cid))) if !gpus.selection.is_empty() => {
                let prepared = in_container(run, mode, command, input.framework_env, &mut gpus, cid)?;
                Target::Container(Box::new(prepared))
            }
            (None, Some((command, _))) if !gpus.selection.is_empty() => match input.launcher {
                Some(launcher) => match launcher.hand_over(command, &chosen_for(&gpus))? {
                    Some(rewritten) => Target::Launcher(rewritten),
                    None => Target::Host,
                },
                None => Target::Host,
            },
            _ => Target::Host,
        };
        Ok(Plan { gpus, target, rank, launcher_note: input.launcher_note.clone() })
    }

    /// The command as it is run: a container run's with gpurun's options in it.
    pub(crate) fn command<'a>(&'a self, asked: &'a [OsString]) -> &'a [OsString] {
        match &self.target {
            Target::Container(prepared) => &prepared.command,
            Target::Launcher(rewritten) => rewritten,
            Target::Host => asked,
        }
    }

    pub(crate) fn container(&self) -> Option<&Prepared> {
        match &self.target {
            Target::Container(prepared) => Some(prepared),
            Target::Host | Target::Launcher(_) => None,
        }
    }
}

/// The choice in a launcher's terms: CUDA's ordinals, and the CUDA_VISIBLE_DEVICES given.
fn chosen_for(gpus: &env::Plan) -> Chosen<'_> {
    Chosen {
        ordinals: gpus.selection.devices.iter().map(|device| device.address.ordinal).collect(),
        visible: gpus.variable("CUDA_VISIBLE_DEVICES").unwrap_or_default(),
        mig: gpus.selection.devices.iter().any(|device| device.mig),
    }
}

/// A container run gets the GPUs as the runtime's options; its client gets no host-index
/// CUDA_VISIBLE_DEVICES (podman --env-host would pass it in, where it would mean nothing).
fn in_container(
    run: &ContainerRun,
    mode: ContainerUse,
    command: &[OsString],
    framework_env: bool,
    gpus: &mut env::Plan,
    cid: CidUse,
) -> std::io::Result<Prepared> {
    let uuids: Vec<String> = gpus.selection.devices.iter().filter_map(|d| d.uuid.clone()).collect();
    let indices = gpus.variable("GPURUN_GPUS").unwrap_or_default().to_owned();
    let chosen = container::Chosen { uuids: &uuids, indices: &indices, framework_env };
    // Said for a dry run too: it shows what the launch would do.
    for warning in &run.warnings {
        tracing::warn!("{warning}");
    }
    let prepared = Prepared::new(run, command, &chosen, mode, cid)?;
    gpus.variables.retain(|(name, _)| name != "CUDA_VISIBLE_DEVICES" && name != "GPU_DEVICE_ORDINAL");
    Ok(prepared)
}
