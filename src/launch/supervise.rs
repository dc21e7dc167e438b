//! The supervisor loop, on gpurun's main thread: signals, reaping and job-control stops are
//! handled here, and the limits (`launch::deadlines`) are asked what is due; none of it waits
//! for the driver. Verification's driver calls run on the probe thread; this loop only hands
//! it a poll when one is due and takes the answer when it comes. When the command ends, the
//! loop ends, whatever the driver is doing.

use std::time::{Duration, Instant};

use crate::exit_code::End;
use crate::launch::deadlines::Deadlines;
use crate::launch::hooks::Hook;
use crate::launch::signals::{self, Action};
use crate::plan::Plan;
use crate::probe::calls::Purpose;
use crate::probe::worker::{Answer, Job, ProbeThread};
use crate::process::signals::{send_to, stop_self, Receiver};
use crate::process::{procfs, reap, ChildEvent, Reaped};
use crate::verify::ending::Limited;
use crate::verify::monitor::{Monitor, SLOW_CALL};

/// Verification beside supervision: the monitor and the thread that makes its NVML calls.
pub(crate) struct Watch<'a> {
    prober: &'a mut ProbeThread,
    /// Where polling goes on once a call that is not a process list hung the thread before.
    spare: Option<ProbeThread>,
    /// What hung calls made the watch give up: the spare's session watches no Xid events, and
    /// once a receipt call hung, its polls carry no receipt readings either.
    xids_given_up: bool,
    receipt_given_up: bool,
    pub(crate) monitor: Monitor,
}

/// An Xid or receipt call that has not returned for this long is hung: what it reads is given
/// up for the run, so that process polling, and `--verify strict`, go on.
const EXTRA_CALL_HUNG: Duration = Duration::from_secs(2);

/// How long the end of a run waits for NVML's last word on Xid errors and the receipt (a healthy driver answers
/// in well under a millisecond; a hung one must not hold the exit).
const LAST_XIDS: Duration = Duration::from_millis(50);
/// How long the end waits for the driver to free a context whose process has gone.
const MEMORY_HELD_WAIT: Duration = Duration::from_secs(2);
/// The last look reads every Xid event there is while NVML keeps answering (a flood of
/// thousands takes a moment: each is one call), up to this long in all.
const LAST_XIDS_MOST: Duration = Duration::from_secs(1);

