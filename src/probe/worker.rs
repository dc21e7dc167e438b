//! gpurun's probe thread. NVML calls can hang (a GPU off the bus, a wedged driver, a cold driver
//! without persistence mode), so none is made on the main thread: it sends one job at a time to
//! this thread and waits for the answer beside its signals, with a deadline. While a call
//! hangs, the main thread keeps forwarding signals, reaping and exiting; at the end of the run
//! the thread is simply abandoned (process exit ends it, unless the kernel holds it in an
//! uninterruptible wait, which nothing in user space can end).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::probe::calls::{Call, Calls, Purpose};
use crate::probe::deferred::Deferred;
use crate::probe::gpu::{Machine, Topology};
use crate::probe::meter::{Ask, Reading};
use crate::probe::session::OpenError;
use crate::probe::session::{self, Opened, Session};
use crate::probe::vendor::Libraries;
use crate::probe::watch::{ListError, Listed, XidBatch};
use crate::process::signals::Receiver;

/// Small: the thread makes NVML calls and nothing else (the pages it never touches cost nothing).
const STACK_SIZE: usize = 512 * 1024;

pub(crate) enum Job {
    Open(Libraries),
    Probe(crate::probe::Needs),
    /// What the probe deferred of these GPUs.
    Deferred(Vec<u32>),
    /// The links between every pair of these GPUs.
    Links(Vec<u32>),
    /// The compute processes of `watched`, the Xid errors raised on `chosen` since the last
    /// poll, and the receipt's reading of `meter`'s GPUs.
    Poll {
        watched: Vec<u32>,
        chosen: Vec<u32>,
        /// The run's last look: every Xid event that is there is read.
        drain: bool,
        meter: Ask,
    },
    /// The receipt's reading alone (its first, as the command starts).
    Meter(Ask),
}

pub(crate) enum Answer {
    Opened(Result<(), OpenError>),
    Probed(Result<Machine, OpenError>),
    Deferred(Vec<Deferred>),
    Links(Topology),
    Polled { lists: Vec<(u32, Result<Vec<Listed>, ListError>)>, xids: XidBatch, readings: Vec<Reading> },
    Metered(Vec<Reading>),
}

/// Why no answer came.
#[derive(Debug)]
enum NoAnswer {
    /// The deadline passed; the call NVML is stuck in, if the thread is inside one.
    Stalled(Option<Call>),
    /// A signal that ends gpurun arrived first.
    Interrupted(i32),
}

/// The main thread's side.
pub(crate) struct ProbeThread {
    jobs: mpsc::Sender<Job>,
    answers: mpsc::Receiver<Answer>,
    ready: std::sync::Arc<EventFd>,
    calls: Calls,
    /// When the job now running was sent.
    busy_since: Option<Instant>,
    /// The library, once the thread has opened it (for `without_xids`).
    opened: Arc<OnceLock<Opened>>,
}

