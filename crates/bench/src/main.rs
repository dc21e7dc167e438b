//! `make bench`: what users pay for gpurun, measured side by side on the NVML simulator.
//!
//! usage: gpurun-bench [--quick] [--out FILE] [--nvisel PATH] [--gpurun PATH] [--before PATH] [--only queue|burst|launch|real-driver|ranks]
//!
//! `--gpurun PATH` measures another build (an older one, for a before/after in the same run);
//! `--before PATH` puts an older build's launch beside this one's in the launch's parts.
//!
//! Every figure is a median over repeated runs; every comparison is measured in the same run.
//! Targets (DESIGN 13): launch overhead within 3 ms of NVML's own init time, flat from 1 to 64
//! GPUs, and at least 30x faster than nvisel; a cost that does not grow with the number of
//! processes on the host; supervision under 4 MiB resident (NVML thread included) and 0.1% of a
//! core; the command's end to gpurun's exit under 100 ms even while NVML hangs; 200 concurrent
//! launches onto 8 GPUs with zero double bookings.
//! `gpurun-bench --nvml-init-only LIB` is an internal mode: load and initialise NVML, count GPUs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

struct Bench {
    gpurun: PathBuf,
    sim_library: PathBuf,
    sim_cuda: PathBuf,
    own_exe: PathBuf,
    nvisel: Option<PathBuf>,
    /// `--before PATH`: an older build whose launch is measured beside this one's, in the same
    /// interleaved runs (`make bench BENCH_BEFORE=c31c9fa` builds it).
    before: Option<PathBuf>,
    work: tempfile::TempDir,
    quick: bool,
}

