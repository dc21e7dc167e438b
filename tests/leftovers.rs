//! GPU memory still held after the command ended (issue 52): a `memory-held` diagnosis naming
//! the PID and the bytes, for a process left running (`--keep-orphans`) and for a context whose
//! process has exited while a child that inherited its device files keeps it (sim-cuda
//! `--hold-after-exit`, as a process forked after CUDA started does); `--list` marks the latter.
//! Without `--keep-orphans` gpurun ends that child, and nothing is held.

use crate::common;

use common::{alive, default_scenario, send_signal, sim_cuda, Sim};

fn memory_held(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "memory-held").cloned().collect()
}

fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_context_kept_by_a_child_after_its_process_exited_is_diagnosed_and_listed() {
    let sim = Sim::new(&default_scenario());
    let json = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--keep-orphans", "--report-json"])
        .arg(&json)
        .arg("--")
        .arg(sim_cuda())
        // A duration no other test's `sleep` has: the holder is found by it below.
        .args(["--mem", "1GiB", "--sleep", "0.5", "--hold-after-exit", "37.25"])
        .run();
    outcome
        .status(0)
        .stderr_has("memory-held: PID ")
        .stderr_has(" has exited, but its context still holds 1 GiB on GPU 3");
    let held = memory_held(&report(&json));
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["bytes"], 1u64 << 30);
    assert_eq!(held[0]["gpu"], 3);
    let pid = held[0]["pid"].as_u64().unwrap();
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let listed = listing["gpus"][3]["processes"].as_array().unwrap().clone();
    let entry = listed.iter().find(|p| p["pid"] == pid).unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(entry["leftover"], "exited");
    sim.gpurun()
        .arg("--list")
        .env("COLUMNS", "200")
        .run()
        .status(0)
        .stdout_has(&format!("{pid} ? ? (1 GiB) [exited: its context still holds the memory]"));
    // The other users' processes of the scenario are not there either, and are not marked.
    assert!(listing["gpus"][1]["processes"][0].get("leftover").is_none(), "{listing:#}");
    // The holder: the `sleep` left running; once it ends, so does the context.
    for pid in procs_named("sleep", "37.25") {
        send_signal(pid, libc::SIGKILL);
    }
    assert!(common::wait_until(std::time::Duration::from_secs(10), || {
        let listing = sim.gpurun().args(["--list", "--json"]).run().json();
        !listing["gpus"][3]["processes"].as_array().unwrap().iter().any(|p| p["pid"] == pid)
    }));
}

/// Processes of this user running `name arg`.
fn procs_named(name: &str, arg: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line == format!("{name}\0{arg}\0").as_bytes())
        })
        .collect()
}

#[test]
fn a_process_left_running_holds_memory_and_without_keep_orphans_nothing_is_held() {
    let sim = Sim::new(&default_scenario());
    let json = sim.dir.path().join("report.json");
    // Its output elsewhere: the harness reads gpurun's to the end.
    let script = format!("{} --mem 2GiB --sleep 30 --quiet >/dev/null 2>&1 & sleep 1", sim_cuda().display());
    let kept = sim
        .gpurun()
        .args(["--keep-orphans", "--report-json"])
        .arg(&json)
        .args(["--", "sh", "-c", &script])
        .run();
    kept.status(0)
        .stderr_has("still holds 2 GiB on GPU 3 after the command ended: --keep-orphans left it running");
    assert!(
        !kept.stderr.contains("it is not the command's"),
        "its own orphan is no intruder: {}",
        kept.stderr
    );
    let held = memory_held(&report(&json));
    let pid = held[0]["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid));
    send_signal(pid, libc::SIGKILL);
    // gpurun ends what the command left, the context's holder included: nothing is held.
    let ended = sim
        .gpurun()
        .arg("--report-json")
        .arg(&json)
        .arg("--")
        .arg(sim_cuda())
        .args(["--mem", "1GiB", "--sleep", "0.5", "--hold-after-exit", "30"])
        .run();
    ended.status(0).stderr_has("the command left 1 process running");
    assert!(!ended.stderr.contains("memory-held"), "{}", ended.stderr);
    assert!(memory_held(&report(&json)).is_empty());
}
