//! A command that is a container run (DESIGN 6b): `podman run|create`, `docker run|create`,
//! `docker container run|create`, with the client's own options before the subcommand. The
//! environment of the client never reaches the container, and inside the GPUs are renumbered
//! from 0, so the choice is injected as the runtime's own options instead, right after the
//! subcommand: CDI devices (`--device nvidia.com/gpu=<UUID>`, the names nvidia-ctk generates)
//! for podman and for docker with CDI, else docker's `--gpus "device=<UUID>,..."`
//! (nvidia-container-toolkit); `-e CUDA_DEVICE_ORDER=PCI_BUS_ID`, the framework variables
//! (unless the user's `-e` sets them), `-e GPURUN_GPUS` and `-e GPURUN_GPU_UUIDS`; and a
//! `--cidfile`, by which gpurun finds the container's processes and stops it. Pure: the words
//! in, the words out.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::options::ContainerUse;
use crate::plan::container_options::{self as tables, ClientOption};

/// The container client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    Podman,
    Docker,
}

impl Client {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Client::Podman => "podman",
            Client::Docker => "docker",
        }
    }

    fn global_options(self) -> &'static [ClientOption] {
        match self {
            Client::Podman => tables::PODMAN_GLOBAL,
            Client::Docker => tables::DOCKER_GLOBAL,
        }
    }

    fn run_options(self) -> &'static [ClientOption] {
        match self {
            Client::Podman => tables::PODMAN_RUN,
            Client::Docker => tables::DOCKER_RUN,
        }
    }
}

/// How the GPUs are given to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Injection {
    /// `--device nvidia.com/gpu=<UUID>` per GPU (CDI).
    Cdi,
    /// docker's `--gpus "device=<UUID>,<UUID>"` (nvidia-container-toolkit).
    Gpus,
}

/// A container run, as found in the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerRun {
    pub(crate) client: Client,
    /// Where the options gpurun adds go: right after the subcommand.
    insert_at: usize,
    /// The client's global options (before the subcommand), for `kill` and the like.
    pub(crate) globals: Vec<OsString>,
    /// The image, as the user named it.
    pub(crate) image: String,
    /// Variables the user's own `-e`/`--env` set (their names).
    user_env: Vec<String>,
    /// The user's own `--cidfile`, if any.
    user_cidfile: Option<PathBuf>,
    /// `--sig-proxy=false`: signals reach the client, not the container.
    pub(crate) sig_proxy_off: bool,
    /// Other ways the run hands the container GPUs (`--privileged`, `/dev` mounted, an
    /// `--env-file` naming devices): said at launch.
    pub(crate) warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContainerError {
    #[error(
        "{option}: gpurun gives the container its chosen GPUs itself (remove {option}, or run with --container off to \
         leave the command alone)"
    )]
    Conflict { option: String },
    #[error(
        "{option}: a detached container would outlive gpurun and its reservation; run it attached (gpurun waits \
         for it), or with --container off"
    )]
    Detached { option: String },
    #[error("{client} {subcommand}: no image named (the command ends before one)")]
    NoImage { client: &'static str, subcommand: String },
    #[error(
        "{client} create: the container would run later (at {client} start), after gpurun and its reservation \
         are gone; run it attached with {client} run (gpurun waits for it), or use --container off"
    )]
    Create { client: &'static str },
    #[error(
        "{option}: not a {client} {place} option gpurun knows (its tables are {client}'s own --help), so it \
         cannot tell the image from the option's value; refusing rather than guess (--container off leaves the \
         command alone)"
    )]
    Unknown { client: &'static str, place: &'static str, option: String },
}

