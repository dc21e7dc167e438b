//! MIG devices as devices of their own (issue 15), through the binary on a simulated machine
//! with two partitioned GPUs and two whole ones (tests/scenarios/mig.toml):
//! GPU 0 whole, idle; GPU 1 in MIG mode (pending: disabled): 1:0 3g.40gb with a 30 GiB process,
//! 1:1 2g.20gb, 1:2 1g.10gb; GPU 2 in MIG mode: 2:0 4g.40gb, 2:1 3g.40gb; GPU 3 whole, busy.

use crate::common;

use std::collections::BTreeMap;
use std::process::Stdio;

use common::{scenario_file, sim_cuda, Sim};
use serde_json::{json, Value};

const MIG_1_0: &str = "MIG-a1a10000-0000-4000-8000-000000000001";
const MIG_1_1: &str = "MIG-a1a20000-0000-4000-8000-000000000002";
const MIG_2_0: &str = "MIG-b2b10000-0000-4000-8000-000000000004";
const MIG_2_1: &str = "MIG-b2b20000-0000-4000-8000-000000000005";

fn mig_machine() -> Sim {
    Sim::new(&scenario_file("mig.toml"))
}

fn exports(sim: &Sim, env: &[(&str, &str)], args: &[&str]) -> BTreeMap<String, String> {
    let mut run = sim.gpurun().args(["--export"]).args(args);
    for (name, value) in env {
        run = run.env(name, value);
    }
    let outcome = run.run();
    outcome
        .status(0)
        .stdout
        .lines()
        .map(|line| {
            let (name, value) = line.strip_prefix("export ").unwrap().split_once('=').unwrap();
            (name.to_owned(), value.trim_matches('\'').to_owned())
        })
        .collect()
}

