//! Hostile conditions (issue 11), each through the real binary: closed descriptors, foreign
//! lock directories and files, stuck or forged queues, slow patterns, settings that look like
//! options, configuration files that are not files, full disks, unwritable output, and signals
//! from the command's own processes.

use crate::common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{background, gpurun_binary, scenario_file, wait_until, Sim, HANG};

const LONG: Duration = Duration::from_secs(20);

fn two_gpus() -> Sim {
    Sim::new(&scenario_file("two_idle.toml"))
}

/// `sh -c SCRIPT` in gpurun's test environment, with `$G` the gpurun binary.
fn shell(sim: &Sim, script: &str) -> common::Run {
    sim.gpurun_command("sh", &["-c", script]).env("G", gpurun_binary())
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|e| e.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether a ticket whose name ends with `suffix` is planted and locked (flock -n fails on
/// it): a ticket not locked is dead.
fn planted_and_locked(dir: &std::path::Path, suffix: &str) -> bool {
    entries(dir).iter().filter(|name| name.ends_with(suffix)).any(|name| {
        Command::new("flock").arg("-n").arg(dir.join(name)).arg("true").status().is_ok_and(|s| !s.success())
    })
}

fn leases(sim: &Sim) -> Vec<String> {
    entries(&sim.lock_dir()).into_iter().filter(|n| n.ends_with(".lease")).collect()
}

#[test]
fn closed_descriptors_cannot_turn_a_lease_into_a_log_and_double_book() {
    let sim = two_gpus();
    // A holds GPU 0 exclusively, started like a cron job with stdin, stdout and stderr closed.
    let _a = background(shell(&sim, "exec \"$G\" --exclusive --devices 0 -- sleep 3 <&- >&- 2>&-"));
    // A lease is made, then written (other launches count it meanwhile by its lock).
    let written = || {
        leases(&sim)
            .first()
            .and_then(|name| std::fs::read_to_string(sim.lock_dir().join(name)).ok())
            .filter(|text| !text.is_empty())
    };
    assert!(wait_until(LONG, || written().is_some()), "A took no lease");
    // Its lease is its lease, not its log: the file is the JSON record.
    let lease = written().unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&lease).unwrap_or_else(|e| panic!("{e}: {lease:?}"));
    assert_eq!(parsed["exclusive"], true);
    // B asks for the same card and must be turned away.
    sim.gpurun()
        .args(["--exclusive", "--devices", "0", "--", "echo", "B"])
        .run()
        .status(75)
        .stderr_has("GPU 0: reserved exclusively by gpurun PID");
}

#[test]
fn a_held_lease_counts_even_when_its_content_cannot_be_read() {
    let sim = two_gpus();
    sim.gpurun().args(["--", "true"]).run().status(0);
    let name = "GPU-22220000-0000-4000-8000-000000000000.999.0badf00d.lease";
    std::fs::write(sim.lock_dir().join(name), "gpurun: warning: this is not a lease").unwrap();
    let _holder = background(
        sim.gpurun_command("flock", &["-x", sim.lock_dir().join(name).to_str().unwrap(), "sleep", "10"]),
    );
    let held = || sim.gpurun().args(["--exclusive", "--devices", "0", "--", "true"]).run().code == Some(75);
    assert!(wait_until(LONG, held), "the unreadable lease was ignored");
    sim.gpurun()
        .args(["--devices", "0", "--", "true"])
        .run()
        .status(75)
        .stderr_has("reserved exclusively by gpurun PID 999");
}

#[test]
fn an_existing_lock_directory_keeps_its_mode() {
    let sim = two_gpus();
    std::fs::create_dir(sim.lock_dir()).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    sim.gpurun().args(["--list"]).run().status(0);
    sim.gpurun().args(["--", "true"]).run().status(0);
    let mode = std::fs::metadata(sim.lock_dir()).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "gpurun changed the mode of a directory it did not create");
    // One it creates itself is shared: 1777.
    let fresh = two_gpus();
    fresh.gpurun().args(["--", "true"]).run().status(0);
    assert_eq!(std::fs::metadata(fresh.lock_dir()).unwrap().permissions().mode() & 0o7777, 0o1777);
}

