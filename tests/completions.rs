//! Shell completions, `make install` and the example configuration file: what a packager and a
//! new user touch first. Each completion script is checked by its own shell (zsh and fish are
//! installed by `make test` where it can: tests/completions/install-shells.sh).

mod common;

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
fn zsh_and_fish_scripts_are_valid_in_their_shells() {
    let dir = tempfile::tempdir().unwrap();
    if has("zsh") {
        let file = dir.path().join("_gpurun");
        std::fs::write(&file, script("zsh")).unwrap();
        let check = Command::new("zsh").arg("-n").arg(&file).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        assert!(std::fs::read_to_string(&file).unwrap().starts_with("#compdef gpurun"));
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
}

#[test]
fn make_install_puts_everything_where_it_is_looked_for() {
    let root = tempfile::tempdir().unwrap();
    let status = Command::new("make")
        .args(["-s", "install-files"])
        .arg(format!("BIN={}", gpurun_binary()))
        .arg(format!("DESTDIR={}", root.path().display()))
        .arg("PREFIX=/usr")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success());
    let installed = |path: &str| {
        std::fs::read_to_string(root.path().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    assert_eq!(installed("usr/share/bash-completion/completions/gpurun"), script("bash"));
    assert_eq!(installed("usr/share/zsh/site-functions/_gpurun"), script("zsh"));
    assert_eq!(installed("usr/share/fish/vendor_completions.d/gpurun.fish"), script("fish"));
    assert!(installed("usr/share/man/man1/gpurun.1").contains(".SH \"EXIT STATUS\""));
    assert_eq!(installed("usr/share/doc/gpurun/config.toml"), std::fs::read_to_string(example()).unwrap());
    assert!(root.path().join("usr/bin/gpurun").exists());
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
    std::fs::write(&file, uncomment(settings, &|key| keys.contains(&key))).unwrap();
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
