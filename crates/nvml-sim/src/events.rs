//! NVML events (nvml.h "Event Handling Methods"): event sets, registration for critical Xid
//! errors, and waiting, from the scenario's `[[xid]]` entries. Only Xid events are simulated.

#![allow(non_snake_case)]

use std::ffi::{c_uint, c_ulonglong, c_void};
use std::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

use crate::abi::{
    device_call, put, system_call, Device, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
};
use crate::state::{with_state, EventSet};

/// `nvmlEventTypeXidCriticalError`, the one type simulated; `NVML_ERROR_TIMEOUT`.
const EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 0x8;
const NVML_ERROR_TIMEOUT: u32 = 10;

/// `nvmlEventData_t`.
#[repr(C)]
pub struct EventData {
    device: Device,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// An event set's handle: its position + 1 (never null).
type Set = *mut c_void;

fn position(set: Set) -> usize {
    (set as usize).wrapping_sub(1)
}

/// nvml.h: "Create an empty set of events." "For Fermi or newer fully supported devices."
///
/// # Safety
/// `set` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut Set) -> u32 {
    system_call("nvmlEventSetCreate", |state| {
        state.event_sets.push(Some(EventSet::default()));
        // SAFETY: forwarded caller contract.
        unsafe { put(set, state.event_sets.len() as Set) }
    })
}

/// nvml.h: "Returns information about events supported on device": Xid critical errors.
///
/// # Safety
/// `types` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(device: Device, types: *mut c_ulonglong) -> u32 {
    // SAFETY: forwarded caller contract.
    device_call(device, "nvmlDeviceGetSupportedEventTypes", |_, _| unsafe {
        put(types, EVENT_TYPE_XID_CRITICAL_ERROR)
    })
}

/// nvml.h: "Starts recording of events on a specified devices and add the events to specified
/// nvmlEventSet_t"; a type the device does not support: NOT_SUPPORTED.
#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(device: Device, types: c_ulonglong, set: Set) -> u32 {
    device_call(device, "nvmlDeviceRegisterEvents", |state, gpu| {
        if types & !EVENT_TYPE_XID_CRITICAL_ERROR != 0 {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let Some(Some(events)) = state.event_sets.get_mut(position(set)) else {
            return NVML_ERROR_INVALID_ARGUMENT;
        };
        if types & EVENT_TYPE_XID_CRITICAL_ERROR != 0 {
            events.registered.push((gpu, Instant::now()));
        }
        NVML_SUCCESS
    })
}

/// The next Xid due for `set`, marked delivered.
fn next_due(set: Set) -> Result<Option<EventData>, u32> {
    with_state(|state| {
        if state.init_count == 0 {
            return Err(crate::abi::NVML_ERROR_UNINITIALIZED);
        }
        let Some(Some(events)) = state.event_sets.get_mut(position(set)) else {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        };
        for xid in &state.scenario.xids {
            let key = (xid.gpu, xid.code, xid.after_ms);
            let Some((_, since)) = events.registered.iter().find(|(gpu, _)| *gpu == xid.gpu) else {
                continue;
            };
            if events.delivered.contains(&key) || since.elapsed() < Duration::from_millis(xid.after_ms) {
                continue;
            }
            events.delivered.insert(key);
            return Ok(Some(EventData {
                device: (xid.gpu as usize + 1) as Device,
                event_type: EVENT_TYPE_XID_CRITICAL_ERROR,
                event_data: xid.code,
                gpu_instance_id: u32::MAX,
                compute_instance_id: u32::MAX,
            }));
        }
        Ok(None)
    })
}

/// nvml.h: "Waits on events and delivers events"; "If some events are ready to be delivered at
/// the time of the call, function returns immediately. If there are no events ready to be
/// delivered, function sleeps till event arrives but not longer than specified timeout";
/// NVML_ERROR_TIMEOUT "if no event arrived in specified timeout or interrupt arrived".
///
/// # Safety
/// `data` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(set: Set, data: *mut EventData, timeout_ms: c_uint) -> u32 {
    crate::abi::misbehave("nvmlEventSetWait", None);
    if data.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let until = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        match next_due(set) {
            Err(error) => return error,
            // SAFETY: forwarded caller contract.
            Ok(Some(event)) => return unsafe { put(data, event) },
            Ok(None) if Instant::now() >= until => return NVML_ERROR_TIMEOUT,
            // The lock is not held while waiting: other threads' calls go on.
            Ok(None) => std::thread::sleep(Duration::from_millis(5).min(until - Instant::now())),
        }
    }
}

/// nvml.h: "Releases events in the set."
#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: Set) -> u32 {
    system_call("nvmlEventSetFree", |state| match state.event_sets.get_mut(position(set)) {
        Some(slot @ Some(_)) => {
            *slot = None;
            NVML_SUCCESS
        }
        _ => NVML_ERROR_INVALID_ARGUMENT,
    })
}

pub(crate) fn facts() -> Vec<(String, u64)> {
    vec![
        ("sizeof(nvmlEventData_t)".into(), size_of::<EventData>() as u64),
        ("offsetof(nvmlEventData_t, device)".into(), offset_of!(EventData, device) as u64),
        ("offsetof(nvmlEventData_t, eventType)".into(), offset_of!(EventData, event_type) as u64),
        ("offsetof(nvmlEventData_t, eventData)".into(), offset_of!(EventData, event_data) as u64),
        ("offsetof(nvmlEventData_t, gpuInstanceId)".into(), offset_of!(EventData, gpu_instance_id) as u64),
        (
            "offsetof(nvmlEventData_t, computeInstanceId)".into(),
            offset_of!(EventData, compute_instance_id) as u64,
        ),
        ("nvmlEventTypeXidCriticalError".into(), EVENT_TYPE_XID_CRITICAL_ERROR),
        ("NVML_ERROR_TIMEOUT".into(), u64::from(NVML_ERROR_TIMEOUT)),
    ]
}
