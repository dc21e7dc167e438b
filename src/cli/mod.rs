//! Stage 1, the command line: argv (a packed shebang line split first), configuration files and
//! `GPURUN_*` variables layered under it, parsed by one clap definition into a `Config`.

mod args;
pub mod config;
pub mod settings;
pub mod shebang;

pub use args::{command, parse, Cli, DeathSignal, WaitLimit, REFERENCE};