/// The thread's side. `opened` is where it leaves the open library for a spare thread, and
/// what a spare starts from.
fn run(
    session_calls: Calls,
    jobs: mpsc::Receiver<Job>,
    answers: mpsc::Sender<Answer>,
    ready: &EventFd,
    opened: &OnceLock<Opened>,
) {
    let mut session: Option<Session> =
        opened.get().map(|library| library.session_without_xids(session_calls.clone()));
    for job in jobs {
        let purpose = |purpose| session_calls.for_purpose(purpose);
        purpose(match &job {
            Job::Meter(_) => Purpose::Receipt,
            Job::Poll { .. } => Purpose::Processes,
            _ => Purpose::Probe,
        });
        let answer = match job {
            Job::Open(libraries) => {
                Answer::Opened(session::open(&libraries, session_calls.clone()).map(|new| {
                    let _ = opened.set(new.opened());
                    session = Some(new);
                }))
            }
            Job::Deferred(gpus) => {
                Answer::Deferred(session.as_mut().map(|s| s.deferred_readings(&gpus)).unwrap_or_default())
            }
            Job::Links(gpus) => Answer::Links(session.as_mut().map(|s| s.links(&gpus)).unwrap_or_default()),
            Job::Probe(needs) => match session.as_mut() {
                Some(session) => Answer::Probed(session.probe(needs)),
                None => Answer::Probed(Err(OpenError::NotOpen)),
            },
            Job::Meter(ask) => Answer::Metered(session.as_mut().map(|s| s.meter(&ask)).unwrap_or_default()),
            Job::Poll { watched, chosen, drain, meter } => Answer::Polled {
                lists: watched
                    .into_iter()
                    .map(|gpu| {
                        let listed = match session.as_mut() {
                            Some(session) => session.processes(gpu),
                            None => Err(ListError { lost: false, text: "NVML is not open".to_owned() }),
                        };
                        (gpu, listed)
                    })
                    .collect(),
                // No GPUs named: no Xid look (the first look registers the GPUs it names).
                xids: match session.as_mut() {
                    Some(session) if !chosen.is_empty() => {
                        purpose(Purpose::Xid);
                        session.xids(&chosen, drain)
                    }
                    _ => XidBatch::default(),
                },
                readings: {
                    purpose(Purpose::Receipt);
                    session.as_mut().map(|session| session.meter(&meter)).unwrap_or_default()
                },
            },
        };
        if answers.send(answer).is_err() {
            return;
        }
        let _ = ready.write(1);
    }
}

impl ProbeThread {
    /// Starts the thread. Call after the signals are blocked: the thread, and any thread the
    /// NVML library starts from it, inherit the mask.
    pub(crate) fn start() -> std::io::Result<ProbeThread> {
        ProbeThread::start_on(Arc::new(OnceLock::new()))
    }

    /// Another thread on the library this one opened, for polling without Xid events: where an
    /// Xid call hangs this thread, verification goes on there. `None` before NVML is open.
    pub(crate) fn without_xids(&self) -> Option<ProbeThread> {
        let library = *self.opened.get()?;
        let spare = ProbeThread::start_on(Arc::new(OnceLock::from(library)));
        spare.inspect_err(|error| tracing::debug!("no spare probe thread: {error}")).ok()
    }

