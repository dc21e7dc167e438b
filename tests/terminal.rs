//! Terminal behaviour through a real pseudo-terminal: an interactive bash with job control runs
//! gpurun, and the test types Ctrl-C and Ctrl-Z at it like a person. Every wait is bounded.

use crate::common;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{default_scenario, recorder, state, wait_until, Sim, GPURUN};

const LONG: Duration = Duration::from_secs(10);

/// bash -i on a pseudo-terminal, with its output collected by a reader thread.
struct Terminal {
    master: std::fs::File,
    output: Arc<Mutex<Vec<u8>>>,
    bash: Child,
}

impl Terminal {
    fn start(sim: &Sim) -> Terminal {
        // SAFETY: posix_openpt/grantpt/unlockpt/ptsname on a descriptor we own; ptsname's static
        // buffer is copied at once, and no other thread of this test uses it.
        let (master, slave_path) = unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let name = std::ffi::CStr::from_ptr(libc::ptsname(master)).to_owned();
            (OwnedFd::from_raw_fd(master), name)
        };
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(Path::new(slave_path.to_str().unwrap()))
            .expect("open the terminal");
        let gpurun_dir = Path::new(GPURUN).parent().unwrap().display().to_string();
        let mut command = Command::new("bash");
        command
            .args(["--norc", "--noprofile", "-i"])
            .env("PS1", "READY$ ")
            .env("TERM", "dumb")
            .env("PATH", format!("{gpurun_dir}:{}", std::env::var("PATH").unwrap_or_default()))
            .env("NVML_SIM_SCENARIO", &sim.scenario)
            .env("GPURUN_NVML_LIB", sim.library())
            .env("GPURUN_LOCK_DIR", sim.lock_dir())
            // The sandbox's history and configuration, never the user's own (the runs here
            // were kept in the real ~/.local/state/gpurun/history.jsonl).
            .env("XDG_STATE_HOME", sim.dir.path().join("state"))
            .env("XDG_CONFIG_HOME", sim.dir.path().join("config"))
            .env("GPURUN_SYSTEM_CONFIG", sim.system_file())
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and ioctl are async-signal-safe; they make the terminal bash's own.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let bash = command.spawn().expect("start bash");
        let master = std::fs::File::from(master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        let terminal = Terminal { master, output, bash };
        assert!(terminal.expect("READY$ "), "no prompt: {}", terminal.text());
        terminal
    }

    /// Makes the terminal this many columns wide (as a window resized to it).
    fn set_columns(&self, columns: u16) {
        let size = libc::winsize { ws_row: 24, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads one winsize through the pointer, which outlives the call.
        let done =
            unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&self.master), libc::TIOCSWINSZ, &size) };
        assert_eq!(done, 0, "TIOCSWINSZ");
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits until `needle` appears in the output after everything consumed so far.
    fn expect(&self, needle: &str) -> bool {
        wait_until(LONG, || self.text().contains(needle))
    }

    fn clear(&self) {
        self.output.lock().unwrap().clear();
    }

    fn type_text(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    fn ctrl(&mut self, key: char) {
        let byte = (key.to_ascii_uppercase() as u8) - b'@';
        self.master.write_all(&[byte]).unwrap();
    }

    /// The exit status bash reports for the last command.
    fn status_of_last(&mut self) -> String {
        self.clear();
        self.type_text("echo \"STATUS=$?.\"\n");
        let reported = |text: &str| -> Option<String> {
            text.match_indices("STATUS=").find_map(|(at, _)| {
                let rest = &text[at + "STATUS=".len()..];
                rest.starts_with(|c: char| c.is_ascii_digit())
                    .then(|| rest.split('.').next().unwrap().to_owned())
            })
        };
        assert!(wait_until(LONG, || reported(&self.text()).is_some()), "{}", self.text());
        reported(&self.text()).unwrap()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Closing the terminal ends the reader thread.
        let _ = self.bash.kill();
        let _ = self.bash.wait();
    }
}

fn recorder_line(log: &Path, extra: &str) -> String {
    format!("gpurun -q -- python3 {} {} {extra}\n", recorder().display(), log.display())
}

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// "ready PID PPID" from the recorder's output.
fn ready_pids(terminal: &Terminal) -> (u32, u32) {
    assert!(terminal.expect("ready "), "the recorder did not start: {}", terminal.text());
    assert!(wait_until(LONG, || {
        let text = terminal.text();
        text.split("ready ").nth(1).is_some_and(|rest| rest.contains('\n'))
    }));
    let text = terminal.text();
    let mut fields = text.split("ready ").nth(1).unwrap().split_whitespace();
    (fields.next().unwrap().parse().unwrap(), fields.next().unwrap().parse().unwrap())
}

