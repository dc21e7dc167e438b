//! Launch and supervision (DESIGN 6 and 7) through the real binary: exit status, die-by-signal,
//! 125/126/127, signal forwarding exactly once, the caller's signal state, parent death, orphan
//! cleanup, shebang use, --exec, and the child's environment.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{alive, default_scenario, recorder, send_signal, wait_until, Outcome, Sim, GPURUN};

const LONG: Duration = Duration::from_secs(10);

#[test]
fn exit_codes_0_to_255_pass_through() {
    let sim = Sim::new(&default_scenario());
    for code in 0..=255 {
        let outcome = sim.gpurun().args(["-q", "--", "sh", "-c", &format!("exit {code}")]).run();
        assert_eq!(outcome.code, Some(code), "exit {code}: {outcome:#?}");
    }
}

fn status_of(sim: &Sim, args: &[&str]) -> ExitStatus {
    sim.gpurun().args(args).command.stdin(Stdio::null()).stderr(Stdio::null()).status().expect("run gpurun")
}

#[test]
fn a_child_killed_by_a_signal_kills_gpurun_by_the_same_signal() {
    let sim = Sim::new(&default_scenario());
    for (name, number) in [("KILL", libc::SIGKILL), ("TERM", libc::SIGTERM), ("INT", libc::SIGINT)] {
        let status = status_of(&sim, &["--", "sh", "-c", &format!("kill -s {name} $$")]);
        assert_eq!(status.signal(), Some(number), "{name}: {status:?}");
        assert!(!status.core_dumped(), "{name}");
    }
}

#[test]
fn gpurun_disables_its_own_core_dump_before_dying_by_the_childs_signal() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let mut run = sim.gpurun().args(["--", "sh", "-c", "ulimit -c 0; kill -s QUIT $$"]);
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit is async-signal-safe; it only raises gpurun's own core limit.
    unsafe {
        run.command.current_dir(dir.path()).pre_exec(move || {
            libc::setrlimit(libc::RLIMIT_CORE, &unlimited);
            Ok(())
        });
    }
    let status = run.command.stderr(Stdio::null()).status().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGQUIT));
    assert!(!status.core_dumped(), "gpurun dumped core");
}

#[test]
fn own_failures_are_125_126_127_and_no_child_starts_after_a_usage_error() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    sim.gpurun().args(["--min-free", "lots"]).args(touch).run().status(125);
    sim.gpurun().args(["--bogus"]).args(touch).run().status(125);
    // No state of this machine can meet it: refused at once, not "try later".
    sim.gpurun()
        .args(["--gpus", "9"])
        .args(touch)
        .run()
        .status(125)
        .stderr_has("--gpus 9: this machine has 8 GPUs");
    // Four GPUs could have 70 GiB free, three have it now: try later.
    sim.gpurun().args(["--gpus", "4", "--min-free", "70G"]).args(touch).run().status(75);
    assert!(!marker.exists(), "the child ran after an error");

    sim.gpurun()
        .args(["--", "no-such-command-gpurun"])
        .run()
        .status(127)
        .stderr_has("gpurun: no-such-command-gpurun: command not found");
    // `-- python` where only python3 is on PATH: the name that is there, said.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/true", bin.join("gpurun-probe3")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    sim.gpurun()
        .env("PATH", path)
        .args(["--", "gpurun-probe"])
        .run()
        .status(127)
        .stderr_has("gpurun: gpurun-probe: command not found (gpurun-probe3 is: -- gpurun-probe3 ...)");
    let not_executable = dir.path().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\necho hi\n").unwrap();
    sim.gpurun()
        .args([not_executable.as_os_str()])
        .run()
        .status(126)
        .stderr_has("cannot execute: Permission denied");
    sim.gpurun().args(["--", "/"]).run().status(126);

    let broken = Sim::new(&common::scenario_file("driver_not_loaded.toml"));
    broken.gpurun().args(touch).run().status(125).stderr_has("driver is not loaded");
    assert!(!marker.exists());
}

#[test]
fn stdout_belongs_to_the_child_and_the_environment_passes_byte_for_byte() {
    let sim = Sim::new(&default_scenario());
    let non_utf8 = std::ffi::OsStr::from_bytes(b"caf\xe9 \xff\xfe");
    let output = sim
        .gpurun()
        .env("ODD_VALUE", non_utf8)
        .env("TF_FORCE_GPU_ALLOW_GROWTH", "false")
        .args(["--gpus", "2", "--", "sh", "-c"])
        .args(["printf '%s|%s|%s|%s|%s|%s' \"$ODD_VALUE\" \"$CUDA_VISIBLE_DEVICES\" \"$CUDA_DEVICE_ORDER\" \"$GPURUN_GPUS\" \"$TF_FORCE_GPU_ALLOW_GROWTH\" \"$XLA_PYTHON_CLIENT_PREALLOCATE\""])
        .command
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mut expected = non_utf8.as_bytes().to_vec();
    expected.extend_from_slice(b"|3,2|PCI_BUS_ID|3,2|false|false");
    assert_eq!(output.stdout, expected);
}

