//! gpurun where a bare CLONE_VM child cannot be had (DESIGN 12): under valgrind, which aborts
//! the whole process on a clone whose flags it does not know, and under qemu-user, which
//! refuses one (EINVAL). The command's child and the parent-death watcher are then forked,
//! with the same guarantees: exec errors through the pipe, the exit status, the watcher.
//! valgrind and qemu-user-static come from tests/emulation/install.sh (make test).

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{default_scenario, gpurun_binary, sim_cuda, skip, wait_until, Sim};

/// tini's own suite runs `valgrind --leak-check=full --error-exitcode=1 tini ls`: gpurun's
/// equivalent (no GPU, so no driver library and its threads in the picture) must pass it as is.
#[test]
fn under_valgrind_memcheck_finds_nothing_and_the_status_passes_through() {
    if !common::on_path("valgrind") {
        return skip("gpurun under valgrind", "valgrind is not installed (tests/emulation/install.sh)");
    }
    let sim = Sim::new(&default_scenario());
    let gpurun = gpurun_binary();
    let valgrind = |args: &[&str]| {
        sim.gpurun_command(
            "valgrind",
            &[&["-q", "--leak-check=full", "--error-exitcode=99", &gpurun], args].concat(),
        )
        .run()
    };
    let listed = valgrind(&["--gpus", "0", "--", "ls", env!("CARGO_MANIFEST_DIR")]);
    listed.status(0).stdout_has("Cargo.toml");
    assert!(!listed.stderr.contains("=="), "valgrind reported something:\n{}", listed.stderr);
    valgrind(&["--gpus", "0", "--", "sh", "-c", "exit 7"]).status(7);
    // The exec's failure still comes back through the pipe from the forked child.
    valgrind(&["--gpus", "0", "--", "/nonexistent/program"]).status(127).stderr_has("command not found");
}

/// With the simulated driver: memory errors only (the driver library's threads are still
/// running when gpurun exits, so what they hold is not gpurun's leak), and the job verified.
#[test]
fn under_valgrind_a_job_on_a_simulated_gpu_is_verified() {
    if !common::on_path("valgrind") {
        return skip("gpurun under valgrind", "valgrind is not installed (tests/emulation/install.sh)");
    }
    let sim = Sim::new(&default_scenario());
    let gpurun = gpurun_binary();
    let cuda = sim_cuda();
    let outcome = sim
        .gpurun_command(
            "valgrind",
            &[
                "-q",
                "--error-exitcode=99",
                &gpurun,
                "--gpus",
                "1",
                "--",
                cuda.to_str().unwrap(),
                "--mem",
                "1GiB",
                // Long enough for a poll of gpurun under valgrind (pidfd_open unhandled there,
                // the simulator reads /proc instead) to come back while the job runs.
                "--sleep",
                "3",
            ],
        )
        .run();
    outcome.status(0).stderr_has("verified: PID");
}

fn qemu() -> Option<&'static str> {
    common::on_path("qemu-x86_64-static").then_some("qemu-x86_64-static")
}

#[test]
fn under_qemu_user_the_command_runs_and_exec_errors_come_back() {
    let Some(qemu) = qemu() else {
        return skip("gpurun under qemu-user", "qemu-x86_64-static is missing (tests/emulation/install.sh)");
    };
    let sim = Sim::new(&default_scenario());
    let gpurun = gpurun_binary();
    sim.gpurun_command(qemu, &[&gpurun, "--gpus", "0", "--", "echo", "hi"]).run().status(0).stdout_has("hi");
    sim.gpurun_command(qemu, &[&gpurun, "--gpus", "0", "--", "sh", "-c", "exit 3"]).run().status(3);
    sim.gpurun_command(qemu, &[&gpurun, "--gpus", "0", "--", "/nonexistent/program"])
        .run()
        .status(127)
        .stderr_has("command not found");
    let cuda = sim_cuda();
    sim.gpurun_command(
        qemu,
        &[&gpurun, "--gpus", "1", "--", cuda.to_str().unwrap(), "--mem", "1GiB", "--sleep", "1"],
    )
    .run()
    .status(0)
    .stderr_has("verified: PID");
}

/// The parent-death watcher is forked too: gpurun SIGKILLed under qemu still hands the command
/// its --parent-death-signal.
#[test]
fn under_qemu_user_a_killed_gpurun_still_signals_the_command() {
    let Some(qemu) = qemu() else {
        return skip("gpurun under qemu-user", "qemu-x86_64-static is missing (tests/emulation/install.sh)");
    };
    let sim = Sim::new(&default_scenario());
    let gpurun = gpurun_binary();
    let marks = sim.dir.path().join("marks");
    let script = format!(
        "trap 'echo TERM >> {0}; exit 0' TERM; echo ready >> {0}; while :; do sleep 0.1; done",
        marks.display()
    );
    let mut run = sim.gpurun_command(qemu, &[&gpurun, "--gpus", "0", "--", "sh", "-c", &script]).command;
    let mut gpurun = run.stdin(Stdio::null()).stderr(Stdio::null()).spawn().expect("start gpurun");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(60), || read(&marks).contains("ready")),
        "the command never started"
    );
    gpurun.kill().expect("SIGKILL gpurun");
    let _ = gpurun.wait();
    assert!(
        wait_until(Duration::from_secs(60), || read(&marks).contains("TERM")),
        "the command got no TERM after gpurun's death: {:?}",
        read(&marks)
    );
}
