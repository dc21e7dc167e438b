//! Test harness: a simulated machine in a fresh temporary directory, and the real gpurun binary
//! run against it. `Sim::new(scenario).gpurun().args([..]).run()` gives status, stdout, stderr.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const GPURUN: &str = env!("CARGO_BIN_EXE_gpurun");

/// The gpurun binary the tests run: this build's, or `GPURUN_UNDER_TEST` (to show that a new
/// test fails on an older build). The simulator is always this build's.
pub fn gpurun_binary() -> String {
    default_signals();
    std::env::var("GPURUN_UNDER_TEST").unwrap_or_else(|_| GPURUN.to_owned())
}

/// The signals the tests send at their defaults in the test process, whatever it inherited: a
/// suite started in the background of a script (`make test &`) ignores SIGINT and SIGQUIT,
/// under nohup SIGHUP too; every gpurun and command a test starts would inherit that, as gpurun
/// keeps what its caller ignored, and the tests of Ctrl-C and of forwarding failed for it. A
/// test of an ignored signal sets it itself in its child. (SIGPIPE stays as Rust's runtime has
/// it: Command gives children the default.)
pub fn default_signals() {
    static RESET: std::sync::Once = std::sync::Once::new();
    RESET.call_once(|| {
        let sent = [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
        ];
        for signal in sent {
            // SAFETY: setting a disposition to the default; no handler of ours is replaced.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    });
}

/// Where cargo put gpurun, and with it the simulator (built by `make sim`/`make test`).
fn build_dir() -> PathBuf {
    Path::new(GPURUN).parent().expect("binary has a directory").to_path_buf()
}

pub fn built(name: &str) -> PathBuf {
    let path = build_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the simulator first with `cargo build --workspace` (make test does)",
        path.display()
    );
    path
}

/// The simulated `libnvidia-ml.so.1`.
pub fn sim_library() -> PathBuf {
    built("libnvml_sim.so")
}

/// The simulated library where every user can load it: the build's own when every folder
/// above it lets others through, else a copy in the temporary directory (one per build, kept
/// for the next run). A clone in root's home (mode 0700) is no place another user's gpurun
/// can load a library from, and the tests that run gpurun as a second user need one.
fn library_for_everyone() -> PathBuf {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    static SHARED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| {
            let library = sim_library();
            let open_to_all = library
                .ancestors()
                .skip(1)
                .all(|dir| std::fs::metadata(dir).is_ok_and(|meta| meta.mode() & 0o001 != 0));
            if open_to_all {
                return library;
            }
            let meta = std::fs::metadata(&library).expect("the simulator library");
            let dir = std::env::temp_dir().join(format!("gpurun-tests-sim-{}-{}", meta.len(), meta.mtime()));
            let copy = dir.join("libnvml_sim.so");
            if !copy.exists() {
                std::fs::create_dir_all(&dir).expect("a folder for the library");
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("mode");
                let partial = dir.join(format!("libnvml_sim.so.{}", std::process::id()));
                std::fs::copy(&library, &partial).expect("copy the simulator library");
                std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).expect("mode");
                std::fs::rename(&partial, &copy).expect("put the library in place");
            }
            copy
        })
        .clone()
}

pub fn sim_cuda() -> PathBuf {
    built("sim-cuda")
}

/// The simulated `libamd_smi.so`, and its HIP program.
pub fn amd_sim_library() -> PathBuf {
    built("libamdsmi_sim.so")
}

pub fn sim_hip() -> PathBuf {
    built("sim-hip")
}

/// An AMD scenario: `tests/scenarios/NAME`, or the AMD simulator's embedded default.
pub fn amd_scenario(name: Option<&str>) -> String {
    match name {
        Some(name) => scenario_file(name),
        None => {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/amdsmi-sim/scenarios/mi300x.toml");
            std::fs::read_to_string(path).expect("the AMD simulator's default scenario")
        }
    }
}

/// A simulated AMD machine: `Sim`'s folders, with the scenario read by the AMD SMI simulator.
pub struct AmdSim {
    pub sim: Sim,
}

impl AmdSim {
    pub fn new(scenario: &str) -> AmdSim {
        AmdSim { sim: Sim::new(scenario) }
    }

    /// gpurun on this machine with --vendor amd (GPURUN_VENDOR), loading the simulator.
    pub fn gpurun(&self) -> Run {
        self.gpurun_auto().env("GPURUN_VENDOR", "amd")
    }

