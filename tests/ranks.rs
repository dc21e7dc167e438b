//! `--per-rank` (issue 26): the node's ranks choose one set together, each on its own GPU at
//! position LOCAL_RANK, its own NUMA CPUs and its own lease, verified per rank. Through the
//! binary on the simulator, with torchrun's variables set as torchrun 2.x sets them for its
//! workers (torch/distributed/elastic/agent/server/local_elastic_agent.py: LOCAL_RANK,
//! LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT),
//! and through Open MPI's real mpirun (tests/slurm.rs has srun).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{available_cpus, scenario_file, sim_cuda, wait_until, Outcome, Run, Sim};
use serde_json::Value;

/// Rank `rank` of `size` of torchrun job `job`, as torchrun starts its workers.
fn rank(sim: &Sim, rank: u32, size: u32, job: &str) -> Run {
    as_rank(sim.gpurun(), rank, size, job)
}

/// `run` with the variables torchrun gives rank `rank` of `size` of job `job`.
fn as_rank(run: Run, rank: u32, size: u32, job: &str) -> Run {
    run.env("LOCAL_RANK", rank.to_string())
        .env("RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", size.to_string())
        .env("WORLD_SIZE", size.to_string())
        .env("TORCHELASTIC_RUN_ID", job)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29500")
        .env("TORCHELASTIC_RESTART_COUNT", "0")
}

/// Runs every rank at once; their outcomes in rank order.
fn all_at_once(runs: Vec<Run>) -> Vec<Outcome> {
    let threads: Vec<_> = runs.into_iter().map(|run| std::thread::spawn(move || run.run())).collect();
    threads.into_iter().map(|thread| thread.join().unwrap()).collect()
}

/// A rank's command: says what it got (one line: CVD, GPURUN_GPUS, its CPUs), then uses
/// `device` (a CUDA ordinal, like cuda:N) for `seconds`.
fn rank_command(device: &str, seconds: &str) -> Vec<String> {
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "echo \"$CUDA_VISIBLE_DEVICES|$GPURUN_GPUS|$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"; \
             exec {} --quiet --device {device} --sleep {seconds}",
            sim_cuda().display()
        ),
    ]
}

fn report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// How many leases the lock directory holds.
fn leases(lock_dir: &Path) -> usize {
    common::leases_in(lock_dir)
}

/// `size` ranks of `job`, each writing its report to `rank<r>.json` in the simulator's folder,
/// each using CUDA device `device` for `seconds`.
fn reporting_ranks(sim: &Sim, size: u32, job: &str, device: &str, seconds: &str) -> Vec<Run> {
    (0..size)
        .map(|r| {
            rank(sim, r, size, job)
                .args(["--per-rank", "--report-json"])
                .arg_path(&sim.dir.path().join(format!("rank{r}.json")))
                .args(["--"])
                .args(rank_command(device, seconds))
        })
        .collect()
}

