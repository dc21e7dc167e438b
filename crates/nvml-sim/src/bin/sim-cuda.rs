//! sim-cuda: a stand-in for a CUDA program on the simulated machine.
//!
//! It resolves `CUDA_VISIBLE_DEVICES` under `CUDA_DEVICE_ORDER` as the CUDA runtime does, prints
//! one JSON line on stdout saying what it saw, registers its PID and memory on the GPUs it uses
//! (so the simulated NVML lists it), holds them for `--sleep`, then exits with `--exit`.
//! SIGTERM and SIGINT release the registration and kill it by that signal, as they would a real
//! program.

use std::process::{Command, ExitCode};
use std::time::Duration;

use nvml_sim::cuda::{self, CudaDevice};
use nvml_sim::registry::{self, MpsRole};
use nvml_sim::scenario::{self, Source};

const USAGE: &str =
    "usage: sim-cuda [--mem SIZE] [--use N | --device ORDINAL[,ORDINAL...]] [--set-visible LIST] \
[--workers N] [--mps-server] [--busy PERCENT[:SECONDS]] [--sleep SECONDS] [--hold-after-exit SECONDS] [--exit CODE] [--quiet] [--count]

  --mem SIZE        memory each process takes on each GPU it uses (binary units; default 1GiB)
  --use N           use only the first N visible devices (a multi-GPU job that uses fewer)
  --device LIST     use these CUDA ordinals, like a hard-coded torch.device(\"cuda:1\")
  --set-visible LIST
                    resolve LIST instead of CUDA_VISIBLE_DEVICES, like a program that sets
                    os.environ[\"CUDA_VISIBLE_DEVICES\"] itself before CUDA starts
  --workers N       N worker processes register on the devices instead of this one
  --mps-server      register as an MPS server (nvidia-cuda-mps-server) on the devices: in
                    their compute list; a later sim-cuda of the same user on one of them is
                    then its MPS client (listed only in the MPS list), as CUDA makes it. It
                    runs as nvidia-cuda-mps-server (argv[0]), the name tools know it by
  --busy PERCENT[:SECONDS]
                    keep the devices this busy (their utilization, and the driver's samples
                    of it) for SECONDS from the start, else for the whole --sleep
  --sleep SECONDS   how long to hold the devices (default 0)
  --hold-after-exit SECONDS
                    start a child (`sleep SECONDS`) that inherits the device files, as a
                    process forked after CUDA started does: the driver keeps the context, and
                    NVML lists this PID with its memory, until that child ends too
  --exit CODE       exit status once done (default 0)
  --quiet           print nothing on stdout
  --count           print how many devices CUDA enumerates (torch.cuda.device_count()) and
                    exit, registering nothing";

struct Options {
    mem_bytes: u64,
    use_count: Option<usize>,
    ordinals: Option<Vec<u32>>,
    set_visible: Option<String>,
    workers: u32,
    mps_server: bool,
    /// `--busy`: the percent, and for how long (None: the whole sleep).
    busy: Option<(u32, Option<Duration>)>,
    sleep: Duration,
    hold_after_exit: Option<String>,
    exit_code: u8,
    quiet: bool,
    count: bool,
    /// Internal: this process is a worker of that parent.
    worker: bool,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        mem_bytes: 1 << 30,
        use_count: None,
        ordinals: None,
        set_visible: None,
        workers: 0,
        mps_server: false,
        busy: None,
        hold_after_exit: None,
        sleep: Duration::ZERO,
        exit_code: 0,
        quiet: false,
        count: false,
        worker: false,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--mem" => options.mem_bytes = scenario::parse_size(&value()?)?,
            "--use" => options.use_count = Some(number(flag, &value()?)?),
            "--device" => {
                options.ordinals =
                    Some(value()?.split(',').map(|o| number(flag, o)).collect::<Result<_, _>>()?)
            }
            "--set-visible" => options.set_visible = Some(value()?),
            "--workers" => options.workers = number(flag, &value()?)?,
            "--sleep" => {
                let text = value()?;
                let seconds: f64 = text
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("--sleep {text:?} is not a number of seconds"))?;
                options.sleep = Duration::from_secs_f64(seconds);
            }
            "--exit" => options.exit_code = number(flag, &value()?)?,
            "--quiet" => options.quiet = true,
            "--count" => options.count = true,
            "--mps-server" => options.mps_server = true,
            "--busy" => {
                let text = value()?;
                let (percent, seconds) = match text.split_once(':') {
                    Some((percent, seconds)) => (percent, Some(seconds)),
                    None => (text.as_str(), None),
                };
                let percent: u32 = number(flag, percent)?;
                let seconds = seconds
                    .map(|s| s.parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()))
                    .map(|d| d.ok_or_else(|| format!("--busy {text:?}: SECONDS is not a number of seconds")))
                    .transpose()?;
                options.busy = Some((percent.min(100), seconds));
            }
            "--hold-after-exit" => options.hold_after_exit = Some(value()?),
            "--worker" => options.worker = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    Ok(options)
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.trim().parse().map_err(|_| format!("{flag} {text:?} is not a valid number"))
}

