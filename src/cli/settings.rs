//! Defaults from outside the command line (DESIGN 11): command line > `GPURUN_*` environment >
//! user file (`$XDG_CONFIG_HOME/gpurun/config.toml`, or `GPURUN_CONFIG`) > system file
//! (`/etc/gpurun/config.toml`) > built-in. `--no-config` skips the files.
//!
//! Keys are the long option names (`min-free = "8G"`, `exclusive = true`); variables are
//! `GPURUN_` and the key in capitals (`GPURUN_MIN_FREE=8G`). Each layer becomes option words
//! placed before the user's own, and clap lets a later occurrence override an earlier one, so
//! one parser validates everything. A value always travels attached (`--model=-SXM4`), so it is
//! never read as an option itself. Each setting is first checked on its own, so that an error
//! names the file, line and key (or the variable), and each remembers where it came from.
//!
//! Not settings: `--per-rank` and `--group` (one launch's, under its launcher), `GPURUN_GPUS` and
//! `GPURUN_GPU_UUIDS` (what gpurun tells its command; a gpurun started inside a job must not read
//! them as a request), `GPURUN_CONFIG` and `GPURUN_LOG`.
//! Any other `GPURUN_*` variable must name a setting: a typo is an error, not silently nothing.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::cli::limits::{self, Limits};

pub(crate) const SYSTEM_FILE: &str = "/etc/gpurun/config.toml";

/// A configuration file larger than this is not a configuration file.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Long options that are not settings: modes, one-off outputs, and help.
const NOT_SETTINGS: &[&str] = &[
    "list",
    "watch",
    "dry-run",
    "export",
    "doctor",
    "history",
    "json",
    "completions",
    // A kernel spec is written once, where this command line says.
    "jupyter-kernel",
    "user",
    "prefix",
    // One reservation, now.
    "hold",
    "hold-for",
    "release",
    "help",
    "version",
    "no-config",
    // What one launch of one job asks for, under its launcher: a default in a file would turn
    // every launch into a rank.
    "per-rank",
    "group",
];

/// `GPURUN_*` variables that are not settings.
const NOT_SETTING_VARIABLES: &[&str] = &[
    "GPURUN_GPUS",
    "GPURUN_GPU_UUIDS",
    "GPURUN_JOB_ID",
    "GPURUN_CONFIG",
    "GPURUN_SYSTEM_CONFIG",
    "GPURUN_LOG",
];

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SettingsError(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionKind {
    Switch,
    /// A switch that may be repeated (`-vv`): true, or how many times.
    Repeated,
    Value,
    /// With an optional value: `--wait` alone or `--wait=DURATION`.
    OptionalValue,
}

/// Whether an option takes a value (`--min-free 8G`) or is a switch (`--exclusive`); `None`
/// for what is not a setting.
fn option_kind(command: &clap::Command, key: &str) -> Option<OptionKind> {
    if NOT_SETTINGS.contains(&key) {
        return None;
    }
    let arg = command.get_arguments().find(|a| a.get_long() == Some(key))?;
    Some(match arg.get_action() {
        clap::ArgAction::SetTrue => OptionKind::Switch,
        clap::ArgAction::Count => OptionKind::Repeated,
        _ if arg.get_num_args().is_some_and(|range| range.min_values() == 0) => OptionKind::OptionalValue,
        _ => OptionKind::Value,
    })
}

#[derive(Debug, Clone)]
enum SettingValue {
    Bool(bool),
    Text(String),
}

/// One setting from one layer: its option words and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    pub(crate) key: String,
    pub(crate) words: Vec<OsString>,
    /// `path:line` or the variable's name.
    pub(crate) origin: String,
}

