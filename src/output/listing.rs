//! What gpurun shows of the machine: `--list` and `--dry-run` as a table for people or one JSON
//! object for programs (schema in `--help` and the man page), and the refusal table of exit 75.
//! Unknown values are shown as `-` and serialised as `null`.

use crate::options::count::Count;
use crate::options::shell;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::launch::env::Plan;
use crate::options::size::human;
use crate::probe::gpu::{Gpu, Machine};
use crate::reserve::lease::{self, Lease};
use crate::select::policy::Assessment;

/// Whether a GPU qualifies, and if not, every reason why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eligibility {
    pub eligible: bool,
    pub reasons: Vec<String>,
}

impl Eligibility {
    fn of(assessment: Option<&Assessment>) -> Eligibility {
        match assessment {
            Some(a) => Eligibility { eligible: a.eligible(), reasons: a.reasons() },
            None => Eligibility { eligible: false, reasons: vec!["not assessed".to_owned()] },
        }
    }
}

fn assessment_of(assessments: &[Assessment], index: u32) -> Option<&Assessment> {
    assessments.iter().find(|a| a.index == index)
}

#[derive(Serialize)]
struct Selected<'a> {
    index: u32,
    uuid: &'a Option<String>,
}

#[derive(Serialize)]
struct GpuEntry<'a> {
    #[serde(flatten)]
    gpu: &'a Gpu,
    #[serde(flatten)]
    eligibility: Eligibility,
}

#[derive(Serialize)]
struct Listing<'a> {
    driver_version: &'a Option<String>,
    cuda_driver_version: &'a Option<String>,
    nvml_library: String,
    gpus: Vec<GpuEntry<'a>>,
    /// Live gpurun reservations.
    reservations: Vec<ReservationEntry<'a>>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    plan: Option<PlanEntry<'a>>,
}

#[derive(Serialize)]
struct ReservationEntry<'a> {
    index: Option<u32>,
    #[serde(flatten)]
    lease: &'a Lease,
    age_seconds: u64,
}

fn reservation_entries<'a>(machine: &Machine, live: &'a [Lease]) -> Vec<ReservationEntry<'a>> {
    live.iter()
        .map(|lease| ReservationEntry {
            index: machine
                .gpus
                .iter()
                .find(|gpu| gpu.uuid.as_deref() == Some(lease.uuid.as_str()))
                .map(|gpu| gpu.index),
            lease,
            age_seconds: lease::age_seconds(lease),
        })
        .collect()
}

#[derive(Serialize)]
struct PlanEntry<'a> {
    /// What --gpus asked for (`2`, `2-4`, `all`) and how many were taken.
    requested: String,
    count: Option<usize>,
    command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_free: Option<&'a str>,
    selected: Option<Vec<Selected<'a>>>,
    env: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What a dry run shows besides the machine.
pub struct DryRun<'a> {
    pub requested: Count,
    /// The command it was asked about (may be empty).
    pub command: &'a [OsString],
    /// `None`: nothing could be selected (exit 75).
    pub plan: Option<&'a Plan>,
    /// What `--min-free auto` decided, and why.
    pub sizing: Option<&'a str>,
}

/// The `--list --json` object; a dry run adds `requested`, `count`, `command`, `selected` and
/// `env` (`count`, `selected` and `env` are null when nothing could be selected).
pub fn json(
    machine: &Machine,
    library: &Path,
    assessments: &[Assessment],
    live: &[Lease],
    dry_run: Option<&DryRun>,
) -> String {
    let listing = Listing {
        driver_version: &machine.driver_version,
        cuda_driver_version: &machine.cuda_driver_version,
        nvml_library: library.display().to_string(),
        gpus: machine
            .gpus
            .iter()
            .map(|gpu| GpuEntry { gpu, eligibility: Eligibility::of(assessment_of(assessments, gpu.index)) })
            .collect(),
        reservations: reservation_entries(machine, live),
        plan: dry_run.map(|dry_run| PlanEntry {
            requested: dry_run.requested.to_string(),
            count: dry_run.plan.map(|plan| plan.selection.devices.len()),
            command: dry_run.command.iter().map(|word| word.to_string_lossy().into_owned()).collect(),
            min_free: dry_run.sizing,
            selected: dry_run.plan.map(|plan| {
                plan.selection
                    .devices
                    .iter()
                    .map(|device| Selected { index: device.index, uuid: &device.uuid })
                    .collect()
            }),
            env: dry_run.plan.map(|plan| {
                plan.variables
                    .iter()
                    .map(|(name, value)| (name.clone(), serde_json::Value::from(value.as_str())))
                    .collect()
            }),
        }),
    };
    let mut text = serde_json::to_string_pretty(&listing).expect("plain data serialises");
    text.push('\n');
    text
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".to_owned())
}

