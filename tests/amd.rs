//! AMD Instinct GPUs (issue 53, DESIGN 3c): the same contract through AMD SMI, on the AMD SMI
//! simulator (`crates/amdsmi-sim`: libamd_smi.so and sim-hip, which resolves
//! ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES as the ROCm runtime does and registers its PID).

use crate::common;

use std::path::Path;

use common::{amd_scenario, amd_sim_library, sim_hip, AmdSim, Outcome};
use serde_json::Value;

/// sim-hip's own line: what HIP showed it (devices by AMD SMI index) and its variables.
fn hip_line(outcome: &Outcome) -> Value {
    let line = outcome.stdout.lines().find(|line| line.starts_with("{\"pid\"")).expect("sim-hip's line");
    serde_json::from_str(line).unwrap()
}

fn smi_indices(line: &Value) -> Vec<u64> {
    line["devices"].as_array().unwrap().iter().map(|d| d["smi_index"].as_u64().unwrap()).collect()
}

fn hip(args: &[&str]) -> Vec<String> {
    std::iter::once(sim_hip().display().to_string()).chain(args.iter().map(|a| a.to_string())).collect()
}

/// The `rocr_uuid` of each GPU in a `--list --json`.
fn rocr_uuids(listing: &Value) -> Vec<String> {
    listing["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rocr_uuid"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn list_shows_the_amd_gpus_their_processes_links_and_health() {
    let machine = AmdSim::new(&amd_scenario(None));
    let listed = machine.gpurun_auto().arg("--list").run();
    let lines: Vec<&str> = listed.status(0).stdout.lines().collect();
    assert_eq!(lines[0], "AMD amdgpu driver 6.14.14 (AMD SMI), 8 GPUs", "{}", listed.stdout);
    assert!(
        lines.iter().any(|l| l.starts_with("  2  AMD Instinct MI300X") && l.contains("31337")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(
            |l| l.contains("not eligible: unhealthy: 2 uncorrectable ECC errors since the driver loaded")
        ),
        "{lines:?}"
    );
    let json = machine.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(json["vendor"], "amd");
    assert_eq!(json["cuda_driver_version"], Value::Null);
    assert_eq!(json["amd_smi_library"], amd_sim_library().display().to_string());
    assert!(json.get("nvml_library").is_none());
    let gpu = &json["gpus"][2];
    assert_eq!(gpu["uuid"], "a3ff74a1-0000-1000-8032-c1d1a4f3c9e2");
    assert_eq!(gpu["rocr_uuid"], "GPU-3a1f5cbbe8c12222");
    assert_eq!(gpu["pci_bus_id"], "0000:46:00.0");
    assert_eq!(gpu["memory"]["total_bytes"], 192u64 << 30);
    assert_eq!(gpu["memory"]["used_bytes"], (150u64 << 30) + (288 << 20));
    assert_eq!(gpu["utilization"]["gpu_percent"], 97);
    assert_eq!(gpu["partition"]["compute"], "SPX");
    assert_eq!(gpu["partition"]["memory"], "NPS1");
    assert_eq!(gpu["processes"][0]["pid"], 31337);
    assert_eq!(json["topology"]["0-7"], "xgmi");
    assert_eq!(json["gpus"][5]["health"]["state"], "unhealthy");
    // NVIDIA's listing says nothing of partitions or ROCr.
    assert!(json["gpus"][0].get("mig").is_none());

    let cpx = AmdSim::new(&amd_scenario(Some("amd_mi300x_cpx.toml")));
    let listed = cpx.gpurun().arg("--list").run();
    assert!(
        listed.status(0).stdout.contains("     CPX partition 3 of the card at 0000:05:00.0 (memory NPS1)"),
        "{}",
        listed.stdout
    );
    let json = cpx.gpurun().args(["--list", "--json"]).run().status(0).json();
    let addresses: Vec<&str> =
        json["gpus"].as_array().unwrap().iter().map(|g| g["pci_bus_id"].as_str().unwrap()).collect();
    assert!(
        addresses.iter().all(|a| *a == "0000:05:00.0"),
        "the partitions of one card share its address: {addresses:?}"
    );
    assert_eq!(json["gpus"][7]["partition"]["id"], 7);
    // A bad page pending retirement (amdsmi_get_gpu_bad_page_info) degrades its GPU; retired
    // ones do not.
    assert_eq!(json["gpus"][5]["health"]["state"], "degraded");
    assert!(json["gpus"][5]["health"]["reasons"][0].as_str().unwrap().contains("retired pages pending"));
    assert_eq!(json["gpus"][6]["health"]["state"], "ok");
    let outcome = cpx.gpurun().args(["--gpus", "1", "--devices", "5,6", "--"]).args(hip(&[])).run();
    assert_eq!(smi_indices(&hip_line(outcome.status(0))), [6]);
}

#[test]
fn two_gpus_by_the_same_policies_and_the_hip_program_sees_exactly_those() {
    let machine = AmdSim::new(&amd_scenario(None));
    let uuids = rocr_uuids(&machine.gpurun().args(["--list", "--json"]).run().status(0).json());
    // The busy GPU (2) and the unhealthy one (5) are never among the six free ones.
    let outcome = machine
        .gpurun_auto()
        .args(["--gpus", "6", "--min-free", "8G", "--"])
        .args(hip(&["--mem", "4GiB", "--sleep", "0.5"]))
        .run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [0, 1, 3, 4, 6, 7]);
    let expected: Vec<&str> = [0, 1, 3, 4, 6, 7].iter().map(|&i| uuids[i].as_str()).collect();
    assert_eq!(line["env"]["ROCR_VISIBLE_DEVICES"], expected.join(","));
    assert_eq!(line["env"]["HIP_VISIBLE_DEVICES"], Value::Null);
    outcome.stderr_has("verified: PID").stderr_has("on GPUs 0, 1, 3, 4, 6, 7");

    let outcome = machine
        .gpurun()
        .args(["--gpus", "2", "--min-free", "8G", "--policy", "index", "--"])
        .args(hip(&["--sleep", "0.5"]))
        .run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [0, 1]);
    outcome.stderr_has("verified:");
    // --min-free counts the other user's 150 GiB: GPU 2 alone is refused what it cannot hold.
    machine.gpurun().args(["--devices", "2", "--min-free", "100G", "--", "true"]).run().status(75);
    // --visible-as index: ROCr indices instead of UUIDs.
    let outcome = machine.gpurun().args(["--gpus", "2", "--visible-as", "index", "--"]).args(hip(&[])).run();
    assert_eq!(hip_line(outcome.status(0))["env"]["ROCR_VISIBLE_DEVICES"], "0,1");
}

#[test]
fn inherited_rocr_and_hip_visibility_is_honoured_and_never_widened() {
    let machine = AmdSim::new(&amd_scenario(None));
    // ROCr keeps 3 and 4; HIP's 1 is the second of those: GPU 4 alone.
    let outcome = machine
        .gpurun()
        .env("ROCR_VISIBLE_DEVICES", "3,4")
        .env("HIP_VISIBLE_DEVICES", "1")
        .args(["--gpus", "1", "--"])
        .args(hip(&["--sleep", "0.3"]))
        .run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [4]);
    // HIP's numbering starts again at 0 over what gpurun gave ROCr.
    assert_eq!(line["env"]["HIP_VISIBLE_DEVICES"], "0");
    outcome.stderr_has("verified:");
    // Never widened: two are asked, one is allowed.
    machine
        .gpurun()
        .env("ROCR_VISIBLE_DEVICES", "3,4")
        .env("HIP_VISIBLE_DEVICES", "1")
        .args(["--gpus", "2", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--gpus 2: ROCR_VISIBLE_DEVICES=3,4 HIP_VISIBLE_DEVICES=1 allows only 1 GPU");
    // CUDA_VISIBLE_DEVICES counts as HIP's on ROCm, and is rewritten the same way.
    let outcome = machine
        .gpurun()
        .env("ROCR_VISIBLE_DEVICES", "GPU-3a1f5cbbe8c16666,GPU-3a1f5cbbe8c17777")
        .env("CUDA_VISIBLE_DEVICES", "0")
        .args(["--gpus", "1", "--"])
        .args(hip(&[]))
        .run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [6]);
    assert_eq!(line["env"]["CUDA_VISIBLE_DEVICES"], "0");
    // The trap the runtime sets: the same physical index in both hides every GPU.
    machine
        .gpurun()
        .env("ROCR_VISIBLE_DEVICES", "2")
        .env("HIP_VISIBLE_DEVICES", "2")
        .args(["--gpus", "1", "--", "true"])
        .run()
        .status(125)
        .stderr_has("HIP_VISIBLE_DEVICES=2: entry \"2\" ends the list");
}

#[test]
fn a_gpu_outside_the_cgroup_is_not_counted_and_gcds_are_gpus() {
    let machine = AmdSim::new(&amd_scenario(Some("amd_mi250x.toml")));
    let listed = machine.gpurun().arg("--list").run();
    assert!(
        listed
            .status(0)
            .stdout
            .contains("not eligible: unreadable: memory: no permission (outside this job's device cgroup?)"),
        "{}",
        listed.stdout
    );
    // All four GCDs: ROCr counts the three it can open, so "2" is GCD 2 and all three fit.
    let outcome = machine.gpurun().args(["--gpus", "3", "--visible-as", "index", "--"]).args(hip(&[])).run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [0, 1, 2]);
    assert_eq!(line["env"]["ROCR_VISIBLE_DEVICES"], "0,1,2");
    machine.gpurun().args(["--gpus", "4", "--", "true"]).run().status(75);
    let topology = machine.gpurun().args(["--list", "--topology"]).run();
    topology.status(0).stdout_has("XGMI: AMD Infinity Fabric");
    // --topology xgmi asks it of every pair; nvlink, which AMD GPUs never have, is refused.
    let outcome = machine.gpurun().args(["--gpus", "2", "--topology", "xgmi", "--"]).args(hip(&[])).run();
    assert_eq!(smi_indices(&hip_line(outcome.status(0))), [0, 1]);
    machine
        .gpurun()
        .args(["--gpus", "2", "--topology", "nvlink", "--", "true"])
        .run()
        .status(125)
        .stderr_has("are joined pairwise by NVLink or better");
    // Containers get NVIDIA's devices only: refused, not given the wrong ones.
    machine
        .gpurun()
        .args(["--dry-run", "--gpus", "1", "--", "docker", "run", "--rm", "img"])
        .run()
        .status(125)
        .stderr_has("gpurun: AMD GPUs are not passed into containers yet");
}