    /// gpurun with the default --vendor auto, on a machine without NVML.
    pub fn gpurun_auto(&self) -> Run {
        self.sim
            .gpurun()
            .env("GPURUN_NVML_LIB", self.sim.dir.path().join("no-libnvidia-ml.so.1"))
            .env("GPURUN_AMD_SMI_LIB", amd_sim_library())
            .env("AMDSMI_SIM_SCENARIO", &self.sim.scenario)
    }
}

/// The wheel's Python package (packaging/python/gpurun) laid out as `pip install --target DIR`
/// lays it out, with the gpurun binary in `DIR/bin`, in `sim`'s folder: DIR, for PYTHONPATH.
pub fn python_package(sim: &Sim) -> PathBuf {
    let target = sim.dir.path().join("target");
    std::fs::create_dir_all(target.join("bin")).expect("target/bin");
    std::os::unix::fs::symlink(gpurun_binary(), target.join("bin/gpurun")).expect("the binary");
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/python/gpurun");
    std::os::unix::fs::symlink(package, target.join("gpurun")).expect("the package");
    target
}

/// The scenario files shipped with the tests.
pub fn scenario_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn default_scenario() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/nvml-sim/scenarios/default.toml");
    std::fs::read_to_string(path).expect("embedded default scenario")
}

pub struct Sim {
    pub dir: tempfile::TempDir,
    pub scenario: PathBuf,
    /// A directory holding `libnvidia-ml.so.1`, for clients that load it by name.
    pub lib_dir: PathBuf,
}

impl Sim {
    pub fn new(scenario: &str) -> Sim {
        default_signals();
        let dir = tempfile::tempdir().expect("temporary directory");
        let scenario_path = dir.path().join("scenario.toml");
        std::fs::write(&scenario_path, scenario).expect("write scenario");
        let lib_dir = dir.path().join("lib");
        std::fs::create_dir(&lib_dir).expect("lib dir");
        std::os::unix::fs::symlink(library_for_everyone(), lib_dir.join("libnvidia-ml.so.1"))
            .expect("symlink");
        // The machine's /etc/gpurun/config.toml stays out of the tests.
        std::fs::write(dir.path().join("system.toml"), "").expect("system file");
        Sim { dir, scenario: scenario_path, lib_dir }
    }

    /// The system configuration file gpurun reads here (GPURUN_SYSTEM_CONFIG), empty at first.
    pub fn system_file(&self) -> PathBuf {
        self.dir.path().join("system.toml")
    }

    /// Replaces the scenario; the simulator notices on its next call.
    pub fn rewrite(&self, scenario: &str) {
        let temporary = self.dir.path().join("scenario.toml.new");
        std::fs::write(&temporary, scenario).expect("write scenario");
        std::fs::rename(temporary, &self.scenario).expect("replace scenario");
    }

    pub fn library(&self) -> PathBuf {
        self.lib_dir.join("libnvidia-ml.so.1")
    }

    /// This simulated machine's reservations (created by gpurun on first use).
    pub fn lock_dir(&self) -> PathBuf {
        self.dir.path().join("locks")
    }

    /// Environment every simulated program needs, and nothing from the caller's GPU setup or
    /// gpurun configuration.
    fn prepare(&self, command: &mut Command) {
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GPURUN_") {
                command.env_remove(name);
            }
        }
        command
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env("GPURUN_SYSTEM_CONFIG", self.system_file())
            .env("NVML_SIM_SCENARIO", &self.scenario)
            .env("GPURUN_LOCK_DIR", self.lock_dir())
            .env_remove("NVML_SIM_STATE_DIR")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("CUDA_DEVICE_ORDER")
            .env_remove("GPURUN_NVML_LIB")
            .env_remove("GPURUN_LOG")
            .env_remove("SLURM_STEP_GPUS")
            .env_remove("SLURM_JOB_GPUS")
            .env_remove("GPU_DEVICE_ORDINAL")
            .env_remove("ROCR_VISIBLE_DEVICES")
            .env_remove("HIP_VISIBLE_DEVICES")
            .env_remove("AMDSMI_SIM_SCENARIO")
            .env_remove("AMDSMI_SIM_STATE_DIR");
        // A launcher's rank variables (the suite run under torchrun, mpirun or srun).
        for name in [
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "TORCHELASTIC_RUN_ID",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "MPI_LOCALRANKID",
            "MPI_LOCALNRANKS",
            "SLURM_LOCALID",
            "SLURM_STEP_TASKS_PER_NODE",
        ] {
            command.env_remove(name);
        }
    }

    /// gpurun, pointed at this simulator through `GPURUN_NVML_LIB`.
    pub fn gpurun(&self) -> Run {
        let mut command = Command::new(gpurun_binary());
        self.prepare(&mut command);
        command.env("GPURUN_NVML_LIB", self.library());
        Run { command }
    }

    /// Another program (a shell, say) in gpurun's environment, for tests of how gpurun is used.
    pub fn gpurun_command(&self, program: &str, args: &[&str]) -> Run {
        let mut command = Command::new(program);
        self.prepare(&mut command);
        command.env("GPURUN_NVML_LIB", self.library()).args(args);
        Run { command }
    }

    /// A sim-cuda process holding GPUs in the background, until killed.
    pub fn spawn_sim_cuda(&self, env: &[(&str, &str)], args: &[&str]) -> Background {
        let mut command = Command::new(sim_cuda());
        self.prepare(&mut command);
        command.envs(env.iter().copied()).args(args).stdout(Stdio::piped());
        let mut child = command.spawn().expect("start sim-cuda");
        // Its first line says it has registered.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("sim-cuda reports");
        Background { child }
    }
}

