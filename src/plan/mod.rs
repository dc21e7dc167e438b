//! What the command is and gets, before anything runs: the container run (`container`) or
//! launcher (`launchers`) it is, recognised in resolution, and the plan, built once from the
//! resolved settings and the acquisition and matched on by every later stage: its GPUs,
//! variables and CPUs (`env::Plan`, `affinity`), where it runs (`Target`), its rank in a
//! `--per-rank` group, how it is run and watched (`supervision`), and from these each later
//! stage's input (`Plan::monitor`, `Plan::launched`, `Plan::placement`; supervision takes the
//! plan itself). `launch/` runs it; config/, output/ and launch/ read it.

pub(crate) mod accelerate_config;
pub(crate) mod affinity;
pub(crate) mod container;
pub(crate) mod container_options;
pub(crate) mod env;
pub(crate) mod launcher_options;
pub(crate) mod launchers;
pub(crate) mod mps_control;
pub(crate) mod supervision;

use std::ffi::OsString;

use crate::options::size::Threshold;
use crate::options::{ContainerUse, CpuBind, VisibleAs};
use crate::plan::container::{CidUse, ContainerRun, Prepared};
use crate::plan::launchers::{Chosen, LauncherError, LauncherRun};
use crate::plan::supervision::Supervision;
use crate::probe::gpu::Machine;
use crate::rank::{Owners, PerRank};
use crate::runtime::Visible;
use crate::select::selection::Selection;
use crate::verify::ending::Launched;
use crate::verify::job::JobIdentity;
use crate::verify::monitor::{Monitor, Watching};
use crate::verify::report::{Placement, RankReport};

/// The resolved settings that shape what the command gets and where it runs, built once in
/// resolution (`Config::shaping`).
#[derive(Debug, Clone)]
pub(crate) struct Shaping {
    pub(crate) visible_as: Option<VisibleAs>,
    pub(crate) framework_env: bool,
    pub(crate) cpu_bind: CpuBind,
    /// `--cpu-bind` was given (not `--per-rank`'s default).
    pub(crate) cpu_bind_asked: bool,
    /// `--per-rank`: this rank, and what the group asks for.
    pub(crate) per_rank: Option<PerRank>,
    /// The container run the command is (checked in resolution: a conflict is refused before
    /// anything is probed or started), and `--container`.
    pub(crate) container: Option<(ContainerRun, ContainerUse)>,
    /// `--mps`: the command joins its user's MPS server.
    pub(crate) mps: Option<env::MpsJoin>,
    /// The launcher the command is (`deepspeed`, `accelerate launch`), unless `--launcher off`.
    pub(crate) launcher: Option<LauncherRun>,
    /// `--launcher off`: how the launcher left alone overrides CUDA_VISIBLE_DEVICES, if it does.
    pub(crate) launcher_note: Option<String>,
    /// What the plan needs of gpurun's own environment and process, read in resolution.
    pub(crate) surroundings: Surroundings,
}

/// What the user asked that the run's end reports and keeps: the `--min-free` applied, the
/// option words (for the history), and what `--min-free auto` decided, and why.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asked {
    pub(crate) min_free: Option<Threshold>,
    pub(crate) request_text: String,
    pub(crate) sizing: Option<String>,
}

/// What the plan is built from.
pub(crate) struct PlanInput<'a> {
    pub(crate) shaping: &'a Shaping,
    /// The command shown (a dry run) or launched (with or without `--exec`), and so what
    /// becomes of a container's ID file; none for a listing, an export or a hold.
    pub(crate) command: Option<(&'a [OsString], CidUse)>,
    pub(crate) supervision: &'a Supervision,
    pub(crate) asked: Asked,
}

/// What a plan needs of gpurun's own environment and process, read once in resolution
/// (`config::resolve`), so that `Plan::build` reads neither (issue 64).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Surroundings {
    /// An inherited Slurm MPS allocation: its server numbers the devices its own way.
    pub(crate) slurm_mps: bool,
    /// gpurun's own CPUs, within which `--cpu-bind numa` binds (read only for it).
    pub(crate) own_cpus: Vec<u32>,
    /// The caller's variables the command's are written from (a framework default the user
    /// set, those a runtime renumbers, the MPS directories).
    pub(crate) caller_variables: env::CallerVariables,
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

/// What the command gets, and everything each later stage takes its input from.
pub(crate) struct Plan {
    pub(crate) gpus: env::Plan,
    pub(crate) target: Target,
    pub(crate) rank: Option<Member>,
    /// `--launcher off`: why the launcher's ranks may land elsewhere (a wrong-gpu's cause).
    pub(crate) launcher_note: Option<String>,
    /// The command as the user gave it (empty for a listing, an export or a hold).
    asked_command: Vec<OsString>,
    pub(crate) supervision: Supervision,
    pub(crate) asked: Asked,
}