#[test]
fn report_json_is_json_with_every_descriptor_closed() {
    let sim = two_gpus();
    // Only stderr closed: without the fix the report file becomes descriptor 2 and gpurun's
    // own log lines (the verdict) land in it. Then all three closed.
    for (trial, closing) in ["2>&-", "<&- >&- 2>&-"].iter().enumerate() {
        let report = sim.dir.path().join(format!("report{trial}.json"));
        shell(&sim, &format!("exec \"$G\" --no-lock --report-json {} -- true {closing}", report.display()))
            .run()
            .status(0);
        let text = std::fs::read_to_string(&report).unwrap();
        let parsed: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{closing}: {e}: {text:?}"));
        assert_eq!(parsed["exit"]["code"], 0);
    }
}

#[test]
fn a_first_argument_with_blanks_is_split_only_for_a_shebang() {
    let sim = Sim::new(&common::default_scenario());
    let outcome = sim.gpurun().args(["--model=Tesla V100", "--dry-run"]).run();
    outcome.status(0).stdout_has("dry run").stdout_has("selected: GPU 0 (Tesla V100-SXM2-32GB");
    assert!(!sim.lock_dir().exists(), "an ordinary argument became a launch");
}

/// The kernel passes a `#!` line's interpreter path as argv[0]: typed by hand as `gpurun`,
/// the same words are not the interpreter situation, and a command word with blanks is one
/// word (127), as for GNU env; run as the script, the line is split.
#[test]
fn a_command_word_with_blanks_typed_by_hand_is_not_split() {
    let sim = two_gpus();
    // A short interpreter path, whatever the checkout's: the kernel reads a #! line only so far.
    let short = tempfile::Builder::new().prefix("s").tempdir_in("/tmp").unwrap();
    let gpurun = short.path().join("gpurun");
    std::os::unix::fs::symlink(gpurun_binary(), &gpurun).unwrap();
    let script = short.path().join("s");
    std::fs::write(&script, format!("#!{} pa -n\n", gpurun.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut by_hand = sim.gpurun();
    by_hand.command.arg0("gpurun").arg("pa -n").arg(&script);
    by_hand.run().status(127).stderr_has("gpurun: pa -n: command not found");
    sim.gpurun_command(script.to_str().unwrap(), &[])
        .run()
        .status(127)
        .stderr_has("gpurun: pa: command not found");
}

#[test]
fn a_request_no_state_of_the_machine_can_meet_never_waits() {
    let sim = two_gpus();
    for (args, why) in [
        (&["--model", "H100"][..], "--model H100: 0 of the GPUs gpurun may use match"),
        (&["--gpus", "3"][..], "--gpus 3: this machine has 2 GPUs"),
        (&["--min-free", "500G"][..], "--min-free: no GPU can ever have that much free"),
    ] {
        // --wait without a limit: a request that waited would wait for ever.
        sim.gpurun().args(args).args(["--wait", "--", "true"]).run_unless_hung().status(125).stderr_has(why);
    }
    // And it takes no place in the queue: the directory holds no ticket.
    assert!(entries(&sim.lock_dir()).iter().all(|n| !n.starts_with("ticket.")));
}

#[test]
fn a_waiter_holds_back_only_the_gpus_it_could_use() {
    let sim = two_gpus();
    let _holder0 =
        background(sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--", "sleep", "120"]));
    let _holder1 = background(sim.gpurun().args(["-q", "--exclusive", "--devices", "1", "--", "sleep", "1"]));
    assert!(wait_until(LONG, || leases(&sim).len() == 2));
    // A waits for GPU 0 only, which stays busy.
    let _waiter =
        background(sim.gpurun().args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "true"]));
    assert!(wait_until(LONG, || entries(&sim.lock_dir()).iter().any(|n| n.starts_with("ticket."))));
    // B waits for GPU 1 only: when it frees up, A (first in the queue) does not stand in B's way.
    // Behind A, B would wait for GPU 0's two minutes and its --wait would run out first (75).
    let outcome =
        sim.gpurun().args(["-q", "--exclusive", "--devices", "1", "--wait=60s", "--", "echo", "B"]).run();
    assert_eq!(outcome.status(0).stdout, "B\n", "B waited behind A");
}

#[test]
fn a_new_launch_queues_behind_earlier_waiters() {
    let sim = two_gpus();
    let log = sim.dir.path().join("order.log");
    for trial in 0..3 {
        let mut holder =
            background(sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--", "sleep", "1"]));
        assert!(wait_until(LONG, || leases(&sim).len() == 1));
        let job = |name: &str| {
            background(
                sim.gpurun()
                    .args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "sh", "-c"])
                    .args([format!("echo {name} >> {}", log.display())]),
            )
        };
        let mut first = job("first");
        assert!(wait_until(LONG, || entries(&sim.lock_dir()).iter().any(|n| n.starts_with("ticket."))));
        // The late one arrives the moment the card is free, between the waiter's retries.
        holder.0.wait().unwrap();
        let mut late = job("late");
        assert!(first.0.wait().unwrap().success());
        assert!(late.0.wait().unwrap().success());
        let order = std::fs::read_to_string(&log).unwrap();
        assert_eq!(order, "first\nlate\n", "trial {trial}");
        std::fs::remove_file(&log).unwrap();
    }
}

