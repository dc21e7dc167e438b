//! The command-line surface: usage errors exit 125 with a `gpurun:` message and never start a
//! child or touch NVML; help and version work on a machine without any NVML.

use crate::common;

use common::Sim;

/// (argv, a piece of the expected message).
const INVALID: &[(&[&str], &str)] = &[
    (&["--bogus"], "unexpected argument '--bogus'"),
    (&["--json"], "--list"),
    (&["--list", "nvidia-smi"], "--list takes no COMMAND, but got \"nvidia-smi\""),
    (&["--list", "--export"], "cannot be used with"),
    (&["--nvml-lib"], "a value is required for '--nvml-lib <PATH>'"),
    (&["--nvml-lib", "", "--list"], "a value is required for '--nvml-lib <PATH>'"),
    (&[], "no COMMAND given"),
];

#[test]
fn invalid_argv_is_a_usage_error() {
    // An NVML that would fail loudly if touched: usage errors must come first.
    let sim = Sim::new(&common::scenario_file("driver_not_loaded.toml"));
    for (argv, message) in INVALID {
        let outcome = sim.gpurun().args(*argv).run();
        assert_eq!(outcome.code, Some(125), "{argv:?}: {outcome:#?}");
        assert!(outcome.stderr.starts_with("gpurun: "), "{argv:?}: {outcome:#?}");
        assert!(outcome.stderr.contains(message), "{argv:?}: expected {message:?} in {outcome:#?}");
        assert!(!outcome.stderr.contains("driver is not loaded"), "{argv:?} touched NVML");
        assert!(outcome.stdout.is_empty(), "{argv:?}: {outcome:#?}");
    }
}

#[test]
fn help_and_version_need_no_nvml() {
    let sim = Sim::new(&common::scenario_file("driver_not_loaded.toml"));
    let help = sim.gpurun().args(["--help"]).run();
    help.status(0).stdout_has("Usage: gpurun [OPTIONS] [--] COMMAND").stdout_has("--nvml-lib <PATH>");
    help.stdout_has("GPURUN_NVML_LIB").stdout_has("free_bytes").stdout_has("Exit status:");
    // -h is the short help (as ripgrep and curl): what people use daily, three examples, where
    // the rest is; --help keeps the full reference.
    let short = sim.gpurun().args(["-h"]).run();
    short.status(0).stdout_has("--list").stdout_has("--gpus <N|MIN-MAX|all>").stdout_has("--min-free");
    short.stdout_has("Examples:").stdout_has("gpurun --help, man gpurun");
    assert!(short.stdout.lines().count() <= 50, "{} lines:\n{}", short.stdout.lines().count(), short.stdout);
    assert!(!short.stdout.contains("--parent-death-signal") && !short.stdout.contains("free_bytes"));
    assert!(help.stdout.contains("--parent-death-signal") && help.stdout.lines().count() > 150);
    let version = sim.gpurun().args(["--version"]).run();
    version.status(0).stdout_has(concat!("gpurun ", env!("CARGO_PKG_VERSION")));
}

#[test]
fn options_after_the_command_belong_to_the_command() {
    // `--list` after COMMAND is the command's argument, not gpurun's: not a list request.
    let sim = Sim::new(&common::default_scenario());
    let outcome = sim.gpurun().args(["-q", "echo", "--list"]).run();
    assert_eq!(outcome.status(0).stdout, "--list\n");
    assert_eq!(outcome.stderr, "");
}

#[test]
fn help_and_version_work_with_broken_settings() {
    let sim = Sim::new(&common::default_scenario());
    let broken = sim.dir.path().join("broken.toml");
    std::fs::write(&broken, "policy = \"nonsense\"\n").unwrap();
    for args in [&["--help"][..], &["-h"], &["--version"], &["--gpus", "2", "--help"]] {
        for (name, value) in
            [("GPURUN_MAX_UTIL", "200"), ("GPURUN_CONFIG", broken.to_str().unwrap()), ("GPURUN_BOGUS", "1")]
        {
            let outcome = sim.gpurun().args(args).env(name, value).run();
            outcome.status(0);
            assert!(outcome.stdout.contains("gpurun"), "{args:?} {name}: {outcome:#?}");
        }
    }
    // Anything else still reads them.
    sim.gpurun()
        .args(["--list"])
        .env("GPURUN_MAX_UTIL", "200")
        .run()
        .status(125)
        .stderr_has("GPURUN_MAX_UTIL");
}

/// Issue 43 (5): under `--log-format json` (or GPURUN_LOG_FORMAT=json) usage, variable and
/// config errors came as text, exactly the lines a log shipper most needs. Every stderr line is
/// one JSON object, as far as the command line could be read; a `--log-format json` after `--`
/// is the command's, not gpurun's.
#[test]
fn under_json_logs_even_a_usage_or_config_error_is_one_json_line() {
    let sim = Sim::new(&common::default_scenario());
    let config = sim.dir.path().join("bad.toml");
    std::fs::write(&config, "policy = 3\n").unwrap();
    let cases = [
        (sim.gpurun().args(["--log-format", "json", "--policy", "bogus", "--", "true"]), "'bogus'"),
        (sim.gpurun().args(["--log-format=json", "--frobnicate", "--", "true"]), "'--frobnicate'"),
        (
            sim.gpurun().args(["--", "true"]).env("GPURUN_LOG_FORMAT", "json").env("GPURUN_POLICY", "bogus"),
            "GPURUN_POLICY",
        ),
        (
            sim.gpurun().args(["--log-format", "json", "--", "true"]).env("GPURUN_CONFIG", &config),
            "bad.toml:1",
        ),
    ];
    for (run, names) in cases {
        let outcome = run.run();
        outcome.status(125);
        let lines: Vec<&str> = outcome.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", outcome.stderr);
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["level"], "error", "{line}");
        assert!(line["message"].as_str().unwrap().contains(names), "{line}");
    }
    // After --, the words are the command's: gpurun's own error stays text.
    let theirs = sim.gpurun().args(["--policy", "bogus", "--", "echo", "--log-format", "json"]).run();
    theirs.status(125).stderr_has("gpurun: invalid value 'bogus'");
}

/// Issue 43 (4): `-vv` offered trace and showed nothing more than `-v`. It now traces each
/// NVML call with its answer and time, each lease and ticket read, and each wake-up.
#[test]
fn vv_traces_each_nvml_call_and_each_lease_read() {
    let sim = Sim::new(&common::scenario_file("two_idle.toml"));
    let _holder = common::background(sim.gpurun().args(["-q", "--devices", "0", "--", "sleep", "30"]));
    let leased = || common::leases_in(&sim.lock_dir()) > 0;
    assert!(common::wait_until(std::time::Duration::from_secs(20), leased));
    let traced = sim.gpurun().args(["-vv", "--", "true"]).run();
    traced
        .status(0)
        .stderr_has("gpurun: trace: NVML nvmlInit_v2: ok in ")
        .stderr_has("gpurun: trace: NVML nvmlDeviceGetMemoryInfo_v2 on GPU 1: ok in ")
        .stderr_has(" ms\n")
        .stderr_has("gpurun: trace: lease GPU-22220000-0000-4000-8000-000000000000.");
    let debug = sim.gpurun().args(["-v", "--", "true"]).run();
    assert!(!debug.status(0).stderr.contains("trace:"), "{}", debug.stderr);
}
