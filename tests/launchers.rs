//! Launchers that rewrite the choice (issue 39), through the binary on the default simulated
//! machine, where `--gpus 2 --min-free 8G` chooses GPUs 3 and 2. The launchers are stand-ins
//! (tests/launchers/deepspeed, tests/launchers/accelerate) that follow DeepSpeed's runner.py
//! and launch.py, and accelerate's launch.py, line by line: torch cannot run here. Each rank
//! is sim-cuda on `cuda:LOCAL_RANK`.

use crate::common;

use std::path::{Path, PathBuf};

use common::{default_scenario, sim_cuda, Outcome, Sim};

fn stand_in(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/launchers").join(name).display().to_string()
}

/// A rank: sim-cuda on the device of its LOCAL_RANK (deepspeed appends --local_rank=N).
fn rank_script(sim: &Sim) -> String {
    let path = sim.dir.path().join("rank.sh");
    std::fs::write(&path, "#!/bin/sh\nexec \"$SIM_CUDA\" --device \"$LOCAL_RANK\" --quiet --sleep 1\n")
        .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// gpurun with `gpurun_args`, then `--`, then the launcher command; HF_HOME in the sandbox.
fn run(sim: &Sim, gpurun_args: &[&str], command: &[&str]) -> Outcome {
    sim.gpurun()
        .env("SIM_CUDA", sim_cuda())
        .env("HF_HOME", hf_home(sim))
        .args(gpurun_args)
        .arg("--")
        .args(command)
        .run()
}

fn hf_home(sim: &Sim) -> PathBuf {
    sim.dir.path().join("hf")
}

fn accelerate_config(sim: &Sim, text: &str) -> PathBuf {
    let dir = hf_home(sim).join("accelerate");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("default_config.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn verdict(outcome: &Outcome) -> String {
    outcome
        .stderr
        .lines()
        .find(|l| l.contains("verified:") || l.contains("wrong-gpu:"))
        .unwrap_or("")
        .to_owned()
}

fn assert_verified_on_3_and_2(outcome: &Outcome) {
    outcome.status(0);
    let line = verdict(outcome);
    assert!(line.contains("gpurun: verified:"), "{}", outcome.stderr);
    assert!(line.contains("on GPU 2") && line.contains("on GPU 3"), "{line}");
}

#[test]
fn deepspeed_num_gpus_gets_gpuruns_choice_as_include() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let command = [&stand_in("deepspeed"), "--num_gpus", "2", "--no_python", &rank];
    let dry = run(&sim, &["--gpus", "2", "--min-free", "8G", "--dry-run", "--json"], &command);
    let words: Vec<String> = dry.status(0).json()["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(words[1..], ["--include", "localhost:3,2", "--no_python", rank.as_str()], "{words:?}");
    let outcome = run(&sim, &["--gpus", "2", "--min-free", "8G"], &command);
    assert_verified_on_3_and_2(&outcome);
    outcome.stderr_has("--include localhost:3,2 --no_python");
    // Without --gpus, gpurun takes deepspeed's number.
    let outcome = run(&sim, &["--min-free", "8G", "--report"], &command);
    assert_verified_on_3_and_2(&outcome);
}

#[test]
fn deepspeed_plain_and_with_gpuruns_own_include_are_left_alone() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    for command in [
        vec![stand_in("deepspeed"), "--no_python".into(), rank.clone()],
        vec![
            stand_in("deepspeed"),
            "--include".into(),
            "localhost:2,3".into(),
            "--no_python".into(),
            rank.clone(),
        ],
    ] {
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        let dry = run(&sim, &["--gpus", "2", "--min-free", "8G", "--dry-run", "--json"], &words);
        assert_eq!(dry.status(0).json()["command"], serde_json::json!(command), "not rewritten");
        assert_verified_on_3_and_2(&run(&sim, &["--gpus", "2", "--min-free", "8G"], &words));
    }
}

#[test]
fn deepspeed_flags_that_cannot_be_reconciled_are_refused_naming_them() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let hosts = sim.dir.path().join("hostfile");
    std::fs::write(&hosts, "worker-0 slots=8\nworker-1 slots=8\n").unwrap();
    let hostfile = hosts.display().to_string();
    for (flags, named) in [
        (
            vec!["--include", "localhost:0,1"],
            "deepspeed --include localhost:0,1 names other GPUs than gpurun chose (3,2)",
        ),
        (vec!["--num_gpus", "4"], "deepspeed --num_gpus 4 asks for 4 GPUs, and gpurun chose 2"),
        (vec!["--num_nodes", "2"], "deepspeed --num_nodes 2: gpurun chooses GPUs on this node only"),
        (
            vec!["-H", &hostfile],
            &format!("deepspeed --hostfile {hostfile}: the job runs on the hosts it names"),
        ),
        (
            vec!["--exclude", "localhost:1"],
            "deepspeed --exclude localhost:1: gpurun hands its choice over as --include",
        ),
    ] {
        let mut command = vec![stand_in("deepspeed")];
        command.extend(flags.iter().map(|f| f.to_string()));
        command.extend(["--no_python".to_owned(), rank.clone()]);
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        for dry in [false, true] {
            let mut args = vec!["--gpus", "2", "--min-free", "8G"];
            if dry {
                args.push("--dry-run");
            }
            let outcome = run(&sim, &args, &words);
            outcome.status(125).stderr_has(&format!("gpurun: {named}"));
            assert!(!outcome.stderr.contains("running"), "refused before it starts: {}", outcome.stderr);
        }
    }
}

