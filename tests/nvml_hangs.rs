//! NVML never holds the job hostage (issue 12): a call that hangs cannot stall supervision,
//! exit or signals; a probe that hangs ends in one line naming the call; a library thread
//! cannot take a signal meant for the command; a real fault in the driver still kills gpurun.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use common::{default_scenario, recorder, send_signal, start_recorder, wait_until, Sim};

const LONG: Duration = Duration::from_secs(10);

/// The default machine, whose process-list call on GPU 7 hangs for a minute once the probe
/// (one call) is done: every verification poll gets stuck on it.
fn hanging_process_list() -> Sim {
    let mut text = default_scenario();
    text.push_str(
        // Ten minutes: anything that waited for the call would be hung.
        "\n[[hang]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 7\nafter = 1\nms = 600000\n",
    );
    Sim::new(&text)
}

fn with_hang(call: &str, extra: &str) -> Sim {
    let mut text = default_scenario();
    text.push_str(&format!("\n[[hang]]\ncall = \"{call}\"\n{extra}\n"));
    Sim::new(&text)
}

#[test]
fn a_hanging_process_list_does_not_delay_the_commands_end() {
    let sim = hanging_process_list();
    let outcome = sim.gpurun().args(["--report", "--", "sh", "-c", "sleep 1; exit 7"]).run_unless_hung();
    outcome
        .status(7)
        .stderr_has("unverifiable: NVML did not answer: nvmlDeviceGetComputeRunningProcesses_v3 on GPU 7");
}

#[test]
fn at_the_verification_deadline_a_hung_call_is_unverifiable_and_strict_ends_nothing() {
    let sim = hanging_process_list();
    let outcome = sim
        .gpurun()
        .args(["--verify", "strict", "--verify-timeout", "1s", "--", "sh", "-c", "sleep 2; exit 3"])
        .run();
    outcome
        .status(3)
        .stderr_has("unverifiable: NVML did not answer: nvmlDeviceGetComputeRunningProcesses_v3 on GPU 7")
        .stderr_has("(within --verify-timeout)");
}

#[test]
fn signals_reach_the_command_while_a_call_hangs() {
    let sim = hanging_process_list();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("signals.log");
    let calls = dir.path().join("calls.log");
    let mut gpurun = sim
        .gpurun()
        .args(["-q", "--", "python3"])
        .args([recorder()])
        .args([log.to_str().unwrap(), "--signals", "TERM,USR1", "--exit-on", "TERM"])
        .env("NVML_SIM_CALL_LOG", &calls)
        .command
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(gpurun.stdout.as_mut().unwrap()), &mut line)
        .unwrap();
    assert!(line.starts_with("ready "), "{line}");
    // The verification poll is stuck first: its process-list call on GPU 7 (the second, the
    // probe's was the first) has begun, and hangs.
    let list_calls = || {
        let text = std::fs::read_to_string(&calls).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(" nvmlDeviceGetComputeRunningProcesses") && l.ends_with(" 7"))
            .count()
    };
    assert!(wait_until(LONG, || list_calls() >= 2), "the poll never reached the hung call");
    let recorded =
        |name: &str| std::fs::read_to_string(&log).unwrap_or_default().lines().filter(|l| *l == name).count();
    // The call hangs for ten minutes: a signal that waited for it would not come in LONG.
    send_signal(gpurun.id(), libc::SIGUSR1);
    assert!(wait_until(LONG, || recorded("USR1") == 1), "USR1 waited for the hung call");
    send_signal(gpurun.id(), libc::SIGTERM);
    let status = common::wait_unless_hung(&mut gpurun);
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    // Written by the recorder before it died of TERM, so before gpurun died.
    assert_eq!((recorded("USR1"), recorded("TERM")), (1, 1));
}

