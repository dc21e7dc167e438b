//! `--list`: the machine as a table for people, or one JSON object for programs (schema in
//! `--help` and the man page). Unknown values are shown as `-` and serialised as `null`.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::gpu::{Gpu, Machine};
use crate::size::human;

/// Whether a GPU can be chosen, and if not, every reason why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eligibility {
    pub eligible: bool,
    pub reasons: Vec<String>,
}

impl Eligibility {
    /// Without filters the only reason to turn a GPU away is that it could not be read.
    pub fn of(gpu: &Gpu) -> Eligibility {
        match &gpu.error {
            Some(error) => Eligibility {
                eligible: false,
                reasons: vec![format!("unreadable: {error}")],
            },
            None => Eligibility {
                eligible: true,
                reasons: Vec::new(),
            },
        }
    }
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
    /// Live gpurun reservations; none are held until the lock directory is in use.
    reservations: Vec<serde_json::Value>,
}

pub fn json(machine: &Machine, library: &Path) -> String {
    let listing = Listing {
        driver_version: &machine.driver_version,
        cuda_driver_version: &machine.cuda_driver_version,
        nvml_library: library.display().to_string(),
        gpus: machine
            .gpus
            .iter()
            .map(|gpu| GpuEntry {
                gpu,
                eligibility: Eligibility::of(gpu),
            })
            .collect(),
        reservations: Vec::new(),
    };
    let mut text = serde_json::to_string_pretty(&listing).expect("plain data serialises");
    text.push('\n');
    text
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_owned())
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

pub fn table(machine: &Machine) -> String {
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
        let memory = gpu
            .memory
            .map(|m| format!("{} / {}", human(m.used_bytes), human(m.total_bytes)));
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
        if let Some(error) = &gpu.error {
            let _ = writeln!(out, "{:>5}not eligible: {error}", "");
        }
    }
    out
}
