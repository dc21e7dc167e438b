//! Holds that expire (issue 66): `gpurun --hold DURATION` reserves GPUs without a command, in a
//! detached holder that exits at the deadline (a lease is still a live process; no daemon),
//! shown in `--list` with its owner and end; `--release` ends one's own sooner.

use crate::common;

use serde_json::Value;

use common::{default_scenario, wait_until, Sim, HANG};

fn reserved(sim: &Sim) -> Vec<Value> {
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    listing["reservations"].as_array().unwrap().clone()
}

#[test]
fn a_hold_reserves_until_its_end_and_release_ends_it_sooner() {
    let sim = Sim::new(&default_scenario());
    // The caller's gpurun answers at once, with the choice; the holder holds on.
    let held = sim.gpurun().args(["--hold", "2m", "--gpus", "1", "--min-free", "8G"]).run_unless_hung();
    let answer: Value = serde_json::from_str(held.status(0).stdout.trim()).unwrap();
    let holder = answer["holder_pid"].as_u64().unwrap();
    let gpu = answer["gpus"][0]["index"].as_u64().unwrap();
    assert_eq!(answer["env"]["CUDA_VISIBLE_DEVICES"], gpu.to_string(), "{answer}");
    assert!(answer["until"].as_str().unwrap().ends_with('Z'));
    held.stderr_has("gpurun --release ends it sooner");
    let leases = reserved(&sim);
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0]["pid"], holder);
    assert!(leases[0]["command"].as_str().unwrap().starts_with("gpurun --hold 2m (until "), "{leases:?}");
    // Another launch asking for that GPU alone with --exclusive is refused while it is held.
    sim.gpurun().args(["--devices", &gpu.to_string(), "--exclusive", "--", "true"]).run().status(75);
    sim.gpurun().args(["--release"]).run().status(0).stderr_has(&format!("holder PID {holder}"));
    assert!(reserved(&sim).is_empty());
    assert!(wait_until(HANG, || !common::alive(holder as u32)), "the holder is gone");
    // A short hold ends by itself.
    sim.gpurun().args(["-q", "--hold", "1s"]).run_unless_hung().status(0);
    assert!(wait_until(HANG, || reserved(&sim).is_empty()), "a hold outlived its end");
}

/// A hold is refused as a launch would be: 75 when too few GPUs qualify now, 125 for a command
/// after it or beyond the house rule max-time-limit.
#[test]
fn a_hold_is_refused_as_a_launch_would_be() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun().args(["--hold", "1m", "--gpus", "8", "--exclusive"]).run_unless_hung().status(75);
    sim.gpurun().args(["--hold", "1m", "--", "true"]).run().status(125).stderr_has("--hold takes no COMMAND");
    for none in [&["--gpus", "0"][..], &["--fallback", "cpu"]] {
        sim.gpurun().args(["--hold", "1m"]).args(none).run().status(125).stderr_has("--hold holds GPUs");
    }
    std::fs::write(sim.system_file(), "[limits]\nmax-time-limit = \"10m\"\n").unwrap();
    sim.gpurun()
        .args(["--hold", "1h"])
        .run()
        .status(125)
        .stderr_has("--hold 1h: the house rule max-time-limit = 10m (");
    assert!(reserved(&sim).is_empty());
    sim.gpurun().args(["--release"]).run().status(0).stderr_has("no hold of yours to release");
    // A hold counts against max-gpus-per-user as a run's reservation does.
    std::fs::write(sim.system_file(), "[limits]\nmax-gpus-per-user = 1\n").unwrap();
    sim.gpurun().args(["-q", "--hold", "2m"]).run_unless_hung().status(0);
    sim.gpurun().args(["--gpus", "1", "--", "true"]).run().status(75).stderr_has("you hold 1 reserved GPU");
    sim.gpurun().args(["--release"]).run().status(0);
}

/// `--hold-for PID`: the hold ends when that process does (gpurun.reserve() passes its own).
#[test]
fn a_hold_for_a_process_ends_with_it() {
    let sim = Sim::new(&default_scenario());
    let mut sleeper = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id().to_string();
    sim.gpurun().args(["-q", "--hold", "2m", "--hold-for", &pid]).run_unless_hung().status(0);
    assert_eq!(reserved(&sim).len(), 1);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(wait_until(HANG, || reserved(&sim).is_empty()), "the hold outlived its process");
    // For a process that is not running (the sleeper, reaped): the hold ends at once.
    sim.gpurun().args(["-q", "--hold", "2m", "--hold-for", &pid]).run_unless_hung().status(0);
    assert!(wait_until(HANG, || reserved(&sim).is_empty()), "a hold for no process was kept");
}

