//! `--min-free auto[:SIZE]`: the request sized from what the same command needed before. Pure:
//! the records, the command and the directory come in, the size and the reason go out.
//!
//! Rule: the runs of the same words in the same directory, failing that of the same program and
//! script (the first word after the program that is not an option) in the same directory; of the
//! last `RUNS` of them that used a GPU, the largest peak on one GPU, plus `MARGIN_PERCENT`.

use std::path::Path;

use crate::history::Record;
use crate::options::size::{human, Threshold};

/// How many of the latest matching runs count.
pub const RUNS: usize = 5;
/// Added to the largest peak: allocators round up, and inputs vary from run to run.
pub const MARGIN_PERCENT: u64 = 10;

/// What auto decided: the threshold (None: no memory filter) and a line saying why.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub threshold: Option<Threshold>,
    pub why: String,
}

/// `train.py` in `python train.py --lr 3`; the program's own name when there is none.
fn program_and_script(command: &[&str]) -> (String, Option<String>) {
    let base = |word: &str| {
        Path::new(word).file_name().map_or(word.to_owned(), |n| n.to_string_lossy().into_owned())
    };
    let program = command.first().map(|w| base(w)).unwrap_or_default();
    let script = command.iter().skip(1).find(|w| !w.starts_with('-')).map(|w| base(w));
    (program, script)
}

pub fn size_for(
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
            let bytes = peak + (peak * MARGIN_PERCENT).div_ceil(100);
            let runs = latest.len();
            Sizing {
                threshold: Some(Threshold::Bytes(bytes)),
                why: format!(
                    "auto: {} = peak {} of {runs} earlier run{}{kind} + {MARGIN_PERCENT}%",
                    human(bytes),
                    human(peak),
                    if runs == 1 { "" } else { "s" }
                ),
            }
        }
        (None, Some(fallback)) => Sizing {
            threshold: Some(fallback),
            why: format!("auto: no earlier run of this command in {directory}; using the given size"),
        },
        (None, None) => Sizing {
            threshold: None,
            why: format!(
                "auto: no earlier run of this command in {directory}, and no auto:SIZE: no memory filter"
            ),
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
    fn without_history_the_fallback_or_nothing() {
        let sized = size_for(&[], &["job"], "/w", Some(Threshold::Bytes(8 << 30)));
        assert_eq!(sized.threshold, Some(Threshold::Bytes(8 << 30)));
        let none = size_for(&[], &["job"], "/w", None);
        assert_eq!(none.threshold, None);
        assert!(none.why.contains("no memory filter"), "{}", none.why);
    }
}