/// Finds a container run in `command`. `None`: not one (another program, another
/// subcommand, or `--container off`).
/// The option at `words[at]` among `table` (`place`: "global" or "run", for the message): its
/// long name (`--env`, also for `-e`), its value (attached or the next word) and how many words
/// it takes. A cluster of short switches may end in one that takes a value (`-it`, `-eNAME`,
/// `-de NAME`); a cluster of switches alone is named as written. A detached run (`-d` in a
/// cluster) is refused here, where the cluster is read.
fn option_at(
    client: Client,
    table: &[ClientOption],
    place: &'static str,
    words: &[&str],
    at: usize,
) -> Result<(String, Option<String>, usize), ContainerError> {
    let word = words[at];
    let unknown =
        |option: &str| ContainerError::Unknown { client: client.name(), place, option: option.to_owned() };
    if let Some(long) = word.strip_prefix("--") {
        let (name, attached) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (long, None),
        };
        let option = tables::by_long(table, name).ok_or_else(|| unknown(word))?;
        let name = format!("--{name}");
        return Ok(match (attached, option.value) {
            (Some(value), _) => (name, Some(value), 1),
            (None, false) => (name, None, 1),
            (None, true) => (name, words.get(at + 1).map(|v| (*v).to_owned()), 2),
        });
    }
    let letters: Vec<char> = word[1..].chars().collect();
    for (position, letter) in letters.iter().enumerate() {
        let option =
            tables::by_short(table, *letter).ok_or_else(|| unknown(&format!("-{letter} (in {word})")))?;
        if !option.value {
            if option.long == "detach" && place == "run" {
                return Err(ContainerError::Detached { option: word.to_owned() });
            }
            continue;
        }
        let rest: String = letters[position + 1..].iter().collect();
        let name = format!("--{}", option.long);
        return Ok(match rest.is_empty() {
            true => (name, words.get(at + 1).map(|v| (*v).to_owned()), 2),
            false => (name, Some(rest.trim_start_matches('=').to_owned()), 1),
        });
    }
    Ok((word.to_owned(), None, 1))
}

/// What a run option hands the container besides gpurun's devices, as a warning.
fn other_way_in(name: &str, value: Option<&str>) -> Option<String> {
    let value_text = value.unwrap_or_default();
    let source = |spec: &str| spec.split(':').next().unwrap_or_default().to_owned();
    let device_tree = |path: &str| path == "/dev" || path == "/dev/" || path.starts_with("/dev/nvidia");
    match name {
        "--privileged" if value != Some("false") => {
            Some("--privileged: the container sees every device of the host, every GPU included".to_owned())
        }
        "--volume" if device_tree(&source(value_text)) => {
            Some(format!("--volume {value_text}: the container sees the host's GPU device nodes"))
        }
        "--mount"
            if value_text.split(',').any(|part| {
                part.split_once('=')
                    .is_some_and(|(key, path)| matches!(key, "src" | "source") && device_tree(path))
            }) =>
        {
            Some(format!("--mount {value_text}: the container sees the host's GPU device nodes"))
        }
        "--env-file" => {
            // Read only to warn (a FIFO or a device is passed over).
            let text = crate::process::stdio::read_small_file(Path::new(value_text), 1 << 20)?;
            let named = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"].into_iter().find(|variable| {
                text.lines().any(|line| line.trim_start().split(['=', ' ']).next() == Some(*variable))
            })?;
            Some(format!(
                "--env-file {value_text} sets {named}: the container may use other GPUs than gpurun's"
            ))
        }
        _ => None,
    }
}

