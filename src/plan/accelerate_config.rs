//! accelerate's config file, read as accelerate reads it (`commands/config/config_args.py`
//! `load_config_from_file`): `--config_file`, else `default_config.yaml` under
//! `$HF_HOME/accelerate` (or `$XDG_CACHE_HOME/huggingface/accelerate`, or
//! `~/.cache/huggingface/accelerate`), else `default_config.json` there when only it exists;
//! JSON when the name ends in `.json`, YAML otherwise, UTF-8 either way. What gpurun needs of
//! it is three top-level keys: `gpu_ids`, `num_processes` and `num_machines`.

use std::path::{Path, PathBuf};

/// The most of a config file gpurun reads (one `accelerate config` writes is a few hundred
/// bytes); a larger one is refused, named, rather than skipped.
const MOST: u64 = 1 << 20;

/// What accelerate's config file says about GPUs and machines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct AccelerateConfig {
    pub(super) path: PathBuf,
    pub(super) gpu_ids: Option<String>,
    pub(super) num_processes: Option<u64>,
    pub(super) num_machines: Option<u64>,
}

/// The config file that applies, read: `Ok(None)` where there is none (accelerate then runs on
/// its defaults); an error naming the file where accelerate would read it and gpurun cannot
/// (too large, not UTF-8, not JSON or YAML it can read the keys from), since its
/// `num_processes` and `num_machines` could not be checked.
pub(super) fn read(given: Option<PathBuf>) -> Result<Option<AccelerateConfig>, String> {
    let Some(path) = given.filter(|path| path.is_file()).or_else(default_file) else { return Ok(None) };
    let Some(bytes) = small_file(&path)? else { return Ok(None) };
    let shown = path.display().to_string();
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("accelerate launch reads {shown}, which is not UTF-8 text: fix or remove it"))?;
    let json = path.extension().is_some_and(|extension| extension == "json");
    let mut config = match json {
        true => from_json(&text).map_err(|why| format!("accelerate launch reads {shown}: {why}"))?,
        false => from_yaml(&text),
    };
    config.path = path;
    Ok(Some(config))
}

/// accelerate's default: the YAML file, or the JSON one where only it exists.
fn default_file() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    let home = var("HF_HOME").or_else(|| {
        let cache = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|home| home.join(".cache")))?;
        Some(cache.join("huggingface"))
    })?;
    let yaml = home.join("accelerate/default_config.yaml");
    let json = home.join("accelerate/default_config.json");
    match yaml.is_file() || !json.is_file() {
        true => yaml.is_file().then_some(yaml),
        false => Some(json),
    }
}

/// The file's bytes (`stdio::read_small_bytes`: `None` where it is not a regular file, as
/// accelerate's `os.path.isfile`, or cannot be read); an error past `MOST`.
fn small_file(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let Some(bytes) = crate::process::stdio::read_small_bytes(path, MOST + 1) else { return Ok(None) };
    if bytes.len() as u64 > MOST {
        return Err(format!(
            "accelerate launch reads {}, which is over 1 MiB: gpurun cannot check its num_processes and \
             num_machines; fix it, or pass --config_file with the one you mean",
            path.display()
        ));
    }
    Ok(Some(bytes))
}

/// The three keys of a JSON config (`accelerate config` can write one).
fn from_json(text: &str) -> Result<AccelerateConfig, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let top = value.as_object().ok_or("not a JSON object")?;
    let number = |key: &str| top.get(key).and_then(serde_json::Value::as_u64);
    let gpu_ids = match top.get("gpu_ids") {
        Some(serde_json::Value::String(ids)) => Some(ids.clone()),
        Some(serde_json::Value::Number(id)) => Some(id.to_string()),
        _ => None,
    };
    Ok(AccelerateConfig {
        gpu_ids,
        num_processes: number("num_processes"),
        num_machines: number("num_machines"),
        ..AccelerateConfig::default()
    })
}

/// The three keys of a YAML config: the flat top-level mapping `accelerate config` writes.
fn from_yaml(text: &str) -> AccelerateConfig {
    let mut config = AccelerateConfig::default();
    for line in text.lines().filter(|line| !line.starts_with([' ', '\t', '#'])) {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.split(" #").next().unwrap_or("").trim().trim_matches(|c| c == '"' || c == '\'');
        match key.trim() {
            "gpu_ids" if !value.is_empty() && value != "null" => config.gpu_ids = Some(value.to_owned()),
            "num_processes" => config.num_processes = value.parse().ok(),
            "num_machines" => config.num_machines = value.parse().ok(),
            _ => {}
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accelerate_config_file_is_read_flat() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "compute_environment: LOCAL_MACHINE\ngpu_ids: 0,1\nnum_processes: 8\nfsdp_config:\n  num_machines: 4\n",
        )
        .unwrap();
        let config = read(Some(path.clone())).unwrap().unwrap();
        assert_eq!(config.gpu_ids.as_deref(), Some("0,1"));
        assert_eq!(config.num_processes, Some(8));
        assert_eq!(config.num_machines, None, "a nested key is not the top level's");
    }

    #[test]
    fn json_large_and_non_utf8_files_are_read_or_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("c.json");
        std::fs::write(&json, r#"{"num_machines": 2, "num_processes": 16, "gpu_ids": "all"}"#).unwrap();
        let config = read(Some(json.clone())).unwrap().unwrap();
        assert_eq!(
            (config.num_machines, config.num_processes, config.gpu_ids.as_deref()),
            (Some(2), Some(16), Some("all"))
        );
        std::fs::write(&json, "num_machines: 2").unwrap();
        assert!(read(Some(json.clone())).unwrap_err().contains("c.json: not JSON"));
        let large = dir.path().join("large.yaml");
        std::fs::write(&large, format!("num_machines: 2\n{}", "# padding\n".repeat(120_000))).unwrap();
        assert!(read(Some(large)).unwrap_err().contains("large.yaml, which is over 1 MiB"));
        let latin = dir.path().join("latin.yaml");
        std::fs::write(&latin, b"# caf\xe9\nnum_machines: 2\n").unwrap();
        assert!(read(Some(latin)).unwrap_err().contains("latin.yaml, which is not UTF-8"));
    }
}
