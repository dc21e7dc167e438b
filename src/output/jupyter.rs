//! `--jupyter-kernel NAME` (issue 66): a Jupyter kernel spec whose kernel runs under gpurun.
//! A notebook cannot be prefixed with a command; its kernel can. The spec's argv is gpurun,
//! the user's own options as typed, then the kernel (`PYTHON -m ipykernel_launcher -f
//! {connection_file}`), so the reservation lives exactly as long as the kernel: a restart
//! drops it and takes one again, a shutdown leaves nothing. `interrupt_mode` is `signal`:
//! Jupyter's interrupt is a SIGINT to gpurun, which forwards it to the kernel as to any
//! command. No `--wait` unless the user gives one (Jupyter's start timeout would fire first):
//! a refusal says why in the kernel's log, and Jupyter says the kernel died.
//!
//! Where, as `jupyter kernelspec install` puts it: `--prefix DIR` under
//! `DIR/share/jupyter/kernels`, else the user's data directory (`$JUPYTER_DATA_DIR`, else
//! `$XDG_DATA_HOME/jupyter`, else `~/.local/share/jupyter`, as jupyter_core has it on Linux).
//! Unlike `jupyter kernelspec install`, the user's is the default: a reservation is one user's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cli::Parsed;
use crate::error::Error;
use crate::exit_code::Exit;

/// What `jupyter kernelspec` accepts as a name.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The options that say where the spec goes, not what the kernel's gpurun does: left out of
/// the spec's argv (with their values, in either spelling).
const OWN_OPTIONS: &[&str] = &["--jupyter-kernel", "--user", "--prefix"];

/// The user's words without `OWN_OPTIONS`.
fn kernel_options(words: &[OsString]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut words = words.iter().map(|word| word.to_string_lossy().into_owned());
    while let Some(word) = words.next() {
        let own =
            OWN_OPTIONS.iter().find(|option| word == **option || word.starts_with(&format!("{option}=")));
        match own {
            // A separate value follows --jupyter-kernel NAME and --prefix DIR.
            Some(option) if word == *option && *option != "--user" => {
                words.next();
            }
            Some(_) => {}
            None => kept.push(word),
        }
    }
    kept
}

/// The kernels folder the spec goes in.
fn kernels_dir(prefix: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(prefix) = prefix {
        return Ok(prefix.join("share/jupyter/kernels"));
    }
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    let data = var("JUPYTER_DATA_DIR")
        .or_else(|| var("XDG_DATA_HOME").map(|dir| dir.join("jupyter")))
        .or_else(|| var("HOME").map(|home| home.join(".local/share/jupyter")))
        .ok_or_else(|| {
            Error::Usage(
                "--jupyter-kernel: no HOME, JUPYTER_DATA_DIR or XDG_DATA_HOME: name a --prefix DIR".into(),
            )
        })?;
    Ok(data.join("kernels"))
}

/// The Python that runs the kernel: the command after `--` when given (a venv's python), else
/// `python3` on PATH, made absolute now (a kernel's PATH is Jupyter's, not this shell's).
fn python(command: &[OsString]) -> Result<Vec<String>, Error> {
    if !command.is_empty() {
        return Ok(command.iter().map(|word| word.to_string_lossy().into_owned()).collect());
    }
    crate::process::spawn::on_path("python3").map(|found| vec![found.display().to_string()]).ok_or_else(
        || {
            Error::Usage(
                "--jupyter-kernel: no python3 on PATH; name the kernel's Python after --: \
                 gpurun --jupyter-kernel NAME ... -- /path/to/venv/bin/python"
                    .into(),
            )
        },
    )
}

/// Writes the spec, and prints where (stdout: the kernel.json's path).
pub(crate) fn install(parsed: &Parsed, name: &str) -> Result<Exit, Error> {
    if !valid_name(name) {
        return Err(Error::Usage(format!(
            "--jupyter-kernel {name:?}: a kernel name is letters, digits, '.', '_' and '-', as jupyter kernelspec \
             takes"
        )));
    }
    let gpurun = std::env::current_exe().map_err(Error::Output)?;
    let options = kernel_options(&parsed.own_words);
    let python = python(&parsed.cli.command)?;
    let mut argv: Vec<String> = vec![gpurun.display().to_string()];
    argv.extend(options.iter().cloned());
    argv.push("--".to_owned());
    argv.extend(python);
    argv.extend(["-m", "ipykernel_launcher", "-f", "{connection_file}"].map(str::to_owned));
    let shown = match options.is_empty() {
        true => String::new(),
        false => format!(": {}", options.join(" ")),
    };
    let spec = serde_json::json!({
        "argv": argv,
        "display_name": format!("Python (gpurun{shown})"),
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": { "gpurun": { "options": options } },
    });
    let folder = kernels_dir(parsed.cli.prefix.as_deref())?.join(name);
    let file = folder.join("kernel.json");
    let written = std::fs::create_dir_all(&folder).and_then(|()| {
        let text = serde_json::to_string_pretty(&spec).expect("a JSON value") + "\n";
        crate::process::replace::replace_file(&file, &text)
    });
    written.map_err(|error| {
        Error::Usage(format!("--jupyter-kernel: cannot write {}: {error}", file.display()))
    })?;
    tracing::info!("Jupyter kernel {name:?} written: {}", file.display());
    let shown = file.display().to_string();
    crate::process::stdio::print(&format!("{}\n", crate::process::stdio::escaped(&shown)))
        .map_err(Error::Output)?;
    Ok(Exit::Code(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &[&str]) -> Vec<OsString> {
        text.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_specs_own_options_are_left_out_with_their_values() {
        let typed =
            words(&["--jupyter-kernel", "torch", "--gpus", "1", "--user", "--prefix=/p", "--min-free", "8G"]);
        assert_eq!(kernel_options(&typed), ["--gpus", "1", "--min-free", "8G"]);
        let typed = words(&["--jupyter-kernel=torch", "--prefix", "/p", "--exclusive"]);
        assert_eq!(kernel_options(&typed), ["--exclusive"]);
        assert!(
            valid_name("torch-2.4_gpu.1") && !valid_name("a b") && !valid_name("") && !valid_name("../x")
        );
    }
}
