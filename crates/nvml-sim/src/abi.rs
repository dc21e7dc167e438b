//! The NVML C ABI, as declared in NVIDIA's `nvml.h`: the functions `nvml-wrapper` 0.13 and
//! `nvidia-ml-py` call, with the same symbol versions and struct layouts.
//!
//! Every entry point checks initialisation, the handle and the pointers it was given, then asks
//! the scenario for an injected error before answering.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong, c_void, CStr};
use std::time::Duration;

use crate::scenario;
use crate::state::{with_state, List, ListedProcess, State};

pub const NVML_SUCCESS: u32 = 0;
pub const NVML_ERROR_UNINITIALIZED: u32 = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: u32 = 2;
pub const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
pub const NVML_ERROR_NO_PERMISSION: u32 = 4;
pub const NVML_ERROR_NOT_FOUND: u32 = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: u32 = 25;
pub const NVML_ERROR_UNKNOWN: u32 = 999;

/// `NVML_VALUE_NOT_AVAILABLE` for unsigned long long fields.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// `NVML_TEMPERATURE_GPU`, the only sensor simulated.
const TEMPERATURE_GPU: c_uint = 0;
/// `NVML_P2P_CAPS_INDEX_NVLINK`, `NVML_P2P_STATUS_OK`, `NVML_P2P_STATUS_NOT_SUPPORTED`.
const P2P_CAPS_INDEX_NVLINK: c_uint = 2;
const P2P_STATUS_OK: c_uint = 0;
const P2P_STATUS_NOT_SUPPORTED: c_uint = 5;

pub(crate) type Device = *mut c_void;

#[repr(C)]
pub(crate) struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

#[repr(C)]
pub struct MemoryV1 {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2` = `NVML_STRUCT_VERSION(Memory, 2)`.
const MEMORY_V2_VERSION: u32 = std::mem::size_of::<MemoryV2>() as u32 | (2 << 24);

#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
pub struct ProcessInfoV1 {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
}

/// What drivers 535.43 to 535.86 wrote for the `_v3` call: `nvmlProcessInfo_v2_t` plus
/// `usedGpuCcProtectedMemory`, 32 bytes where callers allocated 24.
#[repr(C)]
pub struct ProcessInfo535 {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
    used_gpu_cc_protected_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t`, which nvml.h also uses for the `_v3` call.
#[repr(C)]
pub struct ProcessInfoV2 {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

fn handle_for(index: usize) -> Device {
    // Handles are opaque to callers; index + 1 keeps them non-null.
    (index + 1) as Device
}

/// `[[hang]]` and `[[crash]]`: a hanging call sleeps outside the state lock (other threads'
/// calls go on, as with a real driver stuck on one GPU); a crashing one faults for real.
pub(crate) fn misbehave(call: &str, gpu: Option<u32>) {
    log_call(call, gpu);
    let (hang, crash, latency) = with_state(|state| {
        // A call's first time on a GPU in this process is the dear one (`latency.rs`).
        let first = state.asked.insert((call.to_owned(), gpu));
        Ok((state.hang(call, gpu), state.crashes(call, gpu), state.scenario.latency.of(call, first)))
    })
    .unwrap_or((None, false, 0.0));
    if latency > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(latency / 1000.0));
    }
    if crash {
        fault();
    }
    match hang {
        None => {}
        Some(Some(duration)) => std::thread::sleep(duration),
        Some(None) => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

/// `NVML_SIM_CALL_LOG=<file>`: each call is appended to it as `<pid> <call> <gpu or ->`, so a
/// test can count what its caller asked (one short `O_APPEND` write per call: lines of several
/// processes do not mix).
fn log_call(call: &str, gpu: Option<u32>) {
    use std::io::Write;
    static LOG: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let log = LOG.get_or_init(|| {
        let path = std::env::var_os("NVML_SIM_CALL_LOG").filter(|path| !path.is_empty())?;
        std::fs::OpenOptions::new().create(true).append(true).open(path).ok()
    });
    if let Some(mut file) = log.as_ref() {
        let gpu = gpu.map_or("-".to_owned(), |gpu| gpu.to_string());
        let _ = file.write_all(format!("{} {call} {gpu}\n", std::process::id()).as_bytes());
    }
}

/// A real memory fault: a read of a page mapped without access. The kernel delivers SIGSEGV
/// to this thread whatever its signal mask, as for any bug in a driver library.
fn fault() -> ! {
    // SAFETY: mmap of one anonymous page; reading it faults (PROT_NONE), which is the point.
    unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        std::ptr::read_volatile(page.cast::<u8>());
    }
    std::process::abort()
}

/// Runs `body` for an initialised library and a valid device handle.
pub(crate) fn device_call(device: Device, call: &str, body: impl FnOnce(&mut State, u32) -> u32) -> u32 {
    misbehave(call, Some((device as usize).wrapping_sub(1) as u32));
    let result = with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        let index = (device as usize).wrapping_sub(1);
        if device.is_null() || index >= state.scenario.gpus.len() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let index = index as u32;
        if let Some(error) = state.injected(call, Some(index)) {
            return Err(error);
        }
        Ok(body(state, index))
    });
    result.unwrap_or_else(|error| error)
}

/// MIG device handles lie above every GPU's (index + 1): this, plus the device's position in
/// the scenario's `[[mig]]` list, plus one.
const MIG_HANDLES: usize = 1 << 16;

fn mig_handle(position: usize) -> Device {
    (MIG_HANDLES + position + 1) as Device
}

/// What a handle stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Gpu(u32),
    /// Position in the scenario's `[[mig]]` list.
    Mig(usize),
}

