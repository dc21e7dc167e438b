//! Multi-GPU jobs on matched, well-connected cards (issue 16), through the binary on
//! tests/scenarios/topo8.toml: NUMA 0 holds A100s 0-3, NUMA 1 H100s 4-7; PCIe switches join
//! 0+1, 2+3, 4+5 and 6+7; NVLink joins 2+3 and 6+7. Most-free ranks 0, 4, 6, 7, 2, 3, 1, 5.

use crate::common;

use common::{scenario_file, Sim};
use serde_json::json;

fn topo8() -> Sim {
    Sim::new(&scenario_file("topo8.toml"))
}

fn visible(sim: &Sim, args: &[&str]) -> String {
    let outcome = sim.gpurun().args(["--export"]).args(args).run();
    let line = outcome.status(0).stdout.lines().next().unwrap_or_default().to_owned();
    line.trim_start_matches("export CUDA_VISIBLE_DEVICES='").trim_end_matches('\'').to_owned()
}

#[test]
fn two_gpus_are_an_nvlink_pair_of_one_model() {
    let sim = topo8();
    // Not the two with most free memory (0 and 4: two models, across sockets).
    assert_eq!(visible(&sim, &["--gpus", "2"]), "6,7");
    sim.gpurun().args(["--dry-run", "--gpus", "2"]).run().status(0).stdout_has("links: 6-7 nvlink\n");
    let plan = sim.gpurun().args(["--dry-run", "--json", "--gpus", "2"]).run().json();
    assert_eq!(plan["links"], json!(["6-7 nvlink"]));
    // Without the H100 pair, the A100 one.
    assert_eq!(visible(&sim, &["--gpus", "2", "--exclude", "6"]), "2,3");
    // Links ignored: the policy's order within one model.
    assert_eq!(visible(&sim, &["--gpus", "2", "--topology", "ignore"]), "0,2");
    // Three of one model: the best worst link among the A100s is the host bridge; policy next.
    assert_eq!(visible(&sim, &["--gpus", "3", "--topology", "ignore"]), "0,2,3");
    // A single GPU needs no links: the most free.
    assert_eq!(visible(&sim, &[]), "0");
}

