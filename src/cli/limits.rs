//! House rules: the `[limits]` table of the system file, which user files, variables and the
//! command line cannot loosen (DESIGN 11, issue 18).
//!
//! ```toml
//! [limits]
//! max-gpus-per-user = 2      # live reservations of one user
//! max-wait = "4h"            # a cap on --wait
//! max-time-limit = "24h"     # every run ends by then (the --time-limit when none is given)
//! default-min-free = "8G"    # every launch asks at least this much free memory
//! idle-limit = "2h"          # a GPU held at 0% utilization this long is warned of ...
//! idle-action = "end"        # ... or its run ended (exit 124); "warn" by default
//! kill-after = "10s"         # a rule's SIGTERM is followed by SIGKILL this much later
//! ```
//!
//! A rule that ends a run (max-time-limit, idle-action = "end") sends SIGTERM and then
//! SIGKILL after `kill-after` (10 s unless set), whatever `--signal` and `--kill-after` say: a
//! command that traps TERM, or a user's `--signal WINCH`, does not outlive it. `"0"` for
//! max-time-limit means no limit, as `--time-limit 0` does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::options::size::{self, Threshold};
use crate::options::{duration, Wait};

/// Between a house rule's SIGTERM and its SIGKILL, unless `kill-after` says.
const RULE_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Limits {
    pub(crate) max_gpus_per_user: Option<u32>,
    pub(crate) max_wait: Option<Duration>,
    pub(crate) max_time_limit: Option<Duration>,
    pub(crate) default_min_free: Option<Threshold>,
    /// A GPU held at 0% utilization this long is warned of (false) or its run ended (true).
    pub(crate) idle_limit: Option<(Duration, bool)>,
    /// `kill-after`: between a rule's SIGTERM and its SIGKILL (`RULE_GRACE` unless set).
    pub(crate) kill_after: Option<Duration>,
    /// The file they came from, for messages.
    pub(crate) file: Option<PathBuf>,
    /// The system file's own `lock-dir`: reservations there are the ones the rules count.
    pub(crate) lock_dir: Option<PathBuf>,
    /// A line for `-v`: a user's GPURUN_SYSTEM_CONFIG that was set aside.
    pub(crate) notice: Option<String>,
}

impl Limits {
    /// `max-gpus-per-user = 2 (/etc/gpurun/config.toml)`.
    pub(crate) fn rule(&self, key: &str, value: &str) -> String {
        let file =
            self.file.as_deref().map_or_else(|| "the system file".to_owned(), |f| f.display().to_string());
        format!("{key} = {value} ({file} [limits])")
    }