fn group_files(sim: &Sim) -> Vec<String> {
    std::fs::read_dir(sim.lock_dir())
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("group."))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn four_ranks_share_one_set_each_on_its_own_gpu_cpus_and_lease() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let dir = sim.dir.path();
    let runs = reporting_ranks(&sim, 4, "job-a", "$LOCAL_RANK", "3");
    // While they run: a fifth job that wants a card to itself gets only GPU 5, the one the
    // group left (GPU 1 is a colleague's busy card).
    let fifth = std::thread::spawn({
        let lock_dir = sim.lock_dir();
        let state = sim.scenario.with_extension("toml.state");
        let run = sim.gpurun().args(["--exclusive", "--gpus", "2", "--", "true"]);
        let single = sim.gpurun().args(["--exclusive", "--dry-run", "--json"]);
        move || {
            assert!(
                wait_until(Duration::from_secs(10), || leases(&lock_dir) == 4),
                "the four leases never appeared"
            );
            // And each rank's CUDA process in NVML (a lease comes first: issue 42's "reserved by
            // gpurun PID" where "in use by PID" was expected was this race).
            let registered = || nvml_sim::registry::live(&state).len() >= 4;
            assert!(wait_until(Duration::from_secs(10), registered), "the ranks' processes never showed");
            (run.run(), single.run())
        }
    });
    let outcomes = all_at_once(runs);
    let (two, single) = fifth.join().unwrap();
    let mut owners = Vec::new();
    for (r, outcome) in outcomes.iter().enumerate() {
        outcome.status(0);
        let said: Vec<&str> = outcome.stdout.trim().split('|').collect();
        // Every rank sees the same set, its own GPU at position LOCAL_RANK.
        assert_eq!(said[0], "0,2,3,4", "rank {r}: {outcome:#?}");
        let own = ["0", "2", "3", "4"][r];
        assert_eq!(said[1], own, "rank {r}'s GPURUN_GPUS: {outcome:#?}");
        if available_cpus() >= 2 {
            // NUMA node 0 (CPU 0) for GPUs 0 and 2, node 1 (CPU 1) for GPUs 3 and 4.
            assert_eq!(said[2], if r < 2 { "0" } else { "1" }, "rank {r}'s CPUs: {outcome:#?}");
        }
        let report = report(&dir.join(format!("rank{r}.json")));
        assert_eq!(report["verification"]["verdict"], "verified", "rank {r}: {report}");
        assert_eq!(report["selected"][0]["index"], own.parse::<u64>().unwrap(), "{report}");
        assert_eq!(report["rank"]["local_rank"], r as u64, "{report}");
        assert_eq!(report["rank"]["group"], "torchrun:job-a:127.0.0.1:29500:0", "{report}");
        assert_eq!(report["rank"]["group_gpus"], serde_json::json!([0, 2, 3, 4]), "{report}");
        owners.push(report["selected"][0]["uuid"].clone());
    }
    owners.dedup();
    assert_eq!(owners.len(), 4, "each rank its own lease's GPU");
    // The history keeps each rank's run with its rank and group.
    let history = sim.gpurun().args(["--history", "--json"]).run();
    let mut ranks: Vec<u64> = history
        .status(0)
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["rank"]["group"] == "torchrun:job-a:127.0.0.1:29500:0")
        .map(|run| run["rank"]["local_rank"].as_u64().unwrap())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1, 2, 3], "{history:#?}");
    two.status(75).stderr_has("GPU 3: in use by PID").stderr_has("reserved by gpurun PID");
    let chosen: Vec<u64> =
        single.json()["selected"].as_array().unwrap().iter().map(|g| g["index"].as_u64().unwrap()).collect();
    assert_eq!(chosen, [5], "{single:#?}");
    assert!(
        group_files(&sim).is_empty(),
        "the last rank removed the group's record: {:?}",
        group_files(&sim)
    );
}

#[test]
fn a_rank_on_another_ranks_gpu_is_named_with_the_likely_cause() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let dir = sim.dir.path();
    // Both ranks use cuda:0, the mistake of a missing torch.cuda.set_device(LOCAL_RANK).
    let runs = reporting_ranks(&sim, 2, "job-b", "0", "0.5");
    let outcomes = all_at_once(runs);
    outcomes[0].status(0);
    assert!(!outcomes[0].stderr.contains("wrong-gpu"), "rank 0 is right: {:#?}", outcomes[0]);
    outcomes[1]
        .status(0)
        .stderr_has("wrong-gpu")
        .stderr_has("rank 1 used GPU 0, rank 0's")
        .stderr_has("torch.cuda.set_device(LOCAL_RANK)");
    assert_eq!(report(&dir.join("rank1.json"))["verification"]["verdict"], "wrong-gpu");
    // --verify strict ends such a rank: 125.
    let runs = (0..2)
        .map(|r| {
            rank(&sim, r, 2, "job-c")
                .args(["--per-rank", "--verify", "strict", "--"])
                .args(rank_command("0", "5"))
        })
        .collect();
    let outcomes = all_at_once(runs);
    outcomes[1].status(125).stderr_has("rank 1 used GPU 0, rank 0's");
}