/// The words one setting stands for (checked later, see `check`). `Ok(None)`: a switch set to
/// false (nothing to add).
fn setting(
    command: &clap::Command,
    key: &str,
    value: SettingValue,
    at: &str,
) -> Result<Option<Setting>, SettingsError> {
    // `history = false` reads better than `no-history = true`; both work (`--history` itself
    // is a mode, not a setting).
    if key == "history" {
        return match value {
            SettingValue::Bool(keep) => setting(command, "no-history", SettingValue::Bool(!keep), at),
            SettingValue::Text(_) => Err(SettingsError(format!("{at}: key history: expected true or false"))),
        };
    }
    let kind = option_kind(command, key).ok_or_else(|| {
        SettingsError(format!(
            "{at}: unknown key {key:?}; keys are gpurun's long option names, like min-free or policy{}",
            did_you_mean(command, key, |long| long.to_owned())
        ))
    })?;
    let words: Vec<OsString> = match (kind, value) {
        (
            OptionKind::Switch | OptionKind::Repeated | OptionKind::OptionalValue,
            SettingValue::Bool(false),
        ) => return Ok(None),
        (OptionKind::Switch | OptionKind::Repeated | OptionKind::OptionalValue, SettingValue::Bool(true)) => {
            vec![format!("--{key}").into()]
        }
        (OptionKind::Repeated, SettingValue::Text(text)) => match text.parse::<u8>() {
            Ok(times) if times <= 3 => vec![format!("--{key}").into(); usize::from(times)],
            _ => {
                return Err(SettingsError(format!(
                    "{at}: key {key}: expected true, false or a count from 0 to 3, not {text:?}"
                )))
            }
        },
        (OptionKind::Switch, SettingValue::Text(_)) => {
            return Err(SettingsError(format!("{at}: key {key}: expected true or false")));
        }
        (OptionKind::OptionalValue | OptionKind::Value, SettingValue::Text(text)) => {
            vec![format!("--{key}={text}").into()]
        }
        (OptionKind::Value, SettingValue::Bool(_)) => {
            return Err(SettingsError(format!("{at}: key {key}: expected a value, not true or false")));
        }
    };
    Ok(Some(Setting { key: key.to_owned(), words, origin: at.to_owned() }))
}

/// Checks the settings' words with clap: all at once, which is one parse; only when that fails,
/// each on its own, so that the error names the file, line and key (or the variable).
fn check(command: &mut clap::Command, settings: &[Setting]) -> Result<(), SettingsError> {
    if settings.is_empty() {
        return Ok(());
    }
    let words = |some: &[&Setting]| -> Vec<OsString> {
        std::iter::once(OsString::from("gpurun"))
            .chain(some.iter().flat_map(|s| s.words.iter().cloned()))
            .collect()
    };
    let all: Vec<&Setting> = settings.iter().collect();
    let Err(together) = command.try_get_matches_from_mut(words(&all)) else { return Ok(()) };
    // clap's message up to its blank line: with the accepted values, as on the command line.
    let first_line = |error: clap::Error| {
        let rendered = error.render().to_string();
        let lines: Vec<&str> =
            rendered.lines().take_while(|line| !line.trim().is_empty()).map(str::trim).collect();
        lines.join(" ").trim_start_matches("error: ").to_owned()
    };
    for setting in settings {
        if let Err(error) = command.try_get_matches_from_mut(words(&[setting])) {
            return Err(SettingsError(format!(
                "{}: key {}: {}",
                setting.origin,
                setting.key,
                first_line(error)
            )));
        }
    }
    let origins: Vec<&str> = settings.iter().map(|s| s.origin.as_str()).collect();
    Err(SettingsError(format!("settings from {}: {}", origins.join(", "), first_line(together))))
}

/// Every key a configuration file may hold (the long options that are settings).
pub fn keys(command: &clap::Command) -> impl Iterator<Item = &str> {
    command.get_arguments().filter_map(|arg| arg.get_long()).filter(|long| !NOT_SETTINGS.contains(long))
}