#[test]
fn forged_tickets_of_another_user_stall_no_one() {
    let sim = two_gpus();
    sim.gpurun().args(["--", "true"]).run().status(0);
    // Named as a real ticket is (time, PID, the GPUs as a mask: every one), so that the names
    // alone make it the head of every queue.
    let ticket = sim.lock_dir().join("ticket.00000000000000000001.1.ffffffffffffffff");
    // Another user holds a ticket that claims the first place in the queue, forever.
    let forger = background(sim.gpurun_command(
        "setpriv",
        &[
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            "flock",
            // -o: flock alone holds the lock, so the forgery ends when the test kills it.
            "-o",
            "-x",
            ticket.to_str().unwrap(),
            "sleep",
            "600",
        ],
    ));
    if !wait_until(Duration::from_secs(5), || ticket.exists()) {
        common::skip("forged_tickets_of_another_user_stall_no_one", "setpriv or flock is unavailable");
        drop(forger);
        return;
    }
    // On an idle machine a waiting launch starts at once: the forgery covers every GPU by its
    // name, but no launch queues behind a ticket it cannot trust.
    // Without a limit: queued behind the forgery (which lasts), it would wait for ever.
    sim.gpurun().args(["-q", "--exclusive", "--wait", "--", "true"]).run_unless_hung().status(0);
    // Both cards are busy for a second, so the launch must queue; then it must not wait
    // behind the forgery.
    let _holder = background(sim.gpurun().args(["-q", "--exclusive", "--gpus", "2", "--", "sleep", "1"]));
    assert!(wait_until(LONG, || leases(&sim).len() == 2));
    sim.gpurun().args(["-q", "--exclusive", "--wait", "--", "true"]).run_unless_hung().status(0);
}

#[test]
fn a_held_directory_lock_neither_hangs_looking_nor_silently_stalls_a_launch() {
    let sim = two_gpus();
    sim.gpurun().args(["--", "true"]).run().status(0);
    // The old .lock file is no single point of failure any more: make it a FIFO, unreadable.
    let fifo = sim.lock_dir().join(".lock");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o000)).unwrap();
    sim.gpurun().args(["--", "true"]).run().status(0);
    // Someone holds the directory lock itself.
    // -o: flock alone holds the lock (not its sleep), so killing it releases the lock.
    let dir = sim.lock_dir().display().to_string();
    let mut holder = background(sim.gpurun_command("flock", &["-o", "-x", &dir, "sleep", "600"]));
    let holding = || {
        let probe = Command::new("flock").args(["-n", "-x", &dir, "true"]).status();
        probe.is_ok_and(|status| !status.success())
    };
    assert!(wait_until(LONG, holding), "flock did not take the directory lock");
    // The holder is named wherever the kernel lists the lock (a PID namespace the mounted /proc
    // does not show, or a file server keeping the lock, hides it).
    let inode = std::fs::metadata(sim.lock_dir()).unwrap().ino();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let listed = locks
        .lines()
        .any(|line| line.split_whitespace().nth(5).is_some_and(|f| f.ends_with(&format!(":{inode}"))));
    // The lock is held for ten minutes: looking that waited for it would be hung.
    sim.gpurun().args(["--list"]).run_unless_hung().status(0).stdout_has("2 GPUs");
    sim.gpurun().args(["--dry-run"]).run_unless_hung().status(0);
    // A launch waits for the lock and says who holds it; it starts once the holder is gone.
    let said = sim.dir.path().join("launch.err");
    let mut launching = sim.gpurun().args(["--", "true"]).command;
    let err_file = std::fs::File::create(&said).unwrap();
    let mut launching = launching.stdin(Stdio::null()).stderr(err_file).spawn().unwrap();
    let waiting = format!("waiting for the lock directory {}, held by ", sim.lock_dir().display());
    let says = || std::fs::read_to_string(&said).unwrap_or_default().contains(&waiting);
    assert!(wait_until(HANG, says), "the launch did not say it waits for the lock");
    holder.end();
    assert!(common::wait_unless_hung(&mut launching).success());
    let launch = common::Outcome {
        code: Some(0),
        stdout: String::new(),
        stderr: std::fs::read_to_string(&said).unwrap(),
    };
    if listed {
        launch.stderr_has(&format!("{waiting}PID "));
        assert!(launch.stderr.contains("flock"), "the holder's command is named: {}", launch.stderr);
    } else {
        eprintln!("/proc/locks does not list the directory lock here: {locks}");
        launch.stderr_has(&format!("{waiting}another process"));
    }
    drop(holder);
}