#[test]
fn per_rank_own_shows_each_rank_its_own_gpu_alone() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let runs = (0..2)
        .map(|r| {
            rank(&sim, r, 2, "job-d")
                .args(["--per-rank=own", "--gpus", "1", "--"])
                .args(rank_command("0", "1"))
        })
        .collect();
    let outcomes = all_at_once(runs);
    for (r, outcome) in outcomes.iter().enumerate() {
        outcome.status(0);
        let own = ["0", "2"][r];
        assert!(outcome.stdout.starts_with(&format!("{own}|{own}|")), "rank {r}: {outcome:#?}");
        assert!(!outcome.stderr.contains("wrong-gpu"), "cuda:0 is its own GPU: {outcome:#?}");
    }
}

#[test]
fn two_gpus_per_rank_are_consecutive_in_the_set() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let runs = (0..2)
        .map(|r| {
            rank(&sim, r, 2, "job-e")
                .args(["--per-rank", "--gpus", "2", "--"])
                .args(rank_command("$((LOCAL_RANK*2)),$((LOCAL_RANK*2+1))", "0.5"))
        })
        .collect();
    let outcomes = all_at_once(runs);
    for (r, outcome) in outcomes.iter().enumerate() {
        outcome.status(0);
        let said: Vec<&str> = outcome.stdout.trim().split('|').collect();
        assert_eq!(said[0], "0,2,3,4", "{outcome:#?}");
        assert_eq!(said[1], ["0,2", "3,4"][r], "{outcome:#?}");
        outcome.stderr_has("verified");
    }
}

#[test]
fn a_rank_that_never_comes_holds_its_gpu_only_until_the_rank_timeout() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    // Ranks 0-2 of 4: rank 3's GPU (4) stays held for it, so an exclusive pair cannot be had.
    let three: Vec<_> = (0..3)
        .map(|r| {
            let mut command = rank(&sim, r, 4, "job-f")
                .args(["--per-rank", "--rank-timeout", "8s", "--"])
                .args(rank_command("$LOCAL_RANK", "20"))
                .command;
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            common::Running(command.spawn().unwrap())
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 3));
    let list = sim.gpurun().args(["--list"]).run();
    let host = String::from_utf8(std::process::Command::new("hostname").output().unwrap().stdout).unwrap();
    list.status(0).stdout_has(&format!("(for rank 3 on node {}, not started yet)", host.trim()));
    // Within its --rank-timeout (8 s, far longer than these two looks) GPU 4 stays rank 3's.
    sim.gpurun()
        .args(["--exclusive", "--gpus", "2", "--", "true"])
        .run()
        .status(75)
        .stderr_has("GPU 4: reserved");
    // Past the timeout GPU 4 is anyone's.
    let pair_chosen = || {
        let pair = sim.gpurun().args(["--exclusive", "--gpus", "2", "--dry-run", "--json"]).run();
        let selected = pair.json()["selected"].clone();
        selected.as_array().into_iter().flatten().filter_map(|g| g["index"].as_u64()).collect::<Vec<u64>>()
    };
    assert!(
        wait_until(common::HANG, || pair_chosen() == [4, 5]),
        "GPU 4 was still held after --rank-timeout"
    );
    // A rank 3 that comes now still gets its GPU if nobody took it...
    let late =
        rank(&sim, 3, 4, "job-f").args(["--per-rank", "--"]).args(rank_command("$LOCAL_RANK", "0.2")).run();
    late.status(0);
    assert!(late.stdout.starts_with("0,2,3,4|4|"), "{late:#?}");
    // ...and is told why not when somebody did.
    let _taker = common::background(sim.gpurun().args(["--exclusive", "--devices", "4", "--", "sleep", "5"]));
    assert!(wait_until(Duration::from_secs(5), || leases(&sim.lock_dir()) == 4));
    rank(&sim, 3, 4, "job-f")
        .args(["--per-rank", "--", "true"])
        .run()
        .status(75)
        .stderr_has("its GPU in the group, GPU 4, is reserved by gpurun PID")
        .stderr_has("--rank-timeout");
    drop(three);
}