/// `gpurun.reserve()` (the wheel's Python package, laid out as `pip install --target` lays it
/// out: the package, and the binary in `bin/` beside it): in a `with` block the process's
/// CUDA_VISIBLE_DEVICES names the held GPU and `--list` shows the hold; after it, none; a plain
/// call holds until the process exits; once CUDA is initialised it refuses, saying why.
#[test]
fn gpurun_reserve_holds_for_the_python_process() {
    let sim = Sim::new(&default_scenario());
    let target = common::python_package(&sim);
    let script = r#"
import json, os, subprocess, sys, types
import gpurun
def holders():
    listing = subprocess.run([gpurun.find_binary(), "--list", "--json"], capture_output=True, text=True, check=True)
    return [entry["pid"] for entry in json.loads(listing.stdout)["reservations"]]
seen = {}
with gpurun.reserve(gpus=1, min_free="8G") as held:
    seen["visible"] = os.environ["CUDA_VISIBLE_DEVICES"]
    seen["order"] = os.environ["CUDA_DEVICE_ORDER"]
    seen["gpu"] = held.gpus[0]["index"]
    seen["holders"] = holders()
    seen["holder"] = held.holder_pid
seen["after"] = holders()
try:
    gpurun.reserve(gpus=8, options=["--exclusive"])
except gpurun.NotEnoughGPUs as busy:
    seen["busy"] = str(busy)
try:
    gpurun.reserve(min_free="lots")
except gpurun.NotEnoughGPUs:
    seen["bad"] = "busy?"
except RuntimeError as bad:
    seen["bad"] = str(bad)
sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
try:
    gpurun.reserve()
except RuntimeError as started:
    seen["started"] = str(started)
del sys.modules["torch"]
# verify(): this process itself, as NVML lists it (a context registered as the simulator's CUDA
# registers one: a file in the scenario's state directory naming the PID and the GPU).
def context_on(uuid):
    state = os.environ["NVML_SIM_SCENARIO"] + ".state"
    namespace = os.readlink("/proc/self/ns/pid")[len("pid:["):-1]
    start = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
    os.makedirs(state, exist_ok=True)
    path = os.path.join(state, f"{os.getpid()}.ns{namespace}.proc")
    with open(path, "w") as entry:
        entry.write(f"start {start}\n{uuid} 1073741824\n")
    return path
import warnings
held = gpurun.reserve(gpus=1)
seen["unseen"] = held.verify()["verdict"]
path = context_on(held.gpus[0]["uuid"])
seen["on_held"] = held.verify()["verdict"]
os.remove(path)
listing = json.loads(subprocess.run([gpurun.find_binary(), "--list", "--json"], capture_output=True, text=True).stdout)
other = next(gpu["uuid"] for gpu in listing["gpus"] if gpu["index"] != held.gpus[0]["index"])
path = context_on(other)
seen["elsewhere"] = held.verify()["verdict"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with held:
        pass
seen["warned"] = [str(warning.message) for warning in caught]
os.remove(path)
# release() signals only its own holder: a holder PID now another process of ours (the hold
# ended, the PID was reused) is not one.
from gpurun._reserve import _holds_for
victim = subprocess.Popen(["sleep", "30"])
seen["victim_is_holder"] = _holds_for(victim.pid, os.getpid())
victim.kill()
kept = gpurun.reserve()
seen["kept"] = kept.holder_pid
seen["kept_is_holder"] = _holds_for(kept.holder_pid, os.getpid())
print(json.dumps(seen))
"#;
    let outcome = sim.gpurun_command("python3", &["-c", script]).env("PYTHONPATH", &target).run_unless_hung();
    let seen: Value = serde_json::from_str(outcome.status(0).stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: {}", outcome.stderr));
    assert_eq!(seen["visible"], seen["gpu"].to_string(), "{seen}");
    assert_eq!(seen["order"], "PCI_BUS_ID");
    assert_eq!(seen["holders"], serde_json::json!([seen["holder"]]), "{seen}");
    assert_eq!(seen["after"], serde_json::json!([]), "{seen}");
    assert!(seen["busy"].as_str().unwrap().contains("not enough GPUs"), "{seen}");
    assert!(
        seen["bad"].as_str().unwrap().starts_with("gpurun: ")
            && seen["bad"].as_str().unwrap().contains("lots"),
        "{seen}"
    );
    assert!(
        seen["started"].as_str().unwrap().contains("CUDA is already initialised in this process (torch)"),
        "{seen}"
    );
    assert_eq!(
        (&seen["unseen"], &seen["on_held"], &seen["elsewhere"]),
        (&Value::from("not-observed"), &Value::from("verified"), &Value::from("wrong-gpu")),
        "{seen}"
    );
    assert!(seen["warned"][0].as_str().unwrap().contains("this process is on GPU"), "{seen}");
    assert_eq!(
        (&seen["victim_is_holder"], &seen["kept_is_holder"]),
        (&Value::from(false), &Value::from(true)),
        "{seen}"
    );
    // The plain call's hold ended with the Python process.
    assert!(seen["kept"].as_u64().is_some());
    assert!(wait_until(HANG, || reserved(&sim).is_empty()), "a plain reserve() outlived its process");
}