    /// The rules in force, one per line, for --list and --doctor.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut rules = Vec::new();
        if let Some(max) = self.max_gpus_per_user {
            rules.push(self.rule("max-gpus-per-user", &max.to_string()));
        }
        if let Some(max) = self.max_wait {
            rules.push(self.rule("max-wait", &duration::compact(max)));
        }
        if let Some(max) = self.max_time_limit {
            rules.push(self.rule("max-time-limit", &duration::compact(max)));
        }
        if let Some(floor) = self.default_min_free {
            rules.push(self.rule("default-min-free", &floor.to_string()));
        }
        if let Some(rule) = self.idle_rule() {
            rules.push(rule);
        }
        if let Some(grace) = self.kill_after {
            rules.push(self.rule("kill-after", &duration::compact(grace)));
        }
        rules
    }

    /// How long a command a rule ended may take to go before SIGKILL.
    pub(crate) fn grace(&self) -> Duration {
        self.kill_after.unwrap_or(RULE_GRACE)
    }

    /// `idle-limit = 2h, idle-action = end (/etc/gpurun/config.toml [limits])`.
    pub(crate) fn idle_rule(&self) -> Option<String> {
        let (after, end) = self.idle_limit?;
        let action = if end { "end" } else { "warn" };
        Some(self.rule("idle-limit", &format!("{}, idle-action = {action}", duration::compact(after))))
    }

    /// Why a user other than root may not run outside the system lock directory while
    /// max-gpus-per-user is set (leases elsewhere cannot be counted): `no_lock`, or the lock
    /// directory the launch would use (`--lock-dir`, its variable, or the default: `--no-config`
    /// drops the system file's `lock-dir` from the settings, not from the rule).
    pub(crate) fn lock_escape(&self, no_lock: bool, lock_dir: &Path, root: bool) -> Option<String> {
        let max = self.max_gpus_per_user?;
        if root {
            return None;
        }
        let rule = self.rule("max-gpus-per-user", &max.to_string());
        let system = self.system_lock_dir();
        let why = format!(
            "the house rule {rule} counts every user's reservations in the system lock directory {}, \
             so only root may reserve elsewhere",
            system.display()
        );
        if no_lock {
            return Some(format!("--no-lock: {why}"));
        }
        (!same_directory(lock_dir, &system))
            .then(|| format!("the lock directory {}: {why}", lock_dir.display()))
    }

    /// Whether `path` is the machine's shared lock directory.
    pub(crate) fn is_system_lock_dir(&self, path: &Path) -> bool {
        same_directory(path, &self.system_lock_dir())
    }

    /// The lock directory the rules count in: the system file's `lock-dir`, else the default.
    pub(crate) fn system_lock_dir(&self) -> PathBuf {
        self.lock_dir.clone().unwrap_or_else(|| PathBuf::from(crate::options::DEFAULT_LOCK_DIR))
    }

    /// `--time-limit` within max-time-limit: none asked is the rule's; more is refused, naming
    /// the rule. `Some(0)` is no limit, as for timeout(1).
    pub(crate) fn time_limit(&self, asked: Option<Duration>) -> Result<Option<Duration>, String> {
        let asked = asked.filter(|limit| !limit.is_zero());
        match (asked, self.max_time_limit) {
            (Some(asked), Some(max)) if asked > max => Err(format!(
                "--time-limit {}: the house rule {} ends every run by then",
                duration::compact(asked),
                self.rule("max-time-limit", &duration::compact(max))
            )),
            (None, Some(max)) => Ok(Some(max)),
            (asked, _) => Ok(asked),
        }
    }

    /// `--wait` within max-wait: forever becomes max-wait, a longer wait is shortened.
    pub(crate) fn cap_wait(&self, wait: Wait) -> Wait {
        match (wait, self.max_wait) {
            (Wait::Forever, Some(max)) => Wait::AtMost(max),
            (Wait::AtMost(asked), Some(max)) => Wait::AtMost(asked.min(max)),
            (wait, _) => wait,
        }
    }
}

/// The same directory, however it was spelled (`/run/lock/gpurun/`, a symlink to it).
fn same_directory(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => a.components().eq(b.components()),
    }
}

