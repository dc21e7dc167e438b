//! The shebang split is GNU `env -S`'s, checked against the real env (DESIGN 7.9). Each case
//! is an `-S` string from coreutils' own `tests/env/env-S.pl` (as env receives it there, after
//! Perl's and the shell's quoting), run two ways: through a real script whose first line is
//! `#!<dir>/gpurun --gpus=0 --no-history -- <dir>/args CASE` (the kernel passes everything after
//! the interpreter as one argument, and gpurun splits it), and as `env -S'<dir>/args CASE'`.
//! `args` prints each argument it gets; the two outputs, exit statuses and refusals must match.

use crate::common;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

/// The `-S` strings of env-S.pl. Real newlines cannot be in a `#!` line, so t5's is left out
/// of its string (the kernel would end the line there).
const CASES: &[&str] = &[
    // 1-5: -S with other arguments
    r#"A=B FOO=AR  sh -c "echo \$A\$FOO""#,
    r#"-ufoo A=B FOO=AR sh -c "echo \$A\$FOO""#,
    // q1-q7: quoting
    r#"-i A="B C" env"#,
    r#"-i A='B C' env"#,
    r#"-i A="B \" C" env"#,
    r#"-i A='B \' C' env"#,
    r#"-i A="B'C" env"#,
    r#"-i A='B"C' env"#,
    // t1-t5: tabs and other blanks
    "-i\tA=\"B \tC\" env",
    r"printf x%sx\n A\tB",
    "printf x%sx\\n A\tB",
    "printf x%sx\\n A \t B",
    "printf x%sx\\n A \t B \x0b\x0c\r",
    // e1-e21: escapes
    r#"-i A="B\tC" env"#,
    r#"-i A="B\fC" env"#,
    r#"-i A="B\rC" env"#,
    r#"-i A="B\nC" env"#,
    r#"-i A="B\vC" env"#,
    r#"-i A="B\$C" env"#,
    r"-i A=B\$C env",
    r#"-i A="B\#C" env"#,
    r#"A="B\\C" env"#,
    r"A='B\\C' env",
    r"A='B\tC' env",
    r"A='B\#C' env",
    r"A='B\$C' env",
    r#"A='B\"C' env"#,
    r#"-i A="B\_C=D" env"#,
    r"-i A=B\_env\_env",
    // u3: variables
    r#"sh -c "echo x${FOO}x =\$FOO=""#,
    // v1-v10
    "-i A=${FOO}     env",
    "-i A=x${FOO}x   env",
    "-i A=x${UNSET}x   env",
    "-i ${FOO}=A env",
    "-i A='x${FOO}x' env",
    r#"-i A="${_FOO}" env"#,
    r#"-i A="${F_OO}" env"#,
    r#"-i A="${FOO1}" env"#,
    "A ${UNSET} B ${EMPTY} C",
    // d1-d12: comments and \c
    "-i A=B #C=D",
    "#A=B C=D",
    "-i A=B#",
    "-i A=B #",
    r"-i A=B\cC=D",
    r"\cA=B C=D",
    r"-i A=B\c",
    r"-i A=B \c",
    "echo FOO #BAR",
    r"echo FOO \#BAR",
    "echo FOO#BAR",
    // s1-s17: \_
    r#"printf x%sx\n "A\_B""#,
    r"printf x%sx\n 'A\_B'",
    r"printf x%sx\n A\_B",
    r"printf x%sx\n A B",
    r"printf x%sx\n A  B",
    r"\_printf x%sx\n FOO",
    r"printf x%sx\n FOO\_",
    r"\_printf x%sx\n FOO\_",
    r"\_\_printf x%sx\n FOO\_\_",
    r" printf x%sx\n FOO",
    r"printf x%sx\n FOO ",
    r"printf\_x%sx\n\_FOO",
    r"printf x%sx\n \_ FOO",
    r"printf x%sx\n\_ \_FOO",
    r"\_ \_  printf x%sx\n FOO \_ \_",
    // eq1-eq15: empty quotes
    r#"printf x%sx\n A "" B"#,
    r#"printf x%sx\n A"" B"#,
    r#"printf x%sx\n A""B"#,
    r#"printf x%sx\n A ""B"#,
    r#"printf x%sx\n """#,
    r"printf x%sx\n A '' B",
    r"printf x%sx\n A'' B",
    r"printf x%sx\n A''B",
    r"printf x%sx\n A ''B",
    // p10
    r#"\_ \_perl\_-w\_-T\_-e\_'print "hello\n";'\_ \_"#,
    // err1-err9: what env refuses
    r#""\c""#,
    r"A=B\",
    r#""A=B\""#,
    r"'A=B\'",
    r"A=B\q",
    "A=$B",
    "A=${B",
    "A=${B%B}",
    "A=${9B}",
];

