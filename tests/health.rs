//! GPU health (issue 24): unhealthy GPUs are never chosen, degraded ones only after every
//! healthy one with a warning, `--health strict` and `--health ignore`, the refusal that names
//! health, `--list`, its JSON, excluded GPUs and `--doctor`. Through the binary, on scenarios
//! written here.

use crate::common;

use common::Sim;
use serde_json::{json, Value};
use std::time::Duration;

/// An A100 80GB (Ampere: row remapping) with ECC on, idle, with `extra` keys; `free` GiB free.
fn a100(index: u32, free: u32, extra: &str) -> String {
    format!(
        "[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\nuuid = \"GPU-24000000-0000-4000-8000-00000000000{index}\"\n\
         pci_bus_id = \"00000000:{:02X}:00.0\"\nmemory_total = \"80GiB\"\nmemory_used = \"{}GiB\"\n\
         utilization_gpu = 0\nutilization_memory = 0\necc_mode = \"enabled\"\n{extra}\n\n",
        0x10 * (index + 1),
        80 - free
    )
}

fn visible(sim: &Sim, args: &[&str]) -> String {
    let outcome = sim.gpurun().args(["--export"]).args(args).run();
    let line = outcome.status(0).stdout.lines().next().unwrap_or_default().to_owned();
    line.trim_start_matches("export CUDA_VISIBLE_DEVICES='").trim_end_matches('\'').to_owned()
}

