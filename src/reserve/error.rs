//! Why an acquisition failed: NVML, the lock directory, the request itself, a signal, or a
//! `--per-rank` group that could not be joined.

use crate::probe::session::OpenError;
use crate::probe::worker::Failure;
use crate::reserve::group::GroupFailure;
use crate::reserve::lockdir::LockDirError;
use crate::select::policy::DeviceError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AcquireError {
    #[error(transparent)]
    Open(OpenError),
    /// NVML did not answer in time: the message.
    #[error("{0}")]
    Stalled(String),
    #[error(transparent)]
    LockDir(LockDirError),
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// No state of the machine can meet the request.
    #[error("{0}")]
    Impossible(String),
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
    /// `--per-rank`: the group could not be joined (its chooser failed, the set never came).
    #[error("{why}")]
    Group { why: String, failure: GroupFailure },
}

impl From<Failure> for AcquireError {
    fn from(failure: Failure) -> AcquireError {
        match failure {
            Failure::Open(error) => AcquireError::Open(error),
            Failure::Stalled(why) => AcquireError::Stalled(why),
            Failure::Interrupted(signal) => AcquireError::Interrupted(signal),
        }
    }
}

impl From<LockDirError> for AcquireError {
    fn from(error: LockDirError) -> AcquireError {
        match error {
            LockDirError::Interrupted(signal) => AcquireError::Interrupted(signal),
            other => AcquireError::LockDir(other),
        }
    }
}