#[test]
fn list_json_reports_every_mig_device_under_its_gpu() {
    let sim = mig_machine();
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpus = listing["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4, "MIG devices are not GPUs of their own");
    assert_eq!((&gpus[0]["mig_enabled"], &gpus[0]["mig_devices"]), (&json!(false), &json!([])));
    assert_eq!((&gpus[1]["mig_enabled"], &gpus[1]["mig_pending"]), (&json!(true), &json!(false)));
    assert_eq!(gpus[1]["eligible"], false);
    assert_eq!(gpus[1]["reasons"], json!(["in MIG mode: its MIG devices are the devices"]));
    let devices = gpus[1]["mig_devices"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    let busy = &devices[0];
    assert_eq!(busy["uuid"], MIG_1_0);
    assert_eq!(busy["name"], "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
    assert_eq!(busy["profile"], "3g.40gb");
    assert_eq!(
        (&busy["mig_index"], &busy["gpu_instance_id"], &busy["compute_instance_id"]),
        (&json!(0), &json!(1), &json!(0))
    );
    let total = (39.5 * (1u64 << 30) as f64) as u64;
    assert_eq!(
        busy["memory"],
        json!({"total_bytes": total, "reserved_bytes": 0, "used_bytes": 30u64 << 30, "free_bytes": total - (30u64 << 30)})
    );
    assert_eq!(busy["processes"][0]["pid"], 4191001);
    assert_eq!(busy["processes"][0]["used_bytes"], 30u64 << 30);
    assert_eq!(busy["eligible"], true);
    assert_eq!(devices[2]["gpu_instance_id"], 13);
    assert_eq!(gpus[2]["mig_devices"].as_array().unwrap().len(), 2);
    // The table shows them under their GPU.
    let table = sim.gpurun().args(["--list"]).run();
    table.status(0).stdout_has("\n1:0  MIG 3g.40gb (GI 1)").stdout_has("\n2:1  MIG 3g.40gb (GI 2)");
}

#[test]
fn a_one_device_request_lands_on_a_mig_device_and_is_verified() {
    let sim = mig_machine();
    let cuda = sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args([
            "--gpus",
            "1",
            "--min-free",
            "8G",
            "--mig",
            "only",
            "--report",
            "--",
            &cuda,
            "--mem",
            "2GiB",
            "--sleep",
            "0.5",
        ])
        .run();
    outcome
        .status(0)
        .stderr_has("verified: PID ")
        .stderr_has(") on MIG 2:0")
        .stderr_has("peak memory:  2 GiB on MIG 2:0");
    let seen: Value = serde_json::from_str(outcome.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(seen["env"]["CUDA_VISIBLE_DEVICES"], MIG_2_0);
    assert_eq!(seen["devices"][0]["uuid"], MIG_2_0, "the simulated CUDA program used the MIG device");
    let plan = sim
        .gpurun()
        .args(["--dry-run", "--json", "--mig", "only", "--min-free", "8G"])
        .run()
        .status(0)
        .json();
    assert_eq!(plan["selected"], json!([{"index": 2, "mig_index": 0, "uuid": MIG_2_0}]));
    let env = exports(&sim, &[], &["--mig", "only", "--min-free", "8G"]);
    assert_eq!((env["CUDA_VISIBLE_DEVICES"].as_str(), env["GPURUN_GPUS"].as_str()), (MIG_2_0, "2"));
    assert_eq!(env["GPURUN_GPU_UUIDS"], MIG_2_0);
    // --model matches a profile; --devices takes MIG UUID prefixes; pack takes the smallest fit.
    assert_eq!(exports(&sim, &[], &["--model", "2g.20gb"])["CUDA_VISIBLE_DEVICES"], MIG_1_1);
    assert_eq!(exports(&sim, &[], &["--devices", "MIG-b2b2"])["CUDA_VISIBLE_DEVICES"], MIG_2_1);
    assert_eq!(
        exports(&sim, &[], &["--mig", "only", "--policy", "pack", "--min-free", "15G"])
            ["CUDA_VISIBLE_DEVICES"],
        MIG_1_1
    );
    // Without --mig only, the whole idle GPU has the most free memory.
    assert_eq!(exports(&sim, &[], &[])["CUDA_VISIBLE_DEVICES"], "0");
    // --mig never: a profile only MIG devices have matches nothing that may be given.
    assert_eq!(exports(&sim, &[], &["--mig", "never", "--exclude", "0"])["CUDA_VISIBLE_DEVICES"], "3");
    sim.gpurun()
        .args(["--export", "--mig", "never", "--model", "2g.20gb"])
        .run()
        .status(125)
        .stderr_has("--model 2g.20gb: 0 of the GPUs gpurun may use match");
}

#[test]
fn requests_mig_cannot_meet_are_refused_with_the_reason() {
    let sim = mig_machine();
    sim.gpurun()
        .args(["--gpus", "2", "--mig", "only", "--wait", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--gpus 2 --mig only: one process can use only one MIG device");
    sim.gpurun()
        .args(["--visible-as", "index", "--mig", "only", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--visible-as index --mig only: CUDA takes a MIG device only by its MIG- UUID");
    // Issue 43 (6): the refusal names --max-util, not the one-device rule.
    sim.gpurun()
        .args(["--mig", "only", "--max-util", "50", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--mig only --max-util 50: a MIG device has no utilization counters");
    // --max-util cannot be checked on MIG: said per device.
    let listing = sim.gpurun().args(["--list", "--json", "--max-util", "50", "--mig", "only"]).run().json();
    let reasons = &listing["gpus"][2]["mig_devices"][0]["reasons"];
    assert!(
        reasons[0].as_str().unwrap().contains("--max-util cannot be checked on a MIG device"),
        "{reasons}"
    );
}

#[test]
fn inherited_mig_entries_are_chosen_within() {
    let sim = mig_machine();
    let inherited = format!("{MIG_1_1},{MIG_2_1}");
    let env = [("CUDA_VISIBLE_DEVICES", inherited.as_str())];
    // Both allowed: the one with more free memory.
    assert_eq!(exports(&sim, &env, &[])["CUDA_VISIBLE_DEVICES"], MIG_2_1);
    // Never widened: 30 GiB free leaves only 2:1, 50 GiB none of them.
    assert_eq!(exports(&sim, &env, &["--min-free", "30G"])["CUDA_VISIBLE_DEVICES"], MIG_2_1);
    let mut run = sim.gpurun().args(["--export", "--min-free", "50G"]);
    run = run.env("CUDA_VISIBLE_DEVICES", &inherited);
    run.run().status(125).stderr_has("--min-free");
}

#[test]
fn a_process_on_another_mig_device_is_wrong_gpu_naming_it() {
    let sim = mig_machine();
    let cuda = sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args([
            "--mig",
            "only",
            "--devices",
            MIG_2_0,
            "--",
            &cuda,
            "--set-visible",
            MIG_2_1,
            "--sleep",
            "0.5",
        ])
        .run();
    outcome
        .status(0)
        .stderr_has("wrong-gpu: PID ")
        .stderr_has(") is on MIG 2:1, which was not selected (selected: MIG 2:0)");
}

#[test]
fn concurrent_exclusive_launches_never_share_a_mig_device() {
    let sim = mig_machine();
    let log = sim.dir.path().join("runs.log");
    let script = format!(
        "a=$(date +%s.%N); sleep 0.2; echo \"$CUDA_VISIBLE_DEVICES $a $(date +%s.%N)\" >> {}",
        log.display()
    );
    let children: Vec<_> = (0..20)
        .map(|_| {
            let mut command = sim
                .gpurun()
                .args(["-q", "--mig", "only", "--exclusive", "--wait=60s", "--", "sh", "-c", &script])
                .command;
            command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let runs: Vec<(String, f64, f64)> = text
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            (words[0].to_owned(), words[1].parse().unwrap(), words[2].parse().unwrap())
        })
        .collect();
    assert_eq!(runs.len(), 20);
    assert!(
        runs.iter().all(|(uuid, ..)| uuid.starts_with("MIG-") && uuid != MIG_1_0),
        "the busy 3g.40gb is not exclusive"
    );
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert!(a.0 != b.0 || a.2 <= b.1 || b.2 <= a.1, "two runs shared {}: {a:?} {b:?}", a.0);
        }
    }
    let used: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    assert!(used.len() >= 2, "the launches spread over the free MIG devices: {used:?}");
}

#[test]
fn doctor_names_a_pending_mode_and_a_gpu_in_mig_mode_without_devices() {
    let sim = mig_machine();
    sim.gpurun()
        .args(["--doctor"])
        .run()
        .stdout_has("GPU 1: MIG mode is enabled but disabled is pending: the change takes effect at the next GPU reset")
        .stdout_has(&format!("MIG 2:1: MIG 3g.40gb ({MIG_2_1})"));
    let empty = Sim::new(&scenario_file("mixed8.toml"));
    empty
        .gpurun()
        .args(["--doctor"])
        .run()
        .stdout_has("is in MIG mode with no MIG device: nothing can run on it");
    let inherited = sim.gpurun().env("CUDA_VISIBLE_DEVICES", MIG_1_1).args(["--doctor"]).run();
    inherited.stdout_has("gpurun will choose only among MIG 1:1 (CUDA_VISIBLE_DEVICES=MIG-a1a2");
}

/// Issue 43 (2): "two launches never get the same slice" held only with --exclusive; without
/// it a second --mig only launch got a MIG device leased and in use. A MIG device is a device
/// of its own: one lease, one job.
#[test]
fn a_leased_mig_device_goes_to_no_second_launch_without_exclusive() {
    let sim = mig_machine();
    let holder = common::background(sim.gpurun().args(["-q", "--devices", MIG_2_0, "--", "sleep", "30"]));
    let leased = || common::leases_in(&sim.lock_dir()) > 0;
    assert!(common::wait_until(std::time::Duration::from_secs(20), leased));
    let same = sim.gpurun().args(["--devices", MIG_2_0, "--", "true"]).run();
    same.status(75).stderr_has("a MIG device leased by gpurun PID");
    let other = exports(&sim, &[], &["--mig", "only"]);
    assert_ne!(other["CUDA_VISIBLE_DEVICES"], MIG_2_0, "{other:?}");
    drop(holder);
}