pub(crate) fn recognise(
    command: &[OsString],
    mode: ContainerUse,
) -> Result<Option<ContainerRun>, ContainerError> {
    if mode == ContainerUse::Off {
        return Ok(None);
    }
    let Some(program) = command.first().map(Path::new).and_then(Path::file_name).and_then(OsStr::to_str)
    else {
        return Ok(None);
    };
    let client = match program {
        "podman" => Client::Podman,
        "docker" => Client::Docker,
        _ => return Ok(None),
    };
    let words: Vec<&str> = command.iter().map(|w| w.to_str().unwrap_or("\u{fffd}")).collect();
    // The client's global options, then the subcommand.
    let mut at = 1;
    while at < words.len() && words[at].starts_with('-') && words[at] != "-" && words[at] != "--" {
        let (_, _, width) = option_at(client, client.global_options(), "global", &words, at)?;
        at += width;
    }
    let globals: Vec<OsString> = command[1..at.min(command.len())].to_vec();
    let subcommand = match (words.get(at), words.get(at + 1)) {
        (Some(&"run"), _) => 1,
        (Some(&"container"), Some(&"run")) => 2,
        (Some(&"create"), _) | (Some(&"container"), Some(&"create")) => {
            return Err(ContainerError::Create { client: client.name() })
        }
        _ => return Ok(None),
    };
    at += subcommand;
    let subcommand = words[at - 1];
    let insert_at = at;
    let mut user_env = Vec::new();
    let mut user_cidfile = None;
    let mut sig_proxy_off = false;
    let mut warnings = Vec::new();
    let mut image = None;
    while at < words.len() {
        let word = words[at];
        if word == "--" {
            image = words.get(at + 1).map(|w| (*w).to_owned());
            break;
        }
        if !word.starts_with('-') || word == "-" {
            image = Some(word.to_owned());
            break;
        }
        let (name, value, width) = option_at(client, client.run_options(), "run", &words, at)?;
        let value_text = value.clone().unwrap_or_default();
        match name.as_str() {
            "--detach" if value.as_deref() != Some("false") => {
                return Err(ContainerError::Detached { option: word.to_owned() })
            }
            "--gpus" => return Err(ContainerError::Conflict { option: format!("--gpus {value_text}") }),
            "--device" if is_gpu_device(&value_text) => {
                return Err(ContainerError::Conflict { option: format!("--device {value_text}") })
            }
            "--env" => {
                let variable = value_text.split_once('=').map_or(value_text.as_str(), |(n, _)| n).to_owned();
                if variable == "CUDA_VISIBLE_DEVICES" || variable == "NVIDIA_VISIBLE_DEVICES" {
                    let written = if word.starts_with("--") { "--env" } else { "-e" };
                    return Err(ContainerError::Conflict { option: format!("{written} {value_text}") });
                }
                user_env.push(variable);
            }
            "--cidfile" => user_cidfile = Some(PathBuf::from(&value_text)),
            "--sig-proxy" => sig_proxy_off = value.as_deref() == Some("false"),
            _ => warnings.extend(other_way_in(&name, value.as_deref())),
        }
        at += width;
    }
    let Some(image) = image else {
        return Err(ContainerError::NoImage { client: client.name(), subcommand: subcommand.to_owned() });
    };
    Ok(Some(ContainerRun {
        client,
        insert_at,
        globals,
        image,
        user_env,
        user_cidfile,
        sig_proxy_off,
        warnings,
    }))
}

/// A device option that gives GPUs: a CDI GPU (`nvidia.com/gpu=...`, any vendor's `.../gpu=`)
/// or an NVIDIA device node other than the control ones every GPU container gets.
fn is_gpu_device(value: &str) -> bool {
    let device = value.split(':').next().unwrap_or_default();
    device.contains("/gpu=")
        || device
            .strip_prefix("/dev/nvidia")
            .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
}

/// The device of each chosen GPU or MIG device, by UUID.
pub(crate) struct Chosen<'a> {
    pub(crate) uuids: &'a [String],
    /// The host's NVML indices (GPURUN_GPUS).
    pub(crate) indices: &'a str,
    pub(crate) framework_env: bool,
}

impl ContainerRun {
    /// How the GPUs are given: CDI for podman; for docker, CDI with `--container cdi` or
    /// where its daemon has CDI on (`docker_cdi`), else `--gpus`.
    pub(crate) fn injection(&self, mode: ContainerUse, docker_cdi: bool) -> Injection {
        match (self.client, mode) {
            (Client::Podman, _) | (_, ContainerUse::Cdi) => Injection::Cdi,
            (Client::Docker, ContainerUse::Gpus) => Injection::Gpus,
            (Client::Docker, _) if docker_cdi => Injection::Cdi,
            (Client::Docker, _) => Injection::Gpus,
        }
    }