#[test]
fn exclusive_wait_queues_behind_another_amd_job() {
    let machine = AmdSim::new(&amd_scenario(Some("amd_mi250x.toml")));
    let mut holder = machine
        .gpurun()
        .args(["--exclusive", "--devices", "0", "--"])
        .args(hip(&["--quiet", "--sleep", "600"]))
        .command;
    let mut holder = holder.spawn().unwrap();
    assert!(common::wait_until(std::time::Duration::from_secs(20), || common::leases_in(
        &machine.sim.lock_dir()
    ) == 1));
    // Without --wait: refused at once, naming the holder's reservation.
    machine.gpurun().args(["--exclusive", "--devices", "0", "--", "true"]).run().status(75);
    let mut waiter = machine
        .gpurun()
        .args(["--exclusive", "--devices", "0", "--wait", "--"])
        .args(hip(&["--sleep", "0.2"]))
        .command;
    let waiter =
        waiter.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Its place in the queue (a ticket in the lock directory) says it is waiting.
    let lock_dir = machine.sim.lock_dir();
    let queued = || {
        std::fs::read_dir(&lock_dir).is_ok_and(|entries| {
            entries.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with("ticket."))
        })
    };
    assert!(common::wait_until(std::time::Duration::from_secs(20), queued), "the waiter never queued");
    let mut waiter = waiter;
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter must wait while GPU 0 is held");
    common::send_signal(holder.id(), libc::SIGTERM);
    let _ = holder.wait();
    let output = waiter.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("verified:"), "{stderr}");
}