fn scenario(gpus: usize, init_delay_ms: u64) -> String {
    let mut text = format!("[init]\ndelay_ms = {init_delay_ms}\n");
    for index in 0..gpus {
        text.push_str(&format!(
            "[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\nuuid = \"GPU-bench000-0000-4000-8000-{index:012}\"\n\
             pci_bus_id = \"00000000:{bus:02X}:00.0\"\nmemory_total = \"80GiB\"\nmemory_reserved = \"512MiB\"\n\
             memory_used = \"{used}MiB\"\nutilization_gpu = {util}\nutilization_memory = 0\ntemperature_c = 40\n\
             power_mw = 60000\ncompute_mode = \"default\"\nmig_mode = \"disabled\"\nnuma_node = {node}\n",
            bus = index + 1,
            used = (index * 997) % 20000,
            util = (index * 37) % 100,
            node = index / 8,
        ));
    }
    // A topology to choose in: NVLink pairs, one PCIe switch per four GPUs.
    for index in (0..gpus.saturating_sub(1)).step_by(2) {
        let level = if index % 4 == 0 { "single" } else { "multiple" };
        text.push_str(&format!(
            "[[link]]\ngpus = [{index}, {}]\nlevel = \"{level}\"\nnvlink = true\n",
            index + 1
        ));
    }
    text
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

impl Bench {
    fn write_scenario(&self, name: &str, text: &str) -> PathBuf {
        let path = self.work.path().join(name);
        std::fs::write(&path, text).expect("write scenario");
        path
    }

    /// A command in the simulated machine's environment.
    fn command(&self, program: &Path, scenario: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .env("NVML_SIM_SCENARIO", scenario)
            .env("GPURUN_NVML_LIB", &self.sim_library)
            .env("GPURUN_LOCK_DIR", self.work.path().join("locks"))
            .env("XDG_STATE_HOME", self.work.path().join("state"))
            .env("LD_LIBRARY_PATH", self.sim_library.parent().unwrap())
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    fn time(&self, runs: usize, mut make: impl FnMut() -> Command) -> Duration {
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let mut command = make();
            let started = Instant::now();
            let status = command.status().expect("run");
            samples.push(started.elapsed());
            assert!(status.success(), "{command:?} failed: {status}");
        }
        median(samples)
    }

    fn runs(&self, full: usize) -> usize {
        if self.quick {
            (full / 3).max(5)
        } else {
            full
        }
    }

    fn launch_overhead(&self) -> Value {
        let mut rows = Vec::new();
        // One GPU, and two chosen by their links (the pairwise topology probe, then the set).
        for (gpus, delay, want) in
            [(1usize, 0u64, 1u32), (8, 0, 1), (64, 0, 1), (8, 200, 1), (8, 0, 2), (64, 0, 2)]
        {
            let scenario =
                self.write_scenario(&format!("overhead-{gpus}-{delay}.toml"), &scenario(gpus, delay));
            let runs = self.runs(if delay > 0 { 10 } else { 40 });
            let true_time = self.time(runs, || self.command(Path::new("true"), &scenario));
            let noop = self.time(runs, || {
                let mut command = self.command(&self.own_exe, &scenario);
                command.arg("--noop");
                command
            });
            let init = self.time(runs, || {
                let mut command = self.command(&self.own_exe, &scenario);
                command.arg("--nvml-init-only").arg(&self.sim_library);
                command
            });
            let gpurun = self.time(runs, || {
                let mut command = self.command(&self.gpurun, &scenario);
                command.args(["-q", "--gpus", &want.to_string(), "--", "true"]);
                command
            });
            let nvml_init = init.saturating_sub(noop);
            let overhead = gpurun.saturating_sub(true_time);
            rows.push(json!({
                "gpus": gpus,
                "requested": want,
                "nvml_init_delay_ms": delay,
                "runs": runs,
                "true_ms": ms(true_time),
                "gpurun_ms": ms(gpurun),
                "overhead_ms": ms(overhead),
                "nvml_init_ms": ms(nvml_init),
                "overhead_beyond_nvml_init_ms": ms(overhead.saturating_sub(nvml_init)),
            }));
        }
        Value::Array(rows)
    }

    /// `gpurun --gpus 1 -- true` against `env true` (the yardstick: a wrapper that
    /// execs), and what each part of a launch adds, taken away one documented flag at a time:
    /// `--gpus 0` is the supervisor alone (the watcher, the spawn, the wait); `--no-lock
    /// --verify off --no-history` adds NVML's thread, its init and the probe; then the lock
    /// directory, the verification monitor and the history line. Runs interleaved, so that a
    /// slow moment of the machine falls on every variant alike.
    fn launch_cost(&self) -> Value {
        let scenario = self.write_scenario("launch-cost.toml", &scenario(8, 0));
        let runs = self.runs(60);
        let variants: [(&str, Option<&[&str]>); 6] = [
            ("env true", None),
            ("gpurun --gpus 0", Some(&["-q", "--gpus", "0"])),
            (
                "+ NVML and the probe",
                Some(&["-q", "--gpus", "1", "--no-lock", "--verify", "off", "--no-history"]),
            ),
            ("+ the lock directory", Some(&["-q", "--gpus", "1", "--verify", "off", "--no-history"])),
            ("+ verification", Some(&["-q", "--gpus", "1", "--no-history"])),
            ("+ the history (the default)", Some(&["-q", "--gpus", "1"])),
        ];
        let slots = variants.len() + usize::from(self.before.is_some());
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); slots];
        for _ in 0..runs {
            if let Some(before) = &self.before {
                let mut command = self.command(before, &scenario);
                command.args(["-q", "--gpus", "1", "--", "true"]);
                let started = Instant::now();
                let status = command.status().expect("run the older build");
                samples[variants.len()].push(started.elapsed());
                assert!(status.success(), "{command:?} failed: {status}");
            }
            for (slot, (_, args)) in variants.iter().enumerate() {
                let mut command = match args {
                    None => {
                        let mut command = self.command(Path::new("env"), &scenario);
                        command.arg("true");
                        command
                    }
                    Some(args) => {
                        let mut command = self.command(&self.gpurun, &scenario);
                        command.args(*args).args(["--", "true"]);
                        command
                    }
                };
                let started = Instant::now();
                let status = command.status().expect("run");
                samples[slot].push(started.elapsed());
                assert!(status.success(), "{command:?} failed: {status}");
            }
        }
        let medians: Vec<Duration> = samples.into_iter().map(median).collect();
        let env_true = medians[0];
        let mut rows: Vec<Value> = variants
            .iter()
            .zip(&medians)
            .enumerate()
            .map(|(slot, ((name, _), time))| {
                let added = if slot == 0 { Duration::ZERO } else { time.saturating_sub(medians[slot - 1]) };
                json!({"variant": name, "ms": ms(*time), "added_ms": if slot == 0 { 0.0 } else { ms(added) },
                       "times_env_true": time.as_secs_f64() / env_true.as_secs_f64()})
            })
            .collect();
        if let (Some(before), Some(time)) = (&self.before, medians.get(variants.len())) {
            // `make bench` builds commit C into target/before/C: named by C.
            let parts: Vec<String> = before.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            let commit = parts.iter().position(|part| part == "before").and_then(|at| parts.get(at + 1));
            let name = format!(
                "the older build ({})",
                commit.cloned().unwrap_or_else(|| before.display().to_string())
            );
            let added = time.as_secs_f64() - medians[5].as_secs_f64();
            rows.push(json!({"variant": name, "ms": ms(*time), "added_ms": added * 1000.0,
                             "times_env_true": time.as_secs_f64() / env_true.as_secs_f64()}));
        }
        json!({"runs": runs, "rows": rows, "env_true_ms": ms(env_true),
               "gpurun_over_env_true": medians[5].as_secs_f64() / env_true.as_secs_f64()})
    }

    /// The launch on a real driver's latencies (issue 63): eight simulated H200s answering each
    /// NVML call as slowly as the real one did (`[latency] profile = "h200-580"`), each figure
    /// beside the floor every tool pays in the same run (nvmlInit and each GPU's first handle).
    fn real_driver(&self) -> Value {
        let mut text = String::from("[latency]\nprofile = \"h200-580\"\n\n");
        for index in 0..8 {
            text.push_str(&format!(
                "[[gpu]]\nname = \"NVIDIA H200\"\nuuid = \"GPU-bench200-0000-4000-8000-{index:012}\"\n\
                 pci_bus_id = \"00000000:{bus:02X}:00.0\"\nmemory_total = 150754820096\nmemory_reserved = 644939776\n\
                 utilization_gpu = 0\nutilization_memory = 0\ntemperature_c = 39\npower_mw = 83842\n\
                 power_limit_mw = 700000\ncompute_mode = \"default\"\nmig_mode = \"disabled\"\necc_mode = \"enabled\"\n\
                 clocks_event_reasons = [\"idle\"]\ncpu_affinity = \"{cpus}\"\nnuma_node = {node}\n\
                 fabric = {{ state = \"not-supported\" }}\n",
                bus = index + 1,
                cpus = if index < 4 { "0-47" } else { "48-95" },
                node = index / 4,
            ));
        }
        // Another user's job on GPU 7: an eight-GPU --exclusive request is refused now (75).
        text.push_str("[[process]]\ngpu = 7\npid = 4242424\nused = \"10GiB\"\n");
        let scenario = self.write_scenario("real-driver.toml", &text);
        let runs = self.runs(15);
        let library = self.sim_library.display().to_string();
        let variants: [(&str, Vec<&str>, i32); 6] = [
            ("the floor: nvmlInit + each first handle", vec!["--nvml-init-handles", &library], 0),
            ("gpurun --gpus 1 -- true", vec!["-q", "--gpus", "1", "--", "true"], 0),
            // Until the command writes its first byte: what a job waits before it runs (the
            // receipt's first reading and the last look after it ends are not in it).
            ("  of which until the command starts", vec!["-q", "--gpus", "1", "--", "echo", "started"], 0),
            ("gpurun --export", vec!["--export"], 0),
            ("gpurun --list", vec!["--list"], 0),
            ("a refusal (--gpus 8 --exclusive)", vec!["-q", "--gpus", "8", "--exclusive", "--", "true"], 75),
        ];
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); variants.len()];
        for _ in 0..runs {
            for (slot, (_, args, expected)) in variants.iter().enumerate() {
                let program = if slot == 0 { &self.own_exe } else { &self.gpurun };
                let mut command = self.command(program, &scenario);
                command.args(args);
                let started = Instant::now();
                let status = match args.last() == Some(&"started") {
                    true => {
                        let mut child = command.stdout(Stdio::piped()).spawn().expect("run");
                        let mut first = [0u8; 1];
                        let stdout = child.stdout.as_mut().expect("piped");
                        std::io::Read::read_exact(stdout, &mut first).expect("the command's output");
                        samples[slot].push(started.elapsed());
                        child.wait().expect("wait")
                    }
                    false => {
                        let status = command.status().expect("run");
                        samples[slot].push(started.elapsed());
                        status
                    }
                };
                assert_eq!(status.code(), Some(*expected), "{command:?}: {status}");
            }
        }
        let medians: Vec<Duration> = samples.into_iter().map(median).collect();
        let floor = medians[0];
        let rows: Vec<Value> = variants
            .iter()
            .zip(&medians)
            .map(|((name, _, _), time)| {
                json!({"variant": name, "ms": ms(*time), "times_floor": time.as_secs_f64() / floor.as_secs_f64()})
            })
            .collect();
        json!({"runs": runs, "gpus": 8, "profile": "h200-580", "rows": rows,
               "launch_over_floor": medians[1].as_secs_f64() / floor.as_secs_f64()})
    }

    fn against_nvisel(&self) -> Value {
        let Some(nvisel) = &self.nvisel else {
            return json!({"measured": false, "why": "nvisel not found (make bench installs nvitop into .venv-bench)"});
        };
        let scenario = self.write_scenario("nvisel.toml", &scenario(8, 0));
        let runs = self.runs(20);
        let nvisel_time = self.time(runs, || {
            let mut command = self.command(nvisel, &scenario);
            command.args(["-n", "1", "--min-free", "8GiB"]);
            command
        });
        let gpurun_export = self.time(runs, || {
            let mut command = self.command(&self.gpurun, &scenario);
            command.args(["-q", "--gpus", "1", "--min-free", "8G", "--export"]);
            command
        });
        let gpurun_run = self.time(runs, || {
            let mut command = self.command(&self.gpurun, &scenario);
            command.args(["-q", "--gpus", "1", "--min-free", "8G", "--", "true"]);
            command
        });
        json!({
            "measured": true,
            "runs": runs,
            "nvisel_ms": ms(nvisel_time),
            "gpurun_export_ms": ms(gpurun_export),
            "gpurun_run_true_ms": ms(gpurun_run),
            "speedup_export": nvisel_time.as_secs_f64() / gpurun_export.as_secs_f64(),
            "speedup_run": nvisel_time.as_secs_f64() / gpurun_run.as_secs_f64(),
        })
    }

    fn supervision(&self) -> Value {
        let seconds = if self.quick { 10 } else { 60 };
        let scenario = self.write_scenario("supervision.toml", &scenario(8, 0));
        let mut command = self.command(&self.gpurun, &scenario);
        command.args(["-q", "--gpus", "1", "--"]).arg(&self.sim_cuda).args([
            "--quiet",
            "--sleep",
            &seconds.to_string(),
        ]);
        let started = Instant::now();
        let mut child = command.spawn().expect("start gpurun");
        let pid = child.id();
        // Every thread's time on a CPU, in ns (schedstat's first field): utime and stime count
        // in clock ticks, too coarse for a supervisor that wakes a few times a minute. Read once
        // the launch is over and again near the end: the polling alone.
        let cpu_ns = || -> u64 {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|tasks| {
                    tasks
                        .flatten()
                        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
                        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
                        .sum()
                })
                .unwrap_or(0)
        };
        let settled = Duration::from_millis(1500);
        std::thread::sleep(settled);
        let polling_from = (cpu_ns(), Instant::now());
        std::thread::sleep(Duration::from_secs(seconds) - Duration::from_millis(500) - settled);
        let polling_ns = cpu_ns().saturating_sub(polling_from.0);
        let polling_window = polling_from.1.elapsed();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map(|t| t.count()).unwrap_or(0);
        let wall = started.elapsed();
        child.wait().expect("wait gpurun");
        let kib = |field: &str| -> u64 {
            status
                .lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        // utime and stime are fields 14 and 15; `fields` starts at field 3.
        let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
            + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu_seconds = ticks as f64 / hz;
        // The NVML library's own pages (the simulator here, the driver's library for real) are
        // not gpurun's: they are reported apart.
        let mut library_kib = 0u64;
        let mut in_library = false;
        for line in smaps.lines() {
            if line
                .split_whitespace()
                .next()
                .is_some_and(|range| range.contains('-') && !range.ends_with(':'))
            {
                in_library = line.contains("libnvml_sim") || line.contains("libnvidia-ml");
            } else if in_library && line.starts_with("Rss:") {
                library_kib +=
                    line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
        json!({
            "child_seconds": seconds,
            "threads": threads,
            "vm_hwm_kib": kib("VmHWM:"),
            "vm_rss_kib": kib("VmRSS:"),
            "nvml_library_rss_kib": library_kib,
            "own_rss_kib": kib("VmRSS:").saturating_sub(library_kib),
            "cpu_seconds": cpu_seconds,
            "cpu_percent_of_a_core": 100.0 * cpu_seconds / wall.as_secs_f64(),
            "polling_cpu_us_per_second": polling_ns as f64 / 1000.0 / polling_window.as_secs_f64(),
        })
    }

    fn verification_latency(&self) -> Value {
        let scenario = self.write_scenario("latency.toml", &scenario(8, 0));
        let mut samples = Vec::new();
        for _ in 0..self.runs(10) {
            let mut command = self.command(&self.gpurun, &scenario);
            command.args(["--gpus", "1", "--"]).arg(&self.sim_cuda).args(["--sleep", "1.5"]);
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = command.spawn().expect("start gpurun");
            let mut stdout = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            stdout.read_line(&mut line).expect("sim-cuda registered");
            let registered = Instant::now();
            let stderr = BufReader::new(child.stderr.take().unwrap());
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("verified:") {
                    samples.push(registered.elapsed());
                    break;
                }
            }
            child.wait().expect("wait gpurun");
        }
        let runs = samples.len();
        json!({"runs": runs, "median_ms": ms(median(samples.clone())), "max_ms": ms(samples.into_iter().max().unwrap_or_default())})
    }

    /// Launch cost with thousands of unrelated, idle processes on the host, against none.
    fn busy_host(&self) -> Value {
        let scenario = self.write_scenario("busy-host.toml", &scenario(8, 0));
        let runs = self.runs(30);
        let measure = |gpus: &str| {
            self.time(runs, || {
                let mut command = self.command(&self.gpurun, &scenario);
                command.args(["-q", "--gpus", gpus, "--", "true"]);
                command
            })
        };
        let quiet = (measure("0"), measure("1"));
        let idle = if self.quick { 1000 } else { 3000 };
        let sleepers = Sleepers(
            (0..idle)
                .filter_map(|_| Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().ok())
                .collect(),
        );
        let started = sleepers.0.len();
        let busy = (measure("0"), measure("1"));
        drop(sleepers);
        json!({
            "idle_processes": started,
            "runs": runs,
            "quiet_gpus0_ms": ms(quiet.0),
            "busy_gpus0_ms": ms(busy.0),
            "quiet_gpus1_ms": ms(quiet.1),
            "busy_gpus1_ms": ms(busy.1),
            "ratio_gpus0": busy.0.as_secs_f64() / quiet.0.as_secs_f64(),
            "ratio_gpus1": busy.1.as_secs_f64() / quiet.1.as_secs_f64(),
        })
    }

    /// From the command's last instruction to gpurun's exit, with NVML healthy and with every
    /// verification poll hanging.
    fn end_to_exit(&self) -> Value {
        let healthy = self.write_scenario("end-healthy.toml", &scenario(8, 0));
        let mut hung_text = scenario(8, 0);
        hung_text.push_str("[[hang]]\ncall = \"nvmlDeviceGetComputeRunningProcesses\"\ngpu = 0\nafter = 1\n");
        let hung = self.write_scenario("end-hung.toml", &hung_text);
        let measure = |scenario: &Path| {
            let mut samples = Vec::new();
            for _ in 0..self.runs(10) {
                let mut command = self.command(&self.gpurun, scenario);
                command.args(["-q", "--gpus", "1", "--", "sh", "-c", "sleep 0.5; date +%s%N"]);
                command.stdout(Stdio::piped());
                let output = command.output().expect("run gpurun");
                let exited = now_ns();
                let last: u128 = String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(exited);
                samples.push(Duration::from_nanos(exited.saturating_sub(last) as u64));
            }
            samples
        };
        let (healthy, hung) = (measure(&healthy), measure(&hung));
        json!({
            "runs": healthy.len(),
            "healthy_median_ms": ms(median(healthy.clone())),
            "healthy_max_ms": ms(healthy.into_iter().max().unwrap_or_default()),
            "hung_median_ms": ms(median(hung.clone())),
            "hung_max_ms": ms(hung.into_iter().max().unwrap_or_default()),
        })
    }

    fn contention(&self) -> Value {
        let launches = if self.quick { 60 } else { 200 };
        let scenario = self.write_scenario("contention.toml", &scenario(8, 0));
        let log = self.work.path().join("contention.log");
        let job = format!(
            "echo START $(date +%s%N) $GPURUN_GPUS >> {log}; {sim} --quiet --mem 1GiB --sleep 0.2; echo END $(date +%s%N) $GPURUN_GPUS >> {log}",
            log = log.display(),
            sim = self.sim_cuda.display()
        );
        let started = Instant::now();
        let launched_at = now_ns();
        let children: Vec<Child> = (0..launches)
            .map(|_| {
                let mut command = self.command(&self.gpurun, &scenario);
                command.args(["-q", "--exclusive", "--wait", "--", "sh", "-c", &job]);
                command.spawn().expect("launch")
            })
            .collect();
        let mut failed = 0;
        for mut child in children {
            if !child.wait().map(|s| s.success()).unwrap_or(false) {
                failed += 1;
            }
        }
        let wall = started.elapsed();
        let runs = runs_per_gpu(&std::fs::read_to_string(&log).unwrap_or_default());
        let longest_wait_ns =
            runs.values().flatten().map(|(start, _)| start.saturating_sub(launched_at)).max().unwrap_or(0);
        let double_bookings: usize = runs
            .values()
            .map(|intervals| intervals.windows(2).filter(|pair| pair[0].1 > pair[1].0).count())
            .sum();
        let completed: usize = runs.values().map(Vec::len).sum();
        json!({
            "launches": launches,
            "gpus": 8,
            "job_seconds": 0.2,
            "completed": completed,
            "failed": failed,
            "wall_seconds": wall.as_secs_f64(),
            "throughput_jobs_per_second": completed as f64 / wall.as_secs_f64(),
            "longest_wait_seconds": longest_wait_ns as f64 / 1e9,
            "double_bookings": double_bookings,
        })
    }
}

