//! Pure selection: the filters' verdicts, the ranking and the set choice put together into one
//! `Decision`. No I/O: the probe, the inherited visibility and the request come in, a
//! `Decision` goes out.

use crate::options::count::Count;
use crate::options::size::Threshold;
use crate::options::Fallback;
use crate::probe::gpu::{Gpu, Topology};
use crate::runtime::Visibility;
use crate::select::explain;
use crate::select::filters::{after_reservations, assess, auto_cap, impossible, Fixed};
use crate::select::ranking::{rank, tiered};
pub(crate) use crate::select::request::{
    resolve_refs, Assessment, DeviceError, HeldBack, Request, Reservation,
};
use crate::select::sets::{choose_set, required_link, set_refusal};

/// The result of selection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub(crate) assessments: Vec<Assessment>,
    pub(crate) outcome: Outcome,
    /// Why no state of the machine can meet the request, also when `--fallback cpu` answers it.
    pub(crate) never: Option<String>,
    /// Enough GPUs qualify one by one, but no set of them is of one model or linked as asked.
    pub(crate) set_reason: Option<String>,
    /// `--min-free auto` was lowered to what a card can have free: the bytes, and why.
    pub(crate) min_free_note: Option<(u64, String)>,
    /// Each GPU that qualified and was not chosen, and why in words (a selection only).
    pub(crate) passed_over: Vec<(u32, String)>,
}

impl Decision {
    /// A selection made without assessing (no GPU asked for, or a `--per-rank` rank's part of
    /// the set its group chose).
    pub(crate) fn selected(chosen: Vec<u32>) -> Decision {
        Decision {
            assessments: Vec::new(),
            outcome: Outcome::Selected(chosen),
            never: None,
            set_reason: None,
            min_free_note: None,
            passed_over: Vec::new(),
        }
    }

    /// The `--min-free` this decision applied: `asked`, or what `--min-free auto` was lowered to.
    /// Leases and tickets record this one, so that other launches replay the same request.
    pub(crate) fn min_free(&self, asked: Option<Threshold>) -> Option<Threshold> {
        self.min_free_note.as_ref().map(|(bytes, _)| Threshold::Bytes(*bytes)).or(asked)
    }

    /// The GPUs that could ever qualify for this request (a waiter holds back only these).
    pub(crate) fn possible(&self) -> Vec<u32> {
        self.assessments.iter().filter(|a| a.possible()).map(|a| a.index).collect()
    }

    /// Why a waiter cannot start now, in the words of the exit-75 table: `needs 2 GPUs with
    /// 20 GiB free: GPU 0 reserved by gpurun PID 7 (bob), GPU 3 free 12 GiB < 20 GiB`.
    pub(crate) fn why_not(&self, request: &Request) -> String {
        let needs = needs(request);
        let blocked = self.blockers();
        match blocked.is_empty() {
            true => needs,
            false => format!("{needs}: {}", blocked.join(", ")),
        }
    }

    /// What holds each GPU that could qualify but does not now: `GPU 0 reserved exclusively
    /// by gpurun PID 4242 (alice, python)`.
    pub(crate) fn blockers(&self) -> Vec<String> {
        self.assessments
            .iter()
            .filter(|a| a.possible() && !a.eligible())
            .map(|a| format!("{} {}", crate::probe::gpu::label(a.index), a.reasons().join("; ")))
            .collect()
    }
}

