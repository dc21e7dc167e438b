//! How the ROCm runtime turns `ROCR_VISIBLE_DEVICES` and `HIP_VISIBLE_DEVICES` into devices.
//!
//! The simulator's model of ROCm, kept apart from gpurun's own reading on purpose: the tests
//! check gpurun against it, so the two must not share code. From ROCm's "GPU isolation
//! techniques" page:
//!
//! - ROCr (the user-mode runtime under HIP) enumerates the GPUs whose device node it can open,
//!   in its own order (the KFD's), which `amd-smi list` shows as HIP_ID and which need not be
//!   AMD SMI's (the scenario's `hip_id`). `ROCR_VISIBLE_DEVICES` is "a list of device indices or UUIDs"
//!   (`0,GPU-DEADBEEFDEADBEEF`): the devices it keeps, in that order. Unset: every GPU; empty:
//!   none; enumeration stops at an entry that is out of range, unknown or a repeat.
//! - HIP then numbers what ROCr kept from 0, and `HIP_VISIBLE_DEVICES` ("device indices
//!   exposed to HIP applications") picks among those numbers; `CUDA_VISIBLE_DEVICES` "has the
//!   same effect" and is read when `HIP_VISIBLE_DEVICES` is unset. So the two variables set to
//!   the same physical index hide GPUs: `ROCR_VISIBLE_DEVICES=2 HIP_VISIBLE_DEVICES=2` is no GPU.

use crate::scenario::Scenario;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HipDevice {
    /// What the program calls it: `hipSetDevice(N)`, `cuda:N` in PyTorch on ROCm.
    pub ordinal: u32,
    /// Its AMD SMI processor index.
    pub smi_index: u32,
    /// AMD SMI's UUID (what the registry and the process list name it by).
    pub uuid: String,
}

/// The indices `list` names among `candidates`, by position or (`uuids`) by UUID, up to the
/// first entry that names nothing or a device already named.
fn pick(list: &str, candidates: &[u32], uuid_of: Option<&dyn Fn(u32) -> String>) -> Vec<u32> {
    let mut picked = Vec::new();
    if list.trim().is_empty() {
        return picked;
    }
    for entry in list.split(',').map(str::trim) {
        let by_position = entry.parse::<usize>().ok().and_then(|n| candidates.get(n).copied());
        let by_uuid = || {
            uuid_of.and_then(|uuid| candidates.iter().copied().find(|&c| uuid(c).eq_ignore_ascii_case(entry)))
        };
        match by_position.or_else(by_uuid) {
            Some(index) if !picked.contains(&index) => picked.push(index),
            _ => break,
        }
    }
    picked
}

pub fn visible_devices(
    scenario: &Scenario,
    rocr: Option<&str>,
    hip: Option<&str>,
    cuda: Option<&str>,
) -> Vec<HipDevice> {
    let mut enumerated: Vec<u32> =
        (0..scenario.gpus.len() as u32).filter(|&i| scenario.gpus[i as usize].accessible).collect();
    enumerated.sort_by_key(|&i| scenario.hip_id(i));
    let hip_uuid = |index: u32| scenario.gpus[index as usize].hip_uuid.clone();
    let kept = match rocr {
        None => enumerated,
        Some(list) => pick(list, &enumerated, Some(&hip_uuid)),
    };
    let shown = match hip.or(cuda) {
        None => kept,
        Some(list) => pick(list, &kept, None),
    };
    shown
        .into_iter()
        .enumerate()
        .map(|(ordinal, index)| HipDevice {
            ordinal: ordinal as u32,
            smi_index: index,
            uuid: scenario.gpus[index as usize].uuid.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Source;

    fn indices(devices: Vec<HipDevice>) -> Vec<u32> {
        devices.into_iter().map(|d| d.smi_index).collect()
    }

    #[test]
    fn rocr_keeps_then_hip_renumbers_from_zero() {
        let scenario = Source::Embedded.load().unwrap();
        assert_eq!(indices(visible_devices(&scenario, None, None, None)).len(), 8);
        let third = scenario.gpus[3].hip_uuid.clone();
        assert_eq!(indices(visible_devices(&scenario, Some(&format!("{third},5")), None, None)), [3, 5]);
        // The trap: the same physical index twice hides the GPU.
        assert_eq!(indices(visible_devices(&scenario, Some("2"), Some("2"), None)), Vec::<u32>::new());
        assert_eq!(indices(visible_devices(&scenario, Some("2,6"), Some("1"), None)), [6]);
        assert_eq!(indices(visible_devices(&scenario, Some("2,6"), None, Some("1"))), [6]);
        assert_eq!(indices(visible_devices(&scenario, Some("1,9,2"), None, None)), [1]);
        assert_eq!(indices(visible_devices(&scenario, Some(""), None, None)), Vec::<u32>::new());
    }
}
