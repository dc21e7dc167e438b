//! Stage 1, the command line: argv (a packed shebang line split first), configuration files and
//! `GPURUN_*` variables layered under it, parsed by one clap definition into `Parsed`, which
//! `config::resolve` turns into the run's `Config`. Nothing here knows a later stage.

mod args;
mod completion;
pub(crate) mod limits;
mod reference;
pub mod settings;
pub(crate) mod shebang;

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::parser::ValueSource;

pub use args::command;
pub(crate) use args::{Cli, CompletionShell, WaitLimit};
pub use reference::{REFERENCE, SEE_ALSO};

use crate::cli::settings::SettingsError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}

/// The parsed command line and what the settings contributed.
pub(crate) struct Parsed {
    pub(crate) cli: Cli,
    /// Long option -> the file:line or variable its value came from (not the command line).
    pub(crate) origins: BTreeMap<String, String>,
    /// The user's own option words, shell-quoted.
    pub(crate) request_text: String,
    /// The same words as typed (`--jupyter-kernel` writes them into its kernel spec).
    pub(crate) own_words: Vec<OsString>,
    /// The house rules of the system file.
    pub(crate) limits: limits::Limits,
}

impl Parsed {
    /// How much gpurun says (`-q`, `-v`, `-vv`), known before anything is resolved.
    pub(crate) fn verbosity(&self) -> crate::options::Verbosity {
        verbosity(self.cli.quiet, self.cli.verbose)
    }
}

/// `-q`, `-v`, `-vv`.
pub(crate) fn verbosity(quiet: bool, verbose: u8) -> crate::options::Verbosity {
    use crate::options::Verbosity;
    match (quiet, verbose) {
        (true, _) => Verbosity::Quiet,
        (false, 0) => Verbosity::Normal,
        (false, 1) => Verbosity::Debug,
        (false, _) => Verbosity::Trace,
    }
}

/// clap's error as one line in gpurun's style, naming a non-UTF-8 argument if that was it.
fn usage(error: clap::Error, args: &[OsString]) -> CliError {
    if error.kind() == ErrorKind::InvalidUtf8 {
        if let Some((position, word)) = args.iter().enumerate().skip(1).find(|(_, w)| w.to_str().is_none()) {
            return CliError::Usage(format!(
                "argument {position} ({:?}) is not valid UTF-8; gpurun's options take UTF-8 text (the command and \
                 its arguments may be any bytes)",
                word.to_string_lossy()
            ));
        }
    }
    // clap renders "error: <what>\n\n<usage>"; keep gpurun's one-line prefix convention.
    let rendered = error.render().to_string();
    CliError::Usage(rendered.trim_end().strip_prefix("error: ").unwrap_or(&rendered).to_owned())
}

/// A completion script for `shell`, generated from the definition itself.
pub(crate) fn completion_script(shell: CompletionShell) -> String {
    completion::script(shell, command())
}

/// Parses argv under the configuration layers. `Ok(None)`: help, version or a completion
/// script was printed. These are answered from the user's own words before any setting is
/// read, so that they work on a machine with a broken configuration.
pub(crate) fn parse_command_line(args: Vec<OsString>) -> Result<Option<Parsed>, CliError> {
    let args = shebang::expand(args).map_err(CliError::Usage)?;
    // One definition, built once, for the user's own words and for all of them.
    let mut definition = args::parsing_command();
    let user_only = definition.try_get_matches_from_mut(args.clone());
    if let Err(error) = &user_only {
        if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            // Rendered by the definition that holds --help's reference sections.
            let rendered = match command().try_get_matches_from(args) {
                Err(full) => full.render().to_string(),
                Ok(_) => error.render().to_string(),
            };
            crate::process::stdio::print(&rendered).map_err(CliError::Output)?;
            return Ok(None);
        }
    }
    if let Ok(matches) = &user_only {
        if let Some(&shell) = matches.get_one::<CompletionShell>("completions") {
            if let Some(word) = matches.get_many::<OsString>("command").and_then(|mut words| words.next()) {
                return Err(CliError::Usage(format!("--completions takes no COMMAND, but got {word:?}")));
            }
            crate::process::stdio::print(&completion_script(shell)).map_err(CliError::Output)?;
            return Ok(None);
        }
    }
    let layered = settings::layered(&mut definition, args.clone())?;
    // Without settings the user's words are the whole command line, already parsed.
    let (matches, user_only) = match layered.settings().next().is_none() {
        true => (user_only, None),
        false => (definition.try_get_matches_from_mut(layered.args.clone()), Some(user_only)),
    };
    let matches = match matches {
        Ok(matches) => matches,
        Err(error) => {
            layered.blame(&mut definition)?;
            return Err(usage(error, &args));
        }
    };
    let mut cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|error| usage(error, &args))?;
    cli.gpus_given = matches.value_source("gpus").is_some_and(|source| source != ValueSource::DefaultValue);
    let mut origins = layered.origins();
    // A setting the user's own words give again is the command line's.
    if let Some(Ok(matches)) = user_only {
        origins.retain(|long, _| {
            let id = definition
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .map(|a| a.get_id().to_string());
            id.is_none_or(|id| matches.value_source(&id) != Some(ValueSource::CommandLine))
        });
    }
    // The user's own words before the command (and its `--`), for the wait queue.
    let words = &args[1.min(args.len())..];
    let own = &words[..words.len().saturating_sub(cli.command.len())];
    let own = own.strip_suffix(&[OsString::from("--")]).unwrap_or(own);
    let request_text = crate::options::shell::quote(own);
    Ok(Some(Parsed { cli, origins, request_text, own_words: own.to_vec(), limits: layered.limits }))
}
