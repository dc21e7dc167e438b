//! Launchers that rewrite the choice (DESIGN 6c): `deepspeed` and `accelerate launch` set
//! `CUDA_VISIBLE_DEVICES` for their ranks themselves, from their own flags or config file, so
//! gpurun hands its choice over in each launcher's own terms, or refuses (125) what cannot be
//! reconciled, naming the flag or file. Their rules are read from their source:
//!
//! - DeepSpeed 0.19 `deepspeed/launcher/runner.py` `main`: an inherited `CUDA_VISIBLE_DEVICES`
//!   becomes `--include localhost:<it>` only when none of `--include`, `--exclude`,
//!   `--num_gpus`, `--num_nodes` > 1 is given and there is no hostfile (`-H`, default
//!   `/job/hostfile`); otherwise it is deleted and GPUs `0..N-1` (or the `--include` list) are
//!   used; `--num_gpus`/`--num_nodes` >= 0 with `--include` is a ValueError; `launch.py` sets
//!   each rank's `CUDA_VISIBLE_DEVICES` to the slot ids, which are CUDA's PCI-order ordinals
//!   (argparse, prefixes allowed).
//! - accelerate 1.x `commands/launch.py` `_validate_launch_command` and `utils/launch.py`:
//!   `--gpu_ids` from the command line, else from the config file (`--config_file`, else
//!   `$HF_HOME/accelerate/default_config.yaml`, else `$XDG_CACHE_HOME/huggingface/...`, else
//!   `~/.cache/huggingface/accelerate/default_config.yaml`); unless it is `all`, it replaces
//!   `CUDA_VISIBLE_DEVICES` (argparse without prefixes; `--num-processes` and `--num_processes`).

use std::ffi::OsString;
use std::ops::Range;
use std::path::PathBuf;

use crate::options::wrappers::{after_options, base, inner_start, is_python};
use crate::plan::accelerate_config::{self, AccelerateConfig};
use crate::plan::launcher_options::{read_options, Given, ACCELERATE, DEEPSPEED};

/// Which launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launcher {
    DeepSpeed,
    Accelerate,
}

/// The command's launcher, read: where its options are, what they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LauncherRun {
    launcher: Launcher,
    /// Where the launcher's own options start in the command.
    options_at: usize,
    given: Vec<Given>,
    /// accelerate: the config file that applies, and its top-level `gpu_ids`,
    /// `num_processes` and `num_machines`.
    config: Option<AccelerateConfig>,
    /// The command with the strings an `env -S` splits put in place, where it has one: the
    /// words the launcher's options were read from, and that a hand-over rewrites.
    expanded: Option<Vec<OsString>>,
}

/// Why a launcher's command cannot get gpurun's choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LauncherError(pub(crate) String);

/// Put `--per-rank` under the launcher instead: said wherever several nodes are asked for.
const ONE_NODE: &str =
    "gpurun chooses GPUs on this node only: for several nodes put `gpurun --per-rank` in front \
of each rank under the launcher (deepspeed --no_python ... gpurun --per-rank -- python train.py), or pass \
--launcher off";

/// The launcher the command runs, looked for through wrappers (`env A=1`, `nice`, `uv run`)
/// and `python -m`. Refuses at once what no choice can reconcile (several nodes, a hostfile,
/// `--exclude`).
pub(crate) fn recognise(command: &[OsString]) -> Result<Option<LauncherRun>, LauncherError> {
    let expanded = without_split_strings(command);
    let words: Vec<String> =
        expanded.as_deref().unwrap_or(command).iter().map(|w| w.to_string_lossy().into_owned()).collect();
    let texts: Vec<&str> = words.iter().map(String::as_str).collect();
    let start = inner_start(&texts);
    let Some(program) = texts.get(start).map(|w| base(w)) else { return Ok(None) };
    let Some((launcher, options_at)) = launcher_at(program, &texts, start) else { return Ok(None) };
    let syntax = match launcher {
        Launcher::DeepSpeed => &DEEPSPEED,
        Launcher::Accelerate => &ACCELERATE,
    };
    let given = read_options(syntax, &texts, options_at);
    let mut run = LauncherRun { launcher, options_at, given, config: None, expanded };
    match launcher {
        Launcher::DeepSpeed => run.refuse_deepspeed_nodes()?,
        Launcher::Accelerate => {
            run.config = accelerate_config::read(run.value("--config_file").map(PathBuf::from))
                .map_err(LauncherError)?;
            run.refuse_accelerate_machines()?;
        }
    }
    Ok(Some(run))
}

