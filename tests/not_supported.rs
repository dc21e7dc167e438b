//! "Not supported is never a fault" (DESIGN 3, issue 61), through the binary: every value
//! gpurun reads from NVML or AMD SMI whose answer can be "not supported", "not applicable",
//! "disabled" or "idle" (an error code, a missing entry point, or a value inside a struct) is
//! tried here, one row each. A GPU that answers so stays eligible and healthy; the value is
//! shown as unknown or absent, and `--doctor` advises no reset, reboot or RMA for it. The rows
//! are the table in doc/development.md ("Not supported is never a fault").

use crate::common;

use common::{AmdSim, Sim};
use serde_json::Value;

/// An idle, healthy H100 with `extra` scenario keys, then `after` (top-level tables).
fn h100(extra: &str, after: &str) -> String {
    format!(
        "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-61610000-0000-4000-8000-000000000000\"\n\
         pci_bus_id = \"00000000:18:00.0\"\nmemory_total = \"80GiB\"\nutilization_gpu = 0\n\
         utilization_memory = 0\ntemperature_c = 30\npower_mw = 70000\ncompute_mode = \"default\"\n\
         mig_mode = \"disabled\"\necc_mode = \"enabled\"\nnuma_node = 0\ncpu_affinity = \"0-1\"\n{extra}\n\n{after}"
    )
}

/// `[[error]]` making `call` answer `error` on every GPU.
fn failing(call: &str, error: &str) -> String {
    format!("[[error]]\ncall = \"{call}\"\nerror = \"{error}\"\n\n")
}

/// One row: the scenario, and what `--list --json` must then say of GPU 0 beyond "eligible and
/// ok" (a JSON pointer and its value).
struct Row {
    name: &'static str,
    scenario: String,
    expect: Vec<(&'static str, Value)>,
}

fn row(name: &'static str, scenario: String, expect: Vec<(&'static str, Value)>) -> Row {
    Row { name, scenario, expect }
}

