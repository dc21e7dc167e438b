//! Pure selection: which GPUs may be chosen, why the others may not, and which are chosen.
//! No I/O: the probe, the inherited visibility and the request come in, a `Decision` goes out.
//!
//! Rules (DESIGN 4). Every reason a GPU is turned away is one of three kinds:
//! - permanent: no state of the machine changes it for this request (outside the inherited
//!   visibility, not in `--devices`, in `--exclude`, another `--model`, a total below
//!   `--min-total`, or below `--min-free`). When fewer GPUs than requested could ever
//!   qualify, the request is refused at once (exit 125, `--wait` or not) with one line saying
//!   why, instead of "try later".
//! - hard: not relaxed by `--fallback best`, but may change (queries failing right now, MIG
//!   mode, the prohibited compute mode, another launch's exclusive reservation, a GPU held for
//!   an earlier waiter).
//! - soft: the load (`--min-free`, `--max-util`, `--exclusive`); only these are relaxed by
//!   `--fallback best`.
//! - A value NVML could not give fails every filter that needs it.
//! - Ranking is deterministic for a given probe (ties break by index), except `random`.

use std::cmp::Ordering;

use crate::options::count::Count;
use crate::options::devices::{normalize_pci_bus_id, DeviceRef};
use crate::options::model::ModelPattern;
use crate::options::size::{human, Threshold};
use crate::options::{Fallback, MigUse, Policy, TopologyUse};
use crate::probe::gpu::{ComputeMode, Gpu, Link, Topology};
use crate::select::visibility::Visibility;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub count: Count,
    pub min_free: Option<Threshold>,
    pub min_total: Option<u64>,
    pub max_util: Option<u32>,
    pub exclusive: bool,
    pub devices: Option<Vec<DeviceRef>>,
    pub exclude: Vec<DeviceRef>,
    pub model: Option<ModelPattern>,
    pub policy: Policy,
    pub fallback: Option<Fallback>,
    /// Seed for `--policy random`.
    pub seed: u64,
    pub mig: MigUse,
    /// `--visible-as index` was asked for: CUDA takes a MIG device by its UUID only.
    pub index_only: bool,
    pub same_model: bool,
    pub topology: TopologyUse,
    /// The house rule default-min-free: below it a GPU is never taken, `--fallback best` or not.
    pub min_free_floor: Option<Threshold>,
    /// `min_free` was sized by `--min-free auto` from recorded peaks: it is lowered to what the
    /// largest card of the request could ever have free rather than refusing for good.
    pub min_free_auto: bool,
}

impl Request {
    /// Whether it may take more than one device: then MIG devices are out (one process can
    /// use one MIG device).
    pub fn wants_several(&self) -> bool {
        self.count.max.is_none_or(|most| most > 1)
    }
}

impl Default for Request {
    fn default() -> Request {
        Request {
            count: Count::default(),
            min_free: None,
            min_total: None,
            max_util: None,
            exclusive: false,
            devices: None,
            exclude: Vec::new(),
            model: None,
            policy: Policy::MostFree,
            fallback: None,
            seed: 0,
            mig: MigUse::Auto,
            index_only: false,
            same_model: false,
            topology: TopologyUse::Prefer,
            min_free_floor: None,
            min_free_auto: false,
        }
    }
}

/// Another gpurun's live reservation of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub index: u32,
    pub pid: u32,
    pub user: String,
    /// Reserved memory not yet visible in NVML (its processes have not shown up yet).
    pub pending_bytes: u64,
    pub exclusive: bool,
    /// Not a lease yet: what an earlier waiter that can be served now is about to take.
    pub queued: bool,
}

impl Reservation {
    fn holder(&self) -> String {
        if self.queued {
            format!("held for gpurun PID {} ({}), which came first", self.pid, self.user)
        } else {
            format!("gpurun PID {} ({})", self.pid, self.user)
        }
    }
}

/// A GPU kept for a launch that has waited longer (first come, first served).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    pub index: u32,
    pub pid: u32,
    pub user: String,
}

/// Why one GPU may or may not be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub index: u32,
    /// Reasons no state of the machine changes.
    pub permanent: Vec<String>,
    /// Reasons no fallback relaxes, that may change.
    pub hard: Vec<String>,
    /// Reasons that depend on the load.
    pub soft: Vec<String>,
}

impl Assessment {
    pub fn eligible(&self) -> bool {
        self.permanent.is_empty() && self.hard.is_empty() && self.soft.is_empty()
    }

    /// Whether some state of the machine would let this GPU qualify.
    pub fn possible(&self) -> bool {
        self.permanent.is_empty()
    }

    pub fn reasons(&self) -> Vec<String> {
        self.permanent.iter().chain(&self.hard).chain(&self.soft).cloned().collect()
    }
}

/// The result of selection.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub assessments: Vec<Assessment>,
    pub outcome: Outcome,
    /// Why no state of the machine can meet the request, also when `--fallback cpu` answers it.
    pub never: Option<String>,
    /// Enough GPUs qualify one by one, but no set of them is of one model or linked as asked.
    pub set_reason: Option<String>,
    /// `--min-free auto` was lowered to what a card can have free: the bytes, and why.
    pub min_free_note: Option<(u64, String)>,
}

impl Decision {
    /// The `--min-free` this decision applied: `asked`, or what `--min-free auto` was lowered to.
    /// Leases and tickets record this one, so that other launches replay the same request.
    pub fn min_free(&self, asked: Option<Threshold>) -> Option<Threshold> {
        self.min_free_note.as_ref().map(|(bytes, _)| Threshold::Bytes(*bytes)).or(asked)
    }

    /// The GPUs that could ever qualify for this request (a waiter holds back only these).
    pub fn possible(&self) -> Vec<u32> {
        self.assessments.iter().filter(|a| a.possible()).map(|a| a.index).collect()
    }

