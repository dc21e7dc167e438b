//! Defaults from outside the command line (DESIGN 11): command line > `GPURUN_*` environment >
//! user file (`$XDG_CONFIG_HOME/gpurun/config.toml`, or `GPURUN_CONFIG`) > system file
//! (`/etc/gpurun/config.toml`) > built-in. `--no-config` skips the files.
//!
//! Keys are the long option names (`min-free = "8G"`, `exclusive = true`); variables are
//! `GPURUN_` and the key in capitals (`GPURUN_MIN_FREE=8G`). Each layer becomes option words
//! placed before the user's own, and clap lets a later occurrence override an earlier one, so
//! one parser validates everything. Each setting is first checked on its own, so that an error
//! names the file, line and key (or the variable).
//!
//! `--gpus` has no variable: `GPURUN_GPUS` is what gpurun tells its command (the chosen GPUs),
//! and a gpurun started inside a job must not read it as a request.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cli;

pub const SYSTEM_FILE: &str = "/etc/gpurun/config.toml";

/// Long options that are not settings: modes, one-off outputs, and help.
const NOT_SETTINGS: &[&str] =
    &["list", "dry-run", "export", "doctor", "json", "help", "version", "no-config"];

/// Variables gpurun sets for its command, never read as settings.
const SET_FOR_THE_COMMAND: &[&str] = &["GPURUN_GPUS", "GPURUN_GPU_UUIDS"];

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(String);

/// Whether an option takes a value (`--min-free 8G`) or is a switch (`--exclusive`).
fn option_kind(command: &clap::Command, key: &str) -> Option<OptionKind> {
    if NOT_SETTINGS.contains(&key) {
        return None;
    }
    let arg = command.get_arguments().find(|a| a.get_long() == Some(key))?;
    Some(match arg.get_action() {
        clap::ArgAction::SetTrue | clap::ArgAction::Count => OptionKind::Switch,
        _ if key == "wait" => OptionKind::OptionalValue,
        _ => OptionKind::Value,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionKind {
    Switch,
    Value,
    /// `--wait` alone or `--wait=DURATION`.
    OptionalValue,
}

/// The words one setting stands for, checked by clap on their own. `Ok(None)`: a switch set
/// to false (nothing to add).
fn words(
    command: &clap::Command,
    key: &str,
    value: SettingValue,
    at: &str,
) -> Result<Option<Vec<OsString>>, SettingsError> {
    let kind = option_kind(command, key).ok_or_else(|| {
        SettingsError(format!(
            "{at}: unknown key {key:?}; keys are gpurun's long option names, like min-free or policy"
        ))
    })?;
    let words: Vec<OsString> = match (kind, value) {
        (OptionKind::Switch, SettingValue::Bool(false)) => return Ok(None),
        (OptionKind::Switch, SettingValue::Bool(true)) => vec![format!("--{key}").into()],
        (OptionKind::Switch, _) => {
            return Err(SettingsError(format!("{at}: key {key}: expected true or false")));
        }
        (OptionKind::OptionalValue, SettingValue::Bool(false)) => return Ok(None),
        (OptionKind::OptionalValue, SettingValue::Bool(true)) => vec![format!("--{key}").into()],
        (OptionKind::OptionalValue, SettingValue::Text(text)) => vec![format!("--{key}={text}").into()],
        (OptionKind::Value, SettingValue::Text(text)) => vec![format!("--{key}").into(), text.into()],
        (OptionKind::Value, SettingValue::Bool(_)) => {
            return Err(SettingsError(format!("{at}: key {key}: expected a value, not true or false")));
        }
    };
    let mut alone: Vec<OsString> = vec!["gpurun".into()];
    alone.extend(words.iter().cloned());
    if let Err(error) = command.clone().try_get_matches_from(alone) {
        let rendered = error.render().to_string();
        let first = rendered.lines().next().unwrap_or_default().trim_start_matches("error: ").to_owned();
        return Err(SettingsError(format!("{at}: key {key}: {first}")));
    }
    Ok(Some(words))
}

#[derive(Debug, Clone)]
enum SettingValue {
    Bool(bool),
    Text(String),
}

/// The line of `key = ...` in a file, for messages.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
                || line
                    .strip_prefix(&format!("\"{key}\""))
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|index| index + 1)
        .unwrap_or(1)
}

/// The option words a configuration file stands for.
pub fn file_words(command: &clap::Command, path: &Path, text: &str) -> Result<Vec<OsString>, SettingsError> {
    let shown = path.display();
    let table: toml::Table = text
        .parse()
        .map_err(|error: toml::de::Error| SettingsError(format!("{shown}: {}", error.message())))?;
    let mut all = Vec::new();
    for (key, value) in table {
        let at = format!("{shown}:{}", line_of(text, &key));
        let value = match value {
            toml::Value::Boolean(flag) => SettingValue::Bool(flag),
            toml::Value::String(text) => SettingValue::Text(text),
            toml::Value::Integer(number) => SettingValue::Text(number.to_string()),
            toml::Value::Float(number) => SettingValue::Text(number.to_string()),
            _ => {
                return Err(SettingsError(format!(
                    "{at}: key {key}: expected a string, number or true/false"
                )))
            }
        };
        all.extend(words(command, &key, value, &at)?.into_iter().flatten());
    }
    Ok(all)
}

/// The option words the `GPURUN_*` variables stand for.
pub fn environment_words(
    command: &clap::Command,
    variables: impl Iterator<Item = (String, String)>,
) -> Result<Vec<OsString>, SettingsError> {
    let mut all = Vec::new();
    let mut sorted: Vec<(String, String)> = variables.collect();
    sorted.sort();
    for (name, value) in sorted {
        let Some(key) = name.strip_prefix("GPURUN_") else { continue };
        if SET_FOR_THE_COMMAND.contains(&name.as_str()) || value.is_empty() {
            continue;
        }
        let key = key.to_ascii_lowercase().replace('_', "-");
        // Variables that are not options (GPURUN_LOG, GPURUN_CONFIG) are someone else's.
        let Some(kind) = option_kind(command, &key) else { continue };
        if key == "gpus" {
            continue;
        }
        let value = match (kind, value.to_ascii_lowercase().as_str()) {
            (OptionKind::Switch | OptionKind::OptionalValue, "1" | "true" | "yes" | "on") => {
                SettingValue::Bool(true)
            }
            (OptionKind::Switch | OptionKind::OptionalValue, "0" | "false" | "no" | "off") => {
                SettingValue::Bool(false)
            }
            _ => SettingValue::Text(value),
        };
        all.extend(words(command, &key, value, &name)?.into_iter().flatten());
    }
    Ok(all)
}

fn user_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GPURUN_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("gpurun/config.toml"))
}