/// ` (did you mean X?)` for the closest long option, if one is close.
fn did_you_mean(command: &clap::Command, wrong: &str, shown: impl Fn(&str) -> String) -> String {
    keys(command)
        .map(|long| (edit_distance(wrong, long), long))
        .filter(|(distance, long)| *distance <= 2.max(long.len() / 4))
        .min()
        .map(|(_, long)| format!(" (did you mean {}?)", shown(long)))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// 1-based line of a byte offset.
fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The `[limits]` table, with the line of each key.
#[derive(serde::Deserialize)]
struct LimitsTable {
    limits: Option<BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>>,
}

/// The house rules in a system file's text (none when it has no `[limits]`).
fn file_limits(path: &Path, text: &str) -> Result<Limits, SettingsError> {
    let Ok(LimitsTable { limits: Some(table) }) = toml::from_str::<LimitsTable>(text) else {
        return Ok(Limits::default());
    };
    let entries: Vec<(String, usize, toml::Value)> = table
        .into_iter()
        .map(|(key, value)| {
            let line = line_at(text, key.span().start);
            (key.into_inner(), line, value.into_inner())
        })
        .collect();
    limits::parse(path, &entries).map_err(SettingsError)
}

/// What a line `key = word` (a bare word, which TOML refuses: "string values must be quoted")
/// meant, said in the setting's own terms: a switch takes true or false (`exclusive = yes`),
/// anything else a quoted text (`policy = pack`). `None` for other lines.
fn bare_value(command: &clap::Command, line: &str) -> Option<String> {
    let (key, value) = line.split_once('=')?;
    let (key, value) = (key.trim(), value.split('#').next().unwrap_or_default().trim());
    let bare = !value.is_empty() && value.chars().all(|c| c.is_alphanumeric() || "-_.:/+%".contains(c));
    if !bare || value.parse::<f64>().is_ok() || value == "true" || value == "false" {
        return None;
    }
    let arg = command.get_arguments().find(|arg| arg.get_long() == Some(key))?;
    Some(match arg.get_action().takes_values() {
        false => format!("key {key}: {value}: expected true or false"),
        true => format!("key {key}: {value}: a text value is quoted ({key} = \"{value}\")"),
    })
}

/// TOML's "duplicate key", with the key and where it was first given.
fn duplicate(text: &str, message: &str, line: &str) -> Option<String> {
    if message.trim_end() != "duplicate key" {
        return None;
    }
    let key = line.split('=').next()?.trim().trim_matches('"');
    let first =
        text.lines().position(|l| l.split('=').next().map(|k| k.trim().trim_matches('"')) == Some(key))?;
    Some(format!(
        "duplicate key {key:?}: it was given on line {} already; a key is given once in a file",
        first + 1
    ))
}

/// The settings a configuration file stands for. Only the system file may hold `[limits]`.
pub(crate) fn file_settings(
    command: &mut clap::Command,
    path: &Path,
    text: &str,
    system: bool,
) -> Result<Vec<Setting>, SettingsError> {
    let shown = path.display();
    let table: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>> =
        toml::from_str(text).map_err(|error: toml::de::Error| {
            let number = error.span().map(|span| line_at(text, span.start));
            let line = number.map(|n| format!(":{n}")).unwrap_or_default();
            let at_line = number.and_then(|n| text.lines().nth(n.saturating_sub(1)));
            let hint = at_line
                .and_then(|l| bare_value(command, l))
                .or_else(|| duplicate(text, error.message(), at_line?));
            SettingsError(format!(
                "{shown}{line}: {}",
                hint.unwrap_or_else(|| error.message().trim_end().to_owned())
            ))
        })?;
    // Every bad line is reported, in the file's order (the table is in the keys' order).
    let mut all = Vec::new();
    let mut bad: Vec<(usize, String)> = Vec::new();
    for (key, value) in table {
        let line = line_at(text, key.span().start);
        let at = format!("{shown}:{line}");
        let key = key.into_inner();
        if key == "limits" {
            if !system {
                bad.push((
                    line,
                    format!("{at}: [limits] belongs in the system file ({SYSTEM_FILE}): house rules are the administrator's"),
                ));
            }
            continue;
        }
        let value = match value.into_inner() {
            toml::Value::Boolean(flag) => SettingValue::Bool(flag),
            toml::Value::String(text) => SettingValue::Text(text),
            toml::Value::Integer(number) => SettingValue::Text(number.to_string()),
            toml::Value::Float(number) => SettingValue::Text(number.to_string()),
            _ => {
                bad.push((line, format!("{at}: key {key}: expected a string, number or true/false")));
                continue;
            }
        };
        match setting(command, &key, value, &at) {
            Ok(found) => all.extend(found),
            Err(SettingsError(why)) => bad.push((line, why)),
        }
    }
    if bad.is_empty() {
        // Checked against each other only if the command line does not parse (`Layered::blame`).
        return Ok(all);
    }
    // The lines that parsed may still hold bad values: each is checked on its own.
    for one in &all {
        if let Err(SettingsError(why)) = check(command, std::slice::from_ref(one)) {
            let line = one.origin.rsplit(':').next().and_then(|l| l.parse().ok()).unwrap_or(0);
            bad.push((line, why));
        }
    }
    bad.sort();
    Err(SettingsError(bad.into_iter().map(|(_, why)| why).collect::<Vec<_>>().join("\n  ")))
}

/// The settings the `GPURUN_*` variables stand for.
pub(crate) fn environment_settings(
    command: &mut clap::Command,
    variables: impl Iterator<Item = (String, String)>,
) -> Result<Vec<Setting>, SettingsError> {
    let mut all = Vec::new();
    let mut sorted: Vec<(String, String)> =
        variables.filter(|(name, _)| name.starts_with("GPURUN_")).collect();
    sorted.sort();
    for (name, value) in sorted {
        if NOT_SETTING_VARIABLES.contains(&name.as_str()) || value.is_empty() {
            continue;
        }
        let key = name["GPURUN_".len()..].to_ascii_lowercase().replace('_', "-");
        let Some(kind) = option_kind(command, &key) else {
            let hint = did_you_mean(command, &key, |long| {
                format!("GPURUN_{}", long.to_ascii_uppercase().replace('-', "_"))
            });
            return Err(SettingsError(format!(
                "{name} names no setting{hint}; settings are GPURUN_ and a long option name in capitals, like \
                 GPURUN_MIN_FREE (--gpus, the modes and GPURUN_GPUS/GPURUN_GPU_UUIDS, which gpurun sets for \
                 its command, are not settings)"
            )));
        };
        let value = match (kind, value.to_ascii_lowercase().as_str()) {
            (OptionKind::Switch | OptionKind::OptionalValue, "1" | "true" | "yes" | "on")
            | (OptionKind::Repeated, "true" | "yes" | "on") => SettingValue::Bool(true),
            (OptionKind::Switch | OptionKind::OptionalValue, "0" | "false" | "no" | "off")
            | (OptionKind::Repeated, "false" | "no" | "off") => SettingValue::Bool(false),
            _ => SettingValue::Text(value),
        };
        all.extend(setting(command, &key, value, &name)?);
    }
    Ok(all)
}

fn user_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GPURUN_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    // A relative XDG_CONFIG_HOME is ignored, as the XDG specification says.
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("gpurun/config.toml"))
}

