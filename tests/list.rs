//! `gpurun --list`: every field as the scenario implies, unreadable GPUs, NVML failures.

use crate::common;

use common::{scenario_file, Sim};
use nvml_sim::scenario::{self, Scenario};
use serde_json::{json, Value};

/// What NVML's numbers must be for `gpu`, computed here from the scenario alone:
/// used = in-use memory plus every listed process, free = total - reserved - used.
fn expected_gpu(scenario: &Scenario, index: usize, extra_processes: &[(u32, u64)]) -> Value {
    let spec = &scenario.gpus[index];
    let foreign: Vec<&scenario::ProcessSpec> =
        scenario.processes.iter().filter(|p| p.gpu as usize == index).collect();
    let process_bytes: u64 = foreign.iter().filter_map(|p| p.used.map(|s| s.0)).sum::<u64>()
        + extra_processes.iter().map(|(_, bytes)| bytes).sum::<u64>();
    let used = spec.memory_used.0 + process_bytes;
    let free = spec.memory_total.0 - spec.memory_reserved.0 - used;
    // nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently supported."
    let utilization = match (spec.utilization_gpu, spec.utilization_memory, spec.mig_mode.as_deref()) {
        (Some(gpu), Some(memory), mig) if mig != Some("enabled") => {
            json!({"gpu_percent": gpu, "memory_percent": memory})
        }
        _ => Value::Null,
    };
    let processes: Vec<Value> = foreign
        .iter()
        .map(|p| {
            json!({"pid": p.pid, "used_bytes": p.used.map(|s| s.0), "user": null, "command": null, "reservation": null})
        })
        .collect();
    // Without filters the only reasons are the card's own: a GPU in MIG mode is no device (its
    // MIG devices are; this machine has none).
    let mig_enabled = spec.mig_mode.as_deref() == Some("enabled");
    let reasons: Vec<&str> =
        if mig_enabled { vec!["in MIG mode: its MIG devices are the devices"] } else { vec![] };
    json!({
        "index": index,
        "uuid": spec.uuid,
        "name": spec.name,
        "pci_bus_id": spec.pci_bus_id,
        "memory": {
            "total_bytes": spec.memory_total.0,
            "reserved_bytes": spec.memory_reserved.0,
            "used_bytes": used,
            "free_bytes": free,
        },
        "unified_memory": false,
        "utilization": utilization,
        "temperature_c": spec.temperature_c,
        "power_watts": spec.power_mw.map(|mw| mw as f64 / 1000.0),
        "compute_mode": spec.compute_mode,
        "persistence_mode": spec.persistence_mode.as_deref() != Some("disabled"),
        "mig_enabled": spec.mig_mode.as_deref().map(|m| m == "enabled"),
        "mig_pending": spec.mig_mode.as_deref().map(|m| m == "enabled"),
        "mig_devices": [],
        "numa_node": spec.numa_node,
        "gpu_numa_id": spec.gpu_numa_id,
        "cpus": spec.cpu_affinity,
        // mixed8.toml has no sick GPU: the lost one is checked apart.
        "health": {"state": "ok", "reasons": []},
        "processes": processes,
        // No MPS server and no NVLink fabric on this machine.
        "mps": null,
        "fabric": null,
        "error": null,
        "eligible": !mig_enabled,
        "reasons": reasons,
    })
}