impl Plan {
    /// The plan for `selection`.
    pub(crate) fn build(
        input: &PlanInput,
        machine: &Machine,
        selection: Selection,
    ) -> Result<Plan, PlanError> {
        let shaping = input.shaping;
        let rank = shaping.per_rank.as_ref().map(|per_rank| Member {
            owners: Owners::new(&selection.indices(), per_rank),
            per_rank: per_rank.clone(),
        });
        // An MPS server numbers the devices its own way: a client is given them by UUID (so is
        // the client Slurm's MPS allocation makes, whose server was started on its GPU).
        let visible_as = match (&shaping.mps, shaping.surroundings.slurm_mps) {
            (Some(_), _) | (None, true) => Some(VisibleAs::Uuid),
            (None, false) => shaping.visible_as,
        };
        let mut gpus = match &rank {
            Some(Member { per_rank, .. }) => env::Plan::for_rank(
                selection,
                per_rank.own(),
                per_rank.own_only,
                visible_as,
                shaping.framework_env,
                &shaping.surroundings.caller_variables,
            ),
            None => env::Plan::new(
                selection,
                visible_as,
                shaping.framework_env,
                &shaping.surroundings.caller_variables,
            ),
        };
        if let (Some(mps), false) = (&shaping.mps, gpus.selection.is_empty()) {
            gpus.join_mps(mps, &shaping.surroundings.caller_variables);
        }
        if shaping.cpu_bind == CpuBind::Numa {
            let own = &shaping.surroundings.own_cpus;
            gpus.cpus = affinity::numa_cpus(&gpus.selection, machine, own, shaping.cpu_bind_asked);
        }
        let target = match (&shaping.container, input.command) {
            (Some(_), Some(_)) if !gpus.selection.runtime.runs_in_containers() => {
                return Err(PlanError::NotInContainers);
            }
            (Some((run, mode)), Some((command, cid))) if !gpus.selection.is_empty() => {
                let prepared = in_container(run, *mode, command, shaping.framework_env, &mut gpus, cid)?;
                Target::Container(Box::new(prepared))
            }
            (None, Some((command, _))) if !gpus.selection.is_empty() => match &shaping.launcher {
                Some(launcher) => match launcher.hand_over(command, &chosen_for(&gpus))? {
                    Some(rewritten) => Target::Launcher(rewritten),
                    None => Target::Host,
                },
                None => Target::Host,
            },
            _ => Target::Host,
        };
        Ok(Plan {
            gpus,
            target,
            rank,
            launcher_note: shaping.launcher_note.clone(),
            asked_command: input.command.map(|(command, _)| command.to_vec()).unwrap_or_default(),
            supervision: input.supervision.clone(),
            asked: input.asked.clone(),
        })
    }

    /// The command as it is run: a container run's with gpurun's options in it, a launcher's
    /// with gpurun's choice in its flags.
    pub(crate) fn command(&self) -> &[OsString] {
        match &self.target {
            Target::Container(prepared) => &prepared.command,
            Target::Launcher(rewritten) => rewritten,
            Target::Host => &self.asked_command,
        }
    }

    /// Verification's input: the plan's GPUs (on a GPU in MIG mode, its MIG devices, whose
    /// processes it lists again), what NVML showed on any GPU before the launch (not the
    /// command's), and what tells the command's processes from others'.
    pub(crate) fn monitor(&self, machine: &Machine) -> Monitor {
        let watched = machine
            .devices()
            .filter(|gpu| gpu.error.is_none() && !gpu.in_mig_mode())
            .map(|gpu| gpu.index)
            .collect();
        let before_launch =
            machine.devices().flat_map(|gpu| gpu.processes.iter().flatten().map(|p| p.pid)).collect();
        let runtime = self.gpus.selection.runtime;
        let given = self.gpus.variable(runtime.visibility_variable()).unwrap_or_default().to_owned();
        Monitor::new(Watching {
            mode: self.supervision.verify,
            selected: self.gpus.selection.indices(),
            watched,
            before_launch,
            visible: Visible { runtime, given },
            timeout: self.supervision.verify_timeout,
            owners: self.rank.as_ref().map(|member| member.owners.clone()),
            cidfile: self.target.cidfile(),
            launcher_note: self.launcher_note.clone(),
            idle: self.supervision.idle.clone(),
        })
    }

    /// The run's end's first half: what the launch knew before the command started.
    pub(crate) fn launched<'a>(&'a self, machine: &'a Machine, job: &'a JobIdentity) -> Launched<'a> {
        Launched {
            command: self.command(),
            selection: &self.gpus.selection,
            machine,
            min_free: self.asked.min_free,
            verify_timeout: self.supervision.verify_timeout,
            job,
        }
    }

    /// Where the plan ran the command, for the report.
    pub(crate) fn placement(&self) -> Placement {
        Placement {
            cpus: self.gpus.cpus.as_deref().map(crate::options::cpus::list),
            min_free: self.asked.sizing.clone(),
            container: self.target.report(),
            rank: self.rank.as_ref().map(|Member { per_rank, owners }| RankReport {
                local_rank: per_rank.rank.local_rank,
                local_size: per_rank.rank.local_size,
                launcher: per_rank.rank.launcher.to_owned(),
                group: per_rank.rank.job.clone(),
                node: per_rank.rank.node.clone(),
                group_gpus: owners.gpus.iter().map(|(index, _)| *index).collect(),
            }),
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