impl Bench {
    /// `ranks` ranks of one job on as many idle GPUs through `--per-rank` (the variables
    /// torchrun sets), all started at once: from the first rank's start to the last rank's
    /// command starting, against the same number of independent `--gpus 1` launches.
    fn ranks(&self, ranks: usize) -> Value {
        let scenario = self.write_scenario("ranks.toml", &idle_scenario(ranks));
        let stamp = "date +%s%N".to_owned();
        let measure = |per_rank: bool, trial: usize| -> Option<Duration> {
            let started = now_ns();
            let children: Vec<Child> = (0..ranks)
                .map(|rank| {
                    let mut command = self.command(&self.gpurun, &scenario);
                    if per_rank {
                        command
                            .env("LOCAL_RANK", rank.to_string())
                            .env("LOCAL_WORLD_SIZE", ranks.to_string())
                            .args(["-q", "--per-rank", "--group", &format!("bench-{trial}")]);
                    } else {
                        command.args(["-q", "--exclusive", "--gpus", "1"]);
                    }
                    command.args(["--", "sh", "-c", &stamp]).stdout(Stdio::piped());
                    command.spawn().expect("start a rank")
                })
                .collect();
            let mut last = 0u128;
            for child in children {
                let output = child.wait_with_output().ok()?;
                if !output.status.success() {
                    return None;
                }
                last = last.max(String::from_utf8_lossy(&output.stdout).trim().parse().ok()?);
            }
            Some(Duration::from_nanos(last.saturating_sub(started) as u64))
        };
        let trials = self.runs(10);
        let per_rank: Vec<Duration> = (0..trials).filter_map(|trial| measure(true, trial)).collect();
        let independent: Vec<Duration> = (0..trials).filter_map(|trial| measure(false, trial)).collect();
        json!({
            "ranks": ranks,
            "gpus": ranks,
            "trials": trials,
            "failed": 2 * trials - per_rank.len() - independent.len(),
            "per_rank_median_ms": ms(median(per_rank.clone())),
            "per_rank_max_ms": ms(per_rank.into_iter().max().unwrap_or_default()),
            "independent_median_ms": ms(median(independent.clone())),
            "independent_max_ms": ms(independent.into_iter().max().unwrap_or_default()),
        })
    }

