//! A wake-up that a stopped gpurun cannot sleep through (issue 65): a POSIX timer that sends
//! this process SIGCONT. The kernel continues a stopped process on SIGCONT even while the
//! signal is blocked (gpurun blocks it, to read it from its signalfd), so a `kill -STOP` on
//! one's own gpurun does not hold a house rule's deadline off: at the deadline gpurun runs again
//! and ends the command.

use std::time::Duration;

use nix::sys::signal::{SigEvent, SigevNotify, Signal};
use nix::sys::timer::{Expiration, Timer, TimerSetTimeFlags};
use nix::time::ClockId;

/// SIGCONT to this process `after` from now, on the monotonic clock (which a stopped process
/// does not stop). Kept armed for as long as the value lives; `None` where the timer cannot be
/// made (the deadline is then kept by the loop alone, as before).
pub(crate) fn continue_after(after: Duration) -> Option<Timer> {
    let event = SigEvent::new(SigevNotify::SigevSignal { signal: Signal::SIGCONT, si_value: 0 });
    let mut timer = Timer::new(ClockId::CLOCK_MONOTONIC, event)
        .inspect_err(|error| tracing::debug!("no wake-up timer: {error}"))
        .ok()?;
    // A zero expiration disarms a timer: the next nanosecond is as good as now.
    let when = after.max(Duration::from_nanos(1));
    timer.set(Expiration::OneShot(when.into()), TimerSetTimeFlags::empty()).ok()?;
    Some(timer)
}
