//! What tini's and dumb-init's own test suites found (issue 19): fault signals sent by another
//! process, and a Ctrl-C typed in the moment before the command starts. (Leftovers that die
//! while gpurun ends them: tests/reaping.rs.)

use crate::common;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{default_scenario, recorder, send_signal, start_recorder, wait_until, Sim};

const LONG: Duration = Duration::from_secs(10);

/// Starts the recorder under gpurun.
fn recorded(sim: &Sim, log: &Path, signals: &str) -> common::Running {
    start_recorder(sim.gpurun().args(["-q", "--gpus", "0", "--", "python3"]).args([recorder()]).args([
        log.to_str().unwrap(),
        "--signals",
        signals,
    ]))
}

#[test]
fn fault_signals_sent_by_kill_reach_the_command_once() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    for (signal, name) in [
        (libc::SIGILL, "ILL"),
        (libc::SIGTRAP, "TRAP"),
        (libc::SIGABRT, "ABRT"),
        (libc::SIGBUS, "BUS"),
        (libc::SIGFPE, "FPE"),
        (libc::SIGSEGV, "SEGV"),
        (libc::SIGSYS, "SYS"),
    ] {
        let log = dir.path().join(format!("{name}.log"));
        let mut gpurun = recorded(&sim, &log, name);
        send_signal(gpurun.0.id(), signal);
        let recorded = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(wait_until(LONG, || !recorded().is_empty()), "{name} never reached the command");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(recorded(), format!("{name}\n"));
        std::fs::write(format!("{}.stop", log.display()), "").unwrap();
        let status = gpurun.0.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{name}: gpurun must exit with the command's status: {status:?}");
    }
}

/// A pseudo-terminal whose slave is the controlling terminal of the process started on it.
struct Pty {
    master: std::fs::File,
    slave: std::path::PathBuf,
}

impl Pty {
    fn open() -> Pty {
        // SAFETY: posix_openpt/grantpt/unlockpt/ptsname on a descriptor we own; ptsname's static
        // buffer is copied at once, before any other call.
        let (master, slave) = unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let name = std::ffi::CStr::from_ptr(libc::ptsname(master)).to_str().unwrap().to_owned();
            (OwnedFd::from_raw_fd(master), name)
        };
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().unwrap();
        // Drain whatever is written to the terminal, so that no writer blocks.
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while matches!(reader.read(&mut buffer), Ok(n) if n > 0) {}
        });
        Pty { master, slave: slave.into() }
    }

    /// Starts `run` as the leader of a new session on this terminal: its process group is the
    /// terminal's foreground group, as a shell's job is.
    fn start(&self, run: common::Run) -> Child {
        let open = || std::fs::OpenOptions::new().read(true).write(true).open(&self.slave).unwrap();
        let mut command = run.command;
        command.stdin(Stdio::from(open())).stdout(Stdio::from(open())).stderr(Stdio::from(open()));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.spawn().unwrap()
    }

    fn ctrl_c(&mut self) {
        self.master.write_all(&[0x03]).unwrap();
    }
}

/// How a gpurun hit by Ctrl-C `delay` after its start ended; None if the press was lost (the
/// command then ran its course and gpurun exited 0, not by SIGINT).
fn ctrl_c_after(sim: &Sim, args: &[&str], delay: Duration) -> Option<std::process::ExitStatus> {
    let mut pty = Pty::open();
    let mut gpurun = pty.start(sim.gpurun().args(["-q"]).args(args).args(["--", "sleep", "3"]));
    std::thread::sleep(delay);
    pty.ctrl_c();
    let status = common::wait_unless_hung(&mut gpurun);
    (status.code() != Some(0)).then_some(status)
}

/// How long gpurun takes from its start to its command's exit, for `true`: the span in which
/// the command starts.
fn start_to_end(sim: &Sim, args: &[&str]) -> Duration {
    let mut samples: Vec<Duration> = (0..9)
        .map(|_| {
            let started = Instant::now();
            sim.gpurun().args(["-q"]).args(args).args(["--", "true"]).run().status(0);
            started.elapsed()
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[test]
fn a_ctrl_c_just_before_the_command_starts_is_never_lost() {
    let sim = Sim::new(&default_scenario());
    let mut lost = Vec::new();
    // Presses spread over the second half of the span between gpurun's start and its command's
    // end, without and with NVML: some land before gpurun blocks its signals, some just before
    // and just after the fork, some in the running command. None may be lost. (Before the fork
    // was made a handshake, about one press in a hundred here was lost.)
    for args in [&["--gpus", "0"][..], &[]] {
        let span = start_to_end(&sim, args);
        let presses: u32 = std::env::var("PRESSES").ok().and_then(|p| p.parse().ok()).unwrap_or(100);
        for press in 0..presses {
            let delay = span / 2 + span * press / presses / 2;
            match ctrl_c_after(&sim, args, delay) {
                Some(status) => {
                    assert_eq!(status.signal(), Some(libc::SIGINT), "{args:?} after {delay:?}: {status:?}")
                }
                None => lost.push(format!("{args:?} after {delay:?}")),
            }
        }
    }
    assert!(lost.is_empty(), "Ctrl-C presses lost: {lost:?}");
}