/// The 105th case of env-S.pl's kind: `gpurun 'pa -n' ./s` typed by hand, with argv[0] exactly
/// the path on ./s's `#!` line. GNU env runs a command named "pa -n" (127), and so does gpurun:
/// the kernel executed gpurun, not the script (AT_EXECFN), so nothing is split.
#[test]
fn a_packed_argument_typed_by_hand_is_a_command_name() {
    let dir = tempfile::Builder::new().prefix("s").tempdir_in("/tmp").unwrap();
    let gpurun = dir.path().join("gpurun");
    std::os::unix::fs::symlink(common::gpurun_binary(), &gpurun).unwrap();
    let script = dir.path().join("s");
    std::fs::write(&script, format!("#!{} pa -n\n", gpurun.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // On the simulated GPUs: gpurun probes and chooses before it finds the command missing.
    let sim = common::Sim::new(&common::default_scenario());
    let typed = sim.gpurun_command(gpurun.to_str().unwrap(), &["pa -n", script.to_str().unwrap()]).run();
    typed.status(127).stderr_has("pa -n");
}

fn is_gnu_env() -> bool {
    Command::new("env")
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("GNU coreutils"))
}

fn variables(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GPURUN_") {
            command.env_remove(name);
        }
    }
    command
        .env("FOO", "BAR")
        .env("_FOO", "BAR")
        .env("F_OO", "BAR")
        .env("FOO1", "BAR")
        .env("EMPTY", "")
        .env_remove("UNSET")
        .env_remove("B")
        .stdin(Stdio::null())
}

/// What the kernel passes as the one argument: the rest of the line, trailing blanks removed.
fn as_the_kernel_passes(line: &str) -> &str {
    line.trim_end_matches([' ', '\t'])
}

fn shown(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout {:?}\nstderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_shebang_split_is_gnu_env_s_on_coreutils_own_cases() {
    if !is_gnu_env() {
        common::skip("env -S cases", "env here is not GNU coreutils' env");
        return;
    }
    // Short paths: the kernel reads only the first 256 bytes of a #! line.
    let dir = tempfile::Builder::new().prefix("s").tempdir_in("/tmp").unwrap();
    let gpurun = dir.path().join("gpurun");
    std::os::unix::fs::symlink(common::gpurun_binary(), &gpurun).unwrap();
    let args = dir.path().join("args");
    std::fs::write(&args, "#!/bin/sh\nprintf '[%s]\\n' \"$@\"\n").unwrap();
    std::fs::set_permissions(&args, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut differences = Vec::new();
    for (n, case) in CASES.iter().enumerate() {
        let packed = format!("--gpus=0 --no-history -- {} {case}", args.display());
        let line = format!("#!{} {packed}", gpurun.display());
        assert!(line.len() < 250, "case {n} is too long for a #! line: {line:?}");
        let script = dir.path().join(format!("case{n}"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let through_gpurun = output_of_new_script(variables(&mut Command::new(&script)));
        let string = as_the_kernel_passes(&format!("{} {case}", args.display())).to_owned();
        let mut env = Command::new("env");
        env.arg(std::ffi::OsStr::from_bytes(format!("-S{string}").as_bytes())).arg(&script);
        let through_env = output_of_new_script(variables(&mut env));
        let env_err = String::from_utf8_lossy(&through_env.stderr).into_owned();
        let agree = match through_env.status.code() {
            // env refused the string: gpurun refuses it too, for env's reason.
            Some(125) if env_err.starts_with("env: ") => {
                let reason = env_err.trim_start_matches("env: ").trim_end();
                through_gpurun.status.code() == Some(125)
                    && String::from_utf8_lossy(&through_gpurun.stderr).contains(reason)
                    && through_gpurun.stdout.is_empty()
            }
            _ => {
                through_gpurun.status.code() == through_env.status.code()
                    && through_gpurun.stdout == through_env.stdout
            }
        };
        if !agree {
            differences.push(format!(
                "case {n} {case:?}:\n env -S:\n{}\n gpurun:\n{}",
                shown(&through_env),
                shown(&through_gpurun)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} cases differ:\n{}",
        differences.len(),
        CASES.len(),
        differences.join("\n")
    );
}

/// The output of a command that executes a script just written. Another test thread's fork
/// can hold the script's write descriptor open for a moment (until its child execs), and the
/// kernel refuses to execute a file open for writing (ETXTBSY, here or in `env`'s exec): that
/// is retried, not failed.
fn output_of_new_script(command: &mut Command) -> std::process::Output {
    for _ in 0..50 {
        match command.output() {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy => {}
            Ok(output) if String::from_utf8_lossy(&output.stderr).contains("Text file busy") => {}
            other => return other.unwrap(),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    command.output().unwrap()
}
