//! What happened, at the end of a run: `--report` (a summary on stderr) and `--report-json FILE`
//! (DESIGN 9's schema). Both are written before gpurun re-raises the command's fatal signal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;

use serde::Serialize;

use std::ffi::OsString;

use crate::exit_code::{End, Exit};
use crate::options::size::human;
use crate::probe::gpu::label;
use crate::select::selection::{Device, Selection};
use crate::verify::diagnosis::Diagnosis;
use crate::verify::receipt::{GpuReceipt, Power, Receipt, Utilization};
use crate::verify::verdict::Verdict;

#[derive(Serialize)]
pub(crate) struct Verification {
    /// `null` when nothing was checked (`--verify off`, no GPU selected).
    pub(crate) verdict: Option<Verdict>,
    pub(crate) detail: String,
}

#[derive(Serialize)]
pub(crate) struct Ended {
    /// The command's exit code, or null if a signal ended it.
    pub(crate) code: Option<u8>,
    pub(crate) signal: Option<i32>,
    pub(crate) signal_name: Option<String>,
}

/// The report of a run. Its parts are flattened into one JSON object (DESIGN 9's schema, in this
/// order): what was asked and taken, the verdict, the peaks, how the command ended, the
/// diagnosis, where it ran, and the receipt.
#[derive(Serialize)]
pub(crate) struct Report {
    #[serde(flatten)]
    pub(crate) taken: Taken,
    pub(crate) verification: Verification,
    #[serde(flatten)]
    peaks: Peaks,
    #[serde(flatten)]
    pub(crate) outcome: Outcome,
    /// What went wrong or nearly (near-oom, idle-gpu, cpu-fallback, over-reserved, xid, ...).
    pub(crate) diagnosis: Vec<Diagnosis>,
    #[serde(flatten)]
    pub(crate) placement: Placement,
    #[serde(flatten)]
    receipt: ReceiptReport,
    /// Who ran it, where and when (a supervised run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) job: Option<crate::verify::job::JobRecord>,
}

/// The command, and the GPUs asked for and taken.
#[derive(Serialize)]
pub(crate) struct Taken {
    pub(crate) command: Vec<String>,
    /// What --gpus asked for (`2`, `2-4`, `all`) and how many were taken.
    pub(crate) requested: String,
    pub(crate) count: usize,
    pub(crate) selected: Vec<Device>,
}

#[derive(Serialize)]
struct Peaks {
    /// The largest total of the tree's GPU memory seen on each GPU, by UUID.
    peak_memory_bytes: BTreeMap<String, u64>,
    /// The same by index, for the summary (people name GPUs by index).
    #[serde(skip)]
    peak_by_index: BTreeMap<u32, u64>,
}

/// How the command ended, and what gpurun exits with.
#[derive(Serialize)]
pub(crate) struct Outcome {
    pub(crate) wall_seconds: f64,
    pub(crate) exit: Ended,
    /// What gpurun itself exits with (125 after `--verify strict` ended the command).
    pub(crate) gpurun_exit_status: i32,
}

impl Outcome {
    pub(crate) fn new(wall_seconds: f64, end: End, exit: Exit) -> Outcome {
        let exit_of = match end {
            End::Exited(code) => Ended { code: Some(code), signal: None, signal_name: None },
            End::Signaled(signal) => Ended {
                code: None,
                signal: Some(signal),
                signal_name: Some(crate::options::signal::name(signal)),
            },
        };
        Outcome { wall_seconds, exit: exit_of, gpurun_exit_status: exit.status() }
    }
}

/// Where and how the command ran, as the plan made it.
#[derive(Serialize, Default)]
pub(crate) struct Placement {
    /// `--cpu-bind numa`: the CPUs the command ran on (null: gpurun's own).
    pub(crate) cpus: Option<String>,
    /// What `--min-free auto` asked for, and why (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) min_free: Option<String>,
    /// A container run: the client, the image and the container's ID (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) container: Option<ContainerReport>,
    /// `--per-rank`: which rank this was, of which group (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rank: Option<RankReport>,
}