    /// Why a waiter cannot start now, in the words of the exit-75 table: `needs 2 GPUs with
    /// 20 GiB free: GPU 0 reserved by gpurun PID 7 (bob), GPU 3 free 12 GiB < 20 GiB`.
    pub fn why_not(&self, request: &Request) -> String {
        let count = request.count;
        let mut needs = format!("needs {count} GPU{}", if count == Count::exactly(1) { "" } else { "s" });
        if let Some(threshold) = request.min_free {
            needs.push_str(&format!(" with {threshold} free"));
        }
        if request.exclusive {
            needs.push_str(", exclusive");
        }
        let blocked: Vec<String> = self
            .assessments
            .iter()
            .filter(|a| a.possible() && !a.eligible())
            .map(|a| format!("{} {}", crate::probe::gpu::label(a.index), a.reasons().join("; ")))
            .collect();
        match blocked.is_empty() {
            true => needs,
            false => format!("{needs}: {}", blocked.join(", ")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// These NVML indices, best first.
    Selected(Vec<u32>),
    /// Not enough qualified, but `--fallback best` took these anyway.
    FallbackBest(Vec<u32>),
    /// Not enough qualified; `--fallback cpu`: run with no GPU.
    FallbackCpu,
    /// Not enough GPUs now (exit 75).
    Refused { qualified: u32 },
    /// No state of the machine can meet the request (exit 125): why, in one line.
    Impossible(String),
}

/// A `--devices`/`--exclude` entry that names no GPU, or more than one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {entry}: {problem}")]
pub struct DeviceError {
    pub flag: &'static str,
    pub entry: String,
    pub problem: String,
}

fn resolve_refs(gpus: &[Gpu], refs: &[DeviceRef], flag: &'static str) -> Result<Vec<u32>, DeviceError> {
    refs.iter()
        .map(|reference| {
            let matching: Vec<u32> = gpus
                .iter()
                .filter(|gpu| match reference {
                    DeviceRef::Index(index) => gpu.index == *index,
                    DeviceRef::Uuid(prefix) => {
                        gpu.uuid.as_deref().is_some_and(|u| u.starts_with(prefix.as_str()))
                    }
                    DeviceRef::PciBusId(bus_id) => {
                        gpu.pci_bus_id.as_deref().and_then(normalize_pci_bus_id).as_deref() == Some(bus_id)
                    }
                })
                .map(|gpu| gpu.index)
                .collect();
            let error = |problem: String| DeviceError { flag, entry: reference.to_string(), problem };
            match matching[..] {
                [index] => Ok(index),
                [] => Err(error(format!(
                    "no such GPU; this machine has {} (see gpurun --list)",
                    match gpus.iter().filter(|gpu| gpu.mig.is_none()).count() {
                        0 => "no GPUs".to_owned(),
                        n => format!("GPUs 0-{}", n - 1),
                    }
                ))),
                _ => Err(error(format!(
                    "matches GPUs {}; give more of the UUID",
                    matching.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                ))),
            }
        })
        .collect()
}

/// The filters that depend only on the request and the machine, in the order the impossible
/// message names them.
struct Fixed<'a> {
    visibility: &'a Visibility,
    devices: &'a Option<Vec<u32>>,
    excluded: &'a [u32],
    request: &'a Request,
}

impl Fixed<'_> {
    /// Permanent reasons, each tagged with the filter it comes from.
    fn reasons(&self, gpu: &Gpu) -> Vec<(Filter, String)> {
        let mut reasons = Vec::new();
        let request = self.request;
        match (&gpu.mig, request.mig) {
            (None, _) if gpu.in_mig_mode() => {
                reasons.push((Filter::Mig, "in MIG mode: its MIG devices are the devices".to_owned()))
            }
            (None, MigUse::Only) => reasons.push((Filter::Mig, "not a MIG device (--mig only)".to_owned())),
            (Some(_), MigUse::Never) => reasons.push((Filter::Mig, "a MIG device (--mig never)".to_owned())),
            (Some(_), _) if request.index_only => reasons.push((
                Filter::Mig,
                "--visible-as index cannot name a MIG device: CUDA takes one only by its MIG- UUID"
                    .to_owned(),
            )),
            (Some(_), _) if request.wants_several() => reasons.push((
                Filter::Mig,
                format!(
                    "one process can use only one MIG device, and --gpus {} may take more",
                    request.count
                ),
            )),
            (Some(_), _) if request.max_util.is_some() => reasons.push((
                Filter::Mig,
                "--max-util cannot be checked on a MIG device (it has no utilization counters)".to_owned(),
            )),
            _ => {}
        }
        if !self.visibility.allows(gpu.index) {
            let source = self.visibility.source.as_deref().unwrap_or("the inherited visibility");
            reasons.push((Filter::Visibility, format!("not in {source}")));
        }
        if self.devices.as_ref().is_some_and(|d| !d.contains(&gpu.index)) {
            reasons.push((Filter::Devices, "not in --devices".to_owned()));
        }
        if self.excluded.contains(&gpu.index) {
            reasons.push((Filter::Devices, "excluded by --exclude".to_owned()));
        }
        if let (Some(pattern), Some(name)) = (&self.request.model, &gpu.name) {
            // A MIG device matches by its parent's model or by its profile too.
            let parts = name.rsplit_once(" MIG ").map(|(model, profile)| [model, profile]);
            if !pattern.matches(name)
                && !parts.is_some_and(|parts| parts.iter().any(|part| pattern.matches(part)))
            {
                // The row or table line beside it already names the model.
                reasons.push((Filter::Model, format!("model does not match --model {}", pattern.0)));
            }
        }
        if let (Some(min_total), Some(memory)) = (self.request.min_total, gpu.memory) {
            if memory.total_bytes < min_total {
                reasons.push((
                    Filter::MinTotal,
                    format!("total {} < {}", human(memory.total_bytes), human(min_total)),
                ));
            }
        }
        if let (Some(threshold), Some(memory)) = (self.request.min_free, gpu.memory) {
            let needed = threshold.bytes_on(memory.total_bytes);
            let usable = memory.total_bytes.saturating_sub(memory.reserved_bytes);
            if needed > usable {
                reasons.push((
                    Filter::MinFree,
                    format!(
                        "free {} < {} (never: {} in total)",
                        human(memory.free_bytes),
                        human(needed),
                        human(usable)
                    ),
                ));
            }
        }
        reasons
    }
}

/// The request's filters that no state of the machine changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Filter {
    Visibility,
    Devices,
    Mig,
    Model,
    MinTotal,
    MinFree,
}

fn assess(
    gpu: &Gpu,
    fixed: &Fixed,
    reservations: &[&Reservation],
    held_back: Option<&HeldBack>,
) -> Assessment {
    let request = fixed.request;
    let permanent: Vec<String> = fixed.reasons(gpu).into_iter().map(|(_, reason)| reason).collect();
    let mut hard = Vec::new();
    let mut soft = Vec::new();
    if let Some(holder) = reservations.iter().find(|r| r.exclusive) {
        match holder.queued {
            false => hard.push(format!("reserved exclusively by {}", holder.holder())),
            true => hard.push(holder.holder()),
        }
    }
    if let Some(waiter) = held_back {
        hard.push(format!("held for an earlier waiter (gpurun PID {}, {})", waiter.pid, waiter.user));
    }
    if let Some(error) = &gpu.error {
        hard.push(format!("unreadable: {error}"));
    }
    if request.model.is_some() && gpu.name.is_none() {
        hard.push("model unknown".to_owned());
    }
    if gpu.compute_mode == Some(ComputeMode::Prohibited) {
        hard.push("compute mode is prohibited: no CUDA context allowed".to_owned());
    }
    if request.min_total.is_some() && gpu.memory.is_none() {
        hard.push("total memory unknown".to_owned());
    }
    if let Some(threshold) = request.min_free {
        match gpu.memory {
            Some(m) => {
                let needed = threshold.bytes_on(m.total_bytes);
                let usable = m.total_bytes.saturating_sub(m.reserved_bytes);
                if m.free_bytes < needed && needed <= usable {
                    let wanted = match threshold {
                        Threshold::Bytes(_) | Threshold::Larger { .. } => human(needed),
                        Threshold::PercentOfTotal(p) => {
                            format!("{p}% of {} ({})", human(m.total_bytes), human(needed))
                        }
                    };
                    let pending: u64 = reservations.iter().map(|r| r.pending_bytes).sum();
                    let note = if pending > 0 {
                        format!(" (after {} reserved by other gpurun launches)", human(pending))
                    } else {
                        String::new()
                    };
                    let floor = request.min_free_floor.map(|floor| floor.bytes_on(m.total_bytes));
                    // Below the house rule nothing, --fallback best included, takes the card.
                    match floor.filter(|floor| m.free_bytes < *floor) {
                        Some(floor) => hard.push(format!(
                            "free {}{note} < {wanted}, under the house rule default-min-free ({})",
                            human(m.free_bytes),
                            human(floor)
                        )),
                        None => soft.push(format!("free {}{note} < {wanted}", human(m.free_bytes))),
                    }
                }
            }
            None => soft.push("free memory unknown".to_owned()),
        }
    }
    if let Some(max_util) = request.max_util {
        match gpu.utilization {
            Some(u) if u.gpu_percent <= max_util => {}
            Some(u) => soft.push(format!("utilization {}% > {max_util}%", u.gpu_percent)),
            None => soft.push("utilization unknown".to_owned()),
        }
    }
    let busy = gpu.processes.as_ref().map(|p| !p.is_empty());
    if request.exclusive {
        match &gpu.processes {
            Some(list) if list.is_empty() => {}
            Some(list) => soft.push(format!("in use by {}", describe_pids(list.iter().map(|p| p.pid)))),
            None => soft.push("processes unknown".to_owned()),
        }
        if let Some(holder) = reservations.iter().find(|r| !r.exclusive) {
            match holder.queued {
                false => soft.push(format!("reserved by {}", holder.holder())),
                true => soft.push(holder.holder()),
            }
        }
    } else if gpu.compute_mode == Some(ComputeMode::ExclusiveProcess) && busy != Some(false) {
        // Only one context fits on such a card: a second one fails at cudaSetDevice.
        soft.push("compute mode is exclusive-process and the card is (or may be) in use".to_owned());
    }
    Assessment { index: gpu.index, permanent, hard, soft }
}