fn target_of(state: &State, device: Device) -> Option<Target> {
    let raw = device as usize;
    if raw > MIG_HANDLES {
        let position = raw - MIG_HANDLES - 1;
        (position < state.scenario.migs.len()).then_some(Target::Mig(position))
    } else {
        let index = raw.wrapping_sub(1);
        (raw != 0 && index < state.scenario.gpus.len()).then_some(Target::Gpu(index as u32))
    }
}

/// The physical GPU a target is (or is part of).
fn parent_of(state: &State, target: Target) -> u32 {
    match target {
        Target::Gpu(index) => index,
        Target::Mig(position) => state.scenario.migs[position].gpu,
    }
}

/// As `device_call`, for the calls a MIG device handle answers too. A MIG device's injected
/// errors and hangs are its parent GPU's.
fn any_device_call(device: Device, call: &str, body: impl FnOnce(&mut State, Target) -> u32) -> u32 {
    let parent = with_state(|state| Ok(target_of(state, device).map(|t| parent_of(state, t)))).ok().flatten();
    misbehave(call, parent);
    let result = with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        let Some(target) = target_of(state, device) else { return Err(NVML_ERROR_INVALID_ARGUMENT) };
        if let Some(error) = state.injected(call, Some(parent_of(state, target))) {
            return Err(error);
        }
        Ok(body(state, target))
    });
    result.unwrap_or_else(|error| error)
}

pub(crate) fn system_call(call: &str, body: impl FnOnce(&mut State) -> u32) -> u32 {
    misbehave(call, None);
    let result = with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        if let Some(error) = state.injected(call, None) {
            return Err(error);
        }
        Ok(body(state))
    });
    result.unwrap_or_else(|error| error)
}

/// Copies `text` and its NUL into a caller's buffer of `length` bytes.
///
/// # Safety
/// `buffer` must be null or valid for `length` bytes of writes.
pub(crate) unsafe fn write_string(text: &str, buffer: *mut c_char, length: c_uint) -> u32 {
    if buffer.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if text.len() + 1 > length as usize {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller gave `length` writable bytes and we write text.len() + 1 <= length.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast::<u8>(), text.len());
        *buffer.add(text.len()) = 0;
    }
    NVML_SUCCESS
}

/// Writes `value` through `out`, or answers INVALID_ARGUMENT for a null pointer.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> u32 {
    if out.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and, by the caller's contract, valid for writes.
    unsafe { out.write(value) };
    NVML_SUCCESS
}

/// The thread of `helper_thread = true`, started once.
static HELPER_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn init(flags: c_uint) -> u32 {
    let _ = flags;
    misbehave("nvmlInit", None);
    let result = with_state(|state| {
        if let Some(name) = &state.scenario.init.error {
            return Err(scenario::error_code(name).unwrap_or(NVML_ERROR_UNKNOWN));
        }
        let delay = state.scenario.init.delay_ms;
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        state.init_count += 1;
        if state.scenario.helper_thread && !HELPER_STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // Returns once the thread runs (and so carries its name), as a library would.
            let (started, running) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new().name("nvml-sim-helper".to_owned()).spawn(move || {
                let _ = started.send(());
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            });
            if spawned.is_ok() {
                let _ = running.recv();
            }
        }
        Ok(NVML_SUCCESS)
    });
    result.unwrap_or_else(|error| error)
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    init(0)
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> u32 {
    init(0)
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> u32 {
    init(flags)
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        state.init_count -= 1;
        Ok(NVML_SUCCESS)
    })
    .unwrap_or_else(|error| error)
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    let text: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        25 => c"Argument version mismatch",
        27 => c"Not Ready",
        28 => c"GPU not found",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

/// # Safety
/// `version` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlSystemGetDriverVersion", |state| unsafe {
        write_string(&state.scenario.driver_version, version, length)
    })
}

/// # Safety
/// `version` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlSystemGetNVMLVersion", |state| unsafe {
        let major = state.scenario.cuda_driver_version / 1000;
        write_string(&format!("{major}.{}", state.scenario.driver_version), version, length)
    })
}

/// The name of a process NVML lists (nvml.h: cropped to `length`; NOT_FOUND for a process that
/// does not exist). The driver knows every process's name whatever /proc shows the caller
/// (hidepid, another PID namespace): a scenario process's `name`, else a registered process's
/// program (argv[0]) as this simulator reads it.
///
/// # Safety
/// `name` must be null or valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(pid: c_uint, name: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlSystemGetProcessName", |state| unsafe {
        if name.is_null() || length == 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let Some(text) = state.process_name(pid) else { return NVML_ERROR_NOT_FOUND };
        let mut end = text.len().min(length as usize - 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write_string(&text[..end], name, length)
    })
}

/// # Safety
/// `cuda_version` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(cuda_version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlSystemGetCudaDriverVersion", |state| unsafe {
        put(cuda_version, state.scenario.cuda_driver_version)
    })
}

/// # Safety
/// `cuda_version` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(cuda_version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlSystemGetCudaDriverVersion(cuda_version) }
}

/// # Safety
/// `count` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    system_call("nvmlDeviceGetCount", |state| unsafe { put(count, state.scenario.gpus.len() as c_uint) })
}

/// # Safety
/// `count` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

/// # Safety
/// `device` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Device) -> u32 {
    misbehave("nvmlDeviceGetHandleByIndex", Some(index));
    let result = with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        let Some(gpu) = state.scenario.gpus.get(index as usize) else {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        };
        if !gpu.accessible {
            return Err(NVML_ERROR_NO_PERMISSION);
        }
        if let Some(error) = state.injected("nvmlDeviceGetHandleByIndex", Some(index)) {
            return Err(error);
        }
        // SAFETY: forwarded caller contract.
        Ok(unsafe { put(device, handle_for(index as usize)) })
    });
    result.unwrap_or_else(|error| error)
}

