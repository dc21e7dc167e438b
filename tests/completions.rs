//! Shell completions, `make install` and the example configuration file: what a packager and a
//! new user touch first. Each completion script is checked by its own shell (zsh and fish are
//! installed by `make test` where it can: tests/completions/install-shells.sh).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{default_scenario, gpurun_binary, Sim};

fn script(shell: &str) -> String {
    let sim = Sim::new(&default_scenario());
    let outcome = sim.gpurun().args(["--completions", shell]).run();
    outcome.status(0);
    assert!(outcome.stderr.is_empty(), "{}", outcome.stderr);
    outcome.stdout
}

fn has(shell: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {shell}")]).output().unwrap().status.success();
    if !found {
        common::skip(&format!("checking the {shell} completions"), &format!("{shell} is not installed"));
    }
    found
}

/// What `shell` offers after `line` (the words typed so far; the last one is being completed).
fn offered(shell: &str, file: &Path, line: &str) -> String {
    let program = match shell {
        // Completion functions read COMP_WORDS and COMP_CWORD and answer in COMPREPLY.
        "bash" => format!(
            "source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE='{line}'; \
             COMP_POINT=${{#COMP_LINE}}; _gpurun gpurun \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        ),
        "fish" => format!("source {}; complete -C '{line}'", file.display()),
        _ => unreachable!(),
    };
    let output = Command::new(shell).args(["-c", &program]).output().unwrap();
    assert!(output.status.success(), "{shell}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn bash_completes_options_and_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpurun.bash");
    std::fs::write(&file, script("bash")).unwrap();
    assert!(Command::new("bash").arg("-n").arg(&file).status().unwrap().success());
    let options = offered("bash", &file, "gpurun --min");
    assert!(
        options.lines().any(|l| l == "--min-free") && options.lines().any(|l| l == "--min-total"),
        "{options}"
    );
    let policies = offered("bash", &file, "gpurun --policy p");
    assert_eq!(policies.trim(), "pack");
}

#[test]
fn after_the_options_the_command_and_its_arguments_are_completed() {
    // As for sudo, env and timeout: command names, then that command's own words. bash here
    // has no bash-completion (no _command_offset): command names, then file names.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpurun.bash");
    std::fs::write(&file, script("bash")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "").unwrap();
    let bash = |line: &str| {
        let program = format!(
            "cd {}; source {}; COMP_WORDS=({line}); [[ '{line}' == *' ' ]] && COMP_WORDS+=(''); \
             COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; \
             _gpurun gpurun \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            dir.path().display(),
            file.display()
        );
        let output = Command::new("bash").args(["-c", &program]).output().unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for line in ["gpurun -- slee", "gpurun --gpus 2 slee", "gpurun --min-free 8G --wait=10m -- slee"] {
        assert!(bash(line).lines().any(|l| l == "sleep"), "{line}: {}", bash(line));
    }
    // The command's own arguments, not gpurun's options; a value of gpurun's own is not the
    // command.
    assert_eq!(bash("gpurun --gpus 2 -- cat not").trim(), "notes.txt");
    assert!(!bash("gpurun --gpus 2 cat --").contains("--gpus"));
    assert!(bash("gpurun --gpus ").lines().all(|l| l != "sleep"));
    assert!(bash("gpurun --ex").lines().any(|l| l == "--exclusive"));
    if has("fish") {
        let file = dir.path().join("gpurun.fish");
        std::fs::write(&file, script("fish")).unwrap();
        let commands = offered("fish", &file, "gpurun --gpus 2 -- slee");
        assert!(commands.lines().any(|l| l.starts_with("sleep")), "{commands}");
        let positional = offered("fish", &file, "gpurun --min-free 8G slee");
        assert!(positional.lines().any(|l| l.starts_with("sleep")), "{positional}");
        // timeout's own options (fish ships its completion), not gpurun's.
        let own = offered("fish", &file, "gpurun -- timeout --sig");
        assert!(own.starts_with("--signal"), "{own}");
        assert!(!offered("fish", &file, "gpurun -- timeout --").contains("--gpus"));
        assert!(offered("fish", &file, "gpurun --ex").contains("--exclusive"));
    }
    if has("zsh") {
        // An interactive zsh on a zpty (zsh's own pseudo-terminal module): each line is typed
        // with a Tab, then run (zle reads the Enter only after the completion); gpurun is a
        // function that prints what it got, and the output is read until every line has run.
        std::fs::write(dir.path().join("_gpurun"), script("zsh")).unwrap();
        let lines = [
            "gpurun --gpus 2 -- slee",
            "gpurun --min-free 8G slee",
            "gpurun -- timeout --sig",
            "gpurun --nvml-t",
        ];
        let typed: String = lines
            .iter()
            .map(|line| format!("zpty -w -n z '{line}'$'\\t'; sleep 0.2; zpty -w -n z $'\\n'; sleep 0.5\n"))
            .collect();
        let program = format!(
            "zmodload zsh/zpty\n\
             zpty -b z 'zsh -f -i'\n\
             zpty -w z 'PS1=\"P> \"; fpath=({} $fpath); autoload -Uz compinit; compinit -u; unsetopt beep; \
             gpurun() {{ print -r -- \"RAN:$*\"; }}; timeout() {{ :; }}'\n\
             sleep 2\n{typed}\
             all=''; for i in {{1..300}}; do zpty -r -t z chunk && all+=$chunk; \
             (( $(print -r -- $all | grep -a -c 'RAN:-') >= {count} )) && break; sleep 0.1; done\n\
             print -r -- $all | tr -d '\\r' | grep -a -o 'RAN:.*'\n\
             zpty -d z\n",
            dir.path().display(),
            count = lines.len()
        );
        let output = Command::new("timeout").args(["60", "zsh", "-f", "-c", &program]).output().unwrap();
        let ran = String::from_utf8_lossy(&output.stdout);
        assert!(ran.contains("RAN:--gpus 2 -- sleep"), "{ran}");
        assert!(ran.contains("RAN:--min-free 8G sleep"), "{ran}");
        assert!(ran.contains("RAN:-- timeout --signal"), "timeout's own option: {ran}");
        assert!(ran.contains("RAN:--nvml-timeout"), "gpurun's own option before the command: {ran}");
    }
}

#[test]
fn zsh_and_fish_scripts_are_valid_in_their_shells() {
    let dir = tempfile::tempdir().unwrap();
    if has("zsh") {
        let file = dir.path().join("_gpurun");
        std::fs::write(&file, script("zsh")).unwrap();
        let check = Command::new("zsh").arg("-n").arg(&file).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("#compdef gpurun"));
        // A size or a count completes to nothing (zsh's _default would offer file names); a
        // path to files (issue 42, point 10).
        let spec = |option: &str| {
            text.lines().find(|l| l.contains(&format!("'{option}=["))).unwrap_or("").to_owned()
        };
        assert!(spec("--min-free").ends_with(":SIZE|P%|auto:' \\"), "{}", spec("--min-free"));
        assert!(spec("--gpus").ends_with(":N|MIN-MAX|all:' \\"), "{}", spec("--gpus"));
        assert!(spec("--nvml-lib").ends_with(":PATH:_files' \\"), "{}", spec("--nvml-lib"));
    }
    if has("fish") {
        let file = dir.path().join("gpurun.fish");
        std::fs::write(&file, script("fish")).unwrap();
        let check = Command::new("fish").arg("--no-execute").arg(&file).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let offered = offered("fish", &file, "gpurun --visible");
        assert!(offered.starts_with("--visible-as"), "{offered}");
    }
}

#[test]
fn completions_take_no_command_and_read_no_setting() {
    let sim = Sim::new(&default_scenario());
    // A broken setting does not stop a packager's build from generating the scripts.
    let outcome = sim.gpurun().env("GPURUN_NO_SUCH_SETTING", "1").args(["--completions", "bash"]).run();
    outcome.status(0).stdout_has("_gpurun()");
    sim.gpurun()
        .args(["--completions", "bash", "--", "true"])
        .run()
        .status(125)
        .stderr_has("gpurun: --completions takes no COMMAND, but got \"true\"");
    sim.gpurun()
        .args(["--completions", "tcsh"])
        .run()
        .status(125)
        .stderr_has("invalid value 'tcsh' for '--completions <SHELL>'")
        .stderr_has("[possible values: bash, zsh, fish]");
    // Issue 51 (13): another mode beside it is refused, as --export --list is, whichever
    // comes first (it won silently, exit 0).
    for other in
        [&["--export"][..], &["--dry-run", "--json"], &["--list"], &["--doctor"], &["--history"], &["--json"]]
    {
        let before = sim.gpurun().args(other).args(["--completions", "bash"]).run();
        before.status(125).stderr_has("cannot be used with '--completions <SHELL>'");
        assert!(before.stdout.is_empty(), "{other:?}: {}", before.stdout);
        let after = sim.gpurun().args(["--completions", "bash"]).args(other).run();
        after.status(125).stderr_has("the argument '--completions <SHELL>' cannot be used with");
    }
}

#[test]
fn make_install_puts_everything_where_it_is_looked_for() {
    let base = tempfile::tempdir().unwrap();
    // A staging directory with a blank in its path (issue 51, 13: the paths were unquoted).
    let root = base.path().join("staging root");
    let root = root.as_path();
    let status = Command::new("make")
        .args(["-s", "install-files"])
        .arg(format!("BIN={}", gpurun_binary()))
        .arg(format!("DESTDIR={}", root.display()))
        .arg("PREFIX=/usr")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success());
    let installed =
        |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(installed("usr/share/bash-completion/completions/gpurun"), script("bash"));
    assert_eq!(installed("usr/share/zsh/site-functions/_gpurun"), script("zsh"));
    assert_eq!(installed("usr/share/fish/vendor_completions.d/gpurun.fish"), script("fish"));
    assert!(installed("usr/share/man/man1/gpurun.1").contains(".SH \"EXIT STATUS\""));
    assert_eq!(installed("usr/share/doc/gpurun/config.toml"), std::fs::read_to_string(example()).unwrap());
    assert!(installed("usr/share/doc/gpurun/doc/guide.md").starts_with("# gpurun: the user's guide"));
    assert!(root.join("usr/bin/gpurun").exists());
}

