//! What gpurun shows of the machine: `--list` and `--dry-run` as a table for people or one JSON
//! object for programs (schema in `--help` and the man page), and the refusal table of exit 75.
//! Unknown values are shown as `-` and serialised as `null`.

use crate::options::count::Count;
use crate::options::shell;
use crate::runtime::Runtime;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::options::size::human;
use crate::output::mps_daemon;
use crate::plan::env::Plan;
use crate::probe::gpu::Answered;
use crate::probe::gpu::{Gpu, GpuProcess, Machine};
use crate::process::procfs;
use crate::process::stdio::{clip, escaped};
use crate::reserve::holds::Queued;
use crate::reserve::lease::{self, Lease};
use crate::select::policy::Assessment;
use crate::verify::leftover;

/// Whether a GPU qualifies, and if not, every reason why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Eligibility {
    pub(crate) eligible: bool,
    pub(crate) reasons: Vec<String>,
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
    /// The GPU's NVML index, and the slot of a MIG device.
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_index: Option<u32>,
    uuid: &'a Option<String>,
}

#[derive(Serialize)]
struct GpuEntry {
    /// The probe's GPU, each process with the reservation it belongs to.
    #[serde(flatten)]
    gpu: serde_json::Map<String, serde_json::Value>,
    #[serde(flatten)]
    eligibility: Eligibility,
}

/// The live reservation (its gpurun's PID) a process on `gpu` belongs to: the gpurun itself or
/// one of its descendants. `None`: started by hand or by another tool ("not via gpurun").
pub(crate) fn reservation_of(gpu: &Gpu, pid: u32, live: &[Lease]) -> Option<u32> {
    live.iter()
        .filter(|lease| gpu.is_leased_as(&lease.uuid))
        .find(|lease| lease.pid == pid || procfs::descends_from(pid, lease.pid))
        .map(|lease| lease.pid)
}

/// The PIDs your recent runs left holding memory (`verify::leftover`), looked up only when one
/// of `gpu`'s processes is not there (the rest cannot be leftovers).
fn recorded_leftovers(gpu: &Gpu) -> std::collections::BTreeSet<u32> {
    match gpu.processes.iter().flatten().any(|process| !procfs::exists(process.pid)) {
        true => leftover::recorded_pids(),
        false => std::collections::BTreeSet::new(),
    }
}

fn gpu_fields(gpu: &Gpu, live: &[Lease]) -> serde_json::Map<String, serde_json::Value> {
    let serde_json::Value::Object(mut fields) = serde_json::to_value(gpu).expect("plain data") else {
        unreachable!("a struct serialises to an object")
    };
    // In a PID namespace of its own: memory no listed process accounts for (absent on the host).
    if let Some(bytes) = crate::probe::pid_regime::held_outside_of(gpu) {
        fields.insert("held_outside_namespace_bytes".into(), bytes.into());
    }
    let recorded = &recorded_leftovers(gpu);
    if let Some(serde_json::Value::Array(processes)) = fields.get_mut("processes") {
        for process in processes.iter_mut() {
            let pid = process["pid"].as_u64().unwrap_or(0) as u32;
            process["reservation"] = serde_json::json!(reservation_of(gpu, pid, live));
            if let Some(word) = leftover::leftover(pid, recorded) {
                process["leftover"] = serde_json::json!(word);
            }
        }
    }
    fields
}

