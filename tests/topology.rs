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
