//! The command line, and nothing else: these doc comments are `--help` and the man page.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser};

use std::time::Duration;

use crate::options::count::{self, Count};
use crate::options::devices::{self, DeviceList};
use crate::options::signal::{self, SignalList};
use crate::options::size::{self, MinFree};
use crate::options::{
    duration, ContainerUse, CpuBind, Fallback, HealthUse, LauncherUse, LogFormat, MigUse, Policy, RankView,
    TopologyUse, VerifyMode, VisibleAs,
};

const ABOUT: &str = "Run a command on the right NVIDIA GPU";

const LONG_ABOUT: &str = "\
gpurun probes the GPUs through NVML, picks the ones that fit the request, sets \
CUDA_VISIBLE_DEVICES (as NVML indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers \
the cards the way nvidia-smi does) and runs COMMAND.

Options come first: parsing stops at `--` or at the first word that is not an option, so \
gpurun never takes the command's own arguments.";

/// The end of `-h` (the short help): three examples and where the rest is.
const SHORT_HELP_END: &str = "\
Examples:
  gpurun --list                                      the GPUs, their load and processes
  gpurun --gpus 2 --min-free 8G -- python train.py   two GPUs with 8 GiB free each
  vars=$(gpurun --export) && eval \"$vars\"            CUDA_VISIBLE_DEVICES for this shell

Every option and the reference: gpurun --help, man gpurun; the guide: share/doc/gpurun/doc/guide.md";