/// Keeps a table cell to `width` characters.
fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut clipped: String = text.chars().take(width.saturating_sub(1)).collect();
        clipped.push('…');
        clipped
    }
}

pub fn table(machine: &Machine, assessments: &[Assessment], live: &[Lease]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NVIDIA driver {}, CUDA {}, {} GPU{}",
        or_dash(machine.driver_version.as_deref()),
        or_dash(machine.cuda_driver_version.as_deref()),
        machine.gpus.len(),
        if machine.gpus.len() == 1 { "" } else { "s" },
    );
    let _ = writeln!(
        out,
        "{:>3}  {:<24}  {:>21}  {:>9}  {:>4}  {:>4}  {:>5}  PROCESSES",
        "GPU", "NAME", "MEMORY USED / TOTAL", "FREE", "UTIL", "TEMP", "POWER"
    );
    for gpu in &machine.gpus {
        let memory = gpu.memory.map(|m| format!("{} / {}", human(m.used_bytes), human(m.total_bytes)));
        let free = gpu.memory.map(|m| human(m.free_bytes));
        let util = gpu.utilization.map(|u| format!("{}%", u.gpu_percent));
        let temperature = gpu.temperature_c.map(|t| format!("{t}C"));
        let power = gpu.power_watts.map(|w| format!("{w:.0}W"));
        let processes: Vec<String> = match &gpu.processes {
            None => vec!["?".to_owned()],
            Some(list) if list.is_empty() => vec!["-".to_owned()],
            Some(list) => list
                .iter()
                .map(|p| {
                    format!(
                        "{} {} {} ({})",
                        p.pid,
                        p.user.as_deref().unwrap_or("?"),
                        clip(p.command.as_deref().unwrap_or("?"), 40),
                        p.used_bytes.map(human).unwrap_or_else(|| "?".to_owned()),
                    )
                })
                .collect(),
        };
        let _ = writeln!(
            out,
            "{:>3}  {:<24}  {:>21}  {:>9}  {:>4}  {:>4}  {:>5}  {}",
            gpu.index,
            clip(gpu.name.as_deref().unwrap_or("-"), 24),
            or_dash(memory),
            or_dash(free),
            or_dash(util),
            or_dash(temperature),
            or_dash(power),
            processes[0],
        );
        for more in &processes[1..] {
            let _ = writeln!(out, "{:>84}{more}", "");
        }
        for lease in live.iter().filter(|lease| gpu.uuid.as_deref() == Some(lease.uuid.as_str())) {
            let _ = writeln!(
                out,
                "{:>5}reserved by {} PID {} for {} s ({}{}): {}",
                "",
                lease.user,
                lease.pid,
                lease::age_seconds(lease),
                human(lease.reserved_bytes),
                if lease.exclusive { ", exclusive" } else { "" },
                clip(&lease.command, 40)
            );
        }
        let eligibility = Eligibility::of(assessment_of(assessments, gpu.index));
        if !eligibility.eligible {
            let _ = writeln!(out, "{:>5}not eligible: {}", "", eligibility.reasons.join("; "));
        }
    }
    out
}

/// `--dry-run` for people: the table, the choice, the environment.
pub fn dry_run(
    machine: &Machine,
    assessments: &[Assessment],
    live: &[Lease],
    plan: &Plan,
    asked: &DryRun,
) -> String {
    let mut out = table(machine, assessments, live);
    let chosen: Vec<String> = plan
        .selection
        .devices
        .iter()
        .map(|device| {
            format!(
                "GPU {} ({}, {})",
                device.index,
                device.name.as_deref().unwrap_or("-"),
                device.uuid.as_deref().unwrap_or("-")
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "\nselected: {}",
        if chosen.is_empty() { "no GPU".to_owned() } else { chosen.join(", ") }
    );
    let _ = writeln!(out, "environment:");
    for (name, value) in &plan.variables {
        let _ = writeln!(out, "  {name}={value}");
    }
    if !asked.command.is_empty() {
        let _ = writeln!(out, "command: {}", shell::quote(asked.command));
    }
    if let Some(why) = asked.sizing {
        let _ = writeln!(out, "min-free: {why}");
    }
    let _ = writeln!(out, "(dry run: nothing was started and no reservation is held)");
    out
}
