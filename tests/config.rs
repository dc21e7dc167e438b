//! Configuration (DESIGN 11): command line > GPURUN_* variables > user file > system file >
//! built-in; GPURUN_CONFIG; --no-config; errors naming file, line and key.

use crate::common;

use common::{default_scenario, Outcome, Sim};

fn visible(outcome: &Outcome) -> String {
    outcome.status(0);
    outcome
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("export CUDA_VISIBLE_DEVICES='"))
        .map(|v| v.trim_end_matches('\'').to_owned())
        .expect("CUDA_VISIBLE_DEVICES exported")
}

fn with_user_file(text: &str) -> Sim {
    let sim = Sim::new(&default_scenario());
    let dir = sim.dir.path().join("config/gpurun");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
    sim
}

#[test]
fn command_line_beats_variables_beat_the_user_file() {
    // Without GPU 0, on the default machine: index takes 2 (1 is busy), pack the tightest idle
    // card (7), most-free 3.
    let sim = with_user_file("policy = \"index\"\n");
    let export = ["--export", "--exclude", "0"];
    assert_eq!(visible(&sim.gpurun().args(export).run()), "2", "the user file");
    assert_eq!(visible(&sim.gpurun().env("GPURUN_POLICY", "pack").args(export).run()), "7", "the variable");
    let command_line =
        sim.gpurun().env("GPURUN_POLICY", "pack").args(["--policy", "most-free"]).args(export).run();
    assert_eq!(visible(&command_line), "3", "the command line");
    assert_eq!(visible(&sim.gpurun().args(["--no-config"]).args(export).run()), "3", "--no-config");
    // --no-config leaves the variables.
    assert_eq!(
        visible(&sim.gpurun().env("GPURUN_POLICY", "pack").args(["--no-config"]).args(export).run()),
        "7"
    );
}

#[test]
fn a_key_given_twice_is_named_with_its_first_line() {
    let sim = with_user_file("min-free = \"1G\"\nexclusive = true\nmin-free = \"2G\"\n");
    sim.gpurun()
        .args(["--", "true"])
        .run()
        .status(125)
        .stderr_has(":3: duplicate key \"min-free\": it was given on line 1 already");
}

#[test]
fn switches_and_values_from_a_file() {
    let sim = with_user_file("exclusive = true\nmin-free = \"70G\"\ngpus = 2\n");
    let outcome = sim.gpurun().args(["--export"]).run();
    assert_eq!(visible(&outcome), "3,5");
    let refused = sim.gpurun().args(["--export", "--devices", "4,2"]).run();
    refused.status(75).stderr_has("GPU 4: free 7.6 GiB < 70 GiB; in use by 2 processes");
}

#[test]
fn gpurun_config_names_another_file() {
    let sim = Sim::new(&default_scenario());
    let file = sim.dir.path().join("team.toml");
    std::fs::write(&file, "exclude = \"3,5\"\n").unwrap();
    assert_eq!(visible(&sim.gpurun().env("GPURUN_CONFIG", &file).args(["--export"]).run()), "2");
    let missing = sim.gpurun().env("GPURUN_CONFIG", "/nonexistent/gpurun.toml").args(["--export"]).run();
    missing.status(125).stderr_has("gpurun: /nonexistent/gpurun.toml: No such file or directory");
}

#[test]
fn bad_settings_name_file_line_and_key() {
    let sim = with_user_file("policy = \"pack\"\nmin-free = \"8X\"\n");
    let outcome = sim.gpurun().args(["--", "true"]).run();
    outcome.status(125).stderr_has("config.toml:2: key min-free: invalid value '8X' for '--min-free");
    let unknown = with_user_file("# team defaults\npolicy = \"pack\"\nmin_free = \"8G\"\n");
    unknown
        .gpurun()
        .args(["--", "true"])
        .run()
        .status(125)
        .stderr_has("config.toml:3: unknown key \"min_free\"");
    let variable = Sim::new(&default_scenario());
    variable
        .gpurun()
        .env("GPURUN_MAX_UTIL", "200")
        .args(["--export"])
        .run()
        .status(125)
        .stderr_has("GPURUN_MAX_UTIL: key max-util: invalid value '200'");
}

#[test]
fn a_bare_size_is_refused_everywhere_and_never_runs_the_unit() {
    // `--min-free 8 GB -- true` ran a command called GB (127); `--min-free 8` meant 8 bytes.
    let sim = Sim::new(&default_scenario());
    let marker = sim.dir.path().join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    let typed = sim.gpurun().args(["--min-free", "8", "GB"]).args(touch).run();
    typed.status(125).stderr_has("gpurun: invalid value '8' for '--min-free").stderr_has("did you mean 8G?");
    sim.gpurun().args(["--min-total", "40"]).args(touch).run().status(125).stderr_has("did you mean 40G?");
    sim.gpurun()
        .env("GPURUN_MIN_FREE", "8")
        .args(touch)
        .run()
        .status(125)
        .stderr_has("GPURUN_MIN_FREE: key min-free: invalid value '8'")
        .stderr_has("did you mean 8G?");
    // A TOML integer, and a string, in a file.
    for line in ["min-free = 8\n", "min-free = \"8\"\n"] {
        let file = with_user_file(&format!("policy = \"pack\"\n{line}"));
        let outcome = file.gpurun().args(touch).run();
        outcome.status(125).stderr_has("config.toml:2: key min-free").stderr_has("did you mean 8G?");
    }
    assert!(!marker.exists(), "a refused size ran the command");
    // 0 stays 0, and B says bytes.
    sim.gpurun().args(["--min-free", "0", "--export"]).run().status(0);
    sim.gpurun().args(["--min-free", "512B", "--export"]).run().status(0);
}

