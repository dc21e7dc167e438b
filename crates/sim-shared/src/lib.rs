//! What the two simulators share: `nvml-sim` (libnvidia-ml.so.1) and `amdsmi-sim`
//! (libamd_smi.so) list the processes their simulated programs (`sim-cuda`, `sim-hip`)
//! registered, through one registry, and read sizes in scenarios the same way.

pub mod registry;

use serde::Deserialize;

/// Bytes, as a number or as a string with a binary unit (`80GiB`, `512MiB`, `1.5GiB`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Bytes(bytes) => Ok(Size(bytes)),
            Raw::Text(text) => parse_size(&text).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `123`, `80GiB`, `1.5 TiB`: binary units only, so a scenario reads like `nvidia-smi`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        other => return Err(format!("size {text:?}: unit {other:?} is not one of B, KiB, MiB, GiB, TiB")),
    };
    let value: f64 = number.parse().map_err(|_| format!("size {text:?}: {number:?} is not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}
