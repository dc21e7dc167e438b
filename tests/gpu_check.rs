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
    let capture = sim.dir.path().join("capture");
    let outcome = sim
        .gpurun_command(script.to_str().unwrap(), &[])
        .env("GPURUN", gpurun_binary())
        .env("CUDA_HOLD", root.join("tests/gpu/sim-cuda-hold"))
        .env("SIM_CUDA", sim_cuda())
        .env("GPU_CAPTURE", &capture)
        .env_remove("GPURUN_WHEEL")
        // Not the machine's: the Python checks and the wheel say why they skip.
        .env("PATH", "/usr/bin:/bin")
        .run_unless_hung();
    let passed: Vec<&str> = outcome.stdout.lines().filter(|line| line.starts_with("PASS: ")).collect();
    assert!(
        outcome.stdout.contains("all GPU checks passed") && passed.len() == PASSING_ON_THE_SIMULATOR,
        "{} passed\n{}\n{}",
        passed.len(),
        outcome.stdout,
        outcome.stderr
    );
    outcome.status(0);
    // Every SKIP says why.
    for line in outcome.stdout.lines().filter(|line| line.starts_with("SKIP: ")) {
        assert!(line.splitn(3, ": ").nth(2).is_some_and(|why| !why.is_empty()), "{line}");
    }
    // The capture: gpurun's readings and the summary, one entry per check.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(capture.join("summary.json")).unwrap()).unwrap();
    let checks = summary["checks"].as_array().unwrap();
    assert_eq!(checks.iter().filter(|c| c["result"] == "pass").count(), PASSING_ON_THE_SIMULATOR);
    assert_eq!(summary["failed"], 0);
    assert!(checks.iter().any(|c| c["check"] == "launch-cost" && c["result"] == "info"), "{summary}");
    for file in ["gpurun-list.json", "gpurun-list-vv-trace.txt", "gpurun-doctor.txt", "launch-cost.txt"] {
        assert!(capture.join(file).is_file(), "{file} is not in the capture");
    }
    let trace = std::fs::read_to_string(capture.join("gpurun-list-vv-trace.txt")).unwrap();
    assert!(trace.contains("NVML nvmlInit_v2: ok in "), "{trace}");
}

/// What check.sh can try without a GPU: the list, eligibility, the doctor, the CUDA context,
/// visibility, --verify strict, wrong-gpu (the default scenario has 8 GPUs), the exclusive
/// queue, SIGTERM, an intruder, --time-limit, the leftovers, --cpu-bind numa.
const PASSING_ON_THE_SIMULATOR: usize = 15;

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
    // nvidia-smi only through the script's `smi`, which lets its query options alone through.
    let direct: Vec<&&str> = commands
        .iter()
        .filter(|l| l.contains("nvidia-smi ") && !l.contains("command -v nvidia-smi"))
        .filter(|l| {
            l.trim() != "nvidia-smi \"$@\""
                && !l.contains("echo ")
                && !l.contains("skip ")
                && !l.contains("fail ")
        })
        .collect();
    assert!(direct.is_empty(), "check.sh runs nvidia-smi past `smi`: {direct:?}");
    let allowed = commands.iter().find(|l| l.contains("-q | -L | topo")).expect("smi's allowed options");
    for setter in [
        "-pm",
        "-c ",
        "-r ",
        "-ac",
        "-lgc",
        "-pl",
        "-e ",
        "-mig",
        "--gpu-reset",
        "-rgc",
        "-rac",
        "--persistence",
    ] {
        assert!(!allowed.contains(setter), "smi allows {setter}: {allowed}");
    }
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
