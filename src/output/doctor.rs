//! `--doctor`: everything that decides whether a job lands on the right GPU, checked and said
//! plainly on stdout: NVML and the driver, device nodes, inherited variables, containers and
//! Slurm, the lock directory, and the CUDA version the Python frameworks were built for.

use crate::runtime::Runtime;
use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::config::Config;
use crate::probe::gpu::Machine;
use crate::probe::vendor::Vendor;
use crate::probe::worker::{Failure, ProbeThread};
use crate::process::signals::Receiver;
use crate::reserve::lease;
use crate::reserve::lockdir::LockDir;
use crate::runtime::Inherited;

/// The report, and whether gpurun can run a job here at all (NVML usable).
pub(crate) struct Diagnosis {
    pub(crate) text: String,
    pub(crate) usable: bool,
}

struct Out {
    text: String,
    problems: usize,
}

impl Out {
    fn section(&mut self, title: &str) {
        let _ = writeln!(self.text, "\n{title}");
    }

    fn ok(&mut self, line: impl AsRef<str>) {
        let _ = writeln!(self.text, "  ok       {}", line.as_ref());
    }

    fn info(&mut self, line: impl AsRef<str>) {
        let _ = writeln!(self.text, "  info     {}", line.as_ref());
    }

    fn problem(&mut self, line: impl AsRef<str>) {
        self.problems += 1;
        let _ = writeln!(self.text, "  PROBLEM  {}", line.as_ref());
    }
}

/// The findings. `Err(signal)`: a signal that ends gpurun arrived while NVML was asked.
pub(crate) fn examine(
    prober: &mut ProbeThread,
    receiver: &Receiver,
    config: &Config,
) -> Result<Diagnosis, i32> {
    let mut out = Out { text: String::from("gpurun doctor\n"), problems: 0 };
    out.section("NVML and driver");
    // The library the user asked for (NVML's under auto, which is tried first), in its words.
    let vendor = config.libraries.vendor_if_chosen();
    let library = format!("{} from {}", vendor.library(), config.libraries.path_of(vendor).display());
    let timeout = config.nvml_timeout;
    let mut usable = false;
    let mut machine = None;
    // (the failure, and whether the library had opened)
    let probed = prober
        .open(config.libraries_to_open(), receiver, timeout)
        .map_err(|failure| (failure, false))
        .and_then(|()| {
            prober
                .probe(receiver, timeout, None, &mut |_| {}, crate::probe::Needs::ALL)
                .map_err(|failure| (failure, true))
        });
    match probed {
        Err((Failure::Interrupted(signal), _)) => return Err(signal),
        Err((failure, false)) => out.problem(format!("{library}: {failure}")),
        Err((failure, true)) => out.problem(format!("{library} opened, but {failure}")),
        Ok(probed) => {
            usable = true;
            let loaded = config.libraries.path_of(probed.vendor);
            out.ok(format!("{} loaded from {}", probed.vendor.library(), loaded.display()));
            out.info(
                probed
                    .vendor
                    .driver_line(probed.driver_version.as_deref(), probed.cuda_driver_version.as_deref()),
            );
            for gpu in &probed.gpus {
                let name = crate::process::stdio::escaped(gpu.name.as_deref().unwrap_or("unknown model"));
                match &gpu.error {
                    None => {
                        out.ok(format!("GPU {}: {name} ({})", gpu.index, gpu.uuid.as_deref().unwrap_or("-")))
                    }
                    Some(error) => out.problem(format!("GPU {}: {name}: {error}", gpu.index)),
                }
                mig_findings(&mut out, gpu, &probed);
                health_findings(&mut out, gpu);
            }
            for excluded in &probed.excluded {
                out.problem(format!(
                    "the GPU at {} ({}) is excluded by the driver (NVreg_ExcludedGpus, or it failed at load: see \
                     dmesg); NVML and CUDA do not see it until the driver is loaded without the exclusion",
                    excluded.pci_bus_id.as_deref().unwrap_or("-"),
                    excluded.uuid.as_deref().unwrap_or("-")
                ));
            }
            if probed.gpus.is_empty() {
                out.problem(format!("{} sees no GPU", probed.vendor.library()));
            }
            persistence(&mut out, &probed);
            machine = Some(probed);
        }
    }

    out.section("Device nodes");
    device_nodes(&mut out, machine.as_ref().map_or(config.libraries.vendor_if_chosen(), |m| m.vendor));

    out.section("Inherited GPU variables");
    inherited(&mut out, machine.as_ref());

    out.section("Container and scheduler");
    environment(&mut out, machine.as_ref());

    out.section("MPS, fabric and confidential computing");
    mps_and_fabric(&mut out, machine.as_ref());

    out.section("Lock directory");
    lock_directory(&mut out, config.lock_dir.as_deref());
    match config.limits.describe() {
        rules if rules.is_empty() => out.info("no house rules ([limits] in the system file)"),
        rules => out.info(format!("house rules: {}", rules.join("; "))),
    }

    out.section("Python frameworks");
    frameworks(&mut out, machine.as_ref().and_then(|m| m.cuda_driver_version.as_deref()));

    let _ = writeln!(
        out.text,
        "\n{}",
        match out.problems {
            0 => "no problem found".to_owned(),
            1 => "1 problem found".to_owned(),
            n => format!("{n} problems found"),
        }
    );
    Ok(Diagnosis { text: out.text, usable })
}

