//! Receipts that dashboards read (issue 52): the job id (`GPURUN_JOB_ID`, the report's `job`),
//! dcgm-exporter's HPC job map (`--job-map-dir`) in the format its hpc.go reads (a file per GPU
//! named by the GPU's index, one job id per line), and the `--prom-file` receipt, parsed by the
//! Prometheus text parser from PyPI (`prometheus_client.parser`, installed by `make venv`).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{default_scenario, sim_cuda, Sim};

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What dcgm-exporter would read from the job map: (file name, job ids), numeric names only.
fn job_map(dir: &Path) -> Vec<(String, Vec<String>)> {
    let mut files: Vec<(String, Vec<String>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.parse::<u32>().is_ok())
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            (name, text.lines().map(str::to_owned).collect())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_job_map_names_each_chosen_gpu_during_the_run_and_is_gone_after() {
    let sim = Sim::new(&default_scenario());
    let dir = sim.dir.path().join("job-map");
    std::fs::create_dir(&dir).unwrap();
    // Another job already on GPU 2: its line stays, beside ours.
    std::fs::write(dir.join("2"), "777\n").unwrap();
    let json = sim.dir.path().join("report.json");
    let show = format!(
        "echo id=$GPURUN_JOB_ID; for f in {0}/[0-9]*; do echo \"$f:$(tr '\\n' ' ' < $f)\"; done",
        dir.display()
    );
    let outcome = sim
        .gpurun()
        .args(["--gpus", "2", "--job-map-dir"])
        .arg(&dir)
        .arg("--report-json")
        .arg(&json)
        .env("SLURM_JOB_ID", "4242")
        .args(["--", "sh", "-c", &show])
        .run();
    outcome.status(0).stdout_has("id=4242\n");
    let selected: Vec<u64> =
        report(&json)["selected"].as_array().unwrap().iter().map(|d| d["index"].as_u64().unwrap()).collect();
    for index in &selected {
        let expected = if *index == 2 { "777 4242 " } else { "4242 " };
        outcome.stdout_has(&format!("{}/{index}:{expected}\n", dir.display()));
    }
    assert_eq!(job_map(&dir), [("2".to_owned(), vec!["777".to_owned()])], "ours taken out, theirs kept");
    let job = &report(&json)["job"];
    assert_eq!(job["id"], "4242");
    assert_eq!(job["user"], common::user_name_of(nix::unistd::getuid().as_raw()));
    assert!(
        job["start"].as_str().unwrap().ends_with('Z')
            && job["end"].as_str().unwrap() >= job["start"].as_str().unwrap()
    );
    // Without Slurm: a made id, the same in the command's environment and the report.
    let made =
        sim.gpurun().arg("--report-json").arg(&json).args(["--", "sh", "-c", "echo $GPURUN_JOB_ID"]).run();
    let id = made.status(0).stdout.trim().to_owned();
    assert!(id.starts_with("gpurun-"), "{id}");
    assert_eq!(report(&json)["job"]["id"], id.as_str());
    // A file planted as a link to someone's file is left alone, and the target untouched.
    let victim = sim.dir.path().join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("3")).unwrap();
    sim.gpurun()
        .args(["--devices", "3", "--job-map-dir"])
        .arg(&dir)
        .args(["--", "true"])
        .run()
        .status(0)
        .stderr_has("it is a symbolic link, not a file: left alone");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    assert!(std::fs::symlink_metadata(dir.join("3")).unwrap().file_type().is_symlink());
    // A lock held for ever (a stopped gpurun, a hostile holder) costs the job 2 s, not its run.
    let lock = std::fs::File::create(dir.join(".gpurun.lock")).unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    sim.gpurun()
        .args(["--job-map-dir"])
        .arg(&dir)
        .args(["--", "true"])
        .run()
        .status(0)
        .stderr_has("cannot lock .gpurun.lock there: another process holds it; the job is not mapped");
    drop(held);
    // A directory that cannot be written is a warning: the job runs.
    sim.gpurun()
        .args(["--job-map-dir", "/nonexistent/map", "--", "true"])
        .run()
        .status(0)
        .stderr_has(
            "--job-map-dir /nonexistent/map: cannot lock .gpurun.lock there: No such file or directory",
        )
        .stderr_has("the job is not mapped");
    sim.gpurun()
        .args(["--job-map-dir", "/tmp", "--exec", "--", "true"])
        .run()
        .status(125)
        .stderr_has("cannot be used with '--exec'");
}