/// The launcher `program` (the word at `start`) is, and where its options start. DeepSpeed
/// installs `deepspeed`, `deepspeed.pt` and `ds`; accelerate `accelerate` (`launch` its
/// subcommand) and `accelerate-launch`; either may be run by a Python (`python3 -m
/// accelerate.commands.accelerate_cli launch`, `python3 $(which deepspeed)`).
fn launcher_at(program: &str, texts: &[&str], start: usize) -> Option<(Launcher, usize)> {
    let rest = &texts[start + 1..];
    match program {
        "deepspeed" | "deepspeed.pt" | "ds" => Some((Launcher::DeepSpeed, start + 1)),
        "accelerate-launch" => Some((Launcher::Accelerate, start + 1)),
        "accelerate" if rest.first() == Some(&"launch") => Some((Launcher::Accelerate, start + 2)),
        _ if is_python(program) => {
            let after = after_options("python", rest);
            let at = texts.len() - after.len();
            match after {
                ["-m", "deepspeed.launcher.runner", ..] => Some((Launcher::DeepSpeed, at + 2)),
                ["-m", "accelerate.commands.launch", ..] => Some((Launcher::Accelerate, at + 2)),
                ["-m", "accelerate.commands.accelerate_cli", "launch", ..] => {
                    Some((Launcher::Accelerate, at + 3))
                }
                // The launcher's own script, run by this Python (python3 /usr/bin/deepspeed).
                [script, ..] if !script.starts_with('-') && !is_python(base(script)) => {
                    launcher_at(base(script), texts, at)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The command as env will run it where an `env` in front of the program splits a string
/// (`env -S 'deepspeed -qi localhost:0,1' x.py`): GNU env puts the string's words in place of
/// `-S STRING` and reads on, so `env deepspeed -qi localhost:0,1 x.py` is the same command,
/// and gpurun reads (and hands its choice over in) those words. `None` where no env splits a
/// string, or where env would refuse the string (then it runs nothing).
fn without_split_strings(command: &[OsString]) -> Option<Vec<OsString>> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut words = command.to_vec();
    let mut changed = false;
    // Each pass expands the first string; the words of one may hold another env -S.
    for _ in 0..8 {
        let Some((at, flags, string, taken)) = first_split_string(&words) else { break };
        let split = crate::options::split_string::split(string.as_bytes()).ok()?;
        let mut replacement: Vec<OsString> = flags.into_iter().collect();
        replacement.extend(split.into_iter().map(OsString::from_vec));
        words.splice(at..at + taken, replacement);
        changed = true;
    }
    changed.then_some(words)
}

/// Where the first `env` (through the wrappers in front of the program) splits a string: the
/// word's index, the flags clustered before `S` (`-iS...` keeps `-i`), the string, and how
/// many words `-S STRING` takes.
fn first_split_string(words: &[OsString]) -> Option<(usize, Option<OsString>, OsString, usize)> {
    let texts: Vec<String> = words.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    let mut at = 0;
    while at < texts.len() && base(&texts[at]) == "env" {
        at += 1;
        while let Some(word) = texts.get(at) {
            if word == "--" || !(word.starts_with('-') || word.contains('=')) {
                break;
            }
            let next = || words.get(at + 1).cloned();
            if word == "--split-string" {
                return Some((at, None, next()?, 2));
            }
            if let Some(string) = word.strip_prefix("--split-string=") {
                return Some((at, None, string.into(), 1));
            }
            // getopt's cluster: flags (-i, -0, -v), then S with its string attached or next.
            if let Some(cluster) = word.strip_prefix('-').filter(|w| !w.starts_with('-')) {
                if let Some(s) =
                    cluster.find('S').filter(|s| cluster[..*s].chars().all(|c| "i0v".contains(c)))
                {
                    let flags = (s > 0).then(|| OsString::from(format!("-{}", &cluster[..s])));
                    return match &cluster[s + 1..] {
                        "" => Some((at, flags, next()?, 2)),
                        string => Some((at, flags, string.into(), 1)),
                    };
                }
            }
            let takes = matches!(word.as_str(), "-u" | "--unset" | "-C" | "--chdir");
            at += if takes { 2 } else { 1 };
        }
        if texts.get(at).is_some_and(|w| w == "--") {
            at += 1;
        }
    }
    None
}

/// What gpurun chose, in the terms a launcher takes.
pub(crate) struct Chosen<'a> {
    /// CUDA's PCI-order ordinals of the chosen GPUs, in gpurun's order (deepspeed's slots).
    pub(crate) ordinals: Vec<u32>,
    /// The `CUDA_VISIBLE_DEVICES` gpurun gives the command (accelerate's `--gpu_ids`).
    pub(crate) visible: &'a str,
    /// A MIG device is among them (it has no index to give deepspeed).
    pub(crate) mig: bool,
}

/// `0,1` as numbers, in order; `None` where a slot is no number.
fn slots(list: &str) -> Option<Vec<u32>> {
    list.split(',').map(|slot| slot.trim().parse().ok()).collect()
}

fn joined(ordinals: &[u32]) -> String {
    ordinals.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn same_set<T: Ord + Clone>(a: &[T], b: &[T]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

impl LauncherRun {
    /// The value of the option's last occurrence (argparse keeps the last).
    fn value(&self, name: &str) -> Option<&str> {
        self.given.iter().rev().find(|given| given.name == name).and_then(|given| given.value.as_deref())
    }

    fn number(&self, name: &str) -> Option<i64> {
        self.value(name).and_then(|value| value.trim().parse().ok())
    }

    fn refuse_deepspeed_nodes(&self) -> Result<(), LauncherError> {
        if let Some(file) = self.value("--hostfile") {
            return Err(LauncherError(format!(
                "deepspeed --hostfile {file}: the job runs on the hosts it names; {ONE_NODE}"
            )));
        }
        if std::path::Path::new("/job/hostfile").is_file() {
            return Err(LauncherError(format!(
                "deepspeed reads /job/hostfile (its default --hostfile), which names the job's hosts and makes it ignore \
                 CUDA_VISIBLE_DEVICES; {ONE_NODE}"
            )));
        }
        if let Some(nodes) = self.number("--num_nodes").filter(|nodes| *nodes > 1) {
            return Err(LauncherError(format!("deepspeed --num_nodes {nodes}: {ONE_NODE}")));
        }
        if let Some(exclude) = self.value("--exclude") {
            return Err(LauncherError(format!(
                "deepspeed --exclude {exclude}: gpurun hands its choice over as --include, which deepspeed does not \
                 take beside --exclude; drop --exclude, and name the GPUs gpurun may choose with --devices"
            )));
        }
        let Some(include) = self.value("--include") else { return Ok(()) };
        let hosts: Vec<&str> = include.split('@').map(|node| node.split(':').next().unwrap_or("")).collect();
        if hosts.len() > 1 || hosts[0] != "localhost" {
            return Err(LauncherError(format!(
                "deepspeed --include {include} names other hosts than localhost; {ONE_NODE}"
            )));
        }
        if self.value("--num_gpus").is_some() || self.value("--num_nodes").is_some() {
            return Err(LauncherError(format!(
                "deepspeed --include {include} beside --num_gpus or --num_nodes: deepspeed refuses them together \
                 (\"Cannot specify num_nodes/gpus with include/exclude\"); drop one"
            )));
        }
        Ok(())
    }

    fn refuse_accelerate_machines(&self) -> Result<(), LauncherError> {
        if let Some(machines) = self.number("--num_machines") {
            return match machines > 1 {
                true => {
                    Err(LauncherError(format!("accelerate launch --num_machines {machines}: {ONE_NODE}")))
                }
                false => Ok(()),
            };
        }
        match &self.config {
            Some(config) if config.num_machines.is_some_and(|machines| machines > 1) => {
                Err(LauncherError(format!(
                    "accelerate launch: {} says num_machines: {}; {ONE_NODE}",
                    config.path.display(),
                    config.num_machines.unwrap_or_default()
                )))
            }
            _ => Ok(()),
        }
    }

    /// How many GPUs the launcher asks for, where gpurun was given no `--gpus`: deepspeed's
    /// `--num_gpus N`.
    pub(crate) fn asked_count(&self) -> Option<u32> {
        match self.launcher {
            Launcher::DeepSpeed => {
                self.number("--num_gpus").and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0)
            }
            Launcher::Accelerate => None,
        }
    }

    /// The command with gpurun's choice handed over (`None`: it takes the choice as it is),
    /// or why it cannot be.
    pub(crate) fn hand_over(
        &self,
        command: &[OsString],
        chosen: &Chosen,
    ) -> Result<Option<Vec<OsString>>, LauncherError> {
        let command = self.expanded.as_deref().unwrap_or(command);
        match self.launcher {
            Launcher::DeepSpeed => self.deepspeed(command, chosen),
            Launcher::Accelerate => self.accelerate(command, chosen),
        }
    }

    fn deepspeed(
        &self,
        command: &[OsString],
        chosen: &Chosen,
    ) -> Result<Option<Vec<OsString>>, LauncherError> {
        if chosen.mig {
            return Err(LauncherError(
                "deepspeed takes GPUs by index (--include localhost:0,1), and a MIG device has none: ask for whole \
                 GPUs, or run each rank under gpurun --per-rank"
                    .to_owned(),
            ));
        }
        let ids = joined(&chosen.ordinals);
        if let Some(include) = self.value("--include") {
            // DeepSpeed's parse_resource_filter drops a slot named twice (localhost:7,5,5).
            let named = include.split_once(':').and_then(|(_, list)| slots(list)).map(|mut named| {
                named.sort();
                named.dedup();
                named
            });
            return match named {
                Some(named) if same_set(&named, &chosen.ordinals) => Ok(None),
                _ => Err(LauncherError(format!(
                    "deepspeed --include {include} names other GPUs than gpurun chose ({ids}): drop --include (gpurun \
                     hands its choice over as --include localhost:{ids}), or have gpurun choose those with --devices"
                ))),
            };
        }
        if let Some(asked) = self.number("--num_gpus") {
            if asked != chosen.ordinals.len() as i64 {
                return Err(LauncherError(format!(
                    "deepspeed --num_gpus {asked} asks for {asked} GPUs, and gpurun chose {}: make them agree \
                     (gpurun --gpus {asked}, or leave --gpus out and gpurun takes deepspeed's number)",
                    chosen.ordinals.len()
                )));
            }
        }
        let drop: Vec<Range<usize>> = self
            .given
            .iter()
            .filter(|given| matches!(given.name, "--num_gpus" | "--num_nodes"))
            .map(|given| given.words.clone())
            .collect();
        // Plain deepspeed takes CUDA_VISIBLE_DEVICES as its --include: nothing to change.
        if drop.is_empty() && chosen.visible == ids {
            return Ok(None);
        }
        let mut words: Vec<OsString> = Vec::with_capacity(command.len() + 2);
        for (at, word) in command.iter().enumerate() {
            if at == self.options_at {
                words.push("--include".into());
                words.push(format!("localhost:{ids}").into());
            }
            if !drop.iter().any(|range| range.contains(&at)) {
                words.push(word.clone());
            }
        }
        Ok(Some(words))
    }

    fn accelerate(
        &self,
        command: &[OsString],
        chosen: &Chosen,
    ) -> Result<Option<Vec<OsString>>, LauncherError> {
        let count = chosen.visible.split(',').filter(|entry| !entry.is_empty()).count() as i64;
        let processes = match self.number("--num_processes") {
            Some(asked) => Some((asked, "--num_processes".to_owned())),
            None => self.config.as_ref().and_then(|config| {
                Some((
                    i64::try_from(config.num_processes?).ok()?,
                    format!("num_processes in {}", config.path.display()),
                ))
            }),
        };
        if let Some((asked, whence)) = processes.filter(|(asked, _)| *asked > count) {
            return Err(LauncherError(format!(
                "accelerate launch: {whence} asks for {asked} processes, and gpurun chose {count} GPUs: make them agree \
                 (gpurun --gpus {asked}, or --num_processes {count})"
            )));
        }
        if let Some(ids) = self.value("--gpu_ids") {
            let named: Vec<&str> = ids.split(',').map(str::trim).collect();
            let visible: Vec<&str> = chosen.visible.split(',').collect();
            return match ids == "all" || same_set(&named, &visible) {
                true => Ok(None),
                false => Err(LauncherError(format!(
                    "accelerate launch --gpu_ids {ids} replaces CUDA_VISIBLE_DEVICES with other GPUs than gpurun \
                     chose ({}): drop --gpu_ids (gpurun hands its choice over as --gpu_ids {}), or have gpurun choose \
                     those with --devices",
                    chosen.visible, chosen.visible
                ))),
            };
        }
        let mut words = command.to_vec();
        let at = self.options_at.min(words.len());
        words.splice(at..at, [OsString::from("--gpu_ids"), OsString::from(chosen.visible)]);
        Ok(Some(words))
    }

    /// Under `--launcher off`, why the command's ranks may not be on gpurun's GPUs (for a
    /// wrong-gpu verdict's cause); `None` where the launcher keeps CUDA_VISIBLE_DEVICES.
    pub(crate) fn override_note(&self) -> Option<String> {
        match self.launcher {
            Launcher::DeepSpeed => {
                let flag = ["--include", "--exclude", "--num_gpus", "--num_nodes", "--hostfile"]
                    .into_iter()
                    .find(|flag| self.value(flag).is_some())?;
                Some(format!("deepspeed ignores CUDA_VISIBLE_DEVICES when {flag} is given (--launcher off left it)"))
            }
            Launcher::Accelerate => match (self.value("--gpu_ids"), &self.config) {
                (Some("all"), _) => None,
                (Some(ids), _) => Some(format!(
                    "accelerate launch --gpu_ids {ids} replaces CUDA_VISIBLE_DEVICES (--launcher off left it)"
                )),
                (None, Some(config)) => config.gpu_ids.as_deref().filter(|ids| *ids != "all").map(|ids| {
                    format!(
                        "accelerate launch takes gpu_ids: {ids} from {}, which replaces CUDA_VISIBLE_DEVICES (--launcher \
                         off left it)",
                        config.path.display()
                    )
                }),
                (None, None) => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn shown(words: &[OsString]) -> String {
        words.iter().map(|w| w.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    fn chosen(ordinals: &[u32], visible: &'static str) -> Chosen<'static> {
        Chosen { ordinals: ordinals.to_vec(), visible, mig: false }
    }

    fn hand_over(line: &str, ordinals: &[u32], visible: &'static str) -> Result<Option<String>, String> {
        let command = words(line);
        let run = recognise(&command).map_err(|e| e.0)?.expect("a launcher");
        run.hand_over(&command, &chosen(ordinals, visible)).map(|w| w.map(|w| shown(&w))).map_err(|e| e.0)
    }

    #[test]
    fn launchers_are_found_through_wrappers_and_python_m() {
        for line in [
            "deepspeed train.py",
            "env A=1 nice -n 5 deepspeed train.py",
            "python3 -u -m deepspeed.launcher.runner train.py",
            "ds train.py",
            "deepspeed.pt train.py",
            "python3 /usr/local/bin/deepspeed train.py",
            "timeout -k 5 1h nohup stdbuf -oL deepspeed train.py",
        ] {
            assert_eq!(recognise(&words(line)).unwrap().unwrap().launcher, Launcher::DeepSpeed, "{line}");
        }
        for line in [
            "accelerate launch train.py",
            "uv run accelerate launch x.py",
            "python -m accelerate.commands.launch x.py",
            "python -m accelerate.commands.accelerate_cli launch x.py",
            "python3 /usr/bin/accelerate launch x.py",
            "setsid -w /usr/bin/time -o t accelerate launch x.py",
        ] {
            assert_eq!(recognise(&words(line)).unwrap().unwrap().launcher, Launcher::Accelerate, "{line}");
        }
        for line in ["python train.py", "accelerate config", "torchrun train.py", "env"] {
            assert_eq!(recognise(&words(line)).unwrap(), None, "{line}");
        }
    }

    /// DeepSpeed drops a slot named twice; `-qe` is `--quiet --exclude`, refused.
    #[test]
    fn clustered_and_repeated_slots_are_read_as_deepspeed_reads_them() {
        assert_eq!(hand_over("deepspeed --include localhost:7,5,5 t.py", &[7, 5], "7,5"), Ok(None));
        assert_eq!(hand_over("deepspeed -qi=localhost:7,5 t.py", &[7, 5], "7,5").ok(), None);
        assert!(hand_over("deepspeed -qe localhost:1 t.py", &[7, 5], "7,5")
            .unwrap_err()
            .starts_with("deepspeed --exclude localhost:1"));
    }

    /// `env -S STRING` runs the string's words: they are the command gpurun reads and rewrites.
    #[test]
    fn an_env_split_string_is_read_as_env_runs_it() {
        let command: Vec<OsString> =
            ["env", "-S", "A=1 deepspeed -qi localhost:0,1", "t.py"].iter().map(OsString::from).collect();
        let run = recognise(&command).unwrap().unwrap();
        assert_eq!(run.value("--include"), Some("localhost:0,1"));
        let command: Vec<OsString> =
            ["/usr/bin/env", "-iS", "deepspeed --num_gpus 2", "t.py"].iter().map(OsString::from).collect();
        let run = recognise(&command).unwrap().unwrap();
        let handed = run.hand_over(&command, &chosen(&[3, 2], "3,2")).unwrap().unwrap();
        assert_eq!(shown(&handed), "/usr/bin/env -i deepspeed --include localhost:3,2 t.py");
        let command: Vec<OsString> = ["env", "--split-string=accelerate launch --gpu_ids 0,1", "t.py"]
            .iter()
            .map(OsString::from)
            .collect();
        assert!(recognise(&command).unwrap().unwrap().value("--gpu_ids") == Some("0,1"));
        // A string env refuses runs nothing: left for env to refuse.
        let command: Vec<OsString> =
            ["env", "-S", "deepspeed $B", "t.py"].iter().map(OsString::from).collect();
        assert_eq!(recognise(&command).unwrap(), None);
    }

    #[test]
    fn deepspeed_gets_an_include_in_place_of_num_gpus() {
        assert_eq!(
            hand_over("deepspeed --num_gpus 2 train.py --num_gpus 9", &[3, 2], "3,2").unwrap().unwrap(),
            "deepspeed --include localhost:3,2 train.py --num_gpus 9"
        );
        assert_eq!(
            hand_over("deepspeed --num_g=2 --num_nodes 1 --master_port 29600 t.py", &[3, 2], "3,2")
                .unwrap()
                .unwrap(),
            "deepspeed --include localhost:3,2 --master_port 29600 t.py"
        );
        // Plain deepspeed turns CUDA_VISIBLE_DEVICES into its --include itself; UUIDs it cannot.
        assert_eq!(hand_over("deepspeed train.py", &[3, 2], "3,2").unwrap(), None);
        assert_eq!(
            hand_over("deepspeed train.py", &[3], "GPU-abc").unwrap().unwrap(),
            "deepspeed --include localhost:3 train.py"
        );
        assert_eq!(hand_over("deepspeed -i localhost:2,3 train.py", &[3, 2], "3,2").unwrap(), None);
        assert_eq!(hand_over("deepspeed -ilocalhost:2,3 train.py", &[3, 2], "3,2").unwrap(), None);
    }

    #[test]
    fn deepspeed_refusals_name_the_flag_or_file() {
        let refused = |line: &str| hand_over(line, &[3, 2], "3,2").unwrap_err();
        assert!(refused("deepspeed --include localhost:0,1 t.py").contains("--include localhost:0,1"));
        assert!(refused("deepspeed --num_gpus 4 t.py")
            .contains("--num_gpus 4 asks for 4 GPUs, and gpurun chose 2"));
        assert!(refused("deepspeed --num_nodes 2 t.py").contains("--num_nodes 2"));
        assert!(refused("deepspeed -H hosts t.py").contains("--hostfile hosts"));
        assert!(refused("deepspeed --exclude localhost:1 t.py").contains("--exclude localhost:1"));
        assert!(refused("deepspeed --include worker-1:0@localhost t.py").contains("other hosts"));
        assert!(refused("deepspeed --include localhost:0 --num_gpus 1 t.py").contains("drop one"));
        let mig = Chosen { ordinals: vec![0], visible: "MIG-x", mig: true };
        let command = words("deepspeed t.py");
        assert!(recognise(&command).unwrap().unwrap().hand_over(&command, &mig).is_err());
    }

    #[test]
    fn accelerate_gets_gpu_ids_before_the_script() {
        assert_eq!(
            hand_over("accelerate launch --multi_gpu train.py --gpu_ids 0", &[3, 2], "3,2").unwrap().unwrap(),
            "accelerate launch --gpu_ids 3,2 --multi_gpu train.py --gpu_ids 0"
        );
        assert_eq!(hand_over("accelerate launch --gpu-ids 2,3 t.py", &[3, 2], "3,2").unwrap(), None);
        assert_eq!(hand_over("accelerate launch --gpu_ids=all t.py", &[3, 2], "3,2").unwrap(), None);
        assert!(hand_over("accelerate launch --gpu_ids 0,1 t.py", &[3, 2], "3,2")
            .unwrap_err()
            .contains("--gpu_ids 0,1"));
        let more = hand_over("accelerate launch --num-processes 4 t.py", &[3, 2], "3,2").unwrap_err();
        assert!(more.contains("--num_processes asks for 4 processes"), "{more}");
        assert!(hand_over("accelerate launch --num_machines 2 t.py", &[3, 2], "3,2")
            .unwrap_err()
            .contains("--num_machines 2"));
    }

    #[test]
    fn the_options_end_at_the_script() {
        let command = words("deepspeed --master_port 1 --num_gpus 2 train.py --include x");
        let run = recognise(&command).unwrap().unwrap();
        assert_eq!(run.value("--include"), None, "the script's own words are not deepspeed's");
        assert_eq!(run.value("--num_gpus"), Some("2"));
        assert_eq!(run.asked_count(), Some(2));
        // An ambiguous prefix is argparse's error, not an option.
        assert_eq!(recognise(&words("deepspeed --no_s --num_n 2 t.py")).unwrap_err().0, "deepspeed --num_nodes 2: gpurun chooses GPUs on this node only: for several nodes put `gpurun --per-rank` in front of each rank under the launcher (deepspeed --no_python ... gpurun --per-rank -- python train.py), or pass --launcher off");
    }

    #[test]
    fn the_config_files_num_processes_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "distributed_type: MULTI_GPU\nnum_processes: 8\n").unwrap();
        let line = format!("accelerate launch --config_file {} t.py", path.display());
        let refused = hand_over(&line, &[3, 2], "3,2").unwrap_err();
        assert!(refused.contains(&format!("num_processes in {}", path.display())), "{refused}");
    }
}
