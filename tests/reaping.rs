//! Leftovers that die while gpurun is ending them are reaped too (issue 19, dumb-init's
//! test_setsid_signals_entire_group). This test binary makes itself a child subreaper, so that
//! anything gpurun leaves unreaped comes to the test (as it would to PID 1) and is seen; it has
//! this file to itself, since it reaps every child of the test process.

#[allow(dead_code)] // the harness is shared with tests/tests.rs, which uses the rest of it
mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use common::{default_scenario, send_signal, Sim};

/// This process adopts orphans, as PID 1 would.
fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }, 0);
}

/// Every process this test process has to reap that is not one of `expected`.
fn unexpected_children(expected: &[u32]) -> Vec<u32> {
    let mut found = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if !expected.contains(&(pid as u32)) {
            found.push(pid as u32);
        }
    }
}

#[test]
fn leftovers_that_die_during_cleanup_are_all_reaped() {
    become_subreaper();
    let sim = Sim::new(&default_scenario());
    for run in 0..50 {
        let mut gpurun = sim
            .gpurun()
            .args(["-q", "--gpus", "0", "--", "sh", "-c", "yes 'oh, hi' | tail & yes error | tail >&2"])
            .command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        send_signal(gpurun.id(), libc::SIGTERM);
        let status = gpurun.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM), "run {run}");
        // Anything gpurun left behind is now this process's to reap.
        std::thread::sleep(Duration::from_millis(20));
        let left = unexpected_children(&[gpurun.id()]);
        assert!(left.is_empty(), "run {run}: gpurun left children {left:?} unreaped");
    }
}
