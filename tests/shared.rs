//! Shared servers (issue 18): who holds what, who waits and why, house rules, hooks. Through
//! the binary on simulated machines; a second user through `setpriv`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{background, default_scenario, gpurun_binary, scenario_file, sim_cuda, wait_until, Sim};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(20);

fn leases(sim: &Sim) -> usize {
    common::leases_in(&sim.lock_dir())
}

/// gpurun as another user (uid 4242), or None where setpriv cannot switch users.
fn as_other(sim: &Sim, args: &[&str]) -> Option<common::Outcome> {
    for path in [sim.dir.path().to_owned(), sim.lock_dir()] {
        std::fs::create_dir_all(&path).unwrap();
    }
    std::fs::set_permissions(sim.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let binary = gpurun_binary();
    let mut words = vec!["--reuid=4242", "--regid=4242", "--clear-groups", binary.as_str()];
    words.extend_from_slice(args);
    let outcome = sim.gpurun_command("setpriv", &words).run();
    if outcome.stderr.contains("setpriv:") {
        common::skip("a second user", &outcome.stderr);
        return None;
    }
    Some(outcome)
}

#[test]
fn list_says_which_processes_came_through_gpurun() {
    let sim = Sim::new(&default_scenario());
    let cuda = sim_cuda().to_string_lossy().into_owned();
    let _held = background(sim.gpurun().args(["--devices", "3", "--", &cuda, "--sleep", "10"]));
    let listing = || sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert!(wait_until(LONG, || listing()["gpus"][3]["processes"].as_array().is_some_and(|p| !p.is_empty())));
    let json = listing();
    let holder = json["reservations"][0]["pid"].as_u64().unwrap();
    let ours = &json["gpus"][3]["processes"][0];
    assert_eq!(ours["reservation"], holder, "{json}");
    assert_eq!(json["reservations"][0]["processes"], serde_json::json!([ours["pid"]]));
    // The scenario's own processes were started by hand or another tool.
    assert_eq!(json["gpus"][1]["processes"][0]["reservation"], Value::Null);
    let table = sim.gpurun().args(["--list"]).run();
    table.status(0).stdout_has("[not via gpurun]").stdout_has(&format!("[gpurun PID {holder}]"));
}

#[test]
fn another_user_sees_the_queue_and_why_each_waits() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let _holder = background(sim.gpurun().args(["--exclusive", "--gpus", "2", "--", "sleep", "10"]));
    assert!(wait_until(LONG, || leases(&sim) == 2));
    let _waiter = background(sim.gpurun().args(["--exclusive", "--wait", "--", "true"]));
    let tickets = || {
        std::fs::read_dir(sim.lock_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ticket."))
            .count()
    };
    assert!(wait_until(LONG, || tickets() == 1));
    let Some(listing) = as_other(&sim, &["--list"]) else { return };
    listing
        .status(0)
        .stdout_has("waiting (first come, first served):")
        .stdout_has("  1. root PID ")
        .stdout_has(
            ": --exclusive --wait: needs 1 GPU, exclusive: GPU 0 reserved exclusively by gpurun PID ",
        );
    let json = as_other(&sim, &["--list", "--json"]).unwrap().status(0).json();
    let waiter = &json["waiters"][0];
    assert_eq!(waiter["position"], 1);
    assert_eq!(waiter["request"], "--exclusive --wait");
    assert!(waiter["reason"]
        .as_str()
        .unwrap()
        .starts_with("needs 1 GPU, exclusive: GPU 0 reserved exclusively"));
}

#[test]
fn the_waiters_own_progress_line_says_why() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let _holder = background(sim.gpurun().args(["--exclusive", "--gpus", "2", "--", "sleep", "3"]));
    assert!(wait_until(LONG, || leases(&sim) == 2));
    let waited = sim.gpurun().args(["--exclusive", "--wait=1s", "--", "true"]).run();
    waited
        .status(75)
        .stderr_has("waiting 0 s: GPU 0 reserved exclusively by gpurun PID ")
        .stderr_has("; needs 1 GPU, exclusive; 0 qualify now, 0 ahead");
}