/// A GPU's entry: its fields, its eligibility and, in MIG mode, its MIG devices with theirs.
/// `passed_over`: a dry run's reasons (each entry then has `passed_over`, null where it was not
/// passed over); `None` for a listing.
fn gpu_entry(
    gpu: &Gpu,
    machine: &Machine,
    live: &[Lease],
    assessments: &[Assessment],
    passed_over: Option<&[(u32, String)]>,
) -> GpuEntry {
    let mut fields = gpu_fields(gpu, live);
    let children: Vec<serde_json::Value> = machine
        .migs
        .iter()
        .filter(|mig| mig.mig.as_ref().is_some_and(|info| info.parent == gpu.index))
        .map(|mig| {
            let mut child = gpu_fields(mig, live);
            for unused in [
                "index",
                "pci_bus_id",
                "utilization",
                "temperature_c",
                "power_watts",
                "mig_enabled",
                "mig_pending",
            ] {
                child.remove(unused);
            }
            if let Some(info) = &mig.mig {
                child.insert("mig_index".into(), info.slot.into());
                child.insert("profile".into(), serde_json::json!(info.profile));
                child.insert("gpu_instance_id".into(), serde_json::json!(info.gpu_instance_id));
                child.insert("compute_instance_id".into(), serde_json::json!(info.compute_instance_id));
            }
            let eligibility = Eligibility::of(assessment_of(assessments, mig.index));
            child.insert("eligible".into(), eligibility.eligible.into());
            child.insert("reasons".into(), serde_json::json!(eligibility.reasons));
            if let Some(passed_over) = passed_over {
                child.insert("passed_over".into(), serde_json::json!(passed_over_of(passed_over, mig.index)));
            }
            serde_json::Value::Object(child)
        })
        .collect();
    fields.insert("mig_devices".into(), serde_json::Value::Array(children));
    if let Some(passed_over) = passed_over {
        fields.insert("passed_over".into(), serde_json::json!(passed_over_of(passed_over, gpu.index)));
    }
    GpuEntry { gpu: fields, eligibility: Eligibility::of(assessment_of(assessments, gpu.index)) }
}

/// What `--list` shows beside the machine: the wait queue and the house rules.
#[derive(Default)]
pub(crate) struct Shared<'a> {
    pub(crate) queue: &'a [Queued],
    pub(crate) rules: Vec<String>,
    /// `-v`: every waiter, and the oldest wait (else the first `SHOWN_WAITERS`).
    pub(crate) verbose: bool,
    /// The width of the terminal the table goes to; `None` (a pipe, a file): nothing is cut.
    pub(crate) columns: Option<usize>,
}

/// The table's columns before PROCESSES, and the narrowest terminal they are shown on with
/// room for the processes; a narrower one gets the compact layout.
const WIDE_COLUMNS: usize = 84;
/// Where the compact layout's PROCESSES column starts.
const COMPACT_COLUMNS: usize = 62;
const WIDE_FROM: usize = WIDE_COLUMNS + 20;

/// Waiters listed without `-v`: the head of a queue of hundreds is what a person reads.
const SHOWN_WAITERS: usize = 10;

#[derive(Serialize)]
struct Listing<'a> {
    /// The vendor, the driver and the library that answered.
    #[serde(flatten)]
    answered: Answered,
    gpus: Vec<GpuEntry>,
    /// Live gpurun reservations.
    reservations: Vec<ReservationEntry>,
    /// Launches waiting with --wait, in queue order, and why each cannot start now.
    waiters: Vec<WaiterEntry<'a>>,
    /// The administrator's [limits] in force.
    house_rules: &'a [String],
    /// GPUs the driver excluded: `[{pci_bus_id, uuid}]`.
    excluded: &'a [crate::probe::health::Excluded],
    /// `{on, ready}` where the driver has confidential computing, else null.
    confidential_computing: Option<crate::probe::gpu::ConfCompute>,
    /// The link between every pair of GPUs, `"0-1": "nvlink"` (null when not probed).
    topology: Option<serde_json::Map<String, serde_json::Value>>,
    /// The MPS control daemon a client of the caller's would reach (`{pid, pipe_directory,
    /// server_running}`), where one of the caller's or root's serves the pipe directory; null
    /// where none does (NVIDIA only).
    mps_control_daemon: Option<mps_daemon::Entry>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    plan: Option<PlanEntry<'a>>,
}

#[derive(Serialize)]
struct ReservationEntry {
    index: Option<u32>,
    /// `command` as the viewer may see it (`lease::shown_command`).
    #[serde(flatten)]
    lease: Lease,
    age_seconds: u64,
    /// PIDs of the processes NVML shows on its GPU that belong to it.
    processes: Vec<u32>,
}