/// Reads a configuration file: a regular file (a FIFO or a device would hang or never end) of
/// at most 1 MiB, in UTF-8. `must_exist`: a missing file is an error (it was named).
fn read_text(path: &Path, must_exist: bool) -> Result<Option<String>, SettingsError> {
    let shown = path.display();
    let fail = |what: String| SettingsError(format!("{shown}: {what}"));
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && !must_exist => return Ok(None),
        Err(error) => return Err(fail(error.to_string())),
    };
    let metadata = file.metadata().map_err(|e| fail(e.to_string()))?;
    if is_dev_null(&metadata) {
        // GPURUN_CONFIG=/dev/null means no file, as GIT_CONFIG_GLOBAL and ssh -F do.
        return Ok(Some(String::new()));
    }
    if !metadata.file_type().is_file() {
        return Err(fail(
            "not a regular file; a configuration file must be one (for none: --no-config, or /dev/null)"
                .to_owned(),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail("larger than 1 MiB; that is not a configuration file".to_owned()));
    }
    String::from_utf8(bytes).map(Some).map_err(|_| fail("not UTF-8 text".to_owned()))
}

/// The null device (character device 1:3), whatever its name.
fn is_dev_null(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let rdev = metadata.rdev();
    metadata.file_type().is_char_device() && libc::major(rdev) == 1 && libc::minor(rdev) == 3
}

/// The system file: /etc/gpurun/config.toml, or `$GPURUN_SYSTEM_CONFIG` when root runs gpurun
/// (tests, unusual installs). A user cannot name another: its `[limits]` are the house rules,
/// and any file without them (an empty one, the example config) would drop every rule.
/// Returns the file and, when a user's GPURUN_SYSTEM_CONFIG was set aside, a line saying so.
fn system_file() -> (PathBuf, Option<String>) {
    let named = std::env::var_os("GPURUN_SYSTEM_CONFIG").filter(|p| !p.is_empty()).map(PathBuf::from);
    match named {
        Some(path) if nix::unistd::geteuid().is_root() => (path, None),
        Some(path) => (
            PathBuf::from(SYSTEM_FILE),
            Some(format!(
                "GPURUN_SYSTEM_CONFIG={} is ignored: only root may name another system file; reading {SYSTEM_FILE}",
                path.display()
            )),
        ),
        None => (PathBuf::from(SYSTEM_FILE), None),
    }
}