#[test]
fn a_rank_waits_for_the_set_at_most_the_rank_timeout_and_a_dead_chooser_is_replaced() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    // Every card taken: the chooser waits (--wait) with the set not chosen.
    let _all = common::background(sim.gpurun().args(["--exclusive", "--gpus", "5", "--", "sleep", "30"]));
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 5));
    // The chooser waits for ever: a rank that waited for it, not for its own --rank-timeout,
    // would be hung.
    let mut chooser = rank(&sim, 0, 2, "job-g").args(["--per-rank", "--wait", "--", "true"]).command;
    let mut chooser =
        chooser.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !group_files(&sim).is_empty()),
        "the chooser made no record"
    );
    let other = rank(&sim, 1, 2, "job-g")
        .args(["--per-rank", "--rank-timeout", "1s", "--", "true"])
        .run_unless_hung();
    other
        .status(75)
        .stderr_has("the group's GPUs were not chosen within --rank-timeout 1s: rank 0 (gpurun PID")
        .stderr_has("is still choosing");
    // SIGKILL the chooser: its record dies with it, and the next rank chooses itself.
    chooser.kill().unwrap();
    chooser.wait().unwrap();
    let next = rank(&sim, 1, 2, "job-g").args(["--per-rank", "--", "true"]).run();
    next.status(75).stderr_has("not enough GPUs: 2 requested");
    assert!(!next.stderr.contains("still choosing"), "{next:#?}");
    assert!(group_files(&sim).is_empty(), "{:?}", group_files(&sim));
}

#[test]
fn with_fallback_cpu_every_rank_runs_without_a_gpu_when_the_set_cannot_be_had() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let _all = common::background(sim.gpurun().args(["--exclusive", "--gpus", "5", "--", "sleep", "30"]));
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 5));
    let runs = (0..2)
        .map(|r| {
            rank(&sim, r, 2, "job-i")
                .args(["--per-rank", "--exclusive", "--fallback", "cpu", "--", "sh", "-c"])
                .args(["echo \"[$CUDA_VISIBLE_DEVICES]\""])
        })
        .collect();
    for outcome in all_at_once(runs) {
        outcome.status(0).stdout_has("[]").stderr_has("no GPU visible");
    }
}