fn gpus_word(count: usize) -> String {
    format!("{count} GPU{}", if count == 1 { "" } else { "s" })
}

/// `only 2 GPUs`, `only 1 GPU`, `no GPU`.
fn only(count: usize) -> String {
    if count == 0 {
        "no GPU".to_owned()
    } else {
        format!("only {}", gpus_word(count))
    }
}

/// Why no state of the machine can meet the request: the first filter, in a fixed order, after
/// which fewer GPUs than requested are left.
fn impossible(gpus: &[Gpu], fixed: &Fixed) -> Option<String> {
    let request = fixed.request;
    let (count, wanted) = (request.count, request.count.min as usize);
    let physical = gpus.iter().filter(|gpu| gpu.mig.is_none()).count();
    if physical < wanted && (request.wants_several() || request.mig == MigUse::Never) {
        return Some(format!("--gpus {count}: this machine has {}", gpus_word(physical)));
    }
    let tagged: Vec<Vec<Filter>> =
        gpus.iter().map(|gpu| fixed.reasons(gpu).into_iter().map(|(filter, _)| filter).collect()).collect();
    let left_after = |last: Filter| tagged.iter().filter(|tags| tags.iter().all(|t| *t > last)).count();
    let largest = |of: fn(&crate::probe::gpu::Memory) -> u64| {
        gpus.iter()
            .filter_map(|gpu| gpu.memory.as_ref().map(of))
            .max()
            .map(human)
            .unwrap_or_else(|| "-".to_owned())
    };
    let order =
        [Filter::Visibility, Filter::Devices, Filter::Mig, Filter::Model, Filter::MinTotal, Filter::MinFree];
    let culprit = order.into_iter().find(|filter| left_after(*filter) < wanted)?;
    let left = left_after(culprit);
    let message = match culprit {
        Filter::Visibility => format!(
            "--gpus {count}: {} allows {}",
            fixed.visibility.source.as_deref().unwrap_or("the inherited visibility"),
            only(left)
        ),
        Filter::Devices => format!("--gpus {count}: --devices/--exclude leave {}", only(left)),
        Filter::Mig if request.mig == MigUse::Only && request.index_only => {
            "--visible-as index --mig only: CUDA takes a MIG device only by its MIG- UUID".to_owned()
        }
        Filter::Mig if request.mig == MigUse::Only && request.wants_several() => format!(
            "--gpus {count} --mig only: one process can use only one MIG device, so a request that may take \
             more than one is for whole GPUs"
        ),
        Filter::Mig => format!(
            "--gpus {count}: {} can be given (--mig {}; a GPU in MIG mode is no device of its own, and a MIG \
             device goes only to a request for one device)",
            only(left),
            match request.mig {
                MigUse::Auto => "auto",
                MigUse::Only => "only",
                MigUse::Never => "never",
            }
        ),
        Filter::Model => {
            let mut models: Vec<&str> = gpus.iter().filter_map(|gpu| gpu.name.as_deref()).collect();
            models.sort_unstable();
            models.dedup();
            let pattern = request.model.as_ref().map(|m| m.0.as_str()).unwrap_or_default();
            format!(
                "--model {pattern}: {} of the GPUs gpurun may use match{}, {count} requested (models here: {})",
                left,
                if left == 1 { "es" } else { "" },
                models.join(", ")
            )
        }
        Filter::MinTotal => format!(
            "--min-total {}: {} ha{} that much in total (the largest has {})",
            human(request.min_total.unwrap_or(0)),
            only(left),
            if left <= 1 { "s" } else { "ve" },
            largest(|m| m.total_bytes)
        ),
        Filter::MinFree => {
            // Among the devices the request allows (every filter before this one passed).
            let allowed = gpus
                .iter()
                .zip(&tagged)
                .filter(|(_, tags)| tags.iter().all(|t| *t >= Filter::MinFree))
                .filter_map(|(gpu, _)| gpu.memory.map(|m| m.total_bytes.saturating_sub(m.reserved_bytes)))
                .max()
                .map_or_else(|| "-".to_owned(), human);
            format!(
                "--min-free: {} can ever have that much free (the largest GPU this request allows can have at \
                 most {allowed} free)",
                only(left)
            )
        }
    };
    Some(if culprit == Filter::Visibility && fixed.visibility.exported {
        format!("{message}; {}", crate::select::visibility::UNDO_EXPORT)
    } else if left == 0 || culprit == Filter::Visibility || culprit == Filter::Devices {
        message
    } else {
        format!("{message}; {count} requested")
    })
}

fn describe_pids(pids: impl Iterator<Item = u32>) -> String {
    let pids: Vec<String> = pids.map(|p| p.to_string()).collect();
    match pids.len() {
        1 => format!("PID {}", pids[0]),
        n => format!("{n} processes (PIDs {})", pids.join(", ")),
    }
}

/// Ranking keys: a known value beats an unknown one.
fn rank(gpus: &[&Gpu], policy: Policy, seed: u64) -> Vec<u32> {
    let free = |gpu: &Gpu| gpu.memory.map(|m| m.free_bytes);
    let util = |gpu: &Gpu| gpu.utilization.map(|u| u.gpu_percent);
    // Known first, then ascending.
    let ascending = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    let descending = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => b.cmp(&a),
        _ => ascending(a, b),
    };
    let util64 = |gpu: &Gpu| util(gpu).map(u64::from);
    let balanced = |gpu: &Gpu| match (free(gpu), util(gpu)) {
        (Some(free), Some(util)) => {
            0.7 * (free as f64 / (1u64 << 30) as f64) + 0.3 * (100.0 - f64::from(util))
        }
        _ => f64::NEG_INFINITY,
    };
    let mut ranked: Vec<&Gpu> = gpus.to_vec();
    ranked.sort_by(|a, b| {
        let order = match policy {
            Policy::MostFree => descending(free(a), free(b)).then(ascending(util64(a), util64(b))),
            Policy::LeastUtil => ascending(util64(a), util64(b)).then(descending(free(a), free(b))),
            Policy::Balanced => balanced(b).total_cmp(&balanced(a)),
            Policy::Pack => ascending(free(a), free(b)).then(ascending(util64(a), util64(b))),
            Policy::Index | Policy::Random => Ordering::Equal,
        };
        order.then(a.index.cmp(&b.index))
    });
    let mut indices: Vec<u32> = ranked.into_iter().map(|gpu| gpu.index).collect();
    if policy == Policy::Random {
        shuffle(&mut indices, seed);
    }
    indices
}

