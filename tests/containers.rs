//! The test bed for containers (issue 28): a real podman (Debian's 4.3, with runc: crun
//! refuses this machine's hybrid cgroups) runs a busybox image on the simulated GPUs through a
//! CDI spec of kind `nvidia.com/gpu` that the test writes, as nvidia-ctk writes one for the
//! real driver. Inside, NVML shows only the injected GPUs, renumbered from 0 in PCI order; a
//! simulated CUDA program there registers from its PID namespace, and NVML on the host lists
//! it with its host PID, as the driver does.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{gpurun_binary, sim_cuda, wait_until, Sim};
use serde_json::Value;

/// Four idle GPUs with UUIDs of their own (a CDI device is named by its UUID).
fn scenario() -> String {
    (0..4)
        .map(|index| {
            format!(
                "[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\nuuid = \"GPU-c0a1e400-0000-4000-8000-00000000000{index}\"\n\
                 pci_bus_id = \"00000000:{bus:02X}:00.0\"\nmemory_total = \"80GiB\"\nutilization_gpu = 0\n\
                 utilization_memory = 0\n",
                bus = 0x10 * (index + 1)
            )
        })
        .collect()
}

fn uuid(index: u32) -> String {
    format!("GPU-c0a1e400-0000-4000-8000-00000000000{index}")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// A podman of its own: private storage under `dir`, runc and ulimits within this machine's
/// hard limits through CONTAINERS_CONF (as a user's containers.conf would set them), the
/// simulated machine's image, and its CDI spec in /etc/cdi (podman 4.3 reads only /etc/cdi and
/// /var/run/cdi), removed when dropped.
struct Podman {
    dir: PathBuf,
    spec: PathBuf,
}

impl Podman {
    fn start(sim: &Sim) -> Option<Podman> {
        if !nix_is_root() || !on_path("podman") || !on_path("runc") {
            common::skip(
                "tests/containers.rs",
                "podman and runc as root are needed (make test installs them: tests/containers/install.sh)",
            );
            return None;
        }
        let dir = sim.dir.path().join("podman");
        std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
        std::fs::write(
            dir.join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n[engine]\nruntime = \"runc\"\n",
        )
        .unwrap();
        // The image: a static busybox. Everything else (the programs, their libraries, the
        // simulator) comes from the CDI spec's mounts, as the driver's libraries do.
        std::fs::copy("/bin/busybox", dir.join("rootfs/bin/busybox")).unwrap();
        for applet in ["sh", "sleep", "cat"] {
            std::os::unix::fs::symlink("busybox", dir.join("rootfs/bin").join(applet)).unwrap();
        }
        let tar = dir.join("rootfs.tar");
        let packed =
            Command::new("tar").arg("-C").arg(dir.join("rootfs")).arg("-cf").arg(&tar).arg(".").status();
        assert!(packed.unwrap().success());
        let spec = PathBuf::from(format!("/etc/cdi/gpurun-test-{}.yaml", std::process::id()));
        let podman = Podman { dir, spec };
        podman.write_spec(sim);
        let imported =
            podman.command().arg("import").arg(&tar).arg("localhost/gpurun-test:1").output().unwrap();
        assert!(imported.status.success(), "podman import: {}", String::from_utf8_lossy(&imported.stderr));
        Some(podman)
    }

    /// Kind nvidia.com/gpu, a device per UUID (names by index would collide with a real
    /// nvidia-ctk spec on a GPU machine); each sets its own NVML_SIM_VISIBLE_<n> (podman keeps
    /// the last value of a variable two devices set), and every device brings the simulator.
    fn write_spec(&self, sim: &Sim) {
        let build = sim_cuda().parent().unwrap().to_owned();
        let mounts: Vec<String> =
            [sim.dir.path(), &build, Path::new("/lib/x86_64-linux-gnu"), Path::new("/lib64")]
                .iter()
                .filter(|path| path.exists())
                .map(|path| {
                    let mode = if *path == sim.dir.path() { "rw" } else { "ro" };
                    format!(
                        "    - {{hostPath: {0}, containerPath: {0}, options: [rbind, {mode}]}}\n",
                        path.display()
                    )
                })
                .collect();
        let devices: String = (0..4)
            .map(|index| {
                format!(
                    "  - name: \"{}\"\n    containerEdits:\n      env: [NVML_SIM_VISIBLE_{index}={}]\n",
                    uuid(index),
                    uuid(index)
                )
            })
            .collect();
        let text = format!(
            "cdiVersion: \"0.5.0\"\nkind: nvidia.com/gpu\ncontainerEdits:\n  env:\n    - NVML_SIM_SCENARIO={}\n  mounts:\n{}devices:\n{devices}",
            sim.scenario.display(),
            mounts.concat()
        );
        std::fs::create_dir_all("/etc/cdi").unwrap();
        std::fs::write(&self.spec, text).unwrap();
    }

    fn command(&self) -> Command {
        let mut command = Command::new("podman");
        command
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--storage-driver")
            .arg("vfs")
            .stdin(Stdio::null());
        command
    }

    /// `podman run --rm` with these GPUs (CDI devices by UUID) of the image.
    fn run(&self, gpus: &[u32], command: &[&str]) -> Command {
        let mut run = self.command();
        run.args(["run", "--rm"]);
        for gpu in gpus {
            run.arg("--device").arg(format!("nvidia.com/gpu={}", uuid(*gpu)));
        }
        run.arg("localhost/gpurun-test:1").args(command);
        run
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.spec);
        // Storage made as root under the test's directory: podman's own cleanup first.
        let _ = self
            .command()
            .args(["system", "reset", "--force"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn a_container_sees_its_gpus_renumbered_and_the_host_sees_its_processes_host_pids() {
    let sim = Sim::new(&scenario());
    let Some(podman) = Podman::start(&sim) else { return };
    // NVML inside (gpurun --list through nvml-wrapper): GPUs 3 and 1 of the host, given in
    // that order, are 0 and 1 in PCI order, and nothing else is there.
    let gpurun = gpurun_binary();
    let library = sim.library().display().to_string();
    let inside = podman
        .run(&[3, 1], &[&gpurun, "--nvml-lib", &library, "--no-lock", "--list", "--json"])
        .output()
        .unwrap();
    assert!(inside.status.success(), "{}", String::from_utf8_lossy(&inside.stderr));
    let listing = stdout_json(&inside);
    let seen: Vec<(u64, String)> = listing["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|gpu| (gpu["index"].as_u64().unwrap(), gpu["uuid"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(seen, [(0, uuid(1)), (1, uuid(3))], "{listing}");

    // A simulated CUDA program in the container registers from its PID namespace (it is PID 1
    // there); NVML on the host lists it on host GPU 2 with its host PID.
    let sim_cuda = sim_cuda().display().to_string();
    let mut running = podman
        .run(&[2], &[&sim_cuda, "--sleep", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut host_pid = None;
    let listed = wait_until(Duration::from_secs(30), || {
        let listing = sim.gpurun().args(["--list", "--json"]).run();
        host_pid = listing.json()["gpus"][2]["processes"]
            .as_array()
            .and_then(|p| p.first())
            .and_then(|p| p["pid"].as_u64());
        host_pid.is_some()
    });
    assert!(listed, "the container's process never showed on GPU 2");
    let pid = host_pid.unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid: Vec<&str> =
        status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap().split_whitespace().collect();
    assert_eq!(nspid.len(), 2, "PID {pid} is a host PID of a process in a child namespace: {nspid:?}");
    assert_eq!(nspid[1], "1", "{nspid:?}");
    let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(command.contains("sim-cuda"), "{command:?}");
    let _ = podman
        .command()
        .args(["stop", "--all", "-t", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = running.kill();
    let ended = running.wait_with_output().unwrap();
    // What sim-cuda saw inside: one device, ordinal 0, the host's GPU 2.
    let report: Value = String::from_utf8_lossy(&ended.stdout)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&ended.stderr)));
    assert_eq!(report["devices"][0]["nvml_index"], 0, "{report}");
    assert_eq!(report["devices"][0]["uuid"], uuid(2), "{report}");
    assert!(wait_until(Duration::from_secs(10), || {
        sim.gpurun().args(["--list", "--json"]).run().json()["gpus"][2]["processes"]
            .as_array()
            .is_some_and(|p| p.is_empty())
    }));
}