/// Persistence mode: without it the driver tears a GPU down when its last client exits, and the
/// next first handle (a job's CUDA, gpurun's own probe) brings it up again: "a short (order of
/// 1-3 second) startup cost per GPU due to ECC scrubbing behavior" (NVIDIA, Driver Persistence:
/// Overview).
fn persistence(out: &mut Out, machine: &Machine) {
    let whole = || machine.gpus.iter().filter(|gpu| gpu.error.is_none());
    let off: Vec<String> =
        whole().filter(|gpu| gpu.persistence_mode == Some(false)).map(|g| g.index.to_string()).collect();
    let unknown = whole().filter(|gpu| gpu.persistence_mode.is_none()).count();
    if !off.is_empty() {
        out.problem(format!(
            "persistence mode is off on GPU {}: the driver tears a GPU down when its last client exits, and the \
             next job (and gpurun's probe) pays the start again, of the order of 1-3 s per GPU (NVIDIA: ECC \
             scrubbing); run nvidia-persistenced (or nvidia-smi -pm 1, the legacy mode)",
            off.join(", ")
        ));
    } else if unknown == 0 && whole().next().is_some() {
        out.ok("persistence mode is on: no GPU is brought up again for each job");
    }
    if unknown > 0 {
        out.info(format!("persistence mode unknown on {unknown} GPU(s): NVML does not say"));
    }
}

/// A sick GPU's findings and what to do, after NVIDIA's memory-error recovery guidance: a reset
/// applies pending row remaps and page retirements and clears volatile counts; errors that come
/// back, or a failed remap, mean the board needs service.
fn health_findings(out: &mut Out, gpu: &crate::probe::gpu::Gpu) {
    use crate::probe::health::HealthState;
    let index = gpu.index;
    // Advice only for what a counter or a state reported (DESIGN 3): an unreadable value gets
    // a way to look, never a reset, a reboot or an RMA.
    let advice: Vec<String> =
        gpu.health.advice.iter().map(|line| line.replace("-i N", &format!("-i {index}"))).collect();
    let advice = match advice.is_empty() {
        true => String::new(),
        false => format!(" {}", advice.join(" ")),
    };
    match gpu.health.state {
        HealthState::Ok => {}
        HealthState::Degraded => out.problem(format!(
            "GPU {index} is {}. gpurun takes it only after every healthy GPU (--health strict: never).{advice}",
            gpu.health.describe()
        )),
        HealthState::Unknown => out.problem(format!(
            "GPU {index}'s health is {}. gpurun takes it only after every healthy and degraded GPU \
             (--health strict: never), since what NVML could not read may be an uncorrectable error. See \
             what nvidia-smi reads: nvidia-smi -q -i {index} -d ECC,ROW_REMAPPER,PERFORMANCE.{advice}",
            gpu.health.describe()
        )),
        HealthState::Unhealthy => out.problem(format!(
            "GPU {index} is {}. gpurun does not choose it (--health ignore overrides).{advice}",
            gpu.health.describe()
        )),
    }
}