/// # Safety
/// `device` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut Device) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// Finds a device by a string key (UUID, PCI bus id) for the `GetHandleBy*` calls.
///
/// # Safety
/// `key` must be null or a NUL-terminated string; `device` null or valid for a write.
unsafe fn handle_by(
    key: *const c_char,
    device: *mut Device,
    call: &str,
    matches: impl Fn(&scenario::GpuSpec, &str) -> bool,
) -> u32 {
    if key.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: caller passes a NUL-terminated string.
    let key = unsafe { CStr::from_ptr(key) }.to_string_lossy().into_owned();
    let result = with_state(|state| {
        if state.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        let Some(index) = state.scenario.gpus.iter().position(|gpu| matches(gpu, &key)) else {
            return Err(NVML_ERROR_NOT_FOUND);
        };
        if !state.scenario.gpus[index].accessible {
            return Err(NVML_ERROR_NO_PERMISSION);
        }
        if let Some(error) = state.injected(call, Some(index as u32)) {
            return Err(error);
        }
        // SAFETY: forwarded caller contract.
        Ok(unsafe { put(device, handle_for(index)) })
    });
    result.unwrap_or_else(|error| error)
}

/// A `MIG-` UUID gives the MIG device's handle, as the real library does.
///
/// # Safety
/// `uuid` must be a NUL-terminated string; `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut Device) -> u32 {
    if !uuid.is_null() {
        // SAFETY: caller passes a NUL-terminated string.
        let key = unsafe { CStr::from_ptr(uuid) }.to_string_lossy().into_owned();
        let mig = with_state(|state| {
            if state.init_count == 0 {
                return Err(NVML_ERROR_UNINITIALIZED);
            }
            Ok(state.scenario.migs.iter().position(|mig| mig.uuid == key))
        });
        match mig {
            // SAFETY: forwarded caller contract.
            Ok(Some(position)) => return unsafe { put(device, mig_handle(position)) },
            Ok(None) => {}
            Err(error) => return error,
        }
    }
    // SAFETY: forwarded caller contract.
    unsafe { handle_by(uuid, device, "nvmlDeviceGetHandleByUUID", |gpu, key| gpu.uuid == key) }
}

/// # Safety
/// `count` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: Device, count: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetMaxMigDeviceCount", |state, gpu| {
        match state.scenario.gpus[gpu as usize].mig_mode {
            // SAFETY: forwarded caller contract.
            Some(_) => unsafe { put(count, scenario::MAX_MIG_DEVICES) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `mig` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: Device,
    index: c_uint,
    mig: *mut Device,
) -> u32 {
    device_call(device, "nvmlDeviceGetMigDeviceHandleByIndex", |state, gpu| {
        if state.scenario.gpus[gpu as usize].mig_mode.is_none() {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let position =
            state.scenario.migs.iter().enumerate().filter(|(_, m)| m.gpu == gpu).nth(index as usize);
        match position {
            // SAFETY: forwarded caller contract.
            Some((position, _)) => unsafe { put(mig, mig_handle(position)) },
            None => NVML_ERROR_NOT_FOUND,
        }
    })
}

/// # Safety
/// `is_mig` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: Device, is_mig: *mut c_uint) -> u32 {
    any_device_call(device, "nvmlDeviceIsMigDeviceHandle", |_, target| {
        // SAFETY: forwarded caller contract.
        unsafe { put(is_mig, c_uint::from(matches!(target, Target::Mig(_)))) }
    })
}

/// # Safety
/// `parent` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: Device,
    parent: *mut Device,
) -> u32 {
    any_device_call(mig, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", |state, target| match target {
        // SAFETY: forwarded caller contract.
        Target::Mig(position) => unsafe {
            put(parent, handle_for(state.scenario.migs[position].gpu as usize))
        },
        Target::Gpu(_) => NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// # Safety
/// `id` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: Device, id: *mut c_uint) -> u32 {
    any_device_call(device, "nvmlDeviceGetGpuInstanceId", |state, target| match target {
        // SAFETY: forwarded caller contract.
        Target::Mig(position) => unsafe { put(id, state.scenario.migs[position].gpu_instance_id) },
        Target::Gpu(_) => NVML_ERROR_NOT_SUPPORTED,
    })
}

/// # Safety
/// `id` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: Device, id: *mut c_uint) -> u32 {
    any_device_call(device, "nvmlDeviceGetComputeInstanceId", |state, target| match target {
        // SAFETY: forwarded caller contract.
        Target::Mig(position) => unsafe { put(id, state.scenario.migs[position].compute_instance_id) },
        Target::Gpu(_) => NVML_ERROR_NOT_SUPPORTED,
    })
}

/// # Safety
/// `bus_id` must be a NUL-terminated string; `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut Device) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        handle_by(bus_id, device, "nvmlDeviceGetHandleByPciBusId", |gpu, key| {
            gpu.pci_bus_id.eq_ignore_ascii_case(key)
        })
    }
}

/// # Safety
/// `index` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    device_call(device, "nvmlDeviceGetIndex", |_, gpu| unsafe { put(index, gpu) })
}

/// # Safety
/// `name` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: Device, name: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    any_device_call(device, "nvmlDeviceGetName", |state, target| {
        let text = match target {
            Target::Gpu(gpu) => state.scenario.gpus[gpu as usize].name.clone(),
            Target::Mig(position) => {
                let mig = &state.scenario.migs[position];
                format!("{} MIG {}", state.scenario.gpus[mig.gpu as usize].name, mig.profile)
            }
        };
        // SAFETY: forwarded caller contract.
        unsafe { write_string(&text, name, length) }
    })
}

/// # Safety
/// `uuid` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: Device, uuid: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    any_device_call(device, "nvmlDeviceGetUUID", |state, target| {
        let text = match target {
            Target::Gpu(gpu) => &state.scenario.gpus[gpu as usize].uuid,
            Target::Mig(position) => &state.scenario.migs[position].uuid,
        };
        // SAFETY: forwarded caller contract.
        unsafe { write_string(text, uuid, length) }
    })
}