/// A process killed when the test ends.
pub struct Background {
    pub child: Child,
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Run {
    pub command: Command,
}

impl Run {
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Run {
        self.command.arg(arg);
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Run {
        self.command.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Run {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Run {
        self.command.env_remove(key);
        self
    }

    pub fn run(mut self) -> Outcome {
        let output = self.command.stdin(Stdio::null()).output().expect("run gpurun");
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// Asserts the exit code, showing everything gpurun said when it differs.
    #[track_caller]
    pub fn status(&self, expected: i32) -> &Outcome {
        assert_eq!(self.code, Some(expected), "unexpected exit status\n{self:#?}");
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Outcome {
        assert!(self.stderr.contains(needle), "stderr lacks {needle:?}\n{self:#?}");
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Outcome {
        assert!(self.stdout.contains(needle), "stdout lacks {needle:?}\n{self:#?}");
        self
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON: {e}\n{self:#?}"))
    }
}

/// A checker script's run (tests/pynvml, tests/amdsmi): it must succeed and end with the line
/// "N passed, 0 failed" for more than `at_least` checks (a script that checked nothing fails).
#[track_caller]
pub fn assert_checks_passed(output: &std::process::Output, at_least: u32, who: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{who} disagrees with the simulator:\n{stdout}\n{stderr}");
    let summary = stdout.lines().last().unwrap_or_default();
    let passed: u32 = summary.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(passed > at_least && summary.ends_with(" 0 failed"), "too few checks ran:\n{stdout}\n{stderr}");
}

/// tests/helpers/recorder.py: a child that records the signals it receives.
pub fn recorder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/recorder.py")
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The children of `pid` (every thread's), from /proc.
pub fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|t| t.flatten().collect())
        .unwrap_or_else(|_| Vec::new());
    tasks
        .iter()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| text.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// The program `pid` runs now (`/proc/PID/comm`), once it has one.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim_end().to_owned())
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|end| stat[end + 1..].trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// The one-letter state of `pid` from /proc (R, S, T, Z...).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A process held by a pidfd: a signal through it reaches that process or none, never one that
/// took its PID after it ended. Open it while the process is known to be alive.
pub struct PidFd(std::os::fd::OwnedFd);

impl PidFd {
    pub fn open(pid: u32) -> Option<PidFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes no pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
        // SAFETY: a non-negative result is a new descriptor that nothing else owns.
        (fd >= 0).then(|| PidFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }))
    }

    pub fn kill(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal with a null siginfo; no memory is written.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<u8>(),
                0,
            )
        };
    }
}

pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Whether `program` is on PATH (a client or tool a test area needs).
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Says why a test (or part of one) cannot run here and returns. Where CI can run everything
/// (`CI_NO_SKIP=1`, set by `.ci/run`), a skip is a failure instead: an area that silently
/// stopped running must not pass.
#[track_caller]
pub fn skip(what: &str, why: &str) {
    if std::env::var_os("CI_NO_SKIP").is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{what} cannot run here, and CI_NO_SKIP is set: {why}");
    }
    eprintln!("SKIPPED {what}: {why}");
}

/// Starts `run` (gpurun in front of tests/helpers/recorder.py) with the recorder's stdout piped,
/// and returns once the recorder says it is ready (its handlers are installed). Killed when the
/// test ends, even by a panic: a gpurun left behind outlives its scenario's folder.
pub fn start_recorder(run: Run) -> Running {
    let mut command = run.command;
    let mut child = command.stdout(Stdio::piped()).stdin(Stdio::null()).spawn().expect("start gpurun");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("read the recorder's first line");
    assert!(line.starts_with("ready "), "the recorder did not start: {line:?}");
    Running(child)
}

/// How many CPUs this test process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A process started in the background (`background`); killed when the test ends.
pub struct Running(pub Child);

impl Running {
    /// Kills it and, where `background` started it as the leader of a group of its own, its
    /// helpers with it (a forger's `flock ... sleep 600` left its sleep behind, as another
    /// user, every run), then reaps it.
    pub fn end(&mut self) {
        let pid = self.0.id() as i32;
        // Still this test's child (alive, or a zombie not reaped: WNOWAIT leaves it so), it
        // holds its PID, and no other group can have that ID; once reaped (by a wait here or
        // in the test) its PID may be another's, and nothing is sent.
        // SAFETY: waitid writes only into `info`; getpgid and kill have no memory effects.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            let ours = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) == 0;
            if ours && libc::getpgid(pid) == pid {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.end();
    }
}

/// Starts `run` with no stdin, stdout or stderr, in a process group of its own, which is
/// killed whole when the test ends.
pub fn background(run: Run) -> Running {
    use std::os::unix::process::CommandExt;
    let mut command = run.command;
    command.process_group(0);
    Running(command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start"))
}

/// How many leases a lock directory holds (0 where it does not exist yet).
pub fn leases_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |all| {
        all.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".lease")).count()
    })
}