fn report(devices: &[CudaDevice], registered_pid: Option<u32>) {
    let devices: Vec<serde_json::Value> = devices
        .iter()
        .map(|d| serde_json::json!({"ordinal": d.ordinal, "nvml_index": d.nvml_index, "uuid": d.uuid}))
        .collect();
    let env = |name: &str| std::env::var(name).ok();
    let line = serde_json::json!({
        "pid": std::process::id(),
        "registered_pid": registered_pid,
        "devices": devices,
        "env": {
            "CUDA_VISIBLE_DEVICES": env("CUDA_VISIBLE_DEVICES"),
            "CUDA_DEVICE_ORDER": env("CUDA_DEVICE_ORDER"),
        },
    });
    println!("{line}");
}

/// The real server's program name: tools (gpurun among them) know an MPS server by it.
const MPS_SERVER_NAME: &str = "nvidia-cuda-mps-server";

/// `--mps-server` under another name runs again as `nvidia-cuda-mps-server` (the same PID and
/// program, argv[0] changed), so that `/proc/PID/cmdline` names it as the real one's does.
fn named_as_the_server(args: &[String]) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let called = std::env::args().next().unwrap_or_default();
    let name = called.rsplit('/').next().unwrap_or_default();
    if name == MPS_SERVER_NAME || !args.iter().any(|arg| arg == "--mps-server") {
        return Ok(());
    }
    let program = std::env::current_exe().map_err(|e| e.to_string())?;
    Err(format!(
        "cannot run as {MPS_SERVER_NAME}: {}",
        Command::new(program).arg0(MPS_SERVER_NAME).args(args).exec()
    ))
}

