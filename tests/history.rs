//! Learning from each run (issue 17): the history file, `--history`, `--min-free auto` and the
//! diagnosis at exit, through the binary on the default simulated machine (free memory in GiB:
//! 0: 31.7, 1: 2.3, 2: 70.7, 3: 79.4, 4: 7.6, 5: 79.1, 6: 39.5, 7: 39.5).

use crate::common;

use std::process::Stdio;

use common::{default_scenario, sim_cuda, Sim};
use serde_json::Value;

fn sim_cuda_path() -> String {
    sim_cuda().to_string_lossy().into_owned()
}

fn history_file(sim: &Sim) -> std::path::PathBuf {
    sim.dir.path().join("state/gpurun/history.jsonl")
}

fn records(sim: &Sim) -> Vec<Value> {
    let text = std::fs::read_to_string(history_file(sim)).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

fn diagnosis_kinds(report: &Value) -> Vec<String> {
    report["diagnosis"].as_array().unwrap().iter().map(|d| d["kind"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn each_run_is_recorded_and_listed() {
    let sim = Sim::new(&default_scenario());
    let job = [sim_cuda_path(), "--mem".into(), "3GiB".into(), "--sleep".into(), "0.3".into()];
    sim.gpurun().args(["--gpus", "2", "--"]).args(&job).run().status(0);
    sim.gpurun().args(["--gpus", "0", "--", "sh", "-c", "exit 3"]).run().status(3);
    let kept = records(&sim);
    assert_eq!(kept.len(), 2);
    let first = &kept[0];
    assert_eq!(first["request"], "--gpus 2");
    assert_eq!(first["user"], whoami());
    assert_eq!(first["directory"], std::env::current_dir().unwrap().display().to_string());
    assert!(first["started"].as_f64().unwrap() > 1.7e9);
    assert_eq!(first["peak_memory_bytes"]["GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53"], 3u64 << 30);
    assert_eq!(first["verification"]["verdict"], "verified");
    assert_eq!(kept[1]["exit"]["code"], 3);

    let listed = sim.gpurun().args(["--history"]).run();
    let lines: Vec<&str> = listed.status(0).stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", listed.stdout);
    assert!(lines[0].starts_with("STARTED (UTC)"));
    assert!(
        lines[1].contains(" 3,2 ") && lines[1].contains("verified") && lines[1].contains("2:3GiB,3:3GiB"),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("sh -c 'exit 3'") && lines[2].contains(" 3 "), "{}", lines[2]);
    // A word filters by command; --json gives every record.
    let filtered = sim.gpurun().args(["--history", "exit"]).run();
    assert_eq!(filtered.status(0).stdout.lines().count(), 2);
    let json: Value =
        serde_json::from_str(&sim.gpurun().args(["--history", "--json"]).run().status(0).stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    // --json before or after the PATTERN.
    for args in [["--history", "--json", "exit"], ["--history", "exit", "--json"]] {
        let filtered: Value = serde_json::from_str(&sim.gpurun().args(args).run().status(0).stdout).unwrap();
        assert_eq!(filtered.as_array().unwrap().len(), 1, "{args:?}");
    }
    sim.gpurun()
        .args(["--history", "a", "b"])
        .run()
        .status(125)
        .stderr_has("--history takes one PATTERN (a part of the command), but got a b");
}

fn whoami() -> String {
    let out = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn no_history_and_a_history_that_cannot_be_written_do_not_touch_the_job() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun().args(["--no-history", "--gpus", "0", "--", "true"]).run().status(0);
    let config = sim.dir.path().join("config/gpurun/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "history = false\n").unwrap();
    sim.gpurun().args(["--gpus", "0", "--", "true"]).run().status(0);
    assert!(!history_file(&sim).exists());
    std::fs::remove_file(&config).unwrap();
    // The state directory is a file: the job still runs, and says nothing at the default level.
    std::fs::write(sim.dir.path().join("state"), "").unwrap();
    let outcome = sim.gpurun().args(["--gpus", "0", "--", "echo", "ran"]).run();
    assert_eq!(outcome.status(0).stdout, "ran\n");
    assert!(!outcome.stderr.contains("history"), "{}", outcome.stderr);
}

#[test]
fn concurrent_runs_leave_whole_records() {
    let sim = Sim::new(&default_scenario());
    let children: Vec<_> = (0..50)
        .map(|n| {
            let mut command =
                sim.gpurun().args(["--gpus", "0", "--", "true"]).args([format!("run-{n}")]).command;
            command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let kept = records(&sim);
    assert_eq!(kept.len(), 50);
    let mut runs: Vec<&str> = kept.iter().map(|r| r["command"][1].as_str().unwrap()).collect();
    runs.sort_unstable();
    runs.dedup();
    assert_eq!(runs.len(), 50);
}

#[test]
fn min_free_auto_sizes_from_the_same_commands_peaks() {
    let sim = Sim::new(&default_scenario());
    let job = [sim_cuda_path(), "--mem".into(), "36GiB".into(), "--sleep".into(), "0.3".into()];
    // No history yet: no memory filter, and it says so.
    let first = sim.gpurun().args(["--dry-run", "--json", "--min-free", "auto", "--"]).args(&job).run();
    let plan = first.status(0).json();
    assert!(plan["min_free"].as_str().unwrap().contains("no memory filter"), "{plan}");
    first.stderr_has("--min-free auto: no earlier run of this command in ");
    // ...or the fallback size.
    let fallback =
        sim.gpurun().args(["--dry-run", "--json", "--min-free", "auto:75G", "--"]).args(&job).run();
    assert_eq!(fallback.status(0).json()["count"], 1);
    assert_eq!(fallback.json()["gpus"][2]["eligible"], false, "70.7 GiB free < 75 GiB");

    sim.gpurun().args(["--"]).args(&job).run().status(0);
    // 36 GiB + 10% = 39.6 GiB: GPU 0 (31.7 GiB free) and the 40 GiB cards (39.5) no longer qualify.
    let sized = sim.gpurun().args(["--dry-run", "--min-free", "auto", "--gpus", "1", "--"]).args(&job).run();
    sized.status(0).stdout_has("min-free: auto: 39.6 GiB = peak 36 GiB of 1 earlier run + 10%\n");
    sized.stderr_has("--min-free auto: 39.6 GiB = peak 36 GiB of 1 earlier run + 10%");
    let listing =
        sim.gpurun().args(["--dry-run", "--json", "--min-free", "auto", "--"]).args(&job).run().json();
    let eligible = common::eligible(&listing);
    assert_eq!(eligible, [2, 3, 5]);
    // Another command in the same directory has no history.
    let other = sim.gpurun().args(["--dry-run", "--min-free", "auto", "--", "python3", "other.py"]).run();
    other.status(0).stdout_has("no memory filter");
    // The report of an auto-sized run says where the figure came from; both runs are listed.
    let path = sim.dir.path().join("report.json");
    sim.gpurun()
        .args(["--min-free", "auto", "--report-json", path.to_str().unwrap(), "--"])
        .args(&job)
        .run()
        .status(0);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["min_free"], "auto: 39.6 GiB = peak 36 GiB of 1 earlier run + 10%");
    assert_eq!(records(&sim).len(), 2);
}

#[test]
fn each_diagnosis_fires_on_its_case_and_none_on_a_clean_run() {
    let sim = Sim::new(&default_scenario());
    let report_of = |args: &[&str], command: &[&str]| -> (Value, String) {
        let path = sim.dir.path().join("report.json");
        let outcome = sim
            .gpurun()
            .args(["--report-json", path.to_str().unwrap()])
            .args(args)
            .args(["--"])
            .args(command)
            .run();
        let report = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        (report, outcome.stderr)
    };
    let cuda = sim_cuda_path();
    // Clean: 4 GiB on a card with 79 GiB free, 8 GiB asked.
    let (clean, stderr) = report_of(&["--min-free", "8G"], &[&cuda, "--mem", "4GiB", "--sleep", "0.3"]);
    assert_eq!(diagnosis_kinds(&clean), Vec::<String>::new());
    assert!(!stderr.contains("warning"), "{stderr}");

    let (near, stderr) = report_of(&[], &[&cuda, "--mem", "78GiB", "--sleep", "0.3", "--exit", "1"]);
    assert_eq!(diagnosis_kinds(&near), ["near-oom"]);
    assert_eq!(near["diagnosis"][0]["gpu"], 3);
    assert!(stderr.contains("gpurun: warning: near-oom: peak 78 GiB of the 79.4 GiB free at launch on GPU 3, and the command failed"), "{stderr}");
    // Issue 43 (7): the advice was --min-free 88G on 80 GiB cards, which the machine refuses
    // with 125; it now says no card here is bigger.
    assert!(stderr.contains("no card here has more room (the most any can have free is "), "{stderr}");
    assert!(!stderr.contains("--min-free 88G"), "{stderr}");

    let (idle, _) = report_of(&["--gpus", "2"], &[&cuda, "--use", "1", "--sleep", "0.5"]);
    assert_eq!(diagnosis_kinds(&idle), ["idle-gpu"]);
    assert_eq!(idle["diagnosis"][0]["gpu"], 2);

    let (cpu, stderr) = report_of(&["--verify-timeout", "200ms"], &["sleep", "0.6"]);
    assert_eq!(diagnosis_kinds(&cpu), ["cpu-fallback"]);
    assert_eq!(cpu["diagnosis"][0]["gpu"], Value::Null);
    assert!(stderr.contains("gpurun: warning: cpu-fallback: "), "{stderr}");

    let (over, _) = report_of(&["--min-free", "40G"], &[&cuda, "--mem", "2GiB", "--sleep", "0.3"]);
    assert_eq!(diagnosis_kinds(&over), ["over-reserved"]);
    assert!(over["diagnosis"][0]["detail"].as_str().unwrap().ends_with("next time ask for --min-free 3G"));
    // --exclusive asks for the card unshared, not for its memory: the README's first example
    // (`gpurun --exclusive --report -- sim-cuda --sleep 2`) warns of nothing.
    let (unshared, stderr) = report_of(&["--exclusive"], &[&cuda, "--mem", "1GiB", "--sleep", "0.3"]);
    assert_eq!(diagnosis_kinds(&unshared), Vec::<String>::new());
    assert!(!stderr.contains("warning"), "{stderr}");

    // The history keeps them too, and --report prints them.
    assert!(records(&sim).iter().any(|r| diagnosis_kinds(r) == ["over-reserved"]));
    let shown = sim
        .gpurun()
        .args(["--report", "--min-free", "40G", "--", &cuda, "--mem", "2GiB", "--sleep", "0.3"])
        .run();
    shown.status(0).stderr_has("  diagnosis:    over-reserved: --min-free kept 40 GiB of GPU 3 from others");
}