#[test]
fn many_stars_in_a_model_pattern_take_no_time() {
    let sim = Sim::new(&common::default_scenario());
    // Backtracking over 30 stars would take longer than any test waits: linear time ends at once.
    let pattern = "******************************x";
    let config = sim.dir.path().join("config.toml");
    std::fs::write(&config, format!("model = \"{pattern}\"\n")).unwrap();
    for run in [
        sim.gpurun().args(["--dry-run", "--model", pattern]),
        sim.gpurun().args(["--dry-run"]).env("GPURUN_MODEL", pattern),
        sim.gpurun().args(["--dry-run"]).env("GPURUN_CONFIG", &config),
    ] {
        run.run_unless_hung().status(125).stderr_has(&format!("--model {pattern}: 0 of the GPUs"));
    }
}

#[test]
fn settings_are_never_read_as_options() {
    let sim = Sim::new(&common::default_scenario());
    let config = sim.dir.path().join("config.toml");
    std::fs::write(&config, "model = \"-SXM4\"\n").unwrap();
    for run in [
        sim.gpurun().args(["--dry-run"]).env("GPURUN_MODEL", "-SXM4"),
        sim.gpurun().args(["--dry-run"]).env("GPURUN_CONFIG", &config),
    ] {
        run.run().status(0).stdout_has("selected: GPU 3 (NVIDIA A100-SXM4-80GB");
    }
    sim.gpurun()
        .args(["--dry-run"])
        .env("GPURUN_DEVICES", "-2")
        .run()
        .status(125)
        .stderr_has("GPURUN_DEVICES: key devices: invalid value '-2'");
    sim.gpurun()
        .args(["--list"])
        .env("GPURUN_MIN_FRE", "8G")
        .run()
        .status(125)
        .stderr_has("gpurun: GPURUN_MIN_FRE names no setting (did you mean GPURUN_MIN_FREE?)");
}

#[test]
fn configuration_files_that_are_not_files() {
    let sim = Sim::new(&common::default_scenario());
    let fifo = sim.dir.path().join("fifo.toml");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = sim.dir.path().join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let devices = sim.dir.path().join("devices.toml");
    std::fs::write(&devices, "policy = \"pack\"\ndevices = \"99\"\n").unwrap();
    let broken = sim.dir.path().join("broken.toml");
    std::fs::write(&broken, "policy = \"pack\"\n\nmin-free = \n").unwrap();
    for (file, expected) in [
        (
            "/dev/zero".to_owned(),
            "/dev/zero: not a regular file; a configuration file must be one (for none: --no-config, or /dev/null)"
                .to_owned(),
        ),
        (fifo.display().to_string(), format!("{}: not a regular file", fifo.display())),
        (big.display().to_string(), format!("{}: larger than 1 MiB", big.display())),
        (
            devices.display().to_string(),
            format!("{}:2: key devices: --devices 99: no such GPU", devices.display()),
        ),
        (broken.display().to_string(), format!("{}:3: ", broken.display())),
    ] {
        // A FIFO nobody writes, or /dev/zero read whole, would never end.
        sim.gpurun().args(["--dry-run"]).env("GPURUN_CONFIG", &file).run_unless_hung().status(125).stderr_has(&expected);
    }
}