/// The runtime's device nodes: NVIDIA's `/dev/nvidia*`; AMD's `/dev/kfd` (ROCm's compute
/// interface) and `/dev/dri/renderD*`, which a ROCm program opens both of.
fn device_nodes(out: &mut Out, vendor: Vendor) {
    let wanted = Runtime::of(vendor).device_nodes();
    let mut nodes: Vec<_> = match std::fs::read_dir(wanted.folder) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(wanted.prefix))
            .map(|e| e.path())
            .collect(),
        // A folder of its own (/dev/dri) is missing where there is no such GPU; /dev never is.
        Err(_) if wanted.folder != "/dev" => Vec::new(),
        Err(_) => {
            out.problem("cannot read /dev");
            return;
        }
    };
    nodes.extend(wanted.also.filter(|node| Path::new(node).exists()).map(std::path::PathBuf::from));
    nodes.sort();
    if nodes.is_empty() {
        out.info(format!("{} (no driver here, or a container without GPUs passed in)", wanted.none));
        return;
    }
    for node in nodes {
        let Ok(metadata) = std::fs::metadata(&node) else { continue };
        if !metadata.file_type().is_char_device() {
            continue;
        }
        let usable =
            nix::unistd::access(&node, nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK)
                .is_ok();
        let line = format!(
            "{} mode {:o} uid {} gid {}",
            node.display(),
            metadata.mode() & 0o7777,
            metadata.uid(),
            metadata.gid()
        );
        if usable {
            out.ok(format!("{line}: readable and writable by you"));
        } else {
            out.problem(format!(
                "{line}: not readable and writable by you (check your groups, e.g. video, render)"
            ));
        }
    }
}

fn inherited(out: &mut Out, machine: Option<&Machine>) {
    let names = [
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "GPU_DEVICE_ORDINAL",
        "NVIDIA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
    ];
    let mut any = false;
    for name in names {
        if let Some(value) = std::env::var_os(name) {
            any = true;
            out.info(format!("{name}={}", value.to_string_lossy()));
        }
    }
    if !any {
        out.info("none set: gpurun may choose among every GPU");
    }
    if let Some(machine) = machine {
        let visibility = crate::runtime::visibility(machine, &Inherited::from_env());
        if let Some(allowed) = &visibility.allowed {
            out.info(format!(
                "gpurun will choose only among {} ({})",
                if allowed.is_empty() { "no device".to_owned() } else { crate::probe::gpu::labels(allowed) },
                visibility.source.as_deref().unwrap_or("")
            ));
        }
        for warning in &visibility.warnings {
            out.problem(warning);
        }
    }
}

/// A GPU's MIG state: a mode change waiting for a reset, MIG mode without a MIG device, and
/// the MIG devices it has.
fn mig_findings(out: &mut Out, gpu: &crate::probe::gpu::Gpu, machine: &crate::probe::gpu::Machine) {
    let word = |enabled: bool| if enabled { "enabled" } else { "disabled" };
    if let (Some(now), Some(later)) = (gpu.mig_enabled, gpu.mig_pending) {
        if now != later {
            out.problem(format!(
                "GPU {}: MIG mode is {} but {} is pending: the change takes effect at the next GPU reset \
                 (nvidia-smi -r -i {}), and until then the GPU stays as it is",
                gpu.index,
                word(now),
                word(later),
                gpu.index
            ));
        }
    }
    if !gpu.in_mig_mode() {
        return;
    }
    let devices: Vec<&crate::probe::gpu::Gpu> = machine
        .migs
        .iter()
        .filter(|mig| mig.mig.as_ref().is_some_and(|info| info.parent == gpu.index))
        .collect();
    if devices.is_empty() {
        out.problem(format!(
            "GPU {} is in MIG mode with no MIG device: nothing can run on it until an administrator creates \
             instances (nvidia-smi mig -i {} -cgi PROFILES -C)",
            gpu.index, gpu.index
        ));
    }
    for device in devices {
        let info = device.mig.as_ref().expect("a MIG device");
        out.info(format!(
            "{}: MIG {} ({})",
            crate::probe::gpu::label(device.index),
            info.profile.as_deref().unwrap_or("?"),
            device.uuid.as_deref().unwrap_or("-")
        ));
    }
}

