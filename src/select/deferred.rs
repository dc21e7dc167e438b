//! The choice made on readings the probe deferred (`probe::deferred`): each deferred GPU is
//! taken to be the best it could be (idle, and as healthy as its fabric says), the GPUs the
//! choice takes are read, and the choice is made again, until it takes only GPUs that were
//! read. Reading a GPU can only make it worse than assumed, and no rule of the choice prefers a
//! GPU for another's being worse, so the answer is the one every reading up front would give
//! (the property in `properties.rs`), at the cost of reading the GPUs taken: one, for
//! `--gpus 1` on an idle machine.
//!
//! Where that does not hold, everything deferred is read before the answer: a refusal (it names
//! every GPU's reason), `--policy random` (its shuffle depends on which GPUs qualify), and a
//! queue ahead (each waiter's claim is worked out from every GPU).

use crate::probe::deferred::Deferred;
use crate::probe::gpu::{Gpu, Machine, Utilization};
use crate::select::policy::{Decision, Outcome};

/// The devices as the choice sees them: a deferred GPU idle (0%).
pub(crate) fn best_case(machine: &Machine) -> Vec<Gpu> {
    let idle = Utilization { gpu_percent: 0, memory_percent: Some(0) };
    machine
        .devices()
        .map(|gpu| match gpu.readings_deferred {
            true => Gpu { utilization: Some(idle), ..gpu.clone() },
            false => gpu.clone(),
        })
        .collect()
}

/// `decide`'s answer on `machine`, reading (`read`) what it needs of the deferred GPUs first.
/// `partial`: whether the answer may rest on a best-case view of the GPUs it does not take
/// (false: every deferred GPU is read before any answer).
pub(crate) fn decide_reading<E>(
    machine: &mut Machine,
    partial: bool,
    decide: impl Fn(&[Gpu]) -> Result<Decision, E>,
    mut read: impl FnMut(&[u32]) -> Result<Vec<Deferred>, E>,
) -> Result<Decision, E> {
    loop {
        let deferred = machine.deferred();
        let decision = decide(&best_case(machine))?;
        let wanted: Vec<u32> = match (&decision.outcome, partial) {
            (Outcome::Selected(chosen), true) => {
                deferred.into_iter().filter(|gpu| chosen.contains(gpu)).collect()
            }
            _ => deferred,
        };
        if wanted.is_empty() {
            return Ok(decision);
        }
        let readings = read(&wanted)?;
        machine.settle(&wanted, readings);
    }
}