#[test]
fn an_init_that_hangs_ends_in_one_line_or_no_gpu_with_fallback_cpu() {
    let sim = with_hang("nvmlInit", "");
    // nvmlInit never returns: without the deadline gpurun would be hung.
    let outcome = sim.gpurun().args(["--nvml-timeout", "2s", "--", "true"]).run_unless_hung();
    outcome
        .status(125)
        .stderr_has("gpurun: NVML did not answer within 2 s: nvmlInit_v2 (waiting for 2.0 s) did not return")
        .stderr_has("the driver may be hung (check `dmesg`");
    assert_eq!(outcome.stderr.lines().count(), 1, "{}", outcome.stderr);

    let fallback = sim
        .gpurun()
        .args([
            "--nvml-timeout",
            "1s",
            "--fallback",
            "cpu",
            "--",
            "sh",
            "-c",
            "echo \"[$CUDA_VISIBLE_DEVICES]\"",
        ])
        .run();
    assert_eq!(fallback.status(0).stdout, "[]\n");
    fallback.stderr_has("running with no GPU visible (--fallback cpu)");

    // The variable and the configuration key are the same setting.
    let listed = sim.gpurun().args(["--list"]).env("GPURUN_NVML_TIMEOUT", "1s").run_unless_hung();
    listed.status(125).stderr_has("within 1 s");
}

#[test]
fn every_mode_obeys_the_deadline_and_names_the_gpu() {
    let sim = with_hang("nvmlDeviceGetMemoryInfo", "gpu = 3");
    for mode in [&["--list"][..], &["--dry-run"], &["--export"]] {
        sim.gpurun()
            .args(mode)
            .args(["--nvml-timeout", "1s"])
            .run_unless_hung()
            .status(125)
            .stderr_has("nvmlDeviceGetMemoryInfo_v2 on GPU 3");
    }
    let doctor = sim.gpurun().args(["--doctor", "--nvml-timeout", "1s"]).run();
    doctor.status(125).stdout_has("PROBLEM  NVML from").stdout_has("nvmlDeviceGetMemoryInfo_v2 on GPU 3");
}

#[test]
fn with_wait_a_probe_that_hangs_is_waited_for_until_the_wait_is_over() {
    let sim = with_hang("nvmlDeviceGetCount", "");
    // The probe hangs for good: past --nvml-timeout the launch says it waits, then gives up by
    // itself when the --wait is over (a launch that never gave up would be hung).
    let outcome = sim.gpurun().args(["--nvml-timeout", "500ms", "--wait=2s", "--", "true"]).run_unless_hung();
    outcome.status(125).stderr_has("waiting (--wait): ").stderr_has("nvmlDeviceGetCount_v2");
    // A call that answers after a while, within --wait: the launch goes ahead.
    let slow = with_hang("nvmlDeviceGetCount", "ms = 1500\ntimes = 1");
    slow.gpurun().args(["-q", "--nvml-timeout", "500ms", "--wait=10s", "--", "true"]).run().status(0);
}

/// A launch reads a GPU's health only once it has chosen it (issue 63): a health call that
/// hangs there is waited for under `--wait` as a hanging probe is, and named where it is not.
#[test]
fn a_deferred_health_call_that_hangs_is_waited_for_as_the_probe_is() {
    let slow = with_hang("nvmlDeviceGetEccMode", "ms = 1500\ntimes = 1");
    slow.gpurun()
        .args(["-q", "--nvml-timeout", "500ms", "--wait=10s", "--", "true"])
        .run_unless_hung()
        .status(0);
    let hung = with_hang("nvmlDeviceGetEccMode", "");
    hung.gpurun()
        .args(["--nvml-timeout", "500ms", "--", "true"])
        .run_unless_hung()
        .status(125)
        .stderr_has("nvmlDeviceGetEccMode on GPU");
}

