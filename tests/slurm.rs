//! gpurun inside a real Slurm: Debian's slurmctld, slurmd and munge on private ports and
//! directories (tests/slurm/cluster.sh), with a GPU GRES backed by mknod-made device nodes that
//! match the simulator's scenario. Each test starts its own one-node cluster (about a second).
//! Where the machine cannot run the daemons (not root, no mknod) each test says why it skips.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{scenario_file, sim_cuda, wait_until, Sim, GPURUN};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(30);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/cluster.sh")
}

struct Cluster {
    sim: Sim,
    dir: PathBuf,
}

impl Cluster {
    /// A running cluster, or None (with the reason printed) where this machine cannot run one.
    /// `mode`: cluster.sh's `PGID` (proctrack/pgid) or `NODES2` (nodes n1 and n2 on this host).
    fn start(test: &str, mode: Option<&str>) -> Option<Cluster> {
        let sim = Sim::new(&scenario_file("slurm4.toml"));
        let dir = sim.dir.path().join("slurm");
        let mut command = Command::new(script());
        command.arg("start").arg(&dir);
        command.args(mode);
        let output = command.output().expect("run cluster.sh");
        let stdout = String::from_utf8_lossy(&output.stdout);
        match output.status.code() {
            Some(0) => Some(Cluster { sim, dir }),
            Some(3) => {
                common::skip(test, stdout.trim());
                None
            }
            _ => panic!(
                "the Slurm cluster did not start:\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    /// A Slurm client command (srun, sbatch, scancel...) in this cluster, with the simulated
    /// machine's environment, which Slurm passes on to the job.
    fn client(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        let gpurun_dir = Path::new(GPURUN).parent().unwrap();
        command
            .env("SLURM_CONF", self.dir.join("slurm.conf"))
            .env("NVML_SIM_SCENARIO", &self.sim.scenario)
            .env("GPURUN_NVML_LIB", self.sim.library())
            .env("GPURUN_LOCK_DIR", self.sim.lock_dir())
            // The jobs' history and configuration are the sandbox's, not the user's own.
            .env("XDG_STATE_HOME", self.sim.dir.path().join("state"))
            .env("XDG_CONFIG_HOME", self.sim.dir.path().join("config"))
            .env("GPURUN_SYSTEM_CONFIG", self.sim.system_file())
            .env("PATH", format!("{}:{}", gpurun_dir.display(), std::env::var("PATH").unwrap_or_default()))
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("CUDA_DEVICE_ORDER")
            .env_remove("GPURUN_LOG")
            .stdin(Stdio::null());
        command
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let output = self.client(program).args(args).output().expect("run a Slurm client");
        output
    }

    fn sbatch(&self, args: &[&str]) -> String {
        let output = self.run("sbatch", &[&["--parsable"], args].concat());
        assert!(output.status.success(), "sbatch failed: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().split(';').next().unwrap().to_owned()
    }

    fn job_field(&self, job: &str, field: &str) -> Option<String> {
        let output = self.run("scontrol", &["show", "job", job]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.split_whitespace().find_map(|pair| pair.strip_prefix(&format!("{field}=")).map(str::to_owned))
    }

    fn wait_state(&self, job: &str, states: &[&str]) -> String {
        let mut last = String::new();
        let reached = wait_until(LONG, || {
            last = self.job_field(job, "JobState").unwrap_or_default();
            states.contains(&last.as_str())
        });
        assert!(reached, "job {job} stayed {last}, wanted {states:?}");
        last
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.run("scancel", &["--user", "root"]);
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn reports(output: &Output) -> Vec<Value> {
    stdout(output).lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn landed(report: &Value) -> Vec<u64> {
    report["devices"].as_array().unwrap().iter().map(|d| d["nvml_index"].as_u64().unwrap()).collect()
}

#[test]
fn a_step_selects_only_inside_its_allocation() {
    let Some(cluster) = Cluster::start("a_step_selects_only_inside_its_allocation", None) else { return };
    // Another job holds GPUs 0 and 1, so the step gets 2 and 3 (global ids).
    let holder = cluster.sbatch(&["--gpus=2", "-o", "/dev/null", "--wrap", "sleep 120"]);
    cluster.wait_state(&holder, &["RUNNING"]);
    let sim_cuda = sim_cuda().display().to_string();

    let step = cluster.run("srun", &["--gpus=2", "gpurun", "--gpus", "1", "--", &sim_cuda, "--sleep", "0.3"]);
    assert!(step.status.success(), "{step:?}");
    let report = &reports(&step)[0];
    assert!([vec![2], vec![3]].contains(&landed(report)), "landed outside the allocation: {report}");
    assert!(String::from_utf8_lossy(&step.stderr).contains("verified:"), "{step:?}");

    let plan = cluster.run("srun", &["--gpus=2", "gpurun", "--gpus", "2", "--dry-run", "--json"]);
    let plan: Value = serde_json::from_str(&stdout(&plan)).unwrap();
    let mut selected: Vec<u64> =
        plan["selected"].as_array().unwrap().iter().map(|s| s["index"].as_u64().unwrap()).collect();
    selected.sort_unstable();
    assert_eq!(selected, vec![2, 3]);

    let widened = cluster.run("srun", &["--gpus=2", "gpurun", "--gpus", "3", "--", "true"]);
    assert_eq!(widened.status.code(), Some(125), "{widened:?}");
    assert!(
        String::from_utf8_lossy(&widened.stderr)
            .contains("--gpus 3: CUDA_VISIBLE_DEVICES=2,3 allows only 2 GPUs"),
        "{widened:?}"
    );

    // Under ConstrainDevices Slurm renumbers CUDA_VISIBLE_DEVICES to 0..n-1 and the job's
    // cgroup hides the other devices (NVML refuses their handles), while SLURM_STEP_GPUS keeps
    // the global ids. This machine cannot confine devices, so the step emulates it.
    let confined = cluster.file("confined.toml");
    let mut text = scenario_file("slurm4.toml");
    for index in 0..2 {
        let line = format!("uuid = \"GPU-51a0a000-0000-4000-8000-00000000000{index}\"");
        text = text.replace(&line, &format!("{line}\naccessible = false"));
    }
    std::fs::write(&confined, text).unwrap();
    let renumbered = cluster
        .client("srun")
        .env("NVML_SIM_SCENARIO", &confined)
        .args(["--gpus=2", "sh", "-c"])
        .arg(format!("CUDA_VISIBLE_DEVICES=0,1 exec gpurun --gpus 1 -- {sim_cuda} --sleep 0.3"))
        .output()
        .unwrap();
    assert!(renumbered.status.success(), "{renumbered:?}");
    let report = &reports(&renumbered)[0];
    assert!([vec![2], vec![3]].contains(&landed(report)), "{report}");
    let given = report["env"]["CUDA_VISIBLE_DEVICES"].as_str().unwrap();
    assert!(given == "0" || given == "1", "CUDA_VISIBLE_DEVICES={given} under a device cgroup");
}

#[test]
fn each_task_gets_its_own_card() {
    let Some(cluster) = Cluster::start("each_task_gets_its_own_card", None) else { return };
    let sim_cuda = sim_cuda().display().to_string();
    let step = cluster
        .run("srun", &["--ntasks=2", "--gpus-per-task=1", "gpurun", "-q", "--", &sim_cuda, "--sleep", "0.5"]);
    assert!(step.status.success(), "{step:?}");
    let reports = reports(&step);
    assert_eq!(reports.len(), 2, "{step:?}");
    let cards: Vec<Vec<u64>> = reports.iter().map(landed).collect();
    assert_eq!(cards[0].len(), 1);
    assert_eq!(cards[1].len(), 1);
    assert_ne!(cards[0], cards[1], "two tasks on one card");
}

#[test]
fn four_tasks_of_a_step_share_one_set_with_per_rank() {
    let Some(cluster) = Cluster::start("four_tasks_of_a_step_share_one_set_with_per_rank", None) else {
        return;
    };
    let sim_cuda = sim_cuda().display().to_string();
    // Every task sees the step's four GPUs; each uses cuda:SLURM_LOCALID, its own.
    let task = format!("exec gpurun --per-rank -- {sim_cuda} --device $SLURM_LOCALID --sleep 0.5");
    let step = cluster.run("srun", &["--ntasks=4", "--gpus=4", "sh", "-c", &task]);
    assert!(step.status.success(), "{step:?}");
    let reports = reports(&step);
    assert_eq!(reports.len(), 4, "{step:?}");
    let mut cards: Vec<u64> = reports.iter().flat_map(landed).collect();
    cards.sort_unstable();
    assert_eq!(cards, [0, 1, 2, 3], "one task per card: {step:?}");
    for report in &reports {
        assert_eq!(report["env"]["CUDA_VISIBLE_DEVICES"], "0,1,2,3", "{report}");
    }
    let stderr = String::from_utf8_lossy(&step.stderr);
    assert_eq!(stderr.matches("verified:").count(), 4, "{stderr}");
    assert!(!stderr.contains("wrong-gpu"), "{stderr}");
}

/// A batch job whose one step runs gpurun around the signal recorder; returns (job, log).
fn recorded_job(cluster: &Cluster, name: &str, sbatch_args: &[&str], gpurun_args: &str) -> (String, PathBuf) {
    let log = cluster.file(&format!("{name}.log"));
    let out = cluster.file(&format!("{name}.out"));
    let wrap = format!(
        "srun gpurun -q {gpurun_args} -- python3 {} {} --signals TERM,USR1,CONT,RTMIN+3",
        common::recorder().display(),
        log.display()
    );
    let args: Vec<&str> = [sbatch_args, &["--gpus=1", "-o", out.to_str().unwrap(), "--wrap", &wrap]].concat();
    let job = cluster.sbatch(&args);
    assert!(
        wait_until(LONG, || std::fs::read_to_string(&out).unwrap_or_default().contains("ready")),
        "the recorder did not start: {}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    (job, log)
}

fn count(log: &Path, name: &str) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().lines().filter(|l| *l == name).count()
}

fn settle() {
    std::thread::sleep(Duration::from_millis(700));
}

#[test]
fn scancel_signals_reach_the_child_once() {
    let Some(cluster) = Cluster::start("scancel_signals_reach_the_child_once", None) else { return };
    for signal in ["TERM", "USR1"] {
        let (job, log) = recorded_job(&cluster, signal, &[], "");
        let sent = cluster.run("scancel", &[&format!("--signal={signal}"), &job]);
        assert!(sent.status.success());
        assert!(wait_until(LONG, || count(&log, signal) >= 1), "{signal} never arrived");
        settle();
        assert_eq!(count(&log, signal), 1, "scancel --signal={signal}: {:?}", std::fs::read_to_string(&log));
    }
    // Plain scancel: SIGCONT and SIGTERM to every process of the step, SIGKILL after KillWait.
    let (job, log) = recorded_job(&cluster, "plain", &[], "");
    assert!(cluster.run("scancel", &[&job]).status.success());
    assert!(wait_until(LONG, || count(&log, "TERM") >= 1));
    settle();
    assert_eq!(count(&log, "TERM"), 1, "{:?}", std::fs::read_to_string(&log));
    assert!(count(&log, "CONT") <= 1, "{:?}", std::fs::read_to_string(&log));
    assert_eq!(cluster.wait_state(&job, &["CANCELLED"]), "CANCELLED");
}

#[test]
fn the_jobs_exit_status_is_the_childs() {
    let Some(cluster) = Cluster::start("the_jobs_exit_status_is_the_childs", None) else { return };
    let out = cluster.file("exit.out");
    let job = cluster.sbatch(&[
        "--gpus=1",
        "-o",
        out.to_str().unwrap(),
        "--wrap",
        "srun gpurun -q -- sh -c 'trap \"exit 42\" TERM; echo ready; sleep 100 & wait'",
    ]);
    assert!(wait_until(LONG, || std::fs::read_to_string(&out).unwrap_or_default().contains("ready")));
    assert!(cluster.run("scancel", &["--signal=TERM", &job]).status.success());
    cluster.wait_state(&job, &["FAILED", "COMPLETED"]);
    assert_eq!(cluster.job_field(&job, "ExitCode").as_deref(), Some("42:0"));

    let killed = cluster.file("killed.out");
    let job = cluster.sbatch(&[
        "--gpus=1",
        "-o",
        killed.to_str().unwrap(),
        "--wrap",
        "srun gpurun -q -- sh -c 'kill -s USR2 $$'",
    ]);
    cluster.wait_state(&job, &["FAILED", "COMPLETED"]);
    // The step died by SIGUSR2 like its child; the batch shell saw 128+12.
    assert_eq!(cluster.job_field(&job, "ExitCode").as_deref(), Some("140:0"));
}

#[test]
fn early_warning_signals_reach_the_child() {
    let Some(cluster) = Cluster::start("early_warning_signals_reach_the_child", None) else { return };
    // USR1 50 s before a 1-minute limit; slurmctld checks limits every few seconds.
    let (job, log) = recorded_job(&cluster, "warning", &["--time=1", "--signal=USR1@50"], "");
    assert!(wait_until(Duration::from_secs(90), || count(&log, "USR1") >= 1), "no early warning arrived");
    settle();
    assert_eq!(count(&log, "USR1"), 1, "{:?}", std::fs::read_to_string(&log));
    let _ = cluster.run("scancel", &[&job]);
}

#[test]
fn proctrack_pgid_signals_once_and_no_forward_is_the_remedy_for_other_group_signallers() {
    let Some(cluster) = Cluster::start("proctrack_pgid", Some("PGID")) else { return };
    let (job, log) = recorded_job(&cluster, "pgid", &[], "");
    assert!(cluster.run("scancel", &["--signal=USR1", &job]).status.success());
    assert!(wait_until(LONG, || count(&log, "USR1") >= 1));
    settle();
    // slurmstepd signalled the whole process group, gpurun included; gpurun knows its sender
    // and does not forward it again.
    assert_eq!(count(&log, "USR1"), 1, "{:?}", std::fs::read_to_string(&log));

    let _ = cluster.run("scancel", &[&job]);

    // Another launcher that signals the whole group (here: kill -- -PGID) is not recognised,
    // so the child gets the signal twice. (A real-time signal: two standard ones sent a moment
    // apart may merge into one pending signal before the child runs.)
    let rt = libc::SIGRTMIN() + 3;
    let (job, log) = recorded_job(&cluster, "twice", &[], "");
    signal_step_group(&cluster.file("twice.out"), rt);
    assert!(wait_until(LONG, || count(&log, "RTMIN+3") >= 2), "{:?}", std::fs::read_to_string(&log));
    let _ = cluster.run("scancel", &[&job]);

    // ...which --no-forward fixes.
    let (job, log) = recorded_job(&cluster, "nf", &[], "--no-forward RTMIN+3");
    signal_step_group(&cluster.file("nf.out"), rt);
    assert!(wait_until(LONG, || count(&log, "RTMIN+3") >= 1));
    settle();
    assert_eq!(count(&log, "RTMIN+3"), 1, "--no-forward RTMIN+3: {:?}", std::fs::read_to_string(&log));
    let _ = cluster.run("scancel", &[&job]);
}

/// Signals the process group of the gpurun whose recorder wrote "ready PID PPID" into `out`.
fn signal_step_group(out: &Path, signal: i32) {
    let text = std::fs::read_to_string(out).unwrap();
    let gpurun: i32 = text.split_whitespace().skip_while(|w| *w != "ready").nth(2).unwrap().parse().unwrap();
    // SAFETY: getpgid and kill have no memory effects.
    unsafe {
        let group = libc::getpgid(gpurun);
        assert!(group > 1);
        libc::kill(-group, signal);
    }
}

#[test]
fn sbatch_scripts_with_gpurun_as_prefix_and_as_shebang() {
    let Some(cluster) = Cluster::start("sbatch_scripts", None) else { return };
    let prefix = cluster.file("prefix.sh");
    std::fs::write(
        &prefix,
        "#!/bin/sh\n#SBATCH --gpus=1\ngpurun -q -- sh -c 'echo \"prefix=$CUDA_VISIBLE_DEVICES,$CUDA_DEVICE_ORDER,$GPURUN_GPUS\"'\n",
    )
    .unwrap();
    let shebang = cluster.file("shebang.sh");
    std::fs::write(
        &shebang,
        format!("#!{GPURUN} -q --gpus 1 -- /bin/sh\n#SBATCH --gpus=1\necho \"shebang=$CUDA_VISIBLE_DEVICES,$CUDA_DEVICE_ORDER,$GPURUN_GPUS\"\n"),
    )
    .unwrap();
    for (script, marker) in [(&prefix, "prefix="), (&shebang, "shebang=")] {
        let out = cluster.file(&format!("{marker}out"));
        let job = cluster.sbatch(&["-o", out.to_str().unwrap(), script.to_str().unwrap()]);
        cluster.wait_state(&job, &["COMPLETED", "FAILED"]);
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with(marker)).unwrap_or_else(|| panic!("{marker}: {text}"));
        let fields: Vec<&str> = line[marker.len()..].split(',').collect();
        assert_eq!(fields[1], "PCI_BUS_ID", "{line}");
        assert_eq!(fields[0], fields[2], "{line}");
        assert!(["0", "1", "2", "3"].contains(&fields[0]), "{line}");
        assert_eq!(cluster.job_field(&job, "ExitCode").as_deref(), Some("0:0"));
    }
}

/// Two nodes of one cluster on this host (two slurmd, each with its own four simulated GPUs
/// through a TaskProlog) and one lock directory: each node's ranks form their own group on that
/// node's GPUs, also when the tasks are placed 3 + 1 (issue 40: before, node n2's ranks joined
/// n1's group and failed with 125).
#[test]
fn two_nodes_share_a_lock_directory_and_each_nodes_ranks_its_own_gpus() {
    let Some(cluster) = Cluster::start("two_nodes", Some("NODES2")) else { return };
    for node in ["n1", "n2"] {
        let text = scenario_file("slurm4.toml").replace("GPU-51a0a000", &format!("GPU-{node}{node}a000"));
        std::fs::write(cluster.file(&format!("{node}.toml")), text).unwrap();
    }
    let sim_cuda = sim_cuda().display().to_string();
    let reports_dir = cluster.file("reports");
    for (placement, per_node) in [
        (&["-N2", "--ntasks-per-node=2", "--gpus-per-node=2"][..], [("n1", 2), ("n2", 2)]),
        (&["-N2", "-n4", "-m", "plane=3", "--gpus-per-node=3"][..], [("n1", 3), ("n2", 1)]),
    ] {
        let _ = std::fs::remove_dir_all(&reports_dir);
        std::fs::create_dir_all(&reports_dir).unwrap();
        let task = format!(
            "exec gpurun --per-rank --report-json {}/rank$SLURM_PROCID.json -- {sim_cuda} --device $SLURM_LOCALID --quiet --sleep 0.5",
            reports_dir.display()
        );
        let step = cluster.run("srun", &[placement, &["sh", "-c", &task]].concat());
        assert!(step.status.success(), "{placement:?}: {step:?}");
        let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for rank in 0..4 {
            let text = std::fs::read_to_string(reports_dir.join(format!("rank{rank}.json"))).unwrap();
            let report: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(report["verification"]["verdict"], "verified", "{report}");
            let node = report["rank"]["node"].as_str().unwrap().to_owned();
            let uuid = report["selected"][0]["uuid"].as_str().unwrap().to_owned();
            assert!(uuid.starts_with(&format!("GPU-{node}{node}")), "rank {rank} on {node} got {uuid}");
            let local_size = report["rank"]["local_size"].as_u64().unwrap();
            let expected = per_node.iter().find(|(n, _)| *n == node).unwrap().1;
            assert_eq!(local_size, expected, "{placement:?}: {report}");
            seen.entry(node).or_default().push(uuid);
        }
        for (node, count) in per_node {
            let mut uuids = seen.get(node).cloned().unwrap_or_default();
            assert_eq!(uuids.len() as u64, count, "{placement:?}: {seen:?}");
            uuids.sort();
            uuids.dedup();
            assert_eq!(uuids.len() as u64, count, "{placement:?}: two ranks of {node} on one GPU: {seen:?}");
        }
    }
}

/// Slurm's GPU sharing (gres.html): a shard's CUDA_VISIBLE_DEVICES is "the same as if it were
/// a GPU" (here, without a device cgroup, the global index), and an MPS job's is 0, "relative
/// to those resources under MPS server control": the GPU its prolog started the MPS server on.
/// Debian's Slurm 22.05 sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE but no CUDA_VISIBLE_DEVICES for
/// an MPS step and gives its prolog neither, so the step starts the (simulated) server itself,
/// as the prolog would, and is tried with CUDA_VISIBLE_DEVICES unset and with 0 (later Slurm).
#[test]
fn shards_and_mps_bind_the_gpu_slurm_means() {
    let Some(cluster) = Cluster::start("shards_and_mps_bind_the_gpu_slurm_means", Some("SHARING")) else {
        return;
    };
    let holder = cluster.sbatch(&["--gpus=2", "-o", "/dev/null", "--wrap", "sleep 120"]);
    cluster.wait_state(&holder, &["RUNNING"]);
    let sim_cuda = sim_cuda().display().to_string();

    let shard = cluster.run(
        "srun",
        &["--gres=shard:1", "sh", "-c", &format!("echo \"{{\\\"slurm\\\": \\\"$CUDA_VISIBLE_DEVICES\\\", \\\"shards\\\": \\\"$SLURM_SHARDS_ON_NODE\\\"}}\"; exec gpurun -- {sim_cuda} --sleep 0.3")],
    );
    assert!(shard.status.success(), "{shard:?}");
    let lines = reports(&shard);
    let slurm: u64 = lines[0]["slurm"].as_str().unwrap().parse().unwrap();
    assert_eq!(lines[0]["shards"], "1");
    assert!(slurm >= 2, "the holder has GPUs 0 and 1: {lines:?}");
    assert_eq!(landed(&lines[1]), vec![slurm], "{lines:?}");

    let server = cluster.file("nvidia-cuda-mps-server");
    std::os::unix::fs::symlink(&sim_cuda, &server).unwrap();
    let uuid_of_3 = "GPU-51a0a000-0000-4000-8000-000000000003";
    for visible in ["unset CUDA_VISIBLE_DEVICES", "export CUDA_VISIBLE_DEVICES=0"] {
        let script = format!(
            "CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=PCI_BUS_ID {} --mps-server --mem 256MiB --sleep 60 --quiet & \
             sleep 0.5; {visible}; gpurun -- {sim_cuda} --sleep 0.3; status=$?; kill $!; exit $status",
            server.display()
        );
        let mps = cluster.run("srun", &["--gres=mps:100", "sh", "-c", &script]);
        assert!(mps.status.success(), "{mps:?}");
        let report = &reports(&mps)[0];
        assert_eq!(landed(report), vec![3], "{report}");
        assert_eq!(report["env"]["CUDA_VISIBLE_DEVICES"], uuid_of_3, "{report}");
        let stderr = String::from_utf8_lossy(&mps.stderr);
        assert!(stderr.contains("on GPU 3 as an MPS client"), "{stderr}");
    }
    // No server of the job's: which GPU Slurm gave cannot be known, and is not guessed.
    let lost = cluster.run("srun", &["--gres=mps:100", "gpurun", "--", "true"]);
    assert_eq!(lost.status.code(), Some(125), "{lost:?}");
    assert!(
        String::from_utf8_lossy(&lost.stderr)
            .contains("device 0 is the GPU behind your MPS server, and none of yours runs here"),
        "{lost:?}"
    );
}
