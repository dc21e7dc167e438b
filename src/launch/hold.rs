//! `--hold` (issue 66): the plan's GPUs held with no command. The holder (`process::holder`)
//! says the choice on stdout as JSON, lets the caller go, and holds until the deadline, a TERM,
//! INT or HUP (`--release` sends TERM), or the end of `--hold-for`'s process, which is no child
//! of its own: a pidfd says when it ends (looked at twice a second where the kernel has none).

use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime};

use crate::exit_code::Exit;
use crate::launch::Held;
use crate::plan::Plan;
use crate::process::holder::Report;
use crate::process::signals::Receiver;

/// How often a process the hold is for is looked at where no pidfd says when it ends.
const LOOK_AT_THE_PROCESS: Duration = Duration::from_millis(500);

/// Holds `held` for `duration`, or until `for_pid` has ended.
pub(crate) fn hold(
    plan: &Plan,
    held: Held,
    (duration, for_pid): (Duration, Option<u32>),
    holder: Report,
    receiver: &Receiver,
) -> std::io::Result<Exit> {
    let deadline = Instant::now() + duration;
    let until = crate::options::clock::rfc3339(SystemTime::now() + duration);
    crate::process::stdio::print(&format!("{}\n", answer(plan, &until)))?;
    let indices: Vec<u32> = plan.gpus.selection.devices.iter().map(|device| device.index).collect();
    tracing::info!(
        "holding {} until {until} as PID {}; gpurun --release ends it sooner",
        crate::probe::gpu::labels(&indices),
        std::process::id()
    );
    holder.detach()?;
    // Opened after the caller was let go: a process already gone has none, and ends the hold.
    let watched = for_pid.map(|pid| (pid, crate::process::death::pidfd_open(pid as i32)));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let step = match &watched {
            Some((_, None)) => left.min(LOOK_AT_THE_PROCESS),
            _ => left,
        };
        let pidfd = watched.as_ref().and_then(|(_, pidfd)| pidfd.as_ref()).map(AsFd::as_fd);
        let (received, ended) = receiver.wait(pidfd, Some(step));
        if ended
            || received
                .iter()
                .any(|signal| matches!(signal.signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP))
        {
            break;
        }
        if watched.as_ref().is_some_and(|(pid, _)| gone(*pid)) {
            break;
        }
    }
    drop(held);
    Ok(Exit::Code(0))
}

/// The holder's answer: its PID, the end (RFC 3339, UTC), the GPUs and the variables a launch
/// would set.
fn answer(plan: &Plan, until: &str) -> serde_json::Value {
    let gpus: Vec<serde_json::Value> = plan
        .gpus
        .selection
        .devices
        .iter()
        .map(|device| serde_json::json!({ "index": device.index, "uuid": device.uuid, "name": device.name }))
        .collect();
    let env: serde_json::Map<String, serde_json::Value> =
        plan.gpus.variables.iter().map(|(name, value)| (name.clone(), serde_json::json!(value))).collect();
    serde_json::json!({ "holder_pid": std::process::id(), "until": until, "gpus": gpus, "env": env })
}

/// Whether process `pid` has ended (it is no child of ours: not reaped here).
fn gone(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) == Err(nix::errno::Errno::ESRCH)
}