#[test]
fn a_library_thread_cannot_take_a_signal_meant_for_the_command() {
    // The default machine's library starts a thread in nvmlInit (helper_thread).
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    for (signal, name) in
        [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT"), (libc::SIGHUP, "HUP"), (libc::SIGUSR1, "USR1")]
    {
        let log = dir.path().join(format!("{name}.log"));
        let mut gpurun =
            start_recorder(sim.gpurun().args(["-q", "--", "python3"]).args([recorder()]).args([
                log.to_str().unwrap(),
                "--signals",
                name,
            ]));
        let threads = std::fs::read_dir(format!("/proc/{}/task", gpurun.0.id())).unwrap().count();
        assert!(threads >= 3, "gpurun, its NVML thread and the library's: {threads}");
        send_signal(gpurun.0.id(), signal);
        let recorded = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(wait_until(LONG, || !recorded().is_empty()), "{name} never arrived");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(recorded(), format!("{name}\n"));
        std::fs::write(format!("{}.stop", log.display()), "").unwrap();
        assert!(gpurun.0.wait().unwrap().success(), "{name}: gpurun did not survive to pass on the status");
    }
}

#[test]
fn a_real_fault_in_the_driver_still_kills_gpurun() {
    let mut text = default_scenario();
    text.push_str("\n[[crash]]\ncall = \"nvmlDeviceGetName\"\ngpu = 2\n");
    let sim = Sim::new(&text);
    let status = sim.gpurun().args(["--list"]).command.stderr(Stdio::null()).status().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
}

#[test]
fn a_hanging_link_query_ends_a_multi_gpu_launch_in_one_line() {
    let sim = with_hang("nvmlDeviceGetP2PStatus", "ms = 600000");
    sim.gpurun()
        .args(["--nvml-timeout", "1s", "--gpus", "2", "--", "true"])
        .run_unless_hung()
        .status(125)
        .stderr_has("nvmlDeviceGetP2PStatus");
    // A one-GPU launch asks for no link at all; --fallback cpu runs the command without a GPU.
    sim.gpurun().args(["--nvml-timeout", "1s", "--", "true"]).run().status(0);
    sim.gpurun()
        .args(["--nvml-timeout", "1s", "--gpus", "2", "--fallback", "cpu", "--", "true"])
        .run()
        .status(0);
}

/// The receipt's counters are read on the NVML thread: an energy call that never returns
/// holds neither the command's end nor gpurun's exit; the report says energy unknown and that
/// NVML did not answer (issue 38's new calls, hung).
#[test]
fn a_hanging_energy_counter_does_not_delay_the_end() {
    let sim = with_hang("nvmlDeviceGetTotalEnergyConsumption", "ms = 600000");
    let file = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--report-json"])
        .arg(&file)
        .args(["--", "sh", "-c", "sleep 1; exit 7"])
        .run_unless_hung();
    outcome.status(7).stderr_has("NVML did not answer: nvmlDeviceGetTotalEnergyConsumption on GPU 3");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let energy = report["energy_joules"].as_object().unwrap();
    assert!(energy.values().all(serde_json::Value::is_null), "{report}");
}

/// A receipt call that hangs mid-run (power, read at every poll) gives up the receipt, not
/// verification: the polls go on from a spare thread, the job is verified, and the report's
/// energy is null.
#[test]
fn a_hanging_power_reading_gives_up_the_receipt_not_verification() {
    // The probe reads it once; the command's start is the read that hangs.
    let sim = with_hang("nvmlDeviceGetPowerUsage", "gpu = 3\nafter = 1\nms = 600000");
    let file = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--report-json"])
        .arg(&file)
        .args(["--", "env", "CUDA_DEVICE_ORDER=PCI_BUS_ID"])
        .arg(common::sim_cuda())
        .args(["--sleep", "4"])
        .run_unless_hung();
    outcome
        .status(0)
        .stderr_has(
            "warning: the receipt (energy, power, utilization, throttling) and Xid errors are not read for the \
             rest of the run: nvmlDeviceGetPowerUsage on GPU 3 (waiting for 2",
        )
        .stderr_has("verified: PID ");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(report["verification"]["verdict"], "verified", "{report}");
    let energy = report["energy_joules"].as_object().unwrap();
    assert!(energy.values().all(serde_json::Value::is_null), "{report}");
}
