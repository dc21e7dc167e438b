//! Real NVML clients that nobody here wrote, run on the simulator's embedded default machine:
//! `gpustat` and `nvitop -1` (installed by `make venv`). Each must run without an error and
//! show the scenario: every GPU, its model and memory, and a live process with its owner.

use crate::common;

use std::path::{Path, PathBuf};

use common::{default_scenario, Sim};

fn client(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin").join(name);
    assert!(path.exists(), "{} is missing: `make venv` installs it (make test does)", path.display());
    path
}

/// The client's output on the default machine, with a sim-cuda process of ours on GPU 3, and
/// that process's PID.
fn run(name: &str, args: &[&str]) -> (String, String, u32) {
    let sim = Sim::new(&default_scenario());
    let held = sim.spawn_sim_cuda(
        &[("CUDA_VISIBLE_DEVICES", "3"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        &["--mem", "3GiB", "--sleep", "60"],
    );
    let program = client(name);
    let outcome = sim
        .gpurun_command(program.to_str().unwrap(), args)
        .env("LD_LIBRARY_PATH", &sim.lib_dir)
        .env("COLUMNS", "120")
        .env("NO_COLOR", "1")
        .run();
    assert_eq!(outcome.code, Some(0), "{name} failed:\n{}\n{}", outcome.stdout, outcome.stderr);
    (outcome.stdout.clone(), outcome.stderr.clone(), held.child.id())
}

#[test]
fn gpustat_shows_the_default_machine() {
    let (stdout, stderr, pid) = run("gpustat", &["--no-color", "-cpu"]);
    assert!(!stderr.contains("Error"), "{stderr}");
    // One line per GPU: index, model, temperature, utilization, used / total MB.
    for line in [
        "[0] Tesla V100-SXM2-32GB  | 34°C,   0 % |     5 / 32768 MB |",
        "[1] Tesla V100-SXM2-32GB  | 61°C,  87 % | 30105 / 32768 MB |",
        "[4] NVIDIA H100 80GB HBM3 | 72°C, 100 % | 73253 / 81559 MB |",
        "[7] NVIDIA A100-SXM4-40GB | 30°C,   0 % |     4 / 40960 MB |",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    let gpu3 = stdout.lines().find(|line| line.starts_with("[3]")).unwrap();
    assert!(gpu3.contains("3076 / 81920 MB") && gpu3.contains(&format!("sim-cuda/{pid}")), "{gpu3}");
}

#[test]
fn nvitop_shows_the_default_machine() {
    let (stdout, stderr, pid) = run("nvitop", &["-1"]);
    assert!(stderr.trim().is_empty(), "nvitop complained:\n{stderr}");
    assert!(
        stdout.contains("Driver Version: 550.54.15") && stdout.contains("CUDA Driver Version: 12.4"),
        "{stdout}"
    );
    for text in
        ["00000000:07:00.0", "29.40GiB / 32.00GiB", "H100 80GB HBM3", "00000000:CA:00.0", "E. Process"]
    {
        assert!(stdout.contains(text), "{text:?} not in:\n{stdout}");
    }
    // The scenario's processes (PIDs this machine does not have) and ours, with its user.
    assert!(stdout.contains("4190003"), "{stdout}");
    // Found by its PID: nvitop cuts the command column to fit (a long clone path shows as
    // `.../ml-team/gpurun/targ..`), so the program's name is not always there.
    let ours = stdout
        .lines()
        .find(|line| line.split(|c: char| !c.is_ascii_digit()).any(|word| word == pid.to_string()))
        .unwrap_or_else(|| panic!("PID {pid} not in:\n{stdout}"));
    assert!(ours.contains("3072MiB") || ours.contains("3.00GiB"), "{ours}");
}
