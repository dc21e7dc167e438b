//! Verification and the report, end to end on the simulator: every verdict of DESIGN 8, its log
//! line, `--verify strict`, the 535 driver quirk, `--report` and `--report-json`.

use crate::common;

use std::time::Duration;

use common::{default_scenario, scenario_file, sim_cuda, wait_until, Outcome, Sim};
use serde_json::Value;

/// sim-cuda by a short path in the simulated machine's directory: the verdict line clips a long
/// command line, and what the tests look for must not depend on where the checkout lives.
fn sim_cuda_path(sim: &Sim) -> String {
    let short = sim.dir.path().join("sim-cuda");
    if !short.exists() {
        std::os::unix::fs::symlink(sim_cuda(), &short).expect("symlink sim-cuda");
    }
    short.display().to_string()
}

fn run(sim: &Sim, gpurun_args: &[&str], command: &[&str]) -> Outcome {
    sim.gpurun().args(gpurun_args).args(["--"]).args(command).run()
}

fn verdict_lines(outcome: &Outcome) -> Vec<String> {
    let verdicts = ["verified:", "wrong-gpu:", "partial:", "not-observed:", "unverifiable:"];
    outcome
        .stderr
        .lines()
        .filter(|line| verdicts.iter().any(|v| line.contains(v)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn verified_names_pid_command_and_gpu() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &[], &[&sim_cuda_path(&sim), "--sleep", "0.5"]);
    outcome.status(0);
    let lines = verdict_lines(&outcome);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("gpurun: verified: PID "), "{lines:?}");
    assert!(lines[0].contains("sim-cuda --sleep 0.5) on GPU 3"), "{lines:?}");
}

#[test]
fn worker_processes_count_as_the_commands() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &["--gpus", "2"], &[&sim_cuda_path(&sim), "--workers", "2", "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    // The workers register, not the command (their command line is sim-cuda's real path, which
    // the verdict may clip): two PIDs, each on both GPUs.
    assert!(lines[0].contains("verified:"), "{lines:?}");
    assert_eq!(lines[0].matches("PID ").count(), 2, "{lines:?}");
    assert_eq!(lines[0].matches(") on GPUs 3, 2").count(), 2, "{lines:?}");
}