/// The system file's own `lock-dir`, if it sets one: the lock directory house rules count in.
fn system_lock_dir(settings: &[Setting]) -> Option<PathBuf> {
    let setting = settings.iter().rev().find(|s| s.key == "lock-dir")?;
    let word = setting.words.first()?.as_bytes();
    Some(PathBuf::from(OsStr::from_bytes(word.strip_prefix(b"--lock-dir=")?)))
}

/// argv with the lower layers' option words placed before the user's own, and where each
/// option that came from a layer was set.
pub(crate) struct Layered {
    pub(crate) args: Vec<OsString>,
    /// The house rules of the system file.
    pub(crate) limits: Limits,
    /// Each layer's settings, lowest first (the system file's only where it is read).
    layers: Vec<Vec<Setting>>,
}

impl Layered {
    /// Long option -> origin, for the options a layer set (the last layer wins); the caller
    /// removes those the user's own words set.
    pub(crate) fn origins(&self) -> BTreeMap<String, String> {
        self.settings().map(|s| (s.key.clone(), s.origin.clone())).collect()
    }

    /// Every layer's settings, lowest first.
    pub(crate) fn settings(&self) -> impl Iterator<Item = &Setting> {
        self.layers.iter().flatten()
    }

    /// The setting to blame, once the layered command line did not parse: each layer's
    /// settings on their own, in order, then all of them together. Only then: each of these is
    /// a part of that command line (every option overrides itself, and no option overrides
    /// another), so a part that fails makes the whole fail, and a command line that parses
    /// has no part to blame. That spares three parses of every launch (0.2 ms).
    pub(crate) fn blame(&self, command: &mut clap::Command) -> Result<(), SettingsError> {
        blame_layers(command, &self.layers)?;
        check(command, &self.layers.concat())
    }
}

fn blame_layers(command: &mut clap::Command, layers: &[Vec<Setting>]) -> Result<(), SettingsError> {
    layers.iter().try_for_each(|layer| check(command, layer))
}

