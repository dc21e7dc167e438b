//! Programs that run another program given among their words (`env A=1 CMD`, `nice -n 5 CMD`,
//! `uv run CMD`, `timeout 1h CMD`, `nohup CMD`, `stdbuf -oL CMD`, `setsid CMD`, `time CMD`), looked through to what they run: by the history's "same command" and by the
//! launchers gpurun hands its choice to.

/// The program's name without its directory.
pub(crate) fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `python`, `python3`, `python3.11`.
pub(crate) fn is_python(program: &str) -> bool {
    program.strip_prefix("python").is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The options of a wrapper that take a value in the next word (`nice -n 5`).
fn takes_value(wrapper: &str, option: &str) -> bool {
    let options: &[&str] = match wrapper {
        "env" => &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
        "nice" => &["-n", "--adjustment"],
        "ionice" => &["-c", "--class", "-n", "--classdata"],
        "taskset" => &[],
        "numactl" => &[
            "-N",
            "--cpunodebind",
            "-m",
            "--membind",
            "-C",
            "--physcpubind",
            "-p",
            "--preferred",
            "-i",
            "--interleave",
        ],
        "uv" => &["--with", "--python", "-p", "--project", "--directory", "--package", "--group", "--extra"],
        "poetry" | "pipenv" => &["-C", "--directory", "-P", "--project"],
        "python" => &["-X", "-W", "-Q"],
        "timeout" => &["-k", "--kill-after", "-s", "--signal"],
        "stdbuf" => &["-i", "--input", "-o", "--output", "-e", "--error"],
        "time" => &["-o", "--output", "-f", "--format"],
        _ => &[],
    };
    !option.contains('=') && options.contains(&option)
}

/// The words after a wrapper's own options: `nice -n 5 python x.py` -> `python x.py`.
pub(crate) fn after_options<'a>(wrapper: &str, mut words: &'a [&'a str]) -> &'a [&'a str] {
    while let Some((first, rest)) = words.split_first() {
        if *first == "--" {
            return rest;
        }
        if wrapper == "env" && first.contains('=') && !first.starts_with('-') {
            words = rest;
            continue;
        }
        // Python's -m and -c end its options: what follows is the module or the code.
        if !first.starts_with('-') || (wrapper == "python" && matches!(*first, "-m" | "-c")) {
            break;
        }
        words = if takes_value(wrapper, first) { rest.get(1..).unwrap_or_default() } else { rest };
    }
    words
}

/// Where the program a command runs starts, through the wrappers in front of it: `env A=1
/// nice -n 5 deepspeed x.py` -> 4 (`deepspeed`). 0 where there is no wrapper.
pub(crate) fn inner_start(command: &[&str]) -> usize {
    let mut words = command;
    while let Some((first, rest)) = words.split_first() {
        let program = base(first);
        words = match program {
            "env" | "nice" | "ionice" | "numactl" | "nohup" | "stdbuf" | "setsid" | "time" => {
                after_options(program, rest)
            }
            // The mask, or the duration, comes before the command.
            "taskset" | "timeout" => after_options(program, rest).get(1..).unwrap_or_default(),
            "uv" | "poetry" | "pipenv" if rest.first() == Some(&"run") => after_options(program, &rest[1..]),
            _ => break,
        };
    }
    command.len() - words.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_are_looked_through() {
        assert_eq!(inner_start(&["deepspeed", "x.py"]), 0);
        assert_eq!(inner_start(&["env", "A=1", "nice", "-n", "5", "deepspeed", "x.py"]), 5);
        assert_eq!(inner_start(&["uv", "run", "--python", "3.11", "accelerate", "launch"]), 4);
        assert_eq!(inner_start(&["taskset", "0x3", "python", "-m", "m"]), 2);
        assert_eq!(inner_start(&["env"]), 1);
        assert_eq!(inner_start(&["timeout", "-k", "5", "1h", "nohup", "deepspeed", "x.py"]), 5);
        assert_eq!(inner_start(&["stdbuf", "-o", "L", "-eL", "setsid", "-w", "ds", "x.py"]), 6);
        assert_eq!(inner_start(&["/usr/bin/time", "-o", "t.txt", "accelerate", "launch"]), 3);
    }
}
