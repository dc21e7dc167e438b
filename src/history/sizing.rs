//! `--min-free auto[:SIZE]`: the request sized from what the same command needed before. Pure:
//! the records, the command and the directory come in, the size and the reason go out.
//!
//! Rule: the runs of the same words in the same directory, failing that of the same program and
//! script (see `program_and_script`) in the same directory; of the last `RUNS` of them that used
//! a GPU, the largest peak on one GPU, plus `MARGIN_PERCENT`. Selection then never asks for more
//! than the largest card of the request could ever have free (`policy`).

use crate::history::Record;
use crate::options::size::{human, Threshold};
use crate::options::wrappers::{after_options, base, is_python};

/// How many of the latest matching runs count.
pub(crate) const RUNS: usize = 5;
/// Added to the largest peak: allocators round up, and inputs vary from run to run.
pub(crate) const MARGIN_PERCENT: u64 = 10;

/// What auto decided: the threshold (None: no memory filter) and a line saying why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sizing {
    pub(crate) threshold: Option<Threshold>,
    pub(crate) why: String,
    /// Sized from recorded peaks (then selection may lower it to what a card can have free).
    pub(crate) from_history: bool,
}

/// A launcher that runs a Python script given later among its options (`torchrun
/// --nproc_per_node 4 train.py`): the script is its first `.py` word, or the module of `-m`.
fn launched_script(words: &[&str]) -> Option<String> {
    if let Some(at) = words.iter().position(|w| *w == "-m" || *w == "--module") {
        return words.get(at + 1).map(|module| format!("-m {module}"));
    }
    words.iter().find(|w| w.ends_with(".py")).map(|w| base(w).to_owned())
}

/// What "the same command" means for `--min-free auto`: the program and the script (or module)
/// it runs, looked for through wrappers (`env A=1`, `nice`, `ionice`, `taskset`, `numactl`,
/// `uv run`, `poetry run`, `pipenv run`) and launchers (`torchrun`, `accelerate launch`,
/// `deepspeed`, `python -m torch.distributed.run`). A `.py` script is run by "python" whatever
/// started it. `python train.py --lr 3` -> ("python", "train.py").
pub(crate) fn program_and_script(command: &[&str]) -> (String, Option<String>) {
    let mut words = command;
    loop {
        let Some((first, rest)) = words.split_first() else { return (String::new(), None) };
        let program = base(first);
        words = match program {
            "env" | "nice" | "ionice" | "numactl" => after_options(program, rest),
            // The mask or CPU list comes first.
            "taskset" => after_options(program, rest).get(1..).unwrap_or_default(),
            "uv" | "poetry" | "pipenv" if rest.first() == Some(&"run") => after_options(program, &rest[1..]),
            "torchrun" | "deepspeed" => return ("python".to_owned(), launched_script(rest)),
            "accelerate" if rest.first() == Some(&"launch") => {
                return ("python".to_owned(), launched_script(&rest[1..]))
            }
            _ if is_python(program) => {
                let rest = after_options("python", rest);
                return match rest {
                    ["-m", "torch.distributed.run" | "torch.distributed.launch", launched @ ..] => {
                        ("python".to_owned(), launched_script(launched))
                    }
                    ["-m", module, ..] => ("python".to_owned(), Some(format!("-m {module}"))),
                    ["-c", ..] => ("python".to_owned(), Some("-c".to_owned())),
                    [script, ..] => ("python".to_owned(), Some(base(script).to_owned())),
                    [] => ("python".to_owned(), None),
                };
            }
            _ if program.ends_with(".py") => return ("python".to_owned(), Some(program.to_owned())),
            _ => {
                let script = rest.iter().find(|w| !w.starts_with('-')).map(|w| base(w).to_owned());
                let program =
                    if script.as_deref().is_some_and(|s| s.ends_with(".py")) { "python" } else { program };
                return (program.to_owned(), script);
            }
        };
    }
}

/// `peak` plus `MARGIN_PERCENT`, rounded up, without overflow.
fn with_margin(peak: u64) -> u64 {
    let grown = (u128::from(peak) * u128::from(100 + MARGIN_PERCENT)).div_ceil(100);
    u64::try_from(grown).unwrap_or(u64::MAX)
}

