//! Which GPUs may be chosen and why the others may not: the filters over the request, and the
//! refusal a request no state of the machine can meet gets.
//!
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

use crate::options::size::{exact, human, Threshold};
use crate::options::{HealthUse, MigUse};
use crate::probe::gpu::{ComputeMode, Gpu};
use crate::probe::health::HealthState;
use crate::runtime::Visibility;
use crate::select::request::{Assessment, HeldBack, Request, Reservation};

/// The filters that depend only on the request and the machine, in the order the impossible
/// message names them.
pub(crate) struct Fixed<'a> {
    pub(crate) visibility: &'a Visibility,
    pub(crate) devices: &'a Option<Vec<u32>>,
    pub(crate) excluded: &'a [u32],
    pub(crate) request: &'a Request,
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
                        exact(needed),
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

pub(crate) fn assess(
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
            false if gpu.mig.is_some() => {
                hard.push(format!("a MIG device leased by {}: one job per MIG device", holder.holder()))
            }
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
    hard.extend(no_context_here(gpu, request));
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
                        Threshold::Bytes(_) | Threshold::Larger { .. } => exact(needed),
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
    soft.extend(sharing(gpu, request, reservations));
    let health = match (request.health, gpu.health.state) {
        (HealthUse::Ignore, _) | (_, HealthState::Ok) => Vec::new(),
        (HealthUse::Normal, HealthState::Degraded | HealthState::Unknown) => Vec::new(),
        (HealthUse::Strict, HealthState::Degraded | HealthState::Unknown) => {
            vec![format!("{} (--health strict)", gpu.health.describe())]
        }
        (_, HealthState::Unhealthy) => vec![gpu.health.describe()],
    };
    Assessment { index: gpu.index, permanent, hard, soft, health }
}

/// Why the GPU cannot be shared with this launch now: `--exclusive` and someone is on it or
/// has it reserved; or its compute mode is exclusive-process and its one context is taken
/// (unless by the caller's own MPS server, which `--mps` joins).
fn sharing(gpu: &Gpu, request: &Request, reservations: &[&Reservation]) -> Vec<String> {
    let mut reasons = Vec::new();
    let busy = gpu.processes.as_ref().map(|p| !p.is_empty());
    if request.exclusive {
        match &gpu.processes {
            Some(list) if list.is_empty() => {}
            Some(list) => reasons.push(format!("in use by {}", describe_pids(list.iter().map(|p| p.pid)))),
            None => reasons.push("processes unknown".to_owned()),
        }
        if let Some(holder) = reservations.iter().find(|r| !r.exclusive) {
            match holder.queued {
                false => reasons.push(format!("reserved by {}", holder.holder())),
                true => reasons.push(holder.holder()),
            }
        }
    } else if gpu.compute_mode == Some(ComputeMode::ExclusiveProcess) && busy != Some(false) {
        // NVIDIA's recommended MPS set-up: the one context is the caller's MPS server, and
        // its clients are the way in.
        match own_mps_server_alone(gpu) {
            Some(_) if request.mps => {}
            Some(pid) => reasons.push(format!(
                "compute mode is exclusive-process and PID {pid}, your MPS server, holds its one CUDA \
             context: --mps joins it"
            )),
            None => reasons.push(exclusive_process_holder(gpu)),
        }
    }
    reasons
}