#[test]
fn per_rank_gives_each_rank_its_own_gpu_in_one_set() {
    let machine = AmdSim::new(&amd_scenario(None));
    let runs: Vec<_> = (0..2u32)
        .map(|rank| {
            machine
                .gpurun()
                .env("LOCAL_RANK", rank.to_string())
                .env("RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", "2")
                .env("WORLD_SIZE", "2")
                .env("TORCHELASTIC_RUN_ID", "amd-job")
                .args(["--per-rank", "--"])
                .args(["sh", "-c"])
                .arg(format!("exec {} --device $LOCAL_RANK --sleep 1", sim_hip().display()))
        })
        .collect();
    let threads: Vec<_> = runs.into_iter().map(|run| std::thread::spawn(move || run.run())).collect();
    let outcomes: Vec<Outcome> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let lines: Vec<Value> = outcomes.iter().map(|o| hip_line(o.status(0))).collect();
    // One set for both ranks (the same ROCR_VISIBLE_DEVICES), each on its own GPU of it.
    assert_eq!(lines[0]["env"]["ROCR_VISIBLE_DEVICES"], lines[1]["env"]["ROCR_VISIBLE_DEVICES"]);
    assert_eq!(smi_indices(&lines[0]), [0]);
    assert_eq!(smi_indices(&lines[1]), [1]);
    for outcome in &outcomes {
        outcome.stderr_has("verified:");
    }
}