fn rows() -> Vec<Row> {
    use serde_json::json;
    let nf = "FUNCTION_NOT_FOUND";
    vec![
        row(
            "fabric: SUCCESS with state NOT_SUPPORTED (a standalone H200)",
            h100("fabric = { state = \"not-supported\" }", ""),
            vec![("/fabric", Value::Null)],
        ),
        row("fabric: NOT_SUPPORTED (a PCIe board)", h100("", ""), vec![("/fabric", Value::Null)]),
        row(
            "fabric: FUNCTION_NOT_FOUND (a driver before the call)",
            h100("fabric = { state = \"completed\" }", &failing("nvmlDeviceGetGpuFabricInfoV", nf)),
            vec![("/fabric", Value::Null)],
        ),
        row("confidential computing: NOT_SUPPORTED", h100("", ""), vec![]),
        row(
            "confidential computing: off, ready flag false (not read while off)",
            format!(
                "confidential_computing = {{ feature = \"disabled\", ready = false }}\n\n{}",
                h100("", "")
            ),
            vec![],
        ),
        row(
            "MIG mode: NOT_SUPPORTED (before Ampere)",
            h100("", "").replace("mig_mode = \"disabled\"\n", ""),
            vec![("/mig_enabled", Value::Null), ("/mig_pending", Value::Null)],
        ),
        row(
            "MIG mode: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetMigMode", nf)),
            vec![("/mig_enabled", Value::Null)],
        ),
        row(
            "ECC mode: disabled, counters not read",
            h100("ecc_volatile_uncorrected = 5", "")
                .replace("ecc_mode = \"enabled\"", "ecc_mode = \"disabled\""),
            vec![],
        ),
        row(
            "ECC mode: NOT_SUPPORTED (a board without ECC)",
            h100("", "").replace("ecc_mode = \"enabled\"\n", ""),
            vec![],
        ),
        row("ECC mode: FUNCTION_NOT_FOUND", h100("", &failing("nvmlDeviceGetEccMode", nf)), vec![]),
        row(
            "ECC counters: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetTotalEccErrors", nf)),
            vec![],
        ),
        row(
            "row remapping: NOT_SUPPORTED (a board with none) and retired pages NOT_SUPPORTED",
            h100(
                "",
                &(failing("nvmlDeviceGetFieldValues", "NOT_SUPPORTED")
                    + &failing("nvmlDeviceGetRetiredPagesPendingStatus", "NOT_SUPPORTED")),
            ),
            vec![],
        ),
        row(
            "row remapping and retired pages: FUNCTION_NOT_FOUND",
            h100(
                "",
                &(failing("nvmlDeviceGetFieldValues", nf)
                    + &failing("nvmlDeviceGetRetiredPagesPendingStatus", nf)),
            ),
            vec![],
        ),
        row("PCIe width: current 0 (a VM)", h100("pcie_width = 0\nclocks_event_reasons = []", ""), vec![]),
        row(
            "PCIe width: maximum 0 (a VM)",
            h100("pcie_max_width = 0\nclocks_event_reasons = []", ""),
            vec![],
        ),
        row(
            "PCIe width: narrowed while idle",
            h100("pcie_width = 4\nclocks_event_reasons = [\"idle\"]", ""),
            vec![],
        ),
        row(
            "PCIe width: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetCurrPcieLinkWidth", nf)),
            vec![],
        ),
        row("clock events: GPU idle (0x1)", h100("clocks_event_reasons = [\"idle\"]", ""), vec![]),
        row(
            "clock events: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetCurrentClocksEventReasons", nf)),
            vec![],
        ),
        row(
            "persistence mode: NOT_SUPPORTED",
            h100("", &failing("nvmlDeviceGetPersistenceMode", "NOT_SUPPORTED")),
            vec![("/persistence_mode", Value::Null)],
        ),
        row(
            "GPU NUMA id: NOT_SUPPORTED (a PCIe host), node from memory affinity",
            h100("", ""),
            vec![("/gpu_numa_id", Value::Null), ("/numa_node", json!(0))],
        ),
        row(
            "memory affinity: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetMemoryAffinity", nf)),
            vec![],
        ),
        row(
            "power: NOT_SUPPORTED",
            h100("", &failing("nvmlDeviceGetPowerUsage", "NOT_SUPPORTED")),
            vec![("/power_watts", Value::Null)],
        ),
        row(
            "temperature: FUNCTION_NOT_FOUND",
            h100("", &failing("nvmlDeviceGetTemperature", nf)),
            vec![("/temperature_c", Value::Null)],
        ),
        row(
            "process list: NOT_SUPPORTED (a VM that hides it)",
            h100("", &failing("nvmlDeviceGetComputeRunningProcesses", "NOT_SUPPORTED")),
            vec![("/processes", Value::Null)],
        ),
        row(
            "process list: no _v3 (a driver before R470's successor), read through _v2",
            h100("", &failing("nvmlDeviceGetComputeRunningProcesses_v3", nf)),
            vec![("/processes", json!([]))],
        ),
        row(
            "memory: no _v2 (R470), read through v1",
            h100("", &failing("nvmlDeviceGetMemoryInfo_v2", nf)),
            vec![("/memory/total_bytes", json!(80u64 << 30)), ("/memory/reserved_bytes", json!(0))],
        ),
        row(
            "UUID: NOT_SUPPORTED",
            h100("", &failing("nvmlDeviceGetUUID", "NOT_SUPPORTED")),
            vec![("/uuid", Value::Null)],
        ),
    ]
}

