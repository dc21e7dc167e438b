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

/// "check.sh never changes a GPU's clocks, modes or MIG layout": the script runs gpurun and
/// cuda-hold and no `nvidia-smi`, cuda-hold uses no NVML, and gpurun's one NVML module calls no
/// setter (nvml-wrapper's `set_*`, `reset*`, `clear_*`, `create_*`, `destroy_*`, or the C
/// `nvml*Set*`, `Reset`, `Clear`, `Create`, `Destroy` calls); an event set, which only listens
/// for Xid events, is gpurun's own object, not the GPU's.
#[test]
fn the_gpu_check_changes_no_gpu_setting() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("tests/gpu/check.sh")).unwrap();
    let commands: Vec<&str> = script.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    assert!(!commands.iter().any(|l| l.contains("nvidia-smi")), "check.sh runs nvidia-smi");
    let mut hold = String::new();
    for entry in std::fs::read_dir(root.join("crates/cuda-hold/src")).unwrap().flatten() {
        hold.push_str(&std::fs::read_to_string(entry.path()).unwrap());
    }
    assert!(!hold.contains("libnvidia-ml") && !hold.contains("nvml_wrapper"), "cuda-hold uses NVML");
    // The driver seam, every file of it.
    let mut nvml = String::new();
    for entry in std::fs::read_dir(root.join("src/probe/nvml")).unwrap().flatten() {
        nvml.push_str(&std::fs::read_to_string(entry.path()).unwrap());
    }
    assert!(nvml.contains(".memory_info()"), "the module that calls NVML moved");
    for line in nvml.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let code = line.replace(".create_event_set(", "");
        for setter in [".set_", ".reset", ".clear_", ".create_", ".destroy_"] {
            assert!(!code.contains(setter), "src/probe/nvml/ changes a GPU: {code}");
        }
        for call in code
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .filter(|w| w.starts_with("nvml") && !w.starts_with("nvmlEventSet"))
        {
            let changes =
                ["Set", "Reset", "Clear", "Create", "Destroy"].iter().any(|verb| call.contains(verb));
            assert!(!changes, "src/probe/nvml/ changes a GPU: {call}");
        }
    }
}