#[test]
fn the_report_and_the_history_say_the_same_as_on_nvidia() {
    let machine = AmdSim::new(&amd_scenario(None));
    let path = machine.sim.dir.path().join("report.json");
    machine
        .gpurun()
        .args(["--gpus", "2", "--report-json", path.to_str().unwrap(), "--"])
        .args(hip(&["--mem", "3GiB", "--sleep", "1"]))
        .run()
        .status(0);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["verification"]["verdict"], "verified");
    let selected: Vec<&str> =
        report["selected"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(selected, ["AMD Instinct MI300X", "AMD Instinct MI300X"]);
    let first = report["selected"][0]["uuid"].as_str().unwrap();
    assert_eq!(report["peak_memory_bytes"][first], 3u64 << 30);
    // The receipt from AMD SMI's counters: socket power (140 W on GPU 0) and its energy.
    assert_eq!(report["power_watts"][first]["mean"], 140.0, "{report:#}");
    assert!(report["energy_joules"][first].as_f64().unwrap() > 0.0, "{report:#}");
    let history = machine.gpurun().args(["--history", "--json"]).run().status(0).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["verification"]["verdict"], "verified");
    assert_eq!(last["peak_memory_bytes"][first], 3u64 << 30);
}

#[test]
fn the_vendor_is_chosen_or_refused_in_one_line() {
    let machine = AmdSim::new(&amd_scenario(None));
    // Neither library: NVML's message, as before AMD support.
    machine
        .gpurun_auto()
        .env("GPURUN_AMD_SMI_LIB", "/nonexistent/libamd_smi.so")
        .arg("--list")
        .run()
        .status(125)
        .stderr_has("gpurun: cannot load the NVML library");
    // --vendor nvidia on a machine without NVML: NVML's own message.
    machine
        .gpurun()
        .args(["--vendor", "nvidia", "--list"])
        .run()
        .status(125)
        .stderr_has("gpurun: cannot load the NVML library");
    machine
        .gpurun()
        .args(["--vendor", "amd", "--amd-smi-lib", "/nonexistent/libamd_smi.so", "--list"])
        .run()
        .status(125)
        .stderr_has("gpurun: cannot load the AMD SMI library /nonexistent/libamd_smi.so")
        .stderr_has("check the path given to --amd-smi-lib or GPURUN_AMD_SMI_LIB");
    // A library that is not AMD SMI (NVIDIA's simulator) is named for what it lacks.
    machine
        .gpurun()
        .args(["--amd-smi-lib", common::sim_library().to_str().unwrap(), "--list"])
        .run()
        .status(125)
        .stderr_has("is not a usable AMD SMI library (amdsmi_get_gpu_enumeration_info is missing)");
    machine
        .gpurun()
        .args(["--vendor", "intel", "--list"])
        .run()
        .status(125)
        .stderr_has("'intel'")
        .stderr_has("auto, nvidia, amd");
    // MPS is NVIDIA's.
    machine
        .gpurun()
        .args(["--vendor", "amd", "--mps", "--gpus", "1", "--", "true"])
        .run()
        .status(125)
        .stderr_has("gpurun: --mps joins NVIDIA's CUDA MPS; AMD GPUs (--vendor amd) have none");
    // ROCm 6.4's AMD SMI (25.3) has the 7.0 function but other layouts and link numbers:
    // refused by its version, not misread.
    let rocm6 = AmdSim::new(&format!("lib_version = [25, 3, 0]\n{}", amd_scenario(None)));
    rocm6
        .gpurun()
        .arg("--list")
        .run()
        .status(125)
        .stderr_has("is AMD SMI 25.3.0 (ROCm 6.x or older), whose structures differ from those gpurun reads");
    // The driver not loaded: AMD SMI's words, under auto too (its library is here).
    let unloaded = AmdSim::new(&format!("init_error = \"DRIVER_NOT_LOADED\"\n{}", amd_scenario(None)));
    unloaded.gpurun_auto().arg("--list").run().status(125).stderr_has("the AMD GPU driver is not loaded");
    // --fallback cpu runs the command with no GPU on such a machine.
    unloaded.gpurun_auto().args(["--gpus", "1", "--fallback", "cpu", "--", "true"]).run().status(0);
}