#[test]
fn every_bad_line_of_a_file_is_reported_in_order_with_the_accepted_values() {
    let sim = with_user_file("policy = \"fastest\"\nmin-free = \"8X\"\nexclusive = \"maybe\"\ngpus = 1\n");
    let outcome = sim.gpurun().args(["--dry-run"]).run();
    outcome.status(125);
    let lines: Vec<&str> = outcome.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", outcome.stderr);
    assert!(
        lines[0].starts_with("gpurun: ")
            && lines[0].contains("config.toml:1: key policy: invalid value 'fastest'")
    );
    // As on the command line: what policy accepts.
    assert!(
        lines[0].contains("[possible values: most-free, least-util, balanced, pack, index, random]"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("config.toml:2: key min-free: invalid value '8X'"), "{}", lines[1]);
    assert!(lines[2].contains("config.toml:3: key exclusive: expected true or false"), "{}", lines[2]);
}

#[test]
fn variables_for_switches_and_the_commands_own_variables() {
    let sim = Sim::new(&default_scenario());
    sim.gpurun()
        .env("GPURUN_EXCLUSIVE", "1")
        .args(["--export", "--devices", "4"])
        .run()
        .status(75)
        .stderr_has("in use by 2 processes");
    // A gpurun inside a job started by gpurun: GPURUN_GPUS is the outer choice, not a request.
    let nested = sim.gpurun().env("GPURUN_GPUS", "3,5").env("GPURUN_GPU_UUIDS", "x").args(["--export"]).run();
    assert_eq!(visible(&nested), "3");
    assert_eq!(
        visible(
            &sim.gpurun()
                .env("GPURUN_NVML_LIB", sim.library())
                .env("GPURUN_WAIT", "1")
                .args(["--export"])
                .run()
        ),
        "3"
    );
}

#[test]
fn a_bad_setting_is_an_error_even_where_the_command_line_sets_it_again() {
    // The user's --min-free would win, but the file's value is still refused, naming its line.
    let sim = with_user_file("min-free = \"8X\"\n");
    let outcome = sim.gpurun().args(["--min-free", "8G", "--export"]).run();
    outcome.status(125).stderr_has("config.toml:1: key min-free: invalid value '8X'");
    // The system file's settings are checked with --no-config too, which only leaves them out.
    let sim = Sim::new(&default_scenario());
    std::fs::write(sim.system_file(), "policy = \"biggest\"\n").unwrap();
    for words in [&["--export"][..], &["--no-config", "--export"][..]] {
        sim.gpurun()
            .args(words)
            .run()
            .status(125)
            .stderr_has("system.toml:1: key policy: invalid value 'biggest'");
    }
}

#[test]
fn settings_that_conflict_name_where_they_came_from() {
    let sim = with_user_file("report = true\n");
    // A setting whose option conflicts with another is fine alone...
    sim.gpurun().args(["-q", "--gpus", "0", "--", "true"]).run().status(0).stderr_has("report:");
    // ...and an error naming both origins when they meet.
    sim.gpurun()
        .env("GPURUN_EXEC", "1")
        .args(["--gpus", "0", "--", "true"])
        .run()
        .status(125)
        .stderr_has("GPURUN_EXEC")
        .stderr_has("config.toml:1")
        .stderr_has("cannot be used with");
}

#[test]
fn verbose_says_where_each_setting_came_from() {
    let sim = with_user_file("# defaults\npolicy = \"pack\"\n");
    let outcome = sim.gpurun().env("GPURUN_EXCLUSIVE", "1").args(["-v", "--gpus", "0", "--", "true"]).run();
    outcome
        .status(0)
        .stderr_has("gpurun: debug: --exclusive from GPURUN_EXCLUSIVE")
        .stderr_has("config.toml:2");
    // An option the command line gives again is the command line's.
    let again = sim.gpurun().args(["-v", "--policy", "index", "--gpus", "0", "--", "true"]).run();
    assert!(!again.status(0).stderr.contains("--policy from"), "{again:#?}");
}

/// Issue 42 (6): `exclusive = yes` said "string values must be quoted", and quoted it said
/// "expected true or false": the first answer is the one that helps.
#[test]
fn a_bare_word_in_a_file_is_answered_in_the_settings_terms() {
    for (line, said) in [
        ("exclusive = yes", "config.toml:1: key exclusive: yes: expected true or false"),
        ("policy = pack", "config.toml:1: key policy: pack: a text value is quoted (policy = \"pack\")"),
        ("min-free = 8G", "config.toml:1: key min-free: 8G: a text value is quoted (min-free = \"8G\")"),
    ] {
        let sim = with_user_file(&format!("{line}\n"));
        sim.gpurun().args(["--list"]).run().status(125).stderr_has(said);
    }
}