/// Why a CUDA context of this launch would not start on the GPU now, or would wait: the
/// driver takes no work (confidential computing not ready), its compute mode forbids contexts,
/// another user's MPS server would hold ours until that user's clients end, or (`--mps`) no
/// server of ours runs there to join.
fn no_context_here(gpu: &Gpu, request: &Request) -> Vec<String> {
    let mut reasons: Vec<String> = gpu.blocked.iter().map(|refusal| (*refusal).to_owned()).collect();
    if gpu.compute_mode == Some(ComputeMode::Prohibited) {
        reasons.push("compute mode is prohibited: no CUDA context allowed".to_owned());
    }
    match &gpu.mps {
        Some(mps) if mps.foreign => reasons
            .push(format!("{}: our CUDA context would wait for that user's clients", mps.server_words())),
        None if request.mps => match &request.mps_daemon {
            Some((_, true)) => {}
            Some((pipe, false)) => reasons.push(format!(
                "no MPS server of yours runs on it, and no MPS control daemon serves {} to start one \
                 (--mps joins a server; gpurun never starts the daemon: nvidia-cuda-mps-control -d)",
                pipe.display()
            )),
            None => reasons.push("no MPS server of yours runs on it".to_owned()),
        },
        _ => {}
    }
    reasons
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

/// Why the MIG rules leave too few devices: `--visible-as index` or `--max-util` with
/// `--mig only`, a request that may take several, or the one-device rule itself.
fn mig_refusal(request: &Request, asked: &str, left: usize) -> String {
    let only_mig = request.mig == MigUse::Only;
    if only_mig && request.index_only {
        return "--visible-as index --mig only: CUDA takes a MIG device only by its MIG- UUID".to_owned();
    }
    if let (true, Some(max_util)) = (only_mig, request.max_util) {
        return format!(
            "{asked} --mig only --max-util {max_util}: a MIG device has no utilization counters, so \
             --max-util cannot be checked on one (drop --max-util, or choose among whole GPUs)"
        );
    }
    if only_mig && request.wants_several() {
        return format!(
            "{asked} --mig only: one process can use only one MIG device, so a request that may take \
             more than one is for whole GPUs"
        );
    }
    let mode = match request.mig {
        MigUse::Auto => "auto",
        MigUse::Only => "only",
        MigUse::Never => "never",
    };
    format!(
        "{asked}: {} can be given (--mig {mode}; a GPU in MIG mode is no device of its own, and a MIG \
         device goes only to a request for one device)",
        only(left)
    )
}

/// Why no state of the machine can meet the request: the first filter, in a fixed order, after
/// which fewer GPUs than requested are left.
pub(crate) fn impossible(gpus: &[Gpu], fixed: &Fixed) -> Option<String> {
    let request = fixed.request;
    let (count, asked, wanted) = (request.count, request.count_text(), request.count.min as usize);
    let physical = gpus.iter().filter(|gpu| gpu.mig.is_none()).count();
    if physical < wanted && (request.wants_several() || request.mig == MigUse::Never) {
        return Some(format!("{asked}: this machine has {}", gpus_word(physical)));
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
        // An empty CUDA_VISIBLE_DEVICES= hides every GPU (CUDA's meaning, kept): most often a
        // leftover of a script or an earlier export, undone with unset.
        Filter::Visibility
            if left == 0 && fixed.visibility.source.as_deref() == Some("CUDA_VISIBLE_DEVICES=") =>
        {
            format!(
                "{asked}: CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU (CUDA's meaning); \
                 to choose among all of them: unset CUDA_VISIBLE_DEVICES"
            )
        }
        Filter::Visibility => format!(
            "{asked}: {} allows {}",
            fixed.visibility.source.as_deref().unwrap_or("the inherited visibility"),
            only(left)
        ),
        Filter::Devices => format!("{asked}: --devices/--exclude leave {}", only(left)),
        Filter::Mig => mig_refusal(request, &asked, left),
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
    Some(if let (Filter::Visibility, Some(undo)) = (culprit, fixed.visibility.exported) {
        format!("{message}; {undo}")
    } else if left == 0 || culprit == Filter::Visibility || culprit == Filter::Devices {
        message
    } else {
        format!("{message}; {count} requested")
    })
}

/// The PID of the caller's MPS server where it is the only process NVML lists on the GPU.
fn own_mps_server_alone(gpu: &Gpu) -> Option<u32> {
    let mps = gpu.mps.as_ref().filter(|mps| !mps.foreign)?;
    let server = mps.server_pid?;
    match gpu.processes.as_deref()? {
        [only] if only.pid == server => Some(server),
        _ => None,
    }
}

/// Why an exclusive-process card is not free: only one context fits on it, and a second one
/// fails at cudaSetDevice. Names who holds it where NVML lists its processes.
fn exclusive_process_holder(gpu: &Gpu) -> String {
    match gpu.processes.as_deref() {
        Some(list @ [_, ..]) => format!(
            "compute mode is exclusive-process and {} holds its one CUDA context",
            describe_pids(list.iter().map(|p| p.pid))
        ),
        _ => "compute mode is exclusive-process and its processes cannot be listed: it may be in use"
            .to_owned(),
    }
}

pub(crate) fn describe_pids(pids: impl Iterator<Item = u32>) -> String {
    let pids: Vec<String> = pids.map(|p| p.to_string()).collect();
    match pids.len() {
        1 => format!("PID {}", pids[0]),
        n => format!("{n} processes (PIDs {})", pids.join(", ")),
    }
}

/// The probe as other gpurun launches leave it: memory they reserved and that NVML does not
/// show yet is not free. NVML's free memory is read before its process list, so a process
/// that appeared in between is in the list and not yet in the free figure: free is also at
/// most what the listed processes leave.
pub(crate) fn after_reservations(gpus: &[Gpu], reservations: &[Reservation]) -> Vec<Gpu> {
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

/// What an idle card keeps as used for the driver's own context, as a fraction of its total
/// (1/200 = 0.5%: 200 MiB of 40 GiB; real idle cards show a few MiB).
const IDLE_CONTEXT_DIVISOR: u64 = 200;

/// `--min-free auto` asks at most what the largest device this request allows could ever have
/// free (its total less the driver's reservation), and never less than the house rule: a run
/// that peaked near a card's size must not be refused for good, since refused runs add nothing
/// to the history that could change the answer. The lowered size and a line saying why.
pub(crate) fn auto_cap(gpus: &[Gpu], fixed: &Fixed) -> Option<(u64, String)> {
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
    use crate::options::count::Count;
    use crate::options::model::ModelPattern;
    use crate::probe::gpu::{test_gpu, test_mig};

    const GIB: u64 = 1 << 30;

    fn assessed(gpu: &Gpu, request: &Request, reservations: &[&Reservation]) -> Assessment {
        let visibility = Visibility::default();
        let fixed = Fixed { visibility: &visibility, devices: &None, excluded: &[], request };
        assess(gpu, &fixed, reservations, None)
    }

    /// `--health ignore would take them` is said only of GPUs that nothing but their health
    /// turned away.
    #[test]
    fn only_health_means_nothing_but_health() {
        let reason = || vec!["a reason".to_owned()];
        let sick = Assessment { index: 0, permanent: vec![], hard: vec![], soft: vec![], health: reason() };
        assert!(sick.only_health());
        assert!(!Assessment { health: vec![], ..sick.clone() }.only_health());
        assert!(!Assessment { permanent: reason(), ..sick.clone() }.only_health());
        assert!(!Assessment { hard: reason(), ..sick.clone() }.only_health());
        assert!(!Assessment { soft: reason(), ..sick.clone() }.only_health());
    }

    /// A card exactly at `--min-total`, or whose usable memory is exactly `--min-free`, passes;
    /// one byte more is never possible there.
    #[test]
    fn sizes_exactly_at_a_bound_pass() {
        let mut gpu = test_gpu(0);
        gpu.memory = Some(crate::probe::gpu::Memory {
            total_bytes: 80 * GIB,
            reserved_bytes: GIB,
            used_bytes: 0,
            free_bytes: 79 * GIB,
        });
        let total = |bytes| Request { min_total: Some(bytes), ..Request::default() };
        assert!(assessed(&gpu, &total(80 * GIB), &[]).eligible());
        // One byte more shows as 80.0: not quite the 80 GiB the card has.
        assert_eq!(assessed(&gpu, &total(80 * GIB + 1), &[]).permanent, ["total 80 GiB < 80.0 GiB"]);
        let free = |bytes| Request { min_free: Some(Threshold::Bytes(bytes)), ..Request::default() };
        assert!(assessed(&gpu, &free(79 * GIB), &[]).eligible());
        let past = assessed(&gpu, &free(79 * GIB + 1), &[]);
        assert!(
            past.permanent.len() == 1 && past.permanent[0].contains("(never: 79 GiB in total)"),
            "{past:?}"
        );
    }

    /// A MIG device under another launch's lease is one job's, whatever this launch asks; a
    /// whole GPU is only when the lease is exclusive.
    #[test]
    fn a_leased_mig_device_says_one_job_per_device() {
        let lease = |exclusive| Reservation {
            index: 0,
            pid: 4242,
            user: "alice".to_owned(),
            pending_bytes: 0,
            exclusive,
            queued: false,
        };
        let held = lease(true);
        let mig = test_mig(0, 0, "3g.40gb", 40);
        assert_eq!(
            assessed(&mig, &Request::default(), &[&held]).hard,
            ["a MIG device leased by gpurun PID 4242 (alice): one job per MIG device"]
        );
        assert_eq!(
            assessed(&test_gpu(0), &Request::default(), &[&held]).hard,
            ["reserved exclusively by gpurun PID 4242 (alice)"]
        );
        assert!(assessed(&test_gpu(0), &Request::default(), &[&lease(false)]).hard.is_empty());
    }

    fn with_visibility(
        gpus: &[Gpu],
        request: &Request,
        visibility: &Visibility,
        devices: Option<Vec<u32>>,
    ) -> Option<String> {
        impossible(gpus, &Fixed { visibility, devices: &devices, excluded: &[], request })
    }

    /// The one line that says why no state of the machine can meet a request, one case per
    /// filter in the order they are tried.
    #[test]
    fn impossible_names_the_first_filter_that_leaves_too_few() {
        let gpus = [test_gpu(0), test_gpu(1)];
        let all = Visibility::default();
        let two = Request { count: Count::exactly(2), ..Request::default() };
        let why = |request: &Request, visibility: &Visibility, devices| {
            with_visibility(&gpus, request, visibility, devices)
        };
        assert_eq!(why(&two, &all, None), None);
        let three = Request { count: Count::exactly(3), ..Request::default() };
        assert_eq!(why(&three, &all, None).unwrap(), "--gpus 3: this machine has 2 GPUs");
        let empty = Visibility {
            allowed: Some(vec![]),
            source: Some("CUDA_VISIBLE_DEVICES=".to_owned()),
            ..Visibility::default()
        };
        assert!(why(&two, &empty, None)
            .unwrap()
            .starts_with("--gpus 2: CUDA_VISIBLE_DEVICES is set but empty"));
        let one = Visibility {
            allowed: Some(vec![0]),
            source: Some("CUDA_VISIBLE_DEVICES=0".to_owned()),
            ..Visibility::default()
        };
        assert_eq!(why(&two, &one, None).unwrap(), "--gpus 2: CUDA_VISIBLE_DEVICES=0 allows only 1 GPU");
        // An empty source that still allows one GPU is not the empty variable.
        let odd = Visibility {
            allowed: Some(vec![0]),
            source: Some("CUDA_VISIBLE_DEVICES=".to_owned()),
            ..Visibility::default()
        };
        assert_eq!(why(&two, &odd, None).unwrap(), "--gpus 2: CUDA_VISIBLE_DEVICES= allows only 1 GPU");
        let exported = Visibility { exported: Some(crate::runtime::cuda::UNDO_EXPORT), ..one.clone() };
        assert!(why(&two, &exported, None).unwrap().ends_with(crate::runtime::cuda::UNDO_EXPORT));
        assert_eq!(why(&two, &all, Some(vec![1])).unwrap(), "--gpus 2: --devices/--exclude leave only 1 GPU");
        let model = Request { model: Some(ModelPattern("H100".to_owned())), ..two.clone() };
        assert_eq!(
            why(&model, &all, None).unwrap(),
            "--model H100: 0 of the GPUs gpurun may use match, 2 requested (models here: NVIDIA A100-SXM4-80GB)"
        );
        let total = Request { min_total: Some(100 * GIB), ..two.clone() };
        assert_eq!(
            why(&total, &all, None).unwrap(),
            "--min-total 100 GiB: no GPU has that much in total (the largest has 80 GiB)"
        );
        let free = Request { min_free: Some(Threshold::Bytes(90 * GIB)), ..two.clone() };
        assert_eq!(
            why(&free, &all, None).unwrap(),
            "--min-free: no GPU can ever have that much free (the largest GPU this request allows can have at most 80 GiB free)"
        );
        // One of two left: said with the count asked for.
        let mut small = test_gpu(1);
        small.memory = Some(crate::probe::gpu::Memory {
            total_bytes: 40 * GIB,
            reserved_bytes: 0,
            used_bytes: 0,
            free_bytes: 40 * GIB,
        });
        let mixed = [test_gpu(0), small];
        let big = Request { min_total: Some(60 * GIB), ..two.clone() };
        assert_eq!(
            with_visibility(&mixed, &big, &all, None).unwrap(),
            "--min-total 60 GiB: only 1 GPU has that much in total (the largest has 80 GiB); 2 requested"
        );
        let model_one = Request {
            model: Some(ModelPattern("A100".to_owned())),
            count: Count::exactly(3),
            mig: MigUse::Auto,
            ..Request::default()
        };
        let three_of_one = [test_gpu(0), test_gpu(1), test_mig(1, 0, "3g.40gb", 40)];
        assert!(with_visibility(&three_of_one, &model_one, &all, None)
            .unwrap()
            .starts_with("--gpus 3: this machine has 2 GPUs"));
        // A GPU in MIG mode and its one device: --visible-as index rules out the device, and
        // the refusal is the general one unless --mig only was asked for too.
        let mut parent = test_gpu(0);
        parent.mig_enabled = Some(true);
        let partitioned = [parent, test_mig(0, 0, "7g.80gb", 80)];
        let by_index = Request { index_only: true, ..Request::default() };
        assert!(with_visibility(&partitioned, &by_index, &all, None)
            .unwrap()
            .starts_with("--gpus 1: no GPU can be given (--mig auto;"));
        // Two asked of a machine with one whole GPU beside the partitioned one: the general
        // refusal (--mig auto), not --mig only's.
        let beside = [partitioned[0].clone(), partitioned[1].clone(), test_gpu(1)];
        assert!(with_visibility(&beside, &two, &all, None)
            .unwrap()
            .starts_with("--gpus 2: only 1 GPU can be given (--mig auto;"));
        // No GPU at all: what counts them says so under --mig never; otherwise the visibility.
        assert_eq!(
            with_visibility(&[], &Request::default(), &all, None).unwrap(),
            "--gpus 1: the inherited visibility allows no GPU"
        );
        let never = Request { mig: MigUse::Never, ..Request::default() };
        assert_eq!(with_visibility(&[], &never, &all, None).unwrap(), "--gpus 1: this machine has 0 GPUs");
        let only = Request { mig: MigUse::Only, ..by_index };
        assert_eq!(
            with_visibility(&partitioned, &only, &all, None).unwrap(),
            "--visible-as index --mig only: CUDA takes a MIG device only by its MIG- UUID"
        );
    }

    /// What keeps a context of this launch off a GPU: its compute mode, another user's MPS
    /// server, or (--mps) no server of ours to join.
    #[test]
    fn contexts_that_would_not_start_are_named() {
        let reasons = |gpu: &Gpu, request: &Request| assessed(gpu, request, &[]).reasons();
        let mut held = test_gpu(0);
        held.compute_mode = Some(ComputeMode::ExclusiveProcess);
        held.processes = Some(vec![crate::probe::gpu::GpuProcess {
            pid: 4242,
            used_bytes: Some(GIB),
            user: None,
            command: None,
        }]);
        assert!(reasons(&held, &Request::default()).contains(
            &"compute mode is exclusive-process and PID 4242 holds its one CUDA context".to_owned()
        ));
        held.processes = None;
        assert!(
            reasons(&held, &Request::default()).iter().any(|r| r
                == "compute mode is exclusive-process and its processes cannot be listed: it may be in use"),
            "{:?}",
            reasons(&held, &Request::default())
        );
        held.processes = Some(Vec::new());
        assert!(reasons(&held, &Request::default()).is_empty());
        let mut foreign = test_gpu(0);
        let server = |foreign| crate::probe::mps::Mps {
            server_pid: Some(7),
            server_user: Some("bob".to_owned()),
            foreign,
            clients: Vec::new(),
        };
        foreign.mps = Some(server(true));
        assert_eq!(
            reasons(&foreign, &Request::default()),
            ["MPS server of user bob (PID 7): our CUDA context would wait for that user's clients"]
        );
        foreign.mps = Some(server(false));
        assert!(reasons(&foreign, &Request::default()).is_empty());
        let plain = test_gpu(0);
        assert!(reasons(&plain, &Request::default()).is_empty());
        let join = Request { mps: true, ..Request::default() };
        assert_eq!(reasons(&plain, &join), ["no MPS server of yours runs on it"]);
        let pipe = std::path::PathBuf::from("/tmp/nvidia-mps");
        let no_daemon = Request { mps_daemon: Some((pipe.clone(), false)), ..join.clone() };
        assert!(reasons(&plain, &no_daemon)[0].starts_with(
            "no MPS server of yours runs on it, and no MPS control daemon serves /tmp/nvidia-mps"
        ));
        let daemon = Request { mps_daemon: Some((pipe, true)), ..join };
        assert!(reasons(&plain, &daemon).is_empty());
    }

    /// `--min-free auto` is capped at what the largest allowed GPU can have free when idle: its
    /// total less the reservation and 0.5% for the driver's context; never below the house floor.
    #[test]
    fn auto_is_capped_at_the_largest_allowed_idle_card() {
        let card = |index, total_gib: u64| {
            let mut gpu = test_gpu(index);
            gpu.memory = Some(crate::probe::gpu::Memory {
                total_bytes: total_gib * GIB,
                reserved_bytes: GIB / 2,
                used_bytes: 0,
                free_bytes: total_gib * GIB - GIB / 2,
            });
            gpu
        };
        let gpus = [card(0, 80), card(1, 40)];
        let all = Visibility::default();
        let auto = |asked: u64| Request {
            min_free: Some(Threshold::Bytes(asked)),
            min_free_auto: true,
            ..Request::default()
        };
        let cap = |request: &Request, devices: Option<Vec<u32>>| {
            auto_cap(&gpus, &Fixed { visibility: &all, devices: &devices, excluded: &[], request })
        };
        // 80 GiB - 0.5 GiB - 80 GiB / 200 = 79.1 GiB.
        let idle_80 = 80 * GIB - GIB / 2 - 80 * GIB / 200;
        let (lowered, why) = cap(&auto(100 * GIB), None).unwrap();
        assert_eq!(lowered, idle_80);
        assert_eq!(
            why,
            "auto: lowered to 79.1 GiB: the largest GPU this request allows can have at most 79.1 GiB free when idle"
        );
        assert_eq!(cap(&auto(idle_80), None), None, "exactly the cap is not lowered");
        assert_eq!(cap(&auto(idle_80 + 1), None).map(|(bytes, _)| bytes), Some(idle_80));
        // Only the 40 GiB card allowed: its idle room is the cap.
        let idle_40 = 40 * GIB - GIB / 2 - 40 * GIB / 200;
        assert_eq!(cap(&auto(idle_80), Some(vec![1])).map(|(bytes, _)| bytes), Some(idle_40));
        // Not auto: nothing to lower.
        let given = Request { min_free_auto: false, ..auto(100 * GIB) };
        assert_eq!(cap(&given, None), None);
        // The house floor stands above what a card can have.
        let floored = Request { min_free_floor: Some(Threshold::Bytes(90 * GIB)), ..auto(100 * GIB) };
        assert_eq!(cap(&floored, None).map(|(bytes, _)| bytes), Some(90 * GIB));
    }
}
