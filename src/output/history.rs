//! `--history`: recent runs, like `sacct` for one machine.

use std::fmt::Write as _;

use crate::history::Record;
use crate::options::clock::utc;
use crate::options::shell;
use crate::options::size::human;

/// How many runs the table shows (the JSON has every one kept).
pub(crate) const SHOWN: usize = 20;

/// The records whose command contains `pattern`, oldest first.
pub(crate) fn matching<'a>(records: &'a [Record], pattern: Option<&str>) -> Vec<&'a Record> {
    records.iter().filter(|r| pattern.is_none_or(|p| r.command().join(" ").contains(p))).collect()
}

fn field<'a>(record: &'a Record, name: &str) -> &'a serde_json::Value {
    record.report.get(name).unwrap_or(&serde_json::Value::Null)
}

/// The table for a terminal of `columns` (`None`: a pipe, which gets every character): the
/// full layout where it fits, else a compact one (no year or seconds, the largest peak only, the
/// command cut with `…`), every row within the width (DESIGN 9: what fits the terminal).
pub(crate) fn table_for(records: &[&Record], columns: Option<usize>) -> String {
    let full = table(records);
    let Some(columns) = columns else { return full };
    if full.lines().all(|line| line.chars().count() < columns) {
        return full;
    }
    let mut out = String::from("STARTED     WALL    GPUS  VERDICT      PEAK     ENERGY EXIT    COMMAND\n");
    let shown = &records[records.len().saturating_sub(SHOWN)..];
    for record in shown {
        let row = Row::of(record);
        let largest = record.peaks().iter().map(|(_, bytes)| *bytes).max();
        let cells = format!(
            "{:<11} {:<7} {:<5} {:<12} {:<8} {:<6} {:<7} ",
            &utc(record.started)[5..16],
            row.wall,
            crate::process::stdio::clip(&row.gpus, 5),
            row.verdict,
            largest.map_or("-".to_owned(), |bytes| human(bytes).replace(' ', "")),
            energy(record),
            row.ended,
        );
        // The command in what is left, its program's name kept (`…/train.py --lr 3`).
        let room = columns.saturating_sub(cells.chars().count() + 1);
        let line = format!("{cells}{}", crate::process::stdio::clip_command(&row.command, room));
        let _ = writeln!(out, "{}", crate::process::stdio::fit(&line, columns));
    }
    if records.len() > shown.len() {
        let _ =
            writeln!(out, "({} earlier runs not shown; --json has them all)", records.len() - shown.len());
    }
    out
}

/// One record's cells, as both layouts show them.
struct Row {
    wall: String,
    gpus: String,
    verdict: String,
    ended: String,
    command: String,
}

impl Row {
    fn of(record: &Record) -> Row {
        let selected = field(record, "selected").as_array().cloned().unwrap_or_default();
        let gpus: Vec<String> =
            selected.iter().filter_map(|d| d["index"].as_u64()).map(|i| i.to_string()).collect();
        let exit = &field(record, "exit");
        let ended = match (exit["code"].as_u64(), exit["signal_name"].as_str()) {
            (Some(code), _) => code.to_string(),
            (None, Some(signal)) => signal.to_owned(),
            _ => "-".to_owned(),
        };
        let words: Vec<std::ffi::OsString> = record.command().iter().map(std::ffi::OsString::from).collect();
        Row {
            wall: field(record, "wall_seconds").as_f64().map_or("-".to_owned(), |s| format!("{s:.1}s")),
            gpus: if gpus.is_empty() { "-".to_owned() } else { gpus.join(",") },
            verdict: field(record, "verification")["verdict"].as_str().unwrap_or("-").to_owned(),
            ended,
            command: shell::quote(&words),
        }
    }
}

/// The table: one run per line, newest last.
pub(crate) fn table(records: &[&Record]) -> String {
    let mut out = String::from(
        "STARTED (UTC)        WALL      GPUS    VERDICT       PEAK              ENERGY   EXIT     COMMAND\n",
    );
    let shown = &records[records.len().saturating_sub(SHOWN)..];
    for record in shown {
        let selected = field(record, "selected").as_array().cloned().unwrap_or_default();
        let index_of = |uuid: &str| {
            selected
                .iter()
                .find(|d| d["uuid"].as_str() == Some(uuid))
                .and_then(|d| d["index"].as_u64())
                .map_or_else(|| uuid.to_owned(), |i| i.to_string())
        };
        let peaks: Vec<String> = record
            .peaks()
            .iter()
            .map(|(uuid, bytes)| format!("{}:{}", index_of(uuid), human(*bytes).replace(' ', "")))
            .collect();
        let row = Row::of(record);
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<7} {:<13} {:<17} {:<8} {:<8} {}",
            utc(record.started),
            row.wall,
            row.gpus,
            row.verdict,
            if peaks.is_empty() { "-".to_owned() } else { peaks.join(",") },
            energy(record),
            row.ended,
            row.command
        );
    }
    if records.len() > shown.len() {
        let _ =
            writeln!(out, "({} earlier runs not shown; --json has them all)", records.len() - shown.len());
    }
    out
}

/// The run's energy over its GPUs (`183J`, `1.2kJ`, `3.4MJ`), from the receipt's
/// `energy_joules`; `-` where no GPU's was known (an older record, an unsupported counter),
/// and `≥` before it where only some were.
fn energy(record: &Record) -> String {
    let Some(by_gpu) = field(record, "energy_joules").as_object() else { return "-".to_owned() };
    let known: Vec<f64> = by_gpu.values().filter_map(serde_json::Value::as_f64).collect();
    if known.is_empty() {
        return "-".to_owned();
    }
    let total: f64 = known.iter().sum();
    let text = match total {
        j if j < 1_000.0 => format!("{j:.0}J"),
        j if j < 1_000_000.0 => format!("{:.1}kJ", j / 1_000.0),
        j => format!("{:.1}MJ", j / 1_000_000.0),
    };
    if known.len() < by_gpu.len() {
        return format!("≥{text}");
    }
    text
}

/// Every matching record, as one JSON array.
pub(crate) fn json(records: &[&Record]) -> String {
    let mut text = serde_json::to_string_pretty(records).expect("plain data serialises");
    text.push('\n');
    text
}
