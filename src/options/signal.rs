//! Signal names and numbers: `TERM`, `SIGTERM`, `15`, `RTMIN+2`, as `kill -l` spells them.

/// `(number, name)` of the standard signals gpurun knows by name.
pub(crate) const NAMES: &[(libc::c_int, &str)] = &[
    (libc::SIGHUP, "HUP"),
    (libc::SIGINT, "INT"),
    (libc::SIGQUIT, "QUIT"),
    (libc::SIGILL, "ILL"),
    (libc::SIGTRAP, "TRAP"),
    (libc::SIGABRT, "ABRT"),
    (libc::SIGBUS, "BUS"),
    (libc::SIGFPE, "FPE"),
    (libc::SIGKILL, "KILL"),
    (libc::SIGUSR1, "USR1"),
    (libc::SIGSEGV, "SEGV"),
    (libc::SIGUSR2, "USR2"),
    (libc::SIGPIPE, "PIPE"),
    (libc::SIGALRM, "ALRM"),
    (libc::SIGTERM, "TERM"),
    (libc::SIGSTKFLT, "STKFLT"),
    (libc::SIGCHLD, "CHLD"),
    (libc::SIGCONT, "CONT"),
    (libc::SIGSTOP, "STOP"),
    (libc::SIGTSTP, "TSTP"),
    (libc::SIGTTIN, "TTIN"),
    (libc::SIGTTOU, "TTOU"),
    (libc::SIGURG, "URG"),
    (libc::SIGXCPU, "XCPU"),
    (libc::SIGXFSZ, "XFSZ"),
    (libc::SIGVTALRM, "VTALRM"),
    (libc::SIGPROF, "PROF"),
    (libc::SIGWINCH, "WINCH"),
    (libc::SIGIO, "IO"),
    (libc::SIGPWR, "PWR"),
    (libc::SIGSYS, "SYS"),
];

pub(crate) fn name(signal: libc::c_int) -> String {
    if let Some((_, name)) = NAMES.iter().find(|(number, _)| *number == signal) {
        return format!("SIG{name}");
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    if (min..=max).contains(&signal) {
        return format!("SIGRTMIN+{}", signal - min);
    }
    format!("signal {signal}")
}

/// Parses `TERM`, `SIGTERM`, `term`, `15`, `RTMIN+2`.
pub(crate) fn parse(text: &str) -> Result<libc::c_int, String> {
    let trimmed = text.trim();
    let upper = trimmed.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let found = if let Ok(number) = bare.parse::<libc::c_int>() {
        (1..=max).contains(&number).then_some(number)
    } else if let Some((number, _)) = NAMES.iter().find(|(_, name)| *name == bare) {
        Some(*number)
    } else if bare == "RTMIN" {
        Some(min)
    } else if bare == "RTMAX" {
        Some(max)
    } else if let Some(offset) = bare.strip_prefix("RTMIN+") {
        offset.parse::<libc::c_int>().ok().map(|o| min + o).filter(|s| *s <= max)
    } else if let Some(offset) = bare.strip_prefix("RTMAX-") {
        offset.parse::<libc::c_int>().ok().map(|o| max - o).filter(|s| *s >= min)
    } else {
        None
    };
    found.ok_or_else(|| {
        format!("{text:?} is not a signal: expected a name like TERM or SIGUSR1, a number, or RTMIN+N")
    })
}

/// A comma-separated list of signals, for `--no-forward`.
pub(crate) fn parse_list(text: &str) -> Result<SignalList, String> {
    text.split(',').map(parse).collect::<Result<Vec<_>, _>>().map(SignalList)
}

/// A list of signal numbers (one value to clap, so a newtype).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SignalList(pub Vec<libc::c_int>);

/// `--parent-death-signal`: a signal, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeathSignal(pub Option<libc::c_int>);

pub(crate) fn parse_death_signal(text: &str) -> Result<DeathSignal, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(DeathSignal(None));
    }
    parse(text).map(|signal| DeathSignal(Some(signal))).map_err(|e| format!("{e}, or none"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse("sigterm"), Ok(libc::SIGTERM));
        assert_eq!(parse("SIGUSR1"), Ok(libc::SIGUSR1));
        assert_eq!(parse("9"), Ok(libc::SIGKILL));
        assert_eq!(parse("RTMIN+2"), Ok(libc::SIGRTMIN() + 2));
        assert_eq!(name(libc::SIGINT), "SIGINT");
        assert_eq!(name(libc::SIGRTMIN() + 1), "SIGRTMIN+1");
        for bad in ["", "TERMINATE", "0", "99", "RTMIN+99", "-1"] {
            assert!(parse(bad).unwrap_err().contains(&format!("{bad:?}")), "{bad}");
        }
        assert_eq!(parse_list("TERM,INT"), Ok(SignalList(vec![libc::SIGTERM, libc::SIGINT])));
    }
}
