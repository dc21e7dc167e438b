//! Which rank this is, read from the launcher that started it (DESIGN 4b): the rank on this
//! node, how many ranks the node has, and what names the job, so that the node's ranks find
//! each other in the lock directory. Pure: the environment is a function.

use std::fmt;

/// A rank of a job on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rank {
    /// Position among the node's ranks, from 0.
    pub(crate) local_rank: u32,
    /// How many ranks the job has on this node.
    pub(crate) local_size: u32,
    /// What names the job: the same for every rank of one launch, different for two launches
    /// running at once.
    pub(crate) job: String,
    /// Which node this rank is on: the group is one node's (`group_key`), so that nodes that
    /// share a lock directory (a home on NFS, several emulated nodes on one host) never meet.
    pub(crate) node: String,
    /// Which launcher said so: `torchrun`, `Open MPI`, `MPICH`, `Slurm`, or the variables.
    pub(crate) launcher: &'static str,
    /// The variable that gave the rank, for messages (`LOCAL_RANK`).
    pub(crate) rank_variable: &'static str,
    /// The one that gave the node's rank count (`LOCAL_WORLD_SIZE`).
    pub(crate) size_variable: &'static str,
}

impl Rank {
    /// What the node's ranks find their group by: the job on this node.
    pub(crate) fn group_key(&self) -> String {
        format!("{}@{}", self.job, self.node)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "rank {} of {} ({})", self.local_rank, self.local_size, self.launcher)
    }
}

/// One launcher's variables: the local rank, the node's rank count.
struct Launcher {
    name: &'static str,
    rank: &'static str,
    size: &'static str,
}

/// In the order they are looked for, innermost launcher first: a rank inherits the variables of
/// every launcher above it (mpirun or torchrun inside an sbatch script sees the batch step's
/// SLURM_LOCALID=0), and the one that started this process set its own last.
const LAUNCHERS: &[Launcher] = &[
    Launcher { name: "torchrun", rank: "LOCAL_RANK", size: "LOCAL_WORLD_SIZE" },
    Launcher { name: "Open MPI", rank: "OMPI_COMM_WORLD_LOCAL_RANK", size: "OMPI_COMM_WORLD_LOCAL_SIZE" },
    Launcher { name: "MPICH", rank: "MPI_LOCALRANKID", size: "MPI_LOCALNRANKS" },
    Launcher { name: "Slurm", rank: "SLURM_LOCALID", size: "SLURM_STEP_TASKS_PER_NODE" },
];

/// What `--per-rank` looks for, for the error when none is there.
pub(crate) const LOOKED_FOR: &str =
    "LOCAL_RANK and LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_RANK and \
     OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI's mpirun), MPI_LOCALRANKID and MPI_LOCALNRANKS (MPICH's mpiexec), \
     SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE (srun)";

/// The rank from the launcher's variables. `group`: `--group NAME`, which names the job where
/// the launcher does not (and wins where it does). `parent`: the parent process's identity
/// (PID and start time), which names an MPICH job: Hydra puts no job id in its ranks'
/// environment, but every local rank is a child of the node's one hydra_pmi_proxy. `host`:
/// this host's name, the node where the launcher names none.
pub(crate) fn detect(
    variable: impl Fn(&str) -> Option<String>,
    group: Option<&str>,
    parent: Option<(u32, u64)>,
    host: &str,
) -> Result<Rank, String> {
    let Some(launcher) = LAUNCHERS.iter().find(|l| variable(l.rank).is_some()) else {
        return Err(format!("--per-rank: no launcher's rank variables are set; looked for {LOOKED_FOR}"));
    };
    let number = |name: &str, text: &str| -> Result<u32, String> {
        text.trim().parse::<u32>().map_err(|_| format!("--per-rank: {name}={text:?} is not a whole number"))
    };
    let rank_text = variable(launcher.rank).unwrap_or_default();
    let local_rank = number(launcher.rank, &rank_text)?;
    let Some(size_text) = variable(launcher.size) else {
        return Err(format!(
            "--per-rank: {}={rank_text} is set but {} is not: cannot tell how many ranks this node has",
            launcher.rank, launcher.size
        ));
    };
    let local_size = match launcher.name {
        "Slurm" => slurm_tasks_here(&size_text, variable("SLURM_NODEID").as_deref())?,
        _ => number(launcher.size, &size_text)?,
    };
    if local_size == 0 || local_rank >= local_size {
        return Err(format!(
            "--per-rank: {}={local_rank} is not below {}={size_text}",
            launcher.rank, launcher.size
        ));
    }
    let job = match group {
        Some(name) => format!("group:{name}"),
        None => job_id(launcher.name, &variable, parent).ok_or_else(|| {
            format!(
                "--per-rank: {} gives this rank no job id to find the other ranks by; name the job with \
                 --group NAME (the same for every rank of one launch)",
                launcher.name
            )
        })?,
    };
    Ok(Rank {
        local_rank,
        local_size,
        job,
        node: node_of(launcher.name, &variable, host),
        launcher: launcher.name,
        rank_variable: launcher.rank,
        size_variable: launcher.size,
    })
}