pub(crate) fn size_for(
    records: &[Record],
    command: &[&str],
    directory: &str,
    fallback: Option<Threshold>,
) -> Sizing {
    let here: Vec<&Record> = records.iter().filter(|r| r.directory == directory).collect();
    let used_gpu = |r: &&Record| r.peaks().iter().any(|(_, bytes)| *bytes > 0);
    let same_words: Vec<&Record> =
        here.iter().copied().filter(|r| r.command() == command).filter(used_gpu).collect();
    let wanted = program_and_script(command);
    let (matching, kind) = if !same_words.is_empty() {
        (same_words, "")
    } else {
        let similar =
            here.iter().copied().filter(|r| program_and_script(&r.command()) == wanted).filter(used_gpu);
        (similar.collect(), " of the same program and script")
    };
    let latest = &matching[matching.len().saturating_sub(RUNS)..];
    let peak = latest.iter().flat_map(|r| r.peaks()).map(|(_, bytes)| bytes).max();
    match (peak, fallback) {
        (Some(peak), _) => {
            let bytes = with_margin(peak);
            let runs = latest.len();
            Sizing {
                threshold: Some(Threshold::Bytes(bytes)),
                why: format!(
                    "auto: {} = peak {} of {runs} earlier run{}{kind} + {MARGIN_PERCENT}%",
                    human(bytes),
                    human(peak),
                    if runs == 1 { "" } else { "s" }
                ),
                from_history: true,
            }
        }
        (None, Some(fallback)) => Sizing {
            threshold: Some(fallback),
            why: format!("auto: no earlier run of this command in {directory}; using the given size"),
            from_history: false,
        },
        (None, None) => Sizing {
            threshold: None,
            why: format!(
                "auto: no earlier run of this command in {directory}, and no auto:SIZE: no memory filter"
            ),
            from_history: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &[&str], directory: &str, peak_gib: u64) -> Record {
        let mut report = serde_json::Map::new();
        report.insert("command".into(), serde_json::json!(command));
        report.insert("peak_memory_bytes".into(), serde_json::json!({"GPU-a": peak_gib << 30, "GPU-b": 0}));
        Record { started: 0.0, user: "u".into(), directory: directory.into(), request: String::new(), report }
    }

    #[test]
    fn the_same_words_here_first_then_the_same_script() {
        let records = vec![
            run(&["python", "train.py", "--lr", "3"], "/w", 20),
            run(&["python", "train.py", "--lr", "3"], "/w", 28),
            run(&["python", "train.py", "--lr", "3"], "/elsewhere", 70),
            run(&["python", "eval.py"], "/w", 60),
        ];
        let sized = size_for(&records, &["python", "train.py", "--lr", "3"], "/w", None);
        assert_eq!(sized.threshold, Some(Threshold::Bytes((28u64 << 30) + (28u64 << 30).div_ceil(10))));
        assert_eq!(sized.why, "auto: 30.8 GiB = peak 28 GiB of 2 earlier runs + 10%");
        // Other arguments to the same script: the script's runs.
        let similar = size_for(&records, &["/usr/bin/python", "train.py", "--lr", "1"], "/w", None);
        assert_eq!(
            similar.why,
            "auto: 30.8 GiB = peak 28 GiB of 2 earlier runs of the same program and script + 10%"
        );
    }

    #[test]
    fn only_the_latest_runs_count_and_idle_runs_not_at_all() {
        let mut records: Vec<Record> =
            (0..7).map(|i| run(&["job"], "/w", if i == 0 { 70 } else { 10 })).collect();
        records.push(run(&["job"], "/w", 0));
        let sized = size_for(&records, &["job"], "/w", None);
        assert_eq!(sized.threshold, Some(Threshold::Bytes(11 << 30)), "{}", sized.why);
    }

    #[test]
    fn wrappers_and_launchers_are_looked_through_to_the_script() {
        type Case<'a> = (&'a [&'a str], (&'a str, Option<&'a str>));
        let cases: &[Case] = &[
            (&["python", "train.py", "--lr", "3"], ("python", Some("train.py"))),
            (&["env", "A=1", "B=2", "python3", "eval.py"], ("python", Some("eval.py"))),
            (&["env", "-u", "X", "-i", "python", "-u", "eval.py"], ("python", Some("eval.py"))),
            (&["nice", "-n", "5", "python", "x.py"], ("python", Some("x.py"))),
            (&["nice", "python", "x.py"], ("python", Some("x.py"))),
            (&["ionice", "-c", "3", "taskset", "-c", "0-3", "python3.11", "x.py"], ("python", Some("x.py"))),
            (&["numactl", "--cpunodebind=0", "-m", "0", "python", "x.py"], ("python", Some("x.py"))),
            (&["uv", "run", "--with", "torch", "python", "x.py"], ("python", Some("x.py"))),
            (&["uv", "run", "x.py"], ("python", Some("x.py"))),
            (&["poetry", "run", "python", "x.py"], ("python", Some("x.py"))),
            (&["pipenv", "run", "python", "-m", "pkg.train"], ("python", Some("-m pkg.train"))),
            (
                &["accelerate", "launch", "--num_processes", "2", "train.py", "--lr", "1"],
                ("python", Some("train.py")),
            ),
            (&["torchrun", "--nproc_per_node", "4", "/w/train.py"], ("python", Some("train.py"))),
            (
                &["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"],
                ("python", Some("t.py")),
            ),
            (&["python", "-X", "dev", "-m", "eval"], ("python", Some("-m eval"))),
            (&["./job.sh", "--fast", "input"], ("job.sh", Some("input"))),
        ];
        for (command, (program, script)) in cases {
            let (found, found_script) = program_and_script(command);
            assert_eq!((found.as_str(), found_script.as_deref()), (*program, *script), "{command:?}");
        }
        // A tiny eval run through env no longer inherits a training run's peak.
        let records = vec![run(&["python", "train.py"], "/w", 70)];
        let sized = size_for(&records, &["env", "A=1", "python", "eval.py"], "/w", None);
        assert_eq!(sized.threshold, None, "{}", sized.why);
        let same = size_for(&records, &["nice", "python", "train.py"], "/w", None);
        assert_eq!(same.threshold, Some(Threshold::Bytes(with_margin(70 << 30))));
    }

    #[test]
    fn huge_recorded_peaks_do_not_wrap() {
        let mut report = serde_json::Map::new();
        report.insert("command".into(), serde_json::json!(["job"]));
        report.insert("peak_memory_bytes".into(), serde_json::json!({"GPU-a": u64::MAX - 1}));
        let record =
            Record { started: 0.0, user: "u".into(), directory: "/w".into(), request: String::new(), report };
        let sized = size_for(&[record], &["job"], "/w", None);
        assert_eq!(sized.threshold, Some(Threshold::Bytes(u64::MAX)));
    }

    #[test]
    fn without_history_the_fallback_or_nothing() {
        let sized = size_for(&[], &["job"], "/w", Some(Threshold::Bytes(8 << 30)));
        assert_eq!(sized.threshold, Some(Threshold::Bytes(8 << 30)));
        let none = size_for(&[], &["job"], "/w", None);
        assert_eq!(none.threshold, None);
        assert!(none.why.contains("no memory filter"), "{}", none.why);
    }
}
