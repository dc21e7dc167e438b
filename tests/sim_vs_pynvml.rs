//! The simulator, read through NVIDIA's own Python binding (nvidia-ml-py), must answer exactly
//! what its scenario says, with NVML's documented semantics. This keeps the simulator honest:
//! it cannot drift into agreeing only with gpurun's reading of NVML.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{scenario_file, sim_cuda, Sim};

fn python() -> std::path::PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `make venv` installs nvidia-ml-py there (make test does)",
        python.display()
    );
    python
}

fn check(scenario: &str) {
    let sim = Sim::new(scenario);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pynvml/check_sim.py");
    let output = Command::new(python())
        .arg(script)
        .arg(&sim.scenario)
        .arg(sim_cuda())
        .env("LD_LIBRARY_PATH", &sim.lib_dir)
        .env("NVML_SIM_SCENARIO", &sim.scenario)
        .env_remove("NVML_SIM_STATE_DIR")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER")
        .output()
        .expect("run python");
    common::assert_checks_passed(&output, 0, "nvidia-ml-py");
}

#[test]
fn embedded_default_machine() {
    check(&common::default_scenario());
}

#[test]
fn mixed_machine_with_a_lost_gpu() {
    check(&scenario_file("mixed8.toml"));
}

#[test]
fn sick_gpus_and_an_excluded_one() {
    check(&scenario_file("health.toml"));
}

#[test]
fn nvlink_pairs_and_pcie_switches() {
    check(&scenario_file("topo8.toml"));
}

#[test]
fn mig_devices_on_two_partitioned_gpus() {
    check(&scenario_file("mig.toml"));
}

#[test]
fn transient_errors_and_a_device_outside_the_cgroup() {
    check(&scenario_file("transient.toml"));
}

#[test]
fn driver_not_loaded_at_init() {
    check(&scenario_file("driver_not_loaded.toml"));
}

#[test]
fn no_permission_at_init() {
    check(&scenario_file("no_permission.toml"));
}

#[test]
fn an_integrated_gpu_with_unified_memory() {
    check(&scenario_file("gb10.toml"));
}

#[test]
fn the_535_v3_stride_quirk() {
    check(&scenario_file("quirk535.toml"));
}

#[test]
fn pids_seen_from_another_pid_namespace() {
    check(&scenario_file("container.toml"));
}

#[test]
fn hanging_calls_and_a_library_thread() {
    check(&scenario_file("hangs.toml"));
}

#[test]
fn fabric_mps_and_confidential_computing() {
    check(&scenario_file("fabric_mps.toml"));
}