#[test]
fn required_levels_and_one_model_are_refused_with_the_reason() {
    let sim = topo8();
    sim.gpurun()
        .args(["--topology", "switch", "--gpus", "4", "--", "true"])
        .run()
        .status(125)
        .stderr_has(
            "--topology switch --gpus 4: no 4 of the GPUs gpurun may use are joined pairwise by one PCIe switch or better",
        );
    sim.gpurun()
        .args(["--topology", "nvlink", "--gpus", "2", "--exclude", "3,6", "--wait", "--", "true"])
        .run()
        .status(125)
        .stderr_has("are joined pairwise by NVLink or better");
    assert_eq!(visible(&sim, &["--topology", "node", "--gpus", "4"]), "0,2,3,1");
    sim.gpurun()
        .args(["--same-model", "--gpus", "5", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--same-model --gpus 5: no 5 of the GPUs gpurun may use are of one model");
    // Without --same-model, five GPUs mix models.
    assert_eq!(visible(&sim, &["--gpus", "5"]).split(',').count(), 5);
}

#[test]
fn list_shows_the_links_numa_nodes_and_local_cpus() {
    let sim = topo8();
    let table = sim.gpurun().args(["--list", "--topology"]).run();
    table
        .status(0)
        .stdout_has("links        GPU0  GPU1  GPU2")
        .stdout_has("\nGPU2          PHB   PHB     X    NV   SYS")
        .stdout_has("  0-7        0\n");
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(listing["topology"]["6-7"], "nvlink");
    assert_eq!(listing["topology"]["0-1"], "switch");
    assert_eq!(listing["topology"]["0-2"], "hostbridge");
    assert_eq!(listing["topology"]["0-4"], "system");
    assert_eq!(listing["topology"].as_object().unwrap().len(), 28, "every pair of 8");
    assert_eq!((&listing["gpus"][5]["numa_node"], &listing["gpus"][5]["cpus"]), (&json!(1), &json!("8-15")));
    // A plain --list asks NVML for no links.
    let plain = sim.gpurun().args(["--list"]).run();
    assert!(!plain.status(0).stdout.contains("links"), "{}", plain.stdout);
}

/// Issue 43 (9): what the docs promise about link reads, counted through the simulator's call
/// log: a one-GPU request reads no link at all; a multi-GPU one reads the links among at most
/// the 16 best qualifying GPUs, or 4x the request where that is more, never all pairs.
#[test]
fn link_reads_are_only_what_a_request_needs() {
    let gpus: String = (0..24)
        .map(|i| {
            format!(
                "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-43430000-0000-4000-8000-{i:012}\"\n\
                 pci_bus_id = \"00000000:{:02X}:00.0\"\nmemory_total = \"80GiB\"\nmemory_used = \"{}GiB\"\n\
                 utilization_gpu = 0\nutilization_memory = 0\n\n",
                i + 1,
                i
            )
        })
        .collect();
    let sim = Sim::new(&gpus);
    // The GPU pairs whose link gpurun asked for (either call, each pair once).
    let pairs_read = |args: &[&str]| -> std::collections::BTreeSet<String> {
        let log = sim.dir.path().join(format!("calls{}.log", args.join("")));
        sim.gpurun().args(["--export"]).args(args).env("NVML_SIM_CALL_LOG", &log).run().status(0);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter(|line| {
                line.contains("nvmlDeviceGetTopologyCommonAncestor")
                    || line.contains("nvmlDeviceGetP2PStatus")
            })
            .map(|line| line.rsplit(' ').next().unwrap_or_default().to_owned())
            .collect()
    };
    let calls = |args: &[&str]| -> usize {
        let log = sim.dir.path().join(format!("count{}.log", args.join("")));
        sim.gpurun().args(["--export"]).args(args).env("NVML_SIM_CALL_LOG", &log).run().status(0);
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("nvmlDeviceGetTopologyCommonAncestor"))
            .count()
    };
    assert_eq!(calls(&["--gpus", "1"]), 0, "a one-GPU request reads no link");
    // 16 GPUs: 120 pairs at most; 4 x 6 = 24 GPUs: all 276.
    let two = calls(&["--gpus", "2"]);
    assert!(two > 0 && two <= 120, "--gpus 2 read {two} links (at most the 120 pairs of the 16 best)");
    // Only the best 16 (the most free: GPUs 0-15) have their links read.
    let devices: Vec<u32> = pairs_read(&["--gpus", "2"]).iter().filter_map(|gpu| gpu.parse().ok()).collect();
    assert!(devices.iter().all(|gpu| *gpu < 16), "links read beyond the 16 best: {devices:?}");
    let six = calls(&["--gpus", "6"]);
    assert!(six > 120 && six <= 276, "--gpus 6 read {six} links (the 24 best: at most 276 pairs)");
}

/// Issue 42 (9), DESIGN 4: a multi-GPU set that mixes models is said so, in the dry run (text
/// and JSON) and at launch; one of one model says nothing.
#[test]
fn a_set_of_mixed_models_is_said_so() {
    let sim = Sim::new(&common::default_scenario());
    let dry = sim.gpurun().args(["--dry-run", "--gpus", "4"]).run();
    dry.status(0).stdout_has(
        "mixed models: 2 x NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-40GB: the job runs at the \
         pace of the slowest, and NVIDIA A100-SXM4-40GB (40 GiB) bounds what each rank can hold",
    );
    let json = sim.gpurun().args(["--dry-run", "--json", "--gpus", "4"]).run().json();
    assert!(json["mixed_models"].as_str().is_some_and(|text| text.starts_with("mixed models: ")), "{json}");
    let same = sim.gpurun().args(["--dry-run", "--json", "--gpus", "2", "--same-model"]).run().json();
    assert_eq!(same["mixed_models"], serde_json::Value::Null, "{same}");
    let launch = sim.gpurun().args(["--gpus", "3", "--", "true"]).run();
    launch.status(0).stderr_has("gpurun: warning: mixed models: ");
    let one = sim.gpurun().args(["--gpus", "1", "--", "true"]).run();
    assert!(!one.status(0).stderr.contains("mixed models"), "{}", one.stderr);
    // A --per-rank group's set is the job's too, though each rank holds one GPU of it.
    let rank = |run: common::Run| {
        run.env("LOCAL_RANK", "0")
            .env("RANK", "0")
            .env("LOCAL_WORLD_SIZE", "4")
            .env("WORLD_SIZE", "4")
            .env("TORCHELASTIC_RUN_ID", "mixed")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", "29500")
    };
    rank(sim.gpurun()).args(["--per-rank", "--dry-run"]).run().status(0).stdout_has("mixed models: ");
}

/// Issue 42 (11): where the A100 pair 0-1 spans the sockets and the H100 pair 2-3 shares a NUMA
/// node, `--dry-run --gpus 2` takes 2-3 and said of GPU 0 "the pair 2-3 is one model", though
/// 0-1 is one model too: the link decided, and the reason says so.
#[test]
fn a_passed_over_reason_names_the_rule_that_decided() {
    let sim = Sim::new(&scenario_file("two_pairs.toml"));
    let dry = sim.gpurun().args(["--dry-run", "--gpus", "2"]).run();
    dry.status(0).stdout_has("GPU 0: a NUMA-node pair 2-3 links better");
    assert!(!dry.stdout.contains("is one model"), "{}", dry.stdout);
}
