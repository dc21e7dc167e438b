//! The NUMA node of a GPU as `nvidia-smi topo -m` shows it (issue 23): NVML's memory affinity
//! at node scope, else the PCI device's `numa_node` in sysfs; `nvmlDeviceGetNumaNodeId` only
//! for the GPU's own memory node on coherent platforms. Through the binary on the simulator,
//! which answers `nvmlDeviceGetNumaNodeId` NOT_SUPPORTED on a PCIe host as real drivers do.

use crate::common;

use common::{default_scenario, gpurun_binary, Sim};
use serde_json::{json, Value};

fn nodes(listing: &Value) -> Vec<(Value, Value, Value)> {
    listing["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|gpu| (gpu["numa_node"].clone(), gpu["gpu_numa_id"].clone(), gpu["cpus"].clone()))
        .collect()
}

#[test]
fn the_node_is_the_memory_affinitys_not_the_gpu_numa_id() {
    // A PCIe host: the GPU NUMA ID is not supported, the memory affinity is the node.
    let sim = Sim::new(&default_scenario());
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let found = nodes(&listing);
    assert_eq!(found[0], (json!(0), Value::Null, json!("0-15")));
    assert_eq!(found[7], (json!(3), Value::Null, json!("48-63")));
    let matrix = sim.gpurun().args(["--list", "--topology"]).run();
    matrix
        .status(0)
        .stdout_has("GPU2          SYS   SYS     X   PIX   SYS   SYS   SYS   SYS  16-31      1\n");
    // A coherent platform: GPU memory is a node of its own (Grace Hopper's GPU NUMA ID 4), the
    // host node stays the memory affinity's.
    let coherent = default_scenario().replacen("numa_node = 0\n", "numa_node = 0\ngpu_numa_id = 4\n", 1);
    let sim = Sim::new(&coherent);
    let found = nodes(&sim.gpurun().args(["--list", "--json"]).run().status(0).json());
    assert_eq!(found[0], (json!(0), json!(4), json!("0-15")));
    assert_eq!(found[1].1, Value::Null);
}

/// gpurun in a private mount namespace where /sys/bus/pci/devices and /sys/devices/system/node
/// say what `sysfs` lists (path under /sys, contents), or None where that cannot be had here.
fn with_sysfs(sim: &Sim, sysfs: &[(&str, &str)], args: &[&str]) -> Option<common::Outcome> {
    let fake = sim.dir.path().join("sys");
    for (path, contents) in sysfs {
        let file = fake.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, contents).unwrap();
    }
    for dir in ["bus/pci/devices", "devices/system/node"] {
        std::fs::create_dir_all(fake.join(dir)).unwrap();
    }
    let script = "mount --bind \"$0/bus/pci/devices\" /sys/bus/pci/devices \
                  && mount --bind \"$0/devices/system/node\" /sys/devices/system/node && exec \"$@\"";
    let binary = gpurun_binary();
    let mut words = vec!["--mount", "--", "sh", "-c", script, fake.to_str().unwrap(), &binary];
    words.extend_from_slice(args);
    let outcome = sim.gpurun_command("unshare", &words).run();
    if outcome.stderr.contains("unshare:") || outcome.stderr.contains("mount:") {
        common::skip("a private /sys", &outcome.stderr);
        return None;
    }
    Some(outcome)
}

#[test]
fn without_nvmls_memory_affinity_the_kernel_says_the_node() {
    // The driver answers neither the memory nor the CPU affinity of GPUs 2 and 3.
    let mut scenario = default_scenario();
    for (call, gpu) in [
        ("nvmlDeviceGetMemoryAffinity", 2),
        ("nvmlDeviceGetMemoryAffinity", 3),
        ("nvmlDeviceGetCpuAffinity", 2),
    ] {
        scenario += &format!("\n[[error]]\ncall = \"{call}\"\ngpu = {gpu}\nerror = \"NOT_SUPPORTED\"\n");
    }
    let sim = Sim::new(&scenario);
    // GPU 2 (00000000:47:00.0) on node 1, whose CPUs are 0-1; GPU 3's firmware does not say.
    let sysfs = [
        ("bus/pci/devices/0000:47:00.0/numa_node", "1\n"),
        ("bus/pci/devices/0000:4e:00.0/numa_node", "-1\n"),
        ("devices/system/node/node1/cpulist", "0-1\n"),
    ];
    let Some(listing) = with_sysfs(&sim, &sysfs, &["--list", "--json"]) else { return };
    let found = nodes(&listing.status(0).json());
    assert_eq!(found[2], (json!(1), Value::Null, json!("0-1")), "{found:?}");
    assert_eq!(found[3], (Value::Null, Value::Null, json!("16-31")));
    assert_eq!(found[4].0, json!(2));
    // --cpu-bind numa binds to the node's CPUs, within gpurun's own.
    let plan =
        with_sysfs(&sim, &sysfs, &["--dry-run", "--json", "--devices", "2", "--cpu-bind", "numa"]).unwrap();
    let plan = plan.status(0).json();
    assert_eq!(plan["cpus"], json!("0-1"), "{plan}");
}