/// Fisher-Yates with xorshift64*: no dependency, and reproducible from the seed in tests.
fn shuffle(items: &mut [u32], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let random = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        items.swap(i, (random % (i as u64 + 1)) as usize);
    }
}

/// The probe as other gpurun launches leave it: memory they reserved and that NVML does not
/// show yet is not free. NVML's free memory is read before its process list, so a process
/// that appeared in between is in the list and not yet in the free figure: free is also at
/// most what the listed processes leave.
fn after_reservations(gpus: &[Gpu], reservations: &[Reservation]) -> Vec<Gpu> {
    gpus.iter()
        .map(|gpu| {
            let pending: u64 =
                reservations.iter().filter(|r| r.index == gpu.index).map(|r| r.pending_bytes).sum();
            let listed: u64 = gpu.processes.iter().flatten().filter_map(|p| p.used_bytes).sum();
            let mut adjusted = gpu.clone();
            if let Some(memory) = adjusted.memory.as_mut() {
                let left_by_processes =
                    memory.total_bytes.saturating_sub(memory.reserved_bytes).saturating_sub(listed);
                memory.free_bytes = memory.free_bytes.min(left_by_processes).saturating_sub(pending);
            }
            adjusted
        })
        .collect()
}

/// The GPUs whose links a multi-GPU request reads: the whole GPUs no state of the machine
/// rules out, best first by the policy, at most `most`. Links are asked per pair, so a cap
/// keeps a 64-GPU machine about as quick as an 8-GPU one; the sets worth having are among the
/// best-ranked GPUs.
pub fn link_candidates(gpus: &[Gpu], visibility: &Visibility, request: &Request, most: usize) -> Vec<u32> {
    let Ok(decision) = decide(gpus, visibility, request, &[], &[]) else { return Vec::new() };
    let possible: Vec<&Gpu> = decision
        .assessments
        .iter()
        .filter(|a| a.possible())
        .filter_map(|a| gpus.iter().find(|gpu| gpu.index == a.index && gpu.mig.is_none()))
        .collect();
    let mut ranked = rank(&possible, request.policy, request.seed);
    ranked.truncate(most);
    ranked
}

/// The model a GPU counts as for `--same-model`: its name and total memory.
fn model_of(gpu: &Gpu) -> (Option<&str>, Option<u64>) {
    (gpu.name.as_deref(), gpu.memory.map(|m| m.total_bytes))
}

/// The level `--topology` requires of every pair, if any.
fn required_link(request: &Request) -> Option<Link> {
    match request.topology {
        TopologyUse::Nvlink => Some(Link::Nvlink),
        TopologyUse::Switch => Some(Link::Switch),
        TopologyUse::Node => Some(Link::Node),
        TopologyUse::Prefer | TopologyUse::Ignore => None,
    }
}

/// The best `k` of `pool` (in the policy's order) by links: for each level from NVLink down,
/// grow a set from each GPU in turn, adding GPUs in the policy's order that reach every member
/// at that level or better; the first set of `k` wins. Never more than levels x n x n steps.
fn best_connected(
    pool: &[u32],
    k: usize,
    topology: &Topology,
    required: Option<Link>,
) -> Option<(Link, Vec<u32>)> {
    let levels =
        [Link::Nvlink, Link::Board, Link::Switch, Link::Switches, Link::Hostbridge, Link::Node, Link::System];
    for level in levels.into_iter().filter(|level| required.is_none_or(|r| *level <= r)) {
        for &seed in pool {
            let mut set = vec![seed];
            for &gpu in pool.iter().filter(|&&gpu| gpu != seed) {
                if set.len() == k {
                    break;
                }
                if set.iter().all(|&member| topology.link(gpu, member) <= level) {
                    set.push(gpu);
                }
            }
            if set.len() == k {
                // Best first, as the policy ranks them (CUDA's device 0 is the best).
                set.sort_by_key(|gpu| pool.iter().position(|p| p == gpu));
                return Some((level, set));
            }
        }
    }
    None
}

/// `k` of the GPUs `ranked` (the policy's order) for a multi-GPU request: GPUs of one model
/// first (required with `--same-model`), then the best worst link (unless `--topology ignore`;
/// at least the required level), then the policy's order. `None` when no set meets what is
/// required.
fn choose_set(
    ranked: &[u32],
    k: usize,
    request: &Request,
    gpus: &[Gpu],
    topology: Option<&Topology>,
) -> Option<Vec<u32>> {
    if k < 2 {
        return Some(ranked.iter().copied().take(k).collect());
    }
    let model = |index: u32| gpus.iter().find(|gpu| gpu.index == index).map(model_of);
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for &gpu in ranked {
        match groups.iter_mut().find(|group| model(group[0]) == model(gpu)) {
            Some(group) => group.push(gpu),
            None => groups.push(vec![gpu]),
        }
    }
    groups.retain(|group| group.len() >= k);
    let pools: Vec<&[u32]> = match (groups.is_empty(), request.same_model) {
        (_, true) | (false, false) => groups.iter().map(Vec::as_slice).collect(),
        (true, false) => vec![ranked],
    };
    let required = required_link(request);
    let none = Topology::default();
    let links = match request.topology {
        TopologyUse::Ignore => None,
        _ => Some(topology.unwrap_or(&none)),
    };
    // Sets compare by their worst link, then by the policy's ranks of their members.
    let ranks = |set: &[u32]| -> Vec<usize> {
        let mut ranks: Vec<usize> =
            set.iter().filter_map(|gpu| ranked.iter().position(|r| r == gpu)).collect();
        ranks.sort_unstable();
        ranks
    };
    let mut best: Option<(Link, Vec<usize>, Vec<u32>)> = None;
    for pool in pools {
        let found = match links {
            None => Some((Link::System, pool[..k].to_vec())),
            Some(links) => best_connected(pool, k, links, required),
        };
        if let Some((level, set)) = found {
            let key = ranks(&set);
            if best.as_ref().is_none_or(|(best_level, best_key, _)| (level, &key) < (*best_level, best_key)) {
                best = Some((level, key, set));
            }
        }
    }
    best.map(|(_, _, set)| set)
}

/// Why no set of `k` can be had from `pool` (`of`: how to call them), in one line.
fn set_refusal(request: &Request, k: usize, gpus: &[Gpu], pool: &[u32], of: &str) -> String {
    let count = request.count;
    match (request.same_model, required_link(request)) {
        (true, None) => {
            let mut models: Vec<String> = Vec::new();
            for &index in pool {
                if let Some(name) = gpus.iter().find(|g| g.index == index).and_then(|g| g.name.clone()) {
                    if !models.contains(&name) {
                        models.push(name);
                    }
                }
            }
            format!("--same-model --gpus {count}: no {k} of {of} are of one model (models: {})", models.join(", "))
        }
        (same_model, required) => format!(
            "--topology {} --gpus {count}: no {k} of {of}{} are joined pairwise by {} or better (see gpurun --list --topology)",
            required.map_or("prefer", Link::name),
            if same_model { ", of one model," } else { "" },
            match required {
                Some(Link::Nvlink) => "NVLink",
                Some(Link::Switch) => "one PCIe switch",
                _ => "one NUMA node",
            }
        ),
    }
}