#[test]
fn a_cuda_program_lands_on_the_chosen_gpus() {
    let sim = Sim::new(&default_scenario());
    let outcome =
        sim.gpurun().args(["--gpus", "2", "--min-free", "8G", "--"]).args([common::sim_cuda()]).run();
    let report: serde_json::Value = serde_json::from_str(outcome.status(0).stdout.trim()).unwrap();
    let landed: Vec<u64> =
        report["devices"].as_array().unwrap().iter().map(|d| d["nvml_index"].as_u64().unwrap()).collect();
    assert_eq!(landed, vec![3, 2]);
    outcome
        .stderr_has("running ")
        .stderr_has("on GPU 3 (NVIDIA A100-SXM4-80GB), GPU 2 (NVIDIA A100-SXM4-80GB)");
}

/// gpurun running recorder.py, with the recorder's "ready" line read.
struct Recorded {
    gpurun: Child,
    log: PathBuf,
    child_pid: u32,
    /// The recorder, for the cleanup: by then its PID may be another process's.
    child: Option<common::PidFd>,
    _dir: tempfile::TempDir,
}

impl Recorded {
    fn start(sim: &Sim, gpurun_args: &[&str], recorder_args: &[&str]) -> Recorded {
        Recorded::start_with(sim, gpurun_args, recorder_args, |_| {})
    }

    fn start_with(
        sim: &Sim,
        gpurun_args: &[&str],
        recorder_args: &[&str],
        adjust: impl FnOnce(&mut Command),
    ) -> Recorded {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("signals.log");
        let mut run = sim
            .gpurun()
            .args(["-q"])
            .args(gpurun_args)
            .args(["--", "python3"])
            .args([recorder()])
            .args([&log]);
        run.command.args(recorder_args).stdin(Stdio::null()).stdout(Stdio::piped());
        adjust(&mut run.command);
        let mut gpurun = run.command.spawn().expect("start gpurun");
        let mut line = String::new();
        BufReader::new(gpurun.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let child_pid = line
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("recorder said {line:?}"));
        // Alive now: it has just said it is ready, and gpurun has not reaped it.
        let child = common::PidFd::open(child_pid);
        Recorded { gpurun, log, child_pid, child, _dir: dir }
    }