#[test]
fn auto_takes_nvidia_where_nvml_lists_gpus_and_amd_where_only_it_does() {
    let machine = AmdSim::new(&amd_scenario(None));
    // NVIDIA's simulated 8-GPU server beside the AMD one.
    let nvidia_machine = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/nvml-sim/scenarios/default.toml");
    // Both libraries load and list GPUs: NVIDIA's, as before AMD support.
    let nvidia = machine
        .gpurun_auto()
        .env("GPURUN_NVML_LIB", common::sim_library())
        .env("NVML_SIM_SCENARIO", &nvidia_machine)
        .args(["--list", "--json"])
        .run()
        .status(0)
        .json();
    assert_eq!(nvidia["vendor"], "nvidia");
    assert_eq!(nvidia["also_amd_gpus"], 8);
    let listed = machine
        .gpurun_auto()
        .env("GPURUN_NVML_LIB", common::sim_library())
        .env("NVML_SIM_SCENARIO", &nvidia_machine)
        .arg("--list")
        .run();
    listed.status(0).stdout_has("also here: 8 AMD GPUs (AMD SMI); gpurun --vendor amd lists and uses them");
    // A request takes NVIDIA's alone: the command gets CUDA's variables, not ROCm's.
    let chosen = machine
        .gpurun_auto()
        .env("GPURUN_NVML_LIB", common::sim_library())
        .env("NVML_SIM_SCENARIO", &nvidia_machine)
        .args(["--dry-run", "--json", "--gpus", "2"])
        .run()
        .status(0)
        .json();
    assert!(
        chosen["env"]["CUDA_VISIBLE_DEVICES"].is_string()
            && chosen["env"].get("ROCR_VISIBLE_DEVICES").is_none(),
        "{chosen:#}"
    );
    // Only --list looks beside NVML: a launch never initialises AMD SMI on an NVIDIA machine.
    assert!(chosen.get("also_amd_gpus").is_none(), "{chosen:#}");
    // NVML loads but lists none: AMD's.
    let empty = machine.sim.dir.path().join("no-gpus.toml");
    std::fs::write(&empty, "driver_version = \"550.54.15\"\n").unwrap();
    let amd = machine
        .gpurun_auto()
        .env("GPURUN_NVML_LIB", common::sim_library())
        .env("NVML_SIM_SCENARIO", &empty)
        .args(["--list", "--json"])
        .run()
        .status(0)
        .json();
    assert_eq!(amd["vendor"], "amd");
    assert_eq!(amd["gpus"].as_array().unwrap().len(), 8);
}

