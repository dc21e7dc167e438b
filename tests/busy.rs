//! A shared server's choice (issue 23): links and matched models never put a job on a busy GPU
//! (utilization at or above 50%) while a qualifying GPU that is not busy is left out, and
//! `--dry-run` says why each eligible GPU was passed over. Through the binary, on simulated
//! machines written here; the colleague's processes are real ones of the user `nobody`.

use crate::common;

use std::process::{Child, Command};

use common::Sim;
use serde_json::{json, Value};

/// One `[[gpu]]` table: `used` is what the driver shows before any process.
fn gpu(index: u32, name: &str, total: &str, used: &str, util: u32, numa: u32) -> String {
    format!(
        "[[gpu]]\nname = \"{name}\"\nuuid = \"GPU-23000000-0000-4000-8000-00000000000{index}\"\n\
         pci_bus_id = \"00000000:{:02X}:00.0\"\nmemory_total = \"{total}\"\nmemory_used = \"{used}\"\n\
         utilization_gpu = {util}\nutilization_memory = 0\ncpu_affinity = \"{}\"\nnuma_node = {numa}\n\n",
        0x10 * (index + 1),
        if numa == 0 { "0-7" } else { "8-15" },
    )
}

fn link(a: u32, b: u32, level: &str, nvlink: bool) -> String {
    format!("[[link]]\ngpus = [{a}, {b}]\nlevel = \"{level}\"\nnvlink = {nvlink}\n\n")
}

/// A colleague's process: a real one, of the user `nobody`, so that gpurun reads its owner
/// from /proc as it would on a real server.
struct Colleague(Vec<Child>);

impl Colleague {
    fn start(count: usize) -> Option<Colleague> {
        let mut children = Vec::new();
        for _ in 0..count {
            let child = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "120"])
                .spawn()
                .ok()?;
            children.push(child);
        }
        // setpriv execs sleep: the PID is the sleeping process's once the exec is done.
        let switched = common::wait_until(std::time::Duration::from_secs(10), || {
            children.iter().all(|child| {
                std::fs::read_to_string(format!("/proc/{}/status", child.id()))
                    .is_ok_and(|status| status.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")))
            })
        });
        if !switched {
            common::skip("a second user", "setpriv could not switch to nobody");
            return None;
        }
        Some(Colleague(children))
    }

    /// `[[process]]` tables putting these processes on `gpu`, 1 GiB each.
    fn on(&self, gpu: u32) -> String {
        self.0
            .iter()
            .map(|child| format!("[[process]]\ngpu = {gpu}\npid = {}\nused = \"1GiB\"\n\n", child.id()))
            .collect()
    }
}

