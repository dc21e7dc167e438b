//! The NVLink fabric and confidential computing calls of the NVML C ABI (issue 37), as nvml.h
//! declares them: `nvmlDeviceGetGpuFabricInfo{,V}` from a GPU's `fabric` key (omitted: a PCIe
//! board or an older driver, NOT_SUPPORTED) and `nvmlSystemGetConfComputeState` /
//! `...GpusReadyState` from the top-level `confidential_computing` key (omitted: NOT_SUPPORTED).

#![allow(non_snake_case)]

use std::ffi::c_uint;
use std::mem::{offset_of, size_of};

use crate::abi::{device_call, put, system_call, Device};
use crate::abi::{
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED,
};
use crate::scenario::{self, FabricSpec, FABRIC_STATES, HEALTH_SUMMARIES, INCORRECT_CONFIGURATIONS};

/// `NVML_GPU_FABRIC_UUID_LEN`.
const FABRIC_UUID_LEN: usize = 16;

/// `nvmlGpuFabricInfo_t` (the unversioned call's).
#[repr(C)]
pub struct FabricInfoV1 {
    cluster_uuid: [u8; FABRIC_UUID_LEN],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
}

/// `nvmlGpuFabricInfo_v2_t`.
#[repr(C)]
pub struct FabricInfoV2 {
    version: c_uint,
    cluster_uuid: [u8; FABRIC_UUID_LEN],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
}

/// `nvmlGpuFabricInfo_v3_t` (`nvmlGpuFabricInfoV_t`).
#[repr(C)]
pub struct FabricInfoV3 {
    version: c_uint,
    cluster_uuid: [u8; FABRIC_UUID_LEN],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
    health_summary: u8,
}

/// `NVML_STRUCT_VERSION(GpuFabricInfo, 2)` and `3`.
const FABRIC_INFO_V2: c_uint = size_of::<FabricInfoV2>() as c_uint | (2 << 24);
const FABRIC_INFO_V3: c_uint = size_of::<FabricInfoV3>() as c_uint | (3 << 24);

/// `nvmlConfComputeSystemState_t`.
#[repr(C)]
pub struct ConfComputeSystemState {
    environment: c_uint,
    cc_feature: c_uint,
    dev_tools_mode: c_uint,
}

/// The health mask's fields: scenario key, shift, and nvml.h's name for it.
const HEALTH_FIELDS: &[(&str, u32, &str)] = &[
    ("degraded_bw", 0, "DEGRADED_BW"),
    ("route_recovery", 2, "ROUTE_RECOVERY"),
    ("route_unhealthy", 4, "ROUTE_UNHEALTHY"),
    ("access_timeout_recovery", 6, "ACCESS_TIMEOUT_RECOVERY"),
];

const SHIFT_INCORRECT_CONFIGURATION: u32 = 8;