#[test]
fn amds_own_python_bindings_read_each_scenario_as_written() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `make venv` installs amdsmi there (make test does)",
        python.display()
    );
    let sizes: serde_json::Map<String, Value> = amdsmi_sim::abi::sizes()
        .into_iter()
        .map(|(name, size)| (name.to_owned(), Value::from(size)))
        .collect();
    for scenario in
        [amd_scenario(None), amd_scenario(Some("amd_mi300x_cpx.toml")), amd_scenario(Some("amd_mi250x.toml"))]
    {
        let machine = AmdSim::new(&scenario);
        // The bindings load ROCM_PATH/lib/libamd_smi.so, as on a ROCm install.
        let rocm = machine.sim.dir.path().join("rocm");
        std::fs::create_dir_all(rocm.join("lib")).unwrap();
        std::os::unix::fs::symlink(amd_sim_library(), rocm.join("lib/libamd_smi.so")).unwrap();
        let output = std::process::Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/amdsmi/check_sim.py"))
            .arg(&machine.sim.scenario)
            .arg(sim_hip())
            .env("ROCM_PATH", &rocm)
            .env("AMDSMI_SIM_SCENARIO", &machine.sim.scenario)
            .env("AMDSMI_SIM_SIZES", Value::Object(sizes.clone()).to_string())
            .env_remove("AMDSMI_SIM_STATE_DIR")
            .env_remove("ROCR_VISIBLE_DEVICES")
            .env_remove("HIP_VISIBLE_DEVICES")
            .output()
            .expect("run python");
        common::assert_checks_passed(&output, 50, "AMD's amdsmi");
    }
}

#[test]
fn the_bindings_find_every_symbol_they_bind_at_import() {
    // amdsmi_wrapper.py looks each function up when it is imported; the simulator answers
    // NOT_SUPPORTED for those it does not model (crates/amdsmi-sim/src/unsupported.rs).
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let wrapper = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u; print(u.find_spec('amdsmi').submodule_search_locations[0])",
        ])
        .output()
        .expect("run python");
    let folder = String::from_utf8_lossy(&wrapper.stdout).trim().to_owned();
    let text =
        std::fs::read_to_string(Path::new(&folder).join("amdsmi_wrapper.py")).expect("amdsmi_wrapper.py");
    let bound: std::collections::BTreeSet<&str> = text
        .split("_libraries['libamd_smi.so'].")
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next())
        .collect();
    let exported = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(amd_sim_library())
        .output()
        .unwrap();
    let exported = String::from_utf8_lossy(&exported.stdout);
    let missing: Vec<&&str> =
        bound.iter().filter(|name| !exported.lines().any(|l| l.ends_with(&format!(" T {name}")))).collect();
    assert!(bound.len() > 150 && missing.is_empty(), "{} bound, missing: {missing:?}", bound.len());
    assert!(amdsmi_sim::UNSUPPORTED.len() < bound.len());
}

#[test]
fn a_hung_amd_smi_call_is_named_and_ends_in_one_line() {
    // A wedged amdgpu driver: the activity query of GPU 1 never returns.
    let hung = format!("{}\n[[hang]]\ncall = \"amdsmi_get_gpu_activity\"\ngpu = 1\n", amd_scenario(None));
    let machine = AmdSim::new(&hung);
    machine
        .gpurun()
        .args(["--nvml-timeout", "500ms", "--gpus", "1", "--", "true"])
        .run_unless_hung()
        .status(125)
        .stderr_has("gpurun: AMD SMI did not answer within 500 ms: amdsmi_get_gpu_activity on GPU 1")
        .stderr_has("whether `amd-smi list` answers");
    // --fallback cpu runs the command without a GPU instead.
    machine
        .gpurun()
        .args(["--nvml-timeout", "500ms", "--gpus", "1", "--fallback", "cpu", "--", "true"])
        .run_unless_hung()
        .status(0);
}