#[test]
fn every_not_supported_answer_leaves_the_gpu_eligible_and_healthy() {
    let mut failures = Vec::new();
    for row in rows() {
        let sim = Sim::new(&row.scenario);
        let outcome = sim.gpurun().args(["--list", "--json"]).run();
        if outcome.code != Some(0) {
            failures.push(format!("{}: --list exited {:?}: {}", row.name, outcome.code, outcome.stderr));
            continue;
        }
        let gpu = &outcome.json()["gpus"][0];
        if gpu["eligible"] != true || gpu["health"]["state"] != "ok" || gpu["error"] != Value::Null {
            failures.push(format!(
                "{}: eligible {}, health {}, error {}, reasons {}",
                row.name, gpu["eligible"], gpu["health"], gpu["error"], gpu["reasons"]
            ));
        }
        for (pointer, value) in &row.expect {
            if gpu.pointer(pointer) != Some(value) {
                failures.push(format!("{}: {pointer} is {:?}, not {value}", row.name, gpu.pointer(pointer)));
            }
        }
        let doctor = sim.gpurun().args(["--doctor"]).run();
        if doctor.stdout.contains("PROBLEM  GPU") {
            failures.push(format!("{}: --doctor: {}", row.name, doctor.stdout));
        }
        // And a job runs on it.
        let run = sim.gpurun().args(["-q", "--gpus", "1", "--", "true"]).run();
        if run.code != Some(0) {
            failures.push(format!("{}: a launch exited {:?}: {}", row.name, run.code, run.stderr));
        }
    }
    assert!(failures.is_empty(), "{} row(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_fabric_of_a_gpu_that_has_one_is_still_judged() {
    // The rows' counterpart: a GPU with a fabric that is not yet registered stays unhealthy.
    for state in ["not-started", "in-progress"] {
        let sim = Sim::new(&h100(&format!("fabric = {{ state = \"{state}\" }}"), ""));
        let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
        assert_eq!(listing["gpus"][0]["health"]["state"], "unhealthy", "{state}");
        let doctor = sim.gpurun().args(["--doctor"]).run();
        doctor.stdout_has("nvidia-fabricmanager");
        assert!(!common::has_words(&doctor.stdout, "RMA"), "{}", doctor.stdout);
    }
}

#[test]
fn a_discrete_gpu_whose_memory_is_not_supported_is_unknown_never_the_hosts_ram() {
    let sim = Sim::new(&h100("", &failing("nvmlDeviceGetMemoryInfo", "NOT_SUPPORTED")));
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpu = &listing["gpus"][0];
    assert_eq!(gpu["memory"], Value::Null, "{gpu}");
    assert_eq!(gpu["unified_memory"], false, "{gpu}");
    // Unknown memory fails a filter that needs it, with that reason.
    let refused = sim.gpurun().args(["--min-free", "1G", "--", "true"]).run();
    refused.status(75).stderr_has("GPU 0: ");
    // An integrated GPU (the GB10) does share the host's memory.
    let gb10 = Sim::new(&common::scenario_file("gb10.toml"));
    let listing = gb10.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(listing["gpus"][0]["unified_memory"], true);
}

#[test]
fn a_gpu_without_a_uuid_is_still_reserved_by_its_pci_bus_id() {
    let sim = Sim::new(&h100("", &failing("nvmlDeviceGetUUID", "NOT_SUPPORTED")));
    // A job that has not reached the GPU yet: only its lease keeps the GPU.
    let mut first = common::background(sim.gpurun().args(["-q", "--exclusive", "--", "sleep", "600"]));
    assert!(common::wait_until(common::HANG, || common::leases_in(&sim.lock_dir()) == 1));
    // A second --exclusive job cannot share it.
    let second = sim.gpurun().args(["--exclusive", "--", "true"]).run();
    second.status(75);
    first.end();
}

#[test]
fn one_chosen_gpu_that_refuses_its_process_list_makes_the_run_unverifiable_not_partial() {
    let two = h100("", "")
        + &h100("", "")
            .replace("000000000000\"", "000000000001\"")
            .replace("00000000:18:00.0", "00000000:2a:00.0")
        + "[[error]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 1\nerror = \"NOT_SUPPORTED\"\n";
    let sim = Sim::new(&two);
    let report = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--gpus", "2", "--report-json"])
        .arg(&report)
        .arg("--")
        .arg(common::sim_cuda())
        .args(["--quiet", "--sleep", "1", "--device", "0"])
        .run();
    outcome.status(0);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "unverifiable", "{json}");
    assert!(!outcome.stderr.contains("ask for fewer GPUs"), "{}", outcome.stderr);
    assert!(json["diagnosis"].as_array().unwrap().iter().all(|d| d["kind"] != "idle-gpu"), "{json}");
}

#[test]
fn doctor_advises_no_reset_for_a_value_it_could_not_read() {
    let sim = Sim::new(&h100("", &failing("nvmlDeviceGetTotalEccErrors", "UNKNOWN")));
    let doctor = sim.gpurun().args(["--doctor"]).run();
    doctor.stdout_has("health is unknown: cannot read ECC errors");
    for advice in ["RMA", "reset it", "reboot", "nvidia-smi -r"] {
        assert!(!common::has_words(&doctor.stdout, advice), "{advice}: {}", doctor.stdout);
    }
    // A fault a counter reports does get the advice.
    let sick = Sim::new(&h100("ecc_volatile_uncorrected = 2", ""));
    sick.gpurun().args(["--doctor"]).run().stdout_has("nvidia-smi -r -i 0").stdout_has("RMA");
}

#[test]
fn an_amd_gpu_without_memory_activity_keeps_its_gfx_activity() {
    let scenario = common::amd_scenario(Some("amd_mi250x.toml"));
    let first = scenario.find("umc_activity = 0").expect("the MI250X scenario's first GCD");
    let scenario = format!("{}{}", &scenario[..first], &scenario[first + "umc_activity = 0".len()..])
        .replacen("gfx_activity = 0", "gfx_activity = 37", 1);
    let amd = AmdSim::new(&scenario);
    let listing = amd.gpurun().args(["--list", "--json"]).run().status(0).json();
    let utilization = &listing["gpus"][0]["utilization"];
    assert_eq!(utilization["gpu_percent"], 37, "{listing}");
    assert_eq!(utilization["memory_percent"], Value::Null, "{listing}");
}