/// Issue 51 (5, 6): short-option clusters read as argparse reads them (the stand-ins' own
/// argparse is the judge), and the other spellings of a launcher. Each is handed gpurun's
/// choice or refused: none runs on GPUs gpurun did not choose.
#[test]
fn launcher_short_options_and_spellings_are_read_as_the_launcher_reads_them() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let deepspeed = stand_in("deepspeed");
    let accelerate = stand_in("accelerate");
    let links = sim.dir.path().join("bin");
    std::fs::create_dir(&links).unwrap();
    let pt = links.join("deepspeed.pt");
    std::os::unix::fs::symlink(&deepspeed, &pt).unwrap();
    let pt = pt.display().to_string();
    let choose = ["--gpus", "2", "--min-free", "8G"];
    for refused in [
        vec![deepspeed.as_str(), "-qi", "localhost:0,1", "--no_python", &rank],
        vec![&deepspeed, "-qilocalhost:0,1", "--no_python", &rank],
        vec![&deepspeed, "-i=localhost:0,1", "--no_python", &rank],
        vec!["env", "-S", &format!("{deepspeed} -qi localhost:0,1"), "--no_python", &rank],
    ] {
        let outcome = run(&sim, &choose, &refused);
        outcome.status(125).stderr_has("gpurun: deepspeed --include localhost:0,1 names other GPUs");
    }
    run(&sim, &choose, &[&deepspeed, "-qe", "localhost:1", "--no_python", &rank])
        .status(125)
        .stderr_has("gpurun: deepspeed --exclude localhost:1");
    run(&sim, &choose, &[&accelerate, "launch", "-qt", "3", "--gpu_ids", "0,1", "--no_python", &rank])
        .status(125)
        .stderr_has("gpurun: accelerate launch --gpu_ids 0,1 replaces CUDA_VISIBLE_DEVICES");
    let split = format!("{deepspeed} --num_gpus 2");
    let run_as_chosen = [
        vec![deepspeed.as_str(), "-i=localhost:3,2", "--no_python", &rank],
        vec![&deepspeed, "--include", "localhost:3,2,2", "--no_python", &rank],
        vec![&pt, "--num_gpus", "2", "--no_python", &rank],
        vec!["python3", &deepspeed, "--num_gpus", "2", "--no_python", &rank],
        vec![
            "timeout",
            "-k",
            "5",
            "60",
            "nohup",
            "stdbuf",
            "-oL",
            &deepspeed,
            "--num_gpus",
            "2",
            "--no_python",
            &rank,
        ],
        vec!["env", "-S", &split, "--no_python", &rank],
        vec![&accelerate, "launch", "-qt", "3", "--multi_gpu", "--num_processes", "2", "--no_python", &rank],
    ];
    for command in run_as_chosen {
        assert_verified_on_3_and_2(&run(&sim, &choose, &command));
    }
}

#[test]
fn with_launcher_off_deepspeed_runs_elsewhere_and_verification_names_why() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let command = [&stand_in("deepspeed"), "--num_gpus", "2", "--no_python", &rank];
    let outcome = run(&sim, &["--gpus", "2", "--min-free", "8G", "--launcher", "off"], &command);
    outcome.status(0);
    let line = verdict(&outcome);
    assert!(line.contains("wrong-gpu:"), "{}", outcome.stderr);
    assert!(line.contains("CUDA_VISIBLE_DEVICES was overridden to \"0,1\""), "{line}");
    assert!(line.contains("deepspeed ignores CUDA_VISIBLE_DEVICES when --num_gpus is given"), "{line}");
}

#[test]
fn accelerate_gets_gpu_ids_which_beat_its_config_file() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let config = accelerate_config(
        &sim,
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\ngpu_ids: 0,1\nnum_processes: 2\n",
    );
    let command = [&stand_in("accelerate"), "launch", "--no_python", &rank];
    let dry = run(&sim, &["--gpus", "2", "--min-free", "8G", "--dry-run"], &command);
    dry.status(0).stdout_has(&format!("accelerate launch --gpu_ids 3,2 --no_python {rank}"));
    assert_verified_on_3_and_2(&run(&sim, &["--gpus", "2", "--min-free", "8G"], &command));
    // Left alone, the config file's gpu_ids win, and the verdict says whose they were.
    let off = run(&sim, &["--gpus", "2", "--min-free", "8G", "--launcher", "off"], &command);
    let line = verdict(&off);
    assert!(line.contains("wrong-gpu:"), "{}", off.stderr);
    assert!(
        line.contains(&format!("accelerate launch takes gpu_ids: 0,1 from {}", config.display())),
        "{line}"
    );
}