    /// `jobs` launches of a 0.2 s job queued at once onto 8 idle GPUs (`--exclusive --wait`):
    /// the wall against the ideal, how busy the GPUs were, and the hand-off: from a job's end on
    /// a GPU to the next job's start there (its gpurun's exit, the wake-up, the next gpurun's
    /// look and its command's start). `on`: where the lock directory is: `disk` (the bench's
    /// own directory) or `tmpfs` (/dev/shm, as /run/lock is on a systemd machine, where the
    /// default /run/lock/gpurun lives; `None` when there is no /dev/shm).
    fn queue(&self, jobs: usize, on: LockFs) -> Option<Value> {
        let scenario = self.write_scenario(&format!("queue{jobs}.toml"), &idle_scenario(8));
        let log = self.work.path().join(format!("queue{jobs}-{}.log", on.name()));
        let shm = match on {
            LockFs::Disk => None,
            LockFs::Tmpfs => Some(tempfile::tempdir_in("/dev/shm").ok()?),
        };
        let locks = match &shm {
            Some(dir) => dir.path().join("locks"),
            None => self.work.path().join(format!("queue{jobs}-locks")),
        };
        let job = format!(
            "echo START $(date +%s%N) $GPURUN_GPUS >> {log}; {sim} --quiet --mem 1GiB --sleep 0.2; echo END $(date +%s%N) $GPURUN_GPUS >> {log}",
            log = log.display(),
            sim = self.sim_cuda.display()
        );
        let started = Instant::now();
        let children: Vec<Child> = (0..jobs)
            .map(|_| {
                let mut command = self.command(&self.gpurun, &scenario);
                command.env("GPURUN_LOCK_DIR", &locks).args([
                    "-q",
                    "--exclusive",
                    "--wait",
                    "--",
                    "sh",
                    "-c",
                    &job,
                ]);
                command.spawn().expect("launch")
            })
            .collect();
        let failed = children
            .into_iter()
            .map(|mut child| child.wait().is_ok_and(|s| s.success()))
            .filter(|ok| !ok)
            .count();
        let wall = started.elapsed().as_secs_f64();
        let runs = runs_per_gpu(&std::fs::read_to_string(&log).unwrap_or_default());
        let mut gaps_ms: Vec<f64> = Vec::new();
        let mut double_bookings = 0;
        let mut busy_ns = 0u128;
        for intervals in runs.values() {
            for pair in intervals.windows(2) {
                if pair[0].1 > pair[1].0 {
                    double_bookings += 1;
                } else {
                    gaps_ms.push((pair[1].0 - pair[0].1) as f64 / 1e6);
                }
            }
            busy_ns += intervals.iter().map(|(start, end)| end - start).sum::<u128>();
        }
        gaps_ms.sort_by(f64::total_cmp);
        let percentile = |p: f64| gaps_ms.get(((gaps_ms.len() as f64 - 1.0) * p).round() as usize).copied();
        let completed: usize = runs.values().map(Vec::len).sum();
        let ideal = jobs as f64 * 0.2 / 8.0;
        Some(json!({
            "lock_dir_on": on.name(),
            "jobs": jobs,
            "completed": completed,
            "failed": failed,
            "wall_seconds": wall,
            "ideal_seconds": ideal,
            "wall_over_ideal": wall / ideal,
            "gpus_busy_percent": busy_ns as f64 / 1e9 / (wall * 8.0) * 100.0,
            "handoff_p50_ms": percentile(0.5),
            "handoff_p99_ms": percentile(0.99),
            "double_bookings": double_bookings,
        }))
    }