#[test]
fn json_reports_every_field_of_a_mixed_machine() {
    let text = scenario_file("mixed8.toml");
    let scenario = scenario::parse(&text).unwrap();
    let sim = Sim::new(&text);
    // A live CUDA process of ours on GPU 0, so /proc has a user and a command for it.
    let holder = sim.spawn_sim_cuda(
        &[("CUDA_VISIBLE_DEVICES", "0"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        &["--mem", "3GiB", "--sleep", "60"],
    );
    let holder_pid = holder.child.id();

    let outcome = sim.gpurun().args(["--list", "--json"]).run();
    outcome.status(0);
    let listing = outcome.json();

    assert_eq!(listing["driver_version"], "535.154.05");
    assert_eq!(listing["cuda_driver_version"], "12.2");
    assert_eq!(listing["reservations"], json!([]));
    assert_eq!(listing["waiters"], json!([]));
    assert_eq!(listing["house_rules"], json!([]));
    let gpus = listing["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);

    // GPU 0: the foreign-free card now holding our process.
    let mut gpu0 = gpus[0].clone();
    let ours = gpu0["processes"].as_array().unwrap().clone();
    assert_eq!(ours.len(), 1, "{gpu0:#}");
    assert_eq!(ours[0]["pid"], holder_pid);
    assert_eq!(ours[0]["used_bytes"], 3u64 << 30);
    assert_eq!(ours[0]["user"], common_user());
    assert!(ours[0]["command"].as_str().unwrap().contains("sim-cuda --mem 3GiB"), "{ours:?}");
    assert_eq!(ours[0]["reservation"], Value::Null, "started without gpurun");
    gpu0["processes"] = json!([]);
    let mut expected0 = expected_gpu(&scenario, 0, &[(holder_pid, 3 << 30)]);
    expected0["processes"] = json!([]);
    assert_eq!(gpu0, expected0);

    for index in [1, 2, 3, 4, 6, 7] {
        assert_eq!(gpus[index], expected_gpu(&scenario, index, &[]), "GPU {index}");
    }

    // GPU 5 fell off the bus: listed, with the error, not eligible, nothing made up.
    let lost = &gpus[5];
    assert_eq!(lost["index"], 5);
    assert_eq!(lost["eligible"], false);
    assert!(lost["error"].as_str().unwrap().contains("GPU is lost"), "{lost:#}");
    assert!(lost["reasons"][0].as_str().unwrap().contains("GPU is lost"));
    for field in ["uuid", "name", "memory", "utilization", "temperature_c", "processes"] {
        assert_eq!(lost[field], Value::Null, "{field}");
    }
    assert_eq!(lost["health"]["state"], "unhealthy", "{lost:#}");
    outcome.stderr_has("GPU 5 cannot be used");
}

fn common_user() -> String {
    let output = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn table_shows_models_memory_processes_and_the_lost_gpu() {
    let sim = Sim::new(&scenario_file("mixed8.toml"));
    let outcome = sim.gpurun().args(["--list"]).run();
    outcome
        .status(0)
        .stdout_has("NVIDIA driver 535.154.05, CUDA 12.2, 8 GPUs")
        .stdout_has("NVIDIA GeForce RTX 3090")
        .stdout_has("19.5 GiB / 24 GiB")
        .stdout_has("4190101 ? ? (19.5 GiB)")
        .stdout_has("4190103 ? ? (?)")
        .stdout_has("not eligible: unreadable: handle: GPU is lost")
        .stdout_has("not eligible: in MIG mode: its MIG devices are the devices");
    // GPU 7 cannot report utilization, temperature or power: dashes, not zeros.
    let row7 = outcome.stdout.lines().find(|l| l.trim_start().starts_with("7 ")).unwrap();
    assert!(!row7.contains("0%") && !row7.contains("0C"), "{row7}");
    assert!(row7.contains("  -  "), "{row7}");
}

/// Another user's process may name itself anything: its command line in the table has its
/// control characters written out (no escape sequence reaches the terminal, no fake row).
#[test]
fn a_command_line_with_control_characters_is_shown_escaped() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let cuda = common::sim_cuda();
    let script = "exec -a \"$(printf 'x\\033[2J\\n  1  FREE')\" \"$0\" --device 0 --sleep 30";
    let mut holder = sim.gpurun_command("bash", &["-c", script, cuda.to_str().unwrap()]).command;
    holder.stdout(std::process::Stdio::piped());
    let mut holder = common::Running(holder.spawn().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.0.stdout.as_mut().unwrap()), &mut line)
        .unwrap();
    let outcome = sim.gpurun().args(["--list"]).run();
    outcome.status(0).stdout_has(r"x\x1b[2J\n  1  FREE");
    assert!(!outcome.stdout.contains('\x1b'), "{}", outcome.stdout);
    holder.end();
}

#[test]
fn one_failing_query_makes_only_that_gpu_ineligible() {
    let mut text = common::default_scenario();
    text.push_str("\n[[error]]\ncall = \"nvmlDeviceGetMemoryInfo\"\ngpu = 3\nerror = \"GPU_IS_LOST\"\n");
    let sim = Sim::new(&text);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpus = listing["gpus"].as_array().unwrap();
    assert_eq!(gpus[3]["memory"], Value::Null);
    assert_eq!(gpus[3]["eligible"], false);
    assert!(gpus[3]["error"].as_str().unwrap().starts_with("memory: GPU is lost"));
    // What NVML did answer is still shown.
    assert_eq!(gpus[3]["name"], "NVIDIA A100-SXM4-80GB");
    for (index, gpu) in gpus.iter().enumerate().filter(|(i, _)| *i != 3) {
        assert_eq!(gpu["eligible"], true, "GPU {index}");
        assert!(gpu["memory"]["free_bytes"].is_u64());
    }
}

#[test]
fn unsupported_values_are_null_and_do_not_make_a_gpu_ineligible() {
    let mut text = common::default_scenario();
    text.push_str(
        "\n[[error]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 2\nerror = \"NOT_SUPPORTED\"\n",
    );
    let sim = Sim::new(&text);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpu = &listing["gpus"][2];
    assert_eq!(gpu["processes"], Value::Null);
    assert_eq!(gpu["eligible"], true);
    assert_eq!(gpu["error"], Value::Null);
    // V100s have no MIG: unknown, not "disabled".
    assert_eq!(listing["gpus"][0]["mig_enabled"], Value::Null);
}

#[test]
fn handle_refused_under_a_device_cgroup_is_listed_as_such() {
    let mut text = common::default_scenario();
    // GPU 1's device node is outside this job's cgroup.
    text = text.replacen("numa_node = 0\n\n[[gpu]]", "numa_node = 0\n\n[[gpu]]\naccessible = false", 1);
    let sim = Sim::new(&text);
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let gpu = &listing["gpus"][1];
    assert_eq!(gpu["eligible"], false);
    assert!(gpu["error"].as_str().unwrap().contains("no permission"), "{gpu:#}");
    assert_eq!(listing["gpus"][0]["eligible"], true);
}

#[test]
fn missing_library_is_one_line_with_a_hint() {
    let sim = Sim::new(&common::default_scenario());
    let outcome =
        sim.gpurun().env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1").args(["--list"]).run();
    outcome
        .status(125)
        .stderr_has("gpurun: cannot load the NVML library /nonexistent/libnvidia-ml.so.1")
        .stderr_has("; check the path given to --nvml-lib or GPURUN_NVML_LIB");
    assert_eq!(outcome.stderr.lines().count(), 1, "{}", outcome.stderr);
    assert!(outcome.stdout.is_empty());
    // Not named: the driver's library by its usual name; the hint says how to name one.
    let default = sim.gpurun().env_remove("GPURUN_NVML_LIB").args(["--list"]).run();
    if default.code == Some(125) {
        default.stderr_has(
            "is the NVIDIA driver installed? Name the library with --nvml-lib PATH or GPURUN_NVML_LIB",
        );
    }
}

#[test]
fn fallback_cpu_runs_the_command_with_no_gpu_on_a_machine_without_nvml() {
    // A laptop or a CI box: no library, or a library and no driver. The command runs with no GPU
    // visible and one warning; without --fallback cpu it is the usual 125.
    let sim = Sim::new(&common::default_scenario());
    let env_of_command = ["--", "sh", "-c", "echo \"cvd=${CUDA_VISIBLE_DEVICES-unset}\""];
    let no_library = || sim.gpurun().env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1");
    let fallback = no_library().args(["--gpus", "1", "--fallback", "cpu"]).args(env_of_command).run();
    fallback
        .status(0)
        .stdout_has("cvd=\n")
        .stderr_has("gpurun: warning: cannot load the NVML library /nonexistent/libnvidia-ml.so.1")
        .stderr_has("running with no GPU visible (--fallback cpu)");
    no_library().args(["--gpus", "1"]).args(env_of_command).run().status(125);
    // Only looking is not a request to fall back: --list still says NVML cannot be used.
    no_library().args(["--list", "--fallback", "cpu"]).run().status(125);
    let no_driver = Sim::new(&(common::default_scenario() + "\n[init]\nerror = \"DRIVER_NOT_LOADED\"\n"));
    no_driver
        .gpurun()
        .args(["--fallback", "cpu"])
        .args(env_of_command)
        .run()
        .status(0)
        .stdout_has("cvd=\n")
        .stderr_has("the NVIDIA driver is not loaded");
    // A file that is NVML's name but not NVML stays an error: a broken install, not a machine
    // without GPUs.
    let not_nvml = sim.dir.path().join("libnot-nvml.so");
    std::fs::copy("/lib/x86_64-linux-gnu/libc.so.6", &not_nvml).ok();
    if not_nvml.exists() {
        sim.gpurun()
            .env("GPURUN_NVML_LIB", &not_nvml)
            .args(["--fallback", "cpu", "--", "true"])
            .run()
            .status(125)
            .stderr_has("is not a usable NVML library");
    }
}

#[test]
fn default_library_name_is_libnvidia_ml_so_1() {
    let sim = Sim::new(&common::default_scenario());
    // No GPURUN_NVML_LIB: found through the dynamic loader's path, like the real driver's.
    let outcome = sim
        .gpurun()
        .env_remove("GPURUN_NVML_LIB")
        .env("LD_LIBRARY_PATH", &sim.lib_dir)
        .args(["--list", "--json"])
        .run();
    assert_eq!(outcome.status(0).json()["nvml_library"], "libnvidia-ml.so.1");
    let without = sim
        .gpurun()
        .env_remove("GPURUN_NVML_LIB")
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .args(["--list"])
        .run();
    without.status(125).stderr_has("cannot load the NVML library libnvidia-ml.so.1");
}

#[test]
fn a_file_that_is_not_a_library_is_reported() {
    let sim = Sim::new(&common::default_scenario());
    let outcome = sim.gpurun().env("GPURUN_NVML_LIB", &sim.scenario).args(["--list"]).run();
    outcome.status(125).stderr_has("cannot load the NVML library");
}

#[test]
fn nvml_lib_flag_wins_over_the_environment() {
    let sim = Sim::new(&common::default_scenario());
    let outcome = sim
        .gpurun()
        .env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args([std::ffi::OsStr::new("--nvml-lib"), sim.library().as_os_str(), "--list".as_ref()])
        .run();
    outcome.status(0).stdout_has("8 GPUs");
}

#[test]
fn driver_not_loaded() {
    let sim = Sim::new(&scenario_file("driver_not_loaded.toml"));
    let outcome = sim.gpurun().args(["--list"]).run();
    outcome.status(125).stderr_has("gpurun: the NVIDIA driver is not loaded").stderr_has("nvidia-smi");
    assert_eq!(outcome.stderr.lines().count(), 1);
}

#[test]
fn no_permission() {
    let sim = Sim::new(&scenario_file("no_permission.toml"));
    let outcome = sim.gpurun().args(["--list"]).run();
    outcome
        .status(125)
        .stderr_has("gpurun: no permission to talk to the NVIDIA driver")
        .stderr_has("/dev/nvidia");
    assert_eq!(outcome.stderr.lines().count(), 1);
}

#[test]
fn slow_init_still_lists() {
    let mut text = common::default_scenario();
    text.push_str("\n[init]\ndelay_ms = 300\n");
    let sim = Sim::new(&text);
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("8 GPUs");
}

#[test]
fn verbosity_flags_change_what_reaches_stderr() {
    let sim = Sim::new(&scenario_file("mixed8.toml"));
    let normal = sim.gpurun().args(["--list"]).run();
    normal.status(0).stderr_has("gpurun: warning: GPU 5 cannot be used");
    assert!(!normal.stderr.contains("debug:"));

    let quiet = sim.gpurun().args(["-q", "--list"]).run();
    assert_eq!(quiet.status(0).stderr, "");

    let verbose = sim.gpurun().args(["-v", "--list"]).run();
    verbose.status(0).stderr_has("gpurun: debug: NVML initialised");
    // The long spellings are the same switches.
    assert_eq!(sim.gpurun().args(["--quiet", "--list"]).run().status(0).stderr, "");
    sim.gpurun().args(["--verbose", "--list"]).run().status(0).stderr_has("gpurun: debug: NVML initialised");

    let filtered = sim.gpurun().env("GPURUN_LOG", "error").args(["--list"]).run();
    assert_eq!(filtered.status(0).stderr, "");
    // Directives, and GPURUN_LOG winning over -q.
    let directive = sim.gpurun().env("GPURUN_LOG", "gpurun=debug").args(["-q", "--list"]).run();
    directive.status(0).stderr_has("gpurun: debug: NVML initialised");
    let bad = sim.gpurun().env("GPURUN_LOG", "a=b=c").args(["--list"]).run();
    bad.status(0).stderr_has("gpurun: warning: ignoring GPURUN_LOG");
    // stdout is the listing and nothing else, whatever the log level.
    assert_eq!(normal.stdout, verbose.stdout);
}

/// `--list --watch --json` to a pipe: one JSON object per line per refresh, each with the time
/// it was taken; SIGINT ends it with 0, SIGTERM as it ends any program.
#[test]
fn list_watch_json_is_one_line_per_refresh() {
    let sim = Sim::new(&common::default_scenario());
    for (signal, expected) in [(libc::SIGINT, Some(0)), (libc::SIGTERM, None)] {
        let mut child = sim
            .gpurun()
            .args(["--list", "--json", "--watch=0.2"])
            .command
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        while lines.len() < 3 {
            let mut line = String::new();
            assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0, "{lines:?}");
            lines.push(line);
        }
        common::send_signal(child.id(), signal);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), expected, "{status:?}");
        if expected.is_none() {
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(signal));
        }
        for line in &lines {
            assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
            let frame: Value = serde_json::from_str(line).unwrap();
            assert_eq!(frame["gpus"].as_array().unwrap().len(), 8);
            assert!(frame["sampled_at"].as_str().unwrap().ends_with('Z'), "{frame}");
        }
    }
    sim.gpurun().args(["--watch", "--", "true"]).run().status(125).stderr_has("--list");
}

/// Issue 65: a refresh whose probe fails is still one JSON object, with `error` (it was a
/// plain-text line on stdout, which a JSON reader of the frames choked on).
#[test]
fn a_watch_frame_that_could_not_be_read_is_json_with_an_error() {
    let mut scenario = common::default_scenario();
    // The first frame's count answers; every later one hangs past --nvml-timeout.
    scenario.push_str("\n[[hang]]\ncall = \"nvmlDeviceGetCount\"\nafter = 1\nms = 600000\n");
    let sim = Sim::new(&scenario);
    let mut child = sim
        .gpurun()
        .args(["--list", "--json", "--watch=0.2", "--nvml-timeout", "300ms"])
        .command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut frames = Vec::new();
    while frames.len() < 2 {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0, "{frames:?}");
        frames.push(serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
    }
    common::send_signal(child.id(), libc::SIGINT);
    child.wait().unwrap();
    assert_eq!(frames[0]["gpus"].as_array().unwrap().len(), 8);
    assert!(frames[1]["error"].as_str().unwrap().contains("NVML did not answer"), "{}", frames[1]);
    assert!(frames[1]["sampled_at"].as_str().unwrap().ends_with('Z'));
}
