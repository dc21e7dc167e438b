//! `--devices`/`--exclude` entries: NVML indices, GPU UUIDs and unique prefixes, PCI bus ids.

use std::fmt;

/// One entry of `--devices`/`--exclude`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeviceRef {
    Index(u32),
    /// A full UUID or a unique prefix, `GPU-` included.
    Uuid(String),
    /// Normalised `DDDDDDDD:BB:DD.F`, upper case.
    PciBusId(String),
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRef::Index(index) => write!(f, "{index}"),
            DeviceRef::Uuid(uuid) => f.write_str(uuid),
            DeviceRef::PciBusId(bus_id) => f.write_str(bus_id),
        }
    }
}

/// `0000:07:00.0`, `00000000:07:00.0`, `07:00.0` -> `00000000:07:00.0`.
pub(crate) fn normalize_pci_bus_id(text: &str) -> Option<String> {
    let (rest, function) = text.trim().rsplit_once('.')?;
    let mut parts: Vec<&str> = rest.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    let [domain, bus, device] = parts[..] else {
        return None;
    };
    let hex = |s: &str, max: u32| u32::from_str_radix(s, 16).ok().filter(|v| *v <= max && !s.is_empty());
    Some(format!(
        "{:08X}:{:02X}:{:02X}.{:X}",
        hex(domain, u32::MAX)?,
        hex(bus, 0xFF)?,
        hex(device, 0x1F)?,
        hex(function, 7)?
    ))
}

/// A `--devices`/`--exclude` list (one value to clap, so a newtype).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceList(pub Vec<DeviceRef>);

/// Parses a `--devices`/`--exclude` list: indices, UUIDs, unique UUID prefixes, PCI bus ids.
pub(crate) fn parse_device_list(text: &str) -> Result<DeviceList, String> {
    text.split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                Err(format!("{text:?} has an empty entry; expected a comma-separated list of GPU indices, UUIDs, UUID prefixes or PCI bus ids"))
            } else if entry.bytes().all(|b| b.is_ascii_digit()) {
                entry.parse().map(DeviceRef::Index).map_err(|_| format!("{entry:?} is not a GPU index"))
            } else if entry.contains(':') {
                normalize_pci_bus_id(entry)
                    .map(DeviceRef::PciBusId)
                    .ok_or_else(|| format!("{entry:?} is not a PCI bus id (like 0000:07:00.0)"))
            } else if entry.starts_with("MIG-") || entry.starts_with("GPU-") {
                Ok(DeviceRef::Uuid(entry.to_owned()))
            } else if entry.starts_with(|c: char| c.is_ascii_hexdigit())
                && entry.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
            {
                Ok(DeviceRef::Uuid(format!("GPU-{entry}")))
            } else {
                Err(format!("{entry:?} is not a GPU index, a GPU- or MIG- UUID or UUID prefix, or a PCI bus id"))
            }
        })
        .collect::<Result<_, _>>()
        .map(DeviceList)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PCI bus ids at and past their fields' ranges (issue 44): bus 0xFF, device 0x1F and
    /// function 7 are the last; one more is no bus id.
    #[test]
    fn pci_bus_ids_at_the_edges_of_their_fields() {
        assert_eq!(normalize_pci_bus_id("ff:1f.7").as_deref(), Some("00000000:FF:1F.7"));
        assert_eq!(normalize_pci_bus_id("ffffffff:00:00.0").as_deref(), Some("FFFFFFFF:00:00.0"));
        for bad in
            ["100:00.0", "00:20.0", "00:00.8", "1ffffffff:00:00.0", ":00.0", "00:00", "00:00.", "0:0:0:0.0"]
        {
            assert_eq!(normalize_pci_bus_id(bad), None, "{bad}");
        }
        assert!(parse_device_list("0000:100:00.0").unwrap_err().contains("is not a PCI bus id"));
    }
}
