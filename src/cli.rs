//! The command line, and nothing else: these doc comments are `--help` and the man page.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser};

const ABOUT: &str = "Run a command on the right NVIDIA GPU";

const LONG_ABOUT: &str = "\
gpurun probes the GPUs through NVML, picks the ones that fit the request, sets \
CUDA_VISIBLE_DEVICES (as NVML indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers \
the cards the way nvidia-smi does) and runs COMMAND.

Options come first: parsing stops at `--` or at the first word that is not an option, so \
gpurun never takes the command's own arguments.";

/// Reference sections after the options, shared by `--help` and the man page:
/// (heading, [(term, meaning)]). Terms are shown literally; keep lines short for both.
pub const REFERENCE: &[(&str, &[(&str, &str)])] = &[
    (
        "Examples",
        &[
            ("gpurun --list", "show the GPUs, their memory, load and processes"),
            ("gpurun --list --json | jq .", "the same, as one JSON object"),
        ],
    ),
    (
        "Environment",
        &[
            ("GPURUN_NVML_LIB", "the NVML library to load, as --nvml-lib (empty: unset)"),
            ("GPURUN_LOG", "log filter in tracing's EnvFilter syntax, e.g. debug; overrides -v and -q"),
        ],
    ),
    (
        "Exit status",
        &[
            ("75", "not enough GPUs satisfy the request"),
            ("125", "gpurun's own error: usage, NVML missing or failing"),
            ("126", "COMMAND was found but is not executable"),
            ("127", "COMMAND was not found"),
            ("other", "COMMAND's own exit status"),
        ],
    ),
    (
        "JSON output",
        &[
            ("--list --json", "one object: driver_version, cuda_driver_version, nvml_library, gpus, reservations"),
            (
                "gpus[]",
                "index, uuid, name, pci_bus_id, memory, utilization, temperature_c, power_watts, \
                 compute_mode, mig_enabled, processes, eligible, reasons, error",
            ),
            ("memory", "total_bytes, reserved_bytes, used_bytes, free_bytes: NVML's own numbers, free = total - reserved - used"),
            ("utilization", "gpu_percent, memory_percent"),
            ("processes[]", "pid, used_bytes, user, command (user and command from /proc where readable)"),
            ("eligible, reasons", "whether the GPU can be chosen, and every reason it cannot"),
            ("error", "the first NVML query that failed; such a GPU is never chosen"),
            ("null", "a value NVML cannot give is null, never 0"),
        ],
    ),
];

/// `REFERENCE` as plain text for `--help`.
fn reference_text() -> String {
    let mut text = String::new();
    for (heading, entries) in REFERENCE {
        text.push_str(&format!("{heading}:\n"));
        for (term, meaning) in *entries {
            text.push_str(&format!("  {term}\n      {meaning}\n"));
        }
        text.push('\n');
    }
    text.trim_end().to_owned()
}

#[derive(Debug, Parser)]
#[command(
    name = "gpurun",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    override_usage = "gpurun [OPTIONS] [--] COMMAND [ARGS]...\n       gpurun --list [--json] [OPTIONS]",
)]
pub struct Cli {
    /// List the GPUs (index, model, memory, utilization, temperature, processes) and exit.
    #[arg(long, help_heading = "Modes")]
    pub list: bool,

    /// With --list: print one JSON object instead of a table (schema below).
    #[arg(long, requires = "list", help_heading = "Modes")]
    pub json: bool,

    /// Load NVML from PATH instead of libnvidia-ml.so.1 (unusual installs, WSL, the simulator).
    /// Default: $GPURUN_NVML_LIB, else libnvidia-ml.so.1 through the dynamic loader's path.
    #[arg(long, value_name = "PATH", help_heading = "NVML")]
    pub nvml_lib: Option<PathBuf>,

    /// More log detail on stderr: -v for debug, -vv for trace.
    #[arg(short, long, action = ArgAction::Count, conflicts_with = "quiet", help_heading = "Logging")]
    pub verbose: u8,

    /// Log only errors.
    #[arg(short, long, help_heading = "Logging")]
    pub quiet: bool,

    /// The command to run, and its arguments.
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = false
    )]
    pub command: Vec<OsString>,
}

/// The clap definition, for parsing, `--help` and the man page.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command().after_long_help(reference_text())
}

/// Parses argv with the full definition (reference sections included in `--help`).
pub fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let matches = command().try_get_matches_from(args)?;
    <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
}