#[test]
fn the_doctor_reads_amd_smi_and_looks_at_rocms_device_nodes() {
    let machine = AmdSim::new(&amd_scenario(None));
    let outcome = machine.gpurun().env("ROCR_VISIBLE_DEVICES", "3,4").arg("--doctor").run();
    let text = &outcome.status(0).stdout;
    assert!(
        text.contains(&format!("ok       AMD SMI loaded from {}", amd_sim_library().display())),
        "{text}"
    );
    assert!(text.contains("info     amdgpu driver 6.14.14"), "{text}");
    assert!(
        text.contains("ok       GPU 2: AMD Instinct MI300X (a3ff74a1-0000-1000-8032-c1d1a4f3c9e2)"),
        "{text}"
    );
    assert!(text.contains("info     ROCR_VISIBLE_DEVICES=3,4"), "{text}");
    // This machine has no amdgpu: the doctor says so instead of listing NVIDIA's nodes.
    if !Path::new("/dev/kfd").exists() {
        assert!(text.contains("no /dev/kfd or /dev/dri/renderD* device nodes"), "{text}");
    }
    assert!(!text.contains("NVML loaded"), "{text}");
    // NVIDIA's fabric registration is none of AMD's business.
    assert!(!text.contains("NVLink fabric"), "{text}");
    // A library that does not load is named as AMD SMI's, not as NVML's.
    let missing =
        machine.gpurun().env("GPURUN_AMD_SMI_LIB", "/nonexistent/libamd_smi.so").arg("--doctor").run();
    missing.status(125).stdout_has("PROBLEM  AMD SMI from /nonexistent/libamd_smi.so: ");
    assert!(!missing.stdout.contains("NVML from"), "{}", missing.stdout);
}

#[test]
fn a_process_listed_under_every_gpu_counts_only_where_it_has_memory() {
    // AMD SMI before its per-GPU attribution fix lists each process under every GPU, with
    // memory only where it has some: the job must not look as if it ran on all eight.
    let quirky = format!("quirks = [\"process_on_every_gpu\"]\n{}", amd_scenario(None));
    let machine = AmdSim::new(&quirky);
    let outcome = machine.gpurun().args(["--gpus", "2", "--"]).args(hip(&["--sleep", "1"])).run();
    let lines: Vec<&str> = outcome.status(0).stderr.lines().filter(|l| l.contains("verified")).collect();
    assert_eq!(lines.len(), 1, "{}", outcome.stderr);
    assert!(lines[0].ends_with("on GPUs 0, 1"), "{lines:?}");
    // The other user's job stays on GPU 2 alone, and GPU 0 stays free.
    let json = machine.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(json["gpus"][0]["processes"], serde_json::json!([]));
    assert_eq!(json["gpus"][2]["processes"][0]["pid"], 31337);
}

#[test]
fn hip_and_amd_smi_number_gpus_differently_and_rocr_indices_follow_hip() {
    // amd-smi's GPU 0 is HIP's 1 and the other way round (amd-smi list's HIP_ID).
    let swapped = amd_scenario(None)
        .replacen("bdf = \"0000:05:00.0\"", "hip_id = 1\nbdf = \"0000:05:00.0\"", 1)
        .replacen("bdf = \"0000:26:00.0\"", "hip_id = 0\nbdf = \"0000:26:00.0\"", 1);
    let machine = AmdSim::new(&swapped);
    let json = machine.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!((json["gpus"][0]["hip_id"].clone(), json["gpus"][1]["hip_id"].clone()), (1.into(), 0.into()));
    // ROCr's index of amd-smi's GPU 0 is 1.
    let outcome = machine
        .gpurun()
        .args(["--devices", "0", "--visible-as", "index", "--"])
        .args(hip(&["--sleep", "0.5"]))
        .run();
    let line = hip_line(outcome.status(0));
    assert_eq!(line["env"]["ROCR_VISIBLE_DEVICES"], "1");
    assert_eq!(smi_indices(&line), [0]);
    outcome.stderr_has("verified:");
    // An inherited ROCR_VISIBLE_DEVICES=0 is ROCr's 0: amd-smi's GPU 1.
    let outcome =
        machine.gpurun().env("ROCR_VISIBLE_DEVICES", "0").args(["--gpus", "1", "--"]).args(hip(&[])).run();
    let line = hip_line(outcome.status(0));
    assert_eq!(smi_indices(&line), [1]);
    outcome.stdout_has("\"smi_index\":1");
}