    /// The file the container's ID is written to: the user's own `--cidfile`, or `ours`
    /// (which is then added).
    pub(crate) fn cidfile(&self, ours: &Path) -> PathBuf {
        self.user_cidfile.clone().unwrap_or_else(|| ours.to_owned())
    }

    /// The command with gpurun's options added right after the subcommand (the log and
    /// --dry-run show it whole).
    pub(crate) fn rewrite(
        &self,
        command: &[OsString],
        chosen: &Chosen,
        injection: Injection,
        cidfile: Option<&Path>,
    ) -> Vec<OsString> {
        let mut added: Vec<OsString> = Vec::new();
        let mut push = |words: &[&str]| added.extend(words.iter().map(OsString::from));
        match injection {
            Injection::Cdi => {
                for uuid in chosen.uuids {
                    push(&["--device", &format!("nvidia.com/gpu={uuid}")]);
                }
            }
            // docker's --gpus value is CSV: several devices are quoted inside the value.
            Injection::Gpus if chosen.uuids.len() == 1 => {
                push(&["--gpus", &format!("device={}", chosen.uuids[0])])
            }
            Injection::Gpus => push(&["--gpus", &format!("\"device={}\"", chosen.uuids.join(","))]),
        }
        let mut variables = vec![
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_owned()),
            ("GPURUN_GPUS", chosen.indices.to_owned()),
            ("GPURUN_GPU_UUIDS", chosen.uuids.join(",")),
        ];
        if chosen.framework_env {
            variables.push(("TF_FORCE_GPU_ALLOW_GROWTH", "true".to_owned()));
            variables.push(("XLA_PYTHON_CLIENT_PREALLOCATE", "false".to_owned()));
        }
        for (name, value) in variables {
            if !self.user_env.iter().any(|set| set == name) {
                push(&["-e", &format!("{name}={value}")]);
            }
        }
        if let (None, Some(cidfile)) = (&self.user_cidfile, cidfile) {
            added.push("--cidfile".into());
            added.push(cidfile.as_os_str().to_owned());
        }
        let mut rewritten = command[..self.insert_at].to_vec();
        rewritten.extend(added.iter().cloned());
        rewritten.extend(command[self.insert_at..].iter().cloned());
        rewritten
    }

    /// `<client> <its global options> <words>` (`kill <id>`, `wait <id>`).
    pub(crate) fn client_command(&self, words: &[&str]) -> Vec<OsString> {
        let mut command = vec![OsString::from(self.client.name())];
        command.extend(self.globals.iter().cloned());
        command.extend(words.iter().map(OsString::from));
        command
    }
}

/// How long gpurun waits for the client's `kill` and `wait` when it ends a container.
const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the client to its end (stdout to /dev/null), killing it after `CLIENT_TIMEOUT`.
fn run_briefly(words: &[OsString]) -> std::io::Result<()> {
    let mut child = std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            return match status.success() {
                true => Ok(()),
                false => Err(std::io::Error::other(format!("exited with {status}"))),
            };
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!("no answer within {} s", CLIENT_TIMEOUT.as_secs())));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether docker's daemon has CDI on (`"features": {"cdi": true}` in /etc/docker/daemon.json,
/// docker 25 and later), so that docker takes CDI devices as podman does.
pub(crate) fn docker_has_cdi(daemon_json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(daemon_json)
        .ok()
        .and_then(|config| config["features"]["cdi"].as_bool())
        .unwrap_or(false)
}

/// A container run as it is launched: the command with gpurun's options, and the file the
/// container's ID comes in: the user's own `--cidfile`, or one in a directory of gpurun's own
/// (mode 0700 in the temporary directory, removed at the end).
pub(crate) struct Prepared {
    pub(crate) run: ContainerRun,
    pub(crate) command: Vec<OsString>,
    pub(crate) cidfile: PathBuf,
    own_dir: Option<PathBuf>,
}

/// What becomes of the `--cidfile` gpurun adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CidUse {
    /// A dry run: named in the command shown, nothing made.
    Shown,
    /// A supervised launch: its private directory is made (and removed at the end).
    Made,
    /// `--exec`: gpurun is replaced by the client and reads no ID, so none is added (a
    /// directory made for it would be left behind on every run).
    Left,
}

