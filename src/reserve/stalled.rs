//! Heads that could start and do not (issue 51). A waiter ahead that the machine could serve
//! now takes its GPUs within a look: it is woken when a lease ends, and polls NVML every
//! `SAFETY_POLL` for GPUs freed outside gpurun. One that stays servable for `GRACE` without
//! taking anything (a forged ticket of another user, written as a real one and kept responsive,
//! or a waiter that cannot start for a reason its ticket does not say) holds nothing from this
//! launch from then on: it keeps its ticket and its place, and may take what is free when it
//! does look, but no ticket keeps free GPUs from others for longer than that.
//!
//! Only this launch's own looks count, and only while the directory lock came quickly: a look
//! that waited for the lock resets the clock, since a head blocked on the same lock could not
//! have taken its GPUs meanwhile either.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::reserve::holds::Queued;

/// How long a waiter ahead may stay servable without taking its GPUs: the safety poll's period
/// twice, and a second, as for a wake-up left unread (`ticket::UNRESPONSIVE`).
pub(super) const GRACE: Duration = Duration::from_secs(5);

/// A wait for the directory lock longer than this means it was contended: the clock restarts.
pub(super) const LOCK_CONTENDED: Duration = Duration::from_secs(1);

/// The waiters ahead seen servable, since when, and those already said to be passed over.
#[derive(Default)]
pub(super) struct StalledHeads {
    servable_since: HashMap<(u64, u32), Instant>,
    said: HashSet<(u64, u32)>,
}

impl StalledHeads {
    /// This look waited for the directory lock: nobody could have started meanwhile.
    pub(super) fn lock_was_contended(&mut self, now: Instant) {
        for since in self.servable_since.values_mut() {
            *since = now;
        }
    }

    /// Takes one look's queue (what each waiter ahead could do now) and returns the waiters to
    /// pass over: servable at every look for `GRACE`. Each is said once.
    pub(super) fn passed_over(&mut self, queue: &[Queued], now: Instant) -> Vec<(u64, u32)> {
        self.servable_since.retain(|key, _| queue.iter().any(|q| q.can_start && q.waiter.key() == *key));
        let mut passed = Vec::new();
        for queued in queue.iter().filter(|q| q.can_start) {
            let key = queued.waiter.key();
            let since = *self.servable_since.entry(key).or_insert(now);
            if now.duration_since(since) < GRACE {
                continue;
            }
            if self.said.insert(key) {
                tracing::info!(
                    "passing over the waiter ahead, PID {} of user {}: it could have started {} s ago and has \
                     not taken its GPUs (it keeps its place in the queue)",
                    queued.waiter.pid,
                    crate::process::stdio::escaped(&queued.waiter.user),
                    now.duration_since(since).as_secs()
                );
            }
            passed.push(key);
        }
        passed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::count::Count;
    use crate::options::Policy;
    use crate::reserve::ticket::{Needs, Waiter};

    fn queued(pid: u32, can_start: bool) -> Queued {
        let needs = Needs {
            count: Count::exactly(1),
            min_free: None,
            max_util: None,
            exclusive: true,
            policy: Policy::MostFree,
        };
        let waiter = Waiter {
            pid,
            uid: 4242,
            user: "u4242".to_owned(),
            since_ns: u64::from(pid),
            gpus: vec!["GPU-a".to_owned()],
            request: String::new(),
            needs,
        };
        Queued { waiter, reason: String::new(), can_start }
    }

    #[test]
    fn a_waiter_servable_for_the_grace_is_passed_over_and_a_contended_lock_restarts_the_clock() {
        let mut stalled = StalledHeads::default();
        let start = Instant::now();
        let queue = [queued(1, true), queued(2, false)];
        assert!(stalled.passed_over(&queue, start).is_empty());
        assert!(stalled.passed_over(&queue, start + GRACE / 2).is_empty());
        stalled.lock_was_contended(start + GRACE / 2);
        assert!(stalled.passed_over(&queue, start + GRACE).is_empty(), "the clock restarted");
        assert_eq!(stalled.passed_over(&queue, start + GRACE * 3 / 2), [(1, 1)]);
        // Once it cannot start (it took something, or the machine changed), it starts over.
        assert!(stalled.passed_over(&[queued(1, false)], start + GRACE * 2).is_empty());
        assert!(stalled.passed_over(&queue, start + GRACE * 2).is_empty());
    }
}
