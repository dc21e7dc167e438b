//! A waiter's sleep and what it shows meanwhile: it sleeps on its ticket's FIFO until a reason
//! to look again (a lease's end, its turn, the safety poll, the wait's end), at a pace a flood
//! of wake-up bytes cannot speed up, with one waiting line on stderr; and a reading of the
//! GPUs a choice takes, waited for under `--wait` as the probe is (`read_deferred`).

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::options::duration;
use crate::probe::deferred::Deferred;
use crate::probe::worker::ProbeThread;
use crate::process::signals::Receiver;
use crate::reserve::error::AcquireError;
use crate::reserve::lockdir::LockDir;
use crate::reserve::ticket::{self, Ticket};

/// On a non-terminal stderr, one progress line this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// After a wake-up that did not start the job (NVML may show a GPU freed a moment after its
/// lease ends), look again this soon, this many times, before sleeping again.
const AFTER_A_WAKE: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
];

/// When a waiter looks at the machine again.
pub(super) struct Pacing {
    /// The quick looks since a lease's end woke this waiter.
    quick_retries: usize,
    /// Looks left to take at once (below zero: owed), refilled at `LOOKS_PER_SECOND`.
    looks: f64,
    refilled: Instant,
}

/// A waiter's FIFO is anybody's to write (mode 0622): a flood of wake-up bytes must not become a
/// flood of NVML probes and directory reads. A hand-off after a quiet spell looks at once; more
/// than `LOOK_BURST` looks in a row are spaced to `LOOKS_PER_SECOND` (a real hand-off waits at
/// most that spacing behind a flood: its byte stays in the FIFO).
const LOOK_BURST: f64 = 8.0;
const LOOKS_PER_SECOND: f64 = 10.0;

impl Pacing {
    pub(super) fn new() -> Pacing {
        Pacing { quick_retries: AFTER_A_WAKE.len(), looks: LOOK_BURST, refilled: Instant::now() }
    }

    /// Takes one look: how long to wait for it first (zero when it may be taken now).
    fn take_look(&mut self) -> Duration {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * LOOKS_PER_SECOND;
        self.looks = (self.looks + earned).min(LOOK_BURST) - 1.0;
        self.refilled = now;
        match self.looks {
            0.0.. => Duration::ZERO,
            owed => Duration::from_secs_f64(-owed / LOOKS_PER_SECOND),
        }
    }
}

/// Why a waiter looks at the machine again (said with -vv, one line a look).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Its FIFO was written: a lease ended, or the waiter ahead left.
    Woken,
    /// One of the quick looks after a lease's end.
    QuickLook,
    /// A head's safety poll (GPUs freed outside gpurun).
    SafetyPoll,
    /// The waiter ahead is gone: this one is a head now.
    Head,
    /// A GPU it could use has no lease: a look past the heads ahead (`reserve::stalled`).
    PastTheHeads,
    /// The `--wait` is over.
    WaitOver,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::Woken => "its FIFO was written",
            Reason::QuickLook => "a quick look after a lease's end",
            Reason::SafetyPoll => "the safety poll",
            Reason::Head => "it is the head now",
            Reason::PastTheHeads => "a GPU it could use has no lease (a look past the heads ahead)",
            Reason::WaitOver => "the wait is over",
        })
    }
}

/// Sleeps until this waiter should look at the machine again (`wait_for_a_reason`), at the pace
/// `Pacing` allows.
pub(super) fn wait_turn(
    ticket: &Ticket,
    dir: &LockDir,
    receiver: &Receiver,
    pacing: &mut Pacing,
    until: Option<Instant>,
) -> Result<(), i32> {
    let reason = wait_for_a_reason(ticket, dir, receiver, &mut pacing.quick_retries, until)?;
    let mut pause = pacing.take_look();
    if let Some(until) = until {
        pause = pause.min(until.saturating_duration_since(Instant::now()));
    }
    match pause.is_zero() {
        true => tracing::trace!("looking again: {reason}"),
        false => tracing::trace!("looking again: {reason}, paced ({} ms later)", pause.as_millis()),
    }
    // The FIFO is not watched meanwhile: what is written to it is read at the next wait.
    receiver.pause(pause)
}