    /// The hand-off with `waiters` queued behind a full machine (8 GPUs held): a holder's
    /// command is ended, and the time from then to the next waiter's command starting on the
    /// freed GPU is taken (its gpurun's exit and lease release, the wake-up, the waiter's look
    /// at the machine, its command's start); 10 hand-offs.
    fn handoff(&self, waiters: usize) -> Value {
        let scenario = self.write_scenario(&format!("handoff{waiters}.toml"), &idle_scenario(8));
        let locks = self.work.path().join(format!("handoff{waiters}-locks"));
        let log = self.work.path().join(format!("handoff{waiters}.log"));
        let job = format!("echo START $(date +%s%N) >> {}; exec sleep 300", log.display());
        let launch = |wait: bool| {
            let mut command = self.command(&self.gpurun, &scenario);
            command.env("GPURUN_LOCK_DIR", &locks).args(["-q", "--exclusive", "--verify", "off"]);
            if wait {
                command.arg("--wait");
            }
            command.args(["--", "sh", "-c", &job]).spawn().expect("launch")
        };
        let starts = || std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or(0);
        let until = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while starts() < count && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let _holders = Sleepers((0..8).map(|_| launch(false)).collect());
        until(8);
        let _queued = Sleepers((0..waiters).map(|_| launch(true)).collect());
        std::thread::sleep(Duration::from_secs(3));
        // The holder of a GPU's lease, by the lease's name (`<uuid>.<pid>.<nonce>.lease`): after
        // the first hand-offs, the holders are waiters that were served.
        let holder_of = |gpu: usize| -> Option<u32> {
            std::fs::read_dir(&locks).ok()?.flatten().find_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rest = name.strip_suffix(".lease")?;
                let mut fields = rest.rsplitn(3, '.');
                let (_nonce, pid, uuid) = (fields.next()?, fields.next()?, fields.next()?);
                uuid.ends_with(&format!("{gpu:012}")).then(|| pid.parse().ok()).flatten()
            })
        };
        let mut latencies_ms = Vec::new();
        for round in 0..10.min(waiters) {
            let Some(holder) = holder_of(round % 8) else { break };
            let ended_at = now_ns();
            terminate(holder);
            until(9 + round);
            if starts() < 9 + round {
                break;
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let started: u128 = text
                .lines()
                .last()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            latencies_ms.push(started.saturating_sub(ended_at) as f64 / 1e6);
        }
        latencies_ms.sort_by(f64::total_cmp);
        let at = |p: f64| latencies_ms.get(((latencies_ms.len() as f64 - 1.0) * p).round() as usize).copied();
        json!({"waiters": waiters, "handoffs": latencies_ms.len(), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": latencies_ms.last()})
    }

    /// 100 waiters blocked behind a full machine: the CPU they use in all while they wait, and
    /// the memory each holds.
    fn blocked_waiters(&self) -> Value {
        let waiters = 100;
        let seconds = if self.quick { 5.0 } else { 10.0 };
        let scenario = self.write_scenario("blocked.toml", &idle_scenario(8));
        let locks = self.work.path().join("blocked-locks");
        let launch = |args: &[&str]| {
            let mut command = self.command(&self.gpurun, &scenario);
            command.env("GPURUN_LOCK_DIR", &locks).args(args);
            command.spawn().expect("launch")
        };
        let holders =
            Sleepers((0..8).map(|_| launch(&["-q", "--exclusive", "--", "sleep", "120"])).collect());
        let leases = || {
            std::fs::read_dir(&locks)
                .map(|entries| {
                    entries.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".lease")).count()
                })
                .unwrap_or(0)
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while leases() < 8 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let blocked =
            Sleepers((0..waiters).map(|_| launch(&["-q", "--exclusive", "--wait", "--", "true"])).collect());
        // Let every one of them take its ticket.
        std::thread::sleep(Duration::from_secs(3));
        let pids: Vec<u32> = blocked.0.iter().map(Child::id).collect();
        let before: u64 = pids.iter().map(|pid| cpu_ticks(*pid)).sum();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let after: u64 = pids.iter().map(|pid| cpu_ticks(*pid)).sum();
        let rss: Vec<u64> = pids.iter().filter_map(|pid| rss_kib(*pid)).collect();
        drop(blocked);
        drop(holders);
        let ticks_per_second = 100.0;
        json!({
            "waiters": waiters,
            "seconds": seconds,
            "cpu_seconds": (after - before) as f64 / ticks_per_second,
            "percent_of_one_core": (after - before) as f64 / ticks_per_second / seconds * 100.0,
            "rss_kib_per_waiter": rss.iter().sum::<u64>() / (rss.len().max(1) as u64),
        })
    }
}