fn health(listing: &Value, index: usize) -> (String, Vec<String>) {
    let health = &listing["gpus"][index]["health"];
    let reasons =
        health["reasons"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect();
    (health["state"].as_str().unwrap().to_owned(), reasons)
}

#[test]
fn each_finding_is_classified_and_shown() {
    // 0 healthy, 1 ECC errors, 2 remap failure, 3 remap pending, 4 HW slowdown + power brake,
    // 5 a x8 link, 6 a V100 with retired pages pending, 7 lost.
    let mut scenario = a100(0, 70, "");
    scenario += &a100(1, 79, "ecc_volatile_uncorrected = 3");
    scenario += &a100(2, 79, "remapped_rows = { uncorrectable = 1, failure = true }");
    scenario += &a100(3, 79, "remapped_rows = { uncorrectable = 1, pending = true }");
    scenario += &a100(4, 79, "clocks_event_reasons = [\"hw_slowdown\", \"power_brake\", \"sw_power_cap\"]");
    // Busy (no idle clock event): a narrow link at idle is no fault.
    scenario += &a100(5, 79, "pcie_width = 8\npcie_max_width = 16\nclocks_event_reasons = []");
    scenario += &a100(6, 79, "retired_pages_pending = true\necc_aggregate_uncorrected = 9")
        .replace("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB")
        .replace("memory_total = \"80GiB\"", "memory_total = \"80GiB\"\ncompute_capability = \"7.0\"");
    scenario += &a100(7, 79, "");
    scenario += "[[error]]\ncall = \"nvmlDeviceGetMemoryInfo\"\ngpu = 7\nerror = \"GPU_IS_LOST\"\n\n";
    scenario += "[[excluded]]\npci_bus_id = \"00000000:90:00.0\"\nuuid = \"GPU-24000000-0000-4000-8000-0000000000ff\"\n";
    let sim = Sim::new(&scenario);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(health(&listing, 0), ("ok".to_owned(), vec![]));
    let expect = [
        (1, "unhealthy", "3 volatile uncorrectable ECC errors"),
        (2, "unhealthy", "row remapping failed"),
        (3, "degraded", "row remapping pending"),
        (4, "degraded", "clocks held down by the hardware (HW slowdown)"),
        (5, "degraded", "PCIe link x8 of x16"),
        (6, "degraded", "retired pages pending"),
        (7, "unhealthy", "lost: the GPU has fallen off the bus"),
    ];
    for (index, state, reason) in expect {
        let (found, reasons) = health(&listing, index);
        assert_eq!(found, state, "GPU {index}: {reasons:?}");
        assert!(reasons[0].starts_with(reason), "GPU {index}: {reasons:?}");
    }
    // The power brake too, not the software power cap (an ordinary limit).
    assert_eq!(health(&listing, 4).1.len(), 2);
    // Aggregate (lifetime) errors alone do not make a GPU unhealthy: volatile ones do.
    assert_eq!(health(&listing, 6).1.len(), 1);
    assert_eq!(
        listing["excluded"],
        json!([{"pci_bus_id": "00000000:90:00.0", "uuid": "GPU-24000000-0000-4000-8000-0000000000ff"}])
    );
    let table = sim.gpurun().args(["--list"]).run();
    table
        .status(0)
        .stdout_has("     not eligible: unhealthy: 3 volatile uncorrectable ECC errors")
        .stdout_has("     health: degraded: PCIe link x8 of x16")
        .stdout_has("excluded by the driver: 00000000:90:00.0 (GPU-24000000-0000-4000-8000-0000000000ff)");
    let doctor = sim.gpurun().args(["--doctor"]).run();
    doctor
        .stdout_has("GPU 2 is unhealthy: row remapping failed")
        .stdout_has("the board needs service (RMA)")
        .stdout_has("GPU 3 is degraded: row remapping pending")
        .stdout_has("nvidia-smi -r -i 3")
        .stdout_has("is excluded by the driver");
}

/// GPU 0 degraded (row remapping pending) with the most free memory, GPU 1 unhealthy, GPUs 2
/// and 3 healthy.
fn sick_and_healthy() -> Sim {
    let mut scenario = a100(0, 79, "remapped_rows = { pending = true }");
    scenario += &a100(1, 79, "ecc_volatile_uncorrected = 1");
    scenario += &a100(2, 60, "");
    scenario += &a100(3, 50, "");
    Sim::new(&scenario)
}

#[test]
fn unhealthy_never_degraded_last_with_a_warning() {
    let sim = sick_and_healthy();
    // The healthy ones first, though the degraded one has the most free memory.
    assert_eq!(visible(&sim, &[]), "2");
    assert_eq!(visible(&sim, &["--gpus", "2"]), "2,3");
    // Three: the degraded one joins them, last, with a warning; never the unhealthy one.
    let three = sim.gpurun().args(["--gpus", "3", "--", "true"]).run();
    three.status(0).stderr_has("warning: taking GPU 0, which is degraded: row remapping pending");
    assert_eq!(visible(&sim, &["--gpus", "3"]), "2,3,0");
    assert_eq!(visible(&sim, &["--gpus", "all"]), "2,3,0");
    // Four: only the unhealthy one could make up the rest.
    sim.gpurun()
        .args(["--gpus", "4", "--", "true"])
        .run()
        .status(75)
        .stderr_has("not enough GPUs: 4 requested, 3 qualify; only GPUs turned away for their health could make up the rest (--health ignore would take them)")
        .stderr_has("GPU 1: unhealthy: 1 volatile uncorrectable ECC error (reset the GPU");
    // --fallback best relaxes the load, never health.
    sim.gpurun().args(["--gpus", "4", "--fallback", "best", "--", "true"]).run().status(75);
    // The dry run says why the degraded one was passed over.
    let plan = sim.gpurun().args(["--dry-run", "--json"]).run().status(0).json();
    assert_eq!(
        plan["gpus"][0]["passed_over"],
        "degraded: row remapping pending (takes effect at the next GPU reset)"
    );
    assert_eq!(plan["gpus"][1]["eligible"], false);
    assert_eq!(plan["gpus"][1]["passed_over"], Value::Null);
}

#[test]
fn strict_refuses_degraded_and_ignore_takes_any() {
    let sim = sick_and_healthy();
    sim.gpurun().args(["--health", "strict", "--gpus", "3", "--", "true"]).run().status(75).stderr_has(
        "GPU 0: degraded: row remapping pending (takes effect at the next GPU reset) (--health strict)",
    );
    assert_eq!(visible(&sim, &["--health", "strict", "--gpus", "2"]), "2,3");
    // ignore: every GPU, the sick ones after the healthy ones, each warned about.
    let all = sim.gpurun().args(["--health", "ignore", "--gpus", "4", "--", "true"]).run();
    all.status(0)
        .stderr_has("warning: taking GPU 0 despite its health (--health ignore): degraded")
        .stderr_has("warning: taking GPU 1 despite its health (--health ignore): unhealthy: 1 volatile");
    assert_eq!(visible(&sim, &["--health", "ignore", "--gpus", "4"]), "2,3,0,1");
    // A setting like the others: the config file and GPURUN_HEALTH.
    let dir = sim.dir.path().join("config/gpurun");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), "health = \"strict\"\n").unwrap();
    sim.gpurun().args(["--gpus", "3", "--", "true"]).run().status(75);
    let by_variable = sim.gpurun().env("GPURUN_HEALTH", "ignore").args(["--export", "--gpus", "4"]).run();
    by_variable.status(0).stdout_has("export CUDA_VISIBLE_DEVICES='2,3,0,1'");
    sim.gpurun().args(["--health", "sometimes"]).run().status(125).stderr_has("sometimes");
}