fn environment(out: &mut Out, machine: Option<&Machine>) {
    // PID 2 is kthreadd in the host's PID namespace only.
    let kthreadd = crate::process::procfs::in_host_pid_namespace();
    if kthreadd {
        out.ok("host PID namespace: NVML's PIDs are this process's PIDs (verification works)");
    } else {
        // What the driver's PIDs are here depends on its branch (probe::pid_regime).
        let regime = machine.and_then(|machine| {
            let driver = machine.driver_version.as_deref()?;
            Some((driver, crate::probe::pid_regime::of(machine.vendor, driver)?))
        });
        match regime {
            Some((driver, regime)) => {
                out.info(format!("a PID namespace of its own (container?): {}", regime.words(driver)))
            }
            None => out.info(
                "a PID namespace of its own (container?): drivers since 535.113.01 list its own PIDs, older \
                 ones host PIDs (then verification may say 'unverifiable')",
            ),
        }
    }
    if Path::new("/.dockerenv").exists() || Path::new("/run/.containerenv").exists() {
        out.info("container runtime files present (/.dockerenv or /run/.containerenv)");
    }
    match std::env::var("SLURM_JOB_ID") {
        Ok(job) => out.info(format!(
            "inside Slurm job {job}{}: gpurun selects only among the GPUs Slurm gave the step",
            std::env::var("SLURM_STEP_ID").map(|s| format!(", step {s}")).unwrap_or_default()
        )),
        Err(_) => out.info("not inside a Slurm job"),
    }
}

/// Where an MPS client of this user would connect, whether a control daemon serves there, the
/// GPUs that run MPS (whose), the fabric and confidential computing, and the variable that
/// would change what NVML answers.
fn mps_and_fabric(out: &mut Out, machine: Option<&Machine>) {
    // The pipe --mps would use (`mps_control::mps_control_pipe`), and where its directory came from.
    let control = crate::plan::mps_control::mps_control_pipe();
    let pipe = control.parent().unwrap_or(Path::new("/")).to_path_buf();
    let whose = match std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").is_some_and(|dir| !dir.is_empty()) {
        true => "CUDA_MPS_PIPE_DIRECTORY",
        false => "the default",
    };
    let untrusted = crate::plan::mps_control::untrusted_mps_pipe(&control);
    if let Some(why) = &untrusted {
        out.problem(format!("{why}; --mps refuses it (CUDA_MPS_PIPE_DIRECTORY names your own)"));
    }
    match crate::plan::mps_control::mps_control_daemon(&control) {
        _ if untrusted.is_some() => {}
        Some(daemon) => {
            out.ok(format!("{} ({whose})", crate::output::mps_daemon::words(daemon, &pipe, machine)))
        }
        None if std::fs::symlink_metadata(&control).is_ok() => out.info(format!(
            "{} exists but no MPS control daemon serves it (a stale pipe directory?)",
            control.display()
        )),
        None => out.info(format!("no MPS control daemon at {} ({whose})", pipe.display())),
    }
    for (name, _) in crate::process::environment::held() {
        out.problem(format!(
            "{} is set: NVML 13 then enumerates the MPS locality-domain view (other indices for every \
             call); gpurun keeps it out of its own NVML and passes it to the command",
            name.to_string_lossy()
        ));
    }
    let Some(machine) = machine else { return };
    // A standalone or PCIe GPU has no fabric to register with: that is said, never a problem.
    if machine.vendor.has_nvlink_fabric()
        && !machine.gpus.is_empty()
        && machine.gpus.iter().all(|g| g.fabric.is_none())
    {
        out.info("no NVLink fabric (standalone or PCIe GPUs: no fabric manager to register with)");
    }
    for gpu in machine.devices() {
        let label = crate::probe::gpu::label(gpu.index);
        if let Some(mps) = &gpu.mps {
            let clients = mps.clients.len();
            let line = format!(
                "{label}: {}, {clients} client{}",
                mps.server_words(),
                if clients == 1 { "" } else { "s" }
            );
            match mps.foreign {
                true => out.info(format!("{line}: not chosen for you (a context of yours would wait)")),
                false => out.info(format!("{line}: --mps joins it")),
            }
        }
        if let (Some(fabric), None) = (&gpu.fabric, &gpu.mig) {
            out.info(format!(
                "{label}: NVLink fabric {} (clique {}, cluster {}), {}",
                fabric.state, fabric.clique_id, fabric.cluster_uuid, fabric.health.state
            ));
        }
    }
    match machine.confidential_computing {
        Some(cc) => match cc.refusal() {
            Some(refusal) => out.problem(refusal),
            None if cc.on => out.ok("confidential computing is on and the GPUs accept work"),
            None => out.info("confidential computing is off"),
        },
        None => out.info("no confidential computing on this driver"),
    }
}

