//! Unified-memory GPUs (issue 52): an integrated GPU that shares the system's memory (GB10, the
//! DGX Spark) answers NVML's memory calls NOT_SUPPORTED (nvml.h), so its free and total are the
//! system's (/proc/meminfo's MemAvailable and MemTotal), marked as such in `--list`, its JSON
//! and the report, and `--min-free` chooses by them.

use crate::common;

use common::{scenario_file, sim_cuda, Sim};

fn meminfo_bytes(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|line| line.starts_with(&format!("{field}:"))).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_gb10_lists_the_systems_memory_and_selects_by_it() {
    let sim = Sim::new(&scenario_file("gb10.toml"));
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpu = &listing["gpus"][0];
    assert_eq!(gpu["unified_memory"], true, "{gpu:#}");
    assert_eq!(gpu["memory"]["total_bytes"], meminfo_bytes("MemTotal"));
    assert_eq!(gpu["memory"]["reserved_bytes"], 0);
    let free = gpu["memory"]["free_bytes"].as_u64().unwrap();
    assert!(free > 0 && free <= meminfo_bytes("MemTotal"), "{gpu:#}");
    assert_eq!(gpu["eligible"], true);
    sim.gpurun().arg("--list").run().status(0).stdout_has("NVIDIA GB10").stdout_has(
        "^: unified memory: the GPU has none of its own (NVML: Not Supported), so these are the system's",
    );

    // --min-free by the system's figures: 1G fits any test machine, 100 TiB none.
    let report = sim.dir.path().join("report.json");
    sim.gpurun()
        .args(["--min-free", "1G", "--report-json"])
        .arg(&report)
        .arg("--")
        .arg(sim_cuda())
        .args(["--mem", "512MiB", "--sleep", "0.5"])
        .run()
        .status(0)
        .stderr_has("on GPU 0 (NVIDIA GB10, unified memory)")
        .stderr_has("verified: PID");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["selected"][0]["unified_memory"], true, "{json}");
    assert_eq!(json["peak_memory_bytes"]["GPU-0b100000-5a4c-4e2b-9a61-6b7c8d9e0f10"], 512u64 << 20);
    sim.gpurun()
        .args(["--min-free", "100T", "--", "true"])
        .run()
        .status(125)
        .stderr_has("no GPU can ever have that much free");
}