#[test]
fn a_command_under_a_long_path_is_clipped_and_still_verified() {
    // A checkout or target directory 60+ characters deep (issue 25): the verdict clips the
    // command line; the PID and the GPU, which the checks rest on, stay whole.
    let sim = Sim::new(&default_scenario());
    let deep = sim.dir.path().join("a-checkout-under-a-rather-long-directory-name/target/debug/deps");
    std::fs::create_dir_all(&deep).unwrap();
    let program = deep.join("sim-cuda");
    std::os::unix::fs::symlink(sim_cuda(), &program).unwrap();
    assert!(program.display().to_string().len() > 60);
    let outcome =
        run(&sim, &["--gpus", "2"], &[program.to_str().unwrap(), "--workers", "2", "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("verified:"), "{lines:?}");
    assert_eq!(lines[0].matches("PID ").count(), 2, "{lines:?}");
    assert_eq!(lines[0].matches(") on GPUs 3, 2").count(), 2, "{lines:?}");
    // A clipped command keeps its program's name: the directory goes first (issue 42, point 7).
    let outcome = run(&sim, &[], &[program.to_str().unwrap(), "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert!(lines[0].contains("(…/sim-cuda --sleep 0.5) on GPU 3"), "{lines:?}");
}

#[test]
fn one_process_on_two_gpus_is_named_once() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &["--gpus", "2"], &[&sim_cuda_path(&sim), "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].matches("PID ").count(), 1, "{lines:?}");
    assert!(lines[0].contains("sim-cuda --sleep 0.5) on GPUs 3, 2"), "{lines:?}");
    // In the order the running line gives them: CUDA's device 0 first.
    outcome.stderr_has("on GPU 3 (NVIDIA A100-SXM4-80GB), GPU 2 (NVIDIA A100-SXM4-80GB)");
}

/// The default machine's FASTEST_FIRST order differs from PCI order: a process that loses
/// CUDA_DEVICE_ORDER lands elsewhere, and gpurun says so.
#[test]
fn wrong_gpu_without_cuda_device_order() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(
        &sim,
        &["--exclude", "3"],
        &["env", "-u", "CUDA_DEVICE_ORDER", &sim_cuda_path(&sim), "--sleep", "0.5"],
    );
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("gpurun: warning: wrong-gpu: PID "), "{lines:?}");
    assert!(lines[0].contains("is on GPU 7, which was not selected (selected: GPU 5)"), "{lines:?}");
    assert!(lines[0].contains("CUDA_DEVICE_ORDER is not PCI_BUS_ID"), "{lines:?}");
}

#[test]
fn wrong_gpu_with_an_overridden_cuda_visible_devices() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &[], &["env", "CUDA_VISIBLE_DEVICES=0", &sim_cuda_path(&sim), "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert!(lines[0].contains("is on GPU 0, which was not selected (selected: GPU 3)"), "{lines:?}");
    assert!(
        lines[0].contains("CUDA_VISIBLE_DEVICES was overridden to \"0\" in that process (gpurun set \"3\")")
    );
}

#[test]
fn wrong_gpu_with_a_hard_coded_device() {
    let sim = Sim::new(&default_scenario());
    // The environment at exec is gpurun's, but the program picks its own device inside.
    let outcome = run(&sim, &[], &[&sim_cuda_path(&sim), "--set-visible", "6", "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("is on GPU 6, which was not selected (selected: GPU 3)"), "{lines:?}");
    assert!(lines[0].contains("likely cause: a hard-coded device index"), "{lines:?}");
}

#[test]
fn strict_ends_the_command_and_exits_125() {
    let sim = Sim::new(&default_scenario());
    // The command sleeps a minute: left running, it would end with 0, not 125.
    let outcome = run(
        &sim,
        &["--verify", "strict"],
        &["env", "CUDA_VISIBLE_DEVICES=0", &sim_cuda_path(&sim), "--sleep", "60"],
    );
    outcome
        .status(125)
        .stderr_has("gpurun: error: wrong-gpu: PID")
        .stderr_has("ending the command (--verify strict)");

    // A command that ignores SIGTERM gets SIGKILL after the grace (--kill-after here).
    let stubborn = run(
        &sim,
        &["--verify", "strict", "--kill-after", "300ms"],
        &["sh", "-c", &format!("trap '' TERM; CUDA_VISIBLE_DEVICES=0 {} --sleep 60", sim_cuda_path(&sim))],
    );
    stubborn.status(125);

    // And in warn mode the same command runs to its end.
    let warned = run(
        &sim,
        &["--verify", "warn"],
        &["env", "CUDA_VISIBLE_DEVICES=0", &sim_cuda_path(&sim), "--sleep", "0.3", "--exit", "3"],
    );
    warned.status(3).stderr_has("gpurun: warning: wrong-gpu:");
}

#[test]
fn partial_when_a_multi_gpu_job_uses_one_card() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &["--gpus", "2"], &[&sim_cuda_path(&sim), "--use", "1", "--sleep", "0.3"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("partial: 2 GPUs selected, 1 used:") && lines[0].ends_with("unused: GPU 2"),
        "{lines:?}"
    );
}

#[test]
fn not_observed_when_nothing_touches_a_gpu() {
    let sim = Sim::new(&default_scenario());
    // A quick command that ends before --verify-timeout: said, not warned; the report keeps it.
    let path = sim.dir.path().join("report.json");
    let outcome = run(&sim, &["--report-json", path.to_str().unwrap()], &["sleep", "0.3"]);
    assert_eq!(
        verdict_lines(outcome.status(0)),
        vec![
            "gpurun: not-observed: no process of the command appeared on a GPU (the command ended before \
             --verify-timeout)"
        ]
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["verification"]["verdict"], "not-observed");
    // Still running without a GPU when --verify-timeout passes: the silent CPU fallback, warned.
    let outcome = run(&sim, &["--verify-timeout", "200ms"], &["sleep", "0.6"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("gpurun: warning: not-observed: "), "{lines:?}");
}

#[test]
fn verify_timeout_gives_the_verdict_early_and_polling_goes_on() {
    let sim = Sim::new(&default_scenario());
    // Appears after the timeout; the slower sampling (every 5 s) still sees it.
    let late = format!("sleep 1; exec {} --sleep 5", sim_cuda_path(&sim));
    let outcome = run(&sim, &["--verify-timeout", "200ms"], &["sh", "-c", &late]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("not-observed:") && lines[0].contains("(within --verify-timeout)"),
        "{lines:?}"
    );
    assert!(lines[1].contains("verified:"), "{lines:?}");
}

#[test]
fn unverifiable_when_nvml_cannot_list_processes() {
    let cases = [
        ("NO_PERMISSION", "the current user does not have permission to perform this operation"),
        ("NOT_SUPPORTED", "the requested operation is not available on the target device"),
    ];
    for (error, said) in cases {
        let mut text = default_scenario();
        text.push_str(&format!(
            "\n[[error]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 3\nerror = \"{error}\"\n"
        ));
        let sim = Sim::new(&text);
        // A process list NVML will not give makes the processes unknown, not the GPU unusable...
        let outcome = run(&sim, &["--devices", "3"], &[&sim_cuda_path(&sim), "--sleep", "0.3"]);
        let lines = verdict_lines(outcome.status(0));
        assert_eq!(
            lines,
            vec![format!("gpurun: unverifiable: NVML cannot list the processes on GPU 3: {said}")]
        );
        // ...but --exclusive cannot be satisfied on it.
        run(&sim, &["--devices", "3", "--exclusive"], &["true"])
            .status(75)
            .stderr_has("GPU 3: processes unknown");
    }
}

#[test]
fn unverifiable_when_pids_come_from_another_namespace() {
    let sim = Sim::new(&scenario_file("container.toml"));
    let outcome = run(&sim, &[], &[&sim_cuda_path(&sim), "--sleep", "0.5"]);
    let lines = verdict_lines(outcome.status(0));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("unverifiable: NVML shows PID") && lines[0].contains("another PID namespace"),
        "{lines:?}"
    );
}

#[test]
fn verification_works_on_the_535_driver_quirk() {
    // Three processes on GPU 0 (two foreign, ours), read through the quirky _v3 call.
    let sim = Sim::new(&scenario_file("quirk535.toml"));
    let outcome = run(
        &sim,
        &["--devices", "0", "--report"],
        &[&sim_cuda_path(&sim), "--mem", "2GiB", "--sleep", "0.5"],
    );
    let lines = verdict_lines(outcome.status(0));
    assert!(lines[0].contains("verified:") && lines[0].contains("on GPU 0"), "{lines:?}");
    outcome.stderr_has("peak memory:  2 GiB on GPU 0\n");
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let pids: Vec<u64> = listing["gpus"][0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, vec![4190301, 4190302]);

    // A driver outside the known range with the same bug: detected from the misread itself.
    let unlabelled = Sim::new(&scenario_file("quirk535.toml").replace("535.54.03", "535.98.01"));
    let listing = unlabelled.gpurun().args(["--list", "--json"]).run().status(0).json();
    let pids: Vec<u64> = listing["gpus"][0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, vec![4190301, 4190302]);
}

#[test]
fn verify_off_checks_nothing() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(
        &sim,
        &["--verify", "off", "--report"],
        &["env", "CUDA_VISIBLE_DEVICES=0", &sim_cuda_path(&sim), "--sleep", "0.3"],
    );
    assert!(verdict_lines(outcome.status(0)).iter().all(|l| l.contains("verification: not checked")));
    outcome.stderr_has("verification: not checked: --verify off");
}

#[test]
fn report_json_has_the_documented_schema() {
    let sim = Sim::new(&default_scenario());
    let path = sim.dir.path().join("report.json");
    let outcome = run(
        &sim,
        &["--gpus", "2", "--report-json", path.to_str().unwrap()],
        &[&sim_cuda_path(&sim), "--mem", "3GiB", "--sleep", "0.5", "--exit", "4"],
    );
    outcome.status(4);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        report["selected"],
        serde_json::json!([
            {"index": 3, "uuid": "GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53", "name": "NVIDIA A100-SXM4-80GB"},
            {"index": 2, "uuid": "GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e52", "name": "NVIDIA A100-SXM4-80GB"},
        ])
    );
    assert_eq!(report["verification"]["verdict"], "verified");
    assert!(report["verification"]["detail"].as_str().unwrap().contains("on GPUs 3, 2"));
    assert_eq!((&report["requested"], &report["count"]), (&serde_json::json!("2"), &serde_json::json!(2)));
    assert_eq!(report["peak_memory_bytes"]["GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53"], 3u64 << 30);
    assert_eq!(report["peak_memory_bytes"]["GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e52"], 3u64 << 30);
    let wall = report["wall_seconds"].as_f64().unwrap();
    assert!((0.4..30.0).contains(&wall), "{wall}");
    assert_eq!(report["exit"], serde_json::json!({"code": 4, "signal": null, "signal_name": null}));
    assert_eq!(report["gpurun_exit_status"], 4);
    assert!(report["command"][0].as_str().unwrap().ends_with("sim-cuda"));
}

#[test]
fn the_report_is_written_before_gpurun_dies_by_the_childs_signal() {
    let sim = Sim::new(&default_scenario());
    let path = sim.dir.path().join("report.json");
    let mut running = sim
        .gpurun()
        .args([
            "--report",
            "--report-json",
            path.to_str().unwrap(),
            "--",
            &sim_cuda_path(&sim),
            "--sleep",
            "30",
        ])
        .command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(running.stdout.take().unwrap()), &mut line)
        .unwrap();
    common::send_signal(running.id(), libc::SIGTERM);
    assert!(wait_until(Duration::from_secs(10), || running.try_wait().unwrap().is_some()));
    let output = running.wait_with_output().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&output.status), Some(libc::SIGTERM));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["exit"]["signal"], libc::SIGTERM);
    assert_eq!(report["exit"]["signal_name"], "SIGTERM");
    assert_eq!(report["gpurun_exit_status"], 128 + libc::SIGTERM);
    assert!(String::from_utf8_lossy(&output.stderr).contains("command:      killed by SIGTERM"));
}

