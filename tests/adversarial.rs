//! Hostile conditions, round 3 (issue 22): a planted history, house rules a user tries to
//! loosen, hooks and FIFOs that would hang gpurun, lease files that would publish secrets, and
//! children gpurun inherited. Through the binary on the default simulated machine (free memory
//! in GiB: 0: 31.7, 1: 2.3, 2: 70.7, 3: 79.4, 4: 7.6, 5: 79.1, 6: 39.5, 7: 39.5); a second user
//! through `setpriv`, the machine's /etc/gpurun through a private mount namespace.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{background, default_scenario, gpurun_binary, wait_until, Outcome, Run, Sim};

const LONG: Duration = Duration::from_secs(20);

fn history_folder(sim: &Sim) -> PathBuf {
    sim.dir.path().join("state/gpurun")
}

fn private_folder(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// A history record as gpurun writes one: `command` run in the test's directory, with a peak.
fn record(command: &[&str], peak: u64) -> String {
    let directory = std::env::current_dir().unwrap().display().to_string();
    let line = serde_json::json!({
        "started": 1.8e9, "user": "root", "directory": directory, "request": "",
        "command": command, "peak_memory_bytes": {"GPU-x": peak},
        "verification": {"verdict": "verified", "detail": ""}, "exit": {"code": 0, "signal": null},
    });
    format!("{line}\n")
}

fn write_history(sim: &Sim, text: &[u8]) -> PathBuf {
    private_folder(&history_folder(sim));
    let path = history_folder(sim).join("history.jsonl");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Runs to the end, or fails the test if it takes longer than `limit` (and kills it).
fn bounded(run: Run, limit: Duration) -> Outcome {
    let mut command = run.command;
    let mut child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outcome(child)
}

fn outcome(child: Child) -> Outcome {
    let output = child.wait_with_output().unwrap();
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

// 1. The trim follows no planted symlink, and a folder someone else owns is not used.
#[test]
fn a_planted_history_cannot_make_gpurun_overwrite_a_file() {
    let sim = Sim::new(&default_scenario());
    let victim = sim.dir.path().join("passwd");
    std::fs::write(&victim, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let line = record(&["planted"], 0);
    let path = write_history(&sim, line.repeat((8 << 20) / line.len() + 1).as_bytes());
    std::os::unix::fs::symlink(&victim, history_folder(&sim).join("history.jsonl.trim")).unwrap();
    sim.gpurun().args(["--gpus", "0", "--", "true", "this-run"]).run().status(0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0:root:/root:/bin/bash\n");
    let kept = std::fs::read_to_string(&path).unwrap();
    assert!(kept.len() <= (4 << 20) + 4096, "trimmed to half: {}", kept.len());
    assert!(kept.lines().last().unwrap().contains("this-run"), "this run's record is kept");
    // The history file itself a symlink to the victim: refused, said, victim untouched.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    sim.gpurun()
        .args(["--gpus", "0", "--", "true"])
        .run()
        .status(0)
        .stderr_has("gpurun: warning: the run is not kept in the history: ")
        .stderr_has("history.jsonl is a symlink");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0:root:/root:/bin/bash\n");
    // A folder that belongs to another user (a kept HOME under sudo).
    std::fs::remove_file(&path).unwrap();
    if let Err(error) = std::os::unix::fs::chown(history_folder(&sim), Some(4242), Some(4242)) {
        common::skip("a history folder of another user", &error.to_string());
        return;
    }
    sim.gpurun()
        .args(["--gpus", "0", "--", "true"])
        .run()
        .status(0)
        .stderr_has("gpurun: warning: the run is not kept in the history: ")
        .stderr_has("belongs to uid 4242");
    assert!(!path.exists());
}

// 4. A FIFO where the history should be: --history and --min-free auto answer at once, and
// --report-json on a FIFO nobody reads is an error, not a hang.
#[test]
fn fifos_never_hang_gpurun() {
    let sim = Sim::new(&default_scenario());
    private_folder(&history_folder(&sim));
    let fifo = history_folder(&sim).join("history.jsonl");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let listed = bounded(sim.gpurun().args(["--history"]), Duration::from_secs(10));
    listed.status(0).stdout_has("STARTED (UTC)");
    let sized = bounded(
        sim.gpurun().args(["--dry-run", "--min-free", "auto", "--", "python", "x.py"]),
        Duration::from_secs(10),
    );
    sized.status(0).stdout_has("no earlier run");
    let report = sim.dir.path().join("report.fifo");
    nix::unistd::mkfifo(&report, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let refused = bounded(
        sim.gpurun().args(["--gpus", "0", "--report-json"]).args([&report]).args(["--", "true"]),
        Duration::from_secs(10),
    );
    refused.status(125).stderr_has("a FIFO that no process reads");
}

// 5, 6. A bad byte costs its line; a torn last line is closed; a 2 GiB file is read by its tail
// and trimmed keeping this run.
#[test]
fn bad_bytes_torn_lines_and_huge_files_cost_only_themselves() {
    let sim = Sim::new(&default_scenario());
    let mut text = record(&["first"], 0).into_bytes();
    text.extend_from_slice(b"{\"started\": \xff\xfe not utf-8\n");
    let torn = record(&["torn"], 0);
    text.extend_from_slice(&torn.as_bytes()[..torn.len() - 10]);
    let path = write_history(&sim, &text);
    sim.gpurun().args(["--gpus", "0", "--", "true", "second"]).run().status(0);
    let json = sim.gpurun().args(["--history", "--json"]).run().status(0).json();
    let commands: Vec<String> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["command"].as_array().unwrap().last().unwrap().to_string())
        .collect();
    assert_eq!(commands, ["\"first\"", "\"second\""], "{json}");
    // 2 GiB (sparse) with records at its end.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(2 << 30).unwrap();
    drop(file);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(format!("\n{}", record(&["late"], 0)).as_bytes())
        .unwrap();
    let listed = bounded(sim.gpurun().args(["--history"]), Duration::from_secs(20));
    listed.status(0).stdout_has("late");
    bounded(sim.gpurun().args(["--gpus", "0", "--", "true", "last"]), Duration::from_secs(20)).status(0);
    assert!(std::fs::metadata(&path).unwrap().len() <= (4 << 20) + 4096);
    let kept = std::fs::read_to_string(&path).unwrap();
    assert!(kept.lines().last().unwrap().contains("\"last\""), "this run's record is kept");
}

// 7. A peak near a card's size: auto asks what the largest card allowed can have free.
#[test]
fn min_free_auto_never_asks_more_than_a_card_can_have() {
    let sim = Sim::new(&default_scenario());
    let job = ["python", "big.py"];
    write_history(&sim, record(&job, 79u64 << 30).as_bytes());
    let plan = sim.gpurun().args(["--dry-run", "--min-free", "auto", "--"]).args(job).run();
    assert_ne!(plan.code, Some(125), "never refused for good: {plan:?}");
    plan.stderr_has("auto: lowered to ").stderr_has("the largest GPU this request allows can have at most ");
    // Only the 40 GiB cards allowed: what one of them can have free when idle is the most asked.
    let small = sim
        .gpurun()
        .args(["--dry-run", "--json", "--devices", "6,7", "--min-free", "auto", "--"])
        .args(job)
        .run();
    let json = small.json();
    assert!(json["min_free"].as_str().unwrap().contains("auto: lowered to 39.3 GiB"), "{json}");
    assert_eq!(common::eligible(&json), [6, 7], "the idle 40 GiB cards qualify");
    // The same where --exclude leaves only them: the cap is of the GPUs the request allows.
    let excluded = sim
        .gpurun()
        .args(["--dry-run", "--json", "--exclude", "0,1,2,3,4,5", "--min-free", "auto", "--"])
        .args(job)
        .run();
    let json = excluded.json();
    assert!(json["min_free"].as_str().unwrap().contains("auto: lowered to 39.3 GiB"), "{json}");
    // Absurd recorded peaks do not wrap around to a small request.
    write_history(&sim, record(&job, u64::MAX - 5).as_bytes());
    let huge = sim.gpurun().args(["--dry-run", "--json", "--min-free", "auto", "--"]).args(job).run();
    let json = huge.json();
    assert!(json["min_free"].as_str().unwrap().contains("lowered to"), "{json}");
    assert_eq!(common::eligible(&json), [3, 5], "the idle 80 GiB cards qualify, nothing smaller");
}

// 7, for the queue: a waiter's ticket records the lowered size, so that others replay the
// request it really makes (not one no card could meet).
#[test]
fn a_waiter_sized_by_auto_is_queued_with_the_lowered_size() {
    let sim = Sim::new(&default_scenario());
    let job = ["python", "big.py"];
    write_history(&sim, record(&job, 79u64 << 30).as_bytes());
    // The two idle 80 GB cards, the only ones that can have 79 GiB free, are taken.
    let _holder = background(sim.gpurun().args([
        "--devices",
        "3,5",
        "--gpus",
        "2",
        "--exclusive",
        "--",
        "sleep",
        "10",
    ]));
    let tickets = || {
        std::fs::read_dir(sim.lock_dir())
            .map(|e| e.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("ticket.")).count())
            .unwrap_or(0)
    };
    assert!(wait_until(LONG, || std::fs::read_dir(sim.lock_dir()).is_ok_and(|mut e| e.next().is_some())));
    let _waiter = background(sim.gpurun().args(["--wait=20s", "--min-free", "auto", "--"]).args(job));
    assert!(wait_until(LONG, || tickets() == 1));
    let listing = sim.gpurun().args(["--list", "--json"]).run().status(0).json();
    let reason = listing["waiters"][0]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.starts_with("needs 1 GPU with 79.0 GiB free"), "{listing}");
}

// 8. Wrappers are looked through: a small eval started by env does not inherit a training peak.
#[test]
fn min_free_auto_looks_through_wrappers() {
    let sim = Sim::new(&default_scenario());
    write_history(&sim, record(&["python", "train.py"], 60u64 << 30).as_bytes());
    let eval =
        sim.gpurun().args(["--dry-run", "--min-free", "auto", "--", "env", "A=1", "python", "eval.py"]).run();
    eval.status(0).stdout_has("no earlier run");
    let nice = sim
        .gpurun()
        .args(["--dry-run", "--min-free", "auto", "--", "nice", "-n", "5", "python", "train.py", "--x"])
        .run();
    nice.status(0).stdout_has(
        "min-free: auto: 66 GiB = peak 60 GiB of 1 earlier run of the same program and script + 10%",
    );
}

// 11. A relative XDG_STATE_HOME is ignored.
#[test]
fn a_relative_state_home_is_ignored() {
    let sim = Sim::new(&default_scenario());
    let home = sim.dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut run = sim.gpurun().env("XDG_STATE_HOME", "relative/state").env("HOME", &home);
    run.command.current_dir(sim.dir.path());
    run.args(["--gpus", "0", "--", "true"]).run().status(0);
    assert!(home.join(".local/state/gpurun/history.jsonl").exists());
    assert!(!sim.dir.path().join("relative").exists());
}

// 2 (as root, who may name the system file): --fallback best never goes below the floor.
#[test]
fn fallback_best_stays_above_the_house_floor() {
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "[limits]\ndefault-min-free = \"8G\"\n").unwrap();
    let out = sim.gpurun().args(["--fallback", "best", "--devices", "1,4", "--", "true"]).run();
    out.status(75).stderr_has("under the house rule default-min-free (8 GiB)");
    // Without the rule the same request takes the best of them, with a warning.
    std::fs::write(sim.system_file(), "").unwrap();
    sim.gpurun()
        .args(["--fallback", "best", "--devices", "1,4", "--min-free", "8G", "--", "true"])
        .run()
        .status(0);
}

/// Runs gpurun as uid 4242 in a mount namespace whose /etc/gpurun/config.toml is `system_file`
/// (the machine's own stays untouched), without GPURUN_LOCK_DIR, or None where that cannot be
/// done here.
fn as_user_with_system_file(sim: &Sim, system_file: &str, args: &[&str]) -> Option<Outcome> {
    let etc = sim.dir.path().join("etc-gpurun");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("config.toml"), system_file).unwrap();
    for path in [sim.dir.path().to_owned(), etc.clone()] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::create_dir_all(sim.lock_dir()).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The mount point; a package would create it too.
    if std::fs::create_dir_all("/etc/gpurun").is_err() {
        common::skip("a private /etc/gpurun", "cannot create /etc/gpurun");
        return None;
    }
    let script =
        "mount --bind \"$0\" /etc/gpurun && exec setpriv --reuid=4242 --regid=4242 --clear-groups \"$@\"";
    let binary = gpurun_binary();
    let mut words = vec!["--mount", "--", "sh", "-c", script, etc.to_str().unwrap(), &binary];
    words.extend_from_slice(args);
    // The lock directory comes from the system file's lock-dir, as on a real server.
    let outcome = sim.gpurun_command("unshare", &words).env_remove("GPURUN_LOCK_DIR").run();
    if outcome.stderr.contains("unshare:")
        || outcome.stderr.contains("mount:")
        || outcome.stderr.contains("setpriv:")
    {
        common::skip("a second user with a private /etc/gpurun", &outcome.stderr);
        return None;
    }
    Some(outcome)
}

/// Issue 65: a user's gpurun (a pip or `PREFIX=~/.local` install, no package to make it) never
/// makes the machine's shared lock directory: one they made would be theirs, and every other
/// user's gpurun, root's too, would refuse it until a reboot. It says what root must run; root
/// makes it, mode 1777.
#[test]
fn a_user_never_makes_the_machines_lock_directory() {
    let sim = Sim::new(&default_scenario());
    let system = sim.dir.path().join("system-locks");
    let rules = format!("lock-dir = \"{}\"\n", system.display());
    let Some(refused) = as_user_with_system_file(&sim, &rules, &["--", "true"]) else { return };
    refused
        .status(125)
        .stderr_has("does not exist: it is the machine's shared reservation directory, which only root makes")
        .stderr_has(&format!("`sudo install -d -m 1777 {}`", system.display()));
    assert!(!system.exists());
    as_user_with_system_file(&sim, &rules, &["-q", "--no-lock", "--", "true"]).unwrap().status(0);
    std::fs::write(sim.system_file(), &rules).unwrap();
    sim.gpurun().env_remove("GPURUN_LOCK_DIR").args(["-q", "--", "true"]).run().status(0);
    let made = std::fs::metadata(&system).unwrap();
    assert_eq!(made.permissions().mode() & 0o7777, 0o1777);
}

// 2. A user cannot swap the rules out, nor reserve where they are not counted.
#[test]
fn house_rules_hold_against_a_user() {
    let sim = Sim::new(&default_scenario());
    let locks = sim.lock_dir();
    let rules = format!("lock-dir = \"{}\"\n[limits]\nmax-gpus-per-user = 1\n", locks.display());
    // GPURUN_SYSTEM_CONFIG names the empty file the harness made (root's, without [limits]).
    let Some(listing) = as_user_with_system_file(&sim, &rules, &["--list"]) else { return };
    listing.status(0).stdout_has("max-gpus-per-user = 1 (/etc/gpurun/config.toml [limits])");
    let over = as_user_with_system_file(&sim, &rules, &["--gpus", "2", "--", "true"]).unwrap();
    over.status(125).stderr_has(
        "the house rule max-gpus-per-user = 1 (/etc/gpurun/config.toml [limits]) allows at most 1",
    );
    let no_lock = as_user_with_system_file(&sim, &rules, &["--no-lock", "--", "true"]).unwrap();
    no_lock
        .status(125)
        .stderr_has("gpurun: --no-lock: the house rule max-gpus-per-user = 1 (/etc/gpurun/config.toml [limits]) counts every user's reservations in the system lock directory");
    let private = sim.dir.path().join("mine");
    let elsewhere =
        as_user_with_system_file(&sim, &rules, &["--lock-dir", private.to_str().unwrap(), "--", "true"])
            .unwrap();
    elsewhere
        .status(125)
        .stderr_has(&format!("gpurun: the lock directory {}: the house rule", private.display()));
    assert!(!private.exists(), "nothing was reserved there");
    // --no-config drops the system file's lock-dir from the settings, not from the rule: the
    // default directory is not the system's here.
    let unconfigured = as_user_with_system_file(&sim, &rules, &["--no-config", "--", "true"]).unwrap();
    unconfigured.status(125).stderr_has("gpurun: the lock directory /run/lock/gpurun: the house rule");
    // In the system's lock directory the job runs.
    as_user_with_system_file(&sim, &rules, &["--", "true"]).unwrap().status(0);
}

/// A command line of about 1 MiB: far more than a socket or pipe buffer holds.
fn huge_arguments() -> Vec<String> {
    (0..10).map(|n| format!("{n}{}", "x".repeat(100_000))).collect()
}

// 3. A hook that never reads its input does not stall supervision: TERM is forwarded at once.
#[test]
fn a_hook_that_does_not_read_cannot_stall_supervision() {
    let sim = Sim::new(&default_scenario());
    let mut run =
        sim.gpurun().args(["--gpus", "0", "--on-start", "sleep 600", "--", "sh", "-c", "sleep 600", "sh"]);
    run = run.args(huge_arguments());
    // stderr not piped: nobody would read the "running" line, which holds the whole command.
    let mut child =
        run.command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // The command and its hook started (each would run ten minutes: a TERM held back by the
    // hook would leave gpurun hung).
    assert!(wait_until(common::HANG, || common::children(child.id()).len() >= 2), "the command and its hook");
    common::send_signal(child.id(), libc::SIGTERM);
    use std::os::unix::process::ExitStatusExt;
    let status = common::wait_unless_hung(&mut child);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the command got the TERM and gpurun died by it");
}

// 9. An --on-start hook still running when the command ends is ended with it.
#[test]
fn an_on_start_hook_never_holds_the_exit() {
    let sim = Sim::new(&default_scenario());
    let marker = sim.dir.path().join("hook-ended");
    // The hook runs for ten minutes unless ended: an exit that waited for it would be hung.
    let hook = format!("trap 'echo term > {}; exit' TERM; sleep 600 & wait", marker.display());
    sim.gpurun().args(["--gpus", "0", "--on-start", &hook, "--", "sleep", "0.5"]).run_unless_hung().status(0);
    assert_eq!(std::fs::read_to_string(&marker).unwrap_or_default(), "term\n", "the hook was ended");
    // With --keep-orphans nothing is waited for either: the hook gets its TERM all the same.
    std::fs::remove_file(&marker).unwrap();
    sim.gpurun()
        .args(["--gpus", "0", "--keep-orphans", "--on-start", &hook, "--", "sleep", "0.5"])
        .run_unless_hung()
        .status(0);
    assert!(wait_until(LONG, || marker.exists()), "the hook got no TERM with --keep-orphans");
}

// 10. Other users see a reservation's program, never its arguments.
#[test]
fn leases_keep_the_arguments_private() {
    let sim = Sim::new(&default_scenario());
    let _job = background(sim.gpurun().args([
        "--devices",
        "3",
        "--",
        "sh",
        "-c",
        "sleep 10",
        "sh",
        "--api-key=SECRET123",
    ]));
    let lease_files = || -> Vec<PathBuf> {
        std::fs::read_dir(sim.lock_dir())
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(".lease"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(wait_until(LONG, || lease_files().len() == 1));
    let content = std::fs::read_to_string(&lease_files()[0]).unwrap();
    assert!(!content.contains("SECRET123"), "{content}");
    assert!(content.contains("\"command\":\"sh\""), "{content}");
    // The owner (root here) sees it whole, from /proc.
    assert!(wait_until(LONG, || sim.gpurun().args(["--list"]).run().stdout.contains("--api-key=SECRET123")));
    std::fs::set_permissions(sim.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = gpurun_binary();
    for json in [false, true] {
        let mut words = vec!["--reuid=4242", "--regid=4242", "--clear-groups", &binary, "--list"];
        if json {
            words.push("--json");
        }
        let other = sim.gpurun_command("setpriv", &words).run();
        if other.stderr.contains("setpriv:") {
            common::skip("a second user", &other.stderr);
            return;
        }
        other.status(0);
        assert!(!other.stdout.contains("SECRET123"), "{}", other.stdout);
        if json {
            assert_eq!(other.json()["reservations"][0]["command"], "sh");
        } else {
            other.stdout_has("sh");
        }
    }
}

// 12. A child gpurun inherited from the process it replaced is no leftover of the command.
#[test]
fn children_gpurun_inherited_are_left_alone() {
    let sim = Sim::new(&default_scenario());
    // The inherited sleep lasts ten minutes: a gpurun that waited for it would be hung.
    let script = "sleep 600 >/dev/null 2>&1 & echo $!; exec \"$0\" --gpus 0 -- sh -c 'sleep 600 >/dev/null 2>&1 & echo $!'";
    let out = sim.gpurun_command("sh", &["-c", script, &gpurun_binary()]).run_unless_hung();
    out.status(0);
    let pids: Vec<u32> = out.stdout.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{out:?}");
    let (inherited, leftover) = (pids[0], pids[1]);
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
    };
    assert!(alive(inherited), "the inherited sleep was killed: {out:?}");
    assert!(!alive(leftover), "the command's own leftover was not ended: {out:?}");
    out.stderr_has("the command left 1 process running");
    common::send_signal(inherited, libc::SIGKILL);
}
