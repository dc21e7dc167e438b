//! Selection through the real binary on simulated machines: filters, policies, inherited
//! visibility, fallbacks, `--dry-run` and `--export`. The default scenario is the embedded mixed
//! 8-GPU server (crates/nvml-sim/scenarios/default.toml); free memory there, in GiB:
//! 0: 31.7, 1: 2.3 (busy), 2: 70.7 (busy), 3: 79.4, 4: 7.6 (busy), 5: 79.1, 6: 39.5, 7: 39.5.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{default_scenario, sim_cuda, Outcome, Sim};
use serde_json::Value;

/// The variables of `--export` output, unquoted.
fn exports(outcome: &Outcome) -> BTreeMap<String, String> {
    outcome
        .stdout
        .lines()
        .map(|line| {
            let rest = line.strip_prefix("export ").unwrap_or_else(|| panic!("not an export line: {line:?}"));
            let (name, quoted) = rest.split_once('=').expect("NAME=value");
            let value = quoted.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).expect("single-quoted");
            (name.to_owned(), value.replace(r"'\''", "'"))
        })
        .collect()
}

fn visible(sim: &Sim, args: &[&str]) -> String {
    let outcome = sim.gpurun().args(["--export"]).args(args).run();
    outcome.status(0);
    exports(&outcome)["CUDA_VISIBLE_DEVICES"].clone()
}

#[test]
fn each_selection_flag_changes_the_choice() {
    let sim = Sim::new(&default_scenario());
    let cases: &[(&[&str], &str)] = &[
        (&[], "3"),
        // Two of one model (the A100 80GB pair, one PCIe switch), not the two with most free memory.
        (&["--gpus", "2"], "3,2"),
        (&["--gpus", "0"], ""),
        (&["--gpus", "3"], "3,5,2"),
        (&["--min-free", "75G", "--gpus", "2"], "3,5"),
        (&["--min-free", "99.3%", "--policy", "index"], "3"),
        (&["--min-total", "80G", "--policy", "index"], "2"),
        (&["--max-util", "10", "--policy", "pack"], "0"),
        (&["--max-util", "10", "--policy", "pack", "--min-free", "35G"], "7"),
        (&["--max-util", "0", "--policy", "index", "--gpus", "2"], "0,3"),
        (&["--exclusive", "--policy", "least-util", "--gpus", "3"], "3,5,7"),
        (&["--exclusive", "--policy", "index", "--gpus", "2"], "6,7"),
        (&["--devices", "6,7"], "7"),
        (&["--devices", "GPU-0b1d2f3a-4c5e-4d6f-8a9b-1c2d3e4f5a66"], "6"),
        (&["--devices", "0b1d2f3a-4c5e-4d6f-8a9b-1c2d3e4f5a67"], "7"),
        (&["--devices", "0000:C7:00.0"], "6"),
        (&["--devices", "c7:00.0,1"], "6"),
        (&["--exclude", "3,5"], "2"),
        (&["--exclude", "GPU-c0ffee00-1234-4abc-9def-0123456789a5,00000000:4E:00.0"], "2"),
        (&["--model", "V100"], "0"),
        (&["--model", "*40gb", "--gpus", "2"], "7,6"),
        (&["--model", "h100", "--min-free", "8G"], "5"),
        (&["--policy", "balanced"], "3"),
        (&["--policy", "balanced", "--exclude", "3,5", "--gpus", "2"], "7,6"),
        (&["--policy", "pack", "--min-free", "30G"], "0"),
        // Pack takes the tightest card that fits, busy ones (1 and 4) after every other.
        (&["--policy", "pack"], "0"),
        (&["--policy", "pack", "--devices", "1,4"], "1"),
        (&["--policy", "least-util", "--exclude", "3"], "5"),
        (&["--policy", "index"], "0"),
        (&["--policy", "random", "--devices", "6"], "6"),
    ];
    for (args, expected) in cases {
        assert_eq!(visible(&sim, args), *expected, "gpurun {args:?}");
    }
}