/// Reads the `[limits]` table (`table`: its keys and values, with the line of each key).
pub(crate) fn parse(path: &Path, entries: &[(String, usize, toml::Value)]) -> Result<Limits, String> {
    let mut limits = Limits { file: Some(path.to_owned()), ..Limits::default() };
    for (key, line, value) in entries {
        let at = format!("{}:{line}: [limits] {key}", path.display());
        let text = match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(number) => number.to_string(),
            _ => return Err(format!("{at}: expected a number or a string")),
        };
        match key.as_str() {
            "max-gpus-per-user" => {
                let max = text.parse::<u32>().map_err(|_| format!("{at}: {text:?} is not a number of GPUs"))?;
                limits.max_gpus_per_user = Some(max);
            }
            "max-wait" => limits.max_wait = Some(duration::parse(&text).map_err(|e| format!("{at}: {e}"))?),
            "max-time-limit" => {
                let max = duration::parse(&text).map_err(|e| format!("{at}: {e}"))?;
                // "0" is no limit, as --time-limit 0 is (and timeout(1)'s 0).
                limits.max_time_limit = Some(max).filter(|max| !max.is_zero());
            }
            "kill-after" => limits.kill_after = Some(duration::parse(&text).map_err(|e| format!("{at}: {e}"))?),
            "default-min-free" => {
                limits.default_min_free = Some(size::parse_threshold(&text).map_err(|e| format!("{at}: {e}"))?)
            }
            "idle-limit" => {
                let after = duration::parse_positive(&text).map_err(|e| format!("{at}: {e}"))?;
                limits.idle_limit = Some((after, limits.idle_limit.is_some_and(|(_, end)| end)));
            }
            "idle-action" => {
                let end = match text.as_str() {
                    "warn" => false,
                    "end" => true,
                    _ => return Err(format!("{at}: {text:?} is not an idle action: expected warn or end")),
                };
                let after = limits.idle_limit.map(|(after, _)| after).unwrap_or_default();
                limits.idle_limit = Some((after, end));
            }
            other => {
                return Err(format!(
                    "{}:{line}: unknown key {other:?} in [limits]; the house rules are max-gpus-per-user, max-wait, \
                     max-time-limit, default-min-free, idle-limit, idle-action and kill-after",
                    path.display()
                ))
            }
        }
    }
    if limits.idle_limit.is_some_and(|(after, _)| after.is_zero()) {
        return Err(format!(
            "{}: [limits] idle-action needs idle-limit, how long a GPU may be held at 0% utilization (like \"2h\")",
            path.display()
        ));
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_cap() {
        let entries = vec![
            ("max-gpus-per-user".to_owned(), 2, toml::Value::Integer(2)),
            ("max-wait".to_owned(), 3, toml::Value::String("1h".into())),
            ("default-min-free".to_owned(), 4, toml::Value::String("8G".into())),
        ];
        let limits = parse(Path::new("/etc/gpurun/config.toml"), &entries).unwrap();
        assert_eq!(limits.max_gpus_per_user, Some(2));
        assert_eq!(limits.cap_wait(Wait::Forever), Wait::AtMost(Duration::from_secs(3600)));
        assert_eq!(
            limits.cap_wait(Wait::AtMost(Duration::from_secs(60))),
            Wait::AtMost(Duration::from_secs(60))
        );
        assert_eq!(
            limits.cap_wait(Wait::AtMost(Duration::from_secs(7200))),
            Wait::AtMost(Duration::from_secs(3600))
        );
        assert_eq!(limits.cap_wait(Wait::No), Wait::No);
        let ended = Limits { max_time_limit: Some(Duration::from_secs(60)), ..Limits::default() };
        assert_eq!(ended.time_limit(None), Ok(Some(Duration::from_secs(60))));
        assert_eq!(ended.time_limit(Some(Duration::ZERO)), Ok(Some(Duration::from_secs(60))));
        assert_eq!(ended.time_limit(Some(Duration::from_secs(5))), Ok(Some(Duration::from_secs(5))));
        assert!(ended.time_limit(Some(Duration::from_secs(61))).unwrap_err().contains("max-time-limit = 1m"));
        assert_eq!(Limits::default().time_limit(Some(Duration::ZERO)), Ok(None));
        assert_eq!(limits.describe()[0], "max-gpus-per-user = 2 (/etc/gpurun/config.toml [limits])");
        let bad = parse(Path::new("/f"), &[("max-gpu".to_owned(), 7, toml::Value::Integer(1))]).unwrap_err();
        assert!(bad.starts_with("/f:7: unknown key \"max-gpu\" in [limits]"), "{bad}");
        let wrong = parse(Path::new("/f"), &[("max-wait".to_owned(), 2, toml::Value::String("x".into()))]);
        assert!(wrong.unwrap_err().starts_with("/f:2: [limits] max-wait: \"x\" is not a duration"));
    }

    #[test]
    fn idle_rules_warn_sooner_or_end() {
        let entry = |key: &str, value: &str, line| (key.to_owned(), line, toml::Value::String(value.into()));
        let hour = Duration::from_secs(3600);
        let ends =
            parse(Path::new("/f"), &[entry("idle-action", "end", 1), entry("idle-limit", "1h", 2)]).unwrap();
        assert_eq!(ends.idle_limit, Some((hour, true)));
        assert_eq!(ends.idle_rule().unwrap(), "idle-limit = 1h, idle-action = end (/f [limits])");
        let warns = parse(Path::new("/f"), &[entry("idle-limit", "1h", 1)]).unwrap();
        assert_eq!(warns.idle_limit, Some((hour, false)));
        let alone = parse(Path::new("/f"), &[entry("idle-action", "end", 4)]).unwrap_err();
        assert!(alone.contains("idle-action needs idle-limit"), "{alone}");
        let odd = parse(Path::new("/f"), &[entry("idle-action", "kill", 4)]).unwrap_err();
        assert!(odd.ends_with("\"kill\" is not an idle action: expected warn or end"), "{odd}");
    }
}
