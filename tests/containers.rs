//! The test bed for containers (issue 28): a real podman (Debian's 4.3, with runc: crun
//! refuses this machine's hybrid cgroups) runs a busybox image on the simulated GPUs through a
//! CDI spec of kind `nvidia.com/gpu` that the test writes, as nvidia-ctk writes one for the
//! real driver. Inside, NVML shows only the injected GPUs, renumbered from 0 in PCI order; a
//! simulated CUDA program there registers from its PID namespace, and NVML on the host lists
//! it with its host PID, as the driver does.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{gpurun_binary, sim_cuda, wait_until, Sim};
use serde_json::Value;

/// Four idle GPUs with UUIDs of their own: a CDI device is named by its UUID, and the tests'
/// specs (one per test, in /etc/cdi, read by every podman) must not name the same device.
fn scenario(test: u32) -> String {
    (0..4)
        .map(|index| {
            format!(
                "[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\nuuid = \"{}\"\n\
                 pci_bus_id = \"00000000:{bus:02X}:00.0\"\nmemory_total = \"80GiB\"\nutilization_gpu = 0\n\
                 utilization_memory = 0\n",
                uuid(test, index),
                bus = 0x10 * (index + 1)
            )
        })
        .collect()
}

fn uuid(test: u32, index: u32) -> String {
    format!("GPU-c0a1e4{test:02x}-0000-4000-8000-00000000000{index}")
}

/// A podman of its own: private storage under `dir`, runc and ulimits within this machine's
/// hard limits through CONTAINERS_CONF (as a user's containers.conf would set them), the
/// simulated machine's image, and its CDI spec in /etc/cdi (podman 4.3 reads only /etc/cdi and
/// /var/run/cdi), removed when dropped.
struct Podman {
    dir: PathBuf,
    spec: PathBuf,
    test: u32,
}