/// Splits `00000000:07:00.0` into (domain, bus, device).
fn pci_parts(bus_id: &str) -> (u32, u32, u32) {
    let mut parts = bus_id.split([':', '.']);
    let mut next = || parts.next().and_then(|p| u32::from_str_radix(p, 16).ok()).unwrap_or(0);
    (next(), next(), next())
}

pub(crate) fn fill_c_string(target: &mut [c_char], text: &str) {
    let room = target.len() - 1;
    for (slot, byte) in target.iter_mut().zip(text.bytes().take(room)) {
        *slot = byte as c_char;
    }
}

/// # Safety
/// `pci` must be valid for a write of `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfo) -> u32 {
    device_call(device, "nvmlDeviceGetPciInfo", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        // SAFETY: forwarded caller contract.
        unsafe { put(pci, pci_info(&spec.pci_bus_id, spec.pci_device_id)) }
    })
}

/// `nvmlPciInfo_t` of the device at `bus_id` (`00000000:07:00.0`).
pub(crate) fn pci_info(bus_id: &str, pci_device_id: c_uint) -> PciInfo {
    let (domain, bus, dev) = pci_parts(bus_id);
    let mut info = PciInfo {
        bus_id_legacy: [0; 16],
        domain,
        bus,
        device: dev,
        pci_device_id,
        pci_sub_system_id: 0x1463_10de,
        bus_id: [0; 32],
    };
    fill_c_string(&mut info.bus_id, &bus_id.to_uppercase());
    fill_c_string(&mut info.bus_id_legacy, &format!("{domain:04X}:{bus:02X}:{dev:02X}.0"));
    info
}

/// # Safety
/// `memory` must be valid for a write of `nvmlMemory_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: Device, memory: *mut MemoryV1) -> u32 {
    any_device_call(device, "nvmlDeviceGetMemoryInfo", |state, target| {
        if unified(state, target) {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let m = match target {
            Target::Gpu(gpu) => state.memory(gpu),
            Target::Mig(position) => state.mig_memory(position),
        };
        // v1 predates the `reserved` field and counts it as used.
        let info = MemoryV1 { total: m.total, free: m.free, used: m.used + m.reserved };
        // SAFETY: forwarded caller contract.
        unsafe { put(memory, info) }
    })
}

/// nvml.h, of both memory calls: "On certain SOC platforms, the integrated GPU (iGPU) does not
/// use a dedicated framebuffer but instead shares memory with the system. As a result,
/// NVML_ERROR_NOT_SUPPORTED will be returned in this case." (GB10: the scenario's
/// `unified_memory`.)
fn unified(state: &State, target: Target) -> bool {
    matches!(target, Target::Gpu(gpu) if state.scenario.gpus[gpu as usize].unified_memory)
}

/// # Safety
/// `memory` must be null or valid for reads and writes of `nvmlMemory_v2_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: Device, memory: *mut MemoryV2) -> u32 {
    if memory.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller set `version` in the struct it passed.
    if unsafe { (*memory).version } != MEMORY_V2_VERSION {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    any_device_call(device, "nvmlDeviceGetMemoryInfo_v2", |state, target| {
        if unified(state, target) {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let m = match target {
            Target::Gpu(gpu) => state.memory(gpu),
            Target::Mig(position) => state.mig_memory(position),
        };
        let info = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: m.total,
            reserved: m.reserved,
            free: m.free,
            used: m.used,
        };
        // SAFETY: checked non-null above; caller contract for validity.
        unsafe { put(memory, info) }
    })
}