#[test]
fn random_policy_only_picks_qualifying_gpus_and_varies() {
    let sim = Sim::new(&default_scenario());
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let choice = visible(&sim, &["--policy", "random", "--min-free", "30G"]);
        assert!(["0", "2", "3", "5", "6", "7"].contains(&choice.as_str()), "{choice}");
        seen.insert(choice);
    }
    assert!(seen.len() > 1, "random always chose {seen:?}");
}

#[test]
fn the_child_environment() {
    let sim = Sim::new(&default_scenario());
    let outcome = sim.gpurun().args(["--export", "--gpus", "2"]).run();
    let variables = exports(outcome.status(0));
    assert_eq!(variables["CUDA_VISIBLE_DEVICES"], "3,2");
    assert_eq!(variables["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(variables["GPURUN_GPUS"], "3,2");
    assert_eq!(
        variables["GPURUN_GPU_UUIDS"],
        "GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53,GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e52"
    );
    assert_eq!(variables["TF_FORCE_GPU_ALLOW_GROWTH"], "true");
    assert_eq!(variables["XLA_PYTHON_CLIENT_PREALLOCATE"], "false");
    assert!(!variables.contains_key("GPU_DEVICE_ORDINAL"));

    let by_uuid = exports(sim.gpurun().args(["--export", "--visible-as", "uuid"]).run().status(0));
    assert_eq!(by_uuid["CUDA_VISIBLE_DEVICES"], "GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53");

    let bare = exports(sim.gpurun().args(["--export", "--no-framework-env"]).run().status(0));
    assert!(
        !bare.contains_key("TF_FORCE_GPU_ALLOW_GROWTH")
            && !bare.contains_key("XLA_PYTHON_CLIENT_PREALLOCATE")
    );

    let users = sim
        .gpurun()
        .env("TF_FORCE_GPU_ALLOW_GROWTH", "false")
        .env("GPU_DEVICE_ORDINAL", "0")
        .args(["--export", "--gpus", "2"])
        .run();
    let users = exports(users.status(0));
    assert!(!users.contains_key("TF_FORCE_GPU_ALLOW_GROWTH"), "the user's value wins");
    assert_eq!(users["GPU_DEVICE_ORDINAL"], "3,2");
}

#[test]
fn export_is_safe_to_eval() {
    let sim = Sim::new(&default_scenario());
    let script = format!(
        "vars=$('{}' --export --gpus 2) || exit; eval \"$vars\"; printf '%s|%s' \"$CUDA_VISIBLE_DEVICES\" \"$CUDA_DEVICE_ORDER\"",
        common::GPURUN
    );
    let outcome = sim.gpurun_command("sh", &["-c", &script]).run();
    assert_eq!(outcome.status(0).stdout, "3,2|PCI_BUS_ID");
}

/// What gpurun exports makes a CUDA program land on exactly the GPUs gpurun reports, though
/// CUDA's own default order on this machine is different (fastest first).
#[test]
fn exported_variables_land_cuda_on_the_reported_gpus() {
    let sim = Sim::new(&default_scenario());
    for args in [
        &["--gpus", "2"][..],
        &["--devices", "0"],
        &["--model", "40GB"],
        &["--visible-as", "uuid", "--gpus", "3"],
    ] {
        let variables = exports(sim.gpurun().args(["--export"]).args(args).run().status(0));
        let report = run_sim_cuda(&sim, &variables);
        let landed: Vec<String> =
            report["devices"].as_array().unwrap().iter().map(|d| d["nvml_index"].to_string()).collect();
        assert_eq!(landed.join(","), variables["GPURUN_GPUS"], "{args:?}: {report}");
    }
}

fn run_sim_cuda(sim: &Sim, variables: &BTreeMap<String, String>) -> Value {
    let output = Command::new(sim_cuda())
        .env("NVML_SIM_SCENARIO", &sim.scenario)
        .envs(variables)
        .args(["--mem", "1MiB"])
        .output()
        .expect("run sim-cuda");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("sim-cuda JSON")
}

#[test]
fn not_enough_gpus_exits_75_with_every_reason() {
    let sim = Sim::new(&default_scenario());
    let outcome = sim.gpurun().args(["--export", "--gpus", "2", "--min-free", "75G", "--exclude", "3"]).run();
    outcome
        .status(75)
        .stderr_has("gpurun: not enough GPUs: 2 requested, 1 qualifies")
        .stderr_has("  GPU 5: qualifies (NVIDIA H100 80GB HBM3)")
        .stderr_has("  GPU 1: free 2.3 GiB < 75 GiB")
        .stderr_has("  GPU 3: excluded by --exclude")
        .stderr_has("  GPU 2: free 70.7 GiB < 75 GiB");
    assert_eq!(outcome.stdout, "", "nothing to eval on failure");
    assert_eq!(outcome.stderr.lines().count(), 9);

    let utilization = sim.gpurun().args(["--export", "--max-util", "50", "--devices", "4"]).run();
    utilization.status(75).stderr_has("GPU 4: utilization 100% > 50%");
    let exclusive = sim.gpurun().args(["--dry-run", "--exclusive", "--devices", "4"]).run();
    exclusive.status(75).stderr_has("in use by 2 processes (PIDs 4190003, 4190004)");
    let percent = sim.gpurun().args(["--export", "--min-free", "50%", "--devices", "1"]).run();
    percent.status(75).stderr_has("free 2.3 GiB < 50% of 32 GiB (16 GiB)");
}

#[test]
fn fallbacks() {
    let sim = Sim::new(&default_scenario());
    let args = ["--export", "--gpus", "2", "--min-free", "75G", "--exclude", "3"];
    let best = sim.gpurun().args(args).args(["--fallback", "best"]).run();
    best.status(0)
        .stderr_has("gpurun: warning: taking GPU 2 anyway (--fallback best): free 70.7 GiB < 75 GiB");
    assert_eq!(exports(&best)["CUDA_VISIBLE_DEVICES"], "5,2");

    let cpu = sim.gpurun().args(args).args(["--fallback", "cpu"]).run();
    cpu.status(0).stderr_has("running with no GPU visible (--fallback cpu)");
    assert_eq!(exports(&cpu)["CUDA_VISIBLE_DEVICES"], "");

    // Only the load filters are relaxed: an excluded or unreadable GPU is never taken.
    // ...and a request no state of the machine can meet is refused at once, fallback or not.
    let hard = sim.gpurun().args(["--export", "--gpus", "2", "--devices", "3", "--fallback", "best"]).run();
    hard.status(125).stderr_has("gpurun: --gpus 2: --devices/--exclude leave only 1 GPU");
    // --fallback cpu is the user's "run anyway", with or without --wait.
    for wait in [&[][..], &["--wait=5s"]] {
        let cpu = sim.gpurun().args(["--export", "--gpus", "9", "--fallback", "cpu"]).args(wait).run();
        assert_eq!(exports(cpu.status(0))["CUDA_VISIBLE_DEVICES"], "", "{wait:?}");
    }
}

#[test]
fn inherited_visibility_is_never_widened() {
    let sim = Sim::new(&default_scenario());
    let inherited =
        |value: &str| sim.gpurun().env("CUDA_VISIBLE_DEVICES", value).env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");

    assert_eq!(exports(inherited("4,5").args(["--export"]).run().status(0))["CUDA_VISIBLE_DEVICES"], "5");
    inherited("4,5")
        .args(["--export", "--gpus", "3"])
        .run()
        .status(125)
        .stderr_has("gpurun: --gpus 3: CUDA_VISIBLE_DEVICES=4,5 allows only 2 GPUs");
    inherited("4,5")
        .args(["--export", "--gpus", "2", "--exclusive"])
        .run()
        .status(75)
        .stderr_has("GPU 3: not in CUDA_VISIBLE_DEVICES=4,5");
    // --devices inside the inherited set only.
    inherited("4,5")
        .args(["--export", "--devices", "3"])
        .run()
        .status(125)
        .stderr_has("gpurun: --gpus 1: --devices/--exclude leave no GPU");

    // Empty: no GPU at all, and the way back named.
    inherited("")
        .args(["--export"])
        .run()
        .status(125)
        .stderr_has("gpurun: --gpus 1: CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU")
        .stderr_has("to choose among all of them: unset CUDA_VISIBLE_DEVICES");
    assert_eq!(
        exports(inherited("").args(["--export", "--gpus", "0"]).run().status(0))["CUDA_VISIBLE_DEVICES"],
        ""
    );

    // UUIDs and unique prefixes; an ambiguous prefix ends the list, like CUDA.
    let by_uuid =
        inherited("GPU-0b1d2f3a-4c5e-4d6f-8a9b-1c2d3e4f5a66,GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e52");
    assert_eq!(
        exports(by_uuid.args(["--export", "--gpus", "2"]).run().status(0))["CUDA_VISIBLE_DEVICES"],
        "2,6"
    );
    let ambiguous = inherited("6,GPU-c0ffee00,3").args(["--export", "--gpus", "2"]).run();
    ambiguous.status(125).stderr_has("entry \"GPU-c0ffee00\" ends the list").stderr_has("allows only 1 GPU");
}

#[test]
fn an_earlier_export_in_the_same_shell_is_named_with_its_undo() {
    let sim = Sim::new(&default_scenario());
    // eval "$(gpurun --export)" put GPU 3 into this shell's environment.
    let exported = exports(sim.gpurun().args(["--export"]).run().status(0));
    let mut later = sim.gpurun();
    for (name, value) in &exported {
        later = later.env(name, value);
    }
    let undo =
        "set by an earlier eval \"$(gpurun --export)\" in this shell, and gpurun never widens it; to choose \
                among every GPU again: unset CUDA_VISIBLE_DEVICES GPURUN_GPUS GPURUN_GPU_UUIDS";
    let refused = later.args(["--export", "--gpus", "2"]).run();
    refused.status(125).stderr_has("--gpus 2: CUDA_VISIBLE_DEVICES=3 allows only 1 GPU").stderr_has(undo);
    // A refusal for the load (75) says it too; the behaviour stays: never widened.
    let _holder = sim.spawn_sim_cuda(
        &[("CUDA_VISIBLE_DEVICES", "3"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        &["--sleep", "10"],
    );
    let mut busy = sim.gpurun();
    for (name, value) in &exported {
        busy = busy.env(name, value);
    }
    busy.args(["--export", "--exclusive"])
        .run()
        .status(75)
        .stderr_has("GPU 3: in use by PID")
        .stderr_has(undo);
    // A CUDA_VISIBLE_DEVICES someone else set gets no such note.
    let other = sim.gpurun().env("CUDA_VISIBLE_DEVICES", "3").args(["--export", "--gpus", "2"]).run();
    assert!(!other.status(125).stderr.contains("earlier eval"), "{}", other.stderr);
}

#[test]
fn inherited_indices_without_pci_order_are_ambiguous_on_mixed_machines() {
    let sim = Sim::new(&default_scenario());
    let warned = sim.gpurun().env("CUDA_VISIBLE_DEVICES", "0,1").args(["--export"]).run();
    warned.status(0).stderr_has("CUDA_DEVICE_ORDER is not PCI_BUS_ID and the GPUs differ in model");
    let quiet = sim
        .gpurun()
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .args(["--export"])
        .run();
    assert_eq!(quiet.status(0).stderr, "");
}

#[test]
fn device_cgroup_renumbering_is_followed() {
    // Slurm with ConstrainDevices: this job may open only GPUs 2 and 3; NVML refuses the rest.
    let mut text = default_scenario();
    for index in [0, 1, 4, 5, 6, 7] {
        let uuid_line = format!("uuid = \"{}\"", uuid_of(index));
        text = text.replace(&uuid_line, &format!("{uuid_line}\naccessible = false"));
    }
    let sim = Sim::new(&text);
    // Slurm renumbers: CUDA_VISIBLE_DEVICES=0,1 means the two GPUs of the job.
    let outcome = sim
        .gpurun()
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("SLURM_STEP_GPUS", "2,3")
        .args(["--export"])
        .run();
    let variables = exports(outcome.status(0));
    assert_eq!(variables["GPURUN_GPUS"], "3");
    // CUDA in this cgroup sees GPU 3 as its device 1.
    assert_eq!(variables["CUDA_VISIBLE_DEVICES"], "1");
    let report = run_sim_cuda(&sim, &variables);
    assert_eq!(report["devices"][0]["nvml_index"], 3, "{report}");
}

fn uuid_of(index: usize) -> String {
    let scenario = nvml_sim::scenario::parse(&default_scenario()).unwrap();
    scenario.gpus[index].uuid.clone()
}

#[test]
fn slurm_allocation_is_a_hint_when_cuda_visible_devices_is_unset() {
    let sim = Sim::new(&default_scenario());
    let hinted = sim.gpurun().env("SLURM_STEP_GPUS", "6,7").args(["--export"]).run();
    assert_eq!(exports(hinted.status(0))["CUDA_VISIBLE_DEVICES"], "7");
    let job = sim.gpurun().env("SLURM_JOB_GPUS", "0").args(["--export"]).run();
    assert_eq!(exports(job.status(0))["CUDA_VISIBLE_DEVICES"], "0");
}

#[test]
fn dry_run_json_has_selected_and_env() {
    let sim = Sim::new(&default_scenario());
    let plan =
        sim.gpurun().args(["--dry-run", "--json", "--gpus", "2", "--min-free", "75G"]).run().status(0).json();
    assert_eq!(
        plan["selected"],
        serde_json::json!([
            {"index": 3, "uuid": "GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53"},
            {"index": 5, "uuid": "GPU-c0ffee00-1234-4abc-9def-0123456789a5"},
        ])
    );
    assert_eq!(plan["env"]["CUDA_VISIBLE_DEVICES"], "3,5");
    assert_eq!(plan["env"]["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(plan["gpus"][1]["eligible"], false);
    assert_eq!(
        plan["gpus"][1]["reasons"],
        serde_json::json!(["free 2.3 GiB < 75 GiB (never: 31.7 GiB in total)"])
    );
    assert_eq!(plan["gpus"].as_array().unwrap().len(), 8);

    let refused = sim.gpurun().args(["--dry-run", "--json", "--gpus", "3", "--min-free", "75G"]).run();
    let refused_plan = refused.status(75).json();
    assert_eq!(refused_plan["selected"], Value::Null);
    assert_eq!(refused_plan["env"], Value::Null);
    refused.stderr_has("not enough GPUs: 3 requested, 2 qualify");
}

#[test]
fn a_program_named_like_a_duration_still_runs_after_a_bare_wait() {
    let sim = Sim::new(&default_scenario());
    let bin = sim.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let program = bin.join("10m");
    std::fs::write(&program, "#!/bin/sh\necho ten minutes\n").unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    sim.gpurun().env("PATH", &path).args(["--wait", "10m"]).run().status(0).stdout_has("ten minutes");
    // Nothing started for the typo: no GPU was probed or reserved, the command line is refused.
    sim.gpurun().args(["--wait", "10m", "true"]).run().status(125);
}

#[test]
fn dry_run_shows_the_command_it_was_asked_about() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun()
        .args(["--dry-run", "--", "python3", "train.py", "a b"])
        .run()
        .status(0)
        .stdout_has("command: python3 train.py 'a b'\n");
    let plan = sim.gpurun().args(["--dry-run", "--json", "python3", "x.py"]).run().status(0).json();
    assert_eq!(plan["command"], serde_json::json!(["python3", "x.py"]));
}

#[test]
fn gpu_ranges_take_as_many_as_qualify() {
    // With 60 GiB free, GPUs 3, 5 and 2 qualify (in most-free order).
    let sim = Sim::new(&default_scenario());
    let plan = |count: &str| {
        let outcome = sim.gpurun().args(["--dry-run", "--json", "--min-free", "60G", "--gpus", count]).run();
        let json = outcome.status(0).json();
        (
            json["requested"].as_str().unwrap().to_owned(),
            json["count"].as_u64().unwrap(),
            json["env"]["CUDA_VISIBLE_DEVICES"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(plan("2-4"), ("2-4".to_owned(), 3, "3,5,2".to_owned()));
    assert_eq!(plan("1-2"), ("1-2".to_owned(), 2, "3,2".to_owned()), "two of one model");
    assert_eq!(plan("all"), ("all".to_owned(), 3, "3,5,2".to_owned()));
    assert_eq!(plan("0-8"), ("0-8".to_owned(), 3, "3,5,2".to_owned()));
    // Fewer than the least: try later (75) when the machine could, refuse (125) when it never can.
    sim.gpurun()
        .args(["--export", "--min-free", "60G", "--gpus", "4-8"])
        .run()
        .status(75)
        .stderr_has("not enough GPUs: 4-8 requested, 3 qualify");
    sim.gpurun()
        .args(["--export", "--min-free", "60G", "--gpus", "5-8", "--wait"])
        .run()
        .status(125)
        .stderr_has(
            "only 4 GPUs can ever have that much free (the largest GPU this request allows can have at most 79.4 GiB free); 5-8 requested",
        );
    // The largest of the cards the request allows, not of the machine.
    sim.gpurun()
        .args(["--export", "--min-free", "60G", "--devices", "0,1"])
        .run()
        .status(125)
        .stderr_has("--min-free: no GPU can ever have that much free (the largest GPU this request allows can have at most 31.7 GiB free)");
    sim.gpurun()
        .args(["--export", "--gpus", "9-12"])
        .run()
        .status(125)
        .stderr_has("--gpus 9-12: this machine has 8 GPUs");
    sim.gpurun()
        .args(["--export", "--gpus", "all", "--model", "RTX"])
        .run()
        .status(125)
        .stderr_has("--model RTX: 0 of the GPUs gpurun may use match");
    // The report says how many were taken of how many asked.
    let run = sim
        .gpurun()
        .args([
            "--report",
            "--min-free",
            "60G",
            "--gpus",
            "2-4",
            "--",
            &sim_cuda().to_string_lossy(),
            "--sleep",
            "0.3",
        ])
        .run();
    run.status(0).stderr_has("GPUs:         3 of 2-4 requested: GPU 3 (");
}

#[test]
fn dry_run_for_people() {
    let sim = Sim::new(&default_scenario());
    let outcome = sim.gpurun().args(["--dry-run", "--gpus", "2", "--model", "A100"]).run();
    outcome
        .status(0)
        .stdout_has(
            "selected: GPU 3 (NVIDIA A100-SXM4-80GB, GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53), GPU 2 (",
        )
        .stdout_has("  CUDA_VISIBLE_DEVICES=3,2\n")
        .stdout_has("not eligible: model does not match --model A100")
        .stdout_has("no reservation is held");
}

#[test]
fn list_with_filters_says_what_qualifies() {
    let sim = Sim::new(&default_scenario());
    let listing = sim
        .gpurun()
        .args(["--list", "--json", "--min-free", "40G", "--max-util", "50"])
        .run()
        .status(0)
        .json();
    let eligible = common::eligible(&listing);
    assert_eq!(eligible, vec![2, 3, 5]);
    assert_eq!(
        listing["gpus"][4]["reasons"],
        serde_json::json!(["free 7.6 GiB < 40 GiB", "utilization 100% > 50%"])
    );
    // --gpus does not matter to --list: it shows what qualifies, and exits 0.
    sim.gpurun()
        .args(["--list", "--gpus", "8", "--min-free", "79G"])
        .run()
        .status(0)
        .stdout_has("not eligible");
}

/// (argv, a piece of the expected message): all exit 125 before anything runs.
const INVALID: &[(&[&str], &str)] = &[
    (&["--gpus", "two", "--export"], "invalid value 'two' for '--gpus <N|MIN-MAX|all>': 'two' is not a number of GPUs (0 runs with none), a range MIN-MAX such as 2-4, or all"),
    (&["--gpus", "-1", "--export"], "'-1' is not a number of GPUs"),
    (&["--gpus", "4-2", "--export"], "'4-2': the range's first number is larger than its second"),
    (&["--gpus", "99999999999", "--export"], "'99999999999' is too large"),
    (&["--min-free", "8X", "--export"], "\"8X\" is not a size"),
    (&["--min-free", "-1", "--export"], "invalid value '-1' for '--min-free <SIZE|P%|auto>': \"-1\" is not a size"),
    (&["--max-util", "-5", "--export"], "\"-5\" is not a utilization"),
    (&["--verify-timeout", "-5", "--export"], "\"-5\" is not a duration"),
    (&["--nvml-timeout", "0", "--export"], "\"0\" is no time at all: expected more than 0"),
    (&["--min-free", "101%", "--export"], "\"101%\" is not a percentage"),
    (&["--min-free", "99999999999T", "--export"], "too large"),
    (&["--min-total", "50%", "--export"], "\"50%\" is not a size"),
    (&["--max-util", "101", "--export"], "\"101\" is not a utilization"),
    (&["--devices", "1,,2", "--export"], "empty entry"),
    (&["--devices", "9", "--export"], "--devices 9: no such GPU; this machine has GPUs 0-7"),
    (&["--devices", "GPU-5a1c", "--export"], "--devices GPU-5a1c: matches GPUs 0, 1"),
    (&["--exclude", "MIG-abc", "--export"], "--exclude MIG-abc: no such GPU; this machine has GPUs 0-7"),
    (&["--exclude", "zz:00.0", "--export"], "not a PCI bus id"),
    (&["--policy", "fastest", "--export"], "invalid value 'fastest' for '--policy <POLICY>'"),
    (&["--fallback", "gpu", "--export"], "invalid value 'gpu' for '--fallback <MODE>'"),
    (&["--visible-as", "name", "--export"], "invalid value 'name' for '--visible-as <FORM>'"),
    (&["--model", "", "--export"], "--model is empty"),
    (&["--export", "--json"], "--json goes with --list, --dry-run or --history"),
    (&["--list", "python3"], "--list takes no COMMAND, but got \"python3\""),
    (&["--wait", "10m", "python3", "train.py"], "--wait 10m: 10m is not a command; did you mean --wait=10m?"),
    (&["--export", "--", "env"], "--export takes no COMMAND"),
    (&["--list", "--dry-run"], "cannot be used with"),
    (&["--dry-run", "--export"], "cannot be used with"),
];

#[test]
fn invalid_selection_argv_is_a_usage_error() {
    let sim = Sim::new(&default_scenario());
    for (argv, message) in INVALID {
        let outcome = sim.gpurun().args(*argv).run();
        assert_eq!(outcome.code, Some(125), "{argv:?}: {outcome:#?}");
        assert!(outcome.stderr.starts_with("gpurun: "), "{argv:?}: {outcome:#?}");
        assert!(outcome.stderr.contains(message), "{argv:?}: expected {message:?} in {outcome:#?}");
        assert!(outcome.stdout.is_empty(), "{argv:?}");
    }
}

#[test]
fn a_lost_gpu_is_never_chosen() {
    let sim = Sim::new(&common::scenario_file("mixed8.toml"));
    // GPU 5 (an idle L40S) has fallen off the bus.
    let outcome =
        sim.gpurun().args(["--export", "--model", "L40S", "--gpus", "2", "--fallback", "best"]).run();
    outcome.status(75).stderr_has("GPU 5: unreadable: handle: GPU is lost");
    assert_eq!(visible(&sim, &["--model", "L40S"]), "4");
}

/// `--min-free 8GB` is 7.45 GiB: it admits GPU 4 (7.6 GiB free) that `8G` refuses, and every
/// place that shows the threshold says what it was read as (issue 42, point 5).
#[test]
fn decimal_sizes_say_what_they_were_read_as() {
    let sim = Sim::new(&default_scenario());
    let binary = sim.gpurun().args(["--dry-run", "--devices", "4", "--min-free", "8G"]).run();
    binary.status(75).stderr_has("GPU 4: free 7.6 GiB < 8 GiB (NVIDIA H100 80GB HBM3)");
    let decimal = sim.gpurun().args(["--dry-run", "--devices", "4", "--min-free", "8GB"]).run();
    decimal
        .status(0)
        .stdout_has("selected: GPU 4")
        .stdout_has("min-free: 8 GB = 7.45 GiB (KB, MB, GB, TB are decimal");
    let table = sim.gpurun().args(["--dry-run", "--min-free", "8GB"]).run();
    table.status(0).stdout_has("not eligible: free 2.3 GiB < 8 GB = 7.45 GiB");
    let verbose = sim.gpurun().args(["-v", "--no-history", "--min-free", "8GB", "--", "true"]).run();
    verbose.status(0).stderr_has("gpurun: debug: --min-free 8 GB = 7.45 GiB");
    let quiet = sim.gpurun().args(["--no-history", "--min-free", "8GB", "--", "true"]).run();
    assert!(!quiet.stderr.contains("7.45 GiB"), "only -v says it at launch: {}", quiet.stderr);
}

/// An exclusive-process card with a process on it is refused naming who holds its one context
/// (issue 42, point 10: the reason named nobody).
#[test]
fn an_exclusive_process_card_in_use_names_its_holder() {
    let sim = Sim::new(&default_scenario());
    let holder = sim.spawn_sim_cuda(
        &[("CUDA_VISIBLE_DEVICES", "7"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        &["--sleep", "30"],
    );
    let pid = holder.child.id();
    sim.gpurun().args(["--dry-run", "--devices", "7"]).run().status(75).stderr_has(&format!(
        "GPU 7: compute mode is exclusive-process and PID {pid} holds its one CUDA context"
    ));
}

/// `--wait` never waits for what no state of the machine can give: 125 at once, not 75 when
/// the time is up (issue 44, point 5).
#[test]
fn an_impossible_request_is_not_waited_for() {
    let sim = Sim::new(&default_scenario());
    for request in [&["--gpus", "9"][..], &["--min-free", "200G"], &["--devices", "0", "--gpus", "2"]] {
        sim.gpurun().args(["--wait=5m"]).args(request).args(["--", "true"]).run_unless_hung().status(125);
    }
}

/// Ties break by index: two identical idle cards give GPU 0 first under every ordering policy,
/// every time (the guide: "the same machine state always gives the same choice").
#[test]
fn identical_gpus_are_taken_in_index_order_every_time() {
    let sim = Sim::new(&common::scenario_file("two_idle.toml"));
    for policy in ["most-free", "least-util", "balanced", "pack", "index"] {
        for _ in 0..3 {
            assert_eq!(visible(&sim, &["--policy", policy]), "0", "--policy {policy}");
            assert_eq!(visible(&sim, &["--policy", policy, "--gpus", "2"]), "0,1", "--policy {policy}");
        }
    }
}

/// A GPU in the prohibited compute mode takes no CUDA context: it is never chosen, not by
/// `--devices`, not by `--fallback best`, and the refusal says why.
#[test]
fn a_prohibited_gpu_is_never_chosen() {
    let scenario = common::scenario_file("two_idle.toml").replacen(
        "utilization_memory = 0\n",
        "utilization_memory = 0\ncompute_mode = \"prohibited\"\n",
        1,
    );
    let sim = Sim::new(&scenario);
    assert_eq!(visible(&sim, &["--gpus", "1"]), "1");
    sim.gpurun()
        .args(["--devices", "0", "--", "true"])
        .run()
        .status(75)
        .stderr_has("GPU 0: compute mode is prohibited: no CUDA context allowed");
    sim.gpurun().args(["--devices", "0", "--fallback", "best", "--export"]).run().status(75);
    sim.gpurun().args(["--gpus", "2", "--fallback", "best", "--export"]).run().status(75);
}