    fn start_on(opened: Arc<OnceLock<Opened>>) -> std::io::Result<ProbeThread> {
        let (jobs, job_queue) = mpsc::channel();
        let (answer_queue, answers) = mpsc::channel();
        let ready = std::sync::Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(std::io::Error::from)?,
        );
        let calls = Calls::default();
        let (thread_calls, thread_ready) = (calls.clone(), std::sync::Arc::clone(&ready));
        let thread_opened = Arc::clone(&opened);
        std::thread::Builder::new()
            .name("gpurun-probe".to_owned())
            .stack_size(STACK_SIZE)
            .spawn(move || run(thread_calls, job_queue, answer_queue, &thread_ready, &thread_opened))?;
        Ok(ProbeThread { jobs, answers, ready, calls, busy_since: None, opened })
    }

    /// Becomes readable when an answer is waiting.
    pub(crate) fn ready_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.busy_since.is_some()
    }

    /// Hands the thread a job; ignored while it is busy with another (one at a time).
    pub(crate) fn send(&mut self, job: Job) {
        if self.busy_since.is_none() && self.jobs.send(job).is_ok() {
            self.busy_since = Some(Instant::now());
        }
    }

    /// The answer, if it has come.
    pub(crate) fn try_answer(&mut self) -> Option<Answer> {
        let _ = self.ready.read();
        let answer = self.answers.try_recv().ok()?;
        self.busy_since = None;
        Some(answer)
    }

    /// What the thread is stuck on, if a job has been running for at least `longer_than`.
    pub(crate) fn stuck(&self, longer_than: Duration) -> Option<Option<Call>> {
        let since = self.busy_since?;
        (since.elapsed() >= longer_than).then(|| self.calls.current())
    }

    /// `job`'s answer, waited for while NVML keeps answering: given up once one call has not
    /// returned within `per_call` (a hang costs no more than that), or after `most` in all, or
    /// at once if the thread is busy with another job (a hanging call). For a job of many quick
    /// calls (the last look at a flood of Xid events). Signals are left pending for whoever
    /// reads them next.
    pub(crate) fn ask_while_answering(
        &mut self,
        job: Job,
        per_call: Duration,
        most: Duration,
    ) -> Option<Answer> {
        if self.is_busy() {
            return None;
        }
        self.send(job);
        self.answer_while_answering(per_call, most)
    }

    /// The answer to the job in hand, waited for as `ask_while_answering` does.
    pub(crate) fn answer_while_answering(&mut self, per_call: Duration, most: Duration) -> Option<Answer> {
        let deadline = Instant::now() + most;
        loop {
            if let Some(answer) = self.try_answer() {
                return Some(answer);
            }
            let hanging = self.calls.current().is_some_and(|call| call.since.elapsed() >= per_call);
            let left = deadline.saturating_duration_since(Instant::now()).min(per_call);
            if left.is_zero() || hanging {
                return None;
            }
            // Only the answer's eventfd: signals stay queued in their own.
            let mut fds = [PollFd::new(self.ready.as_fd(), PollFlags::POLLIN)];
            let timeout =
                PollTimeout::try_from(left.as_millis().saturating_add(1)).unwrap_or(PollTimeout::MAX);
            let _ = poll(&mut fds, timeout);
        }
    }

    /// Waits for the answer to the job in hand until `deadline`, acting on signals as before
    /// the launch (a stop stops gpurun; a signal that ends it ends the wait).
    fn await_answer(&mut self, receiver: &Receiver, deadline: Instant) -> Result<Answer, NoAnswer> {
        loop {
            if let Some(answer) = self.try_answer() {
                return Ok(answer);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NoAnswer::Stalled(self.calls.current()));
            }
            let (received, _) = receiver.wait(Some(self.ready.as_fd()), Some(left));
            receiver.act_before_launch(&received).map_err(NoAnswer::Interrupted)?;
        }
    }

    /// Loads the library and initialises it (`nvmlInit`, `amdsmi_init`), within `timeout`.
    pub(crate) fn open(
        &mut self,
        libraries: Libraries,
        receiver: &Receiver,
        timeout: Duration,
    ) -> Result<(), Failure> {
        self.send(Job::Open(libraries));
        match self.await_answer(receiver, Instant::now() + timeout) {
            Ok(Answer::Opened(opened)) => opened.map_err(Failure::Open),
            Ok(_) => Ok(()),
            Err(no_answer) => Err(Failure::from_no_answer(no_answer, timeout)),
        }
    }

    /// The links between every pair of `gpus`, within `timeout`.
    pub(crate) fn links(
        &mut self,
        receiver: &Receiver,
        timeout: Duration,
        gpus: Vec<u32>,
    ) -> Result<Topology, Failure> {
        self.send(Job::Links(gpus));
        match self.await_answer(receiver, Instant::now() + timeout) {
            Ok(Answer::Links(topology)) => Ok(topology),
            Ok(_) => Ok(Topology::default()),
            Err(no_answer) => Err(Failure::from_no_answer(no_answer, timeout)),
        }
    }

    /// What the probe deferred of `gpus`, within `timeout`, waited for further as a probe is
    /// (`probe`): the reading is the rest of the look.
    pub(crate) fn deferred(
        &mut self,
        receiver: &Receiver,
        (timeout, waiting_until): (Duration, Option<Option<Instant>>),
        waiting: &mut dyn FnMut(&str),
        gpus: Vec<u32>,
    ) -> Result<Vec<Deferred>, Failure> {
        self.send(Job::Deferred(gpus));
        // An answer to an earlier job that was given up on is passed over, as `probe` does.
        loop {
            if let Answer::Deferred(read) = self.answer_waiting(receiver, timeout, waiting_until, waiting)? {
                return Ok(read);
            }
        }
    }

    /// Probes the machine within `timeout`. While `waiting_until` allows (`--wait`; `Some(None)`:
    /// forever), a probe that has not answered is waited for further, and `waiting` is told why
    /// every few seconds: it counts as a failed attempt, not as the end.
    pub(crate) fn probe(
        &mut self,
        receiver: &Receiver,
        timeout: Duration,
        waiting_until: Option<Option<Instant>>,
        waiting: &mut dyn FnMut(&str),
        needs: crate::probe::Needs,
    ) -> Result<Machine, Failure> {
        self.send(Job::Probe(needs));
        loop {
            if let Answer::Probed(machine) = self.answer_waiting(receiver, timeout, waiting_until, waiting)? {
                return machine.map_err(Failure::Open);
            }
        }
    }

    /// The answer to the job in hand within `timeout`. While `waiting_until` allows (`--wait`;
    /// `Some(None)`: forever), one that has not come is waited for further, and `waiting` is
    /// told why every few seconds: it counts as a failed attempt, not as the end.
    fn answer_waiting(
        &mut self,
        receiver: &Receiver,
        timeout: Duration,
        waiting_until: Option<Option<Instant>>,
        waiting: &mut dyn FnMut(&str),
    ) -> Result<Answer, Failure> {
        let mut deadline = Instant::now() + timeout;
        loop {
            match self.await_answer(receiver, deadline) {
                Ok(answer) => return Ok(answer),
                Err(NoAnswer::Stalled(call)) => {
                    let still_waiting = match waiting_until {
                        None => false,
                        Some(None) => true,
                        Some(Some(until)) => Instant::now() < until,
                    };
                    if !still_waiting {
                        return Err(Failure::Stalled(stall_message(&call, timeout)));
                    }
                    waiting(&stall_message(&call, timeout));
                    let next = Instant::now() + WAITING_NOTE_EVERY;
                    deadline = waiting_until.flatten().map_or(next, |until| until.min(next));
                }
                Err(interrupted) => return Err(Failure::from_no_answer(interrupted, timeout)),
            }
        }
    }
}