fn run() -> Result<u8, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    named_as_the_server(&args)?;
    let options = parse_options(&args)?;
    let source = Source::from_env();
    let scenario = source.load()?;
    let state_dir = scenario::state_dir(&source);

    let visible = cuda::visible_devices(
        &scenario,
        std::env::var("CUDA_DEVICE_ORDER").ok().as_deref(),
        options.set_visible.clone().or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok()).as_deref(),
    );
    if options.count {
        println!("{}", visible.len());
        return Ok(0);
    }
    let used: Vec<CudaDevice> = match &options.ordinals {
        Some(ordinals) => ordinals
            .iter()
            .map(|&o| {
                visible.get(o as usize).cloned().ok_or_else(|| {
                    format!("CUDA error: invalid device ordinal {o} ({} visible)", visible.len())
                })
            })
            .collect::<Result<_, _>>()?,
        None => visible.iter().take(options.use_count.unwrap_or(usize::MAX)).cloned().collect(),
    };

    let pid = std::process::id();
    let registers_here = options.workers == 0 && !used.is_empty();
    if registers_here && options.hold_after_exit.is_none() {
        registry::release_on_termination(state_dir.join(format!("{pid}.proc")));
    }
    if registers_here {
        let entries: Vec<(String, u64)> = used.iter().map(|d| (d.uuid.clone(), options.mem_bytes)).collect();
        let role = match options.mps_server {
            true => Some(MpsRole::Server),
            false => {
                start_mps_server();
                own_mps_server_on(&state_dir, &used).then_some(MpsRole::Client)
            }
        };
        registry::register_as(&state_dir, pid, &entries, role)
            .map_err(|e| format!("cannot register in {}: {e}", state_dir.display()))?;
        if let Some(seconds) = &options.hold_after_exit {
            let holder = Command::new("sleep")
                .arg(seconds)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start sleep: {e}"))?;
            registry::add_holder(&state_dir, pid, holder.id())
                .map_err(|e| format!("cannot register in {}: {e}", state_dir.display()))?;
        }
    }
    if let (Some((percent, seconds)), true) = (options.busy, registers_here) {
        // A window the simulated driver's samples read whenever asked, so it outlives us.
        let from = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let until = from + seconds.unwrap_or(options.sleep);
        let uuids: Vec<&str> = used.iter().map(|d| d.uuid.as_str()).collect();
        let line = format!("{percent} {} {} {}\n", from.as_millis(), until.as_millis(), uuids.join(","));
        std::fs::write(state_dir.join(format!("{pid}.busy")), line)
            .map_err(|e| format!("cannot write in {}: {e}", state_dir.display()))?;
    }
    if !options.quiet && !options.worker {
        report(&used, registers_here.then_some(pid));
    }

    let mut workers = Vec::new();
    for _ in 0..options.workers {
        // A worker does what its parent was asked, minus spawning workers of its own.
        let mut worker = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
        worker.args(strip_workers(&args)).arg("--worker").arg("--quiet");
        workers.push(worker.spawn().map_err(|e| format!("cannot start a worker: {e}"))?);
    }

    std::thread::sleep(options.sleep);
    for mut worker in workers {
        let _ = worker.wait();
    }
    // A context another process holds outlives this one: its registration stays.
    if registers_here && options.hold_after_exit.is_none() {
        registry::unregister(&state_dir, pid);
    }
    Ok(options.exit_code)
}

/// As CUDA does at its first context: where an MPS control daemon serves the pipe directory
/// (a Unix socket `control`, as the real daemon makes it), ask it for this user's server, which
/// it starts at the first client (`sim-mps-control`). A FIFO `control` (older daemons, and the
/// tests that play one) starts nothing here.
fn start_mps_server() {
    use std::io::{BufRead, Write};
    use std::os::unix::fs::FileTypeExt;
    let control = cuda::mps_pipe_directory().join("control");
    if !std::fs::symlink_metadata(&control).is_ok_and(|m| m.file_type().is_socket()) {
        return;
    }
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&control) else { return };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(15)));
    if stream.write_all(b"start_server\n").is_ok() {
        let mut answer = String::new();
        let _ = std::io::BufReader::new(&stream).read_line(&mut answer);
    }
}

/// Whether an MPS server of this user runs on one of `devices`: CUDA then makes this process
/// its client (one server per user; another user's server is not ours to join).
fn own_mps_server_on(state_dir: &std::path::Path, devices: &[CudaDevice]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let own_uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    registry::live(state_dir).iter().any(|r| {
        r.mps == Some(MpsRole::Server)
            && devices.iter().any(|d| d.uuid == r.uuid)
            && std::fs::metadata(format!("/proc/{}", r.pid)).map(|m| m.uid()).ok() == own_uid
    })
}

/// The parent's arguments without `--workers N`.
fn strip_workers(args: &[String]) -> Vec<&String> {
    let mut kept = Vec::new();
    let mut skip_next = false;
    for arg in args {
        if skip_next {
            skip_next = false;
        } else if arg == "--workers" {
            skip_next = true;
        } else {
            kept.push(arg);
        }
    }
    kept
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("sim-cuda: {message}");
            ExitCode::from(1)
        }
    }
}