fn lock_directory(out: &mut Out, lock_dir: Option<&Path>) {
    let Some(path) = lock_dir else {
        out.info("--no-lock: reservations are off");
        return;
    };
    if !path.exists() {
        out.info(format!(
            "{} does not exist yet; the first gpurun that runs a command creates it (install the tmpfiles.d \
             entry on shared machines so that root owns it)",
            path.display()
        ));
        return;
    }
    match LockDir::open(path, false) {
        Ok(dir) => {
            let live = lease::live(&dir, false);
            out.ok(format!("{} is safe; {} live reservation(s)", path.display(), live.len()));
        }
        Err(error) => out.problem(error.to_string()),
    }
}

/// The CUDA version a framework was built for, from python3 (bounded in time).
fn framework_cuda(probe: &str) -> Result<String, String> {
    let mut child = Command::new("python3")
        .args(["-c", probe])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|_| "python3 not found".to_owned())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("timed out importing it".to_owned());
            }
        }
    }
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() && !text.is_empty() {
        Ok(text)
    } else {
        Err("not installed".to_owned())
    }
}

fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

fn frameworks(out: &mut Out, driver_cuda: Option<&str>) {
    let probes = [
        ("torch", "import torch; print(torch.version.cuda or 'cpu')"),
        (
            "tensorflow",
            "import tensorflow as tf; print(tf.sysconfig.get_build_info().get('cuda_version') or 'cpu')",
        ),
    ];
    for (name, probe) in probes {
        match framework_cuda(probe) {
            Err(why) => out.info(format!("{name}: {why}")),
            Ok(built) if built == "cpu" => {
                out.problem(format!("{name} is a CPU-only build: it will not use any GPU"))
            }
            Ok(built) => match (major_minor(&built), driver_cuda.and_then(major_minor)) {
                (Some(framework), Some(driver)) if framework > driver => out.problem(format!(
                    "{name} was built for CUDA {built}, newer than the driver's CUDA {}: it will fail to \
                     initialise the GPU; upgrade the driver or install a {name} built for CUDA {} or older",
                    driver_cuda.unwrap_or("?"),
                    driver_cuda.unwrap_or("?")
                )),
                (Some(_), Some(_)) => out.ok(format!(
                    "{name} built for CUDA {built}; the driver supports {}",
                    driver_cuda.unwrap_or("?")
                )),
                _ => out.info(format!("{name} built for CUDA {built}")),
            },
        }
    }
}