#[test]
fn one_ctrl_c_is_one_sigint_in_the_child_and_status_130() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("signals.log");
    let mut terminal = Terminal::start(&sim);
    // The recorder survives the first SIGINT and dies of the second, so a forwarded duplicate
    // of the first would show (and kill it early).
    terminal.type_text(&recorder_line(&log, "--exit-on INT --exit-after 2"));
    let (child, gpurun) = ready_pids(&terminal);
    terminal.ctrl('c');
    assert!(wait_until(LONG, || log_lines(&log).len() == 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(log_lines(&log), vec!["INT"], "one Ctrl-C, one SIGINT");
    assert!(state(gpurun).is_some(), "gpurun must wait for its child");
    terminal.ctrl('c');
    assert!(wait_until(LONG, || state(child).is_none() && state(gpurun).is_none()), "{}", terminal.text());
    assert_eq!(terminal.status_of_last(), "130", "{}", terminal.text());
    assert_eq!(log_lines(&log), vec!["INT", "INT"]);
}

#[test]
fn ctrl_c_stops_a_for_loop() {
    let sim = Sim::new(&default_scenario());
    let mut terminal = Terminal::start(&sim);
    terminal.clear();
    // The quotes keep the markers out of bash's echo of the typed line.
    terminal.type_text("for i in 1 2 3; do gpurun -- sleep 5; echo IT\"\"ER$i; done; echo AF\"\"TER\n");
    assert!(terminal.expect("running sleep 5"), "{}", terminal.text());
    std::thread::sleep(Duration::from_millis(200));
    terminal.ctrl('c');
    assert!(terminal.expect("READY$ "), "{}", terminal.text());
    std::thread::sleep(Duration::from_millis(300));
    let text = terminal.text();
    assert!(!text.contains("ITER") && !text.contains("AFTER"), "the loop went on: {text}");
}

/// Ctrl-C reaches the command from the kernel, not through gpurun, and still starts
/// --kill-after: a command that ignores INT is SIGKILLed after it (issue 44: a mutant that
/// never started the countdown for a dropped signal survived every test).
#[test]
fn ctrl_c_starts_kill_after_for_a_command_that_ignores_it() {
    let sim = Sim::new(&default_scenario());
    let mut terminal = Terminal::start(&sim);
    terminal.clear();
    // U""P: the typed line's echo does not say UP, only the command does.
    terminal.type_text("gpurun -q --kill-after 500ms -- sh -c 'trap \"\" INT; echo U\"\"P; sleep 30'\n");
    // UP: the command ignores SIGINT now, and gpurun is in the terminal's foreground.
    assert!(terminal.expect("UP"), "{}", terminal.text());
    terminal.ctrl('c');
    assert!(terminal.expect("READY$ "), "the command outlived --kill-after: {}", terminal.text());
    assert_eq!(terminal.status_of_last(), "137");
}

#[test]
fn ctrl_z_and_fg_twice_then_ctrl_c() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("signals.log");
    let mut terminal = Terminal::start(&sim);
    // The recorder records INT and CONT and leaves TSTP to its default action: it stops.
    terminal.type_text(&recorder_line(&log, "--signals INT,CONT --exit-on INT --exit-after 2"));
    let (child, gpurun) = ready_pids(&terminal);
    for cycle in 1..=2 {
        terminal.clear();
        terminal.ctrl('z');
        assert!(terminal.expect("Stopped"), "cycle {cycle}: {}", terminal.text());
        assert!(
            wait_until(LONG, || state(child) == Some('T') && state(gpurun) == Some('T')),
            "cycle {cycle}: both should be stopped"
        );
        assert!(terminal.expect("READY$ "));
        terminal.type_text("fg\n");
        assert!(
            wait_until(LONG, || matches!(state(child), Some('S' | 'R'))
                && matches!(state(gpurun), Some('S' | 'R'))),
            "cycle {cycle}: both should run again: {:?} {:?}",
            state(child),
            state(gpurun)
        );
        assert!(wait_until(LONG, || log_lines(&log).iter().filter(|l| *l == "CONT").count() == cycle));
    }
    terminal.ctrl('c');
    assert!(wait_until(LONG, || log_lines(&log).len() == 3));
    std::thread::sleep(Duration::from_millis(300));
    terminal.ctrl('c');
    assert!(wait_until(LONG, || state(child).is_none() && state(gpurun).is_none()), "{}", terminal.text());
    assert_eq!(terminal.status_of_last(), "130", "{}", terminal.text());
    // One SIGCONT per fg, one SIGINT per Ctrl-C: nothing doubled by forwarding.
    assert_eq!(log_lines(&log), vec!["CONT", "CONT", "INT", "INT"]);
}

