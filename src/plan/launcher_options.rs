//! The launchers' command lines, read as their argparse reads them (DESIGN 6c): each
//! launcher's options as its parser declares them, long options and their unique prefixes
//! (deepspeed) or hyphenated spellings (accelerate), and clusters of short options.

use std::ops::Range;

/// How a launcher reads its options (argparse, as each declares them).
pub(super) struct Syntax {
    /// Options that take a value: each with its spellings, the long one first.
    pub(super) values: &'static [&'static [&'static str]],
    pub(super) flags: &'static [&'static [&'static str]],
    /// argparse's `allow_abbrev`: a unique prefix of a long option is that option.
    pub(super) prefixes: bool,
    /// `--num-processes` is `--num_processes`.
    pub(super) hyphens: bool,
}

/// deepspeed/launcher/runner.py `parse_args` (0.19.8).
pub(super) const DEEPSPEED: Syntax = Syntax {
    values: &[
        &["--hostfile", "-H"],
        &["--include", "-i"],
        &["--exclude", "-e"],
        &["--num_nodes"],
        &["--num_gpus", "--num_accelerators"],
        &["--master_port"],
        &["--master_addr"],
        &["--node_rank"],
        &["--launcher"],
        &["--launcher_args"],
        &["--enable_each_rank_log"],
        &["--autotuning"],
        &["--bind_core_list"],
        &["--ssh_port"],
        &["--venv_script"],
        &["--log_level"],
    ],
    flags: &[
        &["--help", "-h"],
        &["--module"],
        &["--no_python"],
        &["--no_local_rank"],
        &["--no_ssh"],
        &["--no_ssh_check"],
        &["--force_multi"],
        &["--save_pid"],
        &["--bind_cores_to_rank"],
        &["--quiet", "-q"],
    ],
    prefixes: true,
    hyphens: false,
};

/// accelerate/commands/launch.py `launch_command_parser` (1.15): the options that decide the
/// GPUs and the machines, every other that takes a value (so the script is found), the flags.
pub(super) const ACCELERATE: Syntax = Syntax {
    values: &[
        &["--config_file"],
        &["--gpu_ids"],
        &["--num_processes"],
        &["--num_machines"],
        &["--machine_rank"],
        &["--main_process_ip"],
        &["--main_process_port"],
        &["--mixed_precision"],
        &["--num_cpu_threads_per_process"],
        &["--dynamo_backend"],
        &["--dynamo_mode"],
        &["--tee", "-t"],
        &["--log_dir"],
        &["--role"],
        &["--rdzv_backend"],
        &["--rdzv_conf"],
        &["--max_restarts"],
        &["--monitor_interval"],
        &["--vm"],
        &["--env"],
        &["--main_training_function"],
        &["--deepspeed_config_file"],
        &["--zero_stage"],
        &["--offload_optimizer_device"],
        &["--offload_param_device"],
        &["--offload_optimizer_nvme_path"],
        &["--offload_param_nvme_path"],
        &["--gradient_accumulation_steps"],
        &["--gradient_clipping"],
        &["--zero3_init_flag"],
        &["--zero3_save_16bit_model"],
        &["--deepspeed_hostfile"],
        &["--deepspeed_exclusion_filter"],
        &["--deepspeed_inclusion_filter"],
        &["--deepspeed_multinode_launcher"],
        &["--deepspeed_moe_layer_cls_names"],
        &["--mpirun_hostfile"],
        &["--aws_access_key_id"],
        &["--aws_secret_access_key"],
    ],
    flags: &[
        &["--help", "-h"],
        &["--quiet", "-q"],
        &["--cpu"],
        &["--multi_gpu"],
        &["--tpu"],
        &["--enable_cpu_affinity"],
        &["--dynamo_use_fullgraph"],
        &["--dynamo_use_dynamic"],
        &["--dynamo_use_regional_compilation"],
        &["--use_deepspeed"],
        &["--use_fsdp"],
        &["--use_parallelism_config"],
        &["--use_megatron_lm"],
        &["--same_network"],
        &["--module", "-m"],
        &["--no_python"],
        &["--tpu_cluster"],
        &["--no_tpu_cluster"],
        &["--tpu_use_sudo"],
        &["--downcast_bf16"],
        &["--fp8_use_autocast_during_eval"],
        &["--debug"],
    ],
    prefixes: false,
    hyphens: true,
};

/// accelerate's option families whose every member takes a value (`--fsdp_*`,
/// `--megatron_lm_*`, `--fp8_*` but `--fp8_use_autocast_during_eval`, `--parallelism_config_*`).
pub(super) const ACCELERATE_VALUE_FAMILIES: &[&str] =
    &["--fsdp_", "--megatron_lm_", "--fp8_", "--parallelism_config_"];

/// One of the launcher's options, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Given {
    /// Its long spelling (`--num_gpus`, whatever was typed).
    pub(super) name: &'static str,
    pub(super) value: Option<String>,
    /// The words it takes in the command.
    pub(super) words: Range<usize>,
}

/// The launcher's options, up to its script (argparse stops at the first positional word).
/// An option the launcher does not know is passed over as a flag: the launcher refuses it.
pub(super) fn read_options(syntax: &Syntax, words: &[&str], from: usize) -> Vec<Given> {
    let mut given = Vec::new();
    let mut at = from;
    while let Some(word) = words.get(at) {
        if *word == "--" || !word.starts_with('-') || *word == "-" {
            break;
        }
        let begin = at;
        let options = match word.strip_prefix("--") {
            Some(_) => {
                let (typed, inline) = match word.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_owned())),
                    None => (*word, None),
                };
                resolve(syntax, typed).map(|(name, takes)| vec![(name, takes, inline)]).unwrap_or_default()
            }
            None => short_options(syntax, word),
        };
        at += 1;
        for (name, takes_value, inline) in options {
            let value = match (takes_value, inline) {
                (true, Some(value)) => Some(value),
                (true, None) => {
                    at += 1;
                    words.get(at - 1).map(|w| (*w).to_owned())
                }
                (false, _) => None,
            };
            if !name.is_empty() {
                given.push(Given { name, value, words: begin..at.min(words.len()) });
            }
        }
    }
    given
}