/// `--completions`: the shells a script is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Parser)]
#[command(
    name = "gpurun",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = SHORT_HELP_END,
    override_usage = "gpurun [OPTIONS] [--] COMMAND [ARGS]...\n       \
                      gpurun --list [--json] [OPTIONS]\n       \
                      gpurun --dry-run [--json] [OPTIONS] [-- COMMAND [ARGS]...]\n       \
                      gpurun --export [OPTIONS]\n       \
                      gpurun --doctor [OPTIONS]\n       \
                      gpurun --history [--json] [PATTERN]\n       \
                      gpurun --completions bash|zsh|fish",
)]
pub(crate) struct Cli {
    /// How many GPUs: N, MIN-MAX or all.
    ///
    /// N: exactly N; MIN-MAX: as many as qualify within the range (2-4); all: every GPU that
    /// qualifies, at least one; 0 runs the command with no GPU visible.
    #[arg(
        long,
        value_name = "N|MIN-MAX|all",
        default_value = "1",
        value_parser = count::parse,
        allow_negative_numbers = true,
        help_heading = "Selection"
    )]
    pub(crate) gpus: Count,

    /// Only GPUs with this much free memory (8G, 50%, auto).
    ///
    /// A SIZE (8G, 8GiB, 8192M, 0.5T, 16GB) or P% of the card's total memory; `auto`: the
    /// largest peak of the same command's last 5 runs in this directory (from the history) plus
    /// 10%, at most what the largest allowed card can have free, no filter when there is none;
    /// `auto:SIZE`: SIZE when there is none.
    #[arg(long, value_name = "SIZE|P%|auto", value_parser = size::parse_min_free, allow_negative_numbers = true, help_heading = "Selection")]
    pub(crate) min_free: Option<MinFree>,

    /// Only GPUs with at least this much memory in total (a SIZE).
    #[arg(long, hide_short_help = true, value_name = "SIZE", value_parser = size::parse_bytes, allow_negative_numbers = true, help_heading = "Selection")]
    pub(crate) min_total: Option<u64>,

    /// Only GPUs whose utilization is at most P percent.
    #[arg(long, hide_short_help = true, value_name = "P", value_parser = size::parse_util_percent, allow_negative_numbers = true, help_heading = "Selection")]
    pub(crate) max_util: Option<u32>,

    /// Only GPUs with no compute process on them.
    #[arg(long, help_heading = "Selection")]
    pub(crate) exclusive: bool,

    /// Choose only among these GPUs.
    ///
    /// NVML indices, GPU- or MIG- UUIDs and unique prefixes, or PCI bus ids, comma-separated.
    #[arg(long, value_name = "LIST", value_parser = devices::parse_device_list, help_heading = "Selection")]
    pub(crate) devices: Option<DeviceList>,

    /// Never choose these GPUs (same forms as --devices).
    #[arg(long, hide_short_help = true, value_name = "LIST", value_parser = devices::parse_device_list, help_heading = "Selection")]
    pub(crate) exclude: Option<DeviceList>,

    /// Only GPUs whose model matches (A100, *80GB).
    ///
    /// Case-insensitive, anywhere in the name (A100), or a whole-name pattern with * and ?
    /// (*80GB).
    #[arg(long, value_name = "PATTERN", help_heading = "Selection")]
    pub(crate) model: Option<String>,

    /// How to rank the GPUs that qualify.
    #[arg(long, value_enum, default_value_t = Policy::MostFree, help_heading = "Selection")]
    pub(crate) policy: Policy,

    /// Whether MIG devices may be chosen: `auto` (a request for one device considers whole GPUs
    /// and MIG devices alike; one that may take more, whole GPUs only), `only`, `never`.
    #[arg(long, hide_short_help = true, value_enum, value_name = "WHEN", default_value_t = MigUse::Auto, help_heading = "Selection")]
    pub(crate) mig: MigUse,

    /// For more than one GPU, take only GPUs of one model (same name and memory size).
    ///
    /// Without it, sets of one model are preferred; with it, a request no model can meet is
    /// refused with that reason.
    #[arg(long, hide_short_help = true, help_heading = "Selection")]
    pub(crate) same_model: bool,

    /// How the links between the chosen GPUs count: `prefer` (the default: the best worst link
    /// among the sets that qualify), `ignore`, or a level every pair must have: `nvlink`,
    /// `xgmi` (AMD's Infinity Fabric), `switch` (one PCIe switch or better), `node` (one NUMA node
    /// or better). With --list, shows the link matrix.
    #[arg(long, hide_short_help = true, value_enum, value_name = "WHEN", num_args = 0..=1, default_missing_value = "prefer", help_heading = "Selection")]
    pub(crate) topology: Option<TopologyUse>,

    /// How GPU health counts: `normal` (unhealthy GPUs are never chosen, degraded ones only
    /// after every healthy one, unknown ones after those, with a warning), `strict` (degraded
    /// and unknown ones are not chosen either), `ignore` (any GPU, with a warning for each sick
    /// one chosen). Unknown: a health query failed otherwise than as not supported.
    ///
    /// Unhealthy: volatile uncorrectable ECC errors, a failed row remapping, a lost GPU, a GPU
    /// of an NVLink fabric that is not registered, failed, or reports a route unhealthy or in
    /// recovery, an access-timeout recovery or an incorrect configuration. Degraded: row
    /// remapping or retired pages pending, hardware slowdown (HW slowdown, HW thermal, power
    /// brake), a PCIe link narrower than its maximum while the GPU is busy, degraded fabric
    /// bandwidth. A feature the GPU does not have (no fabric, no ECC, a width of 0) is no fault.
    #[arg(long, hide_short_help = true, value_enum, value_name = "MODE", default_value_t = HealthUse::Normal, help_heading = "Selection")]
    pub(crate) health: HealthUse,

    /// Join your own MPS server on the chosen GPU (gpurun never starts one).
    ///
    /// Only GPUs where an MPS server of your user runs qualify (start it with
    /// nvidia-cuda-mps-control -d); CUDA_VISIBLE_DEVICES names them by UUID (the server numbers
    /// devices its own way), and CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY are passed
    /// on (yours, else /tmp/nvidia-mps and /var/log/nvidia-mps). Without --mps, a GPU running
    /// another user's MPS server is not chosen: a context of yours there would wait for that
    /// user's clients.
    #[arg(long, hide_short_help = true, help_heading = "MPS")]
    pub(crate) mps: bool,

    /// With --mps: use at most P percent of each GPU's threads
    /// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
    #[arg(long, hide_short_help = true, value_name = "P", value_parser = size::parse_thread_percent, requires = "mps", help_heading = "MPS")]
    pub(crate) mps_threads: Option<u32>,

    /// With --mps: pin at most SIZE of memory on each GPU (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT),
    /// and reserve it in the lease as --min-free SIZE would. 0 is refused (no memory at all);
    /// no limit is no --mps-mem.
    #[arg(long, hide_short_help = true, value_name = "SIZE", value_parser = size::parse_pinned, allow_negative_numbers = true, requires = "mps", help_heading = "MPS")]
    pub(crate) mps_mem: Option<u64>,

    /// When too few GPUs qualify: `best` takes the best-ranked ones anyway (relaxing only
    /// --min-free, --max-util and --exclusive), `cpu` runs the command with no GPU visible,
    /// also on a machine without NVML (no library, no driver, no access: a laptop, a CI box)
    /// and when NVML hangs, with a warning. Without it gpurun exits 75 (125 without NVML).
    #[arg(long, hide_short_help = true, value_enum, value_name = "MODE", help_heading = "Selection")]
    pub(crate) fallback: Option<Fallback>,

    /// If too few GPUs qualify, wait (forever, or --wait=10m).
    ///
    /// Waits until enough qualify, forever or at most DURATION (attached with =), first come,
    /// first served among waiters, then exits 75 if the time is up.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, require_equals = true, default_missing_value = "forever", value_parser = parse_wait, help_heading = "Selection")]
    pub(crate) wait: Option<WaitLimit>,

    /// One GPU set for the node's ranks, each rank on its own GPUs (under torchrun, mpirun,
    /// srun).
    ///
    /// --gpus N is per rank. The first rank of the job to arrive chooses LOCAL_WORLD_SIZE x N
    /// GPUs by the usual rules; every rank reserves its own. `all` (the default): every rank's
    /// CUDA_VISIBLE_DEVICES lists the whole set, its own at position LOCAL_RANK (so cuda:LOCAL_RANK
    /// is right and CUDA IPC between ranks works); `own`: only its own GPUs (for programs that use
    /// cuda:0). GPURUN_GPUS names its own; --cpu-bind numa is the default. The group is one
    /// node's: its identity includes the node (SLURMD_NODENAME, Open MPI's local daemon,
    /// torchrun's GROUP_RANK, else the host name), so nodes that share a lock directory never
    /// meet, and each node's group is sized from that node's rank count.
    #[arg(long, hide_short_help = true, value_enum, value_name = "VIEW", num_args = 0..=1, require_equals = true, default_missing_value = "all", help_heading = "Distributed jobs")]
    pub(crate) per_rank: Option<RankView>,

    /// With --per-rank: how long a rank waits for the group's set to be chosen, and how long
    /// a rank's GPUs stay held for it before it arrives (default 60s; --wait lengthens the
    /// first).
    #[arg(long, hide_short_help = true, value_name = "DURATION", value_parser = duration::parse, allow_negative_numbers = true, help_heading = "Distributed jobs")]
    pub(crate) rank_timeout: Option<Duration>,

    /// With --per-rank: the job's name, the same for every rank of one launch, where the
    /// launcher gives none (plain LOCAL_RANK and LOCAL_WORLD_SIZE).
    #[arg(long, hide_short_help = true, value_name = "NAME", help_heading = "Distributed jobs")]
    pub(crate) group: Option<String>,

    /// Directory of the reservations shared by all gpurun launches on this machine
    /// (default: $GPURUN_LOCK_DIR, else /run/lock/gpurun; created with mode 1777). While the
    /// house rule max-gpus-per-user is set, only root may name another than the system's.
    #[arg(long, hide_short_help = true, value_name = "DIR", help_heading = "Reservations")]
    pub(crate) lock_dir: Option<PathBuf>,

    /// Take no reservation and ignore other launches' reservations (refused for users other
    /// than root while the house rule max-gpus-per-user is set).
    #[arg(long, hide_short_help = true, help_heading = "Reservations")]
    pub(crate) no_lock: bool,

    /// Write CUDA_VISIBLE_DEVICES as PCI-order indices (the default) or as GPU UUIDs; a MIG
    /// device is always written as its MIG- UUID, so an explicit `index` rules MIG devices out.
    #[arg(
        long,
        hide_short_help = true,
        value_enum,
        value_name = "FORM",
        help_heading = "Command environment"
    )]
    pub(crate) visible_as: Option<VisibleAs>,

    /// Which CPUs the command may run on: `none` (gpurun's own, as inherited; the default) or
    /// `numa` (the CPUs NVML reports as local to the chosen GPUs, within gpurun's own affinity,
    /// so a Slurm or cgroup cpuset is never widened; if none of them is left, a warning and
    /// gpurun's own; the default under --per-rank, for the rank's own GPUs).
    #[arg(
        long,
        hide_short_help = true,
        value_enum,
        value_name = "MODE",
        help_heading = "Command environment"
    )]
    pub(crate) cpu_bind: Option<CpuBind>,

    /// A container run (podman or docker run, podman/docker container run) gets the chosen GPUs
    /// as the runtime's own options, added right after the subcommand: `auto` (CDI devices
    /// --device nvidia.com/gpu=UUID for podman, and for docker whose daemon has CDI on; docker's
    /// --gpus "device=UUID,..." otherwise), `cdi`, `gpus` (docker), or `off` (the command is
    /// left alone). Also -e CUDA_DEVICE_ORDER=PCI_BUS_ID, the framework variables (unless the
    /// user's -e sets them), -e GPURUN_GPUS, GPURUN_GPU_UUIDS, and a --cidfile; never a host-index
    /// CUDA_VISIBLE_DEVICES (inside, the GPUs are numbered from 0). The user's own --gpus,
    /// --device nvidia.com/gpu=..., -e CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES,
    /// -d/--detach and create (the container would run after the reservation) are refused
    /// (125), and so is an option not in the client's own --help (podman 4.3/5, docker 24-28):
    /// gpurun never guesses where the image is. --privileged, a /dev mount and an --env-file
    /// naming CUDA_VISIBLE_DEVICES are warned about.
    #[arg(long, hide_short_help = true, value_enum, value_name = "MODE", default_value_t = ContainerUse::Auto, help_heading = "Command environment")]
    pub(crate) container: ContainerUse,

    /// Hand the choice to deepspeed or accelerate launch in their own flags: auto or off.
    ///
    /// deepspeed and accelerate launch set their ranks' CUDA_VISIBLE_DEVICES themselves, from
    /// their flags or config file. With auto, gpurun recognises them (also behind env, nice,
    /// uv run and python -m deepspeed.launcher.runner / accelerate.commands.launch) and hands
    /// its choice over: deepspeed gets --include localhost:IDS in place of --num_gpus N (N must
    /// equal the count chosen; without --gpus, gpurun chooses N); accelerate launch gets
    /// --gpu_ids IDS before its options, which beats its config file's gpu_ids. Refused (125)
    /// with the flag or file named: an --include or --gpu_ids naming other GPUs, more processes
    /// than GPUs (--num_gpus, --num_processes, the config file's num_processes), --exclude, a
    /// hostfile (-H, /job/hostfile), several nodes (--num_nodes, --num_machines, the config
    /// file's num_machines: use --per-rank under the launcher). --dry-run shows the rewritten
    /// command. off leaves the command alone; a wrong-gpu verdict then names the launcher's
    /// override.
    #[arg(long, hide_short_help = true, value_enum, value_name = "MODE", default_value_t = LauncherUse::Auto, help_heading = "Command environment")]
    pub(crate) launcher: LauncherUse,

    /// Do not set TF_FORCE_GPU_ALLOW_GROWTH=true and XLA_PYTHON_CLIENT_PREALLOCATE=false.
    #[arg(long, hide_short_help = true, help_heading = "Command environment")]
    pub(crate) no_framework_env: bool,

    /// Never forward these signals (comma-separated names or numbers), for launchers that
    /// already signal the whole process group, such as Slurm with proctrack/pgid.
    #[arg(long, hide_short_help = true, value_name = "SIG,...", value_parser = signal::parse_list, help_heading = "Supervision")]
    pub(crate) no_forward: Option<SignalList>,

    /// After a TERM, INT or HUP reaches the command, SIGKILL it if it is still running after
    /// DURATION (30, 1.5s, 500ms, 2m; 0: never, as timeout(1)'s -k 0).
    #[arg(long, hide_short_help = true, value_name = "DURATION", value_parser = duration::parse, allow_negative_numbers = true, help_heading = "Supervision")]
    pub(crate) kill_after: Option<Duration>,

    /// End the command after DURATION (30s, 90m, 2h; 0: no limit), as timeout(1) does: it and
    /// every process under it get --signal (TERM), then SIGKILL if it is still running
    /// --kill-after later; gpurun exits 124 (137 where that SIGKILL ended it), and the report
    /// and the history say time-limit.
    #[arg(long, hide_short_help = true, value_name = "DURATION", value_parser = duration::parse, conflicts_with = "exec", help_heading = "Supervision")]
    pub(crate) time_limit: Option<Duration>,

    /// The signal --time-limit sends (a name or a number; TERM when not given), as timeout(1)'s
    /// --signal.
    #[arg(long, hide_short_help = true, value_name = "SIG", value_parser = signal::parse, requires = "time_limit", help_heading = "Supervision")]
    pub(crate) signal: Option<i32>,

    /// Warn once on stderr when a chosen GPU has been held at 0% utilization (NVML's, anyone's
    /// work counts) for DURATION (30m by default; `off`), and keep an idle diagnosis with the
    /// minutes in the report and the history. The house rule idle-action may end such runs.
    #[arg(long, hide_short_help = true, value_name = "DURATION|off", default_value = "30m", value_parser = duration::parse_or_off, help_heading = "Supervision")]
    pub(crate) idle_warn: duration::OrOff,

    /// Signal the command gets if gpurun itself is killed (SIGKILL, OOM), or `none`.
    #[arg(long, hide_short_help = true, value_name = "SIG|none", default_value = "TERM", value_parser = signal::parse_death_signal, help_heading = "Supervision")]
    pub(crate) parent_death_signal: signal::DeathSignal,

    /// Leave processes the command left running when it exits (by default they get SIGTERM,
    /// then SIGKILL 3 seconds later, so no orphaned worker keeps holding GPU memory).
    #[arg(long, hide_short_help = true, help_heading = "Supervision")]
    pub(crate) keep_orphans: bool,

    /// Replace gpurun with the command (exec) once the GPUs are chosen: no supervision, no
    /// orphan cleanup, no parent-death signal.
    #[arg(long, hide_short_help = true, help_heading = "Supervision")]
    pub(crate) exec: bool,

    /// Run CMD with /bin/sh -c once the command has started (after any --wait).
    ///
    /// Its stdin holds {command, pid, requested, count, selected} as JSON, its environment
    /// GPURUN_GPUS and GPURUN_GPU_UUIDS. gpurun does not wait for it to start the command; it is
    /// killed after 30 s (with a warning), and ended with the command's leftovers if still
    /// running when the command ends. Not with --exec. Example: --on-start 'echo started |
    /// mail -s "job started" me'.
    #[arg(long, hide_short_help = true, value_name = "CMD", help_heading = "Supervision")]
    pub(crate) on_start: Option<String>,

    /// Run CMD with /bin/sh -c after the command ended.
    ///
    /// Its stdin holds the --report-json object, its environment GPURUN_GPUS, GPURUN_GPU_UUIDS,
    /// GPURUN_EXIT_STATUS (what gpurun exits with) and GPURUN_VERDICT. gpurun waits for it, at
    /// most 30 s (then kills it, with a warning); it never changes gpurun's exit status. Not
    /// with --exec.
    #[arg(long, hide_short_help = true, value_name = "CMD", help_heading = "Supervision")]
    pub(crate) on_exit: Option<String>,

    /// Check through NVML that the command's processes run on the selected GPUs: `warn` logs
    /// the verdict, `strict` also ends the command (TERM, KILL after 5 s or --kill-after) and
    /// exits 125 if one is on another GPU.
    #[arg(long, hide_short_help = true, value_enum, value_name = "MODE", default_value_t = VerifyMode::Warn, help_heading = "Verification")]
    pub(crate) verify: VerifyMode,

    /// How long to wait for the command's processes to appear on a GPU before the verdict
    /// (polling continues, slower, for the report).
    #[arg(long, hide_short_help = true, value_name = "DURATION", default_value = "120s", value_parser = duration::parse, allow_negative_numbers = true, help_heading = "Verification")]
    pub(crate) verify_timeout: Duration,

    /// At the end, write the receipt as Prometheus text to FILE (renamed into place whole), for
    /// node_exporter's textfile collector: dcgm-exporter's labels (gpu, UUID, modelName,
    /// Hostname, hpc_job) and names (gpurun_job_total_energy_consumption, _power_usage, _gpu_util).
    #[arg(
        long,
        hide_short_help = true,
        value_name = "FILE",
        conflicts_with = "exec",
        help_heading = "Verification"
    )]
    pub(crate) prom_file: Option<PathBuf>,

    /// While the command runs, add its job id (GPURUN_JOB_ID) to the file of each chosen GPU in
    /// DIR, named by its index, as dcgm-exporter's --hpc-job-mapping-dir reads them; removed at
    /// the end.
    #[arg(
        long,
        hide_short_help = true,
        value_name = "DIR",
        conflicts_with = "exec",
        help_heading = "Verification"
    )]
    pub(crate) job_map_dir: Option<PathBuf>,

    /// Print a summary on stderr when the command ends.
    ///
    /// GPUs (taken of requested), verdict, peak GPU memory of the command's processes per GPU,
    /// wall time, exit status.
    #[arg(long, conflicts_with = "exec", help_heading = "Verification")]
    pub(crate) report: bool,

    /// Keep no record of this run in the history (config: history = false).
    ///
    /// Every supervised run appends its report, start time, user, directory and request to
    /// $XDG_STATE_HOME/gpurun/history.jsonl (~/.local/state/gpurun/history.jsonl), which
    /// --history lists and --min-free auto reads.
    #[arg(long, hide_short_help = true, help_heading = "Verification")]
    pub(crate) no_history: bool,

    /// Write the summary as JSON to FILE (schema below); FILE is created before the command starts
    /// (a FIFO that no process reads is an error then, not a hang).
    #[arg(
        long,
        hide_short_help = true,
        value_name = "FILE",
        conflicts_with = "exec",
        help_heading = "Verification"
    )]
    pub(crate) report_json: Option<PathBuf>,

    /// Show the GPUs, and which qualify, then exit.
    ///
    /// Index, model, memory, utilization, temperature, processes and reservations and, with
    /// selection options, whether each GPU qualifies and why not.
    #[arg(long, help_heading = "Modes", conflicts_with_all = ["dry_run", "export", "doctor"])]
    pub(crate) list: bool,

    /// With --list: show it again every SECONDS (2 when not given) until Ctrl-C, in place on a
    /// terminal (as watch nvidia-smi); with --json, one JSON line per refresh.
    #[arg(long, hide_short_help = true, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2", require_equals = false, value_parser = duration::parse_positive, requires = "list", help_heading = "Modes")]
    pub(crate) watch: Option<Duration>,

    /// Show which GPUs would be chosen, then exit.
    ///
    /// Also the environment the command would get, and the command if one is given
    /// (gpurun --dry-run -- python train.py). Holds no reservation.
    #[arg(long, help_heading = "Modes", conflicts_with_all = ["export", "doctor"])]
    pub(crate) dry_run: bool,

    /// Print export lines for eval, then exit.
    ///
    /// `export VAR='value'` lines for eval "$(gpurun --export ...)". Holds no reservation: the
    /// GPUs are not protected against other launches.
    #[arg(long, help_heading = "Modes")]
    pub(crate) export: bool,

    /// Check what decides whether jobs land on the right GPU, then exit.
    ///
    /// NVML and driver, /dev/nvidia*, inherited variables, container and Slurm, the lock
    /// directory, the CUDA version of torch and tensorflow; exit 125 if NVML is unusable, else 0.
    #[arg(long, help_heading = "Modes", conflicts_with = "export")]
    pub(crate) doctor: bool,

    /// List recent runs from the history, then exit.
    ///
    /// Like sacct: start, wall time, GPUs, verdict, peak memory per GPU and exit of the last 20
    /// runs (--json: every run kept, one JSON array). A word after it keeps the runs whose
    /// command contains it: gpurun --history train.py.
    #[arg(long, help_heading = "Modes", conflicts_with_all = ["list", "dry_run", "export", "doctor"])]
    pub(crate) history: bool,

    /// With --list, --dry-run or --history: print JSON.
    ///
    /// One object instead of text (schema below).
    #[arg(long, help_heading = "Modes")]
    pub(crate) json: bool,

    /// Print a completion script for SHELL, then exit.
    ///
    /// bash: save as /usr/share/bash-completion/completions/gpurun (or
    /// ~/.local/share/bash-completion/completions/gpurun); zsh: _gpurun in a directory of
    /// $fpath; fish: ~/.config/fish/completions/gpurun.fish. `make install` puts all three in
    /// place. Takes no COMMAND and no other mode (--list, --dry-run, --export, --doctor,
    /// --history, --json): 125.
    #[arg(long, value_enum, value_name = "SHELL", help_heading = "Modes", conflicts_with_all = ["list", "dry_run", "export", "doctor", "history", "json"])]
    pub(crate) completions: Option<CompletionShell>,

    /// Write a Jupyter kernel spec NAME whose kernel runs under gpurun, then exit.
    ///
    /// Its argv is gpurun with the other options given here, then PYTHON -m ipykernel_launcher
    /// (PYTHON: the command after --, else python3 on PATH): the kernel holds its GPUs as long
    /// as it runs, an interrupt reaches it, a restart takes them again. In the user's Jupyter
    /// data directory (--user, the default) or under --prefix DIR; prints the kernel.json path.
    #[arg(long, hide_short_help = true, value_name = "NAME", help_heading = "Modes", conflicts_with_all = ["list", "dry_run", "export", "doctor", "history", "json", "completions", "exec"])]
    pub(crate) jupyter_kernel: Option<String>,

    /// With --jupyter-kernel: in the user's Jupyter data directory ($JUPYTER_DATA_DIR, else
    /// ~/.local/share/jupyter/kernels), as jupyter kernelspec install --user (the default).
    #[arg(
        long,
        hide_short_help = true,
        requires = "jupyter_kernel",
        conflicts_with = "prefix",
        help_heading = "Modes"
    )]
    pub(crate) user: bool,

    /// With --jupyter-kernel: under DIR/share/jupyter/kernels (a venv's or conda environment's
    /// prefix), as jupyter kernelspec install --prefix.
    #[arg(
        long,
        hide_short_help = true,
        value_name = "DIR",
        requires = "jupyter_kernel",
        help_heading = "Modes"
    )]
    pub(crate) prefix: Option<PathBuf>,

    /// Reserve GPUs for DURATION without a command, then exit; --release ends it sooner.
    ///
    /// A holder process (detached, no daemon) keeps the reservation until DURATION has passed
    /// (30m, 2h; within the house rule max-time-limit), shown in --list as gpurun --hold with its
    /// end; stdout gets the choice as JSON: holder_pid, until, gpus [{index, uuid, name}], env.
    #[arg(long, hide_short_help = true, value_name = "DURATION", value_parser = duration::parse_positive, help_heading = "Modes", conflicts_with_all = ["list", "dry_run", "export", "doctor", "history", "json", "completions", "jupyter_kernel", "exec", "release"])]
    pub(crate) hold: Option<Duration>,

    /// With --hold: end the hold as soon as process PID has ended, or at once if it is not
    /// running (gpurun.reserve() passes its own Python process).
    #[arg(long, hide_short_help = true, value_name = "PID", requires = "hold", help_heading = "Modes")]
    pub(crate) hold_for: Option<u32>,

    /// End your own --hold reservations now, then exit.
    #[arg(long, hide_short_help = true, help_heading = "Modes", conflicts_with_all = ["list", "dry_run", "export", "doctor", "history", "json", "completions", "jupyter_kernel", "exec"])]
    pub(crate) release: bool,

    /// Read no configuration file (the GPURUN_* variables still apply).
    #[arg(long, hide_short_help = true, help_heading = "Configuration")]
    pub(crate) no_config: bool,

    /// Load NVML from PATH instead of libnvidia-ml.so.1 (unusual installs, WSL, the simulator).
    /// Default: $GPURUN_NVML_LIB, else libnvidia-ml.so.1 through the dynamic loader's path.
    #[arg(long, hide_short_help = true, value_name = "PATH", help_heading = "NVML")]
    pub(crate) nvml_lib: Option<PathBuf>,

    /// Whose GPUs: nvidia (NVML), amd (AMD SMI, ROCm 7.0 and later: AMD Instinct), or auto:
    /// NVML where it loads and lists a GPU, else AMD SMI where it does. A run never mixes the two.
    #[arg(
        long,
        value_enum,
        hide_short_help = true,
        value_name = "VENDOR",
        default_value = "auto",
        help_heading = "NVML"
    )]
    pub(crate) vendor: crate::options::VendorChoice,

    /// Load AMD SMI from PATH instead of libamd_smi.so (the simulator, unusual installs).
    /// Default: $GPURUN_AMD_SMI_LIB, else libamd_smi.so through the dynamic loader's path, then
    /// /opt/rocm/lib/libamd_smi.so.
    #[arg(long, hide_short_help = true, value_name = "PATH", help_heading = "NVML")]
    pub(crate) amd_smi_lib: Option<PathBuf>,

    /// Give up when loading NVML, nvmlInit or the probe takes longer than DURATION (a GPU off
    /// the bus or a wedged driver can hang NVML): one line naming the call, exit 125, or no GPU
    /// with --fallback cpu; with --wait, keep waiting until its time is up.
    #[arg(long, hide_short_help = true, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_positive, allow_negative_numbers = true, help_heading = "NVML")]
    pub(crate) nvml_timeout: Duration,

    /// More log detail on stderr: -v for debug, -vv for trace.
    ///
    /// Debug: where each setting came from, why each GPU was passed over. Trace: each NVML call
    /// with its answer and time, each lease and ticket read, each wake-up of a waiter.
    #[arg(short, long, action = ArgAction::Count, help_heading = "Logging")]
    pub(crate) verbose: u8,

    /// Log only errors (wins over -v).
    #[arg(short, long, help_heading = "Logging")]
    pub(crate) quiet: bool,

    /// How log lines look on stderr: `text` (gpurun: warning: ...) or `json` (one object per
    /// line: time, level, message; level is error, warn, info, debug or trace, the words
    /// GPURUN_LOG takes; the --report summary adds `report`), usage and configuration errors
    /// included. Never coloured.
    #[arg(long, hide_short_help = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub(crate) log_format: LogFormat,

    /// The command to run, and its arguments.
    #[arg(value_name = "COMMAND", trailing_var_arg = true, allow_hyphen_values = false, value_hint = clap::ValueHint::CommandWithArguments)]
    pub(crate) command: Vec<OsString>,

    /// `--gpus` was given (on the command line, in a file or a variable), not its default.
    #[arg(skip)]
    pub(crate) gpus_given: bool,
}

/// `--wait`: how long; `None` is forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitLimit(pub Option<Duration>);

fn parse_wait(text: &str) -> Result<WaitLimit, String> {
    if text == "forever" {
        return Ok(WaitLimit(None));
    }
    duration::parse(text).map(|limit| WaitLimit(Some(limit)))
}

/// The clap definition, for `--help` and the man page.
pub fn command() -> clap::Command {
    parsing_command().after_long_help(crate::cli::reference::reference_text())
}

/// The definition without `--help`'s reference sections, which only `--help` shows: 35 KB of
/// text, a tenth of a millisecond of every launch to format.
pub(crate) fn parsing_command() -> clap::Command {
    // A later occurrence of an option overrides an earlier one: configuration files and
    // GPURUN_* variables are placed before the user's own options (see settings.rs).
    <Cli as clap::CommandFactory>::command().args_override_self(true)
}