/// The layers under the user's own words (`args[0]` is the program name), checked against the
/// command line's definition.
pub(crate) fn layered(command: &mut clap::Command, args: Vec<OsString>) -> Result<Layered, SettingsError> {
    let user_words = &args[1.min(args.len())..];
    let options_end = user_words.iter().position(|w| w == "--" || !w.to_string_lossy().starts_with('-'));
    let skip_files = user_words[..options_end.unwrap_or(user_words.len())].iter().any(|w| w == "--no-config");
    let mut layers = Vec::new();
    let (system, ignored) = system_file();
    let named_system = system.as_os_str() != SYSTEM_FILE;
    let system_text = read_text(&system, named_system)?;
    // The house rules hold with --no-config too.
    let mut limits = match &system_text {
        Some(text) => file_limits(&system, text)?,
        None => Limits::default(),
    };
    limits.notice = ignored;
    if let Some(text) = &system_text {
        let system_settings = file_settings(command, &system, text, true)?;
        limits.lock_dir = system_lock_dir(&system_settings);
        if skip_files {
            // Not a part of the command line, which therefore cannot stand for it: checked now.
            check(command, &system_settings)?;
        } else {
            layers.push(system_settings);
        }
    }
    // A later layer's own error comes after an earlier layer's bad value, as the layers read.
    let blamed_first = |layers: &[Vec<Setting>], command: &mut clap::Command, error: SettingsError| {
        blame_layers(command, layers).and(Err(error))
    };
    if !skip_files {
        if let Some(path) = user_file() {
            let named = std::env::var_os("GPURUN_CONFIG").is_some_and(|p| !p.is_empty());
            let text = match read_text(&path, named) {
                Ok(text) => text,
                Err(error) => return blamed_first(&layers, command, error),
            };
            if let Some(text) = text {
                match file_settings(command, &path, &text, false) {
                    Ok(user_settings) => layers.push(user_settings),
                    Err(error) => return blamed_first(&layers, command, error),
                }
            }
        }
    }
    let variables = std::env::vars_os().filter_map(|(name, value)| {
        let name = name.into_string().ok()?;
        match value.into_string() {
            Ok(value) => Some((name, value)),
            // A GPURUN_ setting that is not UTF-8 is checked like any bad value.
            Err(value) => Some((name, value.to_string_lossy().into_owned())),
        }
    });
    match environment_settings(command, variables) {
        Ok(variable_settings) => layers.push(variable_settings),
        Err(error) => return blamed_first(&layers, command, error),
    }
    let mut merged: Vec<OsString> = args.first().cloned().into_iter().collect();
    merged.extend(layers.iter().flatten().flat_map(|s| s.words.iter().cloned()));
    merged.extend(user_words.iter().cloned());
    Ok(Layered { args: merged, limits, layers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli;

    /// One layer, as `layered` would hold it.
    fn layered_of(layer: Vec<Setting>) -> Layered {
        Layered { args: Vec::new(), limits: Limits::default(), layers: vec![layer] }
    }

    fn words(settings: Vec<Setting>) -> Vec<String> {
        settings.into_iter().flat_map(|s| s.words).map(|w| w.into_string().unwrap()).collect()
    }

    #[test]
    fn files_become_option_words() {
        let text = "policy = \"pack\"\nexclusive = true\nkeep-orphans = false\nmin-free = \"8G\"\nwait = \"10m\"\nkill-after = 5\nmodel = \"-SXM4\"\n";
        let settings = file_settings(&mut cli::command(), Path::new("c.toml"), text, false).unwrap();
        assert_eq!(settings.iter().find(|s| s.key == "min-free").unwrap().origin, "c.toml:4");
        assert_eq!(
            words(settings),
            vec![
                "--exclusive",
                "--kill-after=5",
                "--min-free=8G",
                "--model=-SXM4",
                "--policy=pack",
                "--wait=10m"
            ]
        );
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            (
                "policy = \"pack\"\nmin-free = \"8X\"\n",
                "c.toml:2: key min-free: invalid value '8X' for '--min-free",
            ),
            ("\n\nbogus = 1\n", "c.toml:3: unknown key \"bogus\""),
            ("\nmin-fre = \"8G\"\n", "(did you mean min-free?)"),
            ("exclusive = \"yes\"\n", "c.toml:1: key exclusive: expected true or false"),
            ("min-free = true\n", "c.toml:1: key min-free: expected a value"),
            ("list = true\n", "unknown key \"list\""),
            ("[section]\nx = 1\n", "c.toml:1: key section: expected a string"),
            ("exclusive = true\npolicy = \n", "c.toml:2: "),
        ];
        for (text, expected) in cases {
            let mut command = cli::command();
            let error = file_settings(&mut command, Path::new("c.toml"), text, false)
                .and_then(|layer| Layered::blame(&layered_of(layer), &mut command))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn variables_become_option_words_except_the_commands_own() {
        let variables = vec![
            ("GPURUN_POLICY".to_owned(), "index".to_owned()),
            ("GPURUN_EXCLUSIVE".to_owned(), "1".to_owned()),
            ("GPURUN_KEEP_ORPHANS".to_owned(), "no".to_owned()),
            ("GPURUN_GPUS".to_owned(), "3".to_owned()),
            ("GPURUN_GPU_UUIDS".to_owned(), "GPU-x".to_owned()),
            ("GPURUN_LOG".to_owned(), "debug".to_owned()),
            ("GPURUN_NVML_LIB".to_owned(), String::new()),
            ("GPURUN_MODEL".to_owned(), "-SXM4".to_owned()),
            ("OTHER".to_owned(), "x".to_owned()),
        ];
        let settings = environment_settings(&mut cli::command(), variables.into_iter()).unwrap();
        assert_eq!(words(settings), vec!["--exclusive", "--model=-SXM4", "--policy=index"]);
        let bad = |name: &str, value: &str| {
            let mut command = cli::command();
            environment_settings(&mut command, vec![(name.to_owned(), value.to_owned())].into_iter())
                .and_then(|layer| layered_of(layer).blame(&mut command))
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad("GPURUN_MAX_UTIL", "200").starts_with("GPURUN_MAX_UTIL: key max-util: invalid value '200'")
        );
        let typo = bad("GPURUN_MIN_FRE", "8G");
        assert!(
            typo.starts_with("GPURUN_MIN_FRE names no setting (did you mean GPURUN_MIN_FREE?)"),
            "{typo}"
        );
        assert!(bad("GPURUN_LIST", "1").contains("names no setting"));
    }
}