/// One word of short options, read as argparse's `consume_optional` reads it: a cluster of
/// flags (`-qh`), the last of which may take a value, attached (`-qilocalhost:0`, `-i=x`:
/// argparse splits `-i=x` at the `=`) or as the next word (`-qi localhost:0`, `-qe`). Each
/// option with its long spelling, whether it takes a value and the value attached. A letter
/// the launcher does not know ends the word: argparse refuses it ("ignored explicit argument").
fn short_options(syntax: &Syntax, word: &str) -> Vec<(&'static str, bool, Option<String>)> {
    if let Some((typed, value)) = word.split_once('=') {
        if let Some((name, true)) = resolve(syntax, typed) {
            return vec![(name, true, Some(value.to_owned()))];
        }
    }
    let mut options = Vec::new();
    let mut rest = &word[1..];
    while let Some(letter) = rest.chars().next() {
        let Some((name, takes_value)) = resolve(syntax, &format!("-{letter}")) else { break };
        rest = &rest[letter.len_utf8()..];
        if takes_value {
            options.push((name, true, (!rest.is_empty()).then(|| rest.to_owned())));
            break;
        }
        options.push((name, false, None));
    }
    options
}

/// The long spelling of a typed option, and whether it takes a value; `None` where the
/// launcher does not know it (or a prefix is ambiguous: argparse refuses it).
fn resolve(syntax: &Syntax, typed: &str) -> Option<(&'static str, bool)> {
    let normal = match (syntax.hyphens, typed.strip_prefix("--")) {
        (true, Some(name)) => format!("--{}", name.replace('-', "_")),
        _ => typed.to_owned(),
    };
    let tables = [(syntax.values, true), (syntax.flags, false)];
    for (table, takes_value) in tables {
        if let Some(spellings) = table.iter().find(|spellings| spellings.contains(&normal.as_str())) {
            return Some((spellings[0], takes_value));
        }
    }
    if syntax.hyphens && ACCELERATE_VALUE_FAMILIES.iter().any(|family| normal.starts_with(family)) {
        return Some(("", true));
    }
    if !(syntax.prefixes && normal.starts_with("--")) {
        return None;
    }
    let mut matches = tables.iter().flat_map(|(table, takes_value)| {
        table.iter().flat_map(move |spellings| {
            spellings.iter().filter(|s| s.starts_with("--")).map(move |s| (spellings[0], *s, *takes_value))
        })
    });
    let found = matches.by_ref().filter(|(_, spelling, _)| spelling.starts_with(normal.as_str()));
    let candidates: Vec<(&'static str, bool)> = found.map(|(long, _, takes)| (long, takes)).collect();
    let mut longs: Vec<&str> = candidates.iter().map(|(long, _)| *long).collect();
    longs.dedup();
    (longs.len() == 1).then(|| candidates[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(syntax: &Syntax, line: &str) -> Vec<String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        read_options(syntax, &words, 1)
            .iter()
            .map(|g| format!("{}={}", g.name, g.value.as_deref().unwrap_or("-")))
            .collect()
    }

    /// argparse's `consume_optional`: a cluster of flags whose last may take a value.
    #[test]
    fn short_option_clusters_are_read_as_argparse_reads_them() {
        let deepspeed = |line: &str| read(&DEEPSPEED, &format!("deepspeed {line} t.py"));
        assert_eq!(deepspeed("-qi localhost:0,1"), ["--quiet=-", "--include=localhost:0,1"]);
        assert_eq!(deepspeed("-qilocalhost:0,1"), ["--quiet=-", "--include=localhost:0,1"]);
        assert_eq!(deepspeed("-qe localhost:1"), ["--quiet=-", "--exclude=localhost:1"]);
        assert_eq!(deepspeed("-i=localhost:7,5"), ["--include=localhost:7,5"]);
        assert_eq!(deepspeed("-hq"), ["--help=-", "--quiet=-"]);
        let accelerate = |line: &str| read(&ACCELERATE, &format!("accelerate {line} t.py"));
        assert_eq!(accelerate("-qt 3 --gpu_ids 0,1"), ["--quiet=-", "--tee=3", "--gpu_ids=0,1"]);
        assert_eq!(accelerate("-qmt3"), ["--quiet=-", "--module=-", "--tee=3"]);
        // An unknown letter ends the word (argparse refuses it): the script is still found.
        assert_eq!(deepspeed("-qz"), ["--quiet=-"]);
        assert_eq!(read(&DEEPSPEED, "deepspeed -qz t.py -i x"), ["--quiet=-"]);
        // An ambiguous prefix is argparse's error, not an option.
        assert_eq!(resolve(&DEEPSPEED, "--no_s"), None);
        assert_eq!(resolve(&DEEPSPEED, "--num_n"), Some(("--num_nodes", true)));
    }
}