/// What the request needs, in words: `needs 2 GPUs with 8 GiB free, exclusive`.
pub(crate) fn needs(request: &Request) -> String {
    let count = request.count;
    let mut needs = format!("needs {count} GPU{}", if count == Count::exactly(1) { "" } else { "s" });
    if let Some(threshold) = request.min_free {
        needs.push_str(&format!(" with {threshold} free"));
    }
    if request.exclusive {
        needs.push_str(", exclusive");
    }
    needs
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
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

/// The GPUs whose links a multi-GPU request reads: the whole GPUs no state of the machine
/// rules out, best first by the policy, at most `most`. Links are asked per pair, so a cap
/// keeps a 64-GPU machine about as quick as an 8-GPU one; the sets worth having are among the
/// best-ranked GPUs.
pub(crate) fn link_candidates(
    gpus: &[Gpu],
    visibility: &Visibility,
    request: &Request,
    most: usize,
) -> Vec<u32> {
    let Ok(decision) = decide(gpus, visibility, request, &[], &[]) else { return Vec::new() };
    let possible: Vec<&Gpu> = decision
        .assessments
        .iter()
        .filter(|a| a.possible())
        .filter_map(|a| gpus.iter().find(|gpu| gpu.index == a.index && gpu.mig.is_none()))
        .collect();
    let mut ranked = tiered(&possible, request.policy, request.seed);
    ranked.truncate(most);
    ranked
}

pub(crate) fn decide(
    gpus: &[Gpu],
    visibility: &Visibility,
    request: &Request,
    reservations: &[Reservation],
    held_back: &[HeldBack],
) -> Result<Decision, DeviceError> {
    decide_with_links(gpus, visibility, request, reservations, held_back, None)
}

/// `decide`, with the links between the GPUs (`None`: not probed; links then do not count).
pub(crate) fn decide_with_links(
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
    let ranked = tiered(&eligible, request.policy, request.seed);
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
    let passed_over = match &set {
        Some(chosen) if !chosen.is_empty() => explain::passed_over(chosen, &ranked, request, gpus, topology),
        _ => Vec::new(),
    };
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
                    .filter(|a| {
                        a.permanent.is_empty() && a.hard.is_empty() && a.health.is_empty() && !a.eligible()
                    })
                    .map(by_index)
                    .collect();
                let mut chosen = ranked.clone();
                chosen.extend(tiered(&relaxed, request.policy, request.seed));
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
    Ok(Decision { assessments, outcome, never, set_reason, min_free_note: auto_cap, passed_over })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::options::devices::parse_device_list;
    use crate::options::devices::DeviceRef;
    use crate::options::model::ModelPattern;
    use crate::options::{MigUse, Policy};
    use crate::probe::gpu::{test_gpu, ComputeMode, GpuProcess, Memory, Utilization};

    pub(crate) fn unrestricted() -> Visibility {
        Visibility::default()
    }

    pub(crate) fn with_load(index: u32, free_gib: u64, util: u32) -> Gpu {
        let mut gpu = test_gpu(index);
        gpu.memory = Some(Memory {
            total_bytes: 80 << 30,
            reserved_bytes: 0,
            used_bytes: (80 - free_gib) << 30,
            free_bytes: free_gib << 30,
        });
        gpu.utilization = Some(Utilization { gpu_percent: util, memory_percent: Some(0) });
        gpu
    }

    fn chosen(gpus: &[Gpu], request: &Request) -> Outcome {
        decide(gpus, &unrestricted(), request, &[], &[]).unwrap().outcome
    }

    #[test]
    fn a_set_keeps_to_one_fabric_clique() {
        use crate::probe::fabric::{Fabric, FabricHealth};
        // Most free first: 0, 2, 1, 3; cliques {0, 1} and {2, 3}.
        let gpus: Vec<Gpu> = [(0, 70, 1), (1, 50, 1), (2, 60, 2), (3, 40, 2)]
            .into_iter()
            .map(|(index, free, clique_id)| {
                let mut gpu = with_load(index, free, 0);
                gpu.fabric = Some(Fabric {
                    state: "completed",
                    clique_id,
                    cluster_uuid: "c".to_owned(),
                    health: FabricHealth { state: "ok", reasons: Vec::new() },
                });
                gpu
            })
            .collect();
        let two = Request { count: Count::exactly(2), ..Request::default() };
        assert_eq!(chosen(&gpus, &two), Outcome::Selected(vec![0, 1]));
        // And --dry-run says why GPU 2, freer than 1, was left.
        let ranked = [0, 2, 1, 3];
        let why = crate::select::explain::passed_over(&[0, 1], &ranked, &two, &gpus, None);
        assert_eq!(why[0], (2, "the pair 0-1 is one NVLink fabric clique".to_owned()));
        // Without a fabric, the two most free.
        let plain: Vec<Gpu> = gpus.iter().cloned().map(|gpu| Gpu { fabric: None, ..gpu }).collect();
        assert_eq!(chosen(&plain, &two), Outcome::Selected(vec![0, 2]));
    }

    /// The decision's own summaries: the --min-free it applied, the GPUs that could ever
    /// qualify, and what holds those that do not now.
    #[test]
    fn a_decision_says_what_it_applied_and_what_blocks() {
        let gpus = vec![with_load(0, 70, 0), with_load(1, 10, 0), with_load(2, 70, 0)];
        let request = Request {
            min_free: Some(Threshold::Bytes(20 << 30)),
            devices: Some(vec![DeviceRef::Index(0), DeviceRef::Index(1)]),
            ..Request::default()
        };
        let decision = decide(&gpus, &unrestricted(), &request, &[], &[]).unwrap();
        // GPU 2 is outside --devices: never possible; GPU 1 lacks room now.
        assert_eq!(decision.possible(), [0, 1]);
        assert_eq!(decision.blockers(), ["GPU 1 free 10 GiB < 20 GiB"]);
        assert_eq!(decision.min_free(request.min_free), request.min_free);
        // --min-free auto above any card's room: lowered, and the lowered size is the one applied.
        let auto = Request {
            min_free: Some(Threshold::Bytes(200 << 30)),
            min_free_auto: true,
            ..Request::default()
        };
        let lowered = decide(&gpus, &unrestricted(), &auto, &[], &[]).unwrap();
        let (bytes, _) = lowered.min_free_note.clone().expect("lowered");
        assert_eq!(lowered.min_free(auto.min_free), Some(Threshold::Bytes(bytes)));
        assert!(matches!(lowered.outcome, Outcome::Refused { .. }), "{:?}", lowered.outcome);
    }

    /// `--same-model` (or a required link) that no GPUs gpurun may use can ever meet is
    /// impossible (125), not a wait; for one GPU, or where too few are possible anyway, the set
    /// rule is not what refuses.
    #[test]
    fn a_set_rule_no_state_can_meet_is_impossible() {
        let mut other = with_load(1, 70, 0);
        other.name = Some("NVIDIA H100 80GB HBM3".to_owned());
        let gpus = vec![with_load(0, 70, 0), other];
        let same = |count| Request { count: Count::exactly(count), same_model: true, ..Request::default() };
        match chosen(&gpus, &same(2)) {
            Outcome::Impossible(why) => assert!(why.starts_with("--same-model --gpus 2: no 2 of"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(chosen(&gpus, &same(1)), Outcome::Selected(vec![0]));
        match chosen(&gpus, &same(3)) {
            Outcome::Impossible(why) => assert_eq!(why, "--gpus 3: this machine has 2 GPUs"),
            other => panic!("{other:?}"),
        }
        // Both possible but one held now: a wait (75), since a state exists that meets it.
        let mut twin = with_load(1, 70, 0);
        twin.memory = Some(Memory {
            total_bytes: 80 << 30,
            reserved_bytes: 0,
            used_bytes: 75 << 30,
            free_bytes: 5 << 30,
        });
        let request = Request { min_free: Some(Threshold::Bytes(20 << 30)), ..same(2) };
        assert!(matches!(chosen(&[with_load(0, 70, 0), twin], &request), Outcome::Refused { qualified: 1 }));
    }

    /// What a decision records beside its outcome: `never` (no state can meet it: 125) only
    /// when too few GPUs are eligible, and `set_reason` only for a set rule that the eligible
    /// GPUs cannot meet now.
    #[test]
    fn never_and_set_reason_are_said_only_where_they_hold() {
        let decide_on = |gpus: &[Gpu], request: &Request, reservations: &[Reservation]| {
            decide(gpus, &unrestricted(), request, reservations, &[]).unwrap()
        };
        let two = vec![with_load(0, 70, 0), with_load(1, 70, 0)];
        let count = |n| Request { count: Count::exactly(n), ..Request::default() };
        let fits = decide_on(&two, &count(2), &[]);
        assert_eq!((fits.never.as_deref(), fits.set_reason.as_deref()), (None, None));
        let too_many = decide_on(&two, &count(3), &[]);
        assert_eq!(too_many.never.as_deref(), Some("--gpus 3: this machine has 2 GPUs"));
        assert_eq!(too_many.set_reason, None);
        // Two A100s and an H100; one A100 held exclusively: one of each model is free now.
        let mut h100 = with_load(1, 70, 0);
        h100.name = Some("NVIDIA H100 80GB HBM3".to_owned());
        let three = vec![with_load(0, 70, 0), h100, with_load(2, 70, 0)];
        let held = Reservation {
            index: 2,
            pid: 7,
            user: "bob".to_owned(),
            pending_bytes: 0,
            exclusive: true,
            queued: false,
        };
        let plain = decide_on(&three, &count(3), std::slice::from_ref(&held));
        assert_eq!((plain.never.as_deref(), plain.set_reason.as_deref()), (None, None));
        let same = Request { same_model: true, ..count(2) };
        let waits = decide_on(&three, &same, &[held]);
        assert!(matches!(waits.outcome, Outcome::Refused { qualified: 2 }), "{:?}", waits.outcome);
        assert_eq!(waits.never, None, "a state exists that meets it: GPU 2 freed");
        assert!(waits
            .set_reason
            .as_deref()
            .is_some_and(|why| why.starts_with("--same-model --gpus 2: no 2 of those")));
    }

    #[test]
    fn policies_rank_as_documented() {
        // (free GiB, util %): 0 (10, 0), 1 (70, 45), 2 (40, 10), 3 (70, 20): none busy.
        let mut gpus =
            vec![with_load(0, 10, 0), with_load(1, 70, 45), with_load(2, 40, 10), with_load(3, 70, 20)];
        let order = |gpus: &[Gpu], policy| match chosen(
            gpus,
            &Request { count: Count::exactly(4), policy, ..Request::default() },
        ) {
            Outcome::Selected(order) => order,
            other => panic!("{other:?}"),
        };
        assert_eq!(order(&gpus, Policy::MostFree), vec![3, 1, 2, 0]);
        assert_eq!(order(&gpus, Policy::LeastUtil), vec![0, 2, 3, 1]);
        // 0.7 x free + 0.3 x (100 - util): 0 -> 37, 1 -> 65.5, 2 -> 55, 3 -> 73
        assert_eq!(order(&gpus, Policy::Balanced), vec![3, 1, 2, 0]);
        assert_eq!(order(&gpus, Policy::Pack), vec![0, 2, 3, 1]);
        assert_eq!(order(&gpus, Policy::Index), vec![0, 1, 2, 3]);
        // At 90% GPU 1 is busy: after every GPU that is not, whatever the policy.
        gpus[1] = with_load(1, 70, 90);
        for policy in [Policy::MostFree, Policy::Balanced, Policy::Index, Policy::Random] {
            assert_eq!(order(&gpus, policy).last(), Some(&1), "{policy:?}");
        }
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

    /// The edges (issue 44): free memory exactly at --min-free qualifies, one byte less does
    /// not; free exactly at the house floor may still be taken by --fallback best, below it never.
    #[test]
    fn free_memory_exactly_at_the_threshold_and_at_the_house_floor() {
        let exactly = |free_bytes: u64| {
            let mut gpu = with_load(0, 0, 0);
            gpu.memory = Some(Memory {
                total_bytes: 80 << 30,
                reserved_bytes: 0,
                used_bytes: (80 << 30) - free_bytes,
                free_bytes,
            });
            gpu
        };
        let request = Request { min_free: Some(Threshold::Bytes(8 << 30)), ..Request::default() };
        assert_eq!(chosen(&[exactly(8 << 30)], &request), Outcome::Selected(vec![0]));
        assert_eq!(chosen(&[exactly((8 << 30) - 1)], &request), Outcome::Refused { qualified: 0 });
        let floored = Request {
            min_free: Some(Threshold::Bytes(16 << 30)),
            min_free_floor: Some(Threshold::Bytes(8 << 30)),
            fallback: Some(Fallback::Best),
            ..Request::default()
        };
        assert_eq!(chosen(&[exactly(8 << 30)], &floored), Outcome::FallbackBest(vec![0]), "at the floor");
        let below = chosen(&[exactly((8 << 30) - 1)], &floored);
        assert!(
            !matches!(below, Outcome::FallbackBest(_) | Outcome::Selected(_)),
            "below the floor: {below:?}"
        );
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
}
