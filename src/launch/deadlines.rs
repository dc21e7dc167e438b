//! What ends a run on time: `--time-limit` with its `--signal` and `--kill-after`, and the
//! house rules (max-time-limit, idle-action = "end"), which send SIGTERM and then SIGKILL
//! after the rule's grace whatever the user's options say (issue 65: `--signal WINCH`, a
//! command that traps TERM, or no `--kill-after` let a rule's run go on). Each limit fires
//! once; the SIGKILL a rule leads to is not put off by anything the user does, and a stopped
//! gpurun is continued at a rule's moment by a kernel timer (`process::wake`). A limit's
//! signal and its SIGKILL go to the command and every process under it, as timeout(1)'s go to
//! its process group.

use std::time::{Duration, Instant};

use crate::plan::container::Prepared;
use crate::plan::supervision::{Limits, TimeLimit};
use crate::process::signals::send_to;
use crate::verify::ending::Limited;

/// A run that ends this long after a rule's deadline without the rule having fired ran past it
/// while gpurun could not act (stopped with SIGSTOP, or starved): the limit is recorded.
const PAST_THE_RULE: Duration = Duration::from_secs(1);

/// How long `--verify strict` gives a command on the wrong GPU between SIGTERM and SIGKILL,
/// unless `--kill-after` says otherwise.
const STRICT_GRACE: Duration = Duration::from_secs(5);

/// The limits of one run, as it goes: the one value the supervisor loop asks what is due next
/// (`wake`) and tells what happened (a stop asked for, a strict failure, a rule's end); each
/// limit's signal and SIGKILL are sent from here.
pub(crate) struct Deadlines<'a> {
    limits: &'a Limits,
    child: u32,
    /// A container run: killing its client would leave the container running.
    container: Option<&'a Prepared>,
    /// The time limits not reached yet, each with when it falls due.
    due: Vec<(TimeLimit, Instant)>,
    /// SIGKILL after the user's `--kill-after` (or `--verify strict`'s grace).
    kill_at: Option<Instant>,
    /// SIGKILL after a rule's grace: nothing the user does puts it off.
    rule_kill_at: Option<Instant>,
    pub(crate) limited: Option<Limited>,
    /// SIGCONT to gpurun at each rule's moment (`process::wake`): a stopped gpurun is
    /// continued then, and ends the command.
    wakers: Vec<nix::sys::timer::Timer>,
}

impl<'a> Deadlines<'a> {
    /// The limits of `child`'s run, started at `started`.
    pub(crate) fn new(
        limits: &'a Limits,
        (child, container): (u32, Option<&'a Prepared>),
        started: Instant,
    ) -> Deadlines<'a> {
        let time_limits = &limits.time_limits;
        let due = time_limits.iter().map(|limit| (limit.clone(), started + limit.after)).collect();
        let wakers = time_limits
            .iter()
            .filter(|limit| limit.rule.is_some())
            .filter_map(|limit| crate::process::wake::continue_after(limit.after))
            .collect();
        Deadlines { limits, child, container, due, kill_at: None, rule_kill_at: None, limited: None, wakers }
    }

    /// SIGKILL to the command's tree, and to a container by its ID.
    fn kill(&self) {
        signal_tree(self.child, libc::SIGKILL);
        if let Some(container) = self.container {
            container.kill();
        }
    }

    /// A signal that ends a job (TERM, INT, HUP) reached the command: `--kill-after` counts
    /// from the first.
    pub(crate) fn stop_asked(&mut self, now: Instant) {
        if self.kill_at.is_none() {
            self.kill_at = self.limits.kill_after.map(|after| now + after);
        }
    }

    /// `--verify strict` found the command on the wrong GPU: SIGTERM now, SIGKILL after
    /// `--kill-after` (or five seconds).
    pub(crate) fn strict_failure(&mut self, now: Instant) {
        send_to(self.child, libc::SIGTERM);
        self.kill_at = Some(now + self.limits.kill_after.unwrap_or(STRICT_GRACE));
    }

    /// A house rule other than time (idle-action = "end") ends the run: SIGTERM to the tree,
    /// SIGKILL after the rule's grace; `limited` is kept unless a time limit came first.
    pub(crate) fn rule_ends(&mut self, now: Instant, limited: Limited) {
        let grace = self.limits.rule_grace;
        if let Limited::Idle { what, .. } = &limited {
            tracing::warn!("{what}; SIGKILL follows in {}", crate::options::duration::shown(grace));
        }
        signal_tree(self.child, libc::SIGTERM);
        self.rule_ended(now, grace);
        self.limited = self.limited.take().or(Some(limited));
    }

    /// The next moment something is due.
    pub(crate) fn wake(&self) -> Option<Instant> {
        self.due.iter().map(|(_, at)| *at).chain(self.kill_at).chain(self.rule_kill_at).min()
    }

