//! What others hold, as the policy sees it (leases, and the waiters ahead, first come first
//! served), and what a decision means for this launch: its GPUs, or exit 75's explanation.

use crate::options::count::Count;
use crate::options::devices::DeviceRef;
use crate::probe::gpu::{label, Machine};
use crate::process::procfs;
use crate::reserve::lease::Lease;
use crate::reserve::ticket::Waiter;
use crate::runtime::Visibility;
use crate::select::policy::{self, Decision, HeldBack, Outcome, Request, Reservation};

/// Other launches' leases as the policy sees them.
pub(super) fn reservations(leases: &[Lease], machine: &Machine) -> Vec<Reservation> {
    let own_pid = std::process::id();
    leases
        .iter()
        .filter(|lease| lease.pid != own_pid)
        .filter_map(|lease| {
            let gpu = machine.devices().find(|gpu| gpu.is_leased_as(&lease.uuid))?;
            // What the lease holder's processes already use shows in NVML's numbers; the rest of
            // what it reserved does not yet.
            let shown: u64 = gpu
                .processes
                .iter()
                .flatten()
                .filter(|p| procfs::descends_from(p.pid, lease.pid))
                .filter_map(|p| p.used_bytes)
                .sum();
            Some(Reservation {
                index: gpu.index,
                pid: lease.pid,
                user: lease.user.clone(),
                pending_bytes: lease.reserved_bytes.saturating_sub(shown),
                // A MIG device is a device of its own, too small to share: one lease, one job,
                // whether or not the holder asked for --exclusive.
                exclusive: lease.exclusive || gpu.mig.is_some(),
                queued: false,
            })
        })
        .collect()
}

/// What the waiters ahead keep from this launch, first come first served. Each, in queue order,
/// is tried against the machine as the ones before it would leave it: one that could be served
/// now keeps what it would take (as the lease it is about to hold); one that cannot keeps every
/// GPU it could ever use, so that no later launch starves it. A waiter keeps nothing it could
/// never use.
/// Also says, for each waiter, why it cannot start now ("can start now" if it can).
pub(super) fn queue_ahead<'a>(
    ahead: impl Iterator<Item = &'a Waiter>,
    machine: &Machine,
    reservations: &mut Vec<Reservation>,
) -> (Vec<HeldBack>, Vec<Queued>) {
    let mut held: Vec<HeldBack> = Vec::new();
    let mut queue = Vec::new();
    let unrestricted = Visibility::default();
    for waiter in ahead {
        let possible: Vec<u32> = waiter
            .gpus
            .iter()
            .filter_map(|uuid| machine.devices().find(|gpu| gpu.is_leased_as(uuid)))
            .map(|gpu| gpu.index)
            .collect();
        let request = Request {
            count: waiter.needs.count,
            min_free: waiter.needs.min_free,
            max_util: waiter.needs.max_util,
            exclusive: waiter.needs.exclusive,
            devices: Some(possible.iter().map(|&i| DeviceRef::Index(i)).collect()),
            policy: waiter.needs.policy,
            seed: u64::from(waiter.pid),
            ..Request::default()
        };
        let decision = policy::decide(&machine.all_devices(), &unrestricted, &request, reservations, &held);
        let can_start = matches!(&decision, Ok(Decision { outcome: Outcome::Selected(_), .. }));
        let reason = match &decision {
            Ok(Decision { outcome: Outcome::Selected(_), .. }) => "can start now".to_owned(),
            Ok(decision) => decision.why_not(&request),
            Err(error) => error.to_string(),
        };
        queue.push(Queued { waiter: waiter.clone(), reason, can_start });
        match decision.map(|d| d.outcome) {
            Ok(Outcome::Selected(chosen)) => {
                for index in chosen {
                    let total = machine.device(index).and_then(|gpu| gpu.memory);
                    reservations.push(Reservation {
                        index,
                        pid: waiter.pid,
                        user: waiter.user.clone(),
                        pending_bytes: waiter
                            .needs
                            .min_free
                            .map(|t| t.bytes_on(total.map_or(0, |m| m.total_bytes)))
                            .unwrap_or(0),
                        exclusive: waiter.needs.exclusive,
                        queued: true,
                    });
                }
            }
            _ => {
                for index in possible {
                    if !held.iter().any(|h| h.index == index) {
                        held.push(HeldBack { index, pid: waiter.pid, user: waiter.user.clone() });
                    }
                }
            }
        }
    }
    (held, queue)
}

/// A launch waiting in the queue, and why it cannot start now.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Queued {
    #[serde(flatten)]
    pub(crate) waiter: Waiter,
    pub(crate) reason: String,
    /// The machine could serve it now, as the waiters before it would leave it.
    #[serde(skip)]
    pub(crate) can_start: bool,
}

/// The chosen GPUs, or exit 75's text. Fallbacks say what they did.
pub(super) fn chosen_gpus(
    machine: &Machine,
    decision: &Decision,
    requested: Count,
    visibility: &Visibility,
) -> Result<Vec<u32>, String> {
    match &decision.outcome {
        Outcome::Selected(chosen) => Ok(chosen.clone()),
        Outcome::FallbackBest(chosen) => {
            for index in chosen {
                let assessment = decision.assessments.iter().find(|a| a.index == *index);
                if let Some(a) = assessment.filter(|a| !a.eligible()) {
                    tracing::warn!(
                        "taking {} anyway (--fallback best): {}",
                        label(*index),
                        a.reasons().join("; ")
                    );
                }
            }
            Ok(chosen.clone())
        }
        Outcome::FallbackCpu => {
            tracing::warn!("not enough GPUs qualify; running with no GPU visible (--fallback cpu)");
            Ok(Vec::new())
        }
        Outcome::Refused { qualified } => {
            let mut text = refusal(machine, decision, requested, *qualified);
            if let Some(undo) =
                visibility.exported.filter(|_| machine.devices().any(|gpu| !visibility.allows(gpu.index)))
            {
                text.push_str(&format!("\n  {undo}"));
            }
            Err(text)
        }
        Outcome::Impossible(why) => Err(why.clone()),
    }
}