impl Prepared {
    pub(crate) fn new(
        run: &ContainerRun,
        command: &[OsString],
        chosen: &Chosen,
        mode: ContainerUse,
        cid: CidUse,
    ) -> std::io::Result<Prepared> {
        let name = format!("gpurun-{}-{:08x}", std::process::id(), crate::process::random_bits(0));
        let own_dir = std::env::temp_dir().join(name);
        let create = cid == CidUse::Made && run.user_cidfile.is_none();
        if create {
            // Never an existing directory: one made by someone else could be read or swapped.
            nix::unistd::mkdir(&own_dir, nix::sys::stat::Mode::from_bits_truncate(0o700))?;
        }
        let cidfile = run.cidfile(&own_dir.join("cid"));
        let docker_cdi = run.client == Client::Docker
            && std::fs::read_to_string("/etc/docker/daemon.json").is_ok_and(|text| docker_has_cdi(&text));
        let added_cidfile = (cid != CidUse::Left).then_some(cidfile.as_path());
        let command = run.rewrite(command, chosen, run.injection(mode, docker_cdi), added_cidfile);
        Ok(Prepared { run: run.clone(), command, cidfile, own_dir: create.then_some(own_dir) })
    }

    /// What the parent-death watcher becomes if gpurun dies: `<client> <globals> kill --signal
    /// N` and the ID from the cidfile (the client found on PATH now, so that the watcher needs
    /// no search). `None` where a word holds a NUL or the client is not on PATH.
    pub(crate) fn death_kill(&self, signal: i32) -> Option<crate::process::death::ContainerKill> {
        use std::os::unix::ffi::OsStrExt;
        let program = crate::process::spawn::on_path(self.run.client.name())?;
        let signal = signal.to_string();
        let mut words = self.run.client_command(&["kill", "--signal", &signal]);
        words[0] = program.into_os_string();
        let argv =
            words.iter().map(|w| std::ffi::CString::new(w.as_bytes()).ok()).collect::<Option<Vec<_>>>()?;
        let cidfile = std::ffi::CString::new(self.cidfile.as_os_str().as_bytes()).ok()?;
        Some(crate::process::death::ContainerKill { argv, cidfile })
    }

    /// The container's ID, once the runtime has written it.
    pub(crate) fn id(&self) -> Option<String> {
        crate::verify::container::read_id(&self.cidfile)
    }