fn read_file(command: &clap::Command, path: &Path, must_exist: bool) -> Result<Vec<OsString>, SettingsError> {
    match std::fs::read_to_string(path) {
        Ok(text) => file_words(command, path, &text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && !must_exist => Ok(Vec::new()),
        Err(error) => Err(SettingsError(format!("{}: {error}", path.display()))),
    }
}

/// argv with the lower layers' option words placed before the user's own.
pub fn layered(args: Vec<OsString>) -> Result<Vec<OsString>, SettingsError> {
    let user_words = &args[1.min(args.len())..];
    let options_end = user_words.iter().position(|w| w == "--" || !w.to_string_lossy().starts_with('-'));
    let skip_files = user_words[..options_end.unwrap_or(user_words.len())].iter().any(|w| w == "--no-config");
    let command = cli::command();
    let mut layers: Vec<OsString> = Vec::new();
    if !skip_files {
        layers.extend(read_file(&command, Path::new(SYSTEM_FILE), false)?);
        if let Some(path) = user_file() {
            let named = std::env::var_os("GPURUN_CONFIG").is_some_and(|p| !p.is_empty());
            layers.extend(read_file(&command, &path, named)?);
        }
    }
    let variables = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| name.starts_with("GPURUN_"));
    layers.extend(environment_words(&command, variables)?);
    let mut merged = Vec::with_capacity(args.len() + layers.len());
    merged.extend(args.first().cloned());
    merged.extend(layers);
    merged.extend(user_words.iter().cloned());
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: Vec<OsString>) -> Vec<String> {
        words.into_iter().map(|w| w.into_string().unwrap()).collect()
    }

    #[test]
    fn files_become_option_words() {
        let text = "policy = \"pack\"\nexclusive = true\nkeep-orphans = false\nmin-free = \"8G\"\nwait = \"10m\"\nkill-after = 5\n";
        let words = strings(file_words(&cli::command(), Path::new("c.toml"), text).unwrap());
        assert_eq!(
            words,
            vec!["--exclusive", "--kill-after", "5", "--min-free", "8G", "--policy", "pack", "--wait=10m"]
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
            ("exclusive = \"yes\"\n", "c.toml:1: key exclusive: expected true or false"),
            ("min-free = true\n", "c.toml:1: key min-free: expected a value"),
            ("list = true\n", "unknown key \"list\""),
            ("[section]\nx = 1\n", "c.toml:1: key section: expected a string"),
            ("policy = \n", "c.toml: "),
        ];
        for (text, expected) in cases {
            let error = file_words(&cli::command(), Path::new("c.toml"), text).unwrap_err().to_string();
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
            ("OTHER".to_owned(), "x".to_owned()),
        ];
        let words = strings(environment_words(&cli::command(), variables.into_iter()).unwrap());
        assert_eq!(words, vec!["--exclusive", "--policy", "index"]);
        let bad = environment_words(
            &cli::command(),
            vec![("GPURUN_MAX_UTIL".to_owned(), "200".to_owned())].into_iter(),
        );
        assert!(bad
            .unwrap_err()
            .to_string()
            .starts_with("GPURUN_MAX_UTIL: key max-util: invalid value '200'"));
    }
}