#[test]
fn an_unwritable_report_file_fails_before_the_command_starts() {
    let sim = Sim::new(&default_scenario());
    let marker = sim.dir.path().join("started");
    let outcome =
        run(&sim, &["--report-json", "/nonexistent/dir/report.json"], &["touch", marker.to_str().unwrap()]);
    outcome.status(125).stderr_has("cannot create the --report-json file /nonexistent/dir/report.json");
    assert!(!marker.exists());
}

#[test]
fn log_format_json_makes_every_stderr_line_an_object() {
    let sim = Sim::new(&default_scenario());
    let outcome = run(&sim, &["--log-format", "json", "--report"], &[&sim_cuda_path(&sim), "--sleep", "0.3"]);
    outcome.status(0);
    let lines: Vec<Value> = outcome
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.iter().all(|l| l["time"].is_f64() && l["level"].is_string() && l["message"].is_string()));
    assert!(lines
        .iter()
        .any(|l| l["level"] == "info" && l["message"].as_str().unwrap().starts_with("verified: PID")));
    let report = lines.iter().find(|l| l.get("report").is_some()).expect("the report line");
    assert_eq!(report["report"]["verification"]["verdict"], "verified");
    // stdout is still the command's alone.
    assert!(serde_json::from_str::<Value>(outcome.stdout.trim()).unwrap()["devices"].is_array());

    let failed = run(&sim, &["--log-format", "json", "--devices", "9"], &["true"]);
    let line: Value = serde_json::from_str(failed.status(125).stderr.trim()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["message"].as_str().unwrap().contains("--devices 9: no such GPU"));

    // One vocabulary: the level words are GPURUN_LOG's and the help's, warnings included.
    let levels = ["error", "warn", "info", "debug", "trace"];
    let chatty = run(&sim, &["--log-format", "json", "-vv", "--verify-timeout", "100ms"], &["sleep", "0.4"]);
    let words: Vec<String> = chatty
        .status(0)
        .stderr
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["level"].as_str().unwrap().to_owned())
        .collect();
    assert!(words.iter().all(|w| levels.contains(&w.as_str())), "{words:?}");
    assert!(words.iter().any(|w| w == "warn") && words.iter().any(|w| w == "debug"), "{words:?}");
    let quiet = sim
        .gpurun()
        .env("GPURUN_LOG", "warning")
        .args(["--verify-timeout", "100ms", "--", "sleep", "0.4"])
        .run();
    assert!(quiet.status(0).stderr.starts_with("gpurun: warning: not-observed"), "{quiet:?}");
    assert!(!quiet.stderr.contains("ignoring GPURUN_LOG"), "{quiet:?}");

    let text = run(&sim, &["--log-format", "text"], &["true"]);
    assert!(text.stderr.lines().all(|l| l.starts_with("gpurun: ")), "{text:?}");
}

