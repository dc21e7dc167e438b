//! The reference sections `--help` shows after the options, and the man page's (EXAMPLES,
//! EXIT STATUS, ENVIRONMENT, FILES, JSON OUTPUT and the rest): terms and their meanings, kept
//! beside the clap definition (args.rs) but not in it, so that each stays readable.

/// Reference sections after the options, shared by `--help` and the man page:
/// (heading, [(term, meaning)]). Terms are shown literally; keep lines short for both.
pub const REFERENCE: &[(&str, &[(&str, &str)])] = &[
    (
        "Examples",
        &[
            ("gpurun --list", "show the GPUs, their memory, load and processes"),
            ("gpurun --doctor", "check the driver, device nodes, inherited variables, lock directory and frameworks"),
            ("gpurun --list --min-free 20G", "the same, saying which GPUs have 20 GiB free and why the others do not"),
            ("gpurun --gpus 2 --min-free 8G -- python train.py", "two GPUs with 8 GiB free each"),
            ("gpurun --exclusive --model A100 -- ./job", "an A100 with no other process on it"),
            ("gpurun --dry-run --gpus 2 --policy pack", "which two GPUs would be chosen, and the environment"),
            ("vars=$(gpurun --export --min-free 50%) && eval \"$vars\"", "set CUDA_VISIBLE_DEVICES in this shell (no reservation); checked: eval \"$(gpurun --export)\" would go on with no GPU chosen when gpurun fails"),
        ],
    ),
    (
        "Selection",
        &[
            ("candidates", "every GPU, or only those of an inherited CUDA_VISIBLE_DEVICES (never widened)"),
            (
                "filters",
                "a GPU that NVML cannot read is never chosen; a value NVML cannot give fails every filter that \
                 needs it; GPUs in the prohibited compute mode are never chosen",
            ),
            ("most-free", "free memory, most first; then utilization, lowest first; then index"),
            ("least-util", "utilization, lowest first; then free memory, most first"),
            ("balanced", "0.7 x free GiB + 0.3 x (100 - utilization %), highest first"),
            ("pack", "free memory, least first among the GPUs that qualify: keeps big cards whole"),
            ("index, random", "lowest index first; any qualifying GPU"),
            ("busy", "a GPU at 50% utilization or more (or whose utilization NVML cannot give) is busy: it comes after every GPU that is not, whatever the policy, and one model or a better link never brings a busy GPU into a set while a qualifying GPU that is not busy is left out (a colleague's job costs a data-parallel job far more than a PCIe hop, and slows the colleague); a lightly used NVLink pair still beats an idle PCIe pair; --max-util 49 leaves busy GPUs out altogether"),
            ("health", "each GPU is ok, degraded, unknown (a health query failed otherwise than as not supported: taken after every healthy and degraded GPU, refused by --health strict) or unhealthy, from NVML: unhealthy (volatile uncorrectable ECC errors, a failed row remapping, a lost GPU, on a GPU that has an NVLink fabric a registration not completed or failed, a route unhealthy or in recovery, access-timeout recovery, an incorrect fabric configuration) is never chosen; degraded (row remapping or retired pages pending, HW slowdown, HW thermal slowdown or power brake, a PCIe link narrower than its maximum while the GPU is busy, degraded fabric bandwidth) only after every healthy GPU, with a warning; --health strict refuses degraded GPUs too, --health ignore takes any GPU and warns for each sick one; --fallback best never relaxes health; a refusal that only sick GPUs could have met says so; GPUs the driver excluded are listed; not supported is never a fault (no fabric, no ECC, no row remapping, a link width of 0, the GPU-idle clock event, a call the driver lacks); --doctor says what to do for each, and advises a reset, reboot or RMA only for a fault a counter or a state reports"),
            ("Xid", "while the command runs, gpurun asks NVML for critical Xid errors on the chosen GPUs at each verification poll (and once more at the end): each is logged when seen (Xid 79 on GPU 3: the GPU has fallen off the bus; the hardware or driver, not the application), goes into the report, its JSON (diagnosis kind xid, with the code) and the history, and a command that then fails is said to have failed after it"),
            ("passed over", "--dry-run says, for each GPU that qualified and was not chosen, why: busy: 60% utilization, 2 processes of bob; the pair 0-4 is one model; an NVLink pair 6-7 links better; ranked after 0 and 4 by most-free (-v on a launch logs the same)"),
            ("MPS", "a GPU runs MPS when its compute list holds nvidia-cuda-mps-server or its MPS list holds clients; --list shows the clients, marked MPS; a GPU whose MPS server is another user's is not chosen (a context of yours there waits for that user's clients), naming the user; your own server's GPU is chosen as a shared one; --mps joins your server (see MPS below); a command that runs as an MPS client is verified as one, with its memory, and the report names the other clients that share the server's fault domain"),
            ("fabric", "on NVLink fabric systems (HGX, GB200/GB300 NVL) a GPU whose fabric registration is not started, in progress or failed, or whose health mask says route unhealthy, route or access-timeout recovery in progress, or an incorrect configuration, is unhealthy; degraded bandwidth, degraded; a GPU without a fabric (a standalone or PCIe card, a VM, an older driver: the call not supported, or answering state not-supported) is not at fault and shows fabric null; a set prefers GPUs of one fabric clique"),
            ("confidential computing", "where it is on and the GPUs are not ready to accept work, no GPU is chosen, with that reason (exit 75; --wait waits for them)"),
            ("ties", "break by index: the same probe always gives the same choice (except random)"),
            ("order", "CUDA_VISIBLE_DEVICES lists the chosen GPUs best first: cuda:0 is the best"),
            ("MIG", "a MIG device is a device of its own (its UUID, memory and processes), listed under its GPU as MIG P:S (slot S of GPU P); a GPU in MIG mode is not one; one process can use one MIG device, so only requests for one device consider MIG devices (--mig auto, the default), beside whole GPUs; --mig only: MIG devices only; --mig never: whole GPUs only; --model matches the GPU's model or the profile (3g.40gb); --max-util cannot be checked on MIG (said so); --devices/--exclude take MIG- UUIDs and prefixes; one lease per MIG device"),
            ("several GPUs", "a request that may take more than one GPU takes, in this order: as few busy GPUs as the qualifying ones allow, then GPUs of one model (same name and memory size; --same-model requires it), the best worst link between any two (NVLink, one board, one PCIe switch, several switches, the host bridge, one NUMA node, across sockets; --topology nvlink|switch|node requires at least that level, --topology ignore leaves links out), then the policy's order; --list --topology shows the links"),
            ("how many", "--gpus N takes N; --gpus MIN-MAX as many as qualify, at least MIN and at most MAX; --gpus all every GPU that qualifies, at least one; the JSON and the report say how many were taken"),
            ("too few", "exit 75 with every GPU and the reason it was turned away, unless --fallback"),
            (
                "never",
                "a request no state of the machine can meet (more GPUs than exist or than the inherited set allows, \
                 a size above every card's total, a model or device set too small) is refused at once: one line \
                 saying why, exit 125, --wait or not (--fallback cpu still runs the command without a GPU)",
            ),
            (
                "inherited",
                "CUDA_VISIBLE_DEVICES entries are read as CUDA reads them (indices in PCI order, GPU- UUIDs and \
                 unique prefixes, MIG- UUIDs; the list ends at the first invalid entry; empty means no GPU); \
                 of several MIG- entries (Slurm MIG GRES, the Kubernetes device plugin) gpurun chooses one, \
                 where CUDA would take the first. Indices without \
                 CUDA_DEVICE_ORDER=PCI_BUS_ID on a machine of mixed models are ambiguous: gpurun warns. \
                 SLURM_STEP_GPUS/SLURM_JOB_GPUS are used only when CUDA_VISIBLE_DEVICES is unset",
            ),
        ],
    ),
    (
        "Sizes",
        &[
            ("K, M, G, T, KiB..TiB", "binary: 8G = 8GiB = 8192M = 8 x 1024^3 bytes"),
            ("KB, MB, GB, TB", "decimal: 16GB = 16 x 1000^3 bytes, shown as read (16 GB = 14.90 GiB) by --dry-run, -v, the report and every refusal"),
            ("B", "bytes: 512B; a bare number other than 0 is an error (--min-free 8: did you mean 8G?)"),
            ("fractions", "0.5T, rounded down to whole bytes; units ignore case"),
            ("P%", "with --min-free: that share of each card's total memory"),
        ],
    ),
    (
        "Reservations",
        &[
            ("lock directory", "--lock-dir, else $GPURUN_LOCK_DIR, else /run/lock/gpurun; created mode 1777 when missing, an existing one is never changed; must be a directory owned by root or you, sticky if others may write, and made for reservations (mode 1777, or holding only gpurun's entries): else exit 125"),
            ("directory lock", "launches select and reserve under an flock on the directory itself; --list, --dry-run, --export and --doctor read without it; a launch that waits for it says who holds it"),
            ("leases", "one file per chosen GPU, flock-ed for the command's life: a dead gpurun frees its GPUs at once; --min-free memory counts as far as the holder's processes do not yet use it in NVML; a held lease that cannot be read counts as an exclusive reservation of its GPU"),
            ("--exclusive", "also avoids GPUs another launch reserved; an exclusive reservation keeps everyone off"),
            ("--wait", "first come, first served: a waiter holds a ticket naming the GPUs it could use, and holds back only those; a new launch queues behind waiters for the same GPUs; 75 when --wait=DURATION is up"),
            ("waking", "a waiter sleeps on its own FIFO in the lock directory: a lease's end wakes the first waiter that could use that GPU, a waiter leaving wakes the next; only a head (nobody ahead for its GPUs) looks at NVML by itself, every 2 s, for GPUs freed outside gpurun"),
            ("--exec", "the command inherits the locked lease: the reservation lasts as long as it runs"),
            ("what others see", "a lease file is world-readable and names the command by its program alone (python); its owner and root see the whole command line in --list, read from /proc, so arguments such as --api-key=... are never published"),
        ],
    ),
    (
        "Distributed jobs",
        &[
            ("torchrun --nproc-per-node 4 --no-python gpurun --per-rank -- python train.py", "each rank on its own GPU of one set; also mpirun -np 4 gpurun --per-rank ..., srun --ntasks=4 --gpus=4 gpurun --per-rank ..."),
            ("the rank", "LOCAL_RANK/LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_RANK/_SIZE (Open MPI), MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH), SLURM_LOCALID/SLURM_STEP_TASKS_PER_NODE (srun), innermost first; none: 125"),
            ("the job", "TORCHELASTIC_RUN_ID with MASTER_ADDR, MASTER_PORT and the restart count; PMIX_NAMESPACE; the ranks' common parent (MPICH's hydra_pmi_proxy); SLURM_JOB_ID.SLURM_STEP_ID; --group NAME where none is given"),
            ("the set", "the first rank to arrive chooses LOCAL_WORLD_SIZE x N GPUs by the usual rules and records them in the lock directory in PCI order; rank r takes the r-th N and their lease; the others count as reserved for their ranks until --rank-timeout after the choice"),
            ("what a rank gets", "the whole set in CUDA_VISIBLE_DEVICES, its own at position LOCAL_RANK (x N), or only its own with --per-rank=own; GPURUN_GPUS its own; --cpu-bind numa for its own GPU by default"),
            ("verification", "per rank: a process on another rank's GPU is wrong-gpu, naming both ranks and the likely cause (torch.cuda.set_device(LOCAL_RANK) missing); the report and history carry the rank and the group"),
            ("failures", "a rank waits at most --rank-timeout (or --wait) for the set, then 75; the chooser's failure reaches every rank; the record lives while a rank holds it (a shared flock), the last removes it; --no-lock is refused"),
        ],
    ),
    (
        "Supervision",
        &[
            ("parent", "gpurun stays the command's parent, in the same process group (never setsid or tcsetpgrp)"),
            ("exit status", "the command's; if a signal killed it, gpurun dies by the same signal (its own core dump disabled), so a shell sees 128+N"),
            ("forwarding", "every catchable signal another process sends gpurun reaches the command once, ABRT, SEGV and the other fault signals included; signals sent by the command or any process of its tree are not sent back"),
            ("before the start", "a signal that would end or stop a process, received before the command started, ends (or stops) the launch, and one received in the moment of the start reaches the command as it starts"),
            ("terminal keys", "Ctrl-C, Ctrl-\\, Ctrl-Z, hangup and resize reach the whole foreground group from the kernel, so gpurun does not forward them again"),
            ("ignored signals", "a signal ignored when gpurun starts (nohup, background jobs) stays ignored, in gpurun and in the command; the command starts with the caller's signal mask"),
            ("job control", "when the command stops (Ctrl-Z, SIGSTOP), gpurun stops too; when gpurun is continued, so is the command"),
            ("orphans", "processes the command leaves running get SIGTERM (and SIGCONT) when it exits, SIGKILL 3 seconds later, and gpurun reaps every one before it exits (--keep-orphans: left alone); only the command's descendants: children gpurun inherited from the process it replaced by exec are left alone, as timeout leaves them"),
            ("parent death", "if gpurun is killed, a small watcher process (gpurun-watcher) sends the command --parent-death-signal, once"),
            ("NVML", "NVML is called on a thread of its own: signals, reaping and exit never wait for it; a call that hangs makes verification unverifiable"),
            ("descriptors", "a closed stdin, stdout or stderr is filled with /dev/null for gpurun itself (close-on-exec): the command gets the caller's descriptors as they were"),
            ("directory", "gpurun stays in the caller's working directory, like env and timeout"),
            ("PID 1", "where a default action cannot kill gpurun, it exits 128+N instead"),
        ],
    ),
    (
        "Verification",
        &[
            ("polling", "NVML is asked for the processes of gpurun's whole tree (the command, its children, workers, orphans) every 0.1 s at first, backing off to 2 s, then every 5 s for the report"),
            ("verified", "every process of the tree seen on a GPU is on a selected GPU, and every selected GPU is used"),
            ("wrong-gpu", "a process is on a GPU that was not selected: the log names the PID, the GPU and the likely cause"),
            ("partial", "more than one GPU selected, fewer used"),
            ("not-observed", "no process of the tree appeared on a GPU before the command exited or --verify-timeout"),
            ("unverifiable", "NVML cannot list processes, its PIDs belong to another PID namespace (a container), or a chosen GPU fell off the bus during the run: the log says which"),
            ("--exec", "no verification: gpurun is gone"),
        ],
    ),
    (
        "Shared servers",
        &[
            ("who holds what", "--list marks each GPU process [gpurun PID N] (it belongs to that live reservation: the gpurun or one of its descendants) or [not via gpurun] (started by hand or by another tool); JSON: processes[].reservation, and each reservation's processes"),
            ("who waits", "--list shows the --wait queue in order: user, PID, how long, the request as typed, and why it cannot start now, in the words of the exit-75 table; JSON: waiters[] (position, pid, uid, user, request, needs, waited_seconds, reason); a waiter's own progress line says the same"),
            ("[limits]", "house rules, only in the system file /etc/gpurun/config.toml: max-gpus-per-user (live reservations of one user), max-wait (a cap on --wait), max-time-limit (a cap on --time-limit, and the limit of a run that gives none; 0: none), default-min-free (a floor under --min-free, --fallback best included), idle-limit with idle-action = warn|end (a GPU held at 0% utilization that long is warned of, or its run ended with 124; --verify off and --exec are refused under end), kill-after (a rule that ends a run sends SIGTERM, then SIGKILL this much later, 10 s by default, whatever --signal and --kill-after say); --dry-run and --export answer as the launch would; user files, variables, the command line and --no-config cannot loosen them; --list and --doctor show them"),
            ("lock rules", "while max-gpus-per-user is set, --no-lock and a --lock-dir other than the system's (the system file's lock-dir, else /run/lock/gpurun) are refused for users other than root (125, naming the rule), --no-config included: leases elsewhere cannot be counted"),
            ("over a rule", "a launch over max-gpus-per-user waits with --wait, else exits 75 naming the rule and its file; a request alone over it exits 125 at once; a range takes what the rule leaves; --dry-run and --export answer as the launch would, rules and exit status included"),
            ("GPURUN_SYSTEM_CONFIG", "another system file (tests, unusual installs), honoured only when root runs gpurun; for anyone else it is ignored (-v says so) and /etc/gpurun/config.toml is read, so a user cannot swap the rules out"),
            ("hooks", "--on-start CMD and --on-exit CMD run through /bin/sh -c, in gpurun's process group, with the caller's signal mask, JSON on stdin (a socket, written without blocking: a hook that does not read never holds gpurun, and its input is given up at its deadline), their stdout on stderr, and GPURUN_GPUS, GPURUN_GPU_UUIDS (and, at exit, GPURUN_EXIT_STATUS, GPURUN_VERDICT) in the environment; killed with what they started after 30 s (a warning); an --on-start hook still running when the command ends is ended with the command's leftovers, never waited for; a failing hook is a warning and never changes gpurun's exit status; not with --exec (a warning)"),
        ],
    ),
    (
        "History",
        &[
            ("the file", "every supervised run (not --exec, not --no-history or history = false) appends one line to $XDG_STATE_HOME/gpurun/history.jsonl (~/.local/state/gpurun/history.jsonl, mode 600; a relative XDG_STATE_HOME is ignored): the --report-json object plus started (Unix time), user, directory and request (gpurun's own options); one write under an flock, so concurrent runs never interleave; past 8 MiB the newest half is kept, always with this run's record; a history that cannot be written never fails the job (-v says why)"),
            ("untrusted", "the gpurun folder and the file must be yours, neither a symlink nor writable by others, the file a regular one with one name; else the run is not recorded (a warning) and nothing is read: a planted history (sudo -E keeps a HOME) cannot make gpurun write elsewhere; the trim writes a new file created exclusively and renames it"),
            ("reading", "only the newest 8 MiB are read, line by line as bytes: a bad or torn line costs that line, a FIFO or device is never opened for reading, a torn last line is closed before the next record"),
            ("--history [PATTERN]", "the last 20 runs (start in UTC, wall time, GPUs, verdict, peak per GPU, exit, command), only those whose command contains PATTERN; --json: every run kept, as one array"),
            ("--min-free auto", "the largest per-GPU peak of the last 5 runs of the same words in the same directory (failing that, of the same program and script there), plus 10%, but never more than the largest GPU the request allows can have free when idle (its total less the driver's reservation and 0.5%; said); with no such run, no memory filter (auto:SIZE: SIZE); --dry-run -- COMMAND sizes for COMMAND; the log, --dry-run and the report say where the figure came from"),
            ("the same program", "the script or module, looked for through env VAR=.. and its options, nice, ionice, taskset, numactl, uv run, poetry run, pipenv run, accelerate launch, torchrun, deepspeed and python -m: nice python train.py is python train.py, env A=1 python eval.py is not"),
            ("near-oom", "diagnosis: the command's peak on a GPU came within 5% of the memory free there at launch (and whether it failed); the advice never asks for more than a card of the machine can have free"),
            ("mps-shared", "diagnosis: the command ran as an MPS client beside other clients of the same server, named with their users: a fatal fault in any of them ends all"),
            ("idle-gpu", "diagnosis: of several selected GPUs, one the command never used while it used another"),
            ("cpu-fallback", "diagnosis: the command ran past --verify-timeout and never used a GPU"),
            ("over-reserved", "diagnosis: --min-free reserved ten times the command's peak there or more; says what to ask for next time (not --exclusive, which asks for the card unshared)"),
            ("diagnoses", "warnings on stderr after the command ends, and diagnosis: [{kind, gpu, detail}] in the report and the history; none without verification"),
        ],
    ),
    (
        "Shebang",
        &[
            ("#!/usr/bin/env -S gpurun --gpus 1 -- python3", "works as is: env splits the line"),
            ("#!/usr/local/bin/gpurun --gpus 1 -- python3", "Linux passes '--gpus 1 -- python3' as one argument; gpurun splits a first argument that starts with - and holds blanks exactly as GNU env -S does: blanks and \\_ separate words, 'single' quotes keep all but \\\\ and \\', \"double\" quotes decode the escapes and \\_ as a space, ${NAME} is expanded, # at a word's start and \\c end the line; what env refuses is refused (125, env's reason); only when the next argument is a script whose #! line names gpurun"),
        ],
    ),
    (
        "Configuration",
        &[
            ("precedence", "command line > GPURUN_* variables > user file > system file > built-in"),
            ("user file", "$GPURUN_CONFIG, else $XDG_CONFIG_HOME/gpurun/config.toml (~/.config/gpurun/config.toml)"),
            ("system file", "/etc/gpurun/config.toml (or $GPURUN_SYSTEM_CONFIG when root runs gpurun); it alone may hold [limits], the house rules"),
            ("keys", "the long option names: policy = \"pack\", min-free = \"8G\", exclusive = true, wait = \"2h\""),
            ("variables", "GPURUN_ and the key in capitals: GPURUN_MIN_FREE=8G, GPURUN_EXCLUSIVE=1; not for --gpus (GPURUN_GPUS is what gpurun tells the command)"),
            ("errors", "an unknown key or a bad value is an error naming the file, line and key (or the variable), exit 125; a file must be a regular file of at most 1 MiB"),
            ("values", "are never read as options: model = \"-SXM4\" is a model; -v logs which setting came from where"),
        ],
    ),
    (
        "Environment",
        &[
            ("CUDA_VISIBLE_DEVICES", "read: the GPUs (or MIG- devices, as Slurm and Kubernetes hand them out) gpurun may choose from, never widened (see Selection); set for the command: the chosen GPUs, best first, as PCI-order indices or UUIDs (--visible-as); a MIG device always as its MIG- UUID (CUDA takes no other form); empty with --gpus 0"),
            ("CUDA_DEVICE_ORDER", "read: whether inherited indices are in PCI order; set for the command: PCI_BUS_ID, so that CUDA numbers GPUs as nvidia-smi does"),
            ("GPURUN_GPUS, GPURUN_GPU_UUIDS", "set for the command: the chosen NVML indices and UUIDs (for a MIG device: its GPU's index, and its MIG- UUID); GPURUN_JOB_ID the job id (SLURM_JOB_ID, else the --per-rank group, else an enclosing gpurun's, else gpurun-<start>-<PID>), for the hooks too; never read as settings (an inherited pair that matches CUDA_VISIBLE_DEVICES marks an earlier eval \"$(gpurun --export)\", and a refusal says how to undo it)"),
            ("TF_FORCE_GPU_ALLOW_GROWTH, XLA_PYTHON_CLIENT_PREALLOCATE", "set for the command: true and false, unless already set (the user's value wins) or --no-framework-env"),
            ("GPU_DEVICE_ORDINAL", "rewritten to match, if inherited"),
            ("ROCR_VISIBLE_DEVICES", "AMD GPUs (--vendor): read: the GPUs ROCr keeps, by index among those it can open or by GPU- UUID, never widened; set for the command: the chosen GPUs' ROCr UUIDs (ROCr indices with --visible-as index), best first"),
            ("HIP_VISIBLE_DEVICES", "AMD GPUs: read: HIP's choice among what ROCR_VISIBLE_DEVICES keeps (CUDA_VISIBLE_DEVICES where it is unset); if inherited, it, CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL are rewritten to 0,1,... over the chosen GPUs; never set otherwise, so HIP numbers them from 0; no CUDA_DEVICE_ORDER"),
            ("CPU affinity", "with --cpu-bind numa, the command runs on the CPUs NVML reports as local to its GPUs (their union), within gpurun's own affinity; --dry-run and the report show them (cpus)"),
            ("everything else", "passed to the command unchanged, byte for byte"),
            ("GPURUN_<OPTION>", "a setting: GPURUN_ and a long option name in capitals (GPURUN_MIN_FREE=8G); any other GPURUN_ variable is an error"),
            ("GPURUN_NVML_LIB", "the NVML library to load, as --nvml-lib (empty: unset)"),
            ("GPURUN_AMD_SMI_LIB, GPURUN_VENDOR", "the AMD SMI library to load, as --amd-smi-lib; whose GPUs, as --vendor"),
            ("GPURUN_LOCK_DIR", "the lock directory, when --lock-dir is not given"),
            ("GPURUN_CONFIG", "the user configuration file to read instead of ~/.config/gpurun/config.toml"),
            ("GPURUN_SYSTEM_CONFIG", "the system configuration file to read instead of /etc/gpurun/config.toml, for root only (see Shared servers)"),
            ("GPURUN_LOG", "log filter: a level (error, warn, info, debug, trace) or target=level directives, e.g. gpurun=debug; overrides -v and -q"),
            ("XDG_CONFIG_HOME", "where the user configuration file is (default ~/.config)"),
            ("XDG_STATE_HOME", "where the history is kept (default ~/.local/state; ignored unless absolute)"),
            ("SLURM_STEP_GPUS, SLURM_JOB_GPUS", "a hint when CUDA_VISIBLE_DEVICES is unset"),
            ("Slurm MPS", "SLURM_JOB_ID with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, no gres/gpu ids and CUDA_VISIBLE_DEVICES unset or 0 (--gres=mps:N): device 0 is the GPU of your MPS server, given to the command by UUID; none or several: 125"),
        ],
    ),
    (
        "Files",
        &[
            ("/etc/gpurun/config.toml", "the system configuration file"),
            ("~/.config/gpurun/config.toml", "the user configuration file ($XDG_CONFIG_HOME/gpurun, or $GPURUN_CONFIG)"),
            ("/run/lock/gpurun/", "the lock directory: UUID.PID.*.lease (one per reserved GPU), ticket.* and wake.* (a waiter's place in the queue and the FIFO it sleeps on); created mode 1777 (packaging/gpurun-tmpfiles.conf creates it at boot)"),
            ("~/.local/state/gpurun/history.jsonl", "the history of runs ($XDG_STATE_HOME/gpurun); see History"),
            ("/usr/share/doc/gpurun/config.toml", "an example configuration with every key, commented out"),
            ("/usr/share/doc/gpurun/doc/guide.md", "the user's guide: a quick start, then one page per task in guide/ (doc/guide.md and doc/guide/ in the source); design.md, performance.md and development.md beside it, README.md above"),
        ],
    ),
    ("Exit status", crate::exit_code::TABLE),
    (
        "Export and dry run",
        &[
            ("output", "export NAME='value' lines, single-quoted for eval; nothing on stdout when it fails"),
            ("in scripts", "vars=$(gpurun --export --gpus 2) || exit; eval \"$vars\""),
            ("no reservation", "--export and --dry-run respect live reservations but hold none: another launch may take the same GPUs"),
            ("a command", "gpurun --dry-run -- python train.py shows the command beside the choice; nothing runs"),
        ],
    ),
    (
        "JSON output",
        &[
            ("--list --json", "one object: vendor (nvidia or amd: whose library answered; also_amd_gpus: under --vendor auto, how many AMD GPUs are beside NVIDIA's), driver_version, cuda_driver_version (null on AMD), nvml_library (amd_smi_library on AMD), gpus, reservations, waiters, house_rules, excluded ([{pci_bus_id, uuid}]: GPUs the driver excluded), confidential_computing ({on, ready}, null where the driver has none), topology ({\"0-1\": \"nvlink\", ...}: the link of every pair: nvlink, xgmi, board, switch, switches, hostbridge, node, system), mps_control_daemon (null, or {pid, pipe_directory, server_running}: the MPS control daemon of yours or root's that --mps would join; a daemon starts its server with the first client)"),
            ("reservations[]", "index, uuid, pid, uid, user, reserved_bytes, exclusive, command, started (Unix time), age_seconds, processes (PIDs)"),
            (
                "gpus[]",
                "index, uuid, name, pci_bus_id, memory, utilization, temperature_c, power_watts, \
                 compute_mode, mig_enabled, mig_pending (the mode after the next reset), mig_devices, numa_node (the host NUMA node \
                 nvidia-smi topo -m shows: NVML's memory affinity, else the PCI device's numa_node in sysfs), \
                 gpu_numa_id (the node that is the GPU's own memory on coherent platforms such as Grace Hopper; \
                 null on PCIe hosts), cpus (its local CPUs, as 0-15,32-47: NVML's CPU affinity, else the \
                 node's), health ({state: ok|degraded|unknown|unhealthy, reasons: [..]}; a MIG device: its GPU's), \
                 processes, mps (null, or {server_pid, server_user, clients: [{pid, user, used_bytes}]}), \
                 fabric (null, or {state, clique_id, cluster_uuid, health: {state, reasons}}), held_outside_namespace_bytes (only in a PID namespace of its own: memory in use that no listed process accounts for), eligible, reasons, error; with --dry-run also passed_over (why a GPU that \
                 qualified was not chosen, else null); on AMD also rocr_uuid (ROCr's GPU- UUID), hip_id (HIP's and ROCr's number, amd-smi list's HIP_ID) and partition \
                 ({compute: SPX..CPX, memory: NPS1.., id})",
            ),
            (
                "mig_devices[]",
                "mig_index (slot), uuid (MIG-...), name, profile, gpu_instance_id, compute_instance_id, memory, \
                 compute_mode, processes, eligible, reasons, error",
            ),
            ("memory", "total_bytes, reserved_bytes, used_bytes, free_bytes: NVML's own numbers, free = total - reserved - used"),
            ("utilization", "gpu_percent, memory_percent"),
            ("processes[]", "pid, used_bytes, user, command (user and command from /proc where readable), reservation (the gpurun PID of the reservation it belongs to, or null)"),
            ("eligible, reasons", "whether the GPU qualifies for the request given, and every reason it does not"),
            ("error", "the first NVML query that failed; such a GPU is never chosen"),
            ("--report-json FILE", "command, requested, count, selected: [{index, uuid, name}], verification: {verdict, detail}, peak_memory_bytes: {UUID: n}, wall_seconds, exit: {code, signal, signal_name}, gpurun_exit_status, diagnosis: [{kind, gpu, detail}] (kind near-oom, idle-gpu, idle (with minutes: the longest stretch at 0% utilization), time-limit, memory-held (with pid and bytes: a process of the command NVML still lists once it and its leftovers ended), cpu-fallback, over-reserved, mps-shared, gpu-lost (a chosen GPU fell off the bus: code 79 from its Xid, null where its process list answered GPU_IS_LOST), or xid with its code; a flood's repeats are one xid entry without a code that counts them), cpus (--cpu-bind numa, else null), min_free (why) with --min-free auto, rank with --per-rank: {local_rank, local_size, launcher, group (the job), node, group_gpus}, and the receipt, by UUID of each chosen device: energy_joules: {UUID: J} (NVML's energy counter, end minus start; null where the board has none, or a MIG device), power_watts: {UUID: {mean, max, limit}} (the samples, each weighted by the time it stood for, and the enforced limit), utilization_percent: {UUID: {p50, p95, max, source}} (source samples: the driver's own utilization samples; looks: gpurun's polls, where the driver keeps none), throttled_seconds: {UUID: {reason: s}} (the driver's throttle counters, else the sampled clock event reasons; reasons sw_power_cap, hw_slowdown, sync_boost, sw_thermal, hw_thermal, hw_power_brake, display_clocks, board_limit, reliability; gpu_idle is not throttling; {} when none, null when unknown), intruders: [{pid, user, gpu_uuid, memory_bytes, first_seen_seconds}] (processes not the command's that appeared on its GPUs during the run; in a PID namespace of its own, memory held outside it is one with pid null and outside_namespace true; the first 32, with intruders_not_listed counting the rest); none of it with --verify off; job: {id, host, user, start, end} (the job id as GPURUN_JOB_ID, the times in RFC 3339, UTC)"),
            ("--dry-run --json", "the same object plus requested (what --gpus asked: \"2\", \"2-4\", \"all\"), count (how many were taken), command (the words given after --dry-run), min_free (with --min-free auto: the figure and why), cpus (with --cpu-bind numa), links (between the chosen GPUs: [\"6-7 nvlink\"]), mixed_models (where the chosen GPUs are of more than one model: which, else null), selected: [{index, uuid}] (a MIG device: its GPU's index, mig_index and its MIG- UUID) and env: {NAME: value}; count, selected and env are null on exit 75"),
            ("--history --json", "an array of history records: the --report-json object plus started, user, directory, request"),
            ("null", "a value NVML cannot give is null, never 0"),
        ],
    ),
];

/// The man page's SEE ALSO: (name, section).
pub const SEE_ALSO: &[(&str, &str)] =
    &[("nvidia-smi", "1"), ("env", "1"), ("timeout", "1"), ("numactl", "8"), ("srun", "1")];

/// `REFERENCE` as plain text for `--help`.
pub(crate) fn reference_text() -> String {
    let mut text = String::new();
    for (heading, entries) in REFERENCE {
        text.push_str(&format!("{heading}:\n"));
        for (term, meaning) in *entries {
            text.push_str(&format!("  {term}\n      {meaning}\n"));
        }
        text.push('\n');
    }
    text.trim_end().to_owned()
}