/// # Safety
/// `utilization` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(device: Device, utilization: *mut Utilization) -> u32 {
    any_device_call(device, "nvmlDeviceGetUtilizationRates", |state, target| {
        // MIG devices have no utilization counters, and nvml.h: "On MIG-enabled GPUs, querying
        // device utilization rates is not currently supported."
        let Target::Gpu(gpu) = target else { return NVML_ERROR_NOT_SUPPORTED };
        let spec = &state.scenario.gpus[gpu as usize];
        if spec.mig_mode.as_deref() == Some("enabled") {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let now_ms = crate::busy::now_us() / 1000;
        match (crate::busy::utilization_at(state, gpu, now_ms), spec.utilization_memory) {
            // SAFETY: forwarded caller contract.
            (Some(gpu), Some(memory)) => unsafe { put(utilization, Utilization { gpu, memory }) },
            _ => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `temperature` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: Device,
    sensor: c_uint,
    temperature: *mut c_uint,
) -> u32 {
    device_call(device, "nvmlDeviceGetTemperature", |state, gpu| {
        // NVML_TEMPERATURE_GPU is the only sensor.
        if sensor != TEMPERATURE_GPU {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match state.scenario.gpus[gpu as usize].temperature_c {
            // SAFETY: forwarded caller contract.
            Some(celsius) => unsafe { put(temperature, celsius) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `power` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: Device, power: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetPowerUsage", |state, gpu| {
        match state.scenario.gpus[gpu as usize].power_mw {
            // SAFETY: forwarded caller contract.
            Some(milliwatts) => unsafe { put(power, milliwatts) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `mode` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(device: Device, mode: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetComputeMode", |state, gpu| {
        match state.scenario.gpus[gpu as usize].compute_mode.as_deref().and_then(scenario::compute_mode_code)
        {
            // SAFETY: forwarded caller contract.
            Some(code) => unsafe { put(mode, code) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `current` and `pending` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    device_call(device, "nvmlDeviceGetMigMode", |state, gpu| {
        let spec = &state.scenario.gpus[gpu as usize];
        match spec.mig_mode.as_deref().and_then(scenario::mig_mode_code) {
            // SAFETY: forwarded caller contract.
            Some(code) => unsafe {
                let later = spec.mig_pending.as_deref().and_then(scenario::mig_mode_code).unwrap_or(code);
                match put(current, code) {
                    NVML_SUCCESS => put(pending, later),
                    error => error,
                }
            },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `cpu_set` must be valid for `cpu_set_size` writes of `unsigned long`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    device: Device,
    cpu_set_size: c_uint,
    cpu_set: *mut c_ulong,
) -> u32 {
    device_call(device, "nvmlDeviceGetCpuAffinity", |state, gpu| {
        let Some(list) = &state.scenario.gpus[gpu as usize].cpu_affinity else {
            return NVML_ERROR_NOT_SUPPORTED;
        };
        if cpu_set.is_null() || cpu_set_size == 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let bits = c_ulong::BITS;
        let mut words = vec![0 as c_ulong; cpu_set_size as usize];
        for cpu in scenario::parse_cpu_list(list).unwrap_or_default() {
            if let Some(word) = words.get_mut((cpu / bits) as usize) {
                *word |= 1 << (cpu % bits);
            }
        }
        // SAFETY: the caller gave `cpu_set_size` writable words.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), cpu_set, words.len()) };
        NVML_SUCCESS
    })
}

/// nvml.h: "Get the NUMA node of the given GPU device. This only applies to platforms where the
/// GPUs are NUMA nodes." On a PCIe host (no `gpu_numa_id`) real drivers answer NOT_SUPPORTED.
///
/// # Safety
/// `node` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(device: Device, node: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetNumaNodeId", |state, gpu| {
        match state.scenario.gpus[gpu as usize].gpu_numa_id {
            // SAFETY: forwarded caller contract.
            Some(numa) => unsafe { put(node, numa) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// `NVML_AFFINITY_SCOPE_NODE` and `NVML_AFFINITY_SCOPE_SOCKET` (nvml.h).
const AFFINITY_SCOPE_NODE: c_uint = 0;
const AFFINITY_SCOPE_SOCKET: c_uint = 1;

/// nvml.h: "Retrieves an array of unsigned ints (sized to nodeSetSize) of bitmasks with the
/// ideal memory affinity within node or socket for the device. For example, if NUMA node 0, 1
/// are ideal within the socket for the device and nodeSetSize == 1, result[0] = 0x3". The
/// scenario's `numa_node` is the node; the simulated machine has one node per socket, so both
/// scopes answer the same. A scope nvml.h does not define is INVALID_ARGUMENT.
///
/// # Safety
/// `node_set` must be valid for `node_set_size` writes of `unsigned long`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryAffinity(
    device: Device,
    node_set_size: c_uint,
    node_set: *mut c_ulong,
    scope: c_uint,
) -> u32 {
    device_call(device, "nvmlDeviceGetMemoryAffinity", |state, gpu| {
        if node_set.is_null()
            || node_set_size == 0
            || ![AFFINITY_SCOPE_NODE, AFFINITY_SCOPE_SOCKET].contains(&scope)
        {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let Some(numa) = state.scenario.gpus[gpu as usize].numa_node else {
            return NVML_ERROR_NOT_SUPPORTED;
        };
        let bits = c_ulong::BITS;
        let mut words = vec![0 as c_ulong; node_set_size as usize];
        if let Some(word) = words.get_mut((numa / bits) as usize) {
            *word |= 1 << (numa % bits);
        }
        // SAFETY: the caller gave `node_set_size` writable words.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), node_set, words.len()) };
        NVML_SUCCESS
    })
}

/// # Safety
/// `minor` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: Device, minor: *mut c_uint) -> u32 {
    // The minor number of /dev/nvidiaN follows the index on a plain machine.
    // SAFETY: forwarded caller contract.
    device_call(device, "nvmlDeviceGetMinorNumber", |_, gpu| unsafe { put(minor, gpu) })
}

/// # Safety
/// `level` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    first: Device,
    second: Device,
    level: *mut c_uint,
) -> u32 {
    device_call(first, "nvmlDeviceGetTopologyCommonAncestor", |state, a| {
        let b = (second as usize).wrapping_sub(1);
        if second.is_null() || b >= state.scenario.gpus.len() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let b = b as u32;
        let linked = state.scenario.links.iter().find(|link| link.gpus == [a, b] || link.gpus == [b, a]);
        let answer = match linked {
            Some(link) => scenario::topology_level(&link.level).unwrap_or(50),
            None if a == b => 0,
            None => {
                let node = |i: u32| state.scenario.gpus[i as usize].numa_node;
                if node(a).is_some() && node(a) == node(b) {
                    40
                } else {
                    50
                }
            }
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(level, answer) }
    })
}

/// `nvmlDeviceGetP2PStatus`: NVLink (index 2) where the scenario's `[[link]]` says so; reads,
/// writes and the rest over PCIe for any pair; `NOT_SUPPORTED` (status 5) otherwise.
///
/// # Safety
/// `status` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    first: Device,
    second: Device,
    index: c_uint,
    status: *mut c_uint,
) -> u32 {
    const NVLINK: c_uint = P2P_CAPS_INDEX_NVLINK;
    const OK: c_uint = P2P_STATUS_OK;
    const NOT_SUPPORTED: c_uint = P2P_STATUS_NOT_SUPPORTED;
    device_call(first, "nvmlDeviceGetP2PStatus", |state, a| {
        let b = (second as usize).wrapping_sub(1);
        if second.is_null() || b >= state.scenario.gpus.len() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let b = b as u32;
        let nvlink = state
            .scenario
            .links
            .iter()
            .any(|link| link.nvlink && (link.gpus == [a, b] || link.gpus == [b, a]));
        let answer = match index {
            NVLINK if nvlink => OK,
            NVLINK => NOT_SUPPORTED,
            _ if a != b => OK,
            _ => NOT_SUPPORTED,
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(status, answer) }
    })
}

/// The count/size protocol of `nvmlDeviceGetComputeRunningProcesses*`: a caller asking with too
/// small a count gets INSUFFICIENT_SIZE and the needed count; zero processes answer SUCCESS.
///
/// # Safety
/// `count` must be valid for reads and writes; `infos` null or valid for `*count` writes of `T`.
unsafe fn running_processes<T>(
    device: Device,
    list: List,
    version: &str,
    count: *mut c_uint,
    infos: *mut T,
    make: impl Fn(&ListedProcess, u64) -> T,
) -> u32 {
    if count.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let call = match list {
        List::Mps => "nvmlDeviceGetMPSComputeRunningProcesses",
        _ => "nvmlDeviceGetComputeRunningProcesses",
    };
    // Named with its version, so that a scenario can fail one entry point alone (a driver
    // older than `_v3`), or every version by the bare name.
    any_device_call(device, &format!("{call}{version}"), |state, target| {
        let listed = match target {
            Target::Gpu(gpu) => state.processes_in(gpu, list),
            Target::Mig(position) => state.mig_processes_in(position, list),
        };
        // SAFETY: checked non-null; caller contract.
        let capacity = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = listed.len() as c_uint };
        if capacity < listed.len() {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if listed.is_empty() {
            return NVML_SUCCESS;
        }
        if infos.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // With the 535 quirk the entries are wider than the caller's; never write past the
        // caller's buffer (capacity x its entry size), even though the real driver did.
        let fits = capacity * std::mem::size_of::<ProcessInfoV2>() / std::mem::size_of::<T>();
        for (slot, process) in listed.iter().enumerate().take(fits) {
            let used = process.used_bytes.unwrap_or(VALUE_NOT_AVAILABLE);
            // SAFETY: slot < listed.len() <= capacity, which the caller allocated.
            unsafe { infos.add(slot).write(make(process, used)) };
        }
        NVML_SUCCESS
    })
}

/// The instance ids of a process: 0xFFFFFFFF outside MIG.
fn instance_ids(process: &ListedProcess) -> (u32, u32) {
    process.instance.unwrap_or((u32::MAX, u32::MAX))
}

fn process_v2(process: &ListedProcess, used: u64) -> ProcessInfoV2 {
    let (gpu_instance_id, compute_instance_id) = instance_ids(process);
    ProcessInfoV2 { pid: process.pid, used_gpu_memory: used, gpu_instance_id, compute_instance_id }
}

/// The compute list (`nvmlDeviceGetComputeRunningProcesses*`: with MPS, the server) and the MPS
/// list (`nvmlDeviceGetMPSComputeRunningProcesses*`: the clients), each in the three layouts
/// nvml.h declares, with the same count protocol. The 535 drivers' misread `_v3` stride
/// (`QUIRK_V3_STRIDE_32`) was in every `_v3` process list.
macro_rules! process_lists {
    ($($list:expr => $v3:ident, $v2:ident, $v1:ident);* $(;)?) => {$(
        /// # Safety
        /// See [`running_processes`].
        #[no_mangle]
        pub unsafe extern "C" fn $v3(device: Device, count: *mut c_uint, infos: *mut ProcessInfoV2) -> u32 {
            let quirk = with_state(|state| Ok(state.scenario.has_quirk(scenario::QUIRK_V3_STRIDE_32)))
                .unwrap_or(false);
            if quirk {
                let wide = infos.cast::<ProcessInfo535>();
                // SAFETY: forwarded caller contract; running_processes bounds the writes by the
                // caller's buffer size.
                return unsafe {
                    running_processes(device, $list, "_v3", count, wide, |process, used| {
                        let (gpu_instance_id, compute_instance_id) = instance_ids(process);
                        ProcessInfo535 {
                            pid: process.pid,
                            used_gpu_memory: used,
                            gpu_instance_id,
                            compute_instance_id,
                            used_gpu_cc_protected_memory: 0,
                        }
                    })
                };
            }
            // SAFETY: forwarded caller contract.
            unsafe { running_processes(device, $list, "_v3", count, infos, process_v2) }
        }

        /// # Safety
        /// See [`running_processes`].
        #[no_mangle]
        pub unsafe extern "C" fn $v2(device: Device, count: *mut c_uint, infos: *mut ProcessInfoV2) -> u32 {
            // SAFETY: forwarded caller contract.
            unsafe { running_processes(device, $list, "_v2", count, infos, process_v2) }
        }

        /// # Safety
        /// See [`running_processes`].
        #[no_mangle]
        pub unsafe extern "C" fn $v1(device: Device, count: *mut c_uint, infos: *mut ProcessInfoV1) -> u32 {
            // SAFETY: forwarded caller contract.
            unsafe {
                running_processes(device, $list, "", count, infos, |process, used| ProcessInfoV1 {
                    pid: process.pid,
                    used_gpu_memory: used,
                })
            }
        }
    )*};
}

process_lists!(
    List::Compute => nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_v2,
        nvmlDeviceGetComputeRunningProcesses;
    List::Mps => nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlDeviceGetMPSComputeRunningProcesses_v2,
        nvmlDeviceGetMPSComputeRunningProcesses;
);

/// Graphics process lists: the simulated machine runs compute processes only (no display), so
/// these lists are empty, answered with the count protocol nvml.h gives the compute call
/// ("infoCount will contain minimal amount of space necessary"): count 0 and NVML_SUCCESS,
/// whatever buffer the caller gave. The `_v1`/`_v2` entry points are the ones nvml.h declares
/// under NVML_NO_UNVERSIONED_FUNC_DEFS, for callers built against older headers.
macro_rules! no_processes {
    ($($name:ident => $call:literal),* $(,)?) => {$(
        /// # Safety
        /// `count` must be valid for reads and writes.
        #[no_mangle]
        pub unsafe extern "C" fn $name(device: Device, count: *mut c_uint, _infos: *mut c_void) -> u32 {
            if count.is_null() {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: checked non-null; caller contract.
            any_device_call(device, $call, |_, _| unsafe { put(count, 0) })
        }
    )*};
}

no_processes!(
    nvmlDeviceGetGraphicsRunningProcesses_v3 => "nvmlDeviceGetGraphicsRunningProcesses",
    nvmlDeviceGetGraphicsRunningProcesses_v2 => "nvmlDeviceGetGraphicsRunningProcesses",
    nvmlDeviceGetGraphicsRunningProcesses => "nvmlDeviceGetGraphicsRunningProcesses",
);

/// `NVML_FEATURE_DISABLED` / `NVML_FEATURE_ENABLED` (`nvmlEnableState_t`).
pub(crate) const FEATURE_DISABLED: c_uint = 0;
pub(crate) const FEATURE_ENABLED: c_uint = 1;

/// nvml.h: "For all products." A data-center board drives no display: disabled.
///
/// # Safety
/// `display` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(device: Device, display: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    device_call(device, "nvmlDeviceGetDisplayMode", |_, _| unsafe { put(display, FEATURE_DISABLED) })
}

/// nvml.h: "For all products." No X server has a screen on it: disabled.
///
/// # Safety
/// `active` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(device: Device, active: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    device_call(device, "nvmlDeviceGetDisplayActive", |_, _| unsafe { put(active, FEATURE_DISABLED) })
}

/// nvml.h: "For all products. For Linux only." The scenario's `persistence_mode`, enabled by
/// default.
///
/// # Safety
/// `mode` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(device: Device, mode: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetPersistenceMode", |state, gpu| {
        let enabled = state.scenario.gpus[gpu as usize].persistence_mode.as_deref() != Some("disabled");
        // SAFETY: forwarded caller contract.
        unsafe { put(mode, if enabled { FEATURE_ENABLED } else { FEATURE_DISABLED }) }
    })
}

/// nvml.h gives no product restriction: every CUDA device has one. The scenario's
/// `compute_capability`, else the model's.
///
/// # Safety
/// `major` and `minor` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: Device,
    major: *mut c_int,
    minor: *mut c_int,
) -> u32 {
    device_call(device, "nvmlDeviceGetCudaComputeCapability", |state, gpu| {
        match state.scenario.gpus[gpu as usize].compute_capability() {
            // SAFETY: forwarded caller contract.
            Some((high, low)) => unsafe {
                match put(major, high) {
                    NVML_SUCCESS => put(minor, low),
                    error => error,
                }
            },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// nvml.h: "For Fermi or newer fully supported devices." The scenario's `pstate` (P0 unless
/// it says otherwise).
///
/// # Safety
/// `pstate` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: Device, pstate: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetPerformanceState", |state, gpu| {
        // SAFETY: forwarded caller contract.
        unsafe { put(pstate, state.scenario.gpus[gpu as usize].pstate) }
    })
}

/// nvml.h: "For Fermi or newer fully supported devices", in milliwatts. A scenario without
/// `power_limit_mw` is a board that does not report one.
///
/// # Safety
/// `limit` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: Device, limit: *mut c_uint) -> u32 {
    device_call(device, "nvmlDeviceGetPowerManagementLimit", |state, gpu| {
        match state.scenario.gpus[gpu as usize].power_limit_mw {
            // SAFETY: forwarded caller contract.
            Some(milliwatts) => unsafe { put(limit, milliwatts) },
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// nvml.h: "If no valid sample entries are found since the lastSeenTimeStamp,
/// NVML_ERROR_NOT_FOUND is returned." The simulator keeps no per-process samples, so there
/// never are any; "On MIG-enabled GPUs, querying process utilization is not currently
/// supported."
///
/// # Safety
/// `count` must be valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: Device,
    _utilization: *mut c_void,
    count: *mut c_uint,
    _last_seen: c_ulonglong,
) -> u32 {
    device_call(device, "nvmlDeviceGetProcessUtilization", |state, gpu| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match state.scenario.gpus[gpu as usize].mig_mode.as_deref() {
            Some("enabled") => NVML_ERROR_NOT_SUPPORTED,
            _ => NVML_ERROR_NOT_FOUND,
        }
    })
}

/// Queries the simulator has no data for, answered as a board without the feature answers them
/// (NVML_ERROR_NOT_SUPPORTED), so that tools such as nvitop run without missing-symbol errors.
/// Only the device handle is read: under the x86-64 and AArch64 C calling conventions the
/// caller's further arguments are simply not looked at.
macro_rules! not_supported {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name(device: Device) -> u32 {
            device_call(device, stringify!($name), |_, _| NVML_ERROR_NOT_SUPPORTED)
        }
    )*};
}

not_supported!(
    nvmlDeviceGetClockInfo,
    nvmlDeviceGetMaxClockInfo,
    nvmlDeviceGetDecoderUtilization,
    nvmlDeviceGetEncoderUtilization,
    nvmlDeviceGetDriverModel,
    nvmlDeviceGetDriverModel_v2,
    nvmlDeviceGetFanSpeed,
    nvmlDeviceGetPcieThroughput,
);

/// What the simulator takes nvml.h to say, as `(C expression, value)`: the size and every field
/// offset of each struct it reads or writes, each constant it answers with or accepts, the
/// scenario's names for enum values. `crates/nvml-sim/tests/nvml_h.rs` evaluates each
/// expression in C against NVIDIA's own nvml.h and compares, so none of these numbers is
/// trusted because it was copied by hand.
pub fn header_facts() -> Vec<(String, u64)> {
    use std::mem::{offset_of, size_of};
    macro_rules! layout {
        ($facts:ident, $c:literal, $rust:ty, $($field:ident => $c_field:literal),* $(,)?) => {
            $facts.push((format!("sizeof({})", $c), size_of::<$rust>() as u64));
            $($facts.push((format!("offsetof({}, {})", $c, $c_field), offset_of!($rust, $field) as u64));)*
        };
    }
    let mut facts: Vec<(String, u64)> = Vec::new();
    layout!(facts, "nvmlPciInfo_t", PciInfo, bus_id_legacy => "busIdLegacy", domain => "domain", bus => "bus",
        device => "device", pci_device_id => "pciDeviceId", pci_sub_system_id => "pciSubSystemId", bus_id => "busId");
    layout!(facts, "nvmlMemory_t", MemoryV1, total => "total", free => "free", used => "used");
    layout!(facts, "nvmlMemory_v2_t", MemoryV2, version => "version", total => "total", reserved => "reserved",
        free => "free", used => "used");
    layout!(facts, "nvmlUtilization_t", Utilization, gpu => "gpu", memory => "memory");
    layout!(facts, "nvmlProcessInfo_v1_t", ProcessInfoV1, pid => "pid", used_gpu_memory => "usedGpuMemory");
    layout!(facts, "nvmlProcessInfo_v2_t", ProcessInfoV2, pid => "pid", used_gpu_memory => "usedGpuMemory",
        gpu_instance_id => "gpuInstanceId", compute_instance_id => "computeInstanceId");
    layout!(facts, "nvmlProcessInfo_t", ProcessInfoV2, pid => "pid", used_gpu_memory => "usedGpuMemory",
        gpu_instance_id => "gpuInstanceId", compute_instance_id => "computeInstanceId");
    let constants: &[(&str, u64)] = &[
        ("nvmlMemory_v2", u64::from(MEMORY_V2_VERSION)),
        ("NVML_SUCCESS", u64::from(NVML_SUCCESS)),
        ("NVML_ERROR_UNINITIALIZED", u64::from(NVML_ERROR_UNINITIALIZED)),
        ("NVML_ERROR_INVALID_ARGUMENT", u64::from(NVML_ERROR_INVALID_ARGUMENT)),
        ("NVML_ERROR_NOT_SUPPORTED", u64::from(NVML_ERROR_NOT_SUPPORTED)),
        ("NVML_ERROR_NO_PERMISSION", u64::from(NVML_ERROR_NO_PERMISSION)),
        ("NVML_ERROR_NOT_FOUND", u64::from(NVML_ERROR_NOT_FOUND)),
        ("NVML_ERROR_INSUFFICIENT_SIZE", u64::from(NVML_ERROR_INSUFFICIENT_SIZE)),
        ("NVML_ERROR_ARGUMENT_VERSION_MISMATCH", u64::from(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)),
        ("NVML_ERROR_UNKNOWN", u64::from(NVML_ERROR_UNKNOWN)),
        ("(unsigned long long)NVML_VALUE_NOT_AVAILABLE", VALUE_NOT_AVAILABLE),
        ("NVML_TEMPERATURE_GPU", u64::from(TEMPERATURE_GPU)),
        ("NVML_P2P_CAPS_INDEX_NVLINK", u64::from(P2P_CAPS_INDEX_NVLINK)),
        ("NVML_P2P_STATUS_OK", u64::from(P2P_STATUS_OK)),
        ("NVML_P2P_STATUS_NOT_SUPPORTED", u64::from(P2P_STATUS_NOT_SUPPORTED)),
        ("NVML_AFFINITY_SCOPE_NODE", u64::from(AFFINITY_SCOPE_NODE)),
        ("NVML_AFFINITY_SCOPE_SOCKET", u64::from(AFFINITY_SCOPE_SOCKET)),
        ("NVML_FEATURE_DISABLED", u64::from(FEATURE_DISABLED)),
        ("NVML_FEATURE_ENABLED", u64::from(FEATURE_ENABLED)),
        ("NVML_PSTATE_0", 0),
    ];
    facts.extend(constants.iter().map(|(name, value)| ((*name).to_owned(), *value)));
    for (code, name) in scenario::ERROR_NAMES {
        facts.push((format!("NVML_ERROR_{name}"), u64::from(*code)));
    }
    // How the scenario turns its names into values, and nvml.h's names for them.
    type Enum = (fn(&str) -> Option<u32>, &'static [(&'static str, &'static str)]);
    let enums: [Enum; 3] = [
        (
            scenario::compute_mode_code,
            &[
                ("default", "NVML_COMPUTEMODE_DEFAULT"),
                ("exclusive_thread", "NVML_COMPUTEMODE_EXCLUSIVE_THREAD"),
                ("prohibited", "NVML_COMPUTEMODE_PROHIBITED"),
                ("exclusive_process", "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS"),
            ],
        ),
        (
            scenario::mig_mode_code,
            &[("disabled", "NVML_DEVICE_MIG_DISABLE"), ("enabled", "NVML_DEVICE_MIG_ENABLE")],
        ),
        (
            scenario::topology_level,
            &[
                ("internal", "NVML_TOPOLOGY_INTERNAL"),
                ("single", "NVML_TOPOLOGY_SINGLE"),
                ("multiple", "NVML_TOPOLOGY_MULTIPLE"),
                ("hostbridge", "NVML_TOPOLOGY_HOSTBRIDGE"),
                ("node", "NVML_TOPOLOGY_NODE"),
                ("system", "NVML_TOPOLOGY_SYSTEM"),
            ],
        ),
    ];
    for (code_of, names) in enums {
        for (scenario_name, c_name) in names {
            facts.push(((*c_name).to_owned(), code_of(scenario_name).map_or(u64::MAX, u64::from)));
        }
    }
    facts
}