/// Issue 36 (7): with the Xid call hanging, the NVML thread stopped and no poll came, so a job
/// on the wrong GPU under --verify strict ran to its end and exited 0. Xid monitoring is given
/// up (said), and polling goes on on a thread of its own.
#[test]
fn a_hung_xid_call_does_not_switch_off_verification() {
    for call in ["nvmlEventSetWait", "nvmlDeviceRegisterEvents"] {
        let mut scenario = default_scenario();
        scenario.push_str(&format!("\n[[hang]]\ncall = \"{call}\"\n"));
        let sim = Sim::new(&scenario);
        // The command runs a minute unless ended: left alone, it would exit 0.
        let outcome = sim
            .gpurun()
            .args(["--verify", "strict", "--"])
            .args(["env", "CUDA_VISIBLE_DEVICES=0", &sim_cuda_path(&sim), "--sleep", "60"])
            .run_unless_hung();
        outcome
            .status(125)
            .stderr_has("Xid errors are not read for the rest of the run")
            .stderr_has("gpurun: error: wrong-gpu: PID");
    }
}

/// Issue 62 (3): in a PID namespace of its own (a container), drivers since 535.113.01 list only
/// the namespace's processes; memory held by others (the host's, another container's) is in
/// use on the GPU all the same. `--list` says so, and memory that appears there during a run is
/// an intruder "outside this PID namespace" in the report.
#[test]
fn in_a_pid_namespace_memory_held_outside_is_listed_and_an_intruder() {
    if !common::pid_namespaces_allowed("in_a_pid_namespace_memory_held_outside_is_listed_and_an_intruder") {
        return;
    }
    let scenario = "driver_version = \"580.159.04\"\n\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n\
        uuid = \"GPU-62620000-0000-4000-8000-000000000000\"\npci_bus_id = \"00000000:18:00.0\"\n\
        memory_total = \"80GiB\"\nutilization_gpu = 0\nutilization_memory = 0\npower_mw = 70000\n";
    let sim = Sim::new(scenario);
    let gpurun = common::gpurun_binary();
    let cuda = common::sim_cuda().display().to_string();
    // The host's process: 2 GiB on GPU 0.
    let mut host = common::background(
        sim.gpurun_command(&cuda, &["--mem", "2GiB", "--sleep", "600", "--quiet"])
            .env("CUDA_VISIBLE_DEVICES", "0"),
    );
    let listing = || {
        sim.gpurun_command("unshare", &["--pid", "--fork", "--mount-proc", &gpurun, "--list", "--json"])
            .run()
            .json()
    };
    assert!(
        common::wait_until(common::HANG, || listing()["gpus"][0]["held_outside_namespace_bytes"]
            == 2u64 << 30),
        "{}",
        listing()
    );
    assert_eq!(listing()["gpus"][0]["processes"], serde_json::json!([]));
    let table = sim.gpurun_command("unshare", &["--pid", "--fork", "--mount-proc", &gpurun, "--list"]).run();
    table.status(0).stdout_has("2 GiB held by processes outside this PID namespace");
    // On the host the same process is listed, and nothing is outside.
    let on_host = sim.gpurun().args(["--list", "--json"]).run().json();
    assert_eq!(on_host["gpus"][0]["processes"][0]["pid"], host.0.id());
    assert_eq!(on_host["gpus"][0]["held_outside_namespace_bytes"], serde_json::Value::Null);
    common::send_signal(host.0.id(), libc::SIGTERM);
    let _ = host.0.wait();
    // During a run in the namespace, once the job is verified: 4 GiB appear outside it.
    let report = sim.dir.path().join("ns.json");
    let mut run = sim.gpurun_command(
        "unshare",
        &[
            "--pid",
            "--fork",
            "--mount-proc",
            &gpurun,
            "--report-json",
            report.to_str().unwrap(),
            "--",
            &cuda,
            "--mem",
            "1GiB",
            "--sleep",
            "9",
            "--quiet",
        ],
    );
    let log = sim.dir.path().join("ns.log");
    let mut job = common::Running(
        run.command
            .stdin(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let verified = || std::fs::read_to_string(&log).is_ok_and(|text| text.contains("gpurun: verified: "));
    assert!(common::wait_until(common::HANG, verified), "the job was never verified");
    let mut intruder = common::background(
        sim.gpurun_command(&cuda, &["--mem", "4GiB", "--sleep", "600", "--quiet"])
            .env("CUDA_VISIBLE_DEVICES", "0"),
    );
    let status = common::wait_unless_hung(&mut job.0);
    intruder.end();
    assert_eq!(status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "verified", "{json}");
    let intruders = json["intruders"].as_array().unwrap();
    assert_eq!(intruders.len(), 1, "{json}");
    assert_eq!(intruders[0]["pid"], serde_json::Value::Null, "{json}");
    assert_eq!(intruders[0]["outside_namespace"], true, "{json}");
    assert!(intruders[0]["memory_bytes"].as_u64().is_some_and(|bytes| bytes >= 3 << 30), "{json}");
}
