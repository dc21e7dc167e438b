//! A simulated `nvidia-cuda-mps-control`, as the real driver runs it (issue 62; seen on an H200
//! with driver 580): `-d` starts the control daemon, which makes its pipe directory
//! (CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps) hold `control` and `control_privileged`
//! (Unix sockets), `control_lock`, `log` (a FIFO) and `nvidia-cuda-mps-control.pid`, and starts
//! **no server until the first client connects**. A client (sim-cuda) connects to `control`;
//! the daemon then starts the user's server (`sim-cuda --mps-server`, which runs as
//! nvidia-cuda-mps-server on the daemon's devices) and answers once the server is registered.
//! Without `-d` it is the control utility: each line of standard input is a command sent to the
//! daemon (`quit` ends the daemon and its server; `get_server_list` prints the server's PID).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use nvml_sim::cuda::mps_pipe_directory;
use nvml_sim::registry::{self, MpsRole};
use nvml_sim::scenario::{self, Source};

const PID_FILE: &str = "nvidia-cuda-mps-control.pid";
/// The real daemon's program name: tools know it by its command line.
const DAEMON_NAME: &str = "nvidia-cuda-mps-control";

fn log_line(text: &str) {
    let dir = std::env::var_os("CUDA_MPS_LOG_DIRECTORY").filter(|dir| !dir.is_empty());
    let dir = dir.map_or_else(|| PathBuf::from("/var/log/nvidia-mps"), PathBuf::from);
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("control.log"))
    {
        let _ = writeln!(file, "{text}");
    }
}

/// `-d`: the daemon, started in a session of its own; this returns once its files exist.
fn start_daemon() -> Result<(), String> {
    let dir = mps_pipe_directory();
    if dir.join(PID_FILE).exists() && UnixStream::connect(dir.join("control")).is_ok() {
        return Err(format!("an MPS control daemon already runs at {}", dir.display()));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut daemon = Command::new(exe);
    daemon
        .arg0(DAEMON_NAME)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        daemon.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    daemon.spawn().map_err(|e| format!("cannot start the daemon: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if dir.join(PID_FILE).exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err("the daemon did not start".to_owned())
}

/// The files the daemon makes in its pipe directory, and removes when it quits.
const FILES: [&str; 5] = ["control", "control_privileged", "log", "control_lock", PID_FILE];

/// The daemon itself: its files, then one connection at a time. It quits on `quit`, and also
/// once its `control` is gone (a test's folder removed): a daemon in a session of its own must
/// not outlive what it served.
fn serve() -> Result<(), String> {
    let dir = mps_pipe_directory();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for name in FILES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let control = UnixListener::bind(dir.join("control")).map_err(|e| format!("control: {e}"))?;
    let _privileged = UnixListener::bind(dir.join("control_privileged")).map_err(|e| e.to_string())?;
    // The real daemon makes both sockets usable by every user (srw-rw-rw-).
    for name in ["control", "control_privileged"] {
        let _ = std::fs::set_permissions(dir.join(name), std::os::unix::fs::PermissionsExt::from_mode(0o666));
    }
    std::fs::write(dir.join("control_lock"), "").map_err(|e| e.to_string())?;
    let log = std::ffi::CString::new(dir.join("log").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo touches nothing else.
    unsafe { libc::mkfifo(log.as_ptr(), 0o600) };
    std::fs::write(dir.join(PID_FILE), format!("{}\n", std::process::id())).map_err(|e| e.to_string())?;
    control.set_nonblocking(true).map_err(|e| e.to_string())?;
    log_line("daemon started");
    let mut server: Option<Child> = None;
    loop {
        let mut stream = match control.accept() {
            Ok((stream, _)) => stream,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                if !dir.join("control").exists() {
                    stop(&mut server);
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(_) => continue,
        };
        // A client that says nothing cannot hold the daemon.
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            continue;
        }
        let answer = match line.trim() {
            "start_server" => match ensure_server(&mut server) {
                Ok(pid) => format!("ok {pid}\n"),
                Err(why) => format!("error {why}\n"),
            },
            "get_server_list" => {
                format!("{}\n", server.as_ref().map(|s| s.id().to_string()).unwrap_or_default())
            }
            "quit" => {
                stop(&mut server);
                for name in FILES {
                    let _ = std::fs::remove_file(dir.join(name));
                }
                log_line("daemon quit");
                let _ = stream.write_all(b"ok\n");
                return Ok(());
            }
            other => format!("error unknown command {other:?}\n"),
        };
        let _ = stream.write_all(answer.as_bytes());
    }
}

/// Ends the server by SIGTERM (its registration is released, as a real server's context ends).
fn stop(server: &mut Option<Child>) {
    if let Some(mut child) = server.take() {
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = child.wait();
    }
}

/// The user's server, started at the first client: sim-cuda as nvidia-cuda-mps-server on the
/// daemon's devices, answered for once it is registered.
fn ensure_server(server: &mut Option<Child>) -> Result<u32, String> {
    if let Some(child) = server.as_mut() {
        if child.try_wait().ok().flatten().is_none() {
            return Ok(child.id());
        }
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sim_cuda = exe.with_file_name("sim-cuda");
    let child = Command::new(&sim_cuda)
        .args(["--mps-server", "--mem", "66MiB", "--sleep", "1000000", "--quiet"])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", sim_cuda.display()))?;
    let pid = child.id();
    *server = Some(child);
    log_line(&format!("server {pid} started"));
    let state_dir = scenario::state_dir(&Source::from_env());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if registry::live(&state_dir).iter().any(|r| r.pid == pid && r.mps == Some(MpsRole::Server)) {
            return Ok(pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err("the server did not register".to_owned())
}

/// The control utility: each command of standard input to the daemon, its answer printed.
fn control(dir: &Path) -> Result<(), String> {
    for command in std::io::stdin().lock().lines() {
        let command = command.map_err(|e| e.to_string())?;
        let mut stream = UnixStream::connect(dir.join("control"))
            .map_err(|e| format!("cannot reach the daemon at {}: {e}", dir.display()))?;
        stream.write_all(format!("{}\n", command.trim()).as_bytes()).map_err(|e| e.to_string())?;
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).map_err(|e| e.to_string())?;
        print!("{answer}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("-d") => start_daemon(),
        Some("--foreground") => serve(),
        None => control(&mps_pipe_directory()),
        Some(other) => Err(format!("usage: sim-mps-control [-d]; {other:?} is not an option")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sim-mps-control: {message}");
            ExitCode::from(1)
        }
    }
}
