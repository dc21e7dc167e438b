//! Reservations and waiting (DESIGN 5, `--wait` of DESIGN 4): no double booking across
//! concurrent launches, leases that die with their holder, a lock directory that cannot be
//! abused, first come first served among waiters.

use crate::common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{alive, scenario_file, send_signal, sim_cuda, wait_until, Outcome, Sim};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(20);

fn my_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

fn two_gpus() -> Sim {
    Sim::new(&scenario_file("two_idle.toml"))
}

fn reservations(sim: &Sim) -> Vec<Value> {
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    listing["reservations"].as_array().unwrap().clone()
}

/// gpurun holding GPUs in the background with `sleep` (not a CUDA program: only the lease
/// keeps others off).
fn hold(sim: &Sim, args: &[&str], seconds: &str) -> Child {
    let before = reservations(sim).len();
    let child = sim
        .gpurun()
        .args(["-q"])
        .args(args)
        .args(["--", "sleep", seconds])
        .command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(LONG, || reservations(sim).len() > before), "no lease appeared");
    child
}

fn export(sim: &Sim, args: &[&str]) -> Outcome {
    sim.gpurun().args(["--export"]).args(args).run()
}

#[test]
fn fifty_concurrent_exclusive_launches_never_share_a_card() {
    let sim = two_gpus();
    let log = sim.dir.path().join("jobs.log");
    let job = format!(
        "echo START $(date +%s%N) $GPURUN_GPUS >> {log}; {sim_cuda} --quiet --mem 1GiB --sleep 0.05; echo END $(date +%s%N) $GPURUN_GPUS >> {log}",
        log = log.display(),
        sim_cuda = sim_cuda().display()
    );
    let started = Instant::now();
    let launches: Vec<Child> = (0..50)
        .map(|_| {
            sim.gpurun()
                .args(["-q", "--exclusive", "--wait=120s", "--", "sh", "-c", &job])
                .command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for launch in launches {
        let output = launch.wait_with_output().unwrap();
        assert!(output.status.success(), "a launch failed: {:?}", String::from_utf8_lossy(&output.stderr));
    }
    eprintln!("50 launches on 2 GPUs took {:.1} s", started.elapsed().as_secs_f64());
    let text = std::fs::read_to_string(&log).unwrap();
    let mut intervals: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    let mut open: Vec<(u128, String)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (event, time, gpu) = (fields[0], fields[1].parse::<u128>().unwrap(), fields[2].to_owned());
        assert!(!gpu.contains(','), "one GPU each: {line}");
        match event {
            "START" => open.push((time, gpu)),
            _ => {
                let position =
                    open.iter().position(|(t, g)| *g == gpu && *t <= time).expect("END after START");
                let (start, gpu) = open.remove(position);
                intervals.entry(gpu).or_default().push((start, time));
            }
        }
    }
    assert!(open.is_empty());
    let jobs: usize = intervals.values().map(Vec::len).sum();
    assert_eq!(jobs, 50, "every job ran");
    for (gpu, mut runs) in intervals {
        runs.sort_unstable();
        for pair in runs.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "GPU {gpu} was used by two jobs at once: {pair:?}");
        }
    }
    let left: Vec<String> = std::fs::read_dir(sim.lock_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, Vec::<String>::new(), "leases or tickets left behind");
}

