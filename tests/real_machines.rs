//! Real machines replayed (DESIGN 12, issue 61): each real GPU machine the project has met is a
//! scenario built from its capture (tests/real-gpu/), and the whole flow runs on it through the
//! binary: list, select, launch, verify, the report with its receipt, a queue of two jobs, and
//! `--doctor`. The capture is the authority: what `--list --json` says on the replay must equal
//! what gpurun read on the real machine, save what the real run got wrong.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{scenario_file, sim_cuda, wait_until, Sim};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(30);

/// One capture's file, as committed beside the tests.
fn captured(machine: &str, file: &str) -> String {
    let path = format!("{}/tests/real-gpu/{machine}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn h200() -> Sim {
    Sim::new(&scenario_file("real_h200_vm.toml"))
}

#[test]
fn the_h200_replay_lists_what_the_real_driver_answered() {
    let sim = h200();
    let replay = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let real: Value = serde_json::from_str(&captured("h200-2026-12-04", "gpurun-list.json")).unwrap();
    for key in ["driver_version", "cuda_driver_version", "confidential_computing"] {
        assert_eq!(replay[key], real[key], "{key}");
    }
    let (ours, theirs) = (&replay["gpus"][0], &real["gpus"][0]);
    // Everything gpurun 0.1.0 read right on the real H200 (equal to nvidia-smi -q's values).
    for key in [
        "uuid",
        "name",
        "pci_bus_id",
        "memory",
        "utilization",
        "temperature_c",
        "power_watts",
        "compute_mode",
        "persistence_mode",
        "mig_enabled",
        "mig_pending",
        "numa_node",
        "gpu_numa_id",
        "cpus",
        "unified_memory",
        "processes",
        "mps",
    ] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    // What it got wrong: SUCCESS with fabric state NOT_SUPPORTED is no fabric, not a GPU the
    // fabric manager failed to register (the real run refused every job for it).
    assert_eq!(theirs["health"]["state"], "unhealthy", "the capture is the old reading");
    assert_eq!(ours["fabric"], Value::Null);
    assert_eq!(ours["health"]["state"], "ok", "{}", ours["health"]);
    assert_eq!(ours["eligible"], true, "{}", ours["reasons"]);
    let table = sim.gpurun().args(["--list"]).run();
    table.status(0).stdout_has("  0  NVIDIA H200");
    assert!(
        !table.stdout.contains("not eligible") && !table.stdout.contains("unhealthy"),
        "{}",
        table.stdout
    );
}

#[test]
fn the_h200_replay_runs_a_job_verified_with_its_receipt() {
    let sim = h200();
    let dry = sim.gpurun().args(["--dry-run", "--json", "--gpus", "1", "--min-free", "100G"]).run();
    assert_eq!(dry.status(0).json()["selected"][0]["uuid"], "GPU-cd06c06c-074a-3c95-6bf4-a31a37119cef");
    let report = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--gpus", "1", "--min-free", "100G", "--report", "--report-json"])
        .arg(&report)
        .arg("--")
        .arg(sim_cuda())
        .args(["--quiet", "--mem", "2GiB", "--sleep", "1"])
        .run();
    outcome.status(0).stderr_has("gpurun: verified: PID ");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "verified", "{json}");
    const UUID: &str = "GPU-cd06c06c-074a-3c95-6bf4-a31a37119cef";
    let peak = json["peak_memory_bytes"][UUID].as_u64().unwrap_or(0);
    assert!(peak >= 2 << 30, "peak {peak}: {json}");
    // The receipt: the energy counter and the power the replayed board draws.
    assert!(json["energy_joules"][UUID].as_f64().is_some_and(|joules| joules > 0.0), "{json}");
    assert!(json["power_watts"][UUID]["max"].as_f64().is_some_and(|watts| watts > 80.0), "{json}");
    assert_eq!(json["power_watts"][UUID]["limit"], 700.0, "{json}");
}

fn spawn(sim: &Sim, args: &[&str]) -> Child {
    let mut command: Command = sim.gpurun().args(["-q"]).args(args).command;
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

#[test]
fn the_h200_replay_queues_a_second_exclusive_job_behind_the_first() {
    let sim = h200();
    let holder = sim_cuda().display().to_string();
    let mut first = spawn(&sim, &["--exclusive", "--", &holder, "--quiet", "--sleep", "600"]);
    assert!(wait_until(LONG, || common::leases_in(&sim.lock_dir()) == 1));
    let mut second = spawn(&sim, &["--exclusive", "--wait", "--", "true"]);
    let queued = || {
        std::fs::read_dir(sim.lock_dir())
            .map(|all| all.flatten().any(|e| e.file_name().to_string_lossy().starts_with("ticket.")))
            .unwrap_or(false)
    };
    assert!(wait_until(LONG, queued), "the second job never queued");
    assert_eq!(second.try_wait().unwrap(), None, "the second job ran beside the first");
    common::send_signal(first.id(), libc::SIGTERM);
    first.wait().unwrap();
    let status = common::wait_unless_hung(&mut second);
    assert_eq!(status.code(), Some(0), "the second job, once the first ended");
}

#[test]
fn the_h200_replay_doctor_finds_no_problem_and_advises_no_rma() {
    let sim = h200();
    let doctor = sim.gpurun().args(["--doctor"]).run();
    doctor.status(0).stdout_has("no NVLink fabric").stdout_has("confidential computing is off");
    assert!(!doctor.stdout.contains("PROBLEM  GPU"), "{}", doctor.stdout);
    for advice in ["RMA", "reset it", "reboot"] {
        assert!(!common::has_words(&doctor.stdout, advice), "{advice}: {}", doctor.stdout);
    }
}