fn house_rules(sim: &Sim, rules: &str) {
    std::fs::write(sim.system_file(), format!("[limits]\n{rules}")).unwrap();
}

#[test]
fn max_gpus_per_user_stops_a_third_gpu_of_one_user_only() {
    let sim = Sim::new(&default_scenario());
    house_rules(&sim, "max-gpus-per-user = 2\n");
    let _two = background(sim.gpurun().args(["--gpus", "2", "--", "sleep", "10"]));
    assert!(wait_until(LONG, || leases(&sim) == 2));
    sim.gpurun()
        .args(["--", "true"])
        .run()
        .status(75)
        .stderr_has(
            "not enough GPUs now: you hold 2 reserved GPUs, and the house rule is max-gpus-per-user = 2 (",
        )
        .stderr_has("system.toml [limits])");
    // A request alone over the rule can never start.
    sim.gpurun()
        .args(["--gpus", "3", "--wait", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--gpus 3: the house rule max-gpus-per-user = 2");
    // A range takes what the rule leaves.
    house_rules(&sim, "max-gpus-per-user = 3\n");
    let plan = sim.gpurun().args(["--gpus", "1-4", "--report", "--", "true"]).run();
    plan.status(0).stderr_has("GPUs:         1 of 1-4 requested");
    // Another user is not held back by this one's GPUs.
    house_rules(&sim, "max-gpus-per-user = 2\n");
    if let Some(other) = as_other(&sim, &["--", "true"]) {
        other.status(0);
    }
    // The rules are shown, and a user file cannot hold them.
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("house rules: max-gpus-per-user = 2 (");
    let user = sim.dir.path().join("config/gpurun/config.toml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(&user, "[limits]\nmax-gpus-per-user = 99\n").unwrap();
    sim.gpurun().args(["--list"]).run().status(125).stderr_has("[limits] belongs in the system file");
}

#[test]
fn max_wait_caps_wait_and_default_min_free_is_a_floor() {
    let sim = Sim::new(&default_scenario());
    house_rules(&sim, "max-wait = \"1s\"\ndefault-min-free = \"75G\"\n");
    // 75 GiB free: GPUs 3 and 5 only; three can never... but two more can't be had now either.
    let _holder = background(sim.gpurun().args(["--devices", "3,5", "--gpus", "2", "--", "sleep", "600"]));
    assert!(wait_until(LONG, || leases(&sim) == 2));
    // Uncapped, --wait would wait for the holder's ten minutes.
    let waited = sim.gpurun().args(["--wait", "--", "true"]).run_unless_hung();
    waited.status(75).stderr_has("--wait limited by the house rule max-wait = 1s (");
    // --min-free 8G cannot loosen the 75 GiB floor.
    let plan = sim.gpurun().args(["--dry-run", "--json", "--min-free", "8G", "--no-lock"]).run();
    plan.stderr_has("--min-free is 75 GiB by the house rule default-min-free = 75 GiB");
    let eligible = common::eligible(&plan.json());
    assert_eq!(eligible, [3, 5]);
    // --no-config does not drop them.
    sim.gpurun()
        .args(["--no-config", "--dry-run", "--no-lock"])
        .run()
        .stderr_has("default-min-free = 75 GiB");
}

#[test]
fn hooks_get_the_report_and_the_status_and_never_change_it() {
    let sim = Sim::new(&default_scenario());
    let dir = sim.dir.path().to_str().unwrap().to_owned();
    let on_start =
        format!("cat > {dir}/start.json; echo \"$GPURUN_GPUS\" > {dir}/start.env; echo from-the-hook");
    let on_exit = format!("cat > {dir}/end.json; echo \"$GPURUN_EXIT_STATUS $GPURUN_VERDICT $GPURUN_GPUS\" > {dir}/end.env; exit 9");
    let outcome = sim
        .gpurun()
        .args(["--on-start", &on_start, "--on-exit", &on_exit, "--", "sh", "-c", "sleep 0.3; exit 3"])
        .run();
    outcome
        .status(3)
        .stderr_has("gpurun: warning: --on-exit hook exited with status 9")
        .stderr_has("from-the-hook");
    assert!(!outcome.stdout.contains("from-the-hook"), "stdout stays the command's");
    sim.gpurun()
        .args(["--exec", "--on-exit", "true", "--gpus", "0", "--", "true"])
        .run()
        .status(0)
        .stderr_has("--on-start and --on-exit do not run with --exec");
    let start: Value =
        serde_json::from_str(&std::fs::read_to_string(sim.dir.path().join("start.json")).unwrap()).unwrap();
    assert_eq!(start["command"], serde_json::json!(["sh", "-c", "sleep 0.3; exit 3"]));
    assert_eq!(start["selected"][0]["index"], 3);
    assert!(start["pid"].as_u64().unwrap() > 0);
    assert_eq!(std::fs::read_to_string(sim.dir.path().join("start.env")).unwrap(), "3\n");
    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(sim.dir.path().join("end.json")).unwrap()).unwrap();
    assert_eq!(end["exit"]["code"], 3);
    assert_eq!(std::fs::read_to_string(sim.dir.path().join("end.env")).unwrap(), "3 not-observed 3\n");
}

#[test]
fn a_hook_that_hangs_is_killed_and_the_status_kept() {
    let sim = Sim::new(&default_scenario());
    // The hook would run for five minutes: killed at its limit, it ends before the hang bound.
    let outcome = sim
        .gpurun()
        .args(["--on-exit", "sleep 300", "--gpus", "0", "--", "sh", "-c", "exit 4"])
        .run_unless_hung();
    outcome.status(4).stderr_has("gpurun: warning: --on-exit hook still running after 30 s: killing it");
    // A start hook never holds the command back: this one waits for a file that the command
    // itself writes, so a command held until the hook ended would never run.
    let released = sim.dir.path().join("released");
    let hook = format!("while [ ! -e {0} ]; do sleep 0.05; done; echo hook > {0}.seen", released.display());
    let command = format!("touch {}", released.display());
    sim.gpurun()
        .args(["--on-start", &hook, "--gpus", "0", "--", "sh", "-c", &command])
        .run_unless_hung()
        .status(0);
    assert!(released.exists());
}

/// Issue 43 (1): house rules did not reach --dry-run and --export: with max-gpus-per-user = 2
/// a launch of --gpus 3 exits 125 while the dry run showed three GPUs, a range's dry run showed
/// four where the launch got two, and while the user held two a launch exited 75 while the dry
/// run said GPU 0, exit 0. A dry run and an export show what the launch would get, rules
/// included, with the same exit status.
#[test]
fn dry_runs_and_exports_obey_the_house_rules_as_the_launch_does() {
    let sim = Sim::new(&default_scenario());
    house_rules(&sim, "max-gpus-per-user = 2\n");
    for mode in ["--dry-run", "--export"] {
        sim.gpurun()
            .args([mode, "--gpus", "3"])
            .run()
            .status(125)
            .stderr_has("the house rule max-gpus-per-user = 2");
    }
    let range = sim.gpurun().args(["--dry-run", "--json", "--gpus", "1-4", "--", "true"]).run();
    assert_eq!(range.status(0).json()["count"], 2, "{}", range.stdout);
    let _two = background(sim.gpurun().args(["--gpus", "2", "--", "sleep", "10"]));
    assert!(wait_until(LONG, || leases(&sim) == 2));
    for mode in ["--dry-run", "--export"] {
        sim.gpurun()
            .args([mode])
            .run()
            .status(75)
            .stderr_has("you hold 2 reserved GPUs, and the house rule is");
    }
    sim.gpurun().args(["--", "true"]).run().status(75);
}
