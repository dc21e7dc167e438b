//! The documented exit codes (DESIGN 10), and the one rule that turns how the command ended
//! into gpurun's own exit status.

/// Not enough GPUs satisfy the request (sysexits EX_TEMPFAIL: retry later, or use `--wait`).
pub(crate) const NOT_ENOUGH_GPUS: u8 = 75;
/// gpurun's own failure: usage, NVML, lock directory, strict verification, a request no state
/// of the machine can meet.
pub(crate) const GPURUN_ERROR: u8 = 125;
/// The command ran out its `--time-limit` (timeout(1)'s status).
pub(crate) const TIMED_OUT: u8 = 124;
/// ... and the SIGKILL after `--kill-after` ended it (timeout(1)'s 128+9).
pub(crate) const TIMED_OUT_KILLED: u8 = 137;
/// The command was found but could not be executed.
pub(crate) const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-status table of `--help` and the man page (a test ties it to the constants).
pub(crate) const TABLE: &[(&str, &str)] = &[
    ("75", "not enough GPUs satisfy the request now (retry later, or --wait)"),
    ("124", "COMMAND ran out its --time-limit (137: and the SIGKILL after --kill-after ended it), or the house rule idle-action = \"end\" ended it"),
    (
        "125",
        "gpurun's own error: usage, NVML missing, failing or not answering (--nvml-timeout), an unusable lock \
         directory, a request no state of the machine can meet, --verify strict",
    ),
    ("126", "COMMAND was found but is not executable"),
    ("127", "COMMAND was not found"),
    ("other", "COMMAND's own exit status; a COMMAND killed by signal N makes gpurun die by N (a shell shows 128+N)"),
];

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Exited(u8),
    Signaled(i32),
}

/// What gpurun does at the end of a supervised run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(u8),
    /// Die by this signal (or, where that cannot work, exit 128+N).
    Signal(i32),
}

impl Exit {
    /// The command's end, unless `--verify strict` ended it (then gpurun's own failure) or its
    /// `--time-limit` did (124, or 137 where the SIGKILL that followed ended it, as timeout(1)).
    pub(crate) fn of(end: End, strict_failure: bool, limited: bool) -> Exit {
        match (strict_failure, limited, end) {
            (true, _, _) => Exit::Code(GPURUN_ERROR),
            (false, true, End::Signaled(libc::SIGKILL)) => Exit::Code(TIMED_OUT_KILLED),
            (false, true, _) => Exit::Code(TIMED_OUT),
            (false, false, End::Exited(code)) => Exit::Code(code),
            (false, false, End::Signaled(signal)) => Exit::Signal(signal),
        }
    }

    /// The status a shell sees: the code, or 128+N.
    pub(crate) fn status(self) -> i32 {
        match self {
            Exit::Code(code) => i32::from(code),
            Exit::Signal(signal) => 128 + signal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_the_constants() {
        let codes: Vec<&str> = TABLE.iter().map(|(code, _)| *code).collect();
        let expected =
            [NOT_ENOUGH_GPUS, TIMED_OUT, GPURUN_ERROR, NOT_EXECUTABLE, NOT_FOUND].map(|c| c.to_string());
        assert_eq!(codes[..5], expected.iter().map(String::as_str).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn the_rule() {
        assert_eq!(Exit::of(End::Exited(3), false, false).status(), 3);
        assert_eq!(Exit::of(End::Signaled(libc::SIGINT), false, false).status(), 130);
        assert_eq!(Exit::of(End::Signaled(libc::SIGINT), true, false), Exit::Code(GPURUN_ERROR));
        assert_eq!(Exit::of(End::Exited(7), false, true), Exit::Code(TIMED_OUT));
        assert_eq!(Exit::of(End::Signaled(libc::SIGTERM), false, true), Exit::Code(TIMED_OUT));
        assert_eq!(Exit::of(End::Signaled(libc::SIGKILL), false, true), Exit::Code(TIMED_OUT_KILLED));
    }
}