/// Every file under `root`, relative to it.
fn files_under(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                found.push(entry.path().strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_user_install_stays_inside_its_prefix_and_a_system_one_installs_the_tmpfiles_entry() {
    let install = |root: &Path, extra: &[&str]| {
        let output = Command::new("make")
            .args(["-s", "install-files"])
            .arg(format!("BIN={}", gpurun_binary()))
            .arg(format!("DESTDIR={}", root.display()))
            .args(extra)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    // `make install PREFIX=~/.local`: everything under the prefix, and it says what it left out.
    let user = tempfile::tempdir().unwrap();
    let said = install(user.path(), &["PREFIX=/home/alice/.local"]);
    let files = files_under(user.path());
    assert!(files.iter().all(|f| f.starts_with("home/alice/.local/")), "{files:?}");
    assert!(files.contains(&"home/alice/.local/bin/gpurun".to_owned()), "{files:?}");
    assert!(said.contains("tmpfiles entry not installed: PREFIX=/home/alice/.local"), "{said}");
    // A private prefix as root: the same.
    let private = tempfile::tempdir().unwrap();
    install(private.path(), &["PREFIX=/opt/gpurun"]);
    assert!(files_under(private.path()).iter().all(|f| f.starts_with("opt/gpurun/")));
    // A system prefix, or TMPFILESDIR named: the entry goes where systemd-tmpfiles reads it.
    let system = tempfile::tempdir().unwrap();
    install(system.path(), &["PREFIX=/usr/local"]);
    assert!(system.path().join("usr/lib/tmpfiles.d/gpurun.conf").exists());
    let named = tempfile::tempdir().unwrap();
    install(named.path(), &["PREFIX=/home/alice/.local", "TMPFILESDIR=/etc/tmpfiles.d"]);
    assert!(named.path().join("etc/tmpfiles.d/gpurun.conf").exists());
    // `make uninstall` with the same PREFIX takes every file away, and only those.
    std::fs::write(system.path().join("usr/local/bin/neighbour"), "").unwrap();
    let removed = Command::new("make")
        .args(["-s", "uninstall", "PREFIX=/usr/local"])
        .arg(format!("DESTDIR={}", system.path().display()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    assert_eq!(files_under(system.path()), ["usr/local/bin/neighbour"]);
}

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/config.toml")
}

#[test]
fn the_example_configuration_names_every_key_and_each_example_loads() {
    let text = std::fs::read_to_string(example()).unwrap();
    let commented: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# ")).filter(|l| l.contains(" = ")).collect();
    let command = gpurun::cli::command();
    for key in gpurun::cli::settings::keys(&command) {
        assert!(
            commented.iter().any(|line| line.starts_with(&format!("{key} = "))),
            "packaging/config.toml lacks the key {key}"
        );
    }
    // As shipped, every key commented: it changes nothing.
    let sim = Sim::new(&default_scenario());
    let as_shipped = sim.gpurun().env("GPURUN_CONFIG", example()).args(["--export"]).run();
    assert_eq!(as_shipped.status(0).stdout, sim.gpurun().args(["--export"]).run().stdout);
    // Each example value is valid: the file with every setting uncommented loads (verbose = 1
    // says where each setting came from), and so do the house rules, as a system file.
    let keys: Vec<&str> = gpurun::cli::settings::keys(&command).collect();
    let (settings, rules) = text.split_once("# [limits]").expect("the [limits] example");
    let uncomment = |part: &str, wanted: &dyn Fn(&str) -> bool| -> String {
        part.lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest) if rest.split(" = ").next().is_some_and(wanted) => format!("{rest}\n"),
                _ => format!("{line}\n"),
            })
            .collect()
    };
    let file = sim.dir.path().join("everything.toml");
    // mps-threads and mps-mem go with mps = true (an error otherwise, as on the command line),
    // which needs an MPS server of the user's own: tests/mps.rs tries them.
    let alone = |key: &str| keys.contains(&key) && !["mps-threads", "mps-mem"].contains(&key);
    std::fs::write(&file, uncomment(settings, &alone)).unwrap();
    let loaded = sim.gpurun().env("GPURUN_CONFIG", &file).args(["--dry-run"]).run();
    loaded.status(0).stderr_has("--policy from ").stderr_has("everything.toml:");
    std::fs::write(sim.system_file(), format!("[limits]\n{}", uncomment(rules, &|key| !key.contains(' '))))
        .unwrap();
    let ruled = sim.gpurun().args(["--doctor"]).run();
    ruled
        .stdout_has("house rules: max-gpus-per-user = 2")
        .stdout_has("max-wait = 4h")
        .stdout_has("default-min-free = 8 GiB");
}