pub fn decide(
    gpus: &[Gpu],
    visibility: &Visibility,
    request: &Request,
    reservations: &[Reservation],
    held_back: &[HeldBack],
) -> Result<Decision, DeviceError> {
    decide_with_links(gpus, visibility, request, reservations, held_back, None)
}

/// `decide`, with the links between the GPUs (`None`: not probed; links then do not count).
pub fn decide_with_links(
    gpus: &[Gpu],
    visibility: &Visibility,
    request: &Request,
    reservations: &[Reservation],
    held_back: &[HeldBack],
    topology: Option<&Topology>,
) -> Result<Decision, DeviceError> {
    let devices = request.devices.as_deref().map(|refs| resolve_refs(gpus, refs, "--devices")).transpose()?;
    let excluded = resolve_refs(gpus, &request.exclude, "--exclude")?;
    let fixed = Fixed { visibility, devices: &devices, excluded: &excluded, request };
    let auto_cap = auto_cap(gpus, &fixed);
    let capped;
    let fixed = match &auto_cap {
        Some((bytes, _)) => {
            capped = Request { min_free: Some(Threshold::Bytes(*bytes)), ..request.clone() };
            Fixed { request: &capped, ..fixed }
        }
        None => fixed,
    };
    let request = fixed.request;
    let adjusted = after_reservations(gpus, reservations);
    let gpus = &adjusted[..];
    let assessments: Vec<Assessment> = gpus
        .iter()
        .map(|gpu| {
            let on_gpu: Vec<&Reservation> = reservations.iter().filter(|r| r.index == gpu.index).collect();
            assess(gpu, &fixed, &on_gpu, held_back.iter().find(|h| h.index == gpu.index))
        })
        .collect();
    let by_index = |a: &Assessment| gpus.iter().find(|g| g.index == a.index).expect("assessed GPU exists");
    let wanted = request.count.min as usize;
    let eligible: Vec<&Gpu> = assessments.iter().filter(|a| a.eligible()).map(by_index).collect();
    let ranked = rank(&eligible, request.policy, request.seed);
    // A set needs more than GPUs that qualify one by one: one model, or links, if asked.
    let constrained = request.same_model || required_link(request).is_some();
    let set = request.count.take(eligible.len()).and_then(|taken| {
        (wanted.max(1)..=taken)
            .rev()
            .find_map(|k| choose_set(&ranked, k, request, gpus, topology))
            .or_else(|| (taken == 0).then(Vec::new))
    });
    let possible: Vec<&Gpu> = assessments.iter().filter(|a| a.possible()).map(by_index).collect();
    let possible_ranked = rank(&possible, request.policy, request.seed);
    let set_never = (constrained && wanted >= 2 && possible.len() >= wanted)
        .then(|| choose_set(&possible_ranked, wanted, request, gpus, topology))
        .filter(Option::is_none)
        .map(|_| set_refusal(request, wanted, gpus, &possible_ranked, "the GPUs gpurun may use"));
    let never = (wanted > eligible.len()).then(|| impossible(gpus, &fixed)).flatten().or(set_never.clone());
    let set_reason = (set.is_none() && constrained && wanted <= eligible.len())
        .then(|| set_refusal(request, wanted, gpus, &ranked, "those"));
    let outcome = if let Some(set) = set {
        Outcome::Selected(set)
    } else if let (Some(why), false) =
        (impossible(gpus, &fixed).or(set_never), request.fallback == Some(Fallback::Cpu))
    {
        Outcome::Impossible(why)
    } else {
        match request.fallback {
            Some(Fallback::Cpu) => Outcome::FallbackCpu,
            Some(Fallback::Best) => {
                // Qualified ones first, then the best of those turned away only for their load.
                let relaxed: Vec<&Gpu> = assessments
                    .iter()
                    .filter(|a| a.permanent.is_empty() && a.hard.is_empty() && !a.eligible())
                    .map(by_index)
                    .collect();
                let mut chosen = rank(&eligible, request.policy, request.seed);
                chosen.extend(rank(&relaxed, request.policy, request.seed));
                if chosen.len() >= wanted {
                    chosen.truncate(wanted);
                    Outcome::FallbackBest(chosen)
                } else {
                    Outcome::Refused { qualified: eligible.len() as u32 }
                }
            }
            None => Outcome::Refused { qualified: eligible.len() as u32 },
        }
    };
    Ok(Decision { assessments, outcome, never, set_reason, min_free_note: auto_cap })
}

/// What an idle card keeps as used for the driver's own context, as a fraction of its total
/// (1/200 = 0.5%: 200 MiB of 40 GiB; real idle cards show a few MiB).
const IDLE_CONTEXT_DIVISOR: u64 = 200;