    fn received(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    fn count(&self, name: &str) -> usize {
        self.received().iter().filter(|n| *n == name).count()
    }

    fn stop(mut self) -> ExitStatus {
        let mut stop = self.log.clone().into_os_string();
        stop.push(".stop");
        std::fs::write(stop, "").unwrap();
        let finished = wait_until(LONG, || self.gpurun.try_wait().unwrap().is_some());
        assert!(finished, "gpurun did not end");
        self.gpurun.wait().unwrap()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // Through its pidfd: a recorder that outlived gpurun (--parent-death-signal none or
        // USR1) would hold the suite's output pipe open, and a PID may be reused by now.
        if let Some(child) = &self.child {
            child.kill();
        }
        let _ = self.gpurun.kill();
        let _ = self.gpurun.wait();
    }
}

#[test]
fn every_signal_sent_to_gpurun_reaches_the_child_exactly_once() {
    let sim = Sim::new(&default_scenario());
    let recorded = Recorded::start(&sim, &[], &[]);
    let gpurun = recorded.gpurun.id();
    let rtmin = libc::SIGRTMIN();
    let signals: Vec<(&str, i32)> = vec![
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("PIPE", libc::SIGPIPE),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
        ("CONT", libc::SIGCONT),
        ("TSTP", libc::SIGTSTP),
        ("TTIN", libc::SIGTTIN),
        ("TTOU", libc::SIGTTOU),
        ("URG", libc::SIGURG),
        ("XCPU", libc::SIGXCPU),
        ("XFSZ", libc::SIGXFSZ),
        ("VTALRM", libc::SIGVTALRM),
        ("PROF", libc::SIGPROF),
        ("WINCH", libc::SIGWINCH),
        ("IO", libc::SIGIO),
        ("PWR", libc::SIGPWR),
        ("RTMIN+0", rtmin),
        ("RTMIN+3", rtmin + 3),
    ];
    for (name, number) in &signals {
        send_signal(gpurun, *number);
        assert!(
            wait_until(LONG, || recorded.count(name) >= 1),
            "{name} did not reach the child: {:?}",
            recorded.received()
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    for (name, _) in &signals {
        assert_eq!(recorded.count(name), 1, "{name}: {:?}", recorded.received());
    }
    assert_eq!(recorded.received().len(), signals.len(), "{:?}", recorded.received());
    assert_eq!(recorded.stop().code(), Some(0));
}

#[test]
fn signals_sent_by_the_child_are_not_sent_back() {
    let sim = Sim::new(&default_scenario());
    let recorded = Recorded::start(&sim, &[], &["--signal-parent", "USR1"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(recorded.count("USR1"), 0, "{:?}", recorded.received());
    assert!(alive(recorded.gpurun.id()), "gpurun must not die from its child's signal");
    send_signal(recorded.gpurun.id(), libc::SIGUSR1);
    assert!(wait_until(LONG, || recorded.count("USR1") == 1));
    assert_eq!(recorded.stop().code(), Some(0));
}

#[test]
fn no_forward_keeps_a_signal_from_the_child_and_gpurun_survives_it() {
    let sim = Sim::new(&default_scenario());
    let recorded = Recorded::start(&sim, &["--no-forward", "TERM,SIGUSR2"], &[]);
    send_signal(recorded.gpurun.id(), libc::SIGTERM);
    send_signal(recorded.gpurun.id(), libc::SIGUSR2);
    send_signal(recorded.gpurun.id(), libc::SIGHUP);
    assert!(wait_until(LONG, || recorded.count("HUP") == 1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(recorded.received(), vec!["HUP"]);
    assert_eq!(recorded.stop().code(), Some(0));
}

#[test]
fn gpurun_waits_for_the_child_after_forwarding_and_takes_its_status() {
    let sim = Sim::new(&default_scenario());
    let mut recorded = Recorded::start(&sim, &[], &["--exit-on", "TERM"]);
    send_signal(recorded.gpurun.id(), libc::SIGTERM);
    assert!(wait_until(LONG, || recorded.gpurun.try_wait().unwrap().is_some()));
    let status = recorded.gpurun.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert_eq!(recorded.received(), vec!["TERM"]);
}

#[test]
fn kill_after_ends_a_child_that_ignores_term() {
    let sim = Sim::new(&default_scenario());
    // The recorder records TERM and keeps running: it "ignores" it.
    let mut recorded = Recorded::start(&sim, &["--kill-after", "300ms"], &["--signals", "TERM"]);
    send_signal(recorded.gpurun.id(), libc::SIGTERM);
    assert!(wait_until(LONG, || recorded.gpurun.try_wait().unwrap().is_some()), "no SIGKILL came");
    assert_eq!(recorded.gpurun.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert_eq!(recorded.received(), vec!["TERM"]);

    // Without --kill-after gpurun keeps waiting.
    let patient = Recorded::start(&sim, &[], &["--signals", "TERM"]);
    send_signal(patient.gpurun.id(), libc::SIGTERM);
    assert!(wait_until(LONG, || patient.count("TERM") == 1));
    std::thread::sleep(Duration::from_millis(600));
    assert!(alive(patient.child_pid) && alive(patient.gpurun.id()));
    assert_eq!(patient.stop().code(), Some(0));
}

/// A command that signals its own process group (`kill -TERM 0`, as shells and launchers do
/// to end their children) reaches gpurun too; gpurun drops it (the command's own) and starts
/// no --kill-after countdown: the command, which ignores TERM, is not SIGKILLed (issue 44).
#[test]
fn a_commands_signal_to_its_own_group_starts_no_kill_after() {
    let sim = Sim::new(&default_scenario());
    let mut run = sim.gpurun().args([
        "-q",
        "--kill-after",
        "300ms",
        "--",
        "sh",
        "-c",
        "trap '' TERM; kill -TERM 0; sleep 1.2; exit 7",
    ]);
    // A group of its own: `kill -TERM 0` must not reach the test harness.
    std::os::unix::process::CommandExt::process_group(&mut run.command, 0);
    // Exit 7 is the end of its course: a SIGKILL after --kill-after would have ended it first.
    run.run_unless_hung().status(7);
}

/// SigIgn/SigBlk of a process, from /proc.
fn signal_sets(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    (field("SigIgn:"), field("SigBlk:"))
}

fn bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

/// Signals 32 and 33 belong to glibc (thread cancellation, setxid): a process cannot change
/// them, and some launchers start everything with them ignored. They are not compared.
const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);

#[test]
fn the_child_starts_with_the_callers_ignored_signals_and_mask() {
    let sim = Sim::new(&default_scenario());
    let mut run = sim.gpurun().args(["-q", "--", "cat", "/proc/self/status"]);
    // SAFETY: signal and sigprocmask are async-signal-safe.
    unsafe {
        run.command.pre_exec(|| {
            libc::signal(libc::SIGUSR1, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let output = run.command.output().unwrap();
    assert!(output.status.success());
    let (ignored, blocked) = signal_sets(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(ignored & !GLIBC_INTERNAL, bit(libc::SIGUSR1) | bit(libc::SIGHUP), "SigIgn {ignored:x}");
    assert_eq!(blocked, bit(libc::SIGUSR2), "SigBlk {blocked:x}");

    // And with nothing ignored or blocked, nothing of gpurun's own blocking leaks.
    let clean = sim.gpurun().args(["-q", "--", "cat", "/proc/self/status"]).command.output().unwrap();
    let (ignored, blocked) = signal_sets(&String::from_utf8_lossy(&clean.stdout));
    assert_eq!((ignored & !GLIBC_INTERNAL, blocked), (0, 0));
}

#[test]
fn the_callers_ignored_signals_reach_the_child_however_long_its_status_is() {
    // /proc/PID/status lists the supplementary groups before SigIgn: 3000 of them make that
    // line some 15 KB, past any single read a fixed buffer would take.
    if !nix::unistd::geteuid().is_root() {
        return common::skip("a caller in 3000 groups", "setgroups needs root");
    }
    let sim = Sim::new(&default_scenario());
    let groups: Vec<libc::gid_t> = (10_000..13_000).collect();
    let mut run = sim.gpurun().args(["-q", "--", "cat", "/proc/self/status"]);
    // SAFETY: setgroups and signal are async-signal-safe; the array was made before the fork.
    unsafe {
        run.command.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The one gpurun must change for itself (it reaps) and give the command back.
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    // Bounded: a gpurun that missed the caller's ignored SIGCHLD would wait for ever for a
    // child the kernel reaped for it.
    let child = run.command.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let waited = std::thread::spawn(move || child.wait_with_output().unwrap());
    if !wait_until(Duration::from_secs(20), || waited.is_finished()) {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("gpurun did not end: it missed the caller's ignored SIGCHLD");
    }
    let output = waited.join().unwrap();
    assert!(output.status.success(), "{output:?}");
    let status = String::from_utf8_lossy(&output.stdout);
    assert!(status.lines().find(|l| l.starts_with("Groups:")).unwrap().len() > 10_000);
    let (ignored, _) = signal_sets(&status);
    assert_eq!(ignored & !GLIBC_INTERNAL, bit(libc::SIGCHLD), "SigIgn {ignored:x}");
}

#[test]
fn a_signal_the_caller_ignored_stays_ignored_in_gpurun_too() {
    let sim = Sim::new(&default_scenario());
    let recorded = Recorded::start_with(&sim, &[], &[], |command| {
        // SAFETY: signal is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                Ok(())
            });
        }
    });
    let status = std::fs::read_to_string(format!("/proc/{}/status", recorded.gpurun.id())).unwrap();
    assert_ne!(signal_sets(&status).0 & bit(libc::SIGUSR1), 0, "gpurun caught an ignored signal");
    send_signal(recorded.gpurun.id(), libc::SIGUSR1);
    send_signal(recorded.gpurun.id(), libc::SIGUSR2);
    assert!(wait_until(LONG, || recorded.count("USR2") == 1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(recorded.received(), vec!["USR2"]);
    assert_eq!(recorded.stop().code(), Some(0));
}

#[test]
fn parent_death_signal() {
    let sim = Sim::new(&default_scenario());
    for (args, expected) in [
        (&[][..], Some("TERM")),
        (&["--parent-death-signal", "USR1"][..], Some("USR1")),
        (&["--parent-death-signal", "none"][..], None),
    ] {
        let mut recorded = Recorded::start(&sim, args, &["--exit-on", "TERM", "--signals", "TERM,USR1"]);
        recorded.gpurun.kill().unwrap();
        recorded.gpurun.wait().unwrap();
        match expected {
            Some(name) => {
                assert!(wait_until(LONG, || recorded.count(name) == 1), "{args:?}: {:?}", recorded.received())
            }
            None => {
                std::thread::sleep(Duration::from_millis(500));
                assert!(recorded.received().is_empty());
                assert!(alive(recorded.child_pid), "the child died without a parent-death signal");
            }
        }
    }
}

fn orphan_pid(stdout: &[u8]) -> u32 {
    String::from_utf8_lossy(stdout).trim().parse().unwrap_or_else(|_| panic!("no PID in {stdout:?}"))
}

#[test]
fn orphans_are_ended_when_the_command_exits() {
    let sim = Sim::new(&default_scenario());
    let output = sim
        .gpurun()
        .args(["--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        .command
        .output()
        .unwrap();
    assert!(output.status.success());
    let orphan = orphan_pid(&output.stdout);
    assert!(!alive(orphan), "orphan {orphan} still running");
    assert!(String::from_utf8_lossy(&output.stderr).contains("left 1 process running"));

    // One that ignores SIGTERM gets SIGKILL after the grace period.
    let stubborn = sim
        .gpurun()
        // The subshell reports once its TERM is ignored, so gpurun's SIGTERM cannot come first.
        .args([
            "--",
            "sh",
            "-c",
            "f=$(mktemp); (trap '' TERM; echo x > \"$f\"; exec sleep 300) >/dev/null 2>&1 & \
             while [ ! -s \"$f\" ]; do sleep 0.01; done; rm -f \"$f\"; echo $!",
        ])
        .command
        .output()
        .unwrap();
    let orphan = orphan_pid(&stubborn.stdout);
    assert!(!alive(orphan));
    assert!(String::from_utf8_lossy(&stubborn.stderr).contains("sending SIGKILL"));
}

#[test]
fn keep_orphans_leaves_them() {
    let sim = Sim::new(&default_scenario());
    let output = sim
        .gpurun()
        .args(["--keep-orphans", "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        .command
        .output()
        .unwrap();
    let orphan = orphan_pid(&output.stdout);
    assert!(alive(orphan), "--keep-orphans did not keep the orphan");
    send_signal(orphan, libc::SIGKILL);
}

fn executable(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn shebang_direct_and_env_s_forms() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let body = "echo \"cvd=$CUDA_VISIBLE_DEVICES args=$*\"\n";
    let direct = executable(dir.path(), "direct", &format!("#!{GPURUN} -q --gpus 2 -- /bin/sh\n{body}"));
    let quoted =
        executable(dir.path(), "quoted", &format!("#!{GPURUN} -q --model 'NVIDIA H100' -- /bin/sh\n{body}"));
    let env_s = executable(
        dir.path(),
        "env_s",
        &format!("#!/usr/bin/env -S gpurun -q --devices 6 -- /bin/sh\n{body}"),
    );
    // The kernel ends the interpreter at a tab too, and the text need not start with an option.
    let tabbed = executable(dir.path(), "tabbed", &format!("#!{GPURUN}\t-q --gpus 2\t-- /bin/sh\n{body}"));
    let bare = executable(dir.path(), "bare", &format!("#!{GPURUN} /bin/sh -e\n{body}"));
    let path = format!(
        "{}:{}",
        Path::new(GPURUN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (script, expected) in [
        (&direct, "cvd=3,2 args=a b"),
        (&quoted, "cvd=5 args=a b"),
        (&env_s, "cvd=6 args=a b"),
        (&tabbed, "cvd=3,2 args=a b"),
        (&bare, "cvd=3 args=a b"),
    ] {
        let outcome = sim.gpurun_command(script.to_str().unwrap(), &["a", "b"]).env("PATH", &path).run();
        assert_eq!(outcome.status(0).stdout.trim(), expected, "{}", script.display());
    }
}

#[test]
fn exec_replaces_gpurun() {
    let sim = Sim::new(&default_scenario());
    let child = sim
        .gpurun()
        .args(["-q", "--exec", "--", "sh", "-c", "echo $$ $CUDA_VISIBLE_DEVICES"])
        .command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), format!("{pid} 3"));
    sim.gpurun().args(["--exec", "--", "no-such-command-gpurun"]).run().status(127);
}

#[test]
fn as_pid_1_it_exits_128_plus_n() {
    let sim = Sim::new(&default_scenario());
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).output();
    match probe {
        Ok(output) if output.status.success() => {}
        other => {
            common::skip(
                "as_pid_1_it_exits_128_plus_n",
                &format!("`unshare --pid` is not permitted here ({other:?})"),
            );
            return;
        }
    }
    let outcome = sim
        .gpurun_command(
            "unshare",
            &[
                "--pid",
                "--fork",
                "--mount-proc",
                GPURUN,
                "-q",
                "--",
                "sh",
                "-c",
                "sleep 30 & kill -s TERM $$",
            ],
        )
        .run();
    // Default actions do not apply to PID 1: gpurun survives its own raise and exits 128+15,
    // after ending the orphaned sleep.
    outcome.status(143);
}

#[test]
fn gpus_0_needs_no_nvml() {
    let sim = Sim::new(&default_scenario());
    let outcome = sim
        .gpurun()
        .env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["--gpus", "0", "--", "sh", "-c", "printf '[%s]' \"${CUDA_VISIBLE_DEVICES-unset}\"; exit 3"])
        .run();
    assert_eq!(outcome.status(3).stdout, "[]");
    // With a GPU asked for, the missing library is the error it always was.
    sim.gpurun()
        .env("GPURUN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["--", "true"])
        .run()
        .status(125);
}

#[test]
fn cpu_bind_numa_runs_the_command_on_its_gpus_cpus_within_its_own() {
    // GPU 3's local CPU is 1, GPU 5's are 16-31: none of them on this two-CPU test machine.
    let scenario = common::default_scenario().replacen("cpu_affinity = \"16-31\"", "cpu_affinity = \"1\"", 2);
    let sim = Sim::new(&scenario);
    let allowed = |args: &[&str]| -> (String, String) {
        let outcome = sim
            .gpurun_command("taskset", &["-c", "0-1", &common::gpurun_binary()])
            .args(args)
            .args(["--", "grep", "Cpus_allowed_list", "/proc/self/status"])
            .run();
        let line = outcome.status(0).stdout.trim().rsplit('\t').next().unwrap_or_default().to_owned();
        (line, outcome.stderr.clone())
    };
    if common::available_cpus() < 2 {
        common::skip("cpu_bind_numa", "fewer than two CPUs here");
        return;
    }
    assert_eq!(allowed(&["--devices", "3"]).0, "0-1", "without --cpu-bind the inherited CPUs");
    let (bound, said) = allowed(&["--devices", "3", "--cpu-bind", "numa", "--report"]);
    assert_eq!(bound, "1", "{said}");
    assert!(said.contains("  cpus:         1"), "{said}");
    // No overlap with gpurun's own CPUs: a warning, and the inherited ones.
    let (kept, said) = allowed(&["--devices", "4", "--cpu-bind", "numa"]);
    assert_eq!(kept, "0-1");
    assert!(
        said.contains("--cpu-bind numa: the GPUs' local CPUs (32-47) are all outside gpurun's own (0-1)"),
        "{said}"
    );
    let plan = sim.gpurun().args(["--dry-run", "--json", "--devices", "3", "--cpu-bind", "numa"]).run();
    assert!(plan.json()["cpus"].is_string(), "{}", plan.stdout);
}

/// A stop right after a continue is followed, not undone: the shell's `fg` continues the whole
/// process group, and the next Ctrl-Z may come at once. gpurun used to decide, as it resumed,
/// whether to continue the command itself, and that SIGCONT could land after the new stop (seen
/// as a Ctrl-Z that did nothing). Here the group is continued and the command stopped again
/// back to back, five times: each time both end up stopped, and stay so.
#[test]
fn a_stop_right_after_a_continue_is_followed_not_undone() {
    let sim = Sim::new(&default_scenario());
    let recorded = Recorded::start_with(&sim, &[], &["--signals", "CONT"], |command| {
        command.process_group(0);
    });
    let (child, gpurun) = (recorded.child_pid, recorded.gpurun.id());
    let state = |pid| common::state(pid);
    let both_stopped = || state(child) == Some('T') && state(gpurun) == Some('T');
    send_signal(child, libc::SIGSTOP);
    assert!(wait_until(LONG, both_stopped), "gpurun did not follow the first stop");
    for round in 1..=5 {
        // As a shell's fg, then someone's SIGSTOP on its heels.
        send_signal(gpurun, libc::SIGCONT);
        send_signal(child, libc::SIGCONT);
        send_signal(child, libc::SIGSTOP);
        assert!(wait_until(LONG, both_stopped), "round {round}: {:?} {:?}", state(child), state(gpurun));
        std::thread::sleep(Duration::from_millis(300));
        assert!(both_stopped(), "round {round}: undone: {:?} {:?}", state(child), state(gpurun));
    }
    // SAFETY: kill has no memory effects; -PID is gpurun's process group, as a shell's fg.
    unsafe { libc::kill(-(gpurun as i32), libc::SIGCONT) };
    assert!(wait_until(LONG, || matches!(state(child), Some('S' | 'R'))
        && matches!(state(gpurun), Some('S' | 'R'))));
    assert_eq!(recorded.stop().code(), Some(0));
}

/// Issue 52 (1): `--time-limit`, as timeout(1): the command gets --signal (TERM) at the limit,
/// SIGKILL --kill-after later if it is still running; gpurun exits 124 (137 where the SIGKILL
/// ended it), and the report and the history say time-limit.
#[test]
fn a_time_limit_ends_the_command_as_timeout_does() {
    let sim = Sim::new(&default_scenario());
    let report = sim.dir.path().join("report.json");
    let outcome = sim
        .gpurun()
        .args(["--time-limit", "1s", "--report-json"])
        .arg(&report)
        .args(["--", "sleep", "30"])
        .run();
    outcome
        .status(124)
        .stderr_has("gpurun: warning: the command reached --time-limit 1s and was sent SIGTERM");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let kinds: Vec<&str> =
        json["diagnosis"].as_array().unwrap().iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains(&"time-limit"), "{json}");
    assert_eq!(json["gpurun_exit_status"], 124, "{json}");
    let history = sim.gpurun().args(["--history", "--json"]).run().status(0).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert!(last["diagnosis"].as_array().unwrap().iter().any(|d| d["kind"] == "time-limit"), "{last}");
    // Its own signal, whatever the command then does with it.
    let trapped = "trap 'exit 7' INT; sleep 30 & wait";
    sim.gpurun()
        .args(["-q", "--time-limit", "1s", "--signal", "INT", "--", "sh", "-c", trapped])
        .run()
        .status(124);
    // A command that ignores it: the SIGKILL after --kill-after, and 128+9.
    let deaf = "trap '' TERM; sleep 30";
    let killed =
        sim.gpurun().args(["--time-limit", "1s", "--kill-after", "1s", "--", "sh", "-c", deaf]).run();
    killed.status(137).stderr_has("SIGKILL follows in 1 s");
    // A command that ends in time keeps its own status; 0 is no limit, as for timeout(1).
    sim.gpurun().args(["-q", "--time-limit", "30s", "--", "sh", "-c", "exit 3"]).run().status(3);
    sim.gpurun().args(["-q", "--time-limit", "0", "--", "true"]).run().status(0);
    // From a configuration file, as every option.
    let config = sim.dir.path().join("limit.toml");
    std::fs::write(&config, "time-limit = \"1s\"\n").unwrap();
    sim.gpurun().env("GPURUN_CONFIG", &config).args(["-q", "--", "sleep", "30"]).run().status(124);
    // --signal alone, or with --exec (nothing would be left to end the command), is refused.
    sim.gpurun().args(["--signal", "INT", "--", "true"]).run().status(125).stderr_has("--time-limit");
    sim.gpurun()
        .args(["--time-limit", "1s", "--exec", "--", "true"])
        .run()
        .status(125)
        .stderr_has("'--time-limit <DURATION>' cannot be used with '--exec'");
    sim.gpurun()
        .args(["--time-limit", "soon", "--", "true"])
        .run()
        .status(125)
        .stderr_has("\"soon\" is not a duration");
}

/// The house rule max-time-limit: a longer --time-limit is refused at once (125, naming the
/// rule); none given is the rule's; --exec is refused under it.
#[test]
fn the_house_rule_max_time_limit_bounds_every_run() {
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "[limits]\nmax-time-limit = \"1s\"\n").unwrap();
    sim.gpurun()
        .args(["--time-limit", "5s", "--", "true"])
        .run()
        .status(125)
        .stderr_has("--time-limit 5s: the house rule max-time-limit = 1s (")
        .stderr_has("[limits]) ends every run by then");
    sim.gpurun()
        .args(["--", "sleep", "30"])
        .run()
        .status(124)
        .stderr_has("the command reached the house rule max-time-limit = 1s (")
        .stderr_has("and was sent SIGTERM; SIGKILL follows in 10 s");
    sim.gpurun().args(["--exec", "--", "true"]).run().status(125).stderr_has("needs gpurun to stay");
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("max-time-limit = 1s");
    // A dry run and an export answer as the launch would.
    for mode in ["--dry-run", "--export"] {
        sim.gpurun()
            .args([mode, "--time-limit", "5s"])
            .run()
            .status(125)
            .stderr_has("ends every run by then");
    }
}

/// Issue 65: the command line cannot loosen a house rule that ends runs. Under max-time-limit
/// the run gets SIGTERM at the rule's time and SIGKILL after the rule's kill-after, whatever
/// `--signal` and `--kill-after` say and whether the command traps TERM; "0" is no limit, as
/// `--time-limit 0` is; and a run that ended while gpurun was stopped past the rule is
/// recorded as limited (it ran on while nothing could end it).
#[test]
fn a_house_rule_that_ends_runs_cannot_be_loosened_from_the_command_line() {
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "[limits]\nmax-time-limit = \"2s\"\nkill-after = \"1s\"\n").unwrap();
    // A user's own --signal WINCH at 1 s, which sleep ignores: the rule's TERM at 2 s ends it.
    sim.gpurun()
        .args(["--time-limit", "1s", "--signal", "WINCH", "--", "sleep", "30"])
        .run_unless_hung()
        .status(124)
        .stderr_has("the command reached --time-limit 1s and was sent SIGWINCH")
        .stderr_has("the command reached the house rule max-time-limit = 2s (");
    // A command that ignores TERM, and no --kill-after: the rule's SIGKILL 1 s later (128+9).
    sim.gpurun()
        .args(["--", "sh", "-c", "trap '' TERM; sleep 30"])
        .run_unless_hung()
        .status(137)
        .stderr_has("SIGKILL follows in 1 s")
        .stderr_has("at the end of the house rule's grace: sending SIGKILL");
    // kill-after shows among the rules.
    sim.gpurun().args(["--list"]).run().status(0).stdout_has("kill-after = 1s");
    // "0" is no limit.
    std::fs::write(sim.system_file(), "[limits]\nmax-time-limit = \"0\"\n").unwrap();
    sim.gpurun().args(["-q", "--", "sh", "-c", "sleep 1; exit 3"]).run().status(3);
}

/// Issue 65: a gpurun stopped (SIGSTOP) cannot hold the house rule's deadline off: the kernel
/// continues it then (a timer's SIGCONT, which a stopped process takes even while it blocks
/// it), and it ends the command by the rule, 124, while the command still runs.
#[test]
fn a_gpurun_stopped_past_the_rule_is_woken_to_end_the_command() {
    if !Path::new("/proc/self/timers").exists() {
        return common::skip(
            "a stopped gpurun woken by its timer",
            "no /proc/PID/timers (CONFIG_CHECKPOINT_RESTORE)",
        );
    }
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "[limits]\nmax-time-limit = \"2s\"\n").unwrap();
    let mut child = sim
        .gpurun()
        .args(["--", "sleep", "600"])
        .command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Stopped once the command runs, before the deadline, and continued by nobody: only the
    // rule's own wake-up can end the run (else it is hung, and the test says so).
    // Once the rule's wake-up is armed (the kernel lists a process's POSIX timers in
    // /proc/PID/timers, with their signal): supervision has begun.
    let timers = format!("/proc/{pid}/timers");
    let armed =
        || std::fs::read_to_string(&timers).is_ok_and(|t| t.contains(&format!("signal: {}/", libc::SIGCONT)));
    assert!(wait_until(common::HANG, armed), "no wake-up timer: {:?}", std::fs::read_to_string(&timers));
    send_signal(pid, libc::SIGSTOP);
    let status = common::wait_unless_hung(&mut child);
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("the command reached the house rule max-time-limit = 2s"), "{stderr}");
    assert!(!stderr.contains("ran past"), "the rule waited for someone's SIGCONT: {stderr}");
}

/// Issue 63 (1): a launch asks NVML only what its request needs (on a real driver memory
/// affinity costs 11.7 ms a GPU, power and temperature 1.7 ms): the NUMA placement only for
/// `--cpu-bind numa` and what shows it, the sensors only for what shows them. Counted in the
/// simulator's call log.
#[test]
fn a_launch_asks_nvml_only_what_its_request_needs() {
    let sim = Sim::new(&default_scenario());
    let calls_of = |args: &[&str]| -> Vec<String> {
        let log = sim.dir.path().join(format!("calls-{}.log", args.join("_").replace('/', "")));
        sim.gpurun().env("NVML_SIM_CALL_LOG", &log).args(args).run();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().filter_map(|line| line.split(' ').nth(1).map(str::to_owned)).collect()
    };
    let asked = |calls: &[String], call: &str| calls.iter().any(|c| c == call);
    let placement = ["nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetNumaNodeId"];
    let sensors = ["nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage"];
    let export = calls_of(&["--export"]);
    assert!(asked(&export, "nvmlDeviceGetUtilizationRates"), "{export:?}");
    for call in placement.iter().chain(&sensors) {
        assert!(!asked(&export, call), "--export asked {call}");
    }
    let launch = calls_of(&["-q", "--gpus", "1", "--", "true"]);
    for call in placement {
        assert!(!asked(&launch, call), "a plain launch asked {call}");
    }
    assert!(!asked(&launch, "nvmlDeviceGetTemperature"), "a plain launch asked the temperature");
    let bound = calls_of(&["-q", "--gpus", "1", "--cpu-bind", "numa", "--", "true"]);
    assert!(
        asked(&bound, "nvmlDeviceGetMemoryAffinity") && asked(&bound, "nvmlDeviceGetCpuAffinity"),
        "{bound:?}"
    );
    let listing = calls_of(&["--list"]);
    for call in placement.iter().chain(&sensors) {
        assert!(asked(&listing, call), "--list did not ask {call}");
    }
}

/// Issue 63 (1): utilization and health (3.8 and about 4.5 ms a GPU on a real driver) are read
/// only of the GPUs a launch takes; a refusal, `--policy random`, `-v` and a listing read every
/// GPU's, and what is chosen does not change. Counted per GPU in the simulator's call log.
#[test]
fn a_launch_reads_utilization_and_health_only_of_the_gpus_it_takes() {
    let sim = Sim::new(&default_scenario());
    let run = |args: &[&str]| -> (Vec<u32>, Outcome) {
        let log = sim.dir.path().join(format!("deferred-{}.log", args.join("_").replace('/', "")));
        let outcome = sim.gpurun().env("NVML_SIM_CALL_LOG", &log).args(args).run();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let mut read: Vec<u32> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ').skip(1);
                let call = fields.next()?;
                (call == "nvmlDeviceGetEccMode").then(|| fields.next()?.parse().ok()).flatten()
            })
            .collect();
        read.sort_unstable();
        read.dedup();
        (read, outcome)
    };
    let export_of = |outcome: &Outcome| -> String {
        outcome
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix("export CUDA_VISIBLE_DEVICES="))
            .unwrap_or("")
            .to_owned()
    };
    let every: Vec<u32> = (0..8).collect();
    // --export --gpus 2 takes two GPUs and reads those two.
    let (read, two) = run(&["--gpus", "2", "--export"]);
    two.status(0);
    assert_eq!(read.len(), 2, "read {read:?}: {}", two.stderr);
    // -v reads every GPU (it says why each was passed over) and chooses the same.
    let (read, explained) = run(&["-v", "--gpus", "2", "--export"]);
    assert_eq!(read, every, "{}", explained.stderr);
    assert_eq!(export_of(&explained), export_of(&two));
    assert!(explained.stderr.contains("passed over"), "{}", explained.stderr);
    // A plain launch of one GPU reads the one it runs on.
    let (read, one) = run(&["--gpus", "1", "--", "true"]);
    one.status(0);
    assert_eq!(read.len(), 1, "read {read:?}: {}", one.stderr);
    // A refusal names every GPU's reason: it reads them all.
    let (read, refused) = run(&["--gpus", "8", "--exclusive", "--", "true"]);
    refused.status(75);
    assert_eq!(read, every, "{}", refused.stderr);
    // --policy random shuffles the GPUs that qualify: all are read before the shuffle.
    let (read, _) = run(&["--policy", "random", "--gpus", "1", "--export"]);
    assert_eq!(read, every);
    for shown in [&["--list"][..], &["--dry-run", "--gpus", "1"], &["--doctor"]] {
        let (read, _) = run(shown);
        assert_eq!(read, every, "{shown:?}");
    }
}
