//! MPS, the NVLink fabric and confidential computing (issue 37), through the binary: what NVML
//! reports of them, shown, verified and chosen around.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{scenario_file, sim_cuda, Sim};
use nvml_sim::registry::{self, MpsRole};
use serde_json::Value;

const GPU0: &str = "GPU-22220000-0000-4000-8000-000000000000";

/// Where this simulator keeps its live registrations (`<scenario>.state`).
fn state_dir(sim: &Sim) -> std::path::PathBuf {
    sim.scenario.with_extension("toml.state")
}

/// What an MPS control daemon holds of its `control` pipe: the pipe open for reading (and
/// writing, so that opening does not wait for a writer).
fn control_daemon(control: &std::path::Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(control).unwrap()
}

/// An MPS server of our own user on GPU 0: `sim-cuda --mps-server`, which runs under the
/// server's program name (as the guide's try-out starts it) and makes a later sim-cuda of ours
/// on that GPU its client.
fn own_server(sim: &Sim) -> common::Running {
    let run = sim
        .gpurun_command(
            sim_cuda().to_str().unwrap(),
            &["--mps-server", "--mem", "256MiB", "--sleep", "600", "--quiet"],
        )
        .env("CUDA_VISIBLE_DEVICES", GPU0);
    let running = common::background(run);
    let registered = || registry::live(&state_dir(sim)).iter().any(|r| r.mps == Some(MpsRole::Server));
    assert!(common::wait_until(Duration::from_secs(20), registered), "the server registered");
    running
}

#[test]
fn an_mps_client_is_listed_and_verified_with_its_memory() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let _server = own_server(&sim);
    let listing = sim.gpurun().args(["--list", "--json"]).run();
    let json = listing.status(0).json();
    let mps = &json["gpus"][0]["mps"];
    assert!(mps["server_pid"].as_u64().is_some(), "{json}");
    assert_eq!(mps["server_user"], "root", "{json}");
    assert_eq!(json["gpus"][1]["mps"], Value::Null);
    // Another client of the same server: it shares the command's fault domain.
    let _neighbour =
        sim.spawn_sim_cuda(&[("CUDA_VISIBLE_DEVICES", GPU0)], &["--mem", "1GiB", "--sleep", "600"]);
    let report = sim.dir.path().join("report.json");
    let cuda = sim_cuda().to_string_lossy().into_owned();
    let outcome = sim
        .gpurun()
        .args(["--devices", "0", "--report-json", report.to_str().unwrap(), "--"])
        .args([&cuda, "--mem", "2GiB", "--sleep", "2"])
        .run();
    outcome.status(0).stderr_has("verified: PID").stderr_has("as an MPS client");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["verification"]["verdict"], "verified", "{report}");
    assert_eq!(report["peak_memory_bytes"][GPU0], 2u64 << 30, "{report}");
    let kinds: Vec<&str> =
        report["diagnosis"].as_array().unwrap().iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(!kinds.contains(&"cpu-fallback"), "{report}");
    let shared = report["diagnosis"].as_array().unwrap().iter().find(|d| d["kind"] == "mps-shared").cloned();
    let detail = shared.map(|d| d["detail"].as_str().unwrap_or_default().to_owned()).unwrap_or_default();
    assert_eq!(
        detail,
        "GPU 0: shares an MPS server with 1 other client (user root): a fatal fault in any of them ends all",
        "{report}"
    );
}

#[test]
fn the_clients_of_a_server_are_listed_as_mps() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let _server = own_server(&sim);
    let _client = sim.spawn_sim_cuda(&[("CUDA_VISIBLE_DEVICES", GPU0)], &["--mem", "1GiB", "--sleep", "600"]);
    let json = sim.gpurun().args(["--list", "--json"]).run().json();
    let clients = json["gpus"][0]["mps"]["clients"].as_array().cloned().unwrap_or_default();
    assert_eq!(clients.len(), 1, "{json}");
    assert_eq!(clients[0]["user"], "root");
    assert_eq!(clients[0]["used_bytes"], 1u64 << 30);
    // Not in the compute list, where only the server is.
    assert_eq!(json["gpus"][0]["processes"].as_array().unwrap().len(), 1, "{json}");
    let table = sim.gpurun().args(["--list"]).env("COLUMNS", "200").run();
    table.status(0).stdout_has("[MPS server]").stdout_has("[MPS client, not via gpurun]");
}

