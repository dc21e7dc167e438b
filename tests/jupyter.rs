//! Jupyter kernels on a reserved GPU (issue 66): `gpurun --jupyter-kernel NAME` writes a kernel
//! spec whose kernel runs under gpurun, and the real jupyter_client (pip, `make venv`) starts,
//! interrupts, restarts and shuts it down on the simulated GPUs (tests/helpers/jupyter_kernel.py).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{default_scenario, gpurun_binary, Sim};

fn venv_python() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

#[test]
fn a_kernel_from_the_spec_holds_its_gpu_for_as_long_as_it_runs() {
    let python = venv_python();
    let ready = Command::new(&python).args(["-c", "import jupyter_client, ipykernel"]).output();
    if !ready.is_ok_and(|out| out.status.success()) {
        return common::skip("Jupyter kernels", "no jupyter_client and ipykernel in .venv (make venv)");
    }
    let sim = Sim::new(&default_scenario());
    let prefix = sim.dir.path().join("env");
    let written = sim
        .gpurun()
        .args(["--jupyter-kernel", "gpu", "--prefix"])
        .arg(&prefix)
        .args(["--gpus", "1", "--min-free", "8G", "--"])
        .arg(&python)
        .run();
    let kernels = prefix.join("share/jupyter/kernels");
    written.status(0).stdout_has(&format!("{}/gpu/kernel.json", kernels.display()));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kernels.join("gpu/kernel.json")).unwrap()).unwrap();
    assert_eq!(spec["interrupt_mode"], "signal");
    assert_eq!(spec["argv"].as_array().unwrap()[1..5], ["--gpus", "1", "--min-free", "8G"]);
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/jupyter_kernel.py");
    let outcome = sim
        .gpurun_command(
            python.to_str().unwrap(),
            &[driver.to_str().unwrap(), kernels.to_str().unwrap(), "gpu"],
        )
        .arg(gpurun_binary())
        .run_unless_hung();
    let seen: serde_json::Value = serde_json::from_str(outcome.status(0).stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: {}", outcome.stderr));
    // The kernel sees one GPU, and the kernel's gpurun holds it.
    let visible = seen["visible"].as_str().unwrap();
    assert!(!visible.is_empty() && !visible.contains(','), "{seen}");
    assert_eq!(seen["reserved"], serde_json::json!([seen["kernel_pid"]]), "{seen}");
    assert_eq!(seen["interrupted"], "KeyboardInterrupt", "{seen}");
    assert_eq!(seen["alive_after_interrupt"], "alive", "{seen}");
    // A restart is a new gpurun, holding a GPU again; a shutdown leaves none.
    assert_ne!(seen["restarted_pid"], seen["kernel_pid"], "{seen}");
    assert_eq!(seen["reserved_after_restart"], serde_json::json!([seen["restarted_pid"]]), "{seen}");
    assert!(!seen["visible_after_restart"].as_str().unwrap().is_empty(), "{seen}");
    assert_eq!(seen["reserved_after_shutdown"], serde_json::json!([]), "{seen}");
}

/// The spec goes in the user's Jupyter data directory by default and with --user; a name
/// Jupyter would not take is refused.
#[test]
fn the_spec_goes_where_jupyter_looks_and_names_are_checked() {
    let sim = Sim::new(&default_scenario());
    let data = sim.dir.path().join("data");
    for user in [&[][..], &["--user"]] {
        sim.gpurun()
            .env("JUPYTER_DATA_DIR", &data)
            .args(["--jupyter-kernel", "mine"])
            .args(user)
            .args(["--exclusive", "--", "/usr/bin/python3"])
            .run()
            .status(0)
            .stdout_has(&format!("{}/kernels/mine/kernel.json", data.display()));
        let spec = std::fs::read_to_string(data.join("kernels/mine/kernel.json")).unwrap();
        assert!(
            spec.contains("\"--exclusive\"")
                && !spec.contains("--user")
                && !spec.contains("--jupyter-kernel"),
            "{spec}"
        );
        std::fs::remove_dir_all(&data).unwrap();
    }
    sim.gpurun()
        .args(["--jupyter-kernel", "a b"])
        .run()
        .status(125)
        .stderr_has("a kernel name is letters, digits");
    sim.gpurun().args(["--jupyter-kernel", "x", "--list"]).run().status(125);
    // No --wait unless given: a kernel that cannot get its GPUs ends at once with 75, saying why.
    let prefix = sim.dir.path().join("env");
    sim.gpurun()
        .arg("--jupyter-kernel=nine")
        .arg(format!("--prefix={}", prefix.display()))
        .args(["--gpus", "8", "--exclusive", "--", "/usr/bin/python3"])
        .run()
        .status(0);
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(prefix.join("share/jupyter/kernels/nine/kernel.json")).unwrap(),
    )
    .unwrap();
    let argv: Vec<String> = spec["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|word| word.as_str().unwrap().replace("{connection_file}", "/nonexistent.json"))
        .collect();
    assert!(!argv.iter().any(|word| word.starts_with("--wait")), "{argv:?}");
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    sim.gpurun_command(words[0], &words[1..]).run_unless_hung().status(75);
}

/// `python -m gpurun` (the wheel's package, packaging/python/gpurun) without the binary where
/// the wheel puts it: 127, saying where it looked. tests/dist.rs runs it from the real wheel.
#[test]
fn python_m_gpurun_without_its_binary_says_where_it_looked() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/python");
    let venv = venv_python();
    let python = if venv.exists() { venv } else { "python3".into() };
    let out = Command::new(python)
        .args(["-m", "gpurun", "--version"])
        .env("PYTHONPATH", &package)
        .env("PYTHONUSERBASE", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("the gpurun binary is not where the wheel puts it") && said.contains("/bin/gpurun"),
        "{said}"
    );
}

/// `gpurun.reserve()` from a notebook cell: a plain ipykernel kernel, started by the real
/// jupyter_client, reserves a GPU for its own process (the package on PYTHONPATH laid out as
/// `pip install --target` lays it out); the hold is in `--list` while the kernel runs and gone
/// once it is shut down.
#[test]
fn gpurun_reserve_in_a_notebook_cell_holds_for_the_kernel() {
    let python = venv_python();
    let ready = Command::new(&python).args(["-c", "import jupyter_client, ipykernel"]).output();
    if !ready.is_ok_and(|out| out.status.success()) {
        return common::skip(
            "gpurun.reserve() in a kernel",
            "no jupyter_client and ipykernel in .venv (make venv)",
        );
    }
    let sim = Sim::new(&default_scenario());
    let target = common::python_package(&sim);
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/jupyter_reserve.py");
    let outcome = sim
        .gpurun_command(python.to_str().unwrap(), &[driver.to_str().unwrap()])
        .arg(gpurun_binary())
        .env("PYTHONPATH", &target)
        .run_unless_hung();
    let seen: serde_json::Value = serde_json::from_str(outcome.status(0).stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: {}", outcome.stderr));
    let cell = &seen["cell"];
    assert_eq!(cell["pid"], seen["kernel_pid"], "the cell ran in the kernel's own process: {seen}");
    assert_eq!(cell["visible"], cell["gpu"].to_string(), "{seen}");
    assert_eq!(seen["holders"], serde_json::json!([cell["holder"]]), "{seen}");
    assert_eq!(seen["holders_after_shutdown"], serde_json::json!([]), "{seen}");
}