impl<'a> Watch<'a> {
    /// Starts watching: the receipt's first reading (the energy and throttle counters as the
    /// command starts) is the probe thread's first job.
    pub(crate) fn new(prober: &'a mut ProbeThread, monitor: Monitor) -> Watch<'a> {
        prober.send(Job::Meter(monitor.meter(true)));
        Watch { prober, spare: None, xids_given_up: false, receipt_given_up: false, monitor }
    }

    /// What the receipt asks of a poll: nothing once a receipt call hung.
    fn meter(&self, bounds: bool) -> crate::probe::meter::Ask {
        let ask = self.monitor.meter(bounds);
        match self.receipt_given_up {
            true => crate::probe::meter::Ask { gpus: Vec::new(), ..ask },
            false => ask,
        }
    }

    /// Takes the probe thread's answer, if one has come. Returns a wrong-gpu detail when
    /// `--verify strict` must end the command.
    fn take_answer(&mut self) -> Option<String> {
        match self.thread().try_answer()? {
            Answer::Polled { lists, xids, readings } => {
                self.monitor.absorb_readings(&readings, false);
                self.monitor.absorb_xids(xids);
                self.monitor.absorb(lists)
            }
            Answer::Metered(readings) => {
                self.monitor.absorb_readings(&readings, true);
                None
            }
            Answer::Opened(_) | Answer::Probed(_) | Answer::Deferred(_) | Answer::Links(_) => None,
        }
    }

    /// The thread the polls go to.
    fn thread(&mut self) -> &mut ProbeThread {
        match &mut self.spare {
            Some(spare) => spare,
            None => self.prober,
        }
    }

    fn thread_ref(&self) -> &ProbeThread {
        self.spare.as_ref().unwrap_or(self.prober)
    }

    /// After the command ended: the poll that was still out (waited for while NVML answers),
    /// the Xid errors raised since the last poll (an Xid often comes just before the crash it
    /// explains) and the receipt's last reading; then, in a job of its own (a list that hangs
    /// must not cost the Xid errors), the process lists: a GPU lost, or another user's process
    /// that appeared, since the last poll.
    pub(crate) fn last_look(&mut self) {
        if self.thread_ref().is_busy() {
            let _ = self.thread().answer_while_answering(LAST_XIDS, LAST_XIDS);
        }
        let _ = self.take_answer();
        let job = Job::Poll {
            watched: Vec::new(),
            chosen: self.monitor.xid_gpus(),
            drain: true,
            meter: self.meter(true),
        };
        if let Some(Answer::Polled { xids, readings, .. }) =
            self.thread().ask_while_answering(job, LAST_XIDS, LAST_XIDS_MOST)
        {
            self.monitor.absorb_xids(xids);
            self.monitor.absorb_readings(&readings, true);
        }
        let lists = Job::Poll {
            watched: self.monitor.watched(),
            chosen: Vec::new(),
            drain: false,
            meter: crate::probe::meter::Ask { gpus: Vec::new(), bounds: false, memory: false },
        };
        if let Some(Answer::Polled { lists, .. }) =
            self.thread().ask_while_answering(lists, LAST_XIDS, LAST_XIDS_MOST)
        {
            self.monitor.absorb_last(lists);
        }
    }

    /// Once the command and its leftovers have ended: what of them NVML still lists on the
    /// chosen GPUs (`memory-held`). A context whose process has gone is looked at again for a
    /// moment (the driver tears it down just after), a running process is not waited for.
    pub(crate) fn memory_held(&mut self, kept_orphans: bool) -> Vec<crate::verify::diagnosis::Diagnosis> {
        let give_up = Instant::now() + MEMORY_HELD_WAIT;
        loop {
            let job = Job::Poll {
                watched: self.monitor.chosen_watched(),
                chosen: Vec::new(),
                drain: false,
                meter: crate::probe::meter::Ask { gpus: Vec::new(), bounds: false, memory: false },
            };
            let Some(Answer::Polled { lists, .. }) =
                self.thread().ask_while_answering(job, LAST_XIDS, LAST_XIDS_MOST)
            else {
                return Vec::new();
            };
            let held = self.monitor.still_held(lists);
            if held.iter().any(crate::verify::leftover::Held::may_go_by_itself) && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            return held.iter().map(|held| crate::verify::leftover::diagnosis(held, kept_orphans)).collect();
        }
    }

    /// The NVML call that has not returned for a while, if one is hanging.
    pub(crate) fn stuck(&self) -> Option<Option<crate::probe::calls::Call>> {
        self.thread_ref().stuck(SLOW_CALL)
    }

    /// The monitor's turn in the loop: its deadline, a poll when one is due (a hung Xid watch
    /// or receipt given up first), and when it next wants the loop's attention: while a poll is
    /// out (or hangs), only the verification deadline, and the look for a hung call.
    fn tend(&mut self, now: Instant) -> Option<Instant> {
        self.give_up_hung_calls();
        let stuck = self.stuck();
        self.monitor.check_deadline(now, stuck);
        if self.monitor.poll_due(now) && !self.thread_ref().is_busy() {
            let (watched, sample) = self.monitor.next_look(now);
            let meter = match sample {
                true => self.meter(false),
                false => crate::probe::meter::Ask { gpus: Vec::new(), bounds: false, memory: false },
            };
            let job = Job::Poll { watched, chosen: self.monitor.xid_gpus(), drain: false, meter };
            self.thread().send(job);
        }
        let busy = self.thread_ref().is_busy();
        let hang_check = (busy && !self.receipt_given_up).then(|| Instant::now() + EXTRA_CALL_HUNG / 2);
        [self.monitor.next_wake(!busy), hang_check].into_iter().flatten().min()
    }

    /// Where an Xid or receipt call hangs the thread, what it reads is given up (said once) and
    /// the polls go to a thread of their own: verification must wait on neither. The spare's
    /// session watches no Xid events, so a hung receipt call ends the Xid watch too; a spare
    /// that hangs in turn is left to its call (its thread ends if the call ever returns).
    fn give_up_hung_calls(&mut self) {
        let Some(Some(call)) = self.thread_ref().stuck(EXTRA_CALL_HUNG) else { return };
        let receipt = call.purpose == Purpose::Receipt;
        let news = receipt && !self.receipt_given_up || call.purpose == Purpose::Xid && !self.xids_given_up;
        if !news {
            return;
        }
        let Some(spare) = self.prober.without_xids() else { return };
        let what = match (receipt, self.xids_given_up) {
            (true, false) => "the receipt (energy, power, utilization, throttling) and Xid errors are",
            (true, true) => "the receipt (energy, power, utilization, throttling) is",
            (false, _) => "Xid errors are",
        };
        // The call says how long it has waited: "nvmlDeviceGetPowerUsage on GPU 3 (waiting for 2.0 s)".
        tracing::warn!(
            "{what} not read for the rest of the run: {call} did not return (verification goes on)"
        );
        self.xids_given_up = true;
        self.receipt_given_up |= receipt;
        self.spare = Some(spare);
    }
}

/// How supervision ended.
pub(crate) struct Supervised {
    pub(crate) end: End,
    /// `--verify strict` ended the command for being on the wrong GPU: this detail.
    pub(crate) strict_failure: Option<String>,
    /// `--time-limit` or the house rule on idle GPUs ended it (gpurun exits 124).
    pub(crate) limited: Option<Limited>,
}

fn in_our_process_group(pid: u32) -> bool {
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    nix::unistd::getpgid(Some(pid)).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// The command ended: how, and what limit ended it (one a stopped gpurun could not fire too).
fn finished(end: End, strict_failure: Option<String>, deadlines: Deadlines) -> Supervised {
    Supervised { end, strict_failure, limited: deadlines.ended(Instant::now()) }
}

fn ends_the_job(signal: i32) -> bool {
    matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP)
}

/// Runs until the command ends; reaps any other child (orphans, an --on-start hook) on the way,
/// and kills a hook that outlives its time. What is due next is the deadlines' to say (time
/// limits, `--kill-after`, a rule's grace), the watch's (a poll) and the hook's.
pub(crate) fn run(
    child: u32,
    receiver: &Receiver,
    plan: &Plan,
    mut watch: Option<&mut Watch>,
    mut hook: Option<&mut Hook>,
) -> Supervised {
    let own_pid = std::process::id();
    let no_forward = &plan.supervision.no_forward;
    let mut strict_failure = None;
    let mut deadlines = Deadlines::new(&plan.supervision.limits, (child, plan.container()), Instant::now());
    let mut stops = JobControl::default();
    loop {
        loop {
            match reap(None, true) {
                Reaped::Child(pid, event) if pid == child => match event {
                    ChildEvent::Stopped(_) => stops.follow(child),
                    ChildEvent::Continued => stops.continue_at = None,
                    ChildEvent::Exited(code) => {
                        return finished(End::Exited(code), strict_failure, deadlines)
                    }
                    ChildEvent::Signaled(signal) => {
                        return finished(End::Signaled(signal), strict_failure, deadlines)
                    }
                },
                Reaped::Child(pid, event) if hook.as_deref_mut().is_some_and(|h| h.reaped(pid, event)) => {}
                Reaped::Child(pid, _) => tracing::debug!("reaped PID {pid}"),
                Reaped::Nothing | Reaped::NoChildren => break,
            }
        }
        let now = Instant::now();
        stops.continue_if_left(child, now);
        if let Some(hook) = hook.as_deref_mut() {
            hook.enforce(now);
        }
        deadlines.enforce(now);
        let monitor_wake = watch.as_deref_mut().and_then(|watch| watch.tend(now));
        let hook_wake = hook.as_deref().and_then(Hook::wake);
        let wake = [deadlines.wake(), monitor_wake, hook_wake, stops.continue_at].into_iter().flatten().min();
        let timeout = wake.map(|at| at.saturating_duration_since(Instant::now()));
        let (received, answered) =
            receiver.wait(watch.as_deref().map(|w| w.thread_ref().ready_fd()), timeout);
        for signal in received {
            let sender = signals::sender(&signal, child, own_pid);
            let in_group = in_our_process_group(child);
            let reached_child = match signals::decide(signal.signal, sender, in_group, no_forward) {
                Action::Reap => false,
                Action::Forward if signal.signal == libc::SIGCONT && stops.resumed => {
                    stops.resumed = false;
                    false
                }
                Action::Forward => {
                    tracing::debug!(
                        "forwarding {} to PID {child}",
                        crate::options::signal::name(signal.signal)
                    );
                    send_to(child, signal.signal)
                }
                Action::Drop => signals::reached_anyway(sender, in_group),
            };
            if reached_child && ends_the_job(signal.signal) {
                deadlines.stop_asked(Instant::now());
            }
        }
        if let Some(detail) = watch.as_deref_mut().filter(|_| answered).and_then(Watch::take_answer) {
            deadlines.strict_failure(Instant::now());
            strict_failure = Some(detail);
        }
        // The house rule idle-action = "end".
        if let Some((gpu, what)) =
            watch.as_deref_mut().and_then(|watch| watch.monitor.take_idle_end(libc::SIGTERM))
        {
            deadlines.rule_ends(Instant::now(), Limited::Idle { gpu, what });
        }
    }
}

/// How long a resumed gpurun waits for the command's own SIGCONT (a shell's `fg` continues the
/// whole process group) before it continues the command itself (someone continued gpurun
/// alone). Sending it at once raced with the shell: a SIGCONT decided on before the shell's
/// reached the command could land after the next Ctrl-Z and undo that stop.
const CONTINUE_GRACE: Duration = Duration::from_millis(100);

/// Job-control stops, followed: the command stopped (Ctrl-Z, SIGSTOP from someone), so
/// gpurun stops too and the shell sees the whole job stopped.
#[derive(Default)]
struct JobControl {
    /// gpurun was resumed after following a stop: the SIGCONT that did it is not forwarded.
    resumed: bool,
    /// When to continue the command if nobody has by then.
    continue_at: Option<Instant>,
}

impl JobControl {
    fn follow(&mut self, child: u32) {
        self.continue_at = None;
        tracing::debug!("the command stopped; stopping too");
        // It may already have been continued (a quick `fg`): then there is nothing to follow.
        if !procfs::stat(child).is_some_and(|s| s.is_stopped()) {
            return;
        }
        stop_self();
        self.resumed = true;
        self.continue_at = Some(Instant::now() + CONTINUE_GRACE);
    }

    /// The command was not continued with gpurun (its `Continued` would have cleared this):
    /// continue it, unless it is running already.
    fn continue_if_left(&mut self, child: u32, now: Instant) {
        if self.continue_at.is_some_and(|at| now >= at) {
            self.continue_at = None;
            if procfs::stat(child).is_some_and(|s| s.is_stopped()) {
                send_to(child, libc::SIGCONT);
            }
        }
    }
}