#[test]
fn a_child_stopped_by_someone_else_stops_gpurun_and_a_sigcont_resumes_both() {
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("signals.log");
    let mut run = sim.gpurun().args(["-q", "--", "python3"]).args([recorder()]).args([&log]);
    run.command.args(["--signals", "CONT"]).stdout(Stdio::piped()).stdin(Stdio::null());
    let mut gpurun = run.command.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(gpurun.stdout.take().unwrap()), &mut line)
        .unwrap();
    let child: u32 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    common::send_signal(child, libc::SIGSTOP);
    assert!(wait_until(LONG, || state(gpurun.id()) == Some('T')), "gpurun did not follow the stop");
    common::send_signal(gpurun.id(), libc::SIGCONT);
    assert!(wait_until(LONG, || matches!(state(child), Some('S' | 'R'))), "the child was not resumed");
    assert!(wait_until(LONG, || log_lines(&log) == vec!["CONT"]));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(log_lines(&log), vec!["CONT"], "SIGCONT must reach the child once");
    let mut stop = log.into_os_string();
    stop.push(".stop");
    std::fs::write(stop, "").unwrap();
    assert!(wait_until(LONG, || gpurun.try_wait().unwrap().is_some()));
}

#[test]
fn the_wait_progress_line_is_rewritten_in_place_on_a_terminal() {
    let sim = Sim::new(&default_scenario());
    let mut terminal = Terminal::start(&sim);
    terminal.clear();
    terminal.type_text(
        "gpurun -q --exclusive --devices 3 -- sleep 3 & sleep 0.5; \
         gpurun --exclusive --devices 3 --wait=1500ms -- true; echo \"S=$?.\"\n",
    );
    assert!(terminal.expect("S=75."), "{}", terminal.text());
    let text = terminal.text();
    // Carriage return, the line, erase-to-end: one line updated, not one per try.
    assert!(text.contains("\rgpurun: waiting 0 s: GPU 3 reserved exclusively by gpurun PID "), "{text:?}");
    assert!(text.contains("\x1b[K"), "{text:?}");
    assert_eq!(text.matches("\ngpurun: waiting").count(), 0, "{text:?}");
}

#[test]
fn the_wait_line_fits_the_terminal_and_is_erased_at_the_end() {
    // The reason names every GPU: about 600 characters, which wrapped over several lines that
    // could not be rewritten in place, and stayed on screen.
    for columns in [80u16, 100] {
        let sim = Sim::new(&default_scenario());
        let mut terminal = Terminal::start(&sim);
        terminal.set_columns(columns);
        terminal.clear();
        terminal
            .type_text("gpurun --gpus 4 --min-free 70G --exclusive --wait=2500ms -- true; echo \"S=$?.\"\n");
        assert!(terminal.expect("S=75."), "{}", terminal.text());
        let text = terminal.text();
        let shown: Vec<&str> = text
            .split('\r')
            .filter(|part| part.starts_with("gpurun: waiting"))
            .map(|part| part.split("\x1b[K").next().unwrap())
            .collect();
        assert!(shown.len() >= 2, "rewritten in place at least twice: {text:?}");
        for line in &shown {
            // Room for the "^C" a terminal echoes at Ctrl-C, so that the line never wraps.
            assert!(line.chars().count() <= usize::from(columns) - 3, "{} columns: {line:?}", columns);
            assert!(!line.contains('\n'), "{line:?}");
        }
        assert!(shown.iter().any(|line| line.ends_with('…')), "the reason is cut: {shown:?}");
        // Erased before the refusal is printed: nothing of the line is left on screen.
        assert!(text.contains("\r\x1b[Kgpurun: not enough GPUs"), "{text:?}");
    }
}