#[test]
fn what_per_rank_cannot_work_with_is_refused() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    sim.gpurun()
        .env_remove("LOCAL_RANK")
        .args(["--per-rank", "--", "touch"])
        .arg_path(&sim.dir.path().join("ran"))
        .run()
        .status(125)
        .stderr_has("gpurun: --per-rank: no launcher's rank variables are set; looked for LOCAL_RANK");
    assert!(!sim.dir.path().join("ran").exists());
    rank(&sim, 0, 2, "x")
        .args(["--per-rank", "--gpus", "1-2", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--per-rank --gpus 1-2");
    rank(&sim, 0, 2, "x")
        .args(["--per-rank", "--no-lock", "--", "true"])
        .run()
        .status(125)
        .stderr_has("drop --no-lock");
    sim.gpurun()
        .args(["--group", "a", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--group goes with --per-rank");
    sim.gpurun()
        .env("LOCAL_RANK", "0")
        .env("LOCAL_WORLD_SIZE", "2")
        .args(["--per-rank", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--group NAME");
    sim.gpurun()
        .env("LOCAL_RANK", "2")
        .env("LOCAL_WORLD_SIZE", "2")
        .args(["--per-rank", "--group", "g", "--", "true"])
        .run()
        .status(125)
        .stderr_has("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
    // --group names the job of plain variables; the dry run shows this rank's part.
    let plan = sim
        .gpurun()
        .env("LOCAL_RANK", "1")
        .env("LOCAL_WORLD_SIZE", "2")
        .args(["--per-rank", "--group", "g", "--dry-run", "--json"])
        .run();
    let plan = plan.status(0).json();
    assert_eq!(plan["env"]["CUDA_VISIBLE_DEVICES"], "0,2", "{plan}");
    assert_eq!(plan["env"]["GPURUN_GPUS"], "2", "{plan}");
}

#[test]
fn four_ranks_through_open_mpis_mpirun() {
    let Some(mpirun) = find_program("mpirun") else {
        return common::skip("mpirun", "Open MPI is not installed (make test installs openmpi-bin as root)");
    };
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let dir = sim.dir.path();
    let script = format!(
        "exec {} --per-rank --report-json {}/rank$OMPI_COMM_WORLD_RANK.json -- {}",
        common::gpurun_binary(),
        dir.display(),
        rank_command("$OMPI_COMM_WORLD_LOCAL_RANK", "0.5")
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut command = sim.gpurun_command(&mpirun, &[]).command;
    // As root (CI), with more ranks than cores (a 2-core machine).
    command.args(["--allow-run-as-root", "--oversubscribe", "-np", "4", "sh", "-c", &script]);
    let output = command.stdin(std::process::Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let mut seen: Vec<String> = stdout.lines().map(str::to_owned).collect();
    seen.sort();
    let mut gpus = Vec::new();
    for r in 0..4 {
        let report = report(&dir.join(format!("rank{r}.json")));
        assert_eq!(report["verification"]["verdict"], "verified", "{report}");
        assert_eq!(report["rank"]["launcher"], "Open MPI", "{report}");
        assert_eq!(report["rank"]["group_gpus"], serde_json::json!([0, 2, 3, 4]), "{report}");
        gpus.push(report["selected"][0]["index"].as_u64().unwrap());
    }
    assert_eq!(gpus, [0, 2, 3, 4], "rank r on the r-th GPU of the set: {seen:?}");
    assert!(seen.iter().all(|line| line.starts_with("0,2,3,4|")), "{seen:?}");
}

fn find_program(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

trait ArgPath {
    fn arg_path(self, path: &Path) -> Self;
}

impl ArgPath for Run {
    fn arg_path(self, path: &Path) -> Run {
        self.args([path])
    }
}

/// The group record's name for `job` of user `uid` (FNV-1a 64 of the job, as gpurun names it).
fn record_prefix(job: &str, uid: u32) -> String {
    let hash = job
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    format!("group.{uid}.{hash:016x}.")
}

#[test]
fn another_users_planted_group_records_are_neither_joined_nor_counted() {
    if !nix_is_root() {
        return common::skip("another_users_planted_group_records", "a second user needs root (setpriv)");
    }
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    sim.gpurun().args(["--", "true"]).run().status(0);
    let job = "torchrun:job-h:127.0.0.1:29500:0";
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let base = serde_json::json!({
        "job": job, "launcher": "torchrun", "local_size": 2, "per_rank": 1, "uid": 0, "user": "root",
        "chooser_rank": 0, "chooser_pid": 1, "started": now, "rank_timeout_seconds": 1e9,
    });
    // Under root's own name: a failure that would stop every rank of the job if it were read.
    let mut failed = base.clone();
    failed["state"] = "failed".into();
    failed["why"] = "planted".into();
    failed["status"] = 75.into();
    // Claiming root's uid: every GPU held for ranks that never come.
    let mut hold = base;
    hold["state"] = "chosen".into();
    hold["exclusive"] = true.into();
    hold["at"] = now.into();
    hold["gpus"] = (0..6)
        .map(|i| serde_json::json!({"uuid": format!("GPU-4a4b0000-0000-4000-8000-00000000000{i}"), "index": i, "reserved_bytes": 0}))
        .collect::<Vec<_>>()
        .into();
    let first = sim.lock_dir().join(format!("{}0badf00d", record_prefix(job, 0)));
    let second = sim.lock_dir().join(format!("{}0badf00d", record_prefix("torchrun:other", 4242)));
    let planter = common::background(sim.gpurun_command(
        "setpriv",
        &[
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            "sh",
            "-c",
            "printf %s \"$1\" > \"$2\" && printf %s \"$3\" > \"$4\" && exec flock -s \"$2\" flock -s \"$4\" sleep 30",
            "sh",
            &failed.to_string(),
            first.to_str().unwrap(),
            &hold.to_string(),
            second.to_str().unwrap(),
        ],
    ));
    assert!(
        wait_until(Duration::from_secs(5), || first.exists() && second.exists()),
        "the records were not planted"
    );
    // Planted and held: the planter's shared flocks are on both (an exclusive probe fails).
    let held = |path: &std::path::Path| {
        std::fs::File::open(path).is_ok_and(|file| {
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || held(&first) && held(&second)),
        "the planted records are not held"
    );
    let list = sim.gpurun().args(["--list"]).run();
    assert!(!list.stdout.contains("(for rank"), "a planted hold counted: {list:#?}");
    let runs = (0..2)
        .map(|r| {
            rank(&sim, r, 2, "job-h").args(["--per-rank", "--"]).args(rank_command("$LOCAL_RANK", "0.3"))
        })
        .collect();
    for outcome in all_at_once(runs) {
        outcome.status(0).stderr_has("verified");
        assert!(!outcome.stderr.contains("planted"), "{outcome:#?}");
    }
    assert!(first.exists(), "another user's file is not removed");
    drop(planter);
}

fn nix_is_root() -> bool {
    common::is_root()
}

#[test]
fn two_ranks_claiming_the_same_local_rank_are_told_so() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let first = common::background(rank(&sim, 0, 2, "job-j").args(["--per-rank", "--", "sleep", "5"]));
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 1));
    rank(&sim, 0, 2, "job-j")
        .args(["--per-rank", "--", "true"])
        .run()
        .status(75)
        .stderr_has("rank 0 of 2 (torchrun): its GPU in the group, GPU 0, is reserved by gpurun PID")
        .stderr_has("another rank has the same LOCAL_RANK");
    // Rank 1 still gets its own.
    rank(&sim, 1, 2, "job-j").args(["--per-rank", "--", "true"]).run().status(0);
    drop(first);
}

#[test]
fn with_exec_the_commands_hold_the_group_and_their_leases() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            common::background(rank(&sim, r, 2, "job-k").args(["--per-rank", "--exec", "--", "sleep", "3"]))
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 2));
    assert_eq!(group_files(&sim).len(), 1, "the exec'd commands hold the record");
    // gpurun is gone (replaced by sleep), the reservation is not.
    let list = sim.gpurun().args(["--exclusive", "--gpus", "5", "--", "true"]).run();
    list.status(75);
    drop(ranks);
    // Their end frees both (the files stay until a launch clears them: a dead lease is unlocked).
    sim.gpurun().args(["--exclusive", "--gpus", "5", "--dry-run"]).run().status(0);
}

#[test]
fn a_record_another_user_holds_locked_holds_no_rank_and_no_launch() {
    if !nix_is_root() {
        return common::skip("a_record_another_user_holds_locked", "a second user needs root (setpriv)");
    }
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    // A dead record: its only rank's gpurun was SIGKILLed, so nobody removed it.
    let mut crashed = rank(&sim, 0, 2, "job-l")
        .args(["--per-rank", "--parent-death-signal", "KILL", "--", "sleep", "30"])
        .command;
    let mut crashed =
        crashed.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || group_files(&sim).len() == 1));
    crashed.kill().unwrap();
    crashed.wait().unwrap();
    let record = sim.lock_dir().join(&group_files(&sim)[0]);
    // Another user opens it (it is world-readable, as every launch must count its GPUs) and
    // holds an exclusive flock on it, so that it looks live and cannot be shared.
    let holder = common::background(sim.gpurun_command(
        "setpriv",
        &[
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            // perl-base is in every Debian; open(2) without O_CREAT (flock(1) would create, which
            // fs.protected_regular forbids on another user's file in a sticky directory).
            "perl",
            "-e",
            "use Fcntl ':flock'; open(my $f, '<', $ARGV[0]) or die $!; flock($f, LOCK_EX) or die $!; sleep 30",
            record.to_str().unwrap(),
        ],
    ));
    let locked = wait_until(Duration::from_secs(10), || {
        let probe = std::fs::File::open(&record).unwrap();
        nix::fcntl::Flock::lock(probe, nix::fcntl::FlockArg::LockSharedNonblock).is_err()
    });
    if !locked {
        drop(holder);
        return common::skip("a_record_another_user_holds_locked", "setpriv or perl is unavailable");
    }
    // The job's ranks neither wait for it nor join it: they make a record of their own.
    let runs = (0..2)
        .map(|r| {
            // Bounded: the build before this test waited for the lock forever.
            as_rank(sim.gpurun_command("timeout", &["20", &common::gpurun_binary()]), r, 2, "job-l")
                .args(["--per-rank", "--"])
                .args(rank_command("$LOCAL_RANK", "0.3"))
        })
        .collect();
    for outcome in all_at_once(runs) {
        outcome.status(0).stderr_has("verified");
    }
    // Another launch meanwhile is not held either.
    sim.gpurun().args(["--", "true"]).run().status(0);
    drop(holder);
}

/// Issue 36 (9): the group's size comes from the launcher's variables, and a product that
/// wraps around in 32 bits once ran "on no GPU" with exit 0. Messages say the ranks, not a
/// `--gpus` nobody typed.
#[test]
fn a_group_size_from_the_environment_is_checked_and_said_in_ranks() {
    let sim = Sim::new(&common::default_scenario());
    for (size, gpus) in [(2_147_483_648_u64, "2"), (4_294_967_295, "1"), (65_537, "1")] {
        rank(&sim, 0, 1, "job-o")
            .env("LOCAL_WORLD_SIZE", size.to_string())
            .args(["--per-rank", "--gpus", gpus, "--", "true"])
            .run()
            .status(125)
            .stderr_has(&format!(
                "LOCAL_WORLD_SIZE={size} ranks x --gpus {gpus} is more GPUs than any node has"
            ));
    }
    rank(&sim, 0, 5, "job-p")
        .args(["--per-rank", "--gpus", "2", "--", "true"])
        .run()
        .status(125)
        .stderr_has("gpurun: 5 ranks x 2 GPUs = 10: this machine has 8 GPUs");
}

/// Two "hosts" of one mpirun on this machine (Open MPI's rsh agent runs each host's daemon
/// here, with that host's own simulated GPUs and TMPDIR) and one lock directory: each host's
/// two ranks form their own group on their own GPUs (issue 40: before, host b's ranks joined
/// host a's group and failed).
#[test]
fn two_hosts_of_one_mpirun_share_a_lock_directory_and_never_meet() {
    let Some(mpirun) = find_program("mpirun") else {
        return common::skip("mpirun", "Open MPI is not installed (make test installs openmpi-bin as root)");
    };
    let host_gpus = |host: char| {
        scenario_file("two_idle.toml").replace("GPU-22220000", &format!("GPU-{}", host.to_string().repeat(8)))
    };
    let sim = Sim::new(&host_gpus('a'));
    let dir = sim.dir.path();
    for host in ['a', 'b'] {
        std::fs::write(dir.join(format!("{host}.toml")), host_gpus(host)).unwrap();
    }
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\n# plm_rsh_agent: HOST COMMAND... runs COMMAND here, as that host.\nhost=$1; shift\n\
             export NVML_SIM_SCENARIO={0}/$host.toml TMPDIR={0}/tmp-$host\nmkdir -p \"$TMPDIR\"\nexec sh -c \"$*\"\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        "exec {} --per-rank --report-json {}/rank$OMPI_COMM_WORLD_RANK.json -- {} --device $OMPI_COMM_WORLD_LOCAL_RANK --quiet --sleep 0.5",
        common::gpurun_binary(),
        dir.display(),
        common::sim_cuda().display()
    );
    let mut command = sim.gpurun_command(&mpirun, &[]).command;
    command
        .args(["--allow-run-as-root", "--oversubscribe", "--mca", "plm_rsh_agent"])
        .arg(&agent)
        .args(["--host", "a:2,b:2", "-np", "4", "sh", "-c", &script]);
    let output = command.stdin(std::process::Stdio::null()).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let mut by_host: std::collections::BTreeMap<String, Vec<(String, String)>> = Default::default();
    for r in 0..4 {
        let report = report(&dir.join(format!("rank{r}.json")));
        assert_eq!(report["verification"]["verdict"], "verified", "{report}");
        let uuid = report["selected"][0]["uuid"].as_str().unwrap().to_owned();
        let node = report["rank"]["node"].as_str().unwrap().to_owned();
        by_host.entry(uuid[4..5].to_owned()).or_default().push((uuid, node));
    }
    assert_eq!(by_host.len(), 2, "each host's ranks on its own GPUs: {by_host:?}");
    for (host, ranks) in &by_host {
        assert_eq!(ranks.len(), 2, "{host}: {ranks:?}");
        assert_ne!(ranks[0].0, ranks[1].0, "{host}: two ranks on one GPU");
        assert_eq!(ranks[0].1, ranks[1].1, "{host}: one node");
    }
    let nodes: Vec<&String> = by_host.values().map(|ranks| &ranks[0].1).collect();
    assert_ne!(nodes[0], nodes[1], "two nodes");
}

/// Every rank prints its running line and its verdict: each names its rank (issue 42, point 10).
#[test]
fn each_ranks_status_lines_name_the_rank() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let outcome = rank(&sim, 0, 1, "job-lines").args(["--per-rank", "--"]).args(rank_command("0", "1")).run();
    outcome.status(0);
    let running = outcome.stderr.lines().find(|l| l.starts_with("gpurun: running ")).unwrap_or("");
    assert!(running.ends_with(", rank 0 of 1 (torchrun)"), "{}", outcome.stderr);
    let verdict = outcome.stderr.lines().find(|l| l.starts_with("gpurun: verified: ")).unwrap_or("");
    assert!(verdict.ends_with(" (rank 0)"), "{}", outcome.stderr);
}