impl Drop for Colleague {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The server of the report: A100 80GB 0 and 1 on NUMA node 0 (1 at 60% with two processes of
/// another user, and the most free memory), A100 80GB 2 across the socket, idle; a V100 and
/// four cards of four other models. Most-free without the rule ranks 1, 0, 2.
fn mixed_server(colleague: &Colleague) -> String {
    let mut scenario = String::new();
    scenario += &gpu(0, "NVIDIA A100-SXM4-80GB", "80GiB", "4GiB", 0, 0);
    scenario += &gpu(1, "NVIDIA A100-SXM4-80GB", "80GiB", "1GiB", 60, 0);
    scenario += &gpu(2, "NVIDIA A100-SXM4-80GB", "80GiB", "4GiB", 0, 1);
    scenario += &gpu(3, "Tesla V100-SXM2-32GB", "32GiB", "1GiB", 0, 1);
    for (index, name) in (4..).zip(["NVIDIA L4", "Tesla T4", "NVIDIA A10", "NVIDIA A40"]) {
        scenario += &gpu(index, name, "24GiB", "1GiB", 0, 1);
    }
    scenario + &colleague.on(1)
}

fn visible(sim: &Sim, args: &[&str]) -> String {
    let outcome = sim.gpurun().args(["--export"]).args(args).run();
    let line = outcome.status(0).stdout.lines().next().unwrap_or_default().to_owned();
    line.trim_start_matches("export CUDA_VISIBLE_DEVICES='").trim_end_matches('\'').to_owned()
}

fn passed_over(plan: &Value) -> Vec<(u64, Value)> {
    plan["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|gpu| (gpu["index"].as_u64().unwrap(), gpu["passed_over"].clone()))
        .collect()
}

#[test]
fn a_colleagues_busy_card_is_not_taken_for_a_numa_link() {
    let Some(colleague) = Colleague::start(2) else { return };
    let sim = Sim::new(&mixed_server(&colleague));
    // Not 0 and 1 (a NUMA-node link, but 1 is busy): the idle A100 across the socket.
    for policy in ["most-free", "least-util", "balanced", "pack", "index"] {
        assert_eq!(
            visible(&sim, &["--gpus", "2", "--min-free", "8G", "--policy", policy]),
            "0,2",
            "{policy}"
        );
    }
    // One GPU: the idle card, though the busy one has more free memory.
    assert_eq!(visible(&sim, &["--min-free", "8G"]), "0");
    // Every GPU: the busy one last (CUDA's device 0 is the best).
    assert!(visible(&sim, &["--gpus", "all"]).ends_with(",1"));
    // Too few idle ones: the busy one joins them, after them.
    assert_eq!(visible(&sim, &["--gpus", "3", "--model", "A100"]), "0,2,1");

    let text = sim.gpurun().args(["--dry-run", "--gpus", "2", "--min-free", "8G"]).run();
    text.status(0)
        .stdout_has("passed over:\n")
        .stdout_has("  GPU 1: busy: 60% utilization, 2 processes of nobody\n")
        .stdout_has("  GPU 3: the pair 0-2 is one model\n");
    let plan = sim.gpurun().args(["--dry-run", "--json", "--gpus", "2", "--min-free", "8G"]).run().json();
    assert_eq!(plan["selected"][0]["index"], 0);
    assert_eq!(plan["selected"][1]["index"], 2);
    let reasons = passed_over(&plan);
    assert_eq!(reasons[0], (0, Value::Null));
    assert_eq!(reasons[1], (1, json!("busy: 60% utilization, 2 processes of nobody")));
    assert_eq!(reasons[2], (2, Value::Null));
    assert!(reasons[3..].iter().all(|(_, why)| why == "the pair 0-2 is one model"), "{reasons:?}");
    // One GPU: the others were ranked after it, and the busy one is busy.
    let single = sim.gpurun().args(["--dry-run", "--json", "--min-free", "8G"]).run().json();
    let reasons = passed_over(&single);
    assert_eq!(reasons[1].1, "busy: 60% utilization, 2 processes of nobody");
    assert_eq!(reasons[2].1, "ranked after 0 by most-free");
    // A launch says the same with -v.
    sim.gpurun()
        .args(["-v", "--gpus", "2", "--min-free", "8G", "--", "true"])
        .run()
        .status(0)
        .stderr_has("passed over GPU 1: busy: 60% utilization, 2 processes of nobody");
    // Without -v, nothing of it.
    let quiet = sim.gpurun().args(["--gpus", "2", "--min-free", "8G", "--", "true"]).run();
    assert!(!quiet.status(0).stderr.contains("passed over"), "{}", quiet.stderr);
}

/// Four H100s in two NVLink pairs, 0+1 and 2+3, on one NUMA node; 0 and 2 at `load` percent.
fn nvlink_pairs(load: u32) -> String {
    let mut scenario = String::new();
    for index in 0..4 {
        let util = if index % 2 == 0 { load } else { 0 };
        scenario += &gpu(index, "NVIDIA H100 80GB HBM3", "80GiB", "1GiB", util, 0);
    }
    scenario + &link(0, 1, "single", true) + &link(2, 3, "single", true)
}

#[test]
fn an_nvlink_pair_with_a_busy_card_loses_to_two_idle_cards() {
    let sim = Sim::new(&nvlink_pairs(70));
    assert_eq!(visible(&sim, &["--gpus", "2"]), "1,3");
    assert_eq!(visible(&sim, &["--gpus", "1-2"]), "1,3");
    let plan = sim.gpurun().args(["--dry-run", "--json", "--gpus", "2"]).run().json();
    assert_eq!(plan["links"], json!(["1-3 node"]));
    let reasons = passed_over(&plan);
    assert_eq!(reasons[0].1, "busy: 70% utilization");
    assert_eq!(reasons[2].1, "busy: 70% utilization");
    // Three: both idle cards, and the busy one the policy and links prefer after them.
    let three = visible(&sim, &["--gpus", "3"]);
    assert!(three.starts_with("1,3,"), "{three}");
    // --topology nvlink requires a pair: a busy card then, as asked.
    let pair = visible(&sim, &["--gpus", "2", "--topology", "nvlink"]);
    assert!(pair == "1,0" || pair == "3,2", "{pair}");
}

#[test]
fn a_lightly_used_nvlink_pair_still_beats_an_idle_pcie_pair() {
    let sim = Sim::new(&nvlink_pairs(30));
    let pair = visible(&sim, &["--gpus", "2"]);
    assert!(pair == "1,0" || pair == "3,2", "{pair}");
    let plan = sim.gpurun().args(["--dry-run", "--json", "--gpus", "2"]).run().json();
    let reasons = passed_over(&plan);
    let passed: Vec<&Value> = reasons.iter().map(|(_, why)| why).filter(|why| !why.is_null()).collect();
    assert_eq!(passed, vec!["an NVLink pair 0-1 links better"; 2], "{plan}");
    // At 50% a card is busy: the idle pair then.
    sim.rewrite(&nvlink_pairs(50));
    assert_eq!(visible(&sim, &["--gpus", "2"]), "1,3");
}

#[test]
fn unknown_utilization_counts_as_busy_for_the_rule_only() {
    let mut scenario = nvlink_pairs(0);
    scenario += "[[error]]\ncall = \"nvmlDeviceGetUtilizationRates\"\ngpu = 0\nerror = \"NOT_SUPPORTED\"\n\n";
    let sim = Sim::new(&scenario);
    // Eligible without --max-util, but taken after every card known not to be busy.
    assert_eq!(visible(&sim, &["--gpus", "3"]), "1,2,3");
    assert_eq!(visible(&sim, &["--gpus", "all"]).split(',').next_back(), Some("0"));
    let plan = sim.gpurun().args(["--dry-run", "--json", "--gpus", "1"]).run().json();
    assert_eq!(plan["gpus"][0]["eligible"], true);
    assert_eq!(plan["gpus"][0]["passed_over"], "busy: utilization unknown (counted as busy)");
}