/// What names a launch of each launcher on this node.
fn job_id(
    launcher: &str,
    variable: &impl Fn(&str) -> Option<String>,
    parent: Option<(u32, u64)>,
) -> Option<String> {
    let all = |names: &[&str]| -> Option<String> {
        names.iter().map(|name| variable(name)).collect::<Option<Vec<_>>>().map(|values| values.join(":"))
    };
    match launcher {
        // torchrun's default --rdzv-id is "none" for every job: the rendezvous endpoint (the
        // store torchrun serves, one per job) and the restart count tell two jobs apart, and a
        // restarted job's new workers from the old ones that are still ending.
        "torchrun" => {
            all(&["TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"])
                .or_else(|| all(&["TORCHELASTIC_RUN_ID"]))
                .map(|id| format!("torchrun:{id}"))
        }
        // Open MPI 5 (PRRTE) and 4 (ORTE with PMIx) both name the job's namespace.
        "Open MPI" => all(&["PMIX_NAMESPACE"])
            .or_else(|| all(&["OMPI_MCA_ess_base_jobid"]))
            .map(|id| format!("openmpi:{id}")),
        "MPICH" => parent.map(|(pid, started)| format!("mpich:{pid}:{started}")),
        "Slurm" => all(&["SLURM_JOB_ID", "SLURM_STEP_ID"]).map(|id| format!("slurm:{id}")),
        _ => None,
    }
}

/// Which node a rank of each launcher is on: Slurm's node name (two slurmd on one host are two
/// nodes); Open MPI's local daemon (`jobid.vpid` of the orted that started the rank: one per
/// node, also where several "hosts" are one machine), after its host name; torchrun's node
/// rank (`GROUP_RANK`) on this host; else this host's name.
fn node_of(launcher: &str, variable: &impl Fn(&str) -> Option<String>, host: &str) -> String {
    let named = match launcher {
        "Slurm" => variable("SLURMD_NODENAME"),
        "Open MPI" => {
            let daemon = variable("OMPI_MCA_orte_local_daemon_uri")
                .and_then(|uri| uri.split(';').next().map(str::to_owned))
                .filter(|daemon| !daemon.is_empty());
            let name = variable("PMIX_HOSTNAME").unwrap_or_else(|| host.to_owned());
            Some(match daemon {
                Some(daemon) => format!("{name}/{daemon}"),
                None => name,
            })
        }
        "torchrun" => variable("GROUP_RANK").map(|node| format!("{host}/{node}")),
        _ => None,
    };
    named.filter(|name| !name.is_empty()).unwrap_or_else(|| host.to_owned())
}