/// Every rank must be started alike: a rank whose `--gpus` or rank count differs from the
/// chooser's is refused (125) naming both, not given a part of a set sized for others.
#[test]
fn a_rank_started_unlike_the_chooser_is_refused() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let _chooser =
        common::background(rank(&sim, 0, 2, "job-alike").args(["--per-rank", "--", "sleep", "20"]));
    assert!(
        wait_until(Duration::from_secs(10), || !group_files(&sim).is_empty()),
        "the chooser made no record"
    );
    for (size, gpus) in [(2, "2"), (3, "1")] {
        rank(&sim, 1, size, "job-alike")
            .args(["--per-rank", "--gpus", gpus, "--", "true"])
            .run()
            .status(125)
            .stderr_has("every rank must be started alike");
    }
    // Started alike, the second rank joins.
    rank(&sim, 1, 2, "job-alike").args(["--per-rank", "--", "true"]).run().status(0);
}

/// A node name comes from the environment (torchrun's GROUP_RANK here, SLURMD_NODENAME under
/// Slurm) and is shown in every user's `--list`: its control characters are written out, so
/// it cannot add a fake line to the table.
#[test]
fn a_node_name_with_a_newline_adds_no_line_to_the_listing() {
    let sim = Sim::new(&scenario_file("ranks6.toml"));
    let forged = "0\n  3 NVIDIA A100-SXM4-80GB  0 / 80G  FREE";
    let mut first = rank(&sim, 0, 2, "job-n")
        .env("GROUP_RANK", forged)
        .args(["--per-rank", "--rank-timeout", "30s", "--"])
        .args(rank_command("$LOCAL_RANK", "20"))
        .command;
    first.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let _first = common::Running(first.spawn().unwrap());
    assert!(wait_until(Duration::from_secs(10), || leases(&sim.lock_dir()) == 1));
    let list = sim.gpurun().args(["--list"]).run();
    list.status(0).stdout_has(r"(for rank 1 on node ").stdout_has(r"/0\n  3 NVIDIA A1…");
    assert!(
        !list.stdout.lines().any(|line| line.starts_with("  3 NVIDIA")),
        "a forged line in the listing:\n{}",
        list.stdout
    );
}