/// `START <ns> <gpus>` / `END <ns> <gpus>` lines -> each GPU's job intervals, in order.
/// The filesystem of a queue row's lock directory.
#[derive(Clone, Copy)]
enum LockFs {
    Disk,
    Tmpfs,
}

impl LockFs {
    fn name(self) -> &'static str {
        match self {
            LockFs::Disk => "disk",
            LockFs::Tmpfs => "tmpfs",
        }
    }
}

/// The queue's rows: 10, 100 and 400 jobs with the lock directory on disk, and 400 on tmpfs.
fn queue_rows(bench: &Bench) -> Vec<Value> {
    [(10, LockFs::Disk), (100, LockFs::Disk), (400, LockFs::Disk), (400, LockFs::Tmpfs)]
        .into_iter()
        .filter_map(|(jobs, on)| {
            eprintln!("measuring the queue: {jobs} jobs at once, lock directory on {}...", on.name());
            bench.queue(jobs, on)
        })
        .collect()
}

fn runs_per_gpu(text: &str) -> BTreeMap<String, Vec<(u128, u128)>> {
    let mut open: Vec<(u128, String)> = Vec::new();
    let mut runs: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(event), Some(time), Some(gpu)) =
            (fields.first(), fields.get(1).and_then(|t| t.parse::<u128>().ok()), fields.get(2))
        else {
            continue;
        };
        if *event == "START" {
            open.push((time, gpu.to_string()));
        } else if let Some(position) = open.iter().position(|(t, g)| g == gpu && *t <= time) {
            let (start, gpu) = open.remove(position);
            runs.entry(gpu).or_default().push((start, time));
        }
    }
    for intervals in runs.values_mut() {
        intervals.sort_unstable();
    }
    runs
}

/// SIGTERM to a gpurun: it forwards it to its command and ends when the command does.
fn terminate(pid: u32) {
    // SAFETY: kill(2) has no memory arguments.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
}

/// utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = stat.rfind(')').map(|at| &stat[at + 2..]) else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3: utime is field 14, stime 15.
    fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// `gpus` idle A100s, no links: the queue's bench is about hand-offs, not choice.
fn idle_scenario(gpus: usize) -> String {
    (0..gpus)
        .map(|index| {
            format!(
                "[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\nuuid = \"GPU-queue000-0000-4000-8000-{index:012}\"\n\
                 pci_bus_id = \"00000000:{bus:02X}:00.0\"\nmemory_total = \"80GiB\"\nutilization_gpu = 0\n\
                 utilization_memory = 0\n",
                bus = index + 1
            )
        })
        .collect()
}

/// Idle processes, ended however the measurement ends (a failed run must not leave thousands).
struct Sleepers(Vec<Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for sleeper in &mut self.0 {
            let _ = sleeper.kill();
        }
        for sleeper in &mut self.0 {
            let _ = sleeper.wait();
        }
    }
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    json!({"cpu": model, "cores": cores})
}