    /// Sends what is due at `now`: a limit's signal, then SIGKILL once a grace is over.
    pub(crate) fn enforce(&mut self, now: Instant) {
        let (child, kill_after) = (self.child, self.limits.kill_after);
        let (reached, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.due).into_iter().partition(|(_, at)| now >= *at);
        self.due = later;
        for (limit, _) in reached {
            self.limited = Some(Limited::Time(reach(child, &limit, kill_after)));
            match &limit.rule {
                Some((_, grace)) => self.rule_ended(now, *grace),
                None => self.kill_at = kill_after.map(|after| now + after),
            }
        }
        if self.kill_at.is_some_and(|at| now >= at) {
            tracing::warn!("the command is still running after it was asked to stop: sending SIGKILL");
            self.kill();
            self.kill_at = None;
        }
        if self.rule_kill_at.is_some_and(|at| now >= at) {
            tracing::warn!(
                "the command is still running at the end of the house rule's grace: sending SIGKILL"
            );
            self.kill();
            self.rule_kill_at = None;
        }
    }

    /// A rule ended the run at `now`: SIGKILL follows after `grace`, or sooner if already due.
    fn rule_ended(&mut self, now: Instant, grace: Duration) {
        let at = now + grace;
        self.rule_kill_at = Some(self.rule_kill_at.map_or(at, |earlier| earlier.min(at)));
        self.wakers.extend(crate::process::wake::continue_after(grace));
    }

    /// The command ended at `now` (as far as gpurun can tell: it reaps it now). If a rule's
    /// deadline had passed by then without firing, gpurun was kept from acting (stopped): the
    /// command ran past the rule, and the run is recorded as limited. What limited the run.
    pub(crate) fn ended(mut self, now: Instant) -> Option<Limited> {
        let passed = self.due.iter().find(|(limit, at)| limit.rule.is_some() && now >= *at + PAST_THE_RULE);
        if let Some((limit, _)) = passed {
            let (rule, _) = limit.rule.as_ref().expect("a rule's limit");
            let what = format!(
                "the command ran past the house rule {rule} while gpurun could not end it (stopped, or \
                 starved of CPU)"
            );
            tracing::warn!("{what}");
            self.limited = Some(Limited::Time(what));
        }
        self.limited
    }
}

/// The command ran for a time limit: it gets the limit's signal (a container run's client too,
/// which passes it on). Said once; returns what was done, for the report.
fn reach(child: u32, limit: &TimeLimit, kill_after: Option<Duration>) -> String {
    let signal = crate::options::signal::name(limit.signal);
    let (what, kill) = match &limit.rule {
        Some((rule, grace)) => {
            (format!("the command reached the house rule {rule} and was sent {signal}"), Some(*grace))
        }
        None => (
            format!(
                "the command reached --time-limit {} and was sent {signal}",
                crate::options::duration::compact(limit.after)
            ),
            kill_after,
        ),
    };
    match kill {
        Some(after) => {
            tracing::warn!("{what}; SIGKILL follows in {}", crate::options::duration::shown(after))
        }
        None => tracing::warn!("{what}"),
    }
    signal_tree(child, limit.signal);
    what
}

/// `signal` to `child` and every process under it, as timeout(1) signals its process group: a
/// `bash -c 'python ...'` does not leave Python running. The tree is read before the child is
/// signalled (a child that dies at once hands its own children to gpurun, the subreaper).
fn signal_tree(child: u32, signal: i32) {
    let under = crate::process::procfs::descendants(child);
    send_to(child, signal);
    for pid in under {
        send_to(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(after: u64) -> TimeLimit {
        TimeLimit {
            after: Duration::from_secs(after),
            signal: libc::SIGTERM,
            rule: Some(("max-time-limit = 1m".to_owned(), Duration::from_secs(10))),
        }
    }

    fn limits(time_limits: Vec<TimeLimit>) -> Limits {
        Limits { kill_after: None, time_limits, rule_grace: Duration::from_secs(10) }
    }

    /// No process: the deadlines of a run whose command is PID 0 signal nothing here.
    const NO_CHILD: (u32, Option<&Prepared>) = (0, None);

    #[test]
    fn a_rule_passed_while_gpurun_could_not_act_is_recorded_and_one_not_passed_is_not() {
        let start = Instant::now();
        let rule = limits(vec![rule(60)]);
        let on_time = Deadlines::new(&rule, NO_CHILD, start);
        assert!(on_time.ended(start + Duration::from_secs(30)).is_none());
        let stopped = Deadlines::new(&rule, NO_CHILD, start);
        assert_eq!(stopped.wake(), Some(start + Duration::from_secs(60)));
        let limited = stopped.ended(start + Duration::from_secs(90));
        assert!(matches!(&limited, Some(Limited::Time(what)) if what.contains("ran past the house rule")));
    }

    #[test]
    fn a_rules_kill_is_never_put_off() {
        let start = Instant::now();
        let none = limits(Vec::new());
        let mut deadlines = Deadlines::new(&none, NO_CHILD, start);
        deadlines.rule_ended(start, Duration::from_secs(10));
        deadlines.rule_ended(start + Duration::from_secs(5), Duration::from_secs(10));
        assert_eq!(deadlines.wake(), Some(start + Duration::from_secs(10)));
    }
}
