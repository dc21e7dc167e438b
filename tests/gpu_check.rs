//! make test-gpu's script (tests/gpu/check.sh) on the simulator: no GPU here, so the checks that
//! need one are tried with the simulated NVML and a stand-in for cuda-hold that keeps its
//! interface (tests/gpu/sim-cuda-hold). What a real GPU adds is only the driver under it; the
//! script's logic, its parsing of gpurun's JSON and its exit status are checked on every run.

use crate::common;

use std::path::Path;

use common::{default_scenario, gpurun_binary, sim_cuda, Sim};

#[test]
fn the_gpu_checks_pass_on_the_simulator() {
    let sim = Sim::new(&default_scenario());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/gpu/check.sh");
    let outcome = sim
        .gpurun_command(script.to_str().unwrap(), &[])
        .env("GPURUN", gpurun_binary())
        .env("CUDA_HOLD", root.join("tests/gpu/sim-cuda-hold"))
        .env("SIM_CUDA", sim_cuda())
        // Not the machine's: the MPS check and the PyTorch extras say why they skip.
        .env("PATH", "/usr/bin:/bin")
        .run_unless_hung();
    let passed = outcome.stdout.lines().filter(|line| line.starts_with("PASS: ")).count();
    assert!(
        outcome.stdout.contains("all GPU checks passed") && passed == 8,
        "{}\n{}",
        outcome.stdout,
        outcome.stderr
    );
    outcome.status(0);
}