/// `--min-free auto` asks at most what the largest device this request allows could ever have
/// free (its total less the driver's reservation), and never less than the house rule: a run
/// that peaked near a card's size must not be refused for good, since refused runs add nothing
/// to the history that could change the answer. The lowered size and a line saying why.
fn auto_cap(gpus: &[Gpu], fixed: &Fixed) -> Option<(u64, String)> {
    let request = fixed.request;
    let Some(Threshold::Bytes(asked)) = request.min_free.filter(|_| request.min_free_auto) else {
        return None;
    };
    // An idle card still shows the driver's own context as used: allow for it.
    let idle_free = |m: crate::probe::gpu::Memory| {
        m.total_bytes.saturating_sub(m.reserved_bytes).saturating_sub(m.total_bytes / IDLE_CONTEXT_DIVISOR)
    };
    let (largest, total) = gpus
        .iter()
        .filter(|gpu| fixed.reasons(gpu).iter().all(|(filter, _)| *filter == Filter::MinFree))
        .filter_map(|gpu| gpu.memory.map(|m| (idle_free(m), m.total_bytes)))
        .max()?;
    let floor = request.min_free_floor.map_or(0, |floor| floor.bytes_on(total));
    let cap = largest.max(floor);
    (asked > cap).then(|| {
        (
            cap,
            format!(
                "auto: lowered to {}: the largest GPU this request allows can have at most {} free when idle",
                human(cap),
                human(largest)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::devices::parse_device_list;
    use crate::probe::gpu::{test_gpu, GpuProcess, Memory, Utilization};
    use proptest::prelude::*;

    fn unrestricted() -> Visibility {
        Visibility::default()
    }

    fn with_load(index: u32, free_gib: u64, util: u32) -> Gpu {
        let mut gpu = test_gpu(index);
        gpu.memory = Some(Memory {
            total_bytes: 80 << 30,
            reserved_bytes: 0,
            used_bytes: (80 - free_gib) << 30,
            free_bytes: free_gib << 30,
        });
        gpu.utilization = Some(Utilization { gpu_percent: util, memory_percent: 0 });
        gpu
    }

    fn chosen(gpus: &[Gpu], request: &Request) -> Outcome {
        decide(gpus, &unrestricted(), request, &[], &[]).unwrap().outcome
    }

    #[test]
    fn policies_rank_as_documented() {
        // (free GiB, util %): 0 (10, 0), 1 (70, 90), 2 (40, 10), 3 (70, 20)
        let gpus =
            vec![with_load(0, 10, 0), with_load(1, 70, 90), with_load(2, 40, 10), with_load(3, 70, 20)];
        let order =
            |policy| match chosen(&gpus, &Request { count: Count::exactly(4), policy, ..Request::default() })
            {
                Outcome::Selected(order) => order,
                other => panic!("{other:?}"),
            };
        assert_eq!(order(Policy::MostFree), vec![3, 1, 2, 0]);
        assert_eq!(order(Policy::LeastUtil), vec![0, 2, 3, 1]);
        // 0.7 x free + 0.3 x (100 - util): 0 -> 37, 1 -> 52, 2 -> 55, 3 -> 73
        assert_eq!(order(Policy::Balanced), vec![3, 2, 1, 0]);
        assert_eq!(order(Policy::Pack), vec![0, 2, 3, 1]);
        assert_eq!(order(Policy::Index), vec![0, 1, 2, 3]);
    }

    #[test]
    fn pack_takes_the_tightest_card_that_fits() {
        let gpus = vec![with_load(0, 70, 0), with_load(1, 9, 0), with_load(2, 12, 0), with_load(3, 5, 0)];
        let request =
            Request { policy: Policy::Pack, min_free: Some(Threshold::Bytes(8 << 30)), ..Request::default() };
        assert_eq!(chosen(&gpus, &request), Outcome::Selected(vec![1]));
    }

    #[test]
    fn refusal_gives_every_reason() {
        let mut gpus = vec![with_load(0, 6, 95), with_load(1, 70, 0), test_gpu(2)];
        gpus[1].processes =
            Some(vec![GpuProcess { pid: 42, used_bytes: Some(1), user: None, command: None }]);
        gpus[2].utilization = None;
        let request = Request {
            count: Count::exactly(2),
            min_free: Some(Threshold::Bytes(8 << 30)),
            max_util: Some(50),
            exclusive: true,
            ..Request::default()
        };
        let decision = decide(&gpus, &unrestricted(), &request, &[], &[]).unwrap();
        assert_eq!(decision.outcome, Outcome::Refused { qualified: 0 });
        assert_eq!(decision.assessments[0].reasons(), vec!["free 6 GiB < 8 GiB", "utilization 95% > 50%"]);
        assert_eq!(decision.assessments[1].reasons(), vec!["in use by PID 42"]);
        assert_eq!(decision.assessments[2].reasons(), vec!["utilization unknown"]);
    }

    #[test]
    fn fallbacks() {
        let gpus = vec![with_load(0, 6, 0), with_load(1, 7, 0)];
        let mut request = Request { min_free: Some(Threshold::Bytes(8 << 30)), ..Request::default() };
        request.fallback = Some(Fallback::Best);
        assert_eq!(chosen(&gpus, &request), Outcome::FallbackBest(vec![1]));
        request.fallback = Some(Fallback::Cpu);
        assert_eq!(chosen(&gpus, &request), Outcome::FallbackCpu);
        // Hard reasons are never relaxed.
        request.fallback = Some(Fallback::Best);
        request.exclude = vec![DeviceRef::Index(0)];
        request.count = Count::exactly(2);
        assert_eq!(
            chosen(&gpus, &request),
            Outcome::Impossible("--gpus 2: --devices/--exclude leave only 1 GPU".into())
        );
        // --fallback cpu runs even a request no machine state can meet.
        request.fallback = Some(Fallback::Cpu);
        assert_eq!(chosen(&gpus, &request), Outcome::FallbackCpu);
    }

    #[test]
    fn requests_no_state_of_the_machine_can_meet_say_why() {
        let gpus: Vec<Gpu> = (0..3).map(test_gpu).collect();
        let why = |request: Request| match chosen(&gpus, &request) {
            Outcome::Impossible(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(Request { count: Count::exactly(9), ..Request::default() }),
            "--gpus 9: this machine has 3 GPUs"
        );
        assert_eq!(
            why(Request { min_free: Some(Threshold::Bytes(500 << 30)), ..Request::default() }),
            "--min-free: no GPU can ever have that much free (the largest GPU this request allows can have at most 80 GiB free)"
        );
        assert_eq!(
            why(Request { min_total: Some(100 << 30), ..Request::default() }),
            "--min-total 100 GiB: no GPU has that much in total (the largest has 80 GiB)"
        );
        assert_eq!(
            why(Request { model: Some(ModelPattern("H100".into())), ..Request::default() }),
            "--model H100: 0 of the GPUs gpurun may use match, 1 requested (models here: NVIDIA A100-SXM4-80GB)"
        );
        let visibility = Visibility {
            allowed: Some(vec![1]),
            source: Some("CUDA_VISIBLE_DEVICES=1".into()),
            ..Visibility::default()
        };
        let decision =
            decide(&gpus, &visibility, &Request { count: Count::exactly(2), ..Request::default() }, &[], &[])
                .unwrap();
        assert_eq!(
            decision.outcome,
            Outcome::Impossible("--gpus 2: CUDA_VISIBLE_DEVICES=1 allows only 1 GPU".into())
        );
        // A GPU that is failing right now still exists: try later (75), not never.
        let mut lost = gpus.clone();
        lost.iter_mut().for_each(|gpu| gpu.error = Some("memory: GPU is lost".into()));
        assert_eq!(chosen(&lost, &Request::default()), Outcome::Refused { qualified: 0 });
    }

    #[test]
    fn earlier_waiters_hold_back_only_the_gpus_they_could_use() {
        let gpus: Vec<Gpu> = (0..3).map(test_gpu).collect();
        let held = [
            HeldBack { index: 0, pid: 7, user: "alice".into() },
            HeldBack { index: 1, pid: 7, user: "alice".into() },
        ];
        let decision = decide(&gpus, &unrestricted(), &Request::default(), &[], &held).unwrap();
        assert_eq!(decision.outcome, Outcome::Selected(vec![2]));
        assert_eq!(decision.assessments[0].hard, vec!["held for an earlier waiter (gpurun PID 7, alice)"]);
        let two = Request { count: Count::exactly(2), ..Request::default() };
        assert_eq!(
            decide(&gpus, &unrestricted(), &two, &[], &held).unwrap().outcome,
            Outcome::Refused { qualified: 1 }
        );
    }

    #[test]
    fn percent_threshold_is_of_each_cards_total() {
        let gpus = vec![with_load(0, 30, 0)];
        let decision = decide(
            &gpus,
            &unrestricted(),
            &Request { min_free: Some(Threshold::PercentOfTotal(50.0)), ..Request::default() },
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(decision.assessments[0].reasons(), vec!["free 30 GiB < 50% of 80 GiB (40 GiB)"]);
    }

    #[test]
    fn device_references() {
        let gpus: Vec<Gpu> = (0..3).map(test_gpu).collect();
        let uuid = gpus[1].uuid.clone().unwrap();
        for text in [
            "1",
            uuid.as_str(),
            &uuid[..uuid.len() - 3],
            &uuid[4..],
            "00000000:02:00.0",
            "0000:02:00.0",
            "02:00.0",
        ] {
            let refs = parse_device_list(text).unwrap().0;
            assert_eq!(resolve_refs(&gpus, &refs, "--devices"), Ok(vec![1]), "{text}");
        }
        let ambiguous =
            resolve_refs(&gpus, &parse_device_list("GPU-0000").unwrap().0, "--devices").unwrap_err();
        assert_eq!(ambiguous.to_string(), "--devices GPU-0000: matches GPUs 0, 1, 2; give more of the UUID");
        let missing = resolve_refs(&gpus, &[DeviceRef::Index(9)], "--exclude").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "--exclude 9: no such GPU; this machine has GPUs 0-2 (see gpurun --list)"
        );
        assert_eq!(parse_device_list("MIG-abc").unwrap().0, [DeviceRef::Uuid("MIG-abc".to_owned())]);
        for bad in ["", "1,,2", "x y", "0000:zz:00.0", "1:2:3:4.0", "-2", "-abc"] {
            assert!(parse_device_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reservations_take_memory_and_exclusivity() {
        let gpus = vec![with_load(0, 79, 0), with_load(1, 70, 0)];
        let pending = Reservation {
            index: 0,
            pid: 9,
            user: "alice".to_owned(),
            pending_bytes: 50 << 30,
            exclusive: false,
            queued: false,
        };
        let request = Request { min_free: Some(Threshold::Bytes(40 << 30)), ..Request::default() };
        let decision = decide(&gpus, &unrestricted(), &request, std::slice::from_ref(&pending), &[]).unwrap();
        assert_eq!(decision.outcome, Outcome::Selected(vec![1]));
        assert_eq!(
            decision.assessments[0].reasons(),
            vec!["free 29 GiB (after 50 GiB reserved by other gpurun launches) < 40 GiB"]
        );
        let exclusive = Request { exclusive: true, ..Request::default() };
        let decision =
            decide(&gpus, &unrestricted(), &exclusive, std::slice::from_ref(&pending), &[]).unwrap();
        assert_eq!(decision.assessments[0].reasons(), vec!["reserved by gpurun PID 9 (alice)"]);
        let held = Reservation { exclusive: true, pending_bytes: 0, ..pending };
        let decision = decide(&gpus, &unrestricted(), &Request::default(), &[held], &[]).unwrap();
        assert_eq!(decision.assessments[0].hard, vec!["reserved exclusively by gpurun PID 9 (alice)"]);
        assert_eq!(decision.outcome, Outcome::Selected(vec![1]));
    }

    #[test]
    fn links_are_read_among_the_best_ranked_possible_gpus() {
        let gpus: Vec<Gpu> = (0..20).map(|i| with_load(i, u64::from(i), 0)).collect();
        let request =
            Request { count: Count::exactly(2), exclude: vec![DeviceRef::Index(19)], ..Request::default() };
        let pool = link_candidates(&gpus, &unrestricted(), &request, 4);
        assert_eq!(pool, [18, 17, 16, 15], "most free first, the excluded one out");
    }

    #[test]
    fn a_process_listed_after_the_memory_was_read_still_counts() {
        // NVML's free memory was read just before a 50 GiB process appeared in the list.
        let mut gpus = vec![with_load(0, 79, 0), with_load(1, 70, 0)];
        gpus[0].processes =
            Some(vec![GpuProcess { pid: 42, used_bytes: Some(50 << 30), user: None, command: None }]);
        let request = Request { min_free: Some(Threshold::Bytes(40 << 30)), ..Request::default() };
        let decision = decide(&gpus, &unrestricted(), &request, &[], &[]).unwrap();
        assert_eq!(decision.outcome, Outcome::Selected(vec![1]));
        assert_eq!(decision.assessments[0].reasons(), vec!["free 30 GiB < 40 GiB"]);
    }

    /// GPU 0 whole (80 GiB free); GPU 1 in MIG mode with a 3g.40gb (10 GiB free) and a 2g.20gb
    /// (20 GiB free).
    fn mig_machine() -> Vec<Gpu> {
        let mut gpus: Vec<Gpu> = (0..2).map(test_gpu).collect();
        gpus[1].mig_enabled = Some(true);
        let mut busy = crate::probe::gpu::test_mig(1, 0, "3g.40gb", 40);
        busy.memory = Some(Memory {
            total_bytes: 40 << 30,
            reserved_bytes: 0,
            used_bytes: 30 << 30,
            free_bytes: 10 << 30,
        });
        gpus.push(busy);
        gpus.push(crate::probe::gpu::test_mig(1, 1, "2g.20gb", 20));
        gpus
    }

    #[test]
    fn mig_devices_are_devices_for_one_device_requests() {
        let gpus = mig_machine();
        let (mig_a, mig_b) = (gpus[2].index, gpus[3].index);
        let pick = |request: Request| decide(&gpus, &unrestricted(), &request, &[], &[]).unwrap();
        let one = Request { min_free: Some(Threshold::Bytes(8 << 30)), ..Request::default() };
        assert_eq!(pick(one.clone()).outcome, Outcome::Selected(vec![0]));
        let only = Request { mig: MigUse::Only, ..one.clone() };
        assert_eq!(pick(only.clone()).outcome, Outcome::Selected(vec![mig_b]));
        assert_eq!(
            pick(Request { policy: Policy::Pack, ..only.clone() }).outcome,
            Outcome::Selected(vec![mig_a])
        );
        let model = Request { model: Some(ModelPattern("3g.40gb".into())), ..Request::default() };
        assert_eq!(pick(model).outcome, Outcome::Selected(vec![mig_a]));
        // The parent is never a device of its own.
        let decision = pick(one.clone());
        assert_eq!(decision.assessments[1].permanent, ["in MIG mode: its MIG devices are the devices"]);
        // Two devices: whole GPUs only, so never with --mig only.
        let two = pick(Request { count: Count::exactly(2), mig: MigUse::Only, ..Request::default() });
        let Outcome::Impossible(why) = two.outcome else { panic!("{:?}", two.outcome) };
        assert!(why.starts_with("--gpus 2 --mig only: one process can use only one MIG device"), "{why}");
        let never = pick(Request {
            mig: MigUse::Never,
            model: Some(ModelPattern("2g.20gb".into())),
            ..Request::default()
        });
        assert!(matches!(never.outcome, Outcome::Impossible(_)), "{:?}", never.outcome);
        let util = pick(Request { max_util: Some(50), mig: MigUse::Only, ..Request::default() });
        assert!(util.assessments[3].permanent[0].contains("--max-util cannot be checked on a MIG device"));
        let index_only = pick(Request { index_only: true, mig: MigUse::Only, ..Request::default() });
        assert!(
            matches!(index_only.outcome, Outcome::Impossible(ref why) if why.contains("--visible-as index"))
        );
    }

    #[test]
    fn mig_prohibited_and_exclusive_process_cards() {
        let mut gpus: Vec<Gpu> = (0..3).map(test_gpu).collect();
        gpus[0].mig_enabled = Some(true);
        gpus[1].compute_mode = Some(ComputeMode::Prohibited);
        gpus[2].compute_mode = Some(ComputeMode::ExclusiveProcess);
        gpus[2].processes = Some(vec![GpuProcess { pid: 7, used_bytes: None, user: None, command: None }]);
        let decision = decide(&gpus, &unrestricted(), &Request::default(), &[], &[]).unwrap();
        assert!(decision.assessments.iter().all(|a| !a.eligible()));
        assert_eq!(decision.outcome, Outcome::Refused { qualified: 0 });
    }

    fn arbitrary_gpu() -> impl Strategy<Value = Gpu> {
        (
            0u64..=80,
            prop::option::of(0u32..=100),
            prop::option::of(0usize..3),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            0usize..3,
        )
            .prop_map(|(free_gib, util, processes, broken, unknown_memory, model)| {
                let mut gpu = with_load(0, free_gib, 0);
                gpu.utilization = util.map(|gpu_percent| Utilization { gpu_percent, memory_percent: 0 });
                gpu.processes = processes.map(|n| {
                    (0..n as u32)
                        .map(|pid| GpuProcess { pid: 100 + pid, used_bytes: None, user: None, command: None })
                        .collect()
                });
                if broken {
                    gpu.error = Some("memory: GPU is lost".to_owned());
                }
                if unknown_memory {
                    gpu.memory = None;
                }
                gpu.name = Some(["NVIDIA A100", "NVIDIA H100", "Tesla V100"][model].to_owned());
                gpu
            })
    }

    fn arbitrary_machine() -> impl Strategy<Value = Vec<Gpu>> {
        prop::collection::vec(arbitrary_gpu(), 0..10).prop_map(|mut gpus| {
            for (index, gpu) in gpus.iter_mut().enumerate() {
                let uuid_tail = format!("{index:04}");
                *gpu = Gpu { index: index as u32, uuid: Some(format!("GPU-{uuid_tail}")), ..gpu.clone() };
            }
            gpus
        })
    }

    fn arbitrary_request() -> impl Strategy<Value = Request> {
        (
            prop_oneof![
                (0u32..5).prop_map(Count::exactly),
                (0u32..4, 0u32..4).prop_map(|(min, extra)| Count { min, max: Some(min + extra) }),
                Just(Count { min: 1, max: None }),
            ],
            prop::option::of(0u64..=90),
            prop::option::of(0u32..=100),
            any::<bool>(),
            prop::option::of(prop::sample::select(vec!["A100", "*100", "V100"])),
            prop::sample::select(vec![
                Policy::MostFree,
                Policy::LeastUtil,
                Policy::Balanced,
                Policy::Pack,
                Policy::Index,
                Policy::Random,
            ]),
            any::<u64>(),
        )
            .prop_map(|(count, min_free_gib, max_util, exclusive, model, policy, seed)| Request {
                count,
                min_free: min_free_gib.map(|g| Threshold::Bytes(g << 30)),
                max_util,
                exclusive,
                model: model.map(|m| ModelPattern(m.to_owned())),
                policy,
                seed,
                ..Request::default()
            })
    }

    /// Whether some state of the machine would let `gpu` qualify.
    fn could_ever(gpu: &Gpu, request: &Request, visibility: &Visibility) -> bool {
        visibility.allows(gpu.index)
            && request.model.as_ref().is_none_or(|m| gpu.name.as_deref().is_none_or(|n| m.matches(n)))
            && request.min_free.is_none_or(|t| {
                gpu.memory.is_none_or(|m| t.bytes_on(m.total_bytes) <= m.total_bytes - m.reserved_bytes)
            })
    }

    fn passes_every_filter(gpu: &Gpu, request: &Request, visibility: &Visibility) -> bool {
        gpu.error.is_none()
            && visibility.allows(gpu.index)
            && request
                .min_free
                .is_none_or(|t| gpu.memory.is_some_and(|m| m.free_bytes >= t.bytes_on(m.total_bytes)))
            && request.max_util.is_none_or(|max| gpu.utilization.is_some_and(|u| u.gpu_percent <= max))
            && (!request.exclusive || gpu.processes.as_ref().is_some_and(|p| p.is_empty()))
            && request.model.as_ref().is_none_or(|m| gpu.name.as_deref().is_some_and(|n| m.matches(n)))
    }

    proptest! {
        #[test]
        fn chosen_gpus_pass_every_filter_and_the_count_is_honoured(
            gpus in arbitrary_machine(),
            request in arbitrary_request(),
            allowed in prop::option::of(prop::collection::vec(0u32..10, 0..6)),
        ) {
            let visibility = Visibility { allowed: allowed.clone(), source: Some("CUDA_VISIBLE_DEVICES=x".into()), ..Visibility::default() };
            let decision = decide(&gpus, &visibility, &request, &[], &[]).unwrap();
            let qualifying = gpus.iter().filter(|g| passes_every_filter(g, &request, &visibility)).count();
            match &decision.outcome {
                Outcome::Selected(chosen) => {
                    // As many as qualify, within the range.
                    prop_assert_eq!(Some(chosen.len()), request.count.take(qualifying));
                    let mut unique = chosen.clone();
                    unique.sort_unstable();
                    unique.dedup();
                    prop_assert_eq!(unique.len(), chosen.len());
                    for index in chosen {
                        let gpu = &gpus[*index as usize];
                        prop_assert!(passes_every_filter(gpu, &request, &visibility), "GPU {} chosen: {:?}", index, gpu);
                        prop_assert!(allowed.as_ref().is_none_or(|a| a.contains(index)));
                    }
                }
                Outcome::Refused { qualified } => {
                    prop_assert!(request.count.min as usize > qualifying);
                    prop_assert_eq!(*qualified as usize, qualifying);
                    // "Try later" only when some state of the machine would do.
                    let possible = gpus.iter().filter(|g| could_ever(g, &request, &visibility)).count();
                    prop_assert!(possible >= request.count.min as usize);
                }
                Outcome::Impossible(why) => {
                    let possible = gpus.iter().filter(|g| could_ever(g, &request, &visibility)).count();
                    prop_assert!(possible < request.count.min as usize, "{}", why);
                }
                other => prop_assert!(false, "no fallback was asked for: {:?}", other),
            }
            // Eligibility agrees with the filters, one GPU at a time.
            for (gpu, assessment) in gpus.iter().zip(&decision.assessments) {
                prop_assert_eq!(assessment.eligible(), passes_every_filter(gpu, &request, &visibility));
            }
            // Same probe, same answer (random included, for the same seed).
            prop_assert_eq!(decide(&gpus, &visibility, &request, &[], &[]).unwrap(), decision);
        }

        #[test]
        fn most_free_takes_the_gpus_with_most_free_memory(gpus in arbitrary_machine(), count in 1u32..4) {
            // One model (a mixed machine prefers sets of one model), links ignored.
            prop_assume!(gpus.iter().all(|gpu| gpu.memory.is_some()));
            let gpus: Vec<Gpu> = gpus
                .into_iter()
                .map(|gpu| Gpu { name: Some("NVIDIA A100".to_owned()), memory: gpu.memory.map(|m| Memory { total_bytes: 80 << 30, ..m }), ..gpu })
                .collect();
            let request = Request { count: Count::exactly(count), topology: TopologyUse::Ignore, ..Request::default() };
            if let Outcome::Selected(chosen) = decide(&gpus, &unrestricted(), &request, &[], &[]).unwrap().outcome {
                let free = |i: u32| gpus[i as usize].memory.map(|m| m.free_bytes);
                let worst_chosen = chosen.iter().map(|&i| free(i)).min().unwrap();
                for gpu in gpus.iter().filter(|g| g.error.is_none() && !chosen.contains(&g.index)) {
                    prop_assert!(free(gpu.index) <= worst_chosen, "GPU {} left out", gpu.index);
                }
            }
        }
    }
}