/// The receipt, by UUID: what each chosen GPU drew and did (null where NVML could not say).
#[derive(Serialize, Default)]
struct ReceiptReport {
    energy_joules: BTreeMap<String, Option<f64>>,
    power_watts: BTreeMap<String, Power>,
    utilization_percent: BTreeMap<String, Utilization>,
    throttled_seconds: BTreeMap<String, Option<BTreeMap<&'static str, f64>>>,
    /// Processes that were not the command's and appeared on its GPUs during the run.
    intruders: Vec<IntruderReport>,
    /// Intruders seen past the listed ones (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    intruders_not_listed: u64,
    /// The receipt by index, for the summary.
    #[serde(skip)]
    lines: Vec<(u32, GpuReceipt)>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// A process not the command's seen on one of its GPUs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IntruderReport {
    /// null: held by processes outside gpurun's PID namespace (`outside_namespace`).
    pub(crate) pid: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) outside_namespace: bool,
    pub(crate) user: Option<String>,
    pub(crate) gpu_uuid: Option<String>,
    #[serde(skip)]
    gpu: u32,
    pub(crate) memory_bytes: Option<u64>,
    pub(crate) first_seen_seconds: f64,
}

/// The container a run was.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ContainerReport {
    pub(crate) client: String,
    pub(crate) image: String,
    /// Its ID (null if the runtime never wrote it).
    pub(crate) id: Option<String>,
}

/// A rank's place in its group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RankReport {
    pub(crate) local_rank: u32,
    pub(crate) local_size: u32,
    pub(crate) launcher: String,
    /// What names the job (`slurm:77:0`, `torchrun:...`, `group:NAME`).
    pub(crate) group: String,
    /// The node the rank ran on (Slurm's node name, Open MPI's daemon, the host name): its
    /// group is that node's.
    pub(crate) node: String,
    /// The whole set's NVML indices, in rank order.
    pub(crate) group_gpus: Vec<u32>,
}

impl Report {
    /// The report of a run, before its diagnosis and receipt. `uuid_of`: a GPU's UUID by index,
    /// for the per-GPU peaks.
    pub(crate) fn new(
        command: &[OsString],
        selection: &Selection,
        verification: Verification,
        peaks: &BTreeMap<u32, u64>,
        uuid_of: &dyn Fn(u32) -> Option<String>,
        outcome: Outcome,
    ) -> Report {
        Report {
            taken: Taken {
                command: command.iter().map(|word| word.to_string_lossy().into_owned()).collect(),
                requested: selection.requested.to_string(),
                count: selection.devices.len(),
                selected: selection.devices.clone(),
            },
            verification,
            peaks: Peaks {
                peak_memory_bytes: peaks
                    .iter()
                    .map(|(index, bytes)| (uuid_of(*index).unwrap_or_else(|| label(*index)), *bytes))
                    .collect(),
                peak_by_index: peaks.clone(),
            },
            outcome,
            diagnosis: Vec::new(),
            placement: Placement::default(),
            receipt: ReceiptReport::default(),
            job: None,
        }
    }

    /// The receipt (`None`: nothing watched the run): an entry for every chosen device, null
    /// where nothing was read (a MIG device has no power or energy of its own).
    pub(crate) fn add_receipt(&mut self, receipt: Option<&Receipt>, uuid_of: &dyn Fn(u32) -> Option<String>) {
        let figures = receipt.map(Receipt::per_gpu).unwrap_or_default();
        for device in &self.taken.selected {
            let key = device.uuid.clone().unwrap_or_else(|| label(device.index));
            let found = figures.iter().find(|figures| figures.gpu == device.index);
            let unknown = GpuReceipt::unknown(device.index);
            let figures = found.unwrap_or(&unknown);
            self.receipt.energy_joules.insert(key.clone(), figures.energy_joules);
            self.receipt.power_watts.insert(key.clone(), figures.power);
            self.receipt.utilization_percent.insert(key.clone(), figures.utilization);
            self.receipt.throttled_seconds.insert(key, figures.throttled_seconds.clone());
            if let Some(found) = found {
                self.receipt.lines.push((device.index, found.clone()));
            }
        }
        let Some(receipt) = receipt else { return };
        self.receipt.intruders = receipt
            .intruders
            .iter()
            .map(|intruder| IntruderReport {
                pid: intruder.pid,
                outside_namespace: intruder.pid.is_none(),
                user: intruder.user.clone(),
                gpu_uuid: uuid_of(intruder.gpu),
                gpu: intruder.gpu,
                memory_bytes: intruder.memory_bytes,
                first_seen_seconds: (intruder.first_seen.as_secs_f64() * 10.0).round() / 10.0,
            })
            .collect();
        self.receipt.intruders_not_listed = receipt.intruders_not_kept;
    }