/// Exit 75's explanation: every GPU and why it was turned away.
pub(crate) fn refusal(machine: &Machine, decision: &Decision, requested: Count, qualified: u32) -> String {
    let mut text = format!(
        "not enough GPUs: {requested} requested, {qualified} {}",
        if qualified == 1 { "qualifies" } else { "qualify" }
    );
    if let Some(why) = &decision.set_reason {
        text.push_str(&format!(", but {why}"));
    }
    let sick = decision.assessments.iter().filter(|a| a.only_health()).count() as u32;
    if sick > 0 && qualified + sick >= requested.min {
        text.push_str(
            "; only GPUs turned away for their health could make up the rest (--health ignore would take them)",
        );
    }
    let verdicts: Vec<(&crate::probe::gpu::Gpu, String)> = machine
        .devices()
        .filter(|gpu| !gpu.in_mig_mode())
        .map(|gpu| {
            let verdict = match decision.assessments.iter().find(|a| a.index == gpu.index) {
                Some(a) if a.eligible() => "qualifies".to_owned(),
                Some(a) => a.reasons().join("; "),
                None => "not assessed".to_owned(),
            };
            (gpu, verdict)
        })
        .collect();
    // One reason for every GPU (the machine's, like no MPS daemon for --mps): said once.
    if let [(_, first), rest @ ..] = &verdicts[..] {
        if rest.len() >= 2 && rest.iter().all(|(_, verdict)| verdict == first) {
            text.push_str(&format!("\n  all {} GPUs: {first}", verdicts.len()));
            return text;
        }
    }
    for (gpu, verdict) in verdicts {
        // "GPU 3: free 6.1 GiB < 8 GiB" first (what people grep for), the model after.
        text.push_str(&format!(
            "\n  {}: {verdict} ({})",
            label(gpu.index),
            gpu.name.as_deref().unwrap_or("unknown model")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::gpu::test_gpu;
    use crate::reserve::ticket::Needs;

    fn waiter(pid: u32, gpus: &[u32], count: u32, machine: &Machine) -> Waiter {
        Waiter {
            pid,
            uid: 0,
            user: "alice".to_owned(),
            since_ns: u64::from(pid),
            gpus: gpus.iter().map(|&i| machine.gpus[i as usize].uuid.clone().unwrap()).collect(),
            request: String::new(),
            needs: Needs {
                count: Count::exactly(count),
                min_free: None,
                max_util: None,
                exclusive: true,
                policy: crate::options::Policy::Index,
            },
        }
    }

    #[test]
    fn waiters_ahead_keep_what_they_would_take_or_all_they_could_use() {
        let machine = Machine {
            vendor: Default::default(),
            also_amd_gpus: None,
            driver_version: None,
            cuda_driver_version: None,
            gpus: (0..4).map(test_gpu).collect(),
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        };
        // W1 can be served now and would take GPU 0; W2 needs three of {0, 1, 2}, which it cannot
        // have while W1 takes GPU 0, so it keeps all three; GPU 3 is nobody's.
        let ahead = [waiter(1, &[0, 1, 2, 3], 1, &machine), waiter(2, &[0, 1, 2], 3, &machine)];
        let mut reserved = Vec::new();
        let (held, queue) = queue_ahead(ahead.iter(), &machine, &mut reserved);
        assert_eq!(
            reserved.iter().map(|r| (r.index, r.pid, r.queued)).collect::<Vec<_>>(),
            vec![(0, 1, true)]
        );
        assert_eq!(held.iter().map(|h| (h.index, h.pid)).collect::<Vec<_>>(), vec![(0, 2), (1, 2), (2, 2)]);
        // Each waiter says why it waits (or that it can start).
        assert_eq!(queue[0].reason, "can start now");
        assert!(
            queue[1].reason.starts_with("needs 3 GPUs, exclusive: GPU 0 held for gpurun PID 1"),
            "{}",
            queue[1].reason
        );
        // Eight single-GPU waiters ahead on eight free cards each keep one: nothing is left.
        let machine = Machine {
            vendor: Default::default(),
            also_amd_gpus: None,
            driver_version: None,
            cuda_driver_version: None,
            gpus: (0..8).map(test_gpu).collect(),
            migs: Vec::new(),
            topology: None,
            excluded: Vec::new(),
            confidential_computing: None,
        };
        let all: Vec<u32> = (0..8).collect();
        let ahead: Vec<Waiter> = (1..=8).map(|pid| waiter(pid, &all, 1, &machine)).collect();
        let mut reserved = Vec::new();
        assert!(queue_ahead(ahead.iter(), &machine, &mut reserved).0.is_empty());
        let mut taken: Vec<u32> = reserved.iter().map(|r| r.index).collect();
        taken.sort_unstable();
        assert_eq!(taken, all);
    }
}