/// This node's task count from `SLURM_STEP_TASKS_PER_NODE` (`4`, `2(x3),1`: per node, in
/// node order) and `SLURM_NODEID` (this node's position; 0 when unset).
pub(crate) fn slurm_tasks_here(per_node: &str, node_id: Option<&str>) -> Result<u32, String> {
    let bad = || format!("--per-rank: SLURM_STEP_TASKS_PER_NODE={per_node:?} is not Slurm's N or N(xK) list");
    let node: usize = match node_id {
        Some(text) => {
            text.trim().parse().map_err(|_| format!("--per-rank: SLURM_NODEID={text:?} is not a number"))?
        }
        None => 0,
    };
    let mut position = 0usize;
    for part in per_node.split(',') {
        let (tasks, repeat) = match part.split_once("(x") {
            Some((tasks, rest)) => {
                (tasks, rest.strip_suffix(')').ok_or_else(bad)?.parse::<usize>().map_err(|_| bad())?)
            }
            None => (part, 1),
        };
        let tasks: u32 = tasks.parse().map_err(|_| bad())?;
        if node < position + repeat {
            return Ok(tasks);
        }
        position += repeat;
    }
    Err(format!("--per-rank: SLURM_STEP_TASKS_PER_NODE={per_node:?} has no entry for SLURM_NODEID={node}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn each_launcher_gives_the_rank_the_size_and_the_job() {
        // As torchrun 2.x sets them for a worker (torch/distributed/elastic/agent/server/
        // local_elastic_agent.py, _start_workers).
        let torchrun = [
            ("LOCAL_RANK", "2"),
            ("RANK", "2"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("WORLD_SIZE", "4"),
            ("TORCHELASTIC_RUN_ID", "none"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
        ];
        let rank = detect(env(&torchrun), None, None, "vm").unwrap();
        assert_eq!((rank.local_rank, rank.local_size, rank.launcher), (2, 4, "torchrun"));
        assert_eq!(rank.job, "torchrun:none:127.0.0.1:29500:0");
        let ompi = [
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-host-1234@1"),
        ];
        let rank = detect(env(&ompi), None, None, "vm").unwrap();
        assert_eq!(
            (rank.local_rank, rank.local_size, rank.job.as_str()),
            (1, 4, "openmpi:prterun-host-1234@1")
        );
        let mpich = [("MPI_LOCALRANKID", "3"), ("MPI_LOCALNRANKS", "4"), ("PMI_RANK", "7")];
        let rank = detect(env(&mpich), None, Some((4242, 99)), "vm").unwrap();
        assert_eq!((rank.local_rank, rank.job.as_str()), (3, "mpich:4242:99"));
        let slurm = [
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "3"),
        ];
        let rank = detect(env(&slurm), None, None, "vm").unwrap();
        assert_eq!((rank.local_rank, rank.local_size, rank.job.as_str()), (0, 2, "slurm:77:3"));
        // --group names the job, also where the launcher does.
        assert_eq!(detect(env(&slurm), Some("sweep"), None, "vm").unwrap().job, "group:sweep");
    }

    #[test]
    fn what_is_missing_or_wrong_is_named() {
        let error = detect(env(&[]), None, None, "vm").unwrap_err();
        assert!(error.contains("LOCAL_RANK") && error.contains("SLURM_LOCALID"), "{error}");
        let error = detect(env(&[("LOCAL_RANK", "0")]), None, None, "vm").unwrap_err();
        assert!(error.contains("LOCAL_WORLD_SIZE is not"), "{error}");
        let error =
            detect(env(&[("LOCAL_RANK", "4"), ("LOCAL_WORLD_SIZE", "4")]), None, None, "vm").unwrap_err();
        assert!(error.contains("LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"), "{error}");
        let error =
            detect(env(&[("LOCAL_RANK", "x"), ("LOCAL_WORLD_SIZE", "4")]), None, None, "vm").unwrap_err();
        assert!(error.contains("LOCAL_RANK=\"x\""), "{error}");
        // Plain variables with no job id: --group is the way.
        let error =
            detect(env(&[("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")]), None, None, "vm").unwrap_err();
        assert!(error.contains("--group NAME"), "{error}");
        assert!(detect(env(&[("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")]), Some("a"), None, "vm").is_ok());
    }

    #[test]
    fn the_group_is_one_nodes() {
        let slurm = |node: &'static str| {
            [
                ("SLURM_LOCALID", "0"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
                ("SLURM_JOB_ID", "7"),
                ("SLURM_STEP_ID", "0"),
                ("SLURMD_NODENAME", node),
            ]
        };
        let (n1, n2) = (slurm("n1"), slurm("n2"));
        let (one, two) =
            (detect(env(&n1), None, None, "vm").unwrap(), detect(env(&n2), None, None, "vm").unwrap());
        assert_eq!((one.job.as_str(), one.node.as_str()), ("slurm:7:0", "n1"));
        assert_ne!(one.group_key(), two.group_key(), "two nodes of one job, one host");
        // Open MPI's two emulated hosts: one host name, one daemon each.
        let ompi = |daemon: &'static str| {
            [
                ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ("PMIX_NAMESPACE", "1883"),
                ("PMIX_HOSTNAME", "vm"),
                ("OMPI_MCA_orte_local_daemon_uri", daemon),
            ]
        };
        let (a, b) = (ompi("1882.1;tcp://10.0.0.1:4048"), ompi("1882.2;tcp://10.0.0.1:4050"));
        let (a, b) = (detect(env(&a), None, None, "vm").unwrap(), detect(env(&b), None, None, "vm").unwrap());
        assert_eq!(a.node, "vm/1882.1");
        assert_ne!(a.group_key(), b.group_key());
        let torchrun = [
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "x"),
            ("GROUP_RANK", "1"),
        ];
        assert_eq!(detect(env(&torchrun), None, None, "vm").unwrap().node, "vm/1");
        let plain = [("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")];
        assert_eq!(detect(env(&plain), Some("a"), None, "vm").unwrap().node, "vm");
    }

    #[test]
    fn slurm_task_lists_are_expanded_by_node() {
        assert_eq!(slurm_tasks_here("4", None), Ok(4));
        assert_eq!(slurm_tasks_here("2(x3),1", Some("2")), Ok(2));
        assert_eq!(slurm_tasks_here("2(x3),1", Some("3")), Ok(1));
        assert!(slurm_tasks_here("2(x3),1", Some("4")).is_err());
        assert!(slurm_tasks_here("2(x", None).is_err());
        assert!(slurm_tasks_here("", None).is_err());
    }
}
