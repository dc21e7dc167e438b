//! The selection's properties, over random machines and requests (proptest): whatever is
//! asked, every chosen GPU passes every filter the request names, the count is honoured, and
//! most-free takes the GPUs with the most free memory. Unit tests only.
#![cfg(test)]

use proptest::prelude::*;

use crate::options::count::Count;
use crate::options::model::ModelPattern;
use crate::options::size::Threshold;
use crate::options::{Policy, TopologyUse};
use crate::probe::gpu::{Gpu, GpuProcess, Memory, Utilization};
use crate::probe::health::{Health, HealthState};
use crate::runtime::Visibility;
use crate::select::policy::tests::{unrestricted, with_load};
use crate::select::policy::{decide, Outcome, Request};

fn arbitrary_gpu() -> impl Strategy<Value = Gpu> {
    (
        0u64..=80,
        prop::option::of(0u32..=100),
        prop::option::of(0usize..3),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        0usize..3,
        prop::sample::select(vec![
            HealthState::Ok,
            HealthState::Ok,
            HealthState::Degraded,
            HealthState::Unhealthy,
        ]),
    )
        .prop_map(|(free_gib, util, processes, broken, unknown_memory, model, health)| {
            let mut gpu = with_load(0, free_gib, 0);
            gpu.utilization = util.map(|gpu_percent| Utilization { gpu_percent, memory_percent: Some(0) });
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
            gpu.health = Health { state: health, reasons: vec!["test".to_owned()], ..Health::default() };
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
        && gpu.health.state != HealthState::Unhealthy
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
                // The busy rule: no busy GPU chosen while a qualifying one that is not busy
                // is left out; and every eligible GPU left out is said to be passed over.
                let left_out: Vec<&Gpu> = gpus
                    .iter()
                    .filter(|g| passes_every_filter(g, &request, &visibility) && !chosen.contains(&g.index))
                    .collect();
                // With health: no chosen GPU is in a worse tier (degraded after healthy, busy
                // after not busy) than one left out.
                for left in &left_out {
                    for &index in chosen {
                        let taken = crate::select::ranking::tier(&gpus[index as usize]);
                        prop_assert!(taken <= crate::select::ranking::tier(left), "GPU {} taken over GPU {}", index, left.index);
                    }
                }
                let mut left: Vec<u32> = match chosen.is_empty() {
                    true => Vec::new(),
                    false => left_out.iter().map(|g| g.index).collect(),
                };
                let mut said: Vec<u32> = decision.passed_over.iter().map(|(i, _)| *i).collect();
                left.sort_unstable();
                said.sort_unstable();
                prop_assert_eq!(left, said);
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
            // Within the tiers (health, then busy): by free memory; a better tier first.
            let free = |i: u32| gpus[i as usize].memory.map(|m| m.free_bytes);
            let tier = |i: u32| crate::select::ranking::tier(&gpus[i as usize]);
            let eligible = |g: &&Gpu| g.error.is_none() && g.health.state != HealthState::Unhealthy;
            for gpu in gpus.iter().filter(eligible).filter(|g| !chosen.contains(&g.index)) {
                for &taken in &chosen {
                    prop_assert!(tier(taken) <= tier(gpu.index), "GPU {} left out for {}", gpu.index, taken);
                    if tier(taken) == tier(gpu.index) {
                        prop_assert!(free(gpu.index) <= free(taken), "GPU {} left out for {}", gpu.index, taken);
                    }
                }
            }
        }
    }
}

proptest! {
    /// Issue 63: a choice made on deferred readings (the deferred GPUs taken as idle and
    /// healthy, the taken ones read, the choice made again) is the choice every reading up
    /// front gives, whatever is deferred; and with nothing chosen, the whole decision is.
    #[test]
    fn deferring_readings_never_changes_the_choice(
        gpus in arbitrary_machine(),
        request in arbitrary_request(),
        same_model in any::<bool>(),
        deferred in prop::collection::vec(any::<bool>(), 10),
    ) {
        use crate::probe::deferred::Deferred;
        use crate::probe::gpu::Machine;
        prop_assume!(request.policy != Policy::Random);
        let request = Request { same_model, ..request };
        let truth = Machine::of(Default::default(), gpus);
        let mut unread = truth.clone();
        for (gpu, defer) in unread.gpus.iter_mut().zip(&deferred) {
            if *defer {
                *gpu = Gpu { readings_deferred: true, utilization: None, health: Health::default(), ..gpu.clone() };
            }
        }
        let visibility = unrestricted();
        let full = decide(&truth.gpus, &visibility, &request, &[], &[]).unwrap();
        let mut asked: Vec<u32> = Vec::new();
        let lazy = crate::select::deferred::decide_reading(
            &mut unread,
            true,
            |gpus| decide(gpus, &visibility, &request, &[], &[]),
            |gpus| {
                asked.extend(gpus);
                Ok(gpus
                    .iter()
                    .map(|&index| {
                        let gpu = &truth.gpus[index as usize];
                        Deferred { gpu: index, utilization: gpu.utilization, health: gpu.health.clone(), fabric: None }
                    })
                    .collect())
            },
        )
        .unwrap();
        match &full.outcome {
            Outcome::Selected(chosen) => {
                prop_assert_eq!(&lazy.outcome, &full.outcome);
                // A GPU read is one some choice along the way took.
                prop_assert!(asked.len() <= truth.gpus.len());
                for index in chosen {
                    prop_assert!(!unread.gpus[*index as usize].readings_deferred);
                }
            }
            _ => prop_assert_eq!(lazy, full),
        }
    }
}