#[test]
fn reserved_memory_splits_simultaneous_jobs() {
    let sim = two_gpus();
    let launches: Vec<Child> = (0..2)
        .map(|_| {
            sim.gpurun()
                .args(["-q", "--min-free", "50G", "--"])
                .args([sim_cuda()])
                .args(["--mem", "50GiB", "--sleep", "1"])
                .command
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut gpus: Vec<String> = launches
        .into_iter()
        .map(|launch| {
            let output = launch.wait_with_output().unwrap();
            assert!(output.status.success());
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            report["devices"][0]["nvml_index"].to_string()
        })
        .collect();
    gpus.sort();
    assert_eq!(gpus, vec!["0", "1"], "both jobs took the same GPU");
}

#[test]
fn reserved_memory_counts_until_the_holders_processes_show() {
    let sim = two_gpus();
    // `sleep` never shows in NVML: its 50 GiB stay reserved the whole time.
    let mut holder = hold(&sim, &["--devices", "0", "--min-free", "50G"], "30");
    let outcome = sim.gpurun().args(["--dry-run", "--min-free", "50G", "--devices", "0"]).run();
    outcome.status(75).stderr_has("free 29.5 GiB (after 50 GiB reserved by other gpurun launches) < 50 GiB");
    assert_eq!(export(&sim, &["--min-free", "29G", "--devices", "0"]).code, Some(0));
    let lease = &reservations(&sim)[0];
    assert_eq!(lease["index"], 0);
    assert_eq!(lease["reserved_bytes"], 50u64 << 30);
    assert_eq!(lease["exclusive"], false);
    assert_eq!(lease["pid"], holder.id());
    assert!(lease["command"].as_str().unwrap().starts_with("sleep 30"));
    assert!(lease["age_seconds"].is_u64() && lease["user"].is_string() && lease["uuid"].is_string());
    let table = sim.gpurun().args(["--list"]).run();
    table.status(0).stdout_has(&format!("PID {} for ", holder.id())).stdout_has("(50 GiB): sleep 30");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn a_sigkilled_holder_frees_its_lease_at_once() {
    let sim = two_gpus();
    let mut holder = hold(
        &sim,
        &["--exclusive", "--devices", "0", "--parent-death-signal", "none", "--keep-orphans"],
        "30",
    );
    let refused = export(&sim, &["--exclusive", "--devices", "0"]);
    refused.status(75).stderr_has(&format!("reserved exclusively by gpurun PID {}", holder.id()));
    // Exclusive leases keep everyone off, not only exclusive requests.
    export(&sim, &["--devices", "0"]).status(75).stderr_has("reserved exclusively by gpurun PID");
    let orphan = std::fs::read_to_string(format!("/proc/{}/task/{}/children", holder.id(), holder.id()))
        .unwrap_or_default()
        .trim()
        .parse::<u32>()
        .ok();
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The holder is dead; its `sleep` lives on (no parent-death signal), but the lease is gone.
    export(&sim, &["--exclusive", "--devices", "0"]).status(0);
    if let Some(pid) = orphan {
        assert!(alive(pid));
        send_signal(pid, libc::SIGKILL);
    }
}

#[test]
fn pid_reuse_cannot_fake_a_lease() {
    let sim = two_gpus();
    std::fs::create_dir_all(sim.lock_dir()).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // A lease file of a live PID (this test) that nobody holds locked: stale.
    let uid = my_uid();
    let lease = serde_json::json!({
        "uuid": "GPU-22220000-0000-4000-8000-000000000000", "pid": std::process::id(), "uid": uid,
        "user": "x", "reserved_bytes": 0, "exclusive": true, "command": "stale", "started": 1
    });
    std::fs::write(sim.lock_dir().join("stale.lease"), lease.to_string()).unwrap();
    export(&sim, &["--exclusive", "--devices", "0"]).status(0);
    assert!(reservations(&sim).is_empty());
}

fn locked_lease(sim: &Sim, claimed_uid: u32) -> File {
    std::fs::create_dir_all(sim.lock_dir()).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let lease = serde_json::json!({
        "uuid": "GPU-22220000-0000-4000-8000-000000000000", "pid": 1, "uid": claimed_uid,
        "user": "someone", "reserved_bytes": 0, "exclusive": true, "command": "forged", "started": 1
    });
    let path = sim.lock_dir().join(format!("claim-{claimed_uid}.lease"));
    let mut file = File::create(&path).unwrap();
    file.write_all(lease.to_string().as_bytes()).unwrap();
    // SAFETY: flock on our own descriptor.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
    file
}

#[test]
fn a_lease_claiming_another_users_uid_is_ignored() {
    let sim = two_gpus();
    let me = my_uid();
    let forged = locked_lease(&sim, me + 4242);
    export(&sim, &["--exclusive", "--devices", "0"]).status(0);
    drop(forged);
    // The same lease with the owner's own uid is honoured.
    let genuine = locked_lease(&sim, me);
    export(&sim, &["--devices", "0"]).status(75).stderr_has("reserved exclusively by gpurun PID 1 (someone)");
    drop(genuine);
}

#[test]
fn symlinks_are_never_followed() {
    let sim = two_gpus();
    let target = sim.dir.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, sim.lock_dir()).unwrap();
    sim.gpurun().args(["--", "true"]).run().status(125).stderr_has("it is a symbolic link");
    export(&sim, &[]).status(0).stderr_has("it is a symbolic link;").stderr_has("reservations are not shown");

    let other = two_gpus();
    std::fs::create_dir_all(other.lock_dir()).unwrap();
    std::fs::set_permissions(other.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = other.dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, other.lock_dir().join("GPU-x.1.deadbeef.lease")).unwrap();
    std::os::unix::fs::symlink(&victim, other.lock_dir().join("ticket.00000000000000000001.1")).unwrap();
    // A symlinked lease or ticket is ignored, and nothing writes through it.
    let holder = other.gpurun().args(["-q", "--exclusive", "--wait=5s", "--", "true"]).run();
    holder.status(0);
    assert!(reservations(&other).is_empty());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");

    // The directory lock is the directory itself: no entry in it can be swapped to stop launches.
    let third = two_gpus();
    std::fs::create_dir_all(third.lock_dir()).unwrap();
    std::fs::set_permissions(third.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::symlink(&victim, third.lock_dir().join(".lock")).unwrap();
    third.gpurun().args(["--", "true"]).run().status(0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

#[test]
fn an_unsafe_lock_directory_is_an_error_that_says_why() {
    let sim = two_gpus();
    std::fs::write(sim.lock_dir(), "a file").unwrap();
    sim.gpurun().args(["--", "true"]).run().status(125).stderr_has("it is not a directory");

    // An existing directory is checked, never changed, even when it is ours.
    let open = two_gpus();
    std::fs::create_dir(open.lock_dir()).unwrap();
    std::fs::set_permissions(open.lock_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    open.gpurun().args(["--", "true"]).run().status(125).stderr_has("writable by everyone but not sticky");
    let mode = std::fs::metadata(open.lock_dir()).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o777);

    if my_uid() != 0 {
        common::skip("the foreign-owner cases", "chown needs root");
        return;
    }
    let foreign = two_gpus();
    std::fs::create_dir(foreign.lock_dir()).unwrap();
    std::os::unix::fs::chown(foreign.lock_dir(), Some(4242), Some(4242)).unwrap();
    foreign
        .gpurun()
        .args(["--", "true"])
        .run()
        .status(125)
        .stderr_has("it is owned by uid 4242, not by root or you");

    let not_sticky = two_gpus();
    std::fs::create_dir(not_sticky.lock_dir()).unwrap();
    std::fs::set_permissions(not_sticky.lock_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Owned by root but not by "us": run gpurun as another user so it cannot repair the mode.
    let outcome = not_sticky
        .gpurun_command(
            "setpriv",
            &["--reuid=4242", "--regid=4242", "--clear-groups", common::GPURUN, "--", "true"],
        )
        .run();
    if outcome.stderr.contains("setpriv") && outcome.code != Some(125) {
        common::skip("the not-sticky case", &format!("setpriv is unavailable ({outcome:?})"));
        return;
    }
    outcome.status(125).stderr_has("writable by everyone but not sticky");
}

#[test]
fn dry_run_and_export_respect_leases_but_hold_none() {
    let sim = two_gpus();
    let mut holder = hold(&sim, &["--exclusive", "--devices", "0"], "30");
    assert_eq!(common_exports(&export(&sim, &[]))["CUDA_VISIBLE_DEVICES"], "1");
    sim.gpurun()
        .args(["--dry-run", "--gpus", "2"])
        .run()
        .status(75)
        .stderr_has("reserved exclusively by gpurun PID");
    assert_eq!(reservations(&sim).len(), 1, "dry run or export left a lease");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(reservations(&sim).is_empty());
}

fn common_exports(outcome: &Outcome) -> BTreeMap<String, String> {
    outcome
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("export "))
        .filter_map(|rest| rest.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
        .collect()
}

#[test]
fn exec_keeps_the_lease_through_the_inherited_descriptor() {
    let sim = two_gpus();
    let mut exec = sim
        .gpurun()
        .args(["-q", "--exec", "--exclusive", "--devices", "0", "--", "sleep", "30"])
        .command
        .spawn()
        .unwrap();
    assert!(wait_until(LONG, || reservations(&sim).len() == 1));
    // gpurun has become the command: its PID runs sleep now.
    assert!(wait_until(LONG, || common::comm(exec.id()).as_deref() == Some("sleep")), "no exec");
    let leases = reservations(&sim);
    assert_eq!(leases.len(), 1, "the lease must outlive the exec");
    assert_eq!(leases[0]["pid"], exec.id());
    assert!(std::fs::read_to_string(format!("/proc/{}/comm", exec.id())).unwrap().starts_with("sleep"));
    exec.kill().unwrap();
    exec.wait().unwrap();
    assert!(reservations(&sim).is_empty(), "the lease must die with the command");
}

#[test]
fn no_lock_ignores_reservations_and_takes_none() {
    let sim = two_gpus();
    let mut holder = hold(&sim, &["--exclusive", "--devices", "0"], "30");
    export(&sim, &["--no-lock", "--exclusive", "--devices", "0"]).status(0);
    let other = two_gpus();
    other.gpurun().args(["--no-lock", "--", "true"]).run().status(0);
    assert!(!other.lock_dir().exists(), "--no-lock created the lock directory");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn lock_dir_flag_and_variable() {
    let sim = two_gpus();
    let flagged = sim.dir.path().join("flagged");
    sim.gpurun().args(["--lock-dir", flagged.to_str().unwrap(), "--", "true"]).run().status(0);
    assert!(flagged.is_dir());
    assert!(!sim.lock_dir().exists(), "GPURUN_LOCK_DIR should lose to --lock-dir");
    sim.gpurun().args(["--", "true"]).run().status(0);
    assert!(sim.lock_dir().is_dir());
}

#[test]
fn wait_times_out_with_75_and_shows_progress() {
    let sim = two_gpus();
    let mut holder = hold(&sim, &["--exclusive", "--devices", "0"], "30");
    // It waits (the progress line), then gives up by itself (the holder stays for 30 s).
    let outcome =
        sim.gpurun().args(["--wait=600ms", "--exclusive", "--devices", "0", "--", "true"]).run_unless_hung();
    outcome
        .status(75)
        .stderr_has("gpurun: waiting 0 s: GPU 0 reserved exclusively by gpurun PID ")
        .stderr_has("; needs 1 GPU, exclusive; 0 qualify now, 0 ahead")
        .stderr_has("(after waiting");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// Without a terminal the progress line is printed about every 6 s: at the first look, then at
/// the first look 5 s or more after the last line (looks are 2 s apart). A 9 s wait prints two,
/// not one per look and not only one.
#[test]
fn without_a_terminal_the_wait_line_comes_about_every_6_s() {
    let sim = two_gpus();
    let mut holder = hold(&sim, &["--exclusive", "--devices", "0"], "30");
    let outcome = sim.gpurun().args(["--wait=9s", "--exclusive", "--devices", "0", "--", "true"]).run();
    outcome.status(75);
    let seconds: Vec<u64> = outcome
        .stderr
        .lines()
        .filter_map(|line| line.strip_prefix("gpurun: waiting "))
        .map(|rest| rest.split_once(" s:").expect("waiting N s:").0.parse().unwrap())
        .collect();
    assert_eq!(seconds.len(), 2, "{}", outcome.stderr);
    assert_eq!(seconds[0], 0, "{}", outcome.stderr);
    assert!((5..=8).contains(&seconds[1]), "{}", outcome.stderr);
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn wait_then_run_when_the_gpu_frees_up() {
    let sim = two_gpus();
    let holder = hold(&sim, &["--exclusive", "--devices", "0"], "1");
    let outcome =
        sim.gpurun().args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "echo", "ran"]).run();
    assert_eq!(outcome.status(0).stdout, "ran\n");
    drop(holder);
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let sim = two_gpus();
    let log = sim.dir.path().join("order.log");
    let holder = hold(&sim, &["--exclusive", "--devices", "0"], "1.5");
    let mut waiters = Vec::new();
    for name in ["first", "second", "third"] {
        let before = ticket_count(&sim);
        let waiter = sim
            .gpurun()
            .args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "sh", "-c"])
            .args([format!("echo {name} >> {}; sleep 0.2", log.display())])
            .command
            .spawn()
            .unwrap();
        assert!(wait_until(LONG, || ticket_count(&sim) > before), "{name} took no ticket");
        waiters.push(waiter);
    }
    for mut waiter in waiters {
        assert!(waiter.wait().unwrap().success());
    }
    drop(holder);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "first\nsecond\nthird\n");
}

fn ticket_count(sim: &Sim) -> usize {
    std::fs::read_dir(sim.lock_dir())
        .map(|entries| {
            entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("ticket.")).count()
        })
        .unwrap_or(0)
}

#[test]
fn looking_creates_no_lock_directory_and_survives_a_bad_one() {
    let sim = two_gpus();
    sim.gpurun().args(["--list"]).run().status(0);
    export(&sim, &[]).status(0);
    sim.gpurun().args(["--dry-run"]).run().status(0);
    assert!(!sim.lock_dir().exists(), "looking created the lock directory");
    std::fs::write(sim.lock_dir(), "not a directory").unwrap();
    sim.gpurun().args(["--list"]).run().status(0).stderr_has("reservations are not shown");
    sim.gpurun().args(["--", "true"]).run().status(125);
}

/// Issue 43 (3): "--lock-dir /etc is refused" held for other users only: as root a root-owned
/// 0755 directory passes every owner check and got lease files. A lock directory is one made
/// for it: the shared kind (1777), or one that holds nothing but gpurun's entries.
#[test]
fn a_directory_not_made_for_reservations_gets_none() {
    let sim = two_gpus();
    let system = sim.dir.path().join("etc");
    std::fs::create_dir(&system).unwrap();
    std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(system.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    let refused = sim.gpurun().args(["--lock-dir", system.to_str().unwrap(), "--", "true"]).run();
    refused.status(125).stderr_has("it holds an entry that is not gpurun's (passwd)");
    let names: Vec<_> = std::fs::read_dir(&system).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names, ["passwd"], "nothing was written there");
    // The same directory, once it holds only reservations (or nothing), is one.
    std::fs::remove_file(system.join("passwd")).unwrap();
    sim.gpurun().args(["--lock-dir", system.to_str().unwrap(), "--", "true"]).run().status(0);
    // The shared kind takes whatever others left in it.
    let shared = sim.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(shared.join("notes.txt"), "").unwrap();
    sim.gpurun().args(["--lock-dir", shared.to_str().unwrap(), "--", "true"]).run().status(0);
}