#[test]
fn dev_null_as_the_configuration_is_an_empty_one() {
    // As GIT_CONFIG_GLOBAL=/dev/null and ssh -F /dev/null: no settings, not an error. A user
    // file that would change the choice shows that none is read.
    let sim = Sim::new(&common::default_scenario());
    let config = sim.dir.path().join("xdg/gpurun/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "policy = \"index\"\ndevices = \"3\"\n").unwrap();
    let chosen = |file: Option<&str>| {
        let mut run = sim.gpurun();
        run = run.env("XDG_CONFIG_HOME", sim.dir.path().join("xdg"));
        if let Some(file) = file {
            run = run.env("GPURUN_CONFIG", file);
        }
        run.args(["--dry-run", "--json"]).run().status(0).json()["selected"][0]["index"].as_u64()
    };
    assert_eq!(chosen(None), Some(3), "the user file is read");
    let default = sim.gpurun().args(["--dry-run", "--json", "--no-config"]).run().status(0).json();
    assert_eq!(chosen(Some("/dev/null")), default["selected"][0]["index"].as_u64());
}

#[test]
fn a_full_disk_leaves_no_empty_lease() {
    let sim = two_gpus();
    sim.gpurun().args(["--", "true"]).run().status(0);
    // A file size limit of 0 makes the lease's write fail as a full disk would.
    let mut run = sim.gpurun().args(["--", "true"]);
    // SAFETY: setrlimit and signal are async-signal-safe; they only affect the child.
    unsafe {
        run.command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let none = libc::rlimit { rlim_cur: 0, rlim_max: libc::RLIM_INFINITY };
            libc::setrlimit(libc::RLIMIT_FSIZE, &none);
            Ok(())
        });
    }
    run.run().status(125).stderr_has("File too large");
    assert_eq!(entries(&sim.lock_dir()), Vec::<String>::new());
}

#[test]
fn a_waiter_ended_by_a_signal_leaves_no_ticket() {
    let sim = two_gpus();
    let _holder = background(sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--", "sleep", "20"]));
    assert!(wait_until(LONG, || leases(&sim).len() == 1));
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut waiter = sim
            .gpurun()
            .args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "true"])
            .command
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(LONG, || entries(&sim.lock_dir()).iter().any(|n| n.starts_with("ticket."))));
        common::send_signal(waiter.id(), signal);
        let status = waiter.wait().unwrap();
        assert_eq!(status.signal(), Some(signal), "the waiter ends by the signal, as it would have");
        assert!(
            entries(&sim.lock_dir()).iter().all(|n| !n.starts_with("ticket.")),
            "ticket left by {signal}"
        );
    }
}

#[test]
fn looking_works_in_a_lock_directory_it_cannot_write() {
    let sim = two_gpus();
    // A root-owned directory another user may read but not write.
    std::fs::create_dir(sim.lock_dir()).unwrap();
    std::fs::set_permissions(sim.lock_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(sim.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_other = |args: &[&str]| {
        let binary = gpurun_binary();
        let mut words = vec!["--reuid=4242", "--regid=4242", "--clear-groups", binary.as_str()];
        words.extend_from_slice(args);
        sim.gpurun_command("setpriv", &words).run()
    };
    let listing = as_other(&["--list"]);
    if listing.stderr.contains("setpriv:") {
        common::skip("looking_works_in_a_lock_directory_it_cannot_write", &format!("{listing:?}"));
        return;
    }
    listing.status(0).stdout_has("2 GPUs");
    as_other(&["--", "true"]).status(125).stderr_has("Permission denied");
}

#[test]
fn output_that_cannot_be_written_is_an_error() {
    let sim = two_gpus();
    for args in [&["--help"][..], &["--version"], &["--list"], &["--export"], &["--dry-run"]] {
        let full = shell(&sim, &format!("exec \"$G\" {} >/dev/full", args.join(" "))).run();
        full.status(125).stderr_has("gpurun: cannot write the output: No space left on device");
        let closed = shell(&sim, &format!("exec \"$G\" {} >&-", args.join(" "))).run();
        closed.status(125).stderr_has("gpurun: cannot write the output: Bad file descriptor");
    }
}

#[test]
fn a_non_utf8_option_value_is_named() {
    use std::os::unix::ffi::OsStrExt;
    let sim = two_gpus();
    let mut run = sim.gpurun();
    run.command.args([
        std::ffi::OsStr::new("--model"),
        std::ffi::OsStr::from_bytes(b"caf\xe9"),
        "--list".as_ref(),
    ]);
    run.run().status(125).stderr_has("argument 2 (\"caf\u{fffd}\") is not valid UTF-8");
}

#[test]
fn signals_from_the_commands_own_processes_are_not_sent_back() {
    let sim = two_gpus();
    // A process of the command's tree (a background subshell) sends gpurun SIGTERM, and stays
    // alive a moment, so that gpurun can place it.
    let outcome = sim
        .gpurun()
        .args(["-q", "--gpus", "0", "--", "sh", "-c"])
        .args([
            "trap 'echo TERM; exit 9' TERM; (sleep 0.2; kill -TERM $PPID; sleep 1) & sleep 1.5; echo done",
        ])
        .run();
    assert_eq!(outcome.status(0).stdout, "done\n");
    let _ = std::io::stderr().flush();
}

#[test]
fn a_reader_that_went_away_ends_gpurun_by_sigpipe_silently() {
    let sim = two_gpus();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let output = sim.gpurun().args(["--list"]).command.stdout(Stdio::from(write_end)).output().unwrap();
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    // A caller that ignores SIGPIPE gets the error instead, as from coreutils.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let mut run = sim.gpurun().args(["--list"]);
    // SAFETY: signal() is async-signal-safe; it only affects the child.
    unsafe {
        run.command.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            Ok(())
        });
    }
    let output = run.command.stdout(Stdio::from(write_end)).output().unwrap();
    assert_eq!(output.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot write the output: Broken pipe"),
        "{output:?}"
    );
}