/// The health mask the scenario's fabric describes: each yes/no field is TRUE (1) or FALSE (2),
/// NOT_SUPPORTED (0) where omitted.
fn health_mask(spec: &FabricSpec) -> u32 {
    let flag = |value: Option<bool>| match value {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    let values = [spec.degraded_bw, spec.route_recovery, spec.route_unhealthy, spec.access_timeout_recovery];
    let mut mask = 0;
    for ((_, shift, _), value) in HEALTH_FIELDS.iter().zip(values) {
        mask |= flag(value) << shift;
    }
    let incorrect = spec
        .incorrect_configuration
        .as_deref()
        .and_then(|name| INCORRECT_CONFIGURATIONS.iter().find(|(known, ..)| *known == name))
        .map_or(0, |(_, code, _)| *code);
    mask | incorrect << SHIFT_INCORRECT_CONFIGURATION
}

/// The fabric's answer: (cluster UUID bytes, status, clique, state, health mask, summary).
fn answer(spec: &FabricSpec) -> ([u8; FABRIC_UUID_LEN], u32, u32, u8, u32, u8) {
    let mut uuid = [0u8; FABRIC_UUID_LEN];
    let hex: String = spec.cluster_uuid.chars().filter(char::is_ascii_hexdigit).collect();
    for (at, byte) in uuid.iter_mut().enumerate() {
        *byte = hex.get(at * 2..at * 2 + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()).unwrap_or(0);
    }
    let status = scenario::error_code(&spec.status).unwrap_or(0);
    let state = FABRIC_STATES.iter().find(|(name, _)| *name == spec.state).map_or(3, |(_, code)| *code);
    let summary =
        HEALTH_SUMMARIES.iter().find(|(name, _)| Some(*name) == spec.summary.as_deref()).map_or(0, |s| s.1);
    (uuid, status, spec.clique_id, state, health_mask(spec), summary)
}

/// Zeroes the padding after the one-byte `state` (and `health_summary`) that `put` copied from
/// a Rust value, where it is whatever the stack held. nvml.h's `nvmlGpuFabricState_t` is an
/// unsigned char; nvidia-ml-py reads it as an unsigned int, so the bytes after it must be
/// what a caller's zeroed struct holds, as the real driver leaves them.
///
/// # Safety
/// `out` must be valid for writes of `size_of::<T>()` bytes.
unsafe fn clear_padding<T>(out: *mut T, padding: &[(usize, usize)]) {
    for &(from, to) in padding {
        // SAFETY: within the struct, by the caller's contract.
        unsafe { out.cast::<u8>().add(from).write_bytes(0, to - from) };
    }
}

/// nvml.h: "For Hopper or newer fully supported devices"; NOT_SUPPORTED "if device doesn't
/// support gpu fabric".
///
/// # Safety
/// `info` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(device: Device, info: *mut FabricInfoV1) -> u32 {
    device_call(device, "nvmlDeviceGetGpuFabricInfo", |state, index| {
        let Some(spec) = &state.scenario.gpus[index as usize].fabric else { return NVML_ERROR_NOT_SUPPORTED };
        let (cluster_uuid, status, clique_id, fabric_state, _, _) = answer(spec);
        // SAFETY: forwarded caller contract.
        let code =
            unsafe { put(info, FabricInfoV1 { cluster_uuid, status, clique_id, state: fabric_state }) };
        if code == 0 {
            // SAFETY: as above: the caller's struct, written whole just now.
            unsafe {
                clear_padding(info, &[(offset_of!(FabricInfoV1, state) + 1, size_of::<FabricInfoV1>())])
            };
        }
        code
    })
}

/// The versioned call: the caller sets `version` to `nvmlGpuFabricInfo_v2` or `_v3` and gets
/// that layout; any other version is ARGUMENT_VERSION_MISMATCH.
///
/// # Safety
/// `info` must be null or valid for reads and writes of the layout its `version` names.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(device: Device, info: *mut FabricInfoV3) -> u32 {
    if info.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null; every layout starts with the version.
    let version = unsafe { info.cast::<c_uint>().read() };
    device_call(device, "nvmlDeviceGetGpuFabricInfoV", |state, index| {
        let Some(spec) = &state.scenario.gpus[index as usize].fabric else { return NVML_ERROR_NOT_SUPPORTED };
        let (cluster_uuid, status, clique_id, fabric_state, health_mask, health_summary) = answer(spec);
        let code = match version {
            // SAFETY: the caller's buffer holds the layout its version names.
            FABRIC_INFO_V3 => unsafe {
                put(
                    info,
                    FabricInfoV3 {
                        version,
                        cluster_uuid,
                        status,
                        clique_id,
                        state: fabric_state,
                        health_mask,
                        health_summary,
                    },
                )
            },
            // SAFETY: as above, the v2 layout.
            FABRIC_INFO_V2 => unsafe {
                put(
                    info.cast::<FabricInfoV2>(),
                    FabricInfoV2 {
                        version,
                        cluster_uuid,
                        status,
                        clique_id,
                        state: fabric_state,
                        health_mask,
                    },
                )
            },
            _ => NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        };
        let padding: &[(usize, usize)] = match version {
            FABRIC_INFO_V3 => &[
                (offset_of!(FabricInfoV3, state) + 1, offset_of!(FabricInfoV3, health_mask)),
                (offset_of!(FabricInfoV3, health_summary) + 1, size_of::<FabricInfoV3>()),
            ],
            _ => &[(offset_of!(FabricInfoV2, state) + 1, offset_of!(FabricInfoV2, health_mask))],
        };
        if code == 0 {
            // SAFETY: the caller's struct of the layout its version names, written whole just now.
            unsafe { clear_padding(info, padding) };
        }
        code
    })
}

/// # Safety
/// `state` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeState(out: *mut ConfComputeSystemState) -> u32 {
    system_call("nvmlSystemGetConfComputeState", |state| {
        let Some(cc) = &state.scenario.confidential_computing else { return NVML_ERROR_NOT_SUPPORTED };
        let value = ConfComputeSystemState {
            environment: if cc.feature == "enabled" { 2 } else { 0 },
            cc_feature: u32::from(cc.feature == "enabled"),
            dev_tools_mode: u32::from(cc.dev_tools),
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(out, value) }
    })
}