/// Ctrl-C during a wait at any width: the terminal's "^C" echo fits on the progress line (it
/// is three columns short of the width), so the erase that follows takes the whole line and
/// nothing of it stays above the prompt (issue 42, point 4).
#[test]
fn ctrl_c_erases_the_wait_line_at_any_width() {
    for columns in [60u16, 80, 133] {
        let sim = Sim::new(&default_scenario());
        let mut terminal = Terminal::start(&sim);
        terminal.set_columns(columns);
        terminal.type_text("gpurun -q --exclusive --devices 3 -- sleep 20 &\n");
        // The holder has its lease: the next launch waits for it.
        assert!(wait_until(LONG, || common::leases_in(&sim.lock_dir()) == 1), "{}", terminal.text());
        terminal.clear();
        terminal.type_text("gpurun --exclusive --devices 3 --wait -- true\n");
        assert!(terminal.expect("gpurun: waiting"), "{}", terminal.text());
        std::thread::sleep(Duration::from_millis(300));
        terminal.ctrl('c');
        assert!(terminal.expect("READY$ "), "{}", terminal.text());
        let text = terminal.text();
        assert_eq!(terminal.status_of_last(), "130");
        let after_line = text.rsplit("gpurun: waiting").next().unwrap();
        let shown = format!("gpurun: waiting{}", after_line.split("\x1b[K").next().unwrap());
        assert!(shown.chars().count() <= usize::from(columns) - 3, "{columns} columns: {shown:?}");
        // The echo, then the erase of the line it sits on, before anything else is written.
        let tail = &after_line[after_line.find("\x1b[K").unwrap() + 3..];
        assert!(tail.contains("^C") && tail.contains("\r\x1b[K"), "{columns} columns: {tail:?}");
        terminal.type_text("kill %1\n");
    }
}

/// What `line` (a gpurun command) prints on a terminal of `columns`: its lines from the first
/// that starts with `first` up to the shell's `S=` marker.
fn shown_on(sim: &Sim, columns: u16, line: &str, first: &str) -> Vec<String> {
    let mut terminal = Terminal::start(sim);
    terminal.set_columns(columns);
    terminal.clear();
    terminal.type_text(&format!("{line}; echo \"S=$?.\"\n"));
    assert!(terminal.expect("S=0."), "{}", terminal.text());
    let text = terminal.text();
    text.split("\r\n")
        .skip_while(|l| !l.starts_with(first))
        .take_while(|l| !l.starts_with("S="))
        .map(str::to_owned)
        .collect()
}

/// `--history` at 80 columns: the compact table, no line wraps; piped, the whole table
/// (issue 42, point 7).
#[test]
fn history_fits_the_terminal_and_a_pipe_gets_the_whole_table() {
    let sim = Sim::new(&default_scenario());
    let long = format!("{} --sleep 0.1 --mem 3GiB {}", common::sim_cuda().display(), "--quiet ".repeat(8));
    let words: Vec<&str> = long.split_whitespace().collect();
    sim.gpurun().arg("--").args(&words).run().status(0);
    let rows = shown_on(&sim, 80, "gpurun --history", "STARTED");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].starts_with("STARTED     WALL"), "the compact layout: {rows:?}");
    for row in &rows {
        assert!(row.chars().count() < 80, "{row:?}");
    }
    // The command is cut, not the columns before it (the verdict of a 0.1 s job may be either).
    assert!(rows[1].ends_with('…') && rows[1].split_whitespace().count() >= 9, "{rows:?}");
    // ... and it keeps its program's name: the directory goes first.
    assert!(rows[1].contains(" …/sim-cuda --sl"), "{rows:?}");
    let piped = sim.gpurun().args(["--history"]).run();
    piped.status(0).stdout_has("STARTED (UTC)").stdout_has(long.trim_end());
}