fn print_table(results: &Value) {
    println!("gpurun benchmark on {} ({} cores)\n", results["machine"]["cpu"], results["machine"]["cores"]);
    println!("Launch overhead: gpurun --gpus N -- true vs true (medians, ms; --gpus 2 probes the links)");
    println!(
        "{:>5} {:>7} {:>9} {:>8} {:>10} {:>10} {:>10} {:>16}",
        "GPUs", "--gpus", "init(ms)", "true", "gpurun", "overhead", "NVML init", "beyond NVML init"
    );
    for row in results["launch_overhead"].as_array().into_iter().flatten() {
        println!(
            "{:>5} {:>7} {:>9} {:>8.2} {:>10.2} {:>10.2} {:>10.2} {:>16.2}",
            row["gpus"].as_u64().unwrap_or(0),
            row["requested"].as_u64().unwrap_or(1),
            row["nvml_init_delay_ms"].as_u64().unwrap_or(0),
            row["true_ms"].as_f64().unwrap_or(0.0),
            row["gpurun_ms"].as_f64().unwrap_or(0.0),
            row["overhead_ms"].as_f64().unwrap_or(0.0),
            row["nvml_init_ms"].as_f64().unwrap_or(0.0),
            row["overhead_beyond_nvml_init_ms"].as_f64().unwrap_or(0.0)
        );
    }
    let cost = &results["launch_cost"];
    println!(
        "\nA launch's parts: gpurun --gpus 1 -- true is {:.2}x env true (medians of {} interleaved runs, 8 GPUs)",
        cost["gpurun_over_env_true"].as_f64().unwrap_or(0.0),
        cost["runs"]
    );
    for row in cost["rows"].as_array().into_iter().flatten() {
        println!(
            "  {:<30} {:>6.2} ms  ({:+.2} ms, {:.2}x env true)",
            row["variant"].as_str().unwrap_or("?"),
            row["ms"].as_f64().unwrap_or(0.0),
            row["added_ms"].as_f64().unwrap_or(0.0),
            row["times_env_true"].as_f64().unwrap_or(0.0)
        );
    }
    let real = &results["real_driver"];
    println!(
        "\nOn a real driver's latencies (8 simulated H200s, profile h200-580, medians of {} runs): the launch is {:.2}x the floor (goal: 1.5x)",
        real["runs"],
        real["launch_over_floor"].as_f64().unwrap_or(0.0)
    );
    for row in real["rows"].as_array().into_iter().flatten() {
        println!(
            "  {:<42} {:>7.1} ms  ({:.2}x the floor)",
            row["variant"].as_str().unwrap_or("?"),
            row["ms"].as_f64().unwrap_or(0.0),
            row["times_floor"].as_f64().unwrap_or(0.0)
        );
    }
    let nvisel = &results["against_nvisel"];
    if nvisel["measured"] == true {
        println!(
            "\nAgainst nvisel (8 GPUs, 1 GPU with 8 GiB free): nvisel {:.1} ms, gpurun --export {:.1} ms ({:.1}x), gpurun -- true {:.1} ms ({:.1}x)",
            nvisel["nvisel_ms"].as_f64().unwrap_or(0.0),
            nvisel["gpurun_export_ms"].as_f64().unwrap_or(0.0),
            nvisel["speedup_export"].as_f64().unwrap_or(0.0),
            nvisel["gpurun_run_true_ms"].as_f64().unwrap_or(0.0),
            nvisel["speedup_run"].as_f64().unwrap_or(0.0)
        );
    } else {
        println!("\nAgainst nvisel: not measured ({})", nvisel["why"]);
    }
    let supervision = &results["supervision"];
    println!(
        "\nSupervision of a {} s child with verification polling ({} threads): VmHWM {} KiB, VmRSS {} KiB of which \
         the NVML library's pages {} KiB and gpurun's own {} KiB; CPU {:.3} s = {:.3}% of a core; while polling \
         {:.1} us of CPU per second",
        supervision["child_seconds"],
        supervision["threads"],
        supervision["vm_hwm_kib"],
        supervision["vm_rss_kib"],
        supervision["nvml_library_rss_kib"],
        supervision["own_rss_kib"],
        supervision["cpu_seconds"].as_f64().unwrap_or(0.0),
        supervision["cpu_percent_of_a_core"].as_f64().unwrap_or(0.0),
        supervision["polling_cpu_us_per_second"].as_f64().unwrap_or(0.0)
    );
    let latency = &results["verification_latency"];
    println!(
        "Verification latency (registration in NVML -> verdict): median {:.0} ms, max {:.0} ms over {} runs",
        latency["median_ms"].as_f64().unwrap_or(0.0),
        latency["max_ms"].as_f64().unwrap_or(0.0),
        latency["runs"]
    );
    let busy = &results["busy_host"];
    println!(
        "Busy host: with {} idle processes, gpurun --gpus 0 -- true {:.2} ms (quiet {:.2} ms, x{:.2}), --gpus 1 {:.2} ms (quiet {:.2} ms, x{:.2})",
        busy["idle_processes"],
        busy["busy_gpus0_ms"].as_f64().unwrap_or(0.0),
        busy["quiet_gpus0_ms"].as_f64().unwrap_or(0.0),
        busy["ratio_gpus0"].as_f64().unwrap_or(0.0),
        busy["busy_gpus1_ms"].as_f64().unwrap_or(0.0),
        busy["quiet_gpus1_ms"].as_f64().unwrap_or(0.0),
        busy["ratio_gpus1"].as_f64().unwrap_or(0.0)
    );
    let end = &results["end_to_exit"];
    println!(
        "Command's end to gpurun's exit: median {:.1} ms (max {:.1}) with NVML healthy, {:.1} ms (max {:.1}) while every poll hangs",
        end["healthy_median_ms"].as_f64().unwrap_or(0.0),
        end["healthy_max_ms"].as_f64().unwrap_or(0.0),
        end["hung_median_ms"].as_f64().unwrap_or(0.0),
        end["hung_max_ms"].as_f64().unwrap_or(0.0)
    );
    let contention = &results["contention"];
    println!(
        "Contention: {} launches of a {} s job onto {} GPUs with --exclusive --wait: {} completed, {} failed, \
         {:.1} s, {:.1} jobs/s, longest wait {:.1} s, double bookings {}",
        contention["launches"], contention["job_seconds"], contention["gpus"], contention["completed"], contention["failed"],
        contention["wall_seconds"].as_f64().unwrap_or(0.0),
        contention["throughput_jobs_per_second"].as_f64().unwrap_or(0.0),
        contention["longest_wait_seconds"].as_f64().unwrap_or(0.0),
        contention["double_bookings"]
    );
    println!("\nThe queue: N jobs of 0.2 s queued at once onto 8 idle GPUs with --exclusive --wait");
    println!(" jobs  lock dir   wall(s)  ideal(s)  wall/ideal  GPUs busy  hand-off p50(ms)  p99(ms)  failed  double bookings");
    for row in results["queue"].as_array().into_iter().flatten() {
        println!(
            "{:>5}  {:<8}  {:>8.2}  {:>8.2}  {:>10.2}  {:>8.0}%  {:>16.1}  {:>7.1}  {:>6}  {:>15}",
            row["jobs"],
            row["lock_dir_on"].as_str().unwrap_or("?"),
            row["wall_seconds"].as_f64().unwrap_or(0.0),
            row["ideal_seconds"].as_f64().unwrap_or(0.0),
            row["wall_over_ideal"].as_f64().unwrap_or(0.0),
            row["gpus_busy_percent"].as_f64().unwrap_or(0.0),
            row["handoff_p50_ms"].as_f64().unwrap_or(f64::NAN),
            row["handoff_p99_ms"].as_f64().unwrap_or(f64::NAN),
            row["failed"],
            row["double_bookings"]
        );
    }
    println!(
        "Hand-off: a lease's end to the next waiter's command starting, with N waiters queued (10 hand-offs)"
    );
    for row in results["handoff"].as_array().into_iter().flatten() {
        println!(
            "{:>5} waiters: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            row["waiters"],
            row["p50_ms"].as_f64().unwrap_or(f64::NAN),
            row["p99_ms"].as_f64().unwrap_or(f64::NAN),
            row["max_ms"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let blocked = &results["blocked_waiters"];
    println!(
        "Blocked waiters: {} waiters behind a full machine for {} s used {:.3} s of CPU in all ({:.2}% of one core); {} KiB resident each",
        blocked["waiters"],
        blocked["seconds"],
        blocked["cpu_seconds"].as_f64().unwrap_or(0.0),
        blocked["percent_of_one_core"].as_f64().unwrap_or(0.0),
        blocked["rss_kib_per_waiter"]
    );
    let ranks = &results["ranks"];
    println!(
        "Ranks: {} ranks of one job on {} idle GPUs (--per-rank), first rank's start to the last rank's command: \
         median {:.1} ms, max {:.1} ms; {} independent --gpus 1 launches at once: median {:.1} ms ({} failed)",
        ranks["ranks"],
        ranks["gpus"],
        ranks["per_rank_median_ms"].as_f64().unwrap_or(f64::NAN),
        ranks["per_rank_max_ms"].as_f64().unwrap_or(f64::NAN),
        ranks["ranks"],
        ranks["independent_median_ms"].as_f64().unwrap_or(f64::NAN),
        ranks["failed"]
    );
}

/// The floor of a real driver: nvmlInit, and a handle of each GPU (what `nvidia-smi -L` pays).
fn nvml_init_handles(library: &str) -> i32 {
    let Ok(nvml) = nvml_wrapper::Nvml::builder().lib_path(std::ffi::OsStr::new(library)).init() else {
        return 1;
    };
    let Ok(count) = nvml.device_count() else { return 1 };
    match (0..count).all(|index| nvml.device_by_index(index).is_ok()) {
        true => 0,
        false => 1,
    }
}

fn nvml_init_only(library: &str) -> i32 {
    match nvml_wrapper::Nvml::builder().lib_path(std::ffi::OsStr::new(library)).init() {
        Ok(nvml) => match nvml.device_count() {
            Ok(_) => 0,
            Err(_) => 1,
        },
        Err(_) => 1,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--noop") => return,
        Some("--nvml-init-only") => std::process::exit(nvml_init_only(&args[1])),
        Some("--nvml-init-handles") => std::process::exit(nvml_init_handles(&args[1])),
        _ => {}
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: gpurun-bench [--quick] [--out FILE] [--nvisel PATH] [--gpurun PATH] [--before PATH] [--only queue|burst|launch|real-driver|ranks|supervision]");
        return;
    }
    let option = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let own_exe = std::env::current_exe().expect("own path");
    let build = own_exe.parent().expect("build directory").to_path_buf();
    let work = tempfile::tempdir().expect("temporary directory");
    let sim_dir = work.path().join("lib");
    std::fs::create_dir(&sim_dir).expect("lib dir");
    let sim_library = sim_dir.join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(build.join("libnvml_sim.so"), &sim_library).expect("link the simulator");
    let bench = Bench {
        gpurun: option("--gpurun").map(PathBuf::from).unwrap_or_else(|| build.join("gpurun")),
        sim_library,
        sim_cuda: build.join("sim-cuda"),
        own_exe,
        nvisel: option("--nvisel").map(PathBuf::from).filter(|p| p.exists()),
        before: option("--before").map(PathBuf::from),
        work,
        quick: args.iter().any(|a| a == "--quick"),
    };
    // `--only queue|burst|launch|ranks`: one section's rows as JSON (while working on one of them).
    if let Some(only) = option("--only") {
        let rows = match only.as_str() {
            "queue" => {
                let rows = queue_rows(&bench);
                let handoff: Vec<Value> =
                    [10, 100, 400].into_iter().map(|waiters| bench.handoff(waiters)).collect();
                json!({"queue": rows, "handoff": handoff, "blocked_waiters": bench.blocked_waiters()})
            }
            "burst" => json!({"queue": [bench.queue(400, LockFs::Disk), bench.queue(400, LockFs::Tmpfs)]}),
            "launch" => json!({"launch_cost": bench.launch_cost()}),
            "real-driver" => json!({"real_driver": bench.real_driver()}),
            "ranks" => json!({"ranks": bench.ranks(8)}),
            "supervision" => json!({"supervision": bench.supervision()}),
            other => {
                eprintln!(
                    "gpurun-bench: --only {other}: expected queue, burst, launch, real-driver, ranks or supervision"
                );
                std::process::exit(2);
            }
        };
        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        return;
    }
    eprintln!("measuring launch overhead...");
    let launch_overhead = bench.launch_overhead();
    eprintln!("measuring the launch's parts...");
    let launch_cost = bench.launch_cost();
    eprintln!("measuring a launch on a real driver's latencies...");
    let real_driver = bench.real_driver();
    eprintln!("measuring against nvisel...");
    let against_nvisel = bench.against_nvisel();
    eprintln!("measuring supervision (this takes a minute)...");
    let supervision = bench.supervision();
    eprintln!("measuring verification latency...");
    let verification_latency = bench.verification_latency();
    eprintln!("measuring a busy host...");
    let busy_host = bench.busy_host();
    eprintln!("measuring the end of a run...");
    let end_to_exit = bench.end_to_exit();
    eprintln!("measuring contention...");
    let contention = bench.contention();
    let queue = queue_rows(&bench);
    let mut handoff = Vec::new();
    for waiters in [10, 100, 400] {
        eprintln!("measuring the hand-off with {waiters} waiters...");
        handoff.push(bench.handoff(waiters));
    }
    eprintln!("measuring 100 blocked waiters...");
    let blocked = bench.blocked_waiters();
    eprintln!("measuring 8 ranks of one job...");
    let ranks = bench.ranks(8);
    let results = json!({
        "machine": machine(),
        "quick": bench.quick,
        "launch_overhead": launch_overhead,
        "launch_cost": launch_cost,
        "real_driver": real_driver,
        "against_nvisel": against_nvisel,
        "supervision": supervision,
        "verification_latency": verification_latency,
        "busy_host": busy_host,
        "end_to_exit": end_to_exit,
        "contention": contention,
        "queue": queue,
        "handoff": handoff,
        "blocked_waiters": blocked,
        "ranks": ranks,
    });
    print_table(&results);
    if let Some(out) = option("--out") {
        if let Some(parent) = Path::new(&out).parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(&out, serde_json::to_string_pretty(&results).expect("json")).expect("write results");
        println!("\nwritten to {out}");
    }
}