/// Another user's MPS server: a CUDA context of ours there waits for that user's clients.
#[test]
fn another_users_mps_gpu_is_passed_over_with_the_user_named() {
    if !common::is_root() {
        return common::skip("another user's MPS server", "a second user needs root (setpriv)");
    }
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    // Killed when the test ends, whatever it asserts.
    let server = common::Running(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c"])
            .arg("exec -a nvidia-cuda-mps-server sleep 600")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = server.0.id();
    let execed = || {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with("nvidia-cuda-mps-server"))
    };
    if !common::wait_until(Duration::from_secs(5), execed) {
        return common::skip("another user's MPS server", "setpriv could not switch to nobody");
    }
    registry::register_as(&state_dir(&sim), pid, &[(GPU0.to_owned(), 256 << 20)], Some(MpsRole::Server))
        .unwrap();
    let dry = sim.gpurun().args(["--dry-run", "--json", "--", "true"]).run();
    let json = dry.status(0).json();
    assert_eq!(common::eligible(&json), vec![1], "{json}");
    let why = json["gpus"][0]["reasons"].to_string();
    assert!(
        why.contains(&format!(
            "MPS server of user nobody (PID {pid}): our CUDA context would wait for that user's clients"
        )),
        "{json}"
    );
    let only_that_one = sim.gpurun().args(["--devices", "0", "--", "true"]).run();
    only_that_one.status(75).stderr_has("MPS server of user nobody");
}

fn fabric_gpus(first: &str, second: &str) -> String {
    format!(
        "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-33330000-0000-4000-8000-000000000000\"\n\
         pci_bus_id = \"00000000:17:00.0\"\nmemory_total = \"80GiB\"\nutilization_gpu = 0\nutilization_memory = 0\n\
         fabric = {{ {first} }}\n\n\
         [[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-33330000-0000-4000-8000-000000000001\"\n\
         pci_bus_id = \"00000000:65:00.0\"\nmemory_total = \"80GiB\"\nmemory_used = \"10GiB\"\nutilization_gpu = 0\n\
         utilization_memory = 0\n{second}\n"
    )
}