/// Sleeps until there is a reason to look at the machine again: its FIFO is written (a lease
/// ended, or the waiter ahead left), it is a head and `SAFETY_POLL` has passed, the quick
/// looks after a lease's end, or the wait's end. A waiter behind a head only checks the names
/// every `ROLE_CHECK` (no NVML, no file read), and looks past the heads ahead where a GPU it
/// could use has no lease (`Ticket::look_past_the_heads`). A wake-up is read at the next wait, after the
/// look it caused; only a lease's end earns the quick looks.
fn wait_for_a_reason(
    ticket: &Ticket,
    dir: &LockDir,
    receiver: &Receiver,
    quick_retries: &mut usize,
    until: Option<Instant>,
) -> Result<Reason, i32> {
    if ticket.drain() {
        *quick_retries = 0;
    }
    if let Some(pause) = AFTER_A_WAKE.get(*quick_retries) {
        *quick_retries += 1;
        let (received, woke) = receiver.wait(ticket.wake_fd(), Some(*pause));
        receiver.act_before_launch(&received)?;
        return Ok(if woke { Reason::Woken } else { Reason::QuickLook });
    }
    let behind_since = Instant::now();
    loop {
        let head = ticket.is_head(dir);
        let mut timeout = if head { ticket::SAFETY_POLL } else { ticket::ROLE_CHECK };
        if let Some(until) = until {
            timeout = timeout.min(until.saturating_duration_since(Instant::now()));
        }
        let (received, woke) = receiver.wait(ticket.wake_fd(), Some(timeout));
        receiver.act_before_launch(&received)?;
        if woke {
            return Ok(Reason::Woken);
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            return Ok(Reason::WaitOver);
        }
        if head {
            return Ok(Reason::SafetyPoll);
        }
        if ticket.is_head(dir) {
            return Ok(Reason::Head);
        }
        let names = dir.entries();
        let leased: Vec<String> = names
            .iter()
            .filter_map(|name| crate::reserve::lease::parse_name(std::str::from_utf8(name).ok()?))
            .map(|(uuid, _)| uuid)
            .collect();
        if ticket.look_past_the_heads(&names, &leased, behind_since.elapsed()) {
            return Ok(Reason::PastTheHeads);
        }
    }
}

/// The waiting line on stderr: rewritten in place on a terminal, cut to its width so that it
/// stays one line that can be rewritten and erased (a 600-character line wrapped over several,
/// left copies of itself behind, and stayed after Ctrl-C); with -v, each new reason is also
/// logged whole. Elsewhere (a log file, a cron mail) one whole line every few seconds. Ended
/// when dropped, so that an interrupted wait leaves a clean line.
pub(super) struct Progress {
    in_place: bool,
    last_line: Option<Instant>,
    shown: bool,
    /// What the last line said, for -v's whole reasons.
    said: String,
}

impl Progress {
    pub(super) fn new(json_logs: bool) -> Progress {
        Progress {
            in_place: std::io::stderr().is_terminal() && !json_logs,
            last_line: None,
            shown: false,
            said: String::new(),
        }
    }

    /// The blocker first, short, then what is needed and the counts: the part a narrow
    /// terminal cuts is the least telling. `waiting 2 s: GPU 0 reserved exclusively by gpurun
    /// PID 4242 (alice, python); needs 1 GPU, exclusive; 0 qualify now, 0 ahead`.
    pub(super) fn show(
        &mut self,
        blockers: &[String],
        needs: &str,
        qualified: usize,
        ahead: usize,
        waited: Duration,
    ) {
        let counts =
            format!("{qualified} qualif{} now, {ahead} ahead", if qualified == 1 { "ies" } else { "y" });
        let blocked = match blockers.is_empty() {
            true => format!("{ahead} ahead in the queue"),
            false => blockers.join(", "),
        };
        let reason = format!("{blocked}; {needs}; {counts}");
        let text = format!("waiting {}: {reason}", duration::shown(Duration::from_secs(waited.as_secs())));
        self.show_line(&text, &reason);
    }

    pub(super) fn show_text(&mut self, text: &str) {
        self.show_line(text, text);
    }

    /// `reason`: what the line says but the time waited, which changes every second.
    fn show_line(&mut self, text: &str, reason: &str) {
        if !self.in_place {
            if self.last_line.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
                tracing::info!("{text}");
                self.last_line = Some(Instant::now());
            }
            return;
        }
        if reason != self.said && tracing::enabled!(tracing::Level::DEBUG) {
            self.clear();
            tracing::debug!("{text}");
        }
        self.said = reason.to_owned();
        let columns = crate::process::stdio::terminal_columns(std::io::stderr().as_fd()).unwrap_or(80);
        // Three columns short of the width: the "^C" a terminal echoes at Ctrl-C still fits on
        // the line (a full line made it wrap, and the erase below then missed the line).
        let line = crate::process::stdio::fit(&format!("gpurun: {text}"), columns.saturating_sub(3).max(20));
        let _ = write!(std::io::stderr().lock(), "\r{line}\x1b[K");
        self.shown = true;
    }

    pub(super) fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What the probe deferred of `gpus` (`probe::deferred`), read now.
pub(super) fn read_deferred(
    prober: &mut ProbeThread,
    receiver: &Receiver,
    timeout: Duration,
    (waiting_until, progress): (Option<Option<Instant>>, &mut Progress),
    gpus: &[u32],
) -> Result<Vec<Deferred>, AcquireError> {
    if gpus.is_empty() {
        return Ok(Vec::new());
    }
    // A call that hangs here is waited for under --wait, as one in the probe is.
    let waiting = &mut |why: &str| progress.show_text(&format!("waiting (--wait): {why}"));
    Ok(prober.deferred(receiver, (timeout, waiting_until), waiting, gpus.to_vec())?)
}
