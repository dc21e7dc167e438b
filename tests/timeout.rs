//! `--time-limit`, `--signal` and `--kill-after` beside GNU timeout(1) (issue 65): the same
//! command under both, and the same answer from both: the exit status, and which processes of
//! the command's tree got the signal. timeout(1) signals its whole process group, so a signal
//! reaches a shell's children too; `--kill-after 0` is never, as `-k 0` is.
//!
//! One difference is kept, and it is not in this matrix: gpurun signals the command's process
//! tree, timeout(1) its process group. A process that left the group (setsid, a daemon) still
//! gets gpurun's signal, and one that joined it from elsewhere does not; the tree is the job
//! gpurun supervises, and it is what `--list` and verification count as the command's.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use common::{default_scenario, Sim};

/// A shell whose child traps the signals and says which it got; the shell itself traps them
/// too and goes on waiting for it. Only a signal sent to the whole tree reaches the child.
const TREE: &str = r#"
log=$1/log
( for s in TERM INT HUP USR1; do trap "echo child-$s >> $log; exit 3" $s; done
  sleep 2 & wait ) &
for s in TERM INT HUP USR1; do trap "echo parent-$s >> $log" $s; done
wait; wait
"#;

fn answer(program: &[&str], dir: &std::path::Path, env: &Sim) -> (Option<i32>, Vec<String>) {
    let _ = std::fs::remove_file(dir.join("log"));
    let mut command = Command::new(program[0]);
    command.args(&program[1..]);
    let outcome = if program[0] == "timeout" {
        // timeout's group SIGKILL ends timeout too: a shell sees 128+9, as gpurun exits.
        let status = command.output().unwrap().status;
        status.code().or(status.signal().map(|signal| 128 + signal))
    } else {
        env.gpurun().args(&program[1..]).run().code
    };
    let mut lines: Vec<String> =
        std::fs::read_to_string(dir.join("log")).unwrap_or_default().lines().map(str::to_owned).collect();
    // Which processes got the signal, not how often: timeout(1) signals its child and then its
    // whole group, so a shell that traps may run its trap once or twice, as the two deliveries
    // merge or not.
    lines.sort();
    lines.dedup();
    (outcome, lines)
}

#[test]
fn time_limit_answers_as_gnu_timeout_does() {
    if !common::on_path("timeout") {
        return common::skip("the timeout(1) comparison", "no timeout on PATH");
    }
    let sim = Sim::new(&default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tree.sh");
    std::fs::write(&script, TREE).unwrap();
    let (script, folder) = (script.to_str().unwrap(), dir.path().to_str().unwrap());
    let mut differ = Vec::new();
    let mut cases = 0;
    for signal in ["TERM", "INT", "USR1", "WINCH"] {
        for kill in [None, Some("0"), Some("0.5")] {
            // WINCH ends nothing: only a SIGKILL does (a run without one would take the sleep's 2 s).
            if signal == "WINCH" && kill != Some("0.5") {
                continue;
            }
            for shape in [vec!["sleep", "2"], vec!["sh", script, folder]] {
                cases += 1;
                let mut timeout = vec!["timeout", "-s", signal];
                let mut gpurun =
                    vec!["gpurun", "-q", "--gpus", "0", "--time-limit", "0.3s", "--signal", signal];
                if let Some(kill) = kill {
                    timeout.extend(["-k", kill]);
                    gpurun.extend(["--kill-after", kill]);
                }
                timeout.push("0.3");
                gpurun.push("--");
                timeout.extend(&shape);
                gpurun.extend(&shape);
                let theirs = answer(&timeout, dir.path(), &sim);
                let ours = answer(&gpurun, dir.path(), &sim);
                if theirs != ours {
                    differ.push(format!("{}: timeout {theirs:?}, gpurun {ours:?}", gpurun[1..].join(" ")));
                }
            }
        }
    }
    assert!(cases >= 20 && differ.is_empty(), "{} of {cases} differ:\n{}", differ.len(), differ.join("\n"));
}