#[test]
fn an_exported_choice_is_kept_and_the_refusal_says_how_to_undo_it_in_rocms_words() {
    let machine = AmdSim::new(&amd_scenario(None));
    let exported = machine.gpurun().args(["--export", "--gpus", "2"]).run();
    let lines: Vec<(String, String)> = exported
        .status(0)
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
        .collect();
    let names: Vec<&str> = lines.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"ROCR_VISIBLE_DEVICES") && !names.contains(&"CUDA_VISIBLE_DEVICES"), "{names:?}");
    // After eval "$(gpurun --export --gpus 2)", a request for three is refused with the way back.
    let mut again = machine.gpurun().args(["--gpus", "3", "--", "true"]);
    for (name, value) in &lines {
        again = again.env(name, value);
    }
    again
        .run()
        .status(125)
        .stderr_has("allows only 2 GPUs")
        .stderr_has("unset ROCR_VISIBLE_DEVICES GPURUN_GPUS GPURUN_GPU_UUIDS");
}

#[test]
fn more_processes_than_the_first_list_holds_are_all_read() {
    // amdsmi.h: a list too short for every process answers OUT_OF_RESOURCES with the whole
    // count; gpurun asks again with room for all (it starts with room for 16).
    let many: String = (0..20)
        .map(|n| format!("[[process]]\ngpu = 4\npid = {}\nname = \"worker\"\nvram = \"1GiB\"\n", 50_000 + n))
        .collect();
    let machine = AmdSim::new(&format!("{}\n{many}", amd_scenario(None)));
    let json = machine.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(json["gpus"][4]["processes"].as_array().unwrap().len(), 20);
    assert_eq!(json["gpus"][4]["memory"]["used_bytes"], (20u64 << 30) + (288 << 20));
}

/// Issue 64: a job that moved itself to another GPU with ROCR_VISIBLE_DEVICES is told so in
/// ROCm's words, not CUDA's (which said CUDA_VISIBLE_DEVICES was removed).
#[test]
fn a_job_that_moved_itself_with_rocr_visible_devices_is_told_so_in_rocms_words() {
    let machine = AmdSim::new(&amd_scenario(None));
    let outcome = machine
        .gpurun()
        .args(["--gpus", "1", "--policy", "index", "--", "env", "ROCR_VISIBLE_DEVICES=3"])
        .args(hip(&["--sleep", "1"]))
        .run();
    outcome
        .stderr_has("wrong-gpu: PID")
        .stderr_has("ROCR_VISIBLE_DEVICES was overridden to \"3\" in that process (gpurun set \"GPU-");
    assert!(!outcome.stderr.contains("CUDA_VISIBLE_DEVICES"), "{}", outcome.stderr);
}

/// Issue 64: an AMD SMI receipt call that hangs (the energy counter, read as the command starts)
/// gives up the receipt, not verification, as on NVIDIA: `--verify strict` still ends a job on
/// the wrong GPU (it ran its whole 40 s and gpurun exited 0 when the rule knew only NVML's
/// names).
#[test]
fn a_hung_amd_receipt_call_gives_up_the_receipt_and_strict_still_ends_a_wrong_gpu_job() {
    let hung = format!("{}\n[[hang]]\ncall = \"amdsmi_get_energy_count\"\n", amd_scenario(None));
    let machine = AmdSim::new(&hung);
    let outcome = machine
        .gpurun()
        .args(["--gpus", "1", "--policy", "index", "--verify", "strict", "--"])
        .args(["env", "ROCR_VISIBLE_DEVICES=3"])
        .args(hip(&["--sleep", "40"]))
        .run_unless_hung();
    outcome
        .status(125)
        .stderr_has("the receipt (energy, power, utilization, throttling)")
        .stderr_has("not read for the rest of the run: amdsmi_get_energy_count")
        .stderr_has("ROCR_VISIBLE_DEVICES was overridden");
}