fn reservation_entries(machine: &Machine, live: &[Lease]) -> Vec<ReservationEntry> {
    let viewer = crate::reserve::lockdir::current_uid();
    live.iter()
        .map(|lease| {
            let gpu = machine.devices().find(|gpu| gpu.is_leased_as(&lease.uuid));
            let processes = gpu
                .map(|gpu| {
                    gpu.processes
                        .iter()
                        .flatten()
                        .filter(|p| reservation_of(gpu, p.pid, std::slice::from_ref(lease)).is_some())
                        .map(|p| p.pid)
                        .collect()
                })
                .unwrap_or_default();
            ReservationEntry {
                index: gpu.map(|gpu| gpu.index),
                lease: Lease { command: lease::shown_command(lease, viewer), ..lease.clone() },
                age_seconds: lease::age_seconds(lease),
                processes,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct WaiterEntry<'a> {
    position: usize,
    #[serde(flatten)]
    queued: &'a Queued,
    waited_seconds: u64,
}

fn waiter_entries<'a>(queue: &'a [Queued]) -> Vec<WaiterEntry<'a>> {
    let now_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    queue
        .iter()
        .enumerate()
        .map(|(at, queued)| WaiterEntry {
            position: at + 1,
            queued,
            waited_seconds: now_ns.saturating_sub(queued.waiter.since_ns) / 1_000_000_000,
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
    /// `--cpu-bind numa`: the command's CPUs (null: gpurun's own).
    cpus: Option<String>,
    /// The links between the chosen GPUs (`0-1 nvlink`), when more than one was chosen.
    links: Option<Vec<String>>,
    /// Where the chosen GPUs are of more than one model, what they are (else null).
    mixed_models: Option<String>,
    selected: Option<Vec<Selected<'a>>>,
    env: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What a dry run shows besides the machine.
pub(crate) struct DryRun<'a> {
    pub(crate) requested: Count,
    /// The command it was asked about (may be empty).
    pub(crate) command: &'a [OsString],
    /// `None`: nothing could be selected (exit 75).
    pub(crate) plan: Option<&'a Plan>,
    /// What `--min-free auto` decided, and why.
    pub(crate) sizing: Option<&'a str>,
    /// Each GPU (or MIG device) that qualified and was not chosen, and why.
    pub(crate) passed_over: &'a [(u32, String)],
}

/// Why a GPU that qualified was not chosen, if it was passed over.
fn passed_over_of(passed_over: &[(u32, String)], index: u32) -> Option<&str> {
    passed_over.iter().find(|(at, _)| *at == index).map(|(_, why)| why.as_str())
}

/// The `--list --json` object; a dry run adds `requested`, `count`, `command`, `selected` and
/// `env` (`count`, `selected` and `env` are null when nothing could be selected).
pub(crate) fn json(
    machine: &Machine,
    library: &Path,
    assessments: &[Assessment],
    live: &[Lease],
    shared: &Shared,
    dry_run: Option<&DryRun>,
) -> String {
    let listing = Listing {
        answered: Answered::of(machine, library),
        gpus: machine
            .gpus
            .iter()
            .map(|gpu| gpu_entry(gpu, machine, live, assessments, dry_run.map(|d| d.passed_over)))
            .collect(),
        reservations: reservation_entries(machine, live),
        waiters: waiter_entries(shared.queue),
        house_rules: &shared.rules,
        excluded: &machine.excluded,
        confidential_computing: machine.confidential_computing,
        topology: machine.topology.as_ref().map(|topology| {
            topology
                .pairs()
                .map(|(a, b, link)| (format!("{a}-{b}"), serde_json::Value::from(link.name())))
                .collect()
        }),
        mps_control_daemon: mps_daemon::entry(machine),
        plan: dry_run.map(|dry_run| PlanEntry {
            requested: dry_run.requested.to_string(),
            count: dry_run.plan.map(|plan| plan.selection.devices.len()),
            command: dry_run.command.iter().map(|word| word.to_string_lossy().into_owned()).collect(),
            min_free: dry_run.sizing,
            cpus: dry_run.plan.and_then(|plan| plan.cpus.as_deref()).map(crate::options::cpus::list),
            mixed_models: dry_run.plan.and_then(|plan| plan.mixed_models.clone()),
            links: dry_run.plan.and_then(|plan| {
                let chosen: Vec<u32> = plan.selection.devices.iter().map(|d| d.index).collect();
                machine
                    .topology
                    .as_ref()
                    .filter(|_| chosen.len() > 1)
                    .map(|topology| links_between(topology, &chosen))
            }),
            selected: dry_run.plan.map(|plan| {
                plan.selection
                    .devices
                    .iter()
                    .map(|device| Selected {
                        index: device.gpu_index,
                        mig_index: device.mig_index,
                        uuid: &device.uuid,
                    })
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

/// `0-1 nvlink` for every pair of `gpus`.
fn links_between(topology: &crate::probe::gpu::Topology, gpus: &[u32]) -> Vec<String> {
    let mut links = Vec::new();
    for (at, &a) in gpus.iter().enumerate() {
        for &b in &gpus[at + 1..] {
            links.push(format!("{}-{} {}", a.min(b), a.max(b), topology.link(a, b).name()));
        }
    }
    links
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".to_owned())
}

/// `--list --topology`: the link between every pair, as `nvidia-smi topo -m` shows it.
pub(crate) fn link_matrix(machine: &Machine) -> String {
    let Some(topology) = &machine.topology else { return String::new() };
    let gpus: Vec<u32> = machine.gpus.iter().filter(|gpu| gpu.error.is_none()).map(|gpu| gpu.index).collect();
    let mut out = String::from("\nlinks      ");
    for gpu in &gpus {
        let _ = write!(out, "{:>6}", format!("GPU{gpu}"));
    }
    let _ = writeln!(out, "  CPUs       NUMA");
    for &a in &gpus {
        let _ = write!(out, "{:<11}", format!("GPU{a}"));
        for &b in &gpus {
            let _ = write!(out, "{:>6}", if a == b { "X" } else { topology.link(a, b).short() });
        }
        let gpu = machine.device(a);
        let cpus = gpu.and_then(|g| g.cpus.as_deref()).map(crate::options::cpus::list);
        let numa = gpu.and_then(|g| g.numa_node).map(|n| n.to_string());
        let _ = writeln!(out, "  {:<10} {}", or_dash(cpus), or_dash(numa));
    }
    let _ = writeln!(out, "\n{}", Runtime::of(machine.vendor).link_legend());
    out
}

/// The PROCESSES column of a device: a line per process (`PID user command (memory)` and whose
/// reservation it is), or all on one line as `user PID[*] memory` in the compact layout.
fn process_cells(gpu: &Gpu, live: &[Lease], compact: bool) -> Vec<String> {
    // An MPS GPU's clients are only in its MPS list: listed after its compute processes
    // (where its server is), each marked.
    let clients: Vec<GpuProcess> = gpu
        .mps
        .iter()
        .flat_map(|mps| &mps.clients)
        .map(|client| GpuProcess {
            pid: client.pid,
            used_bytes: client.used_bytes,
            user: client.user.clone(),
            command: procfs::command_line(client.pid),
        })
        .collect();
    let is_client = |pid: u32| clients.iter().any(|client| client.pid == pid);
    let recorded = recorded_leftovers(gpu);
    let recorded = &recorded;
    let all: Vec<&GpuProcess> = gpu.processes.iter().flatten().chain(&clients).collect();
    match &gpu.processes {
        None if clients.is_empty() => vec!["?".to_owned()],
        _ if all.is_empty() => vec!["-".to_owned()],
        // The owner first (who is on the card), then the PID, the memory without its space,
        // and `*` for a process not started through gpurun (the legend says so); one a line,
        // so that a narrow terminal cuts none away.
        _ if compact => all
            .iter()
            .map(|p| {
                format!(
                    "{} {}{} {}{}{}",
                    escaped(p.user.as_deref().unwrap_or("?")),
                    p.pid,
                    if reservation_of(gpu, p.pid, live).is_none() { "*" } else { "" },
                    p.used_bytes.map(short_size).unwrap_or_else(|| "?".to_owned()),
                    if is_client(p.pid) { " MPS" } else { "" },
                    leftover::leftover(p.pid, recorded).map(|word| format!(" {word}")).unwrap_or_default()
                )
            })
            .collect(),
        _ => {
            all.iter()
                .map(|p| {
                    let via = match reservation_of(gpu, p.pid, live) {
                        Some(pid) => format!("gpurun PID {pid}"),
                        None => "not via gpurun".to_owned(),
                    };
                    let mark = match (is_client(p.pid), crate::probe::mps::is_server(p.command.as_deref())) {
                        (true, _) => format!("[MPS client, {via}]"),
                        (false, true) => "[MPS server]".to_owned(),
                        (false, false) => leftover::leftover(p.pid, recorded)
                            .map_or_else(|| format!("[{via}]"), leftover::mark),
                    };
                    format!(
                        "{} {} {} ({}) {mark}",
                        p.pid,
                        escaped(p.user.as_deref().unwrap_or("?")),
                        clip(p.command.as_deref().unwrap_or("?"), 40),
                        p.used_bytes.map(human).unwrap_or_else(|| "?".to_owned()),
                    )
                })
                .collect()
        }
    }
}

/// `29.4G`, `512M`: a size in the compact layout's few columns.
fn short_size(bytes: u64) -> String {
    let text = human(bytes);
    match text.split_once(' ') {
        Some((number, unit)) => format!("{number}{}", unit.trim_end_matches("iB")),
        None => text,
    }
}

/// One row of the table (and its continuation lines) for a GPU or a MIG device. `compact`:
/// the layout of a narrow terminal (no temperature or power, a shorter name, every process on
/// the row as `user PID memory`, `*` where not via gpurun).
fn device_rows(
    out: &mut String,
    gpu: &Gpu,
    (first, name): (&str, &str),
    live: &[Lease],
    assessments: &[Assessment],
    compact: bool,
) {
    // An integrated GPU's memory is the system's: marked, and said under the table.
    let shared = if gpu.unified_memory { "^" } else { "" };
    let memory = gpu.memory.map(|m| format!("{}{shared} / {}", human(m.used_bytes), human(m.total_bytes)));
    let free = gpu.memory.map(|m| format!("{}{shared}", human(m.free_bytes)));
    let util = gpu.utilization.map(|u| format!("{}%", u.gpu_percent));
    let temperature = gpu.temperature_c.map(|t| format!("{t}C"));
    let power = gpu.power_watts.map(|w| format!("{w:.0}W"));
    let processes = process_cells(gpu, live, compact);
    if compact {
        // The model without the vendor's words, so that its memory size fits.
        let model = name.trim_start_matches("NVIDIA ").trim_start_matches("Tesla ");
        let _ = writeln!(
            out,
            "{:>3}  {:<18}  {:>19}  {:>8}  {:>4}  {}",
            first,
            clip(model, 18),
            or_dash(memory),
            or_dash(free),
            or_dash(util),
            processes[0],
        );
        for more in &processes[1..] {
            let _ = writeln!(out, "{:>width$}{more}", "", width = COMPACT_COLUMNS);
        }
    } else {
        let _ = writeln!(
            out,
            "{:>3}  {:<24}  {:>21}  {:>9}  {:>4}  {:>4}  {:>5}  {}",
            first,
            clip(name, 24),
            or_dash(memory),
            or_dash(free),
            or_dash(util),
            or_dash(temperature),
            or_dash(power),
            processes[0],
        );
        for more in &processes[1..] {
            let _ = writeln!(out, "{:>width$}{more}", "", width = WIDE_COLUMNS);
        }
    }
    for lease in live.iter().filter(|lease| gpu.is_leased_as(&lease.uuid)) {
        let _ = writeln!(
            out,
            "{:>5}reserved by {} PID {} for {} s ({}{}): {}",
            "",
            escaped(&lease.user),
            lease.pid,
            lease::age_seconds(lease),
            human(lease.reserved_bytes),
            if lease.exclusive { ", exclusive" } else { "" },
            clip(&lease::shown_command(lease, crate::reserve::lockdir::current_uid()), 40)
        );
    }
    if let Some(bytes) = crate::probe::pid_regime::held_outside_of(gpu) {
        let _ = writeln!(out, "{:>5}{} held by processes outside this PID namespace", "", human(bytes));
    }
    let eligibility = Eligibility::of(assessment_of(assessments, gpu.index));
    if !eligibility.eligible {
        let _ = writeln!(out, "{:>5}not eligible: {}", "", eligibility.reasons.join("; "));
    }
    // A sick GPU's health, where the reasons above do not already say it (a MIG device's
    // health is its GPU's, shown there).
    if !gpu.health.is_ok()
        && gpu.mig.is_none()
        && !eligibility.reasons.iter().any(|r| r.starts_with("unhealthy"))
    {
        let _ = writeln!(out, "{:>5}health: {}", "", gpu.health.describe());
    }
}

/// The wait queue under the table: who waits, in turn, and for what.
fn queue_rows(out: &mut String, shared: &Shared) {
    if shared.queue.is_empty() {
        return;
    }
    let entries = waiter_entries(shared.queue);
    let _ = writeln!(
        out,
        "\nwaiting (first come, first served): {} launch{}",
        entries.len(),
        if entries.len() == 1 { "" } else { "es" }
    );
    if shared.verbose {
        let oldest = entries.iter().map(|entry| entry.waited_seconds).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "  the oldest has waited {}",
            crate::options::duration::shown(std::time::Duration::from_secs(oldest))
        );
    }
    let shown = if shared.verbose { entries.len() } else { SHOWN_WAITERS };
    let hidden = entries.len().saturating_sub(shown);
    for entry in entries.into_iter().take(shown) {
        let waiter = &entry.queued.waiter;
        let _ = writeln!(
            out,
            "  {}. {} PID {}, waiting {}: {}: {}",
            entry.position,
            escaped(&waiter.user),
            waiter.pid,
            crate::options::duration::shown(std::time::Duration::from_secs(entry.waited_seconds)),
            if waiter.request.is_empty() { "(no options)".into() } else { escaped(&waiter.request) },
            escaped(&entry.queued.reason)
        );
    }
    if hidden > 0 {
        let _ = writeln!(out, "  ... and {hidden} more (-v lists them all)");
    }
}

/// `CPX partition 3 of the card at 0000:05:00.0 (memory NPS1)`: an AMD GPU that is one of
/// several partitions of its card (a mode other than SPX) says which.
fn partition_line(gpu: &Gpu) -> Option<String> {
    let partition = gpu.partition.as_ref()?;
    let mode = partition.compute.as_deref().filter(|mode| *mode != "SPX")?;
    let id = partition.id.map_or("?".to_owned(), |id| id.to_string());
    let memory = partition.memory.as_deref().map(|m| format!(" (memory {m})")).unwrap_or_default();
    Some(format!("{mode} partition {id} of the card at {}{memory}", gpu.pci_bus_id.as_deref().unwrap_or("-")))
}

pub(crate) fn table(
    machine: &Machine,
    assessments: &[Assessment],
    live: &[Lease],
    shared: &Shared,
) -> String {
    let mut out = String::new();
    // The library's path is not part of the table.
    let _ = writeln!(out, "{}", machine.heading());
    let compact = shared.columns.is_some_and(|columns| columns < WIDE_FROM);
    if compact {
        let _ = writeln!(
            out,
            "{:>3}  {:<18}  {:>19}  {:>8}  {:>4}  PROCESSES",
            "GPU", "NAME", "USED / TOTAL", "FREE", "UTIL"
        );
    } else {
        let _ = writeln!(
            out,
            "{:>3}  {:<24}  {:>21}  {:>9}  {:>4}  {:>4}  {:>5}  PROCESSES",
            "GPU", "NAME", "MEMORY USED / TOTAL", "FREE", "UTIL", "TEMP", "POWER"
        );
    }
    for gpu in &machine.gpus {
        let name = gpu.name.as_deref().unwrap_or("-");
        device_rows(&mut out, gpu, (&gpu.index.to_string(), name), live, assessments, compact);
        if let Some(partition) = partition_line(gpu) {
            let _ = writeln!(out, "     {partition}");
        }
        for mig in
            machine.migs.iter().filter(|mig| mig.mig.as_ref().is_some_and(|info| info.parent == gpu.index))
        {
            let Some(info) = &mig.mig else { continue };
            let name = format!(
                "MIG {} (GI {})",
                info.profile.as_deref().unwrap_or("?"),
                info.gpu_instance_id.map_or("?".to_owned(), |id| id.to_string())
            );
            let first = format!("{}:{}", info.parent, info.slot);
            device_rows(&mut out, mig, (&first, &name), live, assessments, compact);
        }
    }
    queue_rows(&mut out, shared);
    for excluded in &machine.excluded {
        let _ = writeln!(
            out,
            "excluded by the driver: {} ({}): not usable until the driver takes it back (see gpurun --doctor)",
            excluded.pci_bus_id.as_deref().unwrap_or("-"),
            excluded.uuid.as_deref().unwrap_or("-")
        );
    }
    if !shared.rules.is_empty() {
        let _ = writeln!(out, "\nhouse rules: {}", shared.rules.join("; "));
    }
    if let Some(line) = mps_daemon::line(machine) {
        let _ = writeln!(out, "\n{line}");
    }
    if let Some(line) = machine.also_here() {
        let _ = writeln!(out, "\n{line}");
    }
    let listed = || machine.devices().flat_map(|gpu| gpu.processes.iter().flatten());
    if compact && listed().next().is_some() {
        let _ = writeln!(out, "\nPROCESSES: user PID memory; PID*: not via gpurun (no reservation)");
    }
    if machine.devices().any(|gpu| gpu.unified_memory) {
        let _ = writeln!(
            out,
            "\n^: unified memory: the GPU has none of its own (NVML: Not Supported), so these are the system's (/proc/meminfo)"
        );
    }
    if listed().any(|p| p.user.is_none() || p.command.is_none()) {
        let _ = writeln!(out, "\n?: unknown here (another PID namespace, an ended process, or hidepid)");
    }
    match shared.columns {
        // On a terminal every line fits it: a wrapped row is unreadable.
        Some(columns) => out.lines().map(|line| crate::process::stdio::fit(line, columns) + "\n").collect(),
        None => out,
    }
}

/// `--dry-run` for people: the table, the choice, the environment.
pub(crate) fn dry_run(
    machine: &Machine,
    assessments: &[Assessment],
    live: &[Lease],
    plan: &Plan,
    asked: &DryRun,
    columns: Option<usize>,
) -> String {
    let table = table(machine, assessments, live, &Shared { columns, ..Shared::default() });
    let details = dry_run_details(machine, plan, asked);
    match columns {
        // On a terminal the details wrap (they are what the dry run is for: nothing is cut).
        Some(columns) => {
            format!(
                "{table}{}",
                details
                    .lines()
                    .map(|line| crate::process::stdio::wrap(line, columns, None))
                    .collect::<String>()
            )
        }
        None => format!("{table}{details}"),
    }
}

/// The dry run below its table: the choice, what was passed over, the environment and the
/// command.
fn dry_run_details(machine: &Machine, plan: &Plan, asked: &DryRun) -> String {
    let mut out = String::new();
    let chosen: Vec<String> = plan
        .selection
        .devices
        .iter()
        .map(|device| {
            format!(
                "{} ({}, {})",
                crate::probe::gpu::label(device.index),
                escaped(device.name.as_deref().unwrap_or("-")),
                escaped(device.uuid.as_deref().unwrap_or("-"))
            )
        })
        .collect();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "selected: {}",
        if chosen.is_empty() { "no GPU".to_owned() } else { chosen.join(", ") }
    );
    if let Some(mixed) = &plan.mixed_models {
        let _ = writeln!(out, "{mixed}");
    }
    if !asked.passed_over.is_empty() {
        let _ = writeln!(out, "passed over:");
        for (index, why) in asked.passed_over {
            let _ = writeln!(out, "  {}: {why}", crate::probe::gpu::label(*index));
        }
    }
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
    if let Some(cpus) = &plan.cpus {
        let _ = writeln!(out, "cpus: {} (--cpu-bind numa)", crate::options::cpus::list(cpus));
    }
    if let (Some(topology), [_, _, ..]) = (&machine.topology, &plan.selection.devices[..]) {
        let chosen: Vec<u32> = plan.selection.devices.iter().map(|d| d.index).collect();
        let _ = writeln!(out, "links: {}", links_between(topology, &chosen).join(", "));
    }
    let _ = writeln!(out, "(dry run: nothing was started and no reservation is held)");
    out
}