    /// `--report`: the summary on stderr, in the log format in force.
    pub(crate) fn log(&self) {
        use crate::process::stdio::{terminal_columns, wrap};
        // On a terminal each line wraps under its value (16 columns in), never at its edge.
        let summary = match terminal_columns(std::os::fd::AsFd::as_fd(&std::io::stderr())) {
            Some(columns) => {
                let lines: String =
                    self.summary().lines().map(|line| wrap(line, columns, Some(16))).collect();
                lines.trim_end().to_owned()
            }
            None => self.summary(),
        };
        crate::process::logging::print_outside(
            "info",
            &summary,
            Some(("report", serde_json::to_value(self).expect("plain data"))),
        );
    }

    pub(crate) fn summary(&self) -> String {
        let mut text = String::from("report:");
        let gpus: Vec<String> =
            self.taken.selected.iter().map(crate::select::selection::Device::described).collect();
        let listed = if gpus.is_empty() { "none".to_owned() } else { gpus.join(", ") };
        let Taken { requested, count, .. } = &self.taken;
        match *requested == count.to_string() {
            true => write!(text, "\n  GPUs:         {listed}"),
            false => {
                write!(text, "\n  GPUs:         {count} of {requested} requested: {listed}")
            }
        }
        .expect("writing to a String");
        if let Some(container) = &self.placement.container {
            let id = container.id.as_deref().map_or("no ID", |id| &id[..12.min(id.len())]);
            let _ = write!(text, "\n  container:    {} ({}, {})", container.image, container.client, id);
        }
        if let Some(rank) = &self.placement.rank {
            let _ = write!(
                text,
                "\n  rank:         {} of {} ({}), group {} on node {}, GPUs {}",
                rank.local_rank,
                rank.local_size,
                rank.launcher,
                rank.group,
                rank.node,
                crate::probe::gpu::labels(&rank.group_gpus)
            );
        }
        let verdict =
            self.verification.verdict.map(|v| v.to_string()).unwrap_or_else(|| "not checked".to_owned());
        let _ = write!(text, "\n  verification: {verdict}: {}", self.verification.detail);
        let peaks: Vec<String> = self
            .peaks
            .peak_by_index
            .iter()
            .map(|(index, bytes)| format!("{} on {}", human(*bytes), label(*index)))
            .collect();
        if !peaks.is_empty() {
            let _ = write!(text, "\n  peak memory:  {}", peaks.join(", "));
        }
        for (index, figures) in &self.receipt.lines {
            if let Some(line) = figures.line() {
                let _ = write!(text, "\n  {:<14}{line}", format!("{}:", label(*index)));
            }
        }
        for intruder in &self.receipt.intruders {
            let memory = intruder.memory_bytes.map(|bytes| format!(", {}", human(bytes))).unwrap_or_default();
            let who = match intruder.pid {
                Some(pid) => format!("PID {pid} of user {}", intruder.user.as_deref().unwrap_or("unknown")),
                None => "processes outside this PID namespace".to_owned(),
            };
            let _ = write!(
                text,
                "\n  intruder:     {who} on {}{memory}, {:.1} s into the run",
                label(intruder.gpu),
                intruder.first_seen_seconds
            );
        }
        if self.receipt.intruders_not_listed > 0 {
            let _ = write!(text, "\n  intruders:    {} more, not listed", self.receipt.intruders_not_listed);
        }
        let _ = write!(text, "\n  wall time:    {:.2} s", self.outcome.wall_seconds);
        let exit = match (&self.outcome.exit.code, &self.outcome.exit.signal_name) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(name)) => format!("killed by {name}"),
            (None, None) => "unknown".to_owned(),
        };
        let _ = write!(text, "\n  command:      {exit}");
        if let Some(cpus) = &self.placement.cpus {
            let _ = write!(text, "\n  cpus:         {cpus}");
        }
        if let Some(why) = &self.placement.min_free {
            let _ = write!(text, "\n  min-free:     {why}");
        }
        for found in &self.diagnosis {
            let _ = write!(text, "\n  diagnosis:    {}: {}", found.kind, found.detail);
        }
        text
    }

    pub(crate) fn json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("plain data serialises");
        text.push('\n');
        text
    }

    /// Writes the JSON report into the file opened at start (so an unwritable path failed then).
    pub(crate) fn write_json(&self, mut file: File) {
        if let Err(error) = file.write_all(self.json().as_bytes()) {
            tracing::error!("cannot write the JSON report: {error}");
        }
    }
}
