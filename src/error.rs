//! gpurun's own failures, each with the exit code it means.

use crate::cli::settings::SettingsError;
use crate::cli::CliError;
use crate::config::{Config, ConfigError};
use crate::exit_code;
use crate::probe::session::OpenError;
use crate::process::spawn::LaunchError;
use crate::reserve::acquire::AcquireError;
use crate::reserve::group::GroupFailure;
use crate::reserve::lockdir::LockDirError;
use crate::select::policy::DeviceError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Open(#[from] OpenError),
    /// NVML did not answer in time.
    #[error("{0}")]
    Stalled(String),
    #[error("{0}")]
    Devices(String),
    #[error(transparent)]
    LockDir(LockDirError),
    /// Exit 75, with the table of reasons.
    #[error("{0}")]
    NotEnoughGpus(String),
    /// No state of the machine can meet the request.
    #[error("{0}")]
    Impossible(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("cannot start the probe thread: {0}")]
    Thread(std::io::Error),
    /// A signal that ends gpurun arrived before the command started; gpurun dies by it once
    /// everything it holds is released.
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
}

impl Error {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Error::NotEnoughGpus(_) => exit_code::NOT_ENOUGH_GPUS,
            Error::Launch(launch) => launch.exit_code(),
            _ => exit_code::GPURUN_ERROR,
        }
    }

    /// `--devices`/`--exclude` errors name where the list came from when it was not the
    /// command line (a configuration file and line, or a variable).
    pub(crate) fn devices(error: DeviceError, origin: Option<&str>) -> Error {
        match origin {
            Some(origin) => {
                Error::Devices(format!("{origin}: key {}: {error}", error.flag.trim_start_matches('-')))
            }
            None => Error::Devices(error.to_string()),
        }
    }
}

impl Error {
    /// An acquisition failure, with where a `--devices`/`--exclude` list came from.
    pub(crate) fn acquire(error: AcquireError, config: &Config) -> Error {
        match error {
            AcquireError::Open(error) => Error::Open(error),
            AcquireError::Stalled(why) => Error::Stalled(why),
            AcquireError::LockDir(error) => Error::from(error),
            AcquireError::Devices(error) => {
                let origin = config.origin(error.flag.trim_start_matches('-'));
                Error::devices(error, origin)
            }
            AcquireError::Impossible(why) => Error::Impossible(why),
            AcquireError::Interrupted(signal) => Error::Interrupted(signal),
            AcquireError::Group { why, failure: GroupFailure::Busy } => Error::NotEnoughGpus(why),
            AcquireError::Group { why, failure: GroupFailure::Broken } => Error::Impossible(why),
        }
    }
}

impl From<CliError> for Error {
    fn from(error: CliError) -> Error {
        match error {
            CliError::Usage(text) => Error::Usage(text),
            CliError::Settings(error) => Error::Settings(error),
            CliError::Output(error) => Error::Output(error),
        }
    }
}

impl From<LockDirError> for Error {
    fn from(error: LockDirError) -> Error {
        match error {
            LockDirError::Interrupted(signal) => Error::Interrupted(signal),
            other => Error::LockDir(other),
        }
    }
}