/// While `--wait` waits on a probe that does not answer, it says so this often.
const WAITING_NOTE_EVERY: Duration = Duration::from_secs(5);

/// Why the probe thread gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error(transparent)]
    Open(OpenError),
    /// It did not answer in time: the one-line message naming the call.
    #[error("{0}")]
    Stalled(String),
    /// A signal that ends gpurun arrived first.
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
}

impl Failure {
    fn from_no_answer(no_answer: NoAnswer, timeout: Duration) -> Failure {
        match no_answer {
            NoAnswer::Stalled(call) => Failure::Stalled(stall_message(&call, timeout)),
            NoAnswer::Interrupted(signal) => Failure::Interrupted(signal),
        }
    }
}

/// The one-line message for a call that did not finish in time.
fn stall_message(call: &Option<Call>, timeout: Duration) -> String {
    let what = match call {
        Some(call) => format!("{call} did not return"),
        None => "the probe did not finish".to_owned(),
    };
    let within = crate::options::duration::shown(timeout);
    match call.as_ref().is_some_and(|call| call.name.starts_with("amdsmi_")) {
        true => format!(
            "AMD SMI did not answer within {within}: {what}; the driver may be hung (check `dmesg` for amdgpu \
             errors and whether `amd-smi list` answers), or raise --nvml-timeout"
        ),
        false => format!(
            "NVML did not answer within {within}: {what}; the driver may be hung (check `dmesg` for Xid errors \
             and whether `nvidia-smi` answers), or raise --nvml-timeout"
        ),
    }
}