#[test]
fn the_command_gets_the_callers_descriptors_as_they_were() {
    let sim = two_gpus();
    // gpurun fills the closed stdout with /dev/null for itself only: the command finds it closed.
    let outcome = shell(
        &sim,
        "exec \"$G\" -q --gpus 0 -- sh -c 'if [ -e /proc/self/fd/1 ]; then echo open >&2; else echo closed >&2; fi' >&-",
    )
    .run();
    assert_eq!(outcome.status(0).stderr, "closed\n");
}

#[test]
fn gpurun_stays_in_the_callers_directory() {
    let sim = two_gpus();
    let dir = tempfile::tempdir().unwrap();
    let mut run = sim.gpurun().args(["-q", "--gpus", "0", "--", "sleep", "1"]);
    let mut gpurun = run.command.current_dir(dir.path()).spawn().unwrap();
    let cwd = |pid: u32| std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
    assert!(wait_until(LONG, || cwd(gpurun.id()).is_some()));
    assert_eq!(cwd(gpurun.id()).unwrap(), dir.path().canonicalize().unwrap());
    assert!(gpurun.wait().unwrap().success());
}

#[test]
fn ctrl_z_before_the_command_starts_stops_gpurun_until_it_is_continued() {
    let sim = two_gpus();
    let _holder = background(sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--", "sleep", "2"]));
    assert!(wait_until(LONG, || leases(&sim).len() == 1));
    let mut waiter = sim
        .gpurun()
        .args(["-q", "--wait", "--exclusive", "--devices", "0", "--", "true"])
        .command
        .spawn()
        .unwrap();
    assert!(wait_until(LONG, || entries(&sim.lock_dir()).iter().any(|n| n.starts_with("ticket."))));
    common::send_signal(waiter.id(), libc::SIGTSTP);
    assert!(wait_until(LONG, || common::state(waiter.id()) == Some('T')), "the waiting gpurun did not stop");
    common::send_signal(waiter.id(), libc::SIGCONT);
    assert!(waiter.wait().unwrap().success(), "continued, it waited and ran the command");
}

/// Issue 36 (5): another user's locked ticket naming a live process of theirs passed every
/// check; neither the GPU mask in its name nor its request was weighed. One with the mask of
/// every GPU over an empty list made a real waiter wait on an idle machine; one asking for 99
/// GPUs made every launch exit 75. Such tickets hold nothing.
#[test]
fn forged_tickets_with_a_plausible_content_hold_nothing() {
    let sim = two_gpus();
    sim.gpurun().args(["--", "true"]).run().status(0);
    let dir = sim.lock_dir().display().to_string();
    let both = r#"["GPU-22220000-0000-4000-8000-000000000000","GPU-22220000-0000-4000-8000-000000000001"]"#;
    // As many GPUs as an all-GPU name marks, none of them this machine's.
    let invented: Vec<String> = (0..64).map(|i| format!("\"GPU-99990000-0000-4000-8000-{i:012}\"")).collect();
    let invented = format!("[{}]", invented.join(","));
    for (mask, gpus, count) in [
        ("ffffffffffffffff", "[]", "1"),
        ("0000000000000003", both, "99"),
        ("ffffffffffffffff", &invented, "1"),
    ] {
        // As uid 4242: a ticket named and written as a real one (its time, its PID, a lock held
        // by that PID), for as long as the test lasts.
        let script = format!(
            "n=$(date +%s%N); f=\"{dir}/ticket.$(printf %020d $n).$$.{mask}\"; \
             printf '{{\"pid\":%d,\"uid\":4242,\"user\":\"u4242\",\"since_ns\":%s,\"gpus\":%s,\"request\":\"\",\
             \"needs\":{{\"count\":\"%s\",\"min_free\":null,\"max_util\":null,\"exclusive\":true,\"policy\":\"most-free\"}}}}' \
             $$ $n '{gpus}' '{count}' > \"$f\"; exec flock -x \"$f\" sleep 600"
        );
        let forger = background(sim.gpurun_command(
            "setpriv",
            &["--reuid=4242", "--regid=4242", "--clear-groups", "sh", "-c", &script],
        ));
        // Planted, and locked by its PID (flock -n fails on it): a ticket not locked is dead.
        // (An earlier forger's ticket of the same mask is dead, unlocked: any locked one is this.)
        let locked = || planted_and_locked(&sim.lock_dir(), mask);
        if !wait_until(Duration::from_secs(5), locked) {
            drop(forger);
            return common::skip("forged tickets with content", "setpriv or flock is unavailable");
        }
        // Behind a ticket that could hold, a waiter would wait as long as the forger lives.
        sim.gpurun().args(["-q", "--exclusive", "--wait", "--", "true"]).run_unless_hung().status(0);
        sim.gpurun().args(["-q", "--gpus", "1", "--", "true"]).run().status(0);
        drop(forger);
    }
}

/// Issue 36 (4): a head that is alive and running but never acts on a wake-up (here a ticket
/// of uid 4242 written as a real one, with its FIFO made and held open, by a process that is
/// not a gpurun) held up every waiter behind it for as long as it lived. Once a wake-up has
/// stayed unread in its FIFO for 5 s it holds no place, and the waiter behind takes the GPU.
#[test]
fn a_head_that_never_reads_its_wake_ups_does_not_hold_up_the_queue() {
    let sim = two_gpus();
    let holder = background(sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--", "sleep", "600"]));
    let lock_dir = sim.lock_dir();
    let leased = || common::leases_in(&lock_dir) > 0;
    assert!(wait_until(LONG, leased));
    let dir = lock_dir.display().to_string();
    let script = format!(
        "n=$(date +%s%N); t=\"{dir}/ticket.$(printf %020d $n).$$.0000000000000001\"; \
         w=\"{dir}/wake.$(printf %020d $n).$$\"; mkfifo -m 0622 \"$w\" || exit 1; \
         printf '{{\"pid\":%d,\"uid\":4242,\"user\":\"u4242\",\"since_ns\":%s,\
         \"gpus\":[\"GPU-22220000-0000-4000-8000-000000000000\"],\"request\":\"--gpus 1\",\
         \"needs\":{{\"count\":\"1\",\"min_free\":null,\"max_util\":null,\"exclusive\":true,\"policy\":\"most-free\"}}}}' \
         $$ $n > \"$t\"; exec 3<>\"$w\"; exec flock -x \"$t\" sleep 600"
    );
    let forger =
        background(sim.gpurun_command(
            "setpriv",
            &["--reuid=4242", "--regid=4242", "--clear-groups", "sh", "-c", &script],
        ));
    let tickets = || entries(&lock_dir).iter().filter(|name| name.starts_with("ticket.")).count();
    let locked = || planted_and_locked(&lock_dir, ".0000000000000001");
    if !wait_until(Duration::from_secs(5), locked) {
        return common::skip("an unresponsive head", "setpriv, mkfifo or flock is unavailable");
    }
    let waiter = sim.gpurun().args(["-q", "--exclusive", "--devices", "0", "--wait", "--", "true"]);
    let mut waiter = background(waiter);
    assert!(wait_until(LONG, || tickets() == 2), "the waiter queued behind the planted ticket");
    // The lease ends and its wake-up goes to the planted ticket, which never reads it.
    common::send_signal(holder.0.id(), libc::SIGTERM);
    assert!(common::wait_unless_hung(&mut waiter.0).success(), "a head that never acts stalled the queue");
    drop(forger);
}

/// Issue 51 (1): a ticket of another user (uid 4242) written as a real one, listing this
/// machine's GPUs with the right mask, whose FIFO is held open and kept "read" (its access
/// time set, as gpurun's reader does), was a trusted head for ever: on an idle machine the
/// waiters behind it started only when their --wait ran out. A head that could start and
/// has not taken its GPUs within a few seconds holds nothing; the waiter behind says so and
/// starts. One that asks for one GPU of two (the issue's case), and one that asks for both.
#[test]
fn a_forged_head_that_reads_its_fifo_does_not_hold_free_gpus() {
    for count in ["1", "2"] {
        let sim = two_gpus();
        sim.gpurun().args(["--", "true"]).run().status(0);
        let lock_dir = sim.lock_dir();
        let dir = lock_dir.display().to_string();
        let script = format!(
            "n=$(date +%s%N); t=\"{dir}/ticket.$(printf %020d $n).$$.0000000000000003\"; \
             w=\"{dir}/wake.$(printf %020d $n).$$\"; mkfifo -m 0622 \"$w\" || exit 1; \
             printf '{{\"pid\":%d,\"uid\":4242,\"user\":\"u4242\",\"since_ns\":%s,\
             \"gpus\":[\"GPU-22220000-0000-4000-8000-000000000000\",\"GPU-22220000-0000-4000-8000-000000000001\"],\
             \"request\":\"--gpus {count}\",\"needs\":{{\"count\":\"{count}\",\"min_free\":null,\"max_util\":null,\
             \"exclusive\":true,\"policy\":\"most-free\"}}}}' $$ $n > \"$t\"; exec 3<>\"$w\"; \
             (while :; do touch -a \"$w\"; sleep 0.2; done) & exec flock -x \"$t\" sleep 600"
        );
        let forger = background(sim.gpurun_command(
            "setpriv",
            &["--reuid=4242", "--regid=4242", "--clear-groups", "sh", "-c", &script],
        ));
        if !wait_until(Duration::from_secs(5), || planted_and_locked(&lock_dir, ".0000000000000003")) {
            return common::skip(
                "a forged head that reads its FIFO",
                "setpriv, mkfifo or flock is unavailable",
            );
        }
        let outcome = sim
            .gpurun()
            .args(["--exclusive", "--gpus", "1", "--wait=50s", "--", "echo", "started"])
            .run_unless_hung();
        assert_eq!(outcome.status(0).stdout, "started\n", "--gpus {count}: {outcome:?}");
        if count == "2" {
            outcome.stderr_has("passing over the waiter ahead, PID").stderr_has("of user u4242");
        }
        drop(forger);
    }
}

/// Issue 65: a GPU name with control characters (a driver's, or a scenario's) is written out,
/// as `--list` already did, in `--dry-run`, `--doctor`, the launch's log and `--report`: it adds
/// no line and sends no escape sequence to the terminal that shows it.
#[test]
fn control_characters_in_a_gpu_name_are_written_out_everywhere() {
    let text = scenario_file("two_idle.toml");
    let evil = text.replacen("name = \"", "name = \"Evil\\u001b[2J\\nGPU 9 FREE ", 1);
    assert_ne!(evil, text, "the scenario names its GPUs");
    let sim = Sim::new(&evil);
    let outcomes = [
        sim.gpurun().args(["--dry-run", "--devices", "0", "--", "true"]).run(),
        sim.gpurun().args(["--doctor"]).run(),
        sim.gpurun().args(["--devices", "0", "--report", "--", "true"]).run(),
    ];
    for outcome in &outcomes {
        for output in [&outcome.stdout, &outcome.stderr] {
            assert!(!output.contains('\x1b'), "{output}");
            assert!(!output.lines().any(|line| line.starts_with("GPU 9 FREE")), "{output}");
        }
        let said = format!("{}{}", outcome.stdout, outcome.stderr);
        assert!(said.contains(r"Evil\x1b[2J\nGPU 9 FREE"), "{said}");
    }
}