#[test]
fn a_gpu_with_an_unhealthy_or_unregistered_fabric_is_never_chosen() {
    let healthy = "fabric = { clique_id = 7, cluster_uuid = \"0123456789abcdef0123456789abcdef\", \
                   route_unhealthy = false, degraded_bw = false }";
    for (first, reason) in [
        ("route_unhealthy = true, clique_id = 7", "NVLink fabric: route unhealthy"),
        (
            "state = \"in-progress\"",
            "NVLink fabric: not registered with the fabric manager (state in-progress)",
        ),
        ("access_timeout_recovery = true", "NVLink fabric: access-timeout recovery in progress"),
        (
            "incorrect_configuration = \"insufficient-nvlinks\"",
            "NVLink fabric: incorrect configuration (too few NVLinks)",
        ),
        ("status = \"UNKNOWN\"", "NVLink fabric: registration failed"),
    ] {
        // GPU 0 has more free memory: most-free would take it but for its fabric.
        let sim = Sim::new(&fabric_gpus(first, healthy));
        let json = sim.gpurun().args(["--list", "--json"]).run().json();
        assert_eq!(json["gpus"][0]["health"]["state"], "unhealthy", "{first}: {json}");
        assert!(json["gpus"][0]["health"]["reasons"].to_string().contains(reason), "{first}: {json}");
        assert_eq!(json["gpus"][1]["fabric"]["state"], "completed");
        assert_eq!(json["gpus"][1]["fabric"]["clique_id"], 7);
        assert_eq!(json["gpus"][1]["fabric"]["cluster_uuid"], "01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(json["gpus"][1]["fabric"]["health"]["state"], "ok");
        let chosen = sim.gpurun().args(["--export"]).run();
        assert!(
            chosen.status(0).stdout.starts_with("export CUDA_VISIBLE_DEVICES='1'"),
            "{first}: {}",
            chosen.stdout
        );
    }
    // Degraded bandwidth: taken after every healthy GPU, with the reason.
    let sim = Sim::new(&fabric_gpus("degraded_bw = true", healthy));
    let json = sim.gpurun().args(["--list", "--json"]).run().json();
    assert_eq!(json["gpus"][0]["health"]["state"], "degraded", "{json}");
    assert!(sim
        .gpurun()
        .args(["--export"])
        .run()
        .status(0)
        .stdout
        .starts_with("export CUDA_VISIBLE_DEVICES='1'"));
    // A PCIe board has no fabric: not a fault.
    let sim = Sim::new(&fabric_gpus("clique_id = 1", ""));
    let json = sim.gpurun().args(["--list", "--json"]).run().json();
    assert_eq!(json["gpus"][1]["fabric"], Value::Null);
    assert_eq!(json["gpus"][1]["health"]["state"], "ok");
}

#[test]
fn a_machine_whose_confidential_gpus_are_not_ready_refuses_with_the_reason() {
    let scenario = scenario_file("two_idle.toml");
    let not_ready =
        format!("confidential_computing = {{ feature = \"enabled\", ready = false }}\n{scenario}");
    let sim = Sim::new(&not_ready);
    let outcome = sim.gpurun().args(["--", "true"]).run();
    outcome.status(75).stderr_has("confidential computing is on and the GPUs are not ready to accept work");
    let json = sim.gpurun().args(["--list", "--json"]).run().json();
    assert_eq!(json["confidential_computing"]["on"], true);
    assert_eq!(json["confidential_computing"]["ready"], false);
    assert!(common::eligible(&json).is_empty(), "{json}");
    let ready = format!("confidential_computing = {{ feature = \"enabled\", ready = true }}\n{scenario}");
    Sim::new(&ready).gpurun().args(["--", "true"]).run().status(0);
    let json = Sim::new(&scenario).gpurun().args(["--list", "--json"]).run().json();
    assert_eq!(json["confidential_computing"], Value::Null);
}

#[test]
fn mps_joins_the_callers_own_server_with_its_client_settings() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    // No server of ours anywhere, and no control daemon to start one: nothing to join.
    let pipe = sim.dir.path().join("mps-pipe");
    std::fs::create_dir(&pipe).unwrap();
    let none = sim.gpurun().args(["--mps", "--", "true"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    none.status(75).stderr_has("no MPS server of yours runs on it, and no MPS control daemon serves");
    // The machine's reason, the same for every GPU, is said once, not once per GPU.
    let eight = Sim::new(&common::default_scenario());
    let all = eight.gpurun().args(["--mps", "--", "true"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    all.status(75).stderr_has("\n  all 8 GPUs: no MPS server of yours runs on it");
    assert_eq!(all.stderr.matches("no MPS server of yours").count(), 1, "{}", all.stderr);
    // A control daemon starts the user's server at the first client: any GPU without another
    // user's server will do.
    let control = pipe.join("control");
    assert!(Command::new("mkfifo").arg(&control).status().unwrap().success());
    let daemon = control_daemon(&control);
    let first = sim.gpurun().args(["--mps", "--export"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    assert!(first.status(0).stdout.contains(&format!("export CUDA_MPS_PIPE_DIRECTORY='{}'", pipe.display())));
    drop(daemon);
    let _server = own_server(&sim);
    let export = sim.gpurun().args(["--mps", "--mps-threads", "25", "--mps-mem", "4G", "--export"]).run();
    let text = &export.status(0).stdout;
    for line in [
        format!("export CUDA_VISIBLE_DEVICES='{GPU0}'"),
        "export CUDA_MPS_PIPE_DIRECTORY='/tmp/nvidia-mps'".to_owned(),
        "export CUDA_MPS_LOG_DIRECTORY='/var/log/nvidia-mps'".to_owned(),
        "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='25'".to_owned(),
        "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='0=4G'".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    // The same from a configuration file; mps-threads without mps is refused there too.
    let config = sim.dir.path().join("mps.toml");
    std::fs::write(&config, "mps = true\nmps-threads = 40\n").unwrap();
    let from_file = sim.gpurun().env("GPURUN_CONFIG", &config).args(["--export"]).run();
    assert!(from_file.status(0).stdout.contains("export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='40'"));
    std::fs::write(&config, "mps-threads = 40\n").unwrap();
    sim.gpurun().env("GPURUN_CONFIG", &config).args(["--export"]).run().status(125).stderr_has("--mps");
    // The caller's pipe directory is the one passed on.
    let own_pipe =
        sim.gpurun().args(["--mps", "--export"]).env("CUDA_MPS_PIPE_DIRECTORY", "/run/mps-alice").run();
    assert!(own_pipe.status(0).stdout.contains("export CUDA_MPS_PIPE_DIRECTORY='/run/mps-alice'"));
    // The pinned memory is reserved in the lease, as --min-free would be.
    let _job = common::background(sim.gpurun().args(["--mps", "--mps-mem", "4G", "--", "sleep", "30"]));
    let reserved = || {
        let json = sim.gpurun().args(["--list", "--json"]).run().json();
        json["reservations"].as_array().and_then(|r| r.first()).map(|r| r["reserved_bytes"].clone())
    };
    assert!(common::wait_until(Duration::from_secs(20), || reserved().is_some()), "the job's lease");
    assert_eq!(reserved(), Some(Value::from(4u64 << 30)));
}

#[test]
fn mps_options_are_checked() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    sim.gpurun().args(["--mps-threads", "25", "--", "true"]).run().status(125).stderr_has("--mps");
    sim.gpurun().args(["--mps", "--mps-threads", "0", "--", "true"]).run().status(125).stderr_has("\"0\"");
    sim.gpurun()
        .args(["--mps", "--mps-threads", "101", "--", "true"])
        .run()
        .status(125)
        .stderr_has("1 to 100");
    sim.gpurun().args(["--mps", "--mps-mem", "4", "--", "true"]).run().status(125).stderr_has("4G");
    // Issue 51 (13): 0 pinned "0=0G", a limit no allocation fits under: refused, naming the way
    // to ask for no limit.
    sim.gpurun()
        .args(["--mps", "--mps-mem", "0", "--", "true"])
        .run()
        .status(125)
        .stderr_has("\"0\" pins no memory at all")
        .stderr_has("leave --mps-mem out for no limit");
    sim.gpurun()
        .args(["--mps", "--visible-as", "index", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--mps names the GPUs by UUID");
    // A container needs the pipe directory mounted: the runtime's options, not gpurun's.
    sim.gpurun()
        .args(["--mps", "--", "podman", "run", "--rm", "busybox", "true"])
        .run()
        .status(125)
        .stderr_has("--mps with a container run: the container needs the MPS pipe directory mounted");
}

#[test]
fn doctor_says_where_mps_clients_connect_and_what_nvml_must_not_see() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let pipe = sim.dir.path().join("mps-pipe");
    std::fs::create_dir(&pipe).unwrap();
    let doctor = || sim.gpurun().args(["--doctor"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    doctor().stdout_has(&format!("no MPS control daemon at {}", pipe.display()));
    let control = pipe.join("control");
    assert!(Command::new("mkfifo").arg(&control).status().unwrap().success());
    doctor().stdout_has("exists but no MPS control daemon serves it");
    // A daemon holds the control pipe open for reading.
    let _daemon = control_daemon(&control);
    doctor().stdout_has(&format!("an MPS control daemon reads {}", control.display()));
    let _server = own_server(&sim);
    doctor().stdout_has("GPU 0: MPS server of user root (PID").stdout_has("--mps joins it");
    // NVML's MPS view is kept from gpurun's own NVML, and reaches the command.
    let outcome = sim.gpurun().args(["--doctor"]).env("NVML_MPS_DEVICE_ENUMERATION", "1").run();
    outcome.stdout_has("NVML_MPS_DEVICE_ENUMERATION is set");
    let child = sim
        .gpurun()
        .args(["-q", "--", "sh", "-c", "echo \"$NVML_MPS_DEVICE_ENUMERATION\""])
        .env("NVML_MPS_DEVICE_ENUMERATION", "1")
        .run();
    assert_eq!(child.status(0).stdout, "1\n");
    // Issue 51 (13): the hooks get it back as the command does (they had lost it).
    let seen = sim.dir.path().join("hooks.env");
    let hook = |when: &str| format!("echo {when}=$NVML_MPS_DEVICE_ENUMERATION >> {}", seen.display());
    // The command waits for the start hook's line: a hook still running at the end is ended.
    let wait_for_it = format!("until grep -q start= {} 2>/dev/null; do sleep 0.05; done", seen.display());
    sim.gpurun()
        .args([
            "-q",
            "--on-start",
            &hook("start"),
            "--on-exit",
            &hook("exit"),
            "--",
            "sh",
            "-c",
            &wait_for_it,
        ])
        .env("NVML_MPS_DEVICE_ENUMERATION", "1")
        .run_unless_hung()
        .status(0);
    let said = std::fs::read_to_string(&seen).unwrap();
    assert!(said.contains("start=1\n") && said.contains("exit=1\n"), "{said}");
}

/// Issue 51 (2): another user's planted pipe directory or control FIFO (held open, as a
/// daemon would) made `--mps` take any GPU and point the job at that user's daemon, and
/// `--doctor` said ok. The pipe directory and its control must be the caller's or root's, and
/// the directory not writable by others: otherwise refused, the owner named.
#[test]
fn a_planted_mps_control_pipe_is_refused_naming_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    if !common::is_root() {
        return common::skip("another user's MPS pipe", "a second user's files need root (chown)");
    }
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let pipe = sim.dir.path().join("planted");
    std::fs::create_dir(&pipe).unwrap();
    let control = pipe.join("control");
    assert!(Command::new("mkfifo").arg(&control).status().unwrap().success());
    let _daemon = control_daemon(&control);
    let mps = || sim.gpurun().args(["--mps", "--export"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    let doctor = || sim.gpurun().args(["--doctor"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    // Ours: a daemon of ours reads it, any GPU will do.
    mps().status(0);
    // The FIFO is another user's.
    std::os::unix::fs::chown(&control, Some(65534), Some(65534)).unwrap();
    let nobody = common::user_name_of(65534);
    let said = format!("the MPS control pipe {} belongs to user {nobody}", control.display());
    mps().status(125).stderr_has(&format!("gpurun: --mps: {said}"));
    doctor().stdout_has(&said).stdout_has("--mps refuses it");
    // The directory is another user's.
    std::os::unix::fs::chown(&control, Some(0), Some(0)).unwrap();
    std::os::unix::fs::chown(&pipe, Some(65534), Some(65534)).unwrap();
    mps()
        .status(125)
        .stderr_has(&format!("the MPS pipe directory {} belongs to user {nobody}", pipe.display()));
    // A link of ours to it is that directory.
    let link = sim.dir.path().join("mine");
    std::os::unix::fs::symlink(&pipe, &link).unwrap();
    let through_link = sim.gpurun().args(["--mps", "--export"]).env("CUDA_MPS_PIPE_DIRECTORY", &link).run();
    through_link
        .status(125)
        .stderr_has(&format!("the MPS pipe directory {} belongs to user {nobody}", link.display()));
    // The directory is root's but anyone may write it.
    std::os::unix::fs::chown(&pipe, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&pipe, std::fs::Permissions::from_mode(0o777)).unwrap();
    mps().status(125).stderr_has("can be written by others (mode 777)");
    // Sticky, as /tmp: others may add names but not replace root's control pipe.
    std::fs::set_permissions(&pipe, std::fs::Permissions::from_mode(0o1777)).unwrap();
    mps().status(0);
}

/// Issue 51 (3): an MPS server whose owner /proc cannot read (hidepid=2, or another PID
/// namespace: here a PID that does not exist on this host) was taken for the caller's own:
/// `--mps` joined it and `--doctor` said so. Unknown is not ours; NVML names the process
/// (nvmlSystemGetProcessName), so the listing shows the server's PID.
#[test]
fn an_mps_server_of_an_unknown_user_is_not_ours() {
    let scenario = scenario_file("two_idle.toml")
        + "\n[[process]]\ngpu = 0\npid = 4190777\nused = \"256MiB\"\nmps = \"server\"\n\
           name = \"/usr/bin/nvidia-cuda-mps-server\"\n";
    let sim = Sim::new(&scenario);
    let json = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    assert_eq!(json["gpus"][0]["mps"]["server_pid"], 4190777, "{json}");
    assert_eq!(json["gpus"][0]["mps"]["server_user"], Value::Null, "{json}");
    let said = "MPS server of an unknown user (PID 4190777)";
    sim.gpurun().args(["--mps", "--devices", "0", "--", "true"]).run().status(75).stderr_has(said);
    let dry = sim.gpurun().args(["--dry-run", "--json", "--", "true"]).run().status(0).json();
    assert_eq!(common::eligible(&dry), vec![1], "{dry}");
    sim.gpurun()
        .args(["--doctor"])
        .run()
        .stdout_has(&format!("GPU 0: {said}, 0 clients: not chosen for you"));
}

/// Issue 51 (4): NVIDIA's recommended MPS set-up, an exclusive-process GPU whose one context is
/// the caller's own MPS server: `--mps` joins it; without `--mps` the refusal says so.
#[test]
fn an_exclusive_process_gpu_held_by_our_own_mps_server_is_joined_with_mps() {
    let scenario = scenario_file("two_idle.toml").replacen(
        "utilization_memory = 0\n",
        "utilization_memory = 0\ncompute_mode = \"exclusive_process\"\n",
        1,
    );
    let sim = Sim::new(&scenario);
    let _server = own_server(&sim);
    let export = sim.gpurun().args(["--mps", "--devices", "0", "--export"]).run();
    assert!(export.status(0).stdout.contains(&format!("export CUDA_VISIBLE_DEVICES='{GPU0}'")), "{export:?}");
    sim.gpurun()
        .args(["--devices", "0", "--", "true"])
        .run()
        .status(75)
        .stderr_has("compute mode is exclusive-process and PID")
        .stderr_has("your MPS server, holds its one CUDA context: --mps joins it");
}

/// Issue 62 (1): the real driver's control daemon (`nvidia-cuda-mps-control -d`) makes
/// `control` a Unix socket and starts no server until the first client connects. `--mps` joins
/// where a daemon of the caller's serves the pipe directory, server or not; the client starts
/// the server, and verification waits for it and verifies the client as one. `--doctor` and
/// `--list` say so, and a client the driver lists in both the compute and the MPS list (the
/// real 580 driver does) is one row.
#[test]
fn mps_joins_a_fresh_control_daemon_whose_server_starts_with_the_first_client() {
    let sim = Sim::new(&format!(
        "quirks = [\"mps_clients_in_compute_list\"]\n\n{}",
        scenario_file("two_idle.toml")
    ));
    let pipe = sim.dir.path().join("mps-pipe");
    let log = sim.dir.path().join("mps-log");
    std::fs::create_dir_all(&pipe).unwrap();
    std::fs::create_dir_all(&log).unwrap();
    let with_pipe =
        |run: common::Run| run.env("CUDA_MPS_PIPE_DIRECTORY", &pipe).env("CUDA_MPS_LOG_DIRECTORY", &log);
    let control_utility = common::built("sim-mps-control");
    let started = with_pipe(sim.gpurun_command(control_utility.to_str().unwrap(), &["-d"])).run();
    started.status(0);
    let quit = || {
        let mut quit = with_pipe(sim.gpurun_command(control_utility.to_str().unwrap(), &[])).command;
        let mut child = quit.stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"quit\n").unwrap();
        child.wait().unwrap();
    };
    // As the real daemon: a socket, and no server yet.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(pipe.join("control")).unwrap().file_type().is_socket());
    let pid: u32 =
        std::fs::read_to_string(pipe.join("nvidia-cuda-mps-control.pid")).unwrap().trim().parse().unwrap();
    assert!(!registry::live(&state_dir(&sim)).iter().any(|r| r.mps == Some(MpsRole::Server)));
    let said = format!(
        "MPS control daemon of yours (PID {pid}) at {}; its server starts with the first client",
        pipe.display()
    );
    with_pipe(sim.gpurun().args(["--doctor"])).run().stdout_has(&said);
    with_pipe(sim.gpurun().args(["--list"])).run().status(0).stdout_has(&said);
    let listing = with_pipe(sim.gpurun().args(["--list", "--json"])).run().status(0).json();
    assert_eq!(listing["mps_control_daemon"]["pid"], pid, "{listing}");
    assert_eq!(listing["mps_control_daemon"]["server_running"], false, "{listing}");
    // The first client: gpurun --mps joins, the daemon starts the server, the client is verified.
    let report = sim.dir.path().join("mps.json");
    let joined =
        with_pipe(sim.gpurun().args(["--mps", "--report-json"]).arg(&report).arg("--").arg(sim_cuda()))
            .args(["--quiet", "--mem", "512MiB", "--sleep", "2"])
            .run();
    joined.status(0).stderr_has("as an MPS client");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["verification"]["verdict"], "verified", "{json}");
    assert!(
        registry::live(&state_dir(&sim)).iter().any(|r| r.mps == Some(MpsRole::Server)),
        "no server started"
    );
    // An outside client, listed in both lists by the driver, is one row of --list.
    let mut client =
        common::background(
            with_pipe(sim.gpurun_command(
                sim_cuda().to_str().unwrap(),
                &["--mem", "256MiB", "--sleep", "600", "--quiet"],
            ))
            .env("CUDA_VISIBLE_DEVICES", "0"),
        );
    let client_pid = client.0.id();
    let listed = || {
        let json = with_pipe(sim.gpurun().args(["--list", "--json"])).run().json();
        json["gpus"][0]["mps"]["clients"].as_array().is_some_and(|c| c.iter().any(|c| c["pid"] == client_pid))
    };
    assert!(common::wait_until(Duration::from_secs(20), listed), "the client never listed");
    let json = with_pipe(sim.gpurun().args(["--list", "--json"])).run().json();
    let in_processes =
        json["gpus"][0]["processes"].as_array().unwrap().iter().filter(|p| p["pid"] == client_pid).count();
    assert_eq!(in_processes, 0, "the client is a row of the processes too: {}", json["gpus"][0]);
    assert_eq!(json["mps_control_daemon"]["server_running"], true, "{json}");
    let table = with_pipe(sim.gpurun().args(["--list"])).run();
    assert_eq!(table.stdout.matches(&client_pid.to_string()).count(), 1, "{}", table.stdout);
    client.end();
    quit();
    assert!(common::wait_until(Duration::from_secs(20), || !common::alive(pid)), "the daemon did not quit");
}

/// The control socket of a real daemon is taken only as it is: the socket, its pid file and
/// the process that file names all the caller's (or root's), the process a live
/// `nvidia-cuda-mps-control`. A bare socket, a pid file naming another program, another user's
/// pid file or socket, and a FIFO where the pid file should be are no daemon: `--mps` refuses,
/// and nothing waits on the FIFO.
#[test]
fn a_control_socket_is_a_daemon_only_with_its_pid_file_and_process() {
    if !common::is_root() {
        return common::skip("another user's MPS socket", "a second user's files need root (chown)");
    }
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let pipe = sim.dir.path().join("sockets");
    std::fs::create_dir(&pipe).unwrap();
    let mps = || sim.gpurun().args(["--mps", "--export"]).env("CUDA_MPS_PIPE_DIRECTORY", &pipe).run();
    let pid_file = pipe.join("nvidia-cuda-mps-control.pid");
    // A socket anyone could bind, with no pid file: no daemon.
    let _socket = std::os::unix::net::UnixListener::bind(pipe.join("control")).unwrap();
    mps().status(75).stderr_has("no MPS control daemon serves");
    // A pid file naming a live process that is not the daemon (this test).
    std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
    mps().status(75).stderr_has("no MPS control daemon serves");
    // A FIFO where the pid file should be: read without waiting, and no daemon.
    std::fs::remove_file(&pid_file).unwrap();
    assert!(Command::new("mkfifo").arg(&pid_file).status().unwrap().success());
    mps().status(75).stderr_has("no MPS control daemon serves");
    std::fs::remove_file(&pid_file).unwrap();
    // A real daemon in another directory: its PID, in a pid file of another user's, is not ours.
    let real = sim.dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let control_utility = common::built("sim-mps-control");
    sim.gpurun_command(control_utility.to_str().unwrap(), &["-d"])
        .env("CUDA_MPS_PIPE_DIRECTORY", &real)
        .run()
        .status(0);
    let daemon = std::fs::read_to_string(real.join("nvidia-cuda-mps-control.pid")).unwrap();
    std::fs::write(&pid_file, &daemon).unwrap();
    std::os::unix::fs::chown(&pid_file, Some(65534), Some(65534)).unwrap();
    mps().status(75).stderr_has("no MPS control daemon serves");
    // Ours, it is taken (the daemon is a live nvidia-cuda-mps-control of root's).
    std::os::unix::fs::chown(&pid_file, Some(0), Some(0)).unwrap();
    mps().status(0);
    // Another user's socket: refused, the owner named.
    std::os::unix::fs::chown(pipe.join("control"), Some(65534), Some(65534)).unwrap();
    mps().status(125).stderr_has("belongs to user");
    let mut quit = sim
        .gpurun_command(control_utility.to_str().unwrap(), &[])
        .env("CUDA_MPS_PIPE_DIRECTORY", &real)
        .command;
    let mut child = quit.stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"quit\n").unwrap();
    child.wait().unwrap();
}

/// Under a /proc mounted hidepid=2 a user cannot see root's processes, a system-wide control
/// daemon's included: its pid file of root's naming a live process (kill(0): EPERM, not ESRCH)
/// is root's daemon, and `--mps` joins it rather than saying no daemon serves.
#[test]
fn under_hidepid_a_root_control_daemon_is_still_seen_by_a_user() {
    use std::os::unix::fs::PermissionsExt;
    if !common::is_root() || !common::on_path("setpriv") || !common::pid_namespaces_allowed("hidepid") {
        return common::skip("hidepid and a second user", "needs root, setpriv and a PID namespace");
    }
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let pipe = sim.dir.path().join("system-mps");
    std::fs::create_dir(&pipe).unwrap();
    std::fs::create_dir_all(sim.lock_dir()).unwrap();
    for (path, mode) in [(sim.dir.path().to_owned(), 0o755), (pipe.clone(), 0o755), (sim.lock_dir(), 0o1777)]
    {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // In a PID and mount namespace of its own: /proc with hidepid=2, root's daemon, a user's --mps.
    let script = "mount -t proc -o hidepid=2 proc /proc && \"$0\" -d && \
                  setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=\"$1\" XDG_CONFIG_HOME=\"$1\" \
                  XDG_STATE_HOME=\"$1\" \"$2\" --mps --export; status=$?; echo quit | \"$0\" > /dev/null; exit $status";
    let control_utility = common::built("sim-mps-control");
    let home = sim.dir.path().display().to_string();
    let gpurun = common::gpurun_binary();
    let outcome = sim
        .gpurun_command(
            "unshare",
            &[
                "--mount",
                "--pid",
                "--fork",
                "sh",
                "-c",
                script,
                control_utility.to_str().unwrap(),
                &home,
                &gpurun,
            ],
        )
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", &pipe)
        .run();
    if outcome.stderr.contains("mount:") || outcome.stderr.contains("setpriv:") {
        return common::skip("hidepid and a second user", &outcome.stderr);
    }
    outcome.status(0).stdout_has(&format!("export CUDA_MPS_PIPE_DIRECTORY='{}'", pipe.display()));
}
