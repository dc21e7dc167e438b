//! Snapshot tests of what gpurun prints: `--list` (wide and compact), `--dry-run` and
//! `--history`, built from plain data (no NVML, no lock directory), compared with the files in
//! tests/snapshots/. `GPURUN_BLESS=1 cargo test --lib snapshot` writes them anew; review the
//! diff before committing it.

use std::path::Path;

use crate::options::count::Count;
use crate::output::{history, listing};
use crate::plan::env::Plan;
use crate::probe::gpu::{test_gpu, GpuProcess, Machine, Memory, Utilization};
use crate::reserve::lease::Lease;
use crate::runtime::Visibility;
use crate::select::policy::{self, Request};
use crate::select::selection::Selection;

#[track_caller]
fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(name);
    if std::env::var_os("GPURUN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("snapshot folder");
        std::fs::write(&path, actual).expect("write the snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{}: {error} (GPURUN_BLESS=1 cargo test --lib snapshot writes it)", path.display())
    });
    assert!(
        actual == expected,
        "{} differs (GPURUN_BLESS=1 cargo test --lib snapshot rewrites it):\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

/// Four GPUs: 0 idle; 1 with another user's job; 2 busy with gpurun's own reservation on it;
/// 3 unreadable.
fn machine() -> Machine {
    let mut busy = test_gpu(1);
    busy.memory =
        Some(Memory { total_bytes: 80 << 30, reserved_bytes: 0, used_bytes: 70 << 30, free_bytes: 10 << 30 });
    busy.utilization = Some(Utilization { gpu_percent: 97, memory_percent: Some(60) });
    busy.temperature_c = Some(71);
    busy.power_watts = Some(388.0);
    busy.processes = Some(vec![GpuProcess {
        pid: 4107,
        used_bytes: Some(70 << 30),
        user: Some("nobody".to_owned()),
        command: Some("python train.py --epochs 90".to_owned()),
    }]);
    let mut reserved = test_gpu(2);
    reserved.name = Some("NVIDIA A100-SXM4-40GB".to_owned());
    reserved.memory =
        Some(Memory { total_bytes: 40 << 30, reserved_bytes: 0, used_bytes: 8 << 30, free_bytes: 32 << 30 });
    reserved.processes = Some(vec![GpuProcess {
        pid: 5200,
        used_bytes: Some(8 << 30),
        user: Some("alice".to_owned()),
        command: Some("python eval.py".to_owned()),
    }]);
    let mut broken = test_gpu(3);
    broken.memory = None;
    broken.utilization = None;
    broken.temperature_c = None;
    broken.power_watts = None;
    broken.processes = None;
    broken.error = Some("nvmlDeviceGetMemoryInfo: GPU is lost".to_owned());
    Machine {
        driver_version: Some("550.54.15".to_owned()),
        cuda_driver_version: Some("12.4".to_owned()),
        ..Machine::of(Default::default(), vec![test_gpu(0), busy, reserved, broken])
    }
}

/// alice's gpurun (PID 5100) holding GPU 2 for her eval.py; its age shows as 0 s whenever the
/// test runs (a start in the future counts as now).
fn leases() -> Vec<Lease> {
    vec![Lease {
        uuid: test_gpu(2).uuid.expect("a UUID"),
        pid: 5100,
        uid: 4242,
        user: "alice".to_owned(),
        reserved_bytes: 8 << 30,
        exclusive: false,
        command: "python".to_owned(),
        started: u64::MAX,
        for_rank: None,
    }]
}

fn request() -> Request {
    Request { min_free: Some(crate::options::size::Threshold::Bytes(16 << 30)), ..Request::default() }
}

#[test]
fn snapshot_list_wide_and_compact() {
    let machine = machine();
    let decision = policy::decide(&machine.all_devices(), &Visibility::default(), &request(), &[], &[])
        .expect("a decision");
    let rules = vec!["max-gpus-per-user = 2 (/etc/gpurun/config.toml)".to_owned()];
    let wide = listing::Shared { rules: rules.clone(), columns: None, ..Default::default() };
    snapshot("list-wide.txt", &listing::table(&machine, &decision.assessments, &leases(), &wide));
    let compact = listing::Shared { rules, columns: Some(80), ..Default::default() };
    snapshot("list-80-columns.txt", &listing::table(&machine, &decision.assessments, &leases(), &compact));
}

#[test]
fn snapshot_dry_run() {
    let machine = machine();
    let request = request();
    let decision = policy::decide(&machine.all_devices(), &Visibility::default(), &request, &[], &[])
        .expect("a decision");
    let chosen = match &decision.outcome {
        policy::Outcome::Selected(chosen) => chosen.clone(),
        other => panic!("nothing selected: {other:?}"),
    };
    let selection = Selection::new(&machine, &chosen, Count::exactly(1));
    let plan = Plan {
        variables: crate::plan::env::child_variables(
            &selection,
            crate::options::VisibleAs::Index,
            true,
            |_| None,
        ),
        mixed_models: selection.mixed_models(),
        selection,
        cpus: None,
    };
    let command = ["python".into(), "train.py".into()];
    let asked = listing::DryRun {
        requested: Count::exactly(1),
        command: &command,
        plan: Some(&plan),
        sizing: None,
        passed_over: &decision.passed_over,
    };
    snapshot(
        "dry-run.txt",
        &listing::dry_run(&machine, &decision.assessments, &leases(), &plan, &asked, None),
    );
    let narrow = listing::dry_run(&machine, &decision.assessments, &leases(), &plan, &asked, Some(80));
    for line in narrow.lines() {
        // Only a word wider than the terminal (a list of UUIDs) may reach the edge.
        assert!(line.chars().count() < 80 || !line.trim().contains(' '), "{line:?}\n{narrow}");
    }
    snapshot("dry-run-80.txt", &narrow);
}

#[test]
fn snapshot_history() {
    let record = |started: f64, report: serde_json::Value| crate::history::Record {
        started,
        user: "alice".to_owned(),
        directory: "/home/alice/src/model".to_owned(),
        request: "--gpus 1 --min-free 16G".to_owned(),
        report: report.as_object().expect("an object").clone(),
    };
    let uuid = test_gpu(0).uuid.expect("a UUID");
    let records = [
        record(
            1_764_600_000.0,
            serde_json::json!({
                "command": ["python", "train.py", "--lr", "3e-4"],
                "selected": [{"index": 0, "uuid": uuid}],
                "verification": {"verdict": "verified", "detail": "PID 4107 on GPU 0"},
                "peak_memory_bytes": {uuid.clone(): 12_u64 << 30},
                "energy_joules": {uuid.clone(): 1_080_000.0},
                "wall_seconds": 3600.25,
                "exit": {"code": 0},
            }),
        ),
        record(
            1_764_603_700.5,
            serde_json::json!({
                "command": ["sh", "-c", "python eval.py; exit 3"],
                "selected": [],
                "verification": {"verdict": null, "detail": "no GPU was selected"},
                "peak_memory_bytes": {},
                "wall_seconds": 1.0,
                "exit": {"code": null, "signal_name": "SIGTERM"},
            }),
        ),
    ];
    let all: Vec<&crate::history::Record> = records.iter().collect();
    snapshot("history.txt", &history::table(&all));
    assert_eq!(history::table_for(&all, None), history::table(&all), "a pipe gets every character");
    let compact = history::table_for(&all, Some(80));
    assert!(compact.lines().all(|line| line.chars().count() < 80), "{compact}");
    snapshot("history-80.txt", &compact);
}
