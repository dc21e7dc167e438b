//! The driver call in flight: recorded by the probe thread for each call it makes, read by the
//! main thread when a call does not come back, so that a hang names the call (any vendor's
//! library: the names are the C functions, as in the vendor's header and its bug reports).

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a driver call is for. Verification can do without the Xid watch and the receipt, never
/// without the process lists: a hung call is given up by its purpose, whichever vendor's
/// library made it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Opening the library, the probe, the links, deferred readings.
    #[default]
    Probe,
    /// A verification poll's process lists.
    Processes,
    /// The Xid event watch.
    Xid,
    /// The receipt's readings (power, energy, utilization, throttling).
    Receipt,
}

/// The driver call in progress, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The C function, as in the vendor's header and `dmesg`/driver bug reports.
    pub(crate) name: &'static str,
    pub(crate) gpu: Option<u32>,
    pub(crate) since: Instant,
    pub(crate) purpose: Purpose,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)?;
        if let Some(gpu) = self.gpu {
            write!(f, " on GPU {gpu}")?;
        }
        write!(f, " (waiting for {:.1} s)", self.since.elapsed().as_secs_f64())
    }
}

/// Shared between the probe thread, which records each call it makes, and the main thread,
/// which reads it when a call does not come back.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<Inflight>>);

#[derive(Default)]
struct Inflight {
    call: Option<Call>,
    /// What the thread's calls are for now (`Calls::for_purpose`).
    purpose: Purpose,
}

/// What an NVML call answered, in words for `-vv`'s trace of each call.
pub(crate) trait Answer {
    fn answer(&self) -> String;
}

impl<T, E: std::fmt::Display> Answer for Result<T, E> {
    fn answer(&self) -> String {
        match self {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string(),
        }
    }
}

impl<T> Answer for Option<T> {
    fn answer(&self) -> String {
        if self.is_some() { "ok" } else { "no answer" }.to_owned()
    }
}

/// A raw `nvmlReturn_t`.
impl Answer for u32 {
    fn answer(&self) -> String {
        match self {
            0 => "ok".to_owned(),
            code => format!("NVML error {code}"),
        }
    }
}

impl<A: Answer, B: Answer> Answer for (A, B) {
    fn answer(&self) -> String {
        format!("{}, {}", self.0.answer(), self.1.answer())
    }
}

impl Calls {
    /// Runs one NVML call, recorded as the call in flight (for a hang's message) and, with
    /// `-vv`, traced with its answer and how long it took.
    pub(crate) fn run<T: Answer>(&self, name: &'static str, gpu: Option<u32>, call: impl FnOnce() -> T) -> T {
        let since = Instant::now();
        {
            let mut inflight = self.0.lock().unwrap_or_else(|p| p.into_inner());
            inflight.call = Some(Call { name, gpu, since, purpose: inflight.purpose });
        }
        let result = call();
        self.0.lock().unwrap_or_else(|p| p.into_inner()).call = None;
        tracing::trace!(
            "NVML {name}{}: {} in {:.3} ms",
            gpu.map(|gpu| format!(" on GPU {gpu}")).unwrap_or_default(),
            result.answer(),
            since.elapsed().as_secs_f64() * 1000.0
        );
        result
    }

    /// The call in progress now.
    pub(crate) fn current(&self) -> Option<Call> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).call.clone()
    }

    /// The calls from now on are for `purpose` (set by the thread for each part of a job).
    pub(crate) fn for_purpose(&self, purpose: Purpose) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).purpose = purpose;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_say_ok_or_what_went_wrong() {
        assert_eq!(Ok::<(), String>(()).answer(), "ok");
        assert_eq!(Err::<(), _>("Not Supported").answer(), "Not Supported");
        assert_eq!(None::<u32>.answer(), "no answer");
        assert_eq!(0u32.answer(), "ok");
        assert_eq!(999u32.answer(), "NVML error 999");
        assert_eq!((0u32, 3u32).answer(), "ok, NVML error 3");
    }

    #[test]
    fn the_call_in_flight_is_recorded_only_while_it_runs() {
        let calls = Calls::default();
        let seen = calls.run("nvmlDeviceGetUUID", Some(2), || calls.current());
        let seen = seen.expect("recorded while it ran");
        assert_eq!((seen.name, seen.gpu, seen.purpose), ("nvmlDeviceGetUUID", Some(2), Purpose::Probe));
        assert!(seen.to_string().starts_with("nvmlDeviceGetUUID on GPU 2 (waiting for "));
        assert_eq!(calls.current(), None);
        // The thread says what its calls are for; every call after it carries that.
        calls.for_purpose(Purpose::Receipt);
        let seen = calls.run("amdsmi_get_energy_count", Some(0), || calls.current()).expect("recorded");
        assert_eq!(seen.purpose, Purpose::Receipt);
    }
}
