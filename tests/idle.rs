//! Idle GPUs held (issue 52): `--idle-warn` says once that a chosen GPU has sat at 0%
//! utilization, the report and the history keep an `idle` diagnosis with the minutes, and the
//! house rule `idle-action = "end"` ends such a run with 124. The default scenario's GPU 3 reads
//! 0% utilization, its GPU 2 12% (someone's work: not idle).

use crate::common;

use common::{default_scenario, sim_cuda, Sim};

fn idle_diagnoses(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "idle").cloned().collect()
}

#[test]
fn a_gpu_held_at_zero_utilization_is_warned_of_once_and_diagnosed() {
    let sim = Sim::new(&default_scenario());
    let report = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--idle-warn", "2s", "--report-json"])
        .arg(&report)
        .arg("--")
        .arg(sim_cuda())
        .args(["--mem", "1GiB", "--sleep", "7"])
        .run();
    outcome.status(0).stderr_has("gpurun: warning: GPU 3 has been held at 0% utilization for ");
    assert_eq!(outcome.stderr.matches("held at 0% utilization").count(), 1, "once: {}", outcome.stderr);
    assert!(
        outcome.stderr.contains("s (--idle-warn 2s): end the command or let others use it"),
        "{}",
        outcome.stderr
    );
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let idle = idle_diagnoses(&json);
    assert_eq!(idle.len(), 1, "{json}");
    assert_eq!(idle[0]["gpu"], 3);
    // Past the 2 s mark, and no longer than the run itself (both from the report, not a clock).
    let minutes = idle[0]["minutes"].as_f64().unwrap();
    let wall = json["wall_seconds"].as_f64().unwrap() / 60.0;
    assert!(minutes > 0.0 && minutes <= wall + 0.05, "{minutes} min of a {wall} min run");
    let history = sim.gpurun().args(["--history", "--json"]).run().status(0).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(idle_diagnoses(&last).len(), 1, "{last}");
}

#[test]
fn a_busy_gpu_and_idle_warn_off_say_nothing() {
    let sim = Sim::new(&default_scenario());
    // GPU 2 is at 12%: busy, whoever's the work is.
    let busy = sim
        .gpurun()
        .args(["--devices", "2", "--idle-warn", "2s", "--report"])
        .args(["--", "sleep", "6"])
        .run();
    busy.status(0);
    assert!(!busy.stderr.contains("0% utilization"), "{}", busy.stderr);
    let off = sim.gpurun().args(["--idle-warn", "off", "--report", "--", "sleep", "6"]).run();
    off.status(0).stderr_has("GPU 3");
    assert!(!off.stderr.contains("0% utilization"), "{}", off.stderr);
    sim.gpurun()
        .args(["--idle-warn", "soon", "--", "true"])
        .run()
        .status(125)
        .stderr_has("\"soon\" is not a duration")
        .stderr_has("or off");
}

#[test]
fn the_house_rule_idle_action_end_ends_an_idle_run_with_124() {
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "[limits]\nidle-limit = \"2s\"\nidle-action = \"end\"\n").unwrap();
    let report = sim.dir.path().join("report.json");
    // 124 is the rule's end: a `sleep 60` that ran out would exit 0.
    let outcome = sim.gpurun().arg("--report-json").arg(&report).args(["--", "sleep", "60"]).run();
    outcome
        .status(124)
        .stderr_has("GPU 3 was held at 0% utilization for ")
        .stderr_has("(the house rule idle-limit = 2s, idle-action = end (")
        .stderr_has("): the command was sent SIGTERM");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let idle = idle_diagnoses(&json);
    assert!(idle[0]["detail"].as_str().unwrap().contains("the command was sent SIGTERM"), "{json}");
    assert_eq!(json["gpurun_exit_status"], 124);
    // A user's --signal is not the rule's: SIGTERM all the same (issue 65).
    sim.gpurun()
        .args(["--time-limit", "1h", "--signal", "WINCH", "--", "sleep", "60"])
        .run()
        .status(124)
        .stderr_has("): the command was sent SIGTERM; SIGKILL follows in 10 s");
    // A busy GPU runs on; nothing can watch a run under --verify off or --exec, so they are refused.
    sim.gpurun().args(["-q", "--devices", "2", "--", "sleep", "5"]).run().status(0);
    for escape in ["--verify=off", "--exec"] {
        sim.gpurun().args([escape, "--", "true"]).run().status(125).stderr_has("needs gpurun to watch");
    }
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("idle-limit = 2s, idle-action = end");
}