#[test]
fn accelerate_refusals_name_the_flag_or_file() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let launch = |flags: &[&str]| {
        let mut command = vec![stand_in("accelerate"), "launch".to_owned()];
        command.extend(flags.iter().map(|f| f.to_string()));
        command.extend(["--no_python".to_owned(), rank.clone()]);
        command
    };
    for (flags, named) in [
        (
            vec!["--gpu_ids", "0,1"],
            "accelerate launch --gpu_ids 0,1 replaces CUDA_VISIBLE_DEVICES with other GPUs".to_owned(),
        ),
        (
            vec!["--num-processes", "4", "--multi_gpu"],
            "accelerate launch: --num_processes asks for 4 processes, and gpurun chose 2 GPUs".to_owned(),
        ),
        (
            vec!["--num_machines", "2"],
            "accelerate launch --num_machines 2: gpurun chooses GPUs on this node only".to_owned(),
        ),
    ] {
        let command = launch(&flags);
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        run(&sim, &["--gpus", "2", "--min-free", "8G"], &words)
            .status(125)
            .stderr_has(&format!("gpurun: {named}"));
    }
    let config = accelerate_config(&sim, "distributed_type: MULTI_GPU\nnum_processes: 8\n");
    let command = launch(&[]);
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    run(&sim, &["--gpus", "2", "--min-free", "8G"], &words)
        .status(125)
        .stderr_has(&format!("num_processes in {} asks for 8 processes", config.display()));
    accelerate_config(&sim, "num_machines: 2\n");
    run(&sim, &["--gpus", "2", "--min-free", "8G"], &words).status(125).stderr_has("says num_machines: 2");
}

/// Issue 51 (7): accelerate reads a JSON config too (`--config_file x.json`, or
/// `default_config.json` where it is the only one), and reads a file past 1 MiB or one with a
/// byte that is not UTF-8 (or fails on it): none is skipped, so none hides a num_machines.
#[test]
fn accelerate_json_large_and_non_utf8_configs_are_read_or_refused() {
    let sim = Sim::new(&default_scenario());
    let rank = rank_script(&sim);
    let accelerate = stand_in("accelerate");
    let dir = hf_home(&sim).join("accelerate");
    std::fs::create_dir_all(&dir).unwrap();
    let default_json = dir.join("default_config.json");
    std::fs::write(&default_json, r#"{"distributed_type": "MULTI_GPU", "num_machines": 2}"#).unwrap();
    let launch = [accelerate.as_str(), "launch", "--no_python", &rank];
    let choose = ["--gpus", "2", "--min-free", "8G"];
    run(&sim, &choose, &launch)
        .status(125)
        .stderr_has(&format!("{} says num_machines: 2", default_json.display()));
    let given = sim.dir.path().join("mine.json");
    std::fs::write(&given, r#"{"distributed_type": "MULTI_GPU", "num_processes": 8}"#).unwrap();
    let with_file =
        [accelerate.as_str(), "launch", "--config_file", given.to_str().unwrap(), "--no_python", &rank];
    run(&sim, &choose, &with_file).status(125).stderr_has("asks for 8 processes");
    std::fs::write(&given, format!("num_machines: 2\n{}", "# padding\n".repeat(120_000))).unwrap();
    let yaml = sim.dir.path().join("mine.yaml");
    std::fs::rename(&given, &yaml).unwrap();
    let with_yaml =
        [accelerate.as_str(), "launch", "--config_file", yaml.to_str().unwrap(), "--no_python", &rank];
    run(&sim, &choose, &with_yaml).status(125).stderr_has("mine.yaml, which is over 1 MiB");
    std::fs::write(&yaml, b"# caf\xe9\nnum_machines: 2\n").unwrap();
    run(&sim, &choose, &with_yaml).status(125).stderr_has("mine.yaml, which is not UTF-8");
}

/// deepspeed's `--include` takes indices and a MIG device has none: a launch that chose a MIG
/// device refuses to hand it over (125), naming why, before anything runs.
#[test]
fn a_mig_device_is_not_handed_to_deepspeed() {
    let sim = Sim::new(&common::scenario_file("mig.toml"));
    let rank = rank_script(&sim);
    let outcome =
        run(&sim, &["--mig", "only"], &[&stand_in("deepspeed"), "--num_gpus", "1", "--no_python", &rank]);
    outcome
        .status(125)
        .stderr_has("deepspeed takes GPUs by index (--include localhost:0,1), and a MIG device has none");
    assert!(!outcome.stderr.contains("running"), "nothing started: {}", outcome.stderr);
}
