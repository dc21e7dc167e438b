//! `gpurun --doctor`: what it checks and says, on healthy and broken simulated machines.

use crate::common;

use common::{default_scenario, scenario_file, Sim};

#[test]
fn a_healthy_machine_and_inherited_variables() {
    let sim = Sim::new(&default_scenario());
    let outcome = sim.gpurun().env("CUDA_VISIBLE_DEVICES", "0,1").args(["--doctor"]).run();
    outcome
        .status(0)
        .stdout_has("ok       NVML loaded from ")
        .stdout_has("info     driver 550.54.15, supports CUDA 12.4")
        .stdout_has("ok       GPU 7: NVIDIA A100-SXM4-40GB (GPU-0b1d2f3a-4c5e-4d6f-8a9b-1c2d3e4f5a67)")
        .stdout_has("info     CUDA_VISIBLE_DEVICES=0,1")
        .stdout_has("gpurun will choose only among GPUs 0, 1 (CUDA_VISIBLE_DEVICES=0,1)")
        .stdout_has("PROBLEM  CUDA_VISIBLE_DEVICES=0,1 uses indices but CUDA_DEVICE_ORDER is not PCI_BUS_ID")
        .stdout_has("does not exist yet; the first gpurun that runs a command creates it");
    sim.gpurun().args(["--", "true"]).run().status(0);
    sim.gpurun().args(["--doctor"]).run().status(0).stdout_has("is safe; 0 live reservation(s)");
}

#[test]
fn broken_machines_are_problems() {
    let sim = Sim::new(&scenario_file("mixed8.toml"));
    sim.gpurun()
        .args(["--doctor"])
        .run()
        .status(0)
        .stdout_has("PROBLEM  GPU 5: unknown model: handle: GPU is lost");
    let missing =
        sim.gpurun().env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1").args(["--doctor"]).run();
    missing
        .status(125)
        .stdout_has("PROBLEM  NVML from /nonexistent/libnvidia-ml.so.1: cannot load the NVML library");
    // The other checks still run on a machine without NVML.
    missing.stdout_has("Lock directory").stdout_has("Python frameworks");
    let not_loaded = Sim::new(&scenario_file("driver_not_loaded.toml"));
    not_loaded.gpurun().args(["--doctor"]).run().status(125).stdout_has("the NVIDIA driver is not loaded");
    std::fs::write(sim.lock_dir(), "not a directory").unwrap();
    sim.gpurun()
        .args(["--doctor"])
        .run()
        .stdout_has("PROBLEM  lock directory")
        .stdout_has("it is not a directory");
}

/// A stand-in `torch` package on PYTHONPATH, built for the given CUDA version.
fn fake_torch(sim: &Sim, cuda: &str) -> std::path::PathBuf {
    let dir = sim.dir.path().join(format!("torch-{cuda}"));
    std::fs::create_dir_all(dir.join("torch")).unwrap();
    let version = if cuda == "cpu" { "None".to_owned() } else { format!("{cuda:?}") };
    std::fs::write(dir.join("torch/__init__.py"), format!("class version:\n    cuda = {version}\n")).unwrap();
    dir
}

#[test]
fn frameworks_built_for_a_newer_cuda_than_the_driver() {
    let sim = Sim::new(&default_scenario());
    let newer = fake_torch(&sim, "12.6");
    sim.gpurun()
        .env("PYTHONPATH", &newer)
        .args(["--doctor"])
        .run()
        .status(0)
        .stdout_has("PROBLEM  torch was built for CUDA 12.6, newer than the driver's CUDA 12.4");
    let older = fake_torch(&sim, "12.1");
    sim.gpurun()
        .env("PYTHONPATH", &older)
        .args(["--doctor"])
        .run()
        .stdout_has("ok       torch built for CUDA 12.1; the driver supports 12.4");
    let cpu = fake_torch(&sim, "cpu");
    sim.gpurun()
        .env("PYTHONPATH", &cpu)
        .args(["--doctor"])
        .run()
        .stdout_has("PROBLEM  torch is a CPU-only build");
}

#[test]
fn doctor_takes_no_command() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun().args(["--doctor", "python3"]).run().status(125).stderr_has("--doctor takes no COMMAND");
    sim.gpurun().args(["--doctor", "--list"]).run().status(125).stderr_has("cannot be used with");
}

/// Persistence mode, and what a GPU without it costs each job (NVIDIA's Driver Persistence
/// overview: "of the order of 1-3 second" per GPU, for ECC scrubbing at its start).
#[test]
fn persistence_mode_off_is_a_problem_with_its_cost() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun()
        .args(["--doctor"])
        .run()
        .status(0)
        .stdout_has("ok       persistence mode is on: no GPU is brought up again for each job");
    let off = default_scenario().replacen(
        "numa_node = 0\n\n[[gpu]]",
        "numa_node = 0\npersistence_mode = \"disabled\"\n\n[[gpu]]",
        2,
    );
    sim.rewrite(&off);
    let outcome = sim.gpurun().args(["--doctor"]).run();
    outcome
        .status(0)
        .stdout_has("PROBLEM  persistence mode is off on GPU 0, 1: the driver tears a GPU down")
        .stdout_has("of the order of 1-3 s per GPU (NVIDIA: ECC scrubbing); run nvidia-persistenced");
    assert!(!outcome.stdout.contains("persistence mode is on"), "{}", outcome.stdout);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(listing["gpus"][0]["persistence_mode"], false);
    assert_eq!(listing["gpus"][2]["persistence_mode"], true);
}

/// Issue 62 (3): in a PID namespace of its own, `--doctor` says what the driver's PIDs are
/// there by its branch: since 535.113.01 the namespace's own (verification works), since
/// 565.57.01 with their memory, before that host PIDs.
#[test]
fn in_a_pid_namespace_doctor_says_what_the_drivers_pids_are() {
    if !common::pid_namespaces_allowed("in_a_pid_namespace_doctor_says_what_the_drivers_pids_are") {
        return;
    }
    let gpurun = common::gpurun_binary();
    for (driver, said) in [
        ("580.159.04", "driver 580.159.04 lists this namespace's own PIDs and their memory (since 565.57.01): verification works here"),
        ("550.54.15", "driver 550.54.15 lists this namespace's own PIDs (since 535.113.01) but not their memory"),
        ("535.104.05", "driver 535.104.05 reports host PIDs (before 535.113.01), so verification may say 'unverifiable'"),
    ] {
        let sim = Sim::new(&format!("driver_version = \"{driver}\"\n\n{}", common::scenario_file("two_idle.toml")));
        let doctor = sim.gpurun_command("unshare", &["--pid", "--fork", "--mount-proc", &gpurun, "--doctor"]).run();
        doctor.stdout_has(&format!("a PID namespace of its own (container?): {said}"));
    }
}