    /// Ends the container itself (`<client> kill <id>`, then `<client> wait <id>`), where gpurun
    /// had to kill the client, which would leave it running: the reservation then ends with
    /// the container. Each is waited for at most `CLIENT_TIMEOUT`.
    pub(crate) fn kill(&self) {
        let Some(id) = self.id() else { return };
        let kill = self.run.client_command(&["kill", &id]);
        tracing::warn!(
            "ending the container {} ({})",
            &id[..12.min(id.len())],
            crate::options::shell::quote(&kill)
        );
        for words in [kill, self.run.client_command(&["wait", &id])] {
            if let Err(error) = run_briefly(&words) {
                tracing::warn!("{}: {error}", crate::options::shell::quote(&words));
                return;
            }
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(dir) = &self.own_dir {
            let _ = std::fs::remove_file(dir.join("cid"));
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<OsString> {
        text.split_whitespace().map(OsString::from).collect()
    }

    fn found(text: &str) -> ContainerRun {
        recognise(&words(text), ContainerUse::Auto)
            .unwrap()
            .unwrap_or_else(|| panic!("{text}: not a container run"))
    }

    fn shown(words: &[OsString]) -> String {
        words.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>().join(" ")
    }

    const ONE: &[&str] = &["GPU-a"];

    #[test]
    fn container_runs_are_found_after_the_clients_own_options() {
        for text in [
            "podman run img",
            "podman --runtime runc --root /r run --rm img python x.py",
            "/usr/bin/docker --context prod container run -it img",
            "docker -H unix:///s run img",
            "docker --debug run img",
            "podman --namespace ns run --rm img",
            "podman container run img",
            "podman run --env-merge X=y img cmd",
            "podman run --rm --unsetenv-all img cmd",
            "docker -D -l debug run -it img",
        ] {
            let run = found(text);
            assert!(run.image == "img", "{text}: {run:?}");
        }
        // create runs the container after the reservation; an option no table has is not guessed.
        for (text, refused) in [
            ("docker -H unix:///s create img", ContainerError::Create { client: "docker" }),
            ("podman container create img", ContainerError::Create { client: "podman" }),
            (
                "podman run --frobnicate img",
                ContainerError::Unknown { client: "podman", place: "run", option: "--frobnicate".to_owned() },
            ),
            (
                "podman --frobnicate x run img",
                ContainerError::Unknown {
                    client: "podman",
                    place: "global",
                    option: "--frobnicate".to_owned(),
                },
            ),
            (
                "docker run -itZ img",
                ContainerError::Unknown { client: "docker", place: "run", option: "-Z (in -itZ)".to_owned() },
            ),
            ("podman run -dit img", ContainerError::Detached { option: "-dit".to_owned() }),
        ] {
            assert_eq!(recognise(&words(text), ContainerUse::Auto), Err(refused), "{text}");
        }
        // What else hands the container GPUs is warned about.
        let privileged =
            found("podman run --privileged -v /dev:/dev --mount type=bind,src=/dev/nvidia0,dst=/d img");
        assert_eq!(privileged.warnings.len(), 3, "{:?}", privileged.warnings);
        for text in ["podman ps", "docker image ls", "python run img", "docker", "podman --root /r"] {
            assert_eq!(recognise(&words(text), ContainerUse::Auto).unwrap(), None, "{text}");
        }
        assert_eq!(recognise(&words("podman run img"), ContainerUse::Off).unwrap(), None);
        assert_eq!(found("podman --runtime runc run img").globals, words("--runtime runc"));
    }

    #[test]
    fn the_choice_goes_right_after_the_subcommand_before_the_users_options() {
        let run = found("podman --runtime runc run --rm -v /d:/d img python train.py -d");
        let chosen =
            Chosen { uuids: &["GPU-a".to_owned(), "GPU-b".to_owned()], indices: "3,5", framework_env: true };
        let rewritten = run.rewrite(
            &words("podman --runtime runc run --rm -v /d:/d img python train.py -d"),
            &chosen,
            Injection::Cdi,
            Some(Path::new("/t/cid")),
        );
        assert_eq!(
            shown(&rewritten),
            "podman --runtime runc run --device nvidia.com/gpu=GPU-a --device nvidia.com/gpu=GPU-b \
             -e CUDA_DEVICE_ORDER=PCI_BUS_ID -e GPURUN_GPUS=3,5 -e GPURUN_GPU_UUIDS=GPU-a,GPU-b \
             -e TF_FORCE_GPU_ALLOW_GROWTH=true -e XLA_PYTHON_CLIENT_PREALLOCATE=false --cidfile /t/cid \
             --rm -v /d:/d img python train.py -d"
        );
        // The user's -e wins; no host-index CUDA_VISIBLE_DEVICES is ever added.
        let run =
            found("podman run -e TF_FORCE_GPU_ALLOW_GROWTH=false --env=XLA_PYTHON_CLIENT_PREALLOCATE img");
        let chosen = Chosen {
            uuids: &ONE.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            indices: "0",
            framework_env: true,
        };
        let rewritten = run.rewrite(&words("podman run img"), &chosen, Injection::Cdi, Some(Path::new("/c")));
        let text = shown(&rewritten);
        assert!(
            !text.contains("TF_FORCE") && !text.contains("XLA_") && !text.contains("CUDA_VISIBLE"),
            "{text}"
        );
    }

    #[test]
    fn docker_without_cdi_gets_gpus_in_its_documented_syntax() {
        // docs.docker.com, "docker run --gpus": --gpus '"device=1,2"' (the value is CSV, so two
        // devices are quoted inside it), --gpus device=GPU-3a23c669-1f69-c64e-cf85-44e9b07e7a2a.
        let run = found("docker run --rm img");
        assert_eq!(run.injection(ContainerUse::Auto, false), Injection::Gpus);
        assert_eq!(run.injection(ContainerUse::Auto, true), Injection::Cdi);
        assert_eq!(run.injection(ContainerUse::Cdi, false), Injection::Cdi);
        assert_eq!(found("podman run img").injection(ContainerUse::Gpus, false), Injection::Cdi);
        let two = ["GPU-a".to_owned(), "GPU-b".to_owned()];
        let chosen = Chosen { uuids: &two, indices: "0,1", framework_env: false };
        let rewritten =
            run.rewrite(&words("docker run --rm img"), &chosen, Injection::Gpus, Some(Path::new("/c")));
        assert_eq!(rewritten[2..4], [OsString::from("--gpus"), OsString::from("\"device=GPU-a,GPU-b\"")]);
        let chosen = Chosen { uuids: &two[..1], indices: "0", framework_env: false };
        let rewritten =
            run.rewrite(&words("docker run --rm img"), &chosen, Injection::Gpus, Some(Path::new("/c")));
        assert_eq!(rewritten[2..4], [OsString::from("--gpus"), OsString::from("device=GPU-a")]);
        assert!(docker_has_cdi(r#"{"features": {"cdi": true}}"#));
        assert!(!docker_has_cdi(r#"{"runtimes": {}}"#) && !docker_has_cdi("not json"));
        assert_eq!(run.client_command(&["kill", "abc"]), words("docker kill abc"));
        assert_eq!(
            found("podman --root /r run img").client_command(&["wait", "x"]),
            words("podman --root /r wait x")
        );
    }

    #[test]
    fn the_users_own_gpu_options_and_detaching_are_refused() {
        for text in [
            "docker run --gpus all img",
            "docker run --gpus=device=0 img",
            "podman run --device nvidia.com/gpu=0 img",
            "podman run --device=nvidia.com/gpu=all img",
            "podman run --device /dev/nvidia3 img",
            "docker run -e CUDA_VISIBLE_DEVICES=1 img",
            "docker run --env NVIDIA_VISIBLE_DEVICES=all img",
            "docker run -eCUDA_VISIBLE_DEVICES=0 img",
        ] {
            assert!(
                matches!(recognise(&words(text), ContainerUse::Auto), Err(ContainerError::Conflict { .. })),
                "{text}"
            );
        }
        for text in [
            "docker run -d img",
            "podman run --detach img",
            "podman run -dit img",
            "docker run --detach=true img",
        ] {
            assert!(
                matches!(recognise(&words(text), ContainerUse::Auto), Err(ContainerError::Detached { .. })),
                "{text}"
            );
        }
        // The control nodes every GPU container gets, and the command's own -d, are fine.
        for text in [
            "podman run --device /dev/nvidiactl img",
            "podman run img sh -c 'x' -d",
            "docker run --detach=false img",
        ] {
            assert!(recognise(&words(text), ContainerUse::Auto).unwrap().is_some(), "{text}");
        }
        // Values that look like options are values: -w -d is a working directory named -d.
        assert_eq!(found("podman run -w -d img").image, "img");
        assert!(matches!(
            recognise(&words("podman run --rm"), ContainerUse::Auto),
            Err(ContainerError::NoImage { .. })
        ));
    }

    #[test]
    fn sig_proxy_and_the_users_cidfile_are_kept() {
        let run = found("podman run --sig-proxy=false --cidfile /mine img");
        assert!(run.sig_proxy_off);
        assert_eq!(run.cidfile(Path::new("/ours")), PathBuf::from("/mine"));
        let chosen = Chosen { uuids: &["GPU-a".to_owned()], indices: "0", framework_env: false };
        let rewritten =
            run.rewrite(&words("podman run img"), &chosen, Injection::Cdi, Some(Path::new("/ours")));
        assert!(!shown(&rewritten).contains("--cidfile"), "{}", shown(&rewritten));
    }
}