/// Whether the tests run as root (a second user, chown and mount need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The indices of the GPUs a `--list --json` or `--dry-run --json` object marks eligible.
pub fn eligible(listing: &serde_json::Value) -> Vec<u64> {
    listing["gpus"]
        .as_array()
        .map(|gpus| {
            gpus.iter().filter(|g| g["eligible"] == true).filter_map(|g| g["index"].as_u64()).collect()
        })
        .unwrap_or_default()
}

/// How long a run may take before a test calls it hung: a bound that only catches hangs (a
/// wait that should not be there lasts far longer: for ever, or a hang of a minute), never a
/// measurement of speed, which is the bench's.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

impl Run {
    /// Runs to its end like `run`, failing the test if it has not ended within `HANG`.
    pub fn run_unless_hung(mut self) -> Outcome {
        let mut child = self
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run gpurun");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut text);
            text
        });
        let err = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr, &mut text);
            text
        });
        let status = wait_unless_hung(&mut child);
        Outcome {
            code: status.code(),
            stdout: String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned(),
            stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
        }
    }
}

/// Waits for `child` to end, failing the test (and killing it) if it has not within `HANG`.
#[track_caller]
pub fn wait_unless_hung(child: &mut Child) -> std::process::ExitStatus {
    let mut status = None;
    let ended = wait_until(HANG, || {
        status = child.try_wait().expect("wait for the child");
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
        panic!("PID {} was still running after {HANG:?}: hung", child.id());
    }
    status.expect("ended")
}

/// The name of the user a process runs as (`ps -o user=`'s answer, by /proc and `id`).
pub fn owner_of(pid: u32) -> String {
    use std::os::unix::fs::MetadataExt;
    user_name_of(std::fs::metadata(format!("/proc/{pid}")).expect("a live process").uid())
}

/// A uid's name as `id` gives it, or the number where it has none.
pub fn user_name_of(uid: u32) -> String {
    let out = Command::new("id").args(["-nu", &uid.to_string()]).output().expect("id");
    match out.status.success() {
        true => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        false => uid.to_string(),
    }
}

/// Whether `text` holds `words` as whole words ("RMA" is not in "PERFORMANCE").
pub fn has_words(text: &str, words: &str) -> bool {
    let split = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric() && c != '-')
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (text, words) = (split(text), split(words));
    !words.is_empty() && text.windows(words.len()).any(|window| window == words.as_slice())
}

/// Whether this machine lets a test make a PID namespace (`unshare --pid --fork --mount-proc`);
/// where it does not, `what` is skipped, saying why.
pub fn pid_namespaces_allowed(what: &str) -> bool {
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).output();
    let allowed = probe.is_ok_and(|output| output.status.success());
    if !allowed {
        skip(what, "`unshare --pid` is not permitted here");
    }
    allowed
}