/// `NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE` once the GPUs are ready (attested, set ready by the
/// admin), else FALSE.
///
/// # Safety
/// `accepting` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeGpusReadyState(accepting: *mut c_uint) -> u32 {
    system_call("nvmlSystemGetConfComputeGpusReadyState", |state| {
        let Some(cc) = &state.scenario.confidential_computing else { return NVML_ERROR_NOT_SUPPORTED };
        // SAFETY: forwarded caller contract.
        unsafe { put(accepting, u32::from(cc.ready)) }
    })
}

/// What the simulator takes nvml.h to say of these calls.
pub(crate) fn facts() -> Vec<(String, u64)> {
    let mut facts: Vec<(String, u64)> = vec![
        ("NVML_GPU_FABRIC_UUID_LEN".into(), FABRIC_UUID_LEN as u64),
        ("sizeof(nvmlGpuFabricInfo_t)".into(), size_of::<FabricInfoV1>() as u64),
        ("offsetof(nvmlGpuFabricInfo_t, status)".into(), offset_of!(FabricInfoV1, status) as u64),
        ("offsetof(nvmlGpuFabricInfo_t, cliqueId)".into(), offset_of!(FabricInfoV1, clique_id) as u64),
        ("offsetof(nvmlGpuFabricInfo_t, state)".into(), offset_of!(FabricInfoV1, state) as u64),
        ("sizeof(nvmlGpuFabricInfo_v2_t)".into(), size_of::<FabricInfoV2>() as u64),
        (
            "offsetof(nvmlGpuFabricInfo_v2_t, clusterUuid)".into(),
            offset_of!(FabricInfoV2, cluster_uuid) as u64,
        ),
        ("offsetof(nvmlGpuFabricInfo_v2_t, healthMask)".into(), offset_of!(FabricInfoV2, health_mask) as u64),
        ("sizeof(nvmlGpuFabricInfo_v3_t)".into(), size_of::<FabricInfoV3>() as u64),
        ("sizeof(nvmlGpuFabricInfoV_t)".into(), size_of::<FabricInfoV3>() as u64),
        ("offsetof(nvmlGpuFabricInfo_v3_t, state)".into(), offset_of!(FabricInfoV3, state) as u64),
        ("offsetof(nvmlGpuFabricInfo_v3_t, healthMask)".into(), offset_of!(FabricInfoV3, health_mask) as u64),
        (
            "offsetof(nvmlGpuFabricInfo_v3_t, healthSummary)".into(),
            offset_of!(FabricInfoV3, health_summary) as u64,
        ),
        ("nvmlGpuFabricInfo_v2".into(), u64::from(FABRIC_INFO_V2)),
        ("nvmlGpuFabricInfo_v3".into(), u64::from(FABRIC_INFO_V3)),
        ("sizeof(nvmlConfComputeSystemState_t)".into(), size_of::<ConfComputeSystemState>() as u64),
        (
            "offsetof(nvmlConfComputeSystemState_t, ccFeature)".into(),
            offset_of!(ConfComputeSystemState, cc_feature) as u64,
        ),
        ("NVML_CC_SYSTEM_FEATURE_ENABLED".into(), 1),
        ("NVML_CC_SYSTEM_ENVIRONMENT_PROD".into(), 2),
        ("NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE".into(), 1),
        ("NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE".into(), 0),
        (
            "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION".into(),
            u64::from(SHIFT_INCORRECT_CONFIGURATION),
        ),
    ];
    for (name, code) in FABRIC_STATES {
        facts.push((
            format!("NVML_GPU_FABRIC_STATE_{}", name.to_uppercase().replace('-', "_")),
            u64::from(*code),
        ));
    }
    for (_, shift, name) in HEALTH_FIELDS {
        facts.push((format!("NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}"), u64::from(*shift)));
    }
    for (_, code, name) in INCORRECT_CONFIGURATIONS {
        facts.push((format!("NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_{name}"), u64::from(*code)));
    }
    for (name, code) in HEALTH_SUMMARIES {
        facts.push((
            format!("NVML_GPU_FABRIC_HEALTH_SUMMARY_{}", name.to_uppercase().replace('-', "_")),
            u64::from(*code),
        ));
    }
    facts
}