#[test]
fn the_prom_file_parses_with_prometheus_client_and_says_what_the_report_says() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(python.exists(), "{} is missing: `make venv` installs prometheus-client there", python.display());
    let sim = Sim::new(&default_scenario());
    let (prom, json) = (sim.dir.path().join("job.prom"), sim.dir.path().join("report.json"));
    sim.gpurun()
        .args(["--gpus", "2", "--prom-file"])
        .arg(&prom)
        .arg("--report-json")
        .arg(&json)
        .env("SLURM_JOB_ID", "99")
        .arg("--")
        .arg(sim_cuda())
        .args(["--mem", "1GiB", "--sleep", "1"])
        .run()
        .status(0);
    let script = "import json, sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = {}\n\
        for family in text_string_to_metric_families(open(sys.argv[1]).read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.setdefault(s.name, []).append([s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let parsed = Command::new(&python).args(["-c", script]).arg(&prom).output().unwrap();
    assert!(parsed.status.success(), "{}", String::from_utf8_lossy(&parsed.stderr));
    let metrics: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    let report = report(&json);
    let samples = |name: &str| metrics[name].as_array().cloned().unwrap_or_default();
    assert_eq!(samples("gpurun_job_info")[0][0]["verdict"], "verified", "{metrics}");
    assert_eq!(samples("gpurun_job_exit_status")[0][1], 0.0);
    for device in report["selected"].as_array().unwrap() {
        let uuid = device["uuid"].as_str().unwrap();
        let of = |name: &str| -> Vec<serde_json::Value> {
            samples(name).into_iter().filter(|sample| sample[0]["UUID"] == uuid).collect()
        };
        let energy = of("gpurun_job_total_energy_consumption");
        assert_eq!(energy[0][0]["gpu"], device["index"].as_u64().unwrap().to_string());
        assert_eq!(energy[0][0]["hpc_job"], "99");
        assert_eq!(energy[0][0]["modelName"], device["name"]);
        let joules = report["energy_joules"][uuid].as_f64().unwrap();
        assert!((energy[0][1].as_f64().unwrap() - joules * 1000.0).abs() < 1.0, "{energy:?} vs {joules} J");
        let util = of("gpurun_job_gpu_util");
        let p95 = util.iter().find(|s| s[0]["quantile"] == "0.95").unwrap();
        assert_eq!(p95[1].as_f64().unwrap(), report["utilization_percent"][uuid]["p95"].as_f64().unwrap());
        let mean = of("gpurun_job_power_usage").into_iter().find(|s| s[0]["stat"] == "mean").unwrap();
        assert_eq!(mean[1].as_f64().unwrap(), report["power_watts"][uuid]["mean"].as_f64().unwrap());
    }
    // Written whole by a rename: no staged file is left beside it.
    let left: Vec<String> = std::fs::read_dir(sim.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("gpurun-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Issue 65: what another user plants in a shared job-map directory neither hangs a launch nor
/// is read whole: a FIFO at a GPU's file or at `.gpurun.lock` (open() on it blocked the main
/// thread, deaf to TERM, before the command started), a 2 GiB sparse file (41 s and 6.3 GB, and
/// written back as real data). Each is left alone with a warning and the job runs; a job id
/// that a file of one id per line cannot hold is not written.
#[test]
fn what_is_planted_in_the_job_map_is_left_alone_and_the_job_runs() {
    let sim = Sim::new(&default_scenario());
    let dir = sim.dir.path().join("job-map");
    std::fs::create_dir(&dir).unwrap();
    let fifo = |name: &str| {
        nix::unistd::mkfifo(&dir.join(name), nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap()
    };
    let map =
        |gpu: &str| sim.gpurun().args(["--devices", gpu, "--job-map-dir"]).arg(&dir).args(["--", "true"]);
    fifo("3");
    map("3")
        .run_unless_hung()
        .status(0)
        .stderr_has("it is not a regular file (a FIFO or a device?): left alone");
    let big = std::fs::File::create(dir.join("4")).unwrap();
    big.set_len(2 << 30).unwrap();
    map("4")
        .run_unless_hung()
        .status(0)
        .stderr_has("it is over 64 KiB, more than any job map holds: left alone");
    let kept = std::fs::metadata(dir.join("4")).unwrap();
    assert_eq!(kept.len(), 2 << 30);
    assert!(std::os::unix::fs::MetadataExt::blocks(&kept) < 1024, "the sparse file was written back");
    // A job id with a line break would inject a line that no run ever takes out.
    map("5")
        .env("SLURM_JOB_ID", "42\n43")
        .run_unless_hung()
        .status(0)
        .stderr_has("has blanks around it or a control character");
    assert!(!dir.join("5").exists());
    std::fs::remove_file(dir.join(".gpurun.lock")).unwrap();
    fifo(".gpurun.lock");
    map("5")
        .run_unless_hung()
        .status(0)
        .stderr_has("cannot lock .gpurun.lock there: it is not a regular file (a FIFO or a device?)");
}

/// Issue 65: the trust model the guide gives works for two users. In a job-map directory
/// group-writable for the GPUs' group, without the sticky bit, a second user's job on a shared
/// GPU is mapped beside the first user's; under mode 1777 the sticky bit stops it, and the
/// warning says why and what to do.
#[test]
fn two_users_share_a_group_writable_job_map() {
    use std::os::unix::fs::PermissionsExt;
    if !common::is_root() || !common::on_path("setpriv") {
        return common::skip("two users on one job map", "needs root and setpriv");
    }
    let sim = Sim::new(&default_scenario());
    for path in [sim.dir.path().to_owned(), sim.lock_dir()] {
        std::fs::create_dir_all(&path).unwrap();
    }
    std::fs::set_permissions(sim.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let dir = sim.dir.path().join("job-map");
    let second_user = |mode: u32| {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        nix::unistd::chown(&dir, None, Some(nix::unistd::Gid::from_raw(4242))).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        // The first user's job (root's) holds GPU 3 while the second's runs on it too.
        let inner = format!(
            "SLURM_JOB_ID=second exec setpriv --reuid=4242 --regid=4242 --groups=4242 {} --devices 3 --job-map-dir {} -- cat {}/3",
            common::gpurun_binary(),
            dir.display(),
            dir.display()
        );
        sim.gpurun()
            .env("SLURM_JOB_ID", "first")
            .args(["-q", "--devices", "3", "--job-map-dir"])
            .arg(&dir)
            .args(["--", "sh", "-c", &inner])
            .run()
    };
    let shared = second_user(0o2775);
    shared.status(0).stdout_has("first\nsecond\n");
    assert!(!dir.join("3").exists(), "both lines were taken out at the ends");
    let sticky = second_user(0o1777);
    sticky
        .status(0)
        .stdout_has("first\n")
        .stderr_has("the directory is sticky, so only the file's owner may replace it");
    assert!(!sticky.stdout.contains("second"), "{}", sticky.stdout);
}
