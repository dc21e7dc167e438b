//! What happened, at the end of a run: `--report` (a summary on stderr) and `--report-json FILE`
//! (DESIGN 9's schema). Both are written before gpurun re-raises the command's fatal signal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;

use serde::Serialize;

use crate::launch::spawn::End;
use crate::options::size::human;
use crate::probe::gpu::Gpu;
use crate::verify::verdict::Verdict;

#[derive(Serialize)]
pub struct Selected {
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
}

#[derive(Serialize)]
pub struct Verification {
    /// `null` when nothing was checked (`--verify off`, no GPU selected).
    pub verdict: Option<Verdict>,
    pub detail: String,
}

#[derive(Serialize)]
pub struct Exit {
    /// The command's exit code, or null if a signal ended it.
    pub code: Option<u8>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
}

#[derive(Serialize)]
pub struct Report {
    pub command: Vec<String>,
    pub selected: Vec<Selected>,
    pub verification: Verification,
    /// The largest total of the tree's GPU memory seen on each GPU, by UUID.
    pub peak_memory_bytes: BTreeMap<String, u64>,
    pub wall_seconds: f64,
    pub exit: Exit,
    /// What gpurun itself exits with (125 after `--verify strict` ended the command).
    pub gpurun_exit_status: i32,
}

impl Report {
    pub fn selected_from(gpus: &[&Gpu]) -> Vec<Selected> {
        gpus.iter()
            .map(|gpu| Selected { index: gpu.index, uuid: gpu.uuid.clone(), name: gpu.name.clone() })
            .collect()
    }

    pub fn exit_from(end: End) -> Exit {
        match end {
            End::Exited(code) => Exit { code: Some(code), signal: None, signal_name: None },
            End::Signaled(signal) => Exit {
                code: None,
                signal: Some(signal),
                signal_name: Some(crate::options::signal::name(signal)),
            },
        }
    }

    pub fn summary(&self) -> String {
        let mut text = String::from("report:");
        let gpus: Vec<String> = self
            .selected
            .iter()
            .map(|s| format!("GPU {} ({})", s.index, s.name.as_deref().unwrap_or("unknown model")))
            .collect();
        let _ = write!(
            text,
            "\n  GPUs:         {}",
            if gpus.is_empty() { "none".to_owned() } else { gpus.join(", ") }
        );
        let verdict =
            self.verification.verdict.map(|v| v.to_string()).unwrap_or_else(|| "not checked".to_owned());
        let _ = write!(text, "\n  verification: {verdict}: {}", self.verification.detail);
        let peaks: Vec<String> =
            self.peak_memory_bytes.iter().map(|(uuid, bytes)| format!("{uuid} {}", human(*bytes))).collect();
        if !peaks.is_empty() {
            let _ = write!(text, "\n  peak memory:  {}", peaks.join(", "));
        }
        let _ = write!(text, "\n  wall time:    {:.2} s", self.wall_seconds);
        let exit = match (&self.exit.code, &self.exit.signal_name) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(name)) => format!("killed by {name}"),
            (None, None) => "unknown".to_owned(),
        };
        let _ = write!(text, "\n  command:      {exit}");
        text
    }

    pub fn json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("plain data serialises");
        text.push('\n');
        text
    }

    /// Writes the JSON report into the file opened at start (so an unwritable path failed then).
    pub fn write_json(&self, mut file: File) {
        if let Err(error) = file.write_all(self.json().as_bytes()) {
            tracing::error!("cannot write the JSON report: {error}");
        }
    }
}