/// `--dry-run` at 80 columns: the table fits as --list's does, and the lines below it wrap at
/// spaces (nothing of them is cut); only a single word wider than the terminal may reach the
/// edge (issue 42, point 7).
#[test]
fn a_dry_run_fits_the_terminal() {
    let sim = Sim::new(&default_scenario());
    let lines =
        shown_on(&sim, 80, "gpurun --dry-run --gpus 2 --min-free 8GB -- python train.py", "NVIDIA driver");
    for line in &lines {
        assert!(line.chars().count() < 80 || !line.trim().contains(' '), "{line:?}");
    }
    assert!(lines.iter().any(|l| l.starts_with("  GPU-8f3b2c1d")), "the selected line wrapped: {lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with("min-free: 8 GB = 7.45 GiB")), "{lines:#?}");
    // The UUID list, one word wider than the terminal, breaks after a comma (issue 54).
    let uuids = lines.iter().position(|l| l.starts_with("  GPURUN_GPU_UUIDS=")).expect("the UUIDs line");
    assert!(lines[uuids].ends_with(',') && lines[uuids].chars().count() < 80, "{lines:#?}");
}

/// `--report` and `--doctor` at 80 columns: every line within the terminal, a long one wrapped
/// under its value (issue 54).
#[test]
fn the_report_and_the_doctor_fit_the_terminal() {
    let sim = Sim::new(&default_scenario());
    let report =
        shown_on(&sim, 80, "gpurun --report --gpus 2 -- sim-cuda --sleep 0.3 --quiet", "gpurun: report:");
    assert!(report.len() > 6, "{report:#?}");
    for line in &report {
        assert!(line.chars().count() < 80, "{line:?}");
    }
    assert!(report.iter().any(|l| l.starts_with(&format!("{}0% p95 0%", " ".repeat(16)))), "{report:#?}");
    let doctor = shown_on(&sim, 80, "gpurun --doctor", "gpurun doctor");
    assert!(doctor.len() > 10, "{doctor:#?}");
    for line in &doctor {
        assert!(line.chars().count() < 80, "{line:?}");
    }
}

#[test]
fn list_fits_the_terminal_and_a_pipe_gets_every_character() {
    let sim = Sim::new(&default_scenario());
    for columns in [80u16, 100, 200] {
        let mut terminal = Terminal::start(&sim);
        terminal.set_columns(columns);
        terminal.clear();
        terminal.type_text("gpurun --list; echo \"S=$?.\"\n");
        assert!(terminal.expect("S=0."), "{}", terminal.text());
        let text = terminal.text();
        let rows: Vec<&str> = text
            .split("\r\n")
            .skip_while(|line| !line.starts_with("NVIDIA driver"))
            .take_while(|line| !line.starts_with("S="))
            .collect();
        assert!(rows.len() > 8, "{text:?}");
        for row in &rows {
            assert!(row.chars().count() < usize::from(columns), "{columns} columns: {row:?}");
        }
        let header = rows.iter().find(|row| row.starts_with("GPU")).unwrap();
        match columns {
            // Narrow: the compact layout, each process as owner, PID (* not via gpurun) and
            // memory, one a line, with a legend.
            80 | 100 => {
                assert!(!header.contains("TEMP") && header.contains("USED / TOTAL"), "{header}");
                assert!(rows.iter().any(|row| row.ends_with("? 4190001* 29.4G")), "{rows:#?}");
                assert!(text.contains("PID*: not via gpurun (no reservation)"), "{text:?}");
                // A GPU's second process on a line of its own, cut away at no width (issue 54).
                assert!(rows.iter().any(|row| row.trim_start() == "? 4190004* 2.0G"), "{rows:#?}");
            }
            _ => assert!(header.contains("TEMP") && header.contains("POWER"), "{header}"),
        }
    }
    // Piped: the full table, nothing cut.
    let piped = sim.gpurun().args(["--list"]).run();
    piped.status(0);
    assert!(piped.stdout.lines().any(|line| line.chars().count() > 120), "{}", piped.stdout);
    assert!(piped.stdout.contains("[not via gpurun]"));
}

/// `--list --watch`: each frame drawn over the last (cursor home, erase the screen), the
/// machine read again each time (a GPU that gets busy shows it), and Ctrl-C ends it with 0.
#[test]
fn list_watch_redraws_in_place_and_ctrl_c_ends_it_cleanly() {
    let sim = Sim::new(&default_scenario());
    let mut terminal = Terminal::start(&sim);
    terminal.set_columns(200);
    terminal.clear();
    terminal.type_text("gpurun --list --watch=0.3\n");
    let frames = |text: &str| text.matches("\x1b[H\x1b[2JEvery 300 ms: gpurun --list").count();
    assert!(wait_until(LONG, || frames(&terminal.text()) >= 2), "{:?}", terminal.text());
    // The scenario changes under it: the next frames show GPU 0 at 55%.
    sim.rewrite(&default_scenario().replacen("utilization_gpu = 0\n", "utilization_gpu = 55\n", 1));
    let seen = frames(&terminal.text());
    assert!(
        wait_until(LONG, || {
            let text = terminal.text();
            frames(&text) >= seen + 2 && text.rsplit("\x1b[H\x1b[2J").next().unwrap().contains("   55%")
        }),
        "{:?}",
        terminal.text()
    );
    terminal.ctrl('c');
    assert_eq!(terminal.status_of_last(), "0", "{}", terminal.text());
}