impl Podman {
    fn start(sim: &Sim, test: u32) -> Option<Podman> {
        if !nix_is_root() || !common::on_path("podman") || !common::on_path("runc") {
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
            format!(
                "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
                 [engine]\nruntime = \"runc\"\nlock_type = \"file\"\ntmp_dir = \"{}\"\nevents_logger = \"file\"\n",
                dir.join("tmp").display()
            ),
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
        let spec = PathBuf::from(format!("/etc/cdi/gpurun-test-{}-{test}.yaml", std::process::id()));
        let podman = Podman { dir, spec, test };
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
        // Where the simulator library really is: the build, or its copy for every user (a
        // clone in a home closed to others).
        let library = std::fs::canonicalize(sim.library()).unwrap();
        let library_dir = library.parent().unwrap();
        let mut paths = vec![sim.dir.path(), &build, Path::new("/lib/x86_64-linux-gnu"), Path::new("/lib64")];
        if !paths.contains(&library_dir) {
            paths.push(library_dir);
        }
        let mounts: Vec<String> = paths
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
                    uuid(self.test, index),
                    uuid(self.test, index)
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

    /// The words of `podman <its globals> <rest>`, for gpurun's command line.
    fn words(&self, rest: &[&str]) -> Vec<String> {
        let mut words = vec!["podman".to_owned()];
        for (flag, value) in [
            ("--root", self.dir.join("root").display().to_string()),
            ("--runroot", self.dir.join("runroot").display().to_string()),
            ("--storage-driver", "vfs".to_owned()),
        ] {
            words.push(flag.to_owned());
            words.push(value);
        }
        words.extend(rest.iter().map(|w| (*w).to_owned()));
        words
    }

    /// gpurun in front of `podman run --rm <run options> IMAGE <command>`.
    fn gpurun(&self, sim: &Sim, gpurun_args: &[&str], run_options: &[&str], command: &[&str]) -> common::Run {
        let mut rest = vec!["run", "--rm"];
        rest.extend(run_options);
        rest.push("localhost/gpurun-test:1");
        rest.extend(command);
        sim.gpurun()
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .args(gpurun_args)
            .arg_words(["--"])
            .arg_words(self.words(&rest))
    }

    /// The containers podman knows of (running or not).
    fn containers(&self) -> Vec<String> {
        let output = self.command().args(["ps", "-a", "--format", "{{.ID}}"]).output().unwrap();
        String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect()
    }

    /// `podman run --rm` with these GPUs (CDI devices by UUID) of the image.
    fn run(&self, gpus: &[u32], command: &[&str]) -> Command {
        let mut run = self.command();
        run.args(["run", "--rm"]);
        for gpu in gpus {
            run.arg("--device").arg(format!("nvidia.com/gpu={}", uuid(self.test, *gpu)));
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

trait Words {
    fn arg_words<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(self, words: I) -> Self;
}

impl Words for common::Run {
    fn arg_words<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(self, words: I) -> Self {
        self.args(words)
    }
}

fn nix_is_root() -> bool {
    common::is_root()
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
    let sim = Sim::new(&scenario(1));
    let Some(podman) = Podman::start(&sim, 1) else { return };
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
    assert_eq!(seen, [(0, uuid(1, 1)), (1, uuid(1, 3))], "{listing}");

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
    assert_eq!(report["devices"][0]["uuid"], uuid(1, 2), "{report}");
    assert!(wait_until(Duration::from_secs(10), || {
        sim.gpurun().args(["--list", "--json"]).run().json()["gpus"][2]["processes"]
            .as_array()
            .is_some_and(|p| p.is_empty())
    }));
}

/// Starts gpurun in front of a container whose command prints "ready" first, and returns once
/// it has.
fn start_until_ready(mut command: Command, stderr: Stdio) -> std::process::Child {
    let mut child = command.stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// sim-cuda's one JSON line on stdout: (NVML index inside, UUID) of each device it used.
fn used_inside(stdout: &str) -> Vec<(u64, String)> {
    let report: Value = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no report from sim-cuda: {stdout:?}"));
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["nvml_index"].as_u64().unwrap(), d["uuid"].as_str().unwrap().to_owned()))
        .collect()
}

fn read_report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn one_and_two_gpu_containers_land_on_the_chosen_gpus_and_are_verified_by_host_pid() {
    let sim = Sim::new(&scenario(2));
    let Some(podman) = Podman::start(&sim, 2) else { return };
    let sim_cuda = sim_cuda().display().to_string();
    for (count, devices) in [("1", "2"), ("2", "1,3")] {
        let report_path = sim.dir.path().join(format!("report{count}.json"));
        let report_arg = report_path.display().to_string();
        let run = podman
            .gpurun(
                &sim,
                &["--gpus", count, "--devices", devices, "--report-json", &report_arg],
                &[],
                &[&sim_cuda, "--sleep", "1"],
            )
            .run();
        run.status(0).stderr_has("--device nvidia.com/gpu=").stderr_has("verified");
        let report = read_report(&report_path);
        let chosen: Vec<String> = report["selected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["uuid"].as_str().unwrap().to_owned())
            .collect();
        // Inside, the chosen GPUs are 0 (and 1), in PCI order; CUDA_VISIBLE_DEVICES is not set.
        let inside = used_inside(&run.stdout);
        assert_eq!(
            inside.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..chosen.len() as u64).collect::<Vec<_>>()
        );
        assert_eq!(inside.iter().map(|(_, u)| u.clone()).collect::<Vec<_>>(), chosen, "{run:#?}");
        assert!(run.stdout.contains("\"CUDA_VISIBLE_DEVICES\":null"), "{}", run.stdout);
        assert!(run.stdout.contains("\"CUDA_DEVICE_ORDER\":\"PCI_BUS_ID\""), "{}", run.stdout);
        assert_eq!(report["verification"]["verdict"], "verified", "{report}");
        // The verdict names the container's process by its host PID (PID 1 inside).
        let detail = report["verification"]["detail"].as_str().unwrap();
        let pid: u32 = detail
            .strip_prefix("PID ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        assert!(pid > 1, "{detail}");
        assert_eq!(report["container"]["image"], "localhost/gpurun-test:1", "{report}");
        assert_eq!(report["container"]["client"], "podman", "{report}");
        assert_eq!(report["container"]["id"].as_str().map(str::len), Some(64), "{report}");
    }
    assert!(podman.containers().is_empty(), "--rm containers left: {:?}", podman.containers());
}

#[test]
fn exit_status_and_signals_pass_through_the_client() {
    let sim = Sim::new(&scenario(3));
    let Some(podman) = Podman::start(&sim, 3) else { return };
    podman.gpurun(&sim, &["-q"], &[], &["sh", "-c", "exit 7"]).run().status(7);
    // --exec: gpurun becomes the client and reads no ID, so it adds no --cidfile, and no private
    // directory is left in the temporary directory (issue 36: one per run was).
    let tmp = sim.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    podman.gpurun(&sim, &["-q", "--exec"], &[], &["sh", "-c", "exit 6"]).env("TMPDIR", &tmp).run().status(6);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "--exec left {left:?} in TMPDIR");
    // SIGTERM to gpurun reaches the client, which passes it into the container (--sig-proxy).
    let command = podman
        .gpurun(&sim, &["-q"], &[], &["sh", "-c", "trap 'exit 42' TERM; echo ready; sleep 100 & wait"])
        .command;
    let mut child = start_until_ready(command, Stdio::null());
    // podman sets up its signal proxy only after it has attached to the container: a signal in
    // that first moment can be handled by podman itself (seen once under load: it exited 0),
    // with or without gpurun in front.
    std::thread::sleep(Duration::from_secs(1));
    common::send_signal(child.id(), libc::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(42), "{status:?}");
}

#[test]
fn the_users_gpu_options_and_detached_runs_are_refused_before_anything_runs() {
    let sim = Sim::new(&scenario(4));
    let Some(podman) = Podman::start(&sim, 4) else { return };
    for (options, named) in [
        (&["--gpus", "all"][..], "--gpus all"),
        (
            &["--device", "nvidia.com/gpu=GPU-c0a1e404-0000-4000-8000-000000000001"][..],
            "--device nvidia.com/gpu=",
        ),
        (&["-e", "CUDA_VISIBLE_DEVICES=1"][..], "-e CUDA_VISIBLE_DEVICES=1"),
        (&["--env", "NVIDIA_VISIBLE_DEVICES=all"][..], "--env NVIDIA_VISIBLE_DEVICES=all"),
        (&["-d"][..], "-d: a detached container would outlive gpurun"),
    ] {
        podman
            .gpurun(&sim, &[], options, &["true"])
            .run()
            .status(125)
            .stderr_has(&format!("gpurun: {named}"));
    }
    assert!(podman.containers().is_empty(), "{:?}", podman.containers());
    // --container off leaves the command alone (here: podman's own --gpus, which it refuses
    // without NVIDIA's toolkit).
    let plan = podman.gpurun(&sim, &["--dry-run", "--container", "off"], &[], &["true"]).run();
    assert!(!plan.status(0).stdout.contains("nvidia.com/gpu"), "{plan:#?}");
    // --dry-run shows what gpurun adds.
    let plan = podman.gpurun(&sim, &["--dry-run", "--devices", "1"], &[], &["true"]).run();
    plan.status(0).stdout_has("run --device nvidia.com/gpu=GPU-c0a1e404-0000-4000-8000-000000000001 -e CUDA_DEVICE_ORDER=PCI_BUS_ID");
}

#[test]
fn a_container_on_a_device_it_was_not_given_is_wrong_gpu() {
    let sim = Sim::new(&scenario(5));
    let Some(podman) = Podman::start(&sim, 5) else { return };
    // Given GPU 0 by gpurun, and GPU 3 by hand (a device node passed in, --privileged): it
    // uses its second device, GPU 3.
    let extra = format!("NVML_SIM_VISIBLE_9={}", uuid(5, 3));
    let sim_cuda = sim_cuda().display().to_string();
    let report_path = sim.dir.path().join("wrong.json");
    let report_arg = report_path.display().to_string();
    let run = podman
        .gpurun(
            &sim,
            &["--devices", "0", "--report-json", &report_arg],
            &["-e", &extra],
            &[&sim_cuda, "--device", "1", "--sleep", "1"],
        )
        .run();
    run.status(0)
        .stderr_has("wrong-gpu")
        .stderr_has("is on GPU 3, which was not selected")
        .stderr_has("the container was given that GPU besides gpurun's");
    assert_eq!(read_report(&report_path)["verification"]["verdict"], "wrong-gpu");
}

#[test]
fn the_lease_lives_exactly_as_long_as_the_container() {
    let sim = Sim::new(&scenario(6));
    let Some(podman) = Podman::start(&sim, 6) else { return };
    let leases = || common::leases_in(&sim.lock_dir());
    // A container that ignores SIGTERM: --kill-after ends the client and the container itself.
    let command = podman
        .gpurun(
            &sim,
            &["-q", "--kill-after", "1s"],
            &[],
            &["sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"],
        )
        .command;
    let child = start_until_ready(command, Stdio::piped());
    assert_eq!(leases(), 1, "the GPU is reserved while the container runs");
    assert_eq!(podman.containers().len(), 1);
    // After podman's signal proxy is up (see exit_status_and_signals_pass_through_the_client).
    std::thread::sleep(Duration::from_secs(1));
    common::send_signal(child.id(), libc::SIGTERM);
    let ended = child.wait_with_output().unwrap();
    assert!(!ended.status.success(), "{ended:?}");
    assert_eq!(leases(), 0, "the reservation ends with the run");
    assert!(
        wait_until(Duration::from_secs(20), || podman.containers().is_empty()),
        "the container outlived gpurun: {:?}\n{}",
        podman.containers(),
        String::from_utf8_lossy(&ended.stderr)
    );
}

#[test]
fn if_gpurun_dies_the_container_gets_the_parent_death_signal_by_its_id() {
    let sim = Sim::new(&scenario(7));
    let Some(podman) = Podman::start(&sim, 7) else { return };
    // --sig-proxy=false: the client passes nothing in, so only the kill by ID can reach it.
    let marker = sim.dir.path().join("got-term");
    let script = format!(
        "trap 'echo TERM > {}; exit 3' TERM; echo ready; while true; do sleep 1; done",
        marker.display()
    );
    let warned = sim.dir.path().join("warned");
    let command = podman.gpurun(&sim, &[], &["--sig-proxy=false"], &["sh", "-c", &script]).command;
    let mut child = start_until_ready(command, Stdio::from(std::fs::File::create(&warned).unwrap()));
    // Said at launch (issue 43, 8): the job's signals go to the client, not the container.
    let said = || std::fs::read_to_string(&warned).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || said()
            .contains("--sig-proxy=false: signals reach the podman client")),
        "{}",
        said()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(Duration::from_secs(20), || marker.exists()), "the container never got SIGTERM");
    assert!(
        wait_until(Duration::from_secs(20), || podman.containers().is_empty()),
        "{:?}",
        podman.containers()
    );
    // stdout is the command's: nothing of the kill (podman kill prints the ID) comes there.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut rest).unwrap();
    assert!(rest.trim().is_empty(), "stdout got {rest:?}");
    // With the client's proxy on, the container may be gone before the watcher's kill: the
    // client's complaint about that ("can only kill running containers") is no news to the
    // terminal the job ran on (issue 36).
    std::fs::remove_file(&marker).unwrap();
    let said = sim.dir.path().join("stderr");
    let command = podman.gpurun(&sim, &["-q"], &[], &["sh", "-c", &script]).command;
    let mut child = start_until_ready(command, Stdio::from(std::fs::File::create(&said).unwrap()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(Duration::from_secs(20), || marker.exists()), "the container never got SIGTERM");
    assert!(wait_until(Duration::from_secs(20), || podman.containers().is_empty()));
    let stderr = std::fs::read_to_string(&said).unwrap();
    assert!(!stderr.contains("kill"), "the watcher's kill spoke on the job's terminal: {stderr}");
}

#[test]
fn docker_runs_get_gpus_or_cdi_devices_as_container_says() {
    // Only shown (--dry-run): no docker daemon is needed.
    let sim = Sim::new(&scenario(8));
    let shown = |mode: &str| {
        let plan = sim
            .gpurun()
            .args(["--dry-run", "--gpus", "2", "--container", mode, "--", "docker", "run", "--rm", "img"])
            .run();
        plan.status(0);
        plan.stdout
    };
    // Shell-quoted in the listing, as docker's documentation writes it: --gpus '"device=1,2"'.
    let two = format!("'\"device={},{}\"'", uuid(8, 0), uuid(8, 1));
    assert!(
        shown("gpus").contains(&format!("docker run --gpus {two} -e CUDA_DEVICE_ORDER=PCI_BUS_ID")),
        "{}",
        shown("gpus")
    );
    // auto: docker's daemon has no CDI on this machine (no /etc/docker/daemon.json saying so).
    if !std::fs::read_to_string("/etc/docker/daemon.json").is_ok_and(|t| t.contains("cdi")) {
        assert!(shown("auto").contains(&format!("--gpus {two}")), "{}", shown("auto"));
    }
    let cdi = shown("cdi");
    assert!(
        cdi.contains(&format!(
            "docker run --device nvidia.com/gpu={} --device nvidia.com/gpu={}",
            uuid(8, 0),
            uuid(8, 1)
        )),
        "{cdi}"
    );
    assert!(!shown("off").contains("nvidia.com/gpu") && !shown("off").contains("--gpus"));
    // No host-index CUDA_VISIBLE_DEVICES for the client either.
    let json = sim.gpurun().args(["--dry-run", "--json", "--", "docker", "run", "img"]).run();
    assert!(json.status(0).json()["env"].get("CUDA_VISIBLE_DEVICES").is_none(), "{}", json.stdout);
}

#[test]
fn a_cidfile_that_never_gets_an_id_is_unverifiable_and_holds_nothing() {
    let sim = Sim::new(&scenario(9));
    let Some(podman) = Podman::start(&sim, 9) else { return };
    // The user's own --cidfile is a FIFO: podman refuses a cidfile that exists, and gpurun,
    // which reads that file for the ID, must neither block on it nor read a device whole.
    let fifo = sim.dir.path().join("cid-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let report = sim.dir.path().join("report.json");
    let cidfile = fifo.display().to_string();
    let report_arg = report.display().to_string();
    // A read of the FIFO that blocked would never end.
    let run = podman
        .gpurun(&sim, &["--report-json", &report_arg], &["--cidfile", &cidfile], &["true"])
        .run_unless_hung();
    assert_ne!(run.code, Some(0), "{run:#?}");
    let report = read_report(&report);
    assert_eq!(report["verification"]["verdict"], "unverifiable", "{report}");
    assert!(
        report["verification"]["detail"].as_str().unwrap().contains("never wrote the container's ID"),
        "{report}"
    );
    assert_eq!(report["container"]["id"], Value::Null, "{report}");
}

/// Issue 36 (1-3, 11): the run is read with podman's and docker's own option tables. Only
/// shown or refused (--dry-run): no container runs.
#[test]
fn runs_are_read_with_the_clients_own_option_tables() {
    let sim = Sim::new(&scenario(8));
    let dry = |words: &[&str]| sim.gpurun().args(["--dry-run", "--gpus", "1", "--"]).args(words).run();
    // A switch the old scanner took for an option with a value, and an option with a value it
    // took for a switch: either way the next word became the image and --device went unseen.
    for words in [
        &["podman", "run", "--rm", "--unsetenv-all", "--device", "nvidia.com/gpu=all", "img", "cmd"][..],
        &["podman", "run", "--env-merge", "X=y", "--device", "nvidia.com/gpu=all", "img", "cmd"],
        // A global option with a value: the run after it is still a run.
        &["podman", "--namespace", "ns", "run", "--device", "nvidia.com/gpu=all", "img"],
    ] {
        dry(words).status(125).stderr_has("gpurun: --device nvidia.com/gpu=all: gpurun gives the container");
    }
    dry(&["podman", "create", "img"])
        .status(125)
        .stderr_has("gpurun: podman create: the container would run later");
    dry(&["docker", "container", "create", "img"]).status(125).stderr_has("gpurun: docker create:");
    dry(&["podman", "run", "--frobnicate", "img"])
        .status(125)
        .stderr_has("gpurun: --frobnicate: not a podman run option gpurun knows");
    dry(&["docker", "--frobnicate", "run", "img"])
        .status(125)
        .stderr_has("gpurun: --frobnicate: not a docker global option gpurun knows");
    // Understood: the choice goes in right after `run`, before the user's options.
    let shown = dry(&["podman", "--namespace", "ns", "run", "--env-merge", "X=y", "img", "cmd"]);
    shown.status(0).stdout_has(&format!("podman --namespace ns run --device nvidia.com/gpu={}", uuid(8, 0)));
    // Other ways of handing the container GPUs are said.
    let env_file = sim.dir.path().join("env");
    std::fs::write(&env_file, "A=1\nCUDA_VISIBLE_DEVICES=3\n").unwrap();
    let env_file = env_file.display().to_string();
    let warned = dry(&["podman", "run", "--privileged", "-v", "/dev:/dev", "--env-file", &env_file, "img"]);
    warned
        .status(0)
        .stderr_has("--privileged: the container sees every device of the host")
        .stderr_has("--volume /dev:/dev: the container sees the host's GPU device nodes")
        .stderr_has(&format!("--env-file {env_file} sets CUDA_VISIBLE_DEVICES"));
    // An --env-file that is a FIFO nobody writes is passed over, never waited on.
    let fifo = sim.dir.path().join("env-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.display().to_string();
    let words = ["--dry-run", "--gpus", "1", "--", "podman", "run", "--env-file", &fifo, "img"];
    sim.gpurun().args(words).run_unless_hung().status(0);
}

/// `make demo-container`, as the guide tells a new user to try it: a container run on the
/// simulated GPUs that ends verified (issue 42, point 8).
#[test]
fn the_container_try_out_ends_verified() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/containers/try.sh");
    let output = Command::new(&script).stdin(Stdio::null()).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if output.status.code() == Some(3) {
        return common::skip("the container try-out", stdout.trim());
    }
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("gpurun: verified: PID "), "{stderr}");
    assert!(stderr.contains("--device nvidia.com/gpu=GPU-"), "{stderr}");
}