#[test]
fn an_xid_during_the_run_is_logged_reported_and_named_at_exit() {
    let scenario = a100(0, 79, "") + &a100(1, 79, "");
    let sim = Sim::new(&scenario);
    let report = sim.dir.path().join("report.json");
    let log = sim.dir.path().join("stderr.txt");
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let mut command = sim
        .gpurun()
        .args(["--devices", "1", "--report-json", report.to_str().unwrap(), "--", &cuda])
        .args(["--mem", "1GiB", "--sleep", "3", "--exit", "3"])
        .command;
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let on_gpu_1 = || {
        let listing = sim.gpurun().args(["--list", "--json"]).run().json();
        listing["gpus"][1]["processes"].as_array().is_some_and(|p| !p.is_empty())
    };
    assert!(common::wait_until(std::time::Duration::from_secs(20), on_gpu_1));
    // The driver raises Xid 79 on the chosen GPU, and an Xid 13 on another, while it runs.
    sim.rewrite(&(scenario + "[[xid]]\ngpu = 1\ncode = 79\n\n[[xid]]\ngpu = 0\ncode = 13\n"));
    assert_eq!(child.wait().unwrap().code(), Some(3));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("warning: Xid 79 on GPU 1: the GPU has fallen off the bus"), "{said}");
    assert!(said.contains("the hardware or driver, not the application"), "{said}");
    assert!(said.contains("warning: the command exited with status 3 "), "{said}");
    assert!(said.contains(" s after Xid 79 on GPU 1"), "{said}");
    assert!(!said.contains("Xid 13"), "another GPU's Xid is not this job's: {said}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let xids: Vec<&Value> =
        json["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "xid").collect();
    assert_eq!(xids.len(), 1, "{json}");
    assert_eq!(xids[0]["gpu"], 1);
    assert_eq!(xids[0]["code"], 79);
    assert!(xids[0]["detail"].as_str().unwrap().contains("s into the run"), "{json}");
    // And the history keeps it.
    let history = sim.gpurun().args(["--history", "--json"]).run().status(0).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert!(
        last["diagnosis"].as_array().unwrap().iter().any(|d| d["kind"] == "xid" && d["code"] == 79),
        "{last}"
    );
}

#[test]
fn a_gpu_that_cannot_report_xids_does_not_lose_the_others() {
    // nvml-wrapper frees the event set when a registration fails: GPU 1 refusing Xid events
    // (an old driver, a board without them) dropped GPU 0's registration made just before it.
    let scenario = a100(0, 79, "")
        + &a100(1, 79, "")
        + "[[error]]\ncall = \"nvmlDeviceRegisterEvents\"\ngpu = 1\nerror = \"NOT_SUPPORTED\"\n\n";
    let sim = Sim::new(&scenario);
    let report = sim.dir.path().join("report.json");
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let mut command = sim
        .gpurun()
        .args(["--gpus", "2", "--report-json", report.to_str().unwrap(), "--", &cuda])
        .args(["--mem", "1GiB", "--sleep", "3"])
        .command;
    let mut child =
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let on_both = || {
        let listing = sim.gpurun().args(["--list", "--json"]).run().json();
        (0..2).all(|gpu| listing["gpus"][gpu]["processes"].as_array().is_some_and(|p| !p.is_empty()))
    };
    assert!(common::wait_until(std::time::Duration::from_secs(20), on_both));
    sim.rewrite(&(scenario + "[[xid]]\ngpu = 0\ncode = 79\n"));
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let xids: Vec<&Value> =
        json["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "xid").collect();
    assert_eq!(xids.len(), 1, "{json}");
    assert_eq!(xids[0]["gpu"], 0);
}

#[test]
fn a_gpu_whose_handle_is_lost_is_unhealthy() {
    let scenario = a100(0, 79, "")
        + &a100(1, 79, "")
        + "[[error]]\ncall = \"nvmlDeviceGetHandleByIndex\"\ngpu = 1\nerror = \"GPU_IS_LOST\"\n\n";
    let sim = Sim::new(&scenario);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let (state, reasons) = health(&listing, 1);
    assert_eq!(state, "unhealthy", "{reasons:?}");
    assert!(reasons[0].starts_with("lost: the GPU has fallen off the bus"), "{reasons:?}");
    assert_eq!(health(&listing, 0).0, "ok");
}

/// Issue 36 (10): a health query that fails (UNKNOWN, not NOT_SUPPORTED) is no clean bill: the
/// GPU with uncorrectable errors NVML could not report was chosen first and shown `ok`.
#[test]
fn a_health_that_cannot_be_read_is_unknown_and_comes_last() {
    // GPU 0: 3 uncorrectable errors behind a failing ECC call, and the most free memory.
    let mut scenario = a100(0, 79, "ecc_volatile_uncorrected = 3");
    scenario += &a100(1, 60, "");
    scenario += &a100(2, 70, "remapped_rows = { pending = true }");
    scenario += "[[error]]\ncall = \"nvmlDeviceGetTotalEccErrors\"\ngpu = 0\nerror = \"UNKNOWN\"\n\n";
    let sim = Sim::new(&scenario);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let (state, reasons) = health(&listing, 0);
    assert_eq!(state, "unknown", "{reasons:?}");
    assert!(reasons[0].starts_with("cannot read ECC errors (nvmlDeviceGetTotalEccErrors: "), "{reasons:?}");
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("     health: unknown: cannot read ECC errors");
    // After every healthy GPU, and after the degraded one too.
    assert_eq!(visible(&sim, &["--gpus", "1"]), "1");
    assert_eq!(visible(&sim, &["--gpus", "2"]), "1,2");
    // --health strict refuses it, with the reason.
    let strict = sim.gpurun().args(["--health", "strict", "--gpus", "2", "--", "true"]).run();
    strict.status(75).stderr_has("GPU 0: unknown: cannot read ECC errors");
}

/// Issue 36 (8): a flood of Xid events is read whole, in bounded memory: each code is said
/// once, the repeats counted, and the Xid 79 after a thousand Xid 13 is never the one lost
/// (64 a poll were read, the rest dropped without a word).
#[test]
fn an_xid_flood_is_counted_and_its_last_code_kept() {
    let mut scenario = a100(0, 79, "");
    // The simulator delivers each (GPU, code, after_ms) once: a thousand within the first second.
    for at in 0..999 {
        scenario += &format!("[[xid]]\ngpu = 0\ncode = 13\nafter_ms = {at}\n\n");
    }
    scenario += "[[xid]]\ngpu = 0\ncode = 79\nafter_ms = 999\n\n";
    let sim = Sim::new(&scenario);
    let report = sim.dir.path().join("report.json");
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args(["--report-json", report.to_str().unwrap(), "--", &cuda, "--mem", "1GiB", "--sleep", "2"])
        .run();
    outcome.status(0);
    assert_eq!(outcome.stderr.matches("Xid 13 on GPU 0").count(), 1, "{}", outcome.stderr);
    outcome
        .stderr_has("warning: Xid 79 on GPU 0")
        .stderr_has("more Xid events of the codes above (counted, not kept)");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let xids: Vec<&Value> =
        json["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "xid").collect();
    assert!(xids.iter().any(|d| d["code"] == 79), "the last Xid was lost: {json}");
    let kept = xids.iter().filter(|d| d["code"].is_u64()).count() as u64;
    let counted: u64 = xids
        .iter()
        .filter_map(|d| d["detail"].as_str()?.strip_prefix("and ")?.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(kept + counted, 1000, "every event kept or counted: {json}");
    assert!(kept <= 65, "memory stays bounded: {kept} kept");
}

/// Issue 36 (6): a GPU that fell off the bus answers GPU_IS_LOST to nvmlDeviceGetIndex, and
/// the Xid 79 that says so was dropped for it: events are matched to the GPUs by the handle
/// registered, and a lost GPU is a diagnosis of its own.
#[test]
fn the_xid_79_of_a_gpu_that_answers_lost_is_reported() {
    let scenario = a100(0, 79, "")
        + "[[error]]\ncall = \"nvmlDeviceGetIndex\"\ngpu = 0\nerror = \"GPU_IS_LOST\"\n\n"
        + "[[xid]]\ngpu = 0\ncode = 79\nafter_ms = 200\n\n";
    let sim = Sim::new(&scenario);
    let report = sim.dir.path().join("report.json");
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args(["--report-json", report.to_str().unwrap(), "--", &cuda, "--mem", "1GiB", "--sleep", "1"])
        .run();
    outcome.status(0).stderr_has("warning: Xid 79 on GPU 0: the GPU has fallen off the bus");
    outcome.stderr_has("gpu-lost: GPU 0 fell off the bus");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let kinds: Vec<&str> =
        json["diagnosis"].as_array().unwrap().iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains(&"xid") && kinds.contains(&"gpu-lost"), "{json}");
}

/// Issue 36 (6): a GPU lost mid-job without an Xid 79 seen (events unsupported or not
/// delivered) answers GPU_IS_LOST to its process list. That changes the verdict (what ran
/// there can no longer be checked) and is the gpu-lost diagnosis, as the Xid would be.
#[test]
fn a_gpu_whose_process_list_answers_lost_changes_the_verdict() {
    let sim = Sim::new(&a100(0, 79, ""));
    let report = sim.dir.path().join("report.json");
    let stderr = sim.dir.path().join("stderr");
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let mut command = sim
        .gpurun()
        .args(["--report-json", report.to_str().unwrap(), "--", &cuda, "--mem", "1GiB", "--sleep", "7"])
        .command;
    let file = std::fs::File::create(&stderr).unwrap();
    // sim-cuda's JSON line goes nowhere: not into the test harness's output.
    let mut gpurun = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap();
    let said = |text: &str| std::fs::read_to_string(&stderr).unwrap_or_default().contains(text);
    // Verified first; the next poll (5 s later, once settled) finds the GPU lost.
    assert!(common::wait_until(Duration::from_secs(20), || said("verified: PID")), "verified first");
    sim.rewrite(
        &(a100(0, 79, "")
            + "[[error]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 0\nerror = \"GPU_IS_LOST\"\n"),
    );
    assert!(common::wait_unless_hung(&mut gpurun).success());
    let text = std::fs::read_to_string(&stderr).unwrap();
    assert!(text.contains("GPU 0: NVML answers GPU is lost"), "{text}");
    assert!(text.contains("unverifiable: GPU 0 fell off the bus during the run"), "{text}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "unverifiable", "{json}");
    let lost: Vec<&Value> =
        json["diagnosis"].as_array().unwrap().iter().filter(|d| d["kind"] == "gpu-lost").collect();
    assert_eq!(lost.len(), 1, "{json}");
    assert!(lost[0]["detail"].as_str().unwrap().contains("NVML answers GPU is lost"), "{json}");
}

/// Issue 51 (10): a GPU that falls off the bus (Xid 79, and GPU is lost to its process list)
/// just as a short run ends. The verdict had settled (verified) long before; no poll came
/// between the loss and the end, so only the last look can see it: it reads the process lists
/// too, and the run ends unverifiable, as a longer one does.
#[test]
fn a_gpu_lost_as_a_short_run_ends_makes_it_unverifiable() {
    let scenario = a100(0, 79, "") + &a100(1, 79, "");
    let sim = Sim::new(&scenario);
    let lost = sim.dir.path().join("lost.toml");
    std::fs::write(
        &lost,
        scenario.clone()
            + "[[xid]]\ngpu = 1\ncode = 79\n\n[[error]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\n\
               gpu = 1\nerror = \"GPU_IS_LOST\"\n\n",
    )
    .unwrap();
    let report = sim.dir.path().join("report.json");
    let replaced = format!("{}.new", sim.scenario.display());
    // The command's last act: the GPU is lost (the scenario replaced at once), then it ends.
    let script = format!(
        "\"$0\" --mem 1GiB --sleep 1.5 && cp '{}' '{replaced}' && mv '{replaced}' '{}'",
        lost.display(),
        sim.scenario.display()
    );
    let cuda = common::sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args(["--devices", "1", "--report-json", report.to_str().unwrap(), "--", "sh", "-c", &script, &cuda])
        .run();
    outcome
        .status(0)
        .stderr_has("warning: Xid 79 on GPU 1")
        .stderr_has("unverifiable: GPU 1 fell off the bus");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "unverifiable", "{json}");
}
