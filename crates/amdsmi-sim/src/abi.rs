//! The AMD SMI C ABI that gpurun and AMD's `amdsmi` Python package call, answered from the
//! scenario. Layouts are amdsmi.h's as of ROCm 7.0 (the structs of the PyPI `amdsmi` 7.0.2
//! bindings, generated from that header; `tests/amdsmi/` checks them): a processor handle is
//! `1 + its index`, a socket handle `SOCKETS + its index`.

use std::ffi::{c_char, c_float, c_void};

use crate::scenario::GpuSpec;
use crate::state::{self, State};

pub type Status = u32;
pub const SUCCESS: Status = 0;
pub const INVAL: Status = 1;
pub const NOT_SUPPORTED: Status = 2;
pub const NO_PERM: Status = 10;
pub const OUT_OF_RESOURCES: Status = 15;
pub const INIT_ERROR: Status = 18;
pub const NOT_INIT: Status = 32;
pub const DRIVER_NOT_LOADED: Status = 34;
pub const INSUFFICIENT_SIZE: Status = 41;

const INIT_AMD_GPUS: u64 = 2;
const PROCESSOR_TYPE_AMD_GPU: u32 = 1;
const MEM_TYPE_VRAM: u32 = 0;
const MEM_TYPE_VIS_VRAM: u32 = 1;
const TEMPERATURE_TYPE_HOTSPOT: u32 = 1;
const TEMP_CURRENT: u32 = 0;
const SOCKETS: usize = 0x5000;
/// amdsmi.h: `AMDSMI_GPU_UUID_SIZE`.
const UUID_SIZE: u32 = 38;
/// µJ per count of the energy accumulator (MI300X's, as amd-smi reports it).
const ENERGY_RESOLUTION_UJ: f32 = 15.259;

#[repr(C)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub release: u32,
    pub build: *const c_char,
}

#[repr(C)]
pub struct AsicInfo {
    pub market_name: [u8; 256],
    pub vendor_id: u32,
    pub vendor_name: [u8; 256],
    pub subvendor_id: u32,
    pub device_id: u64,
    pub rev_id: u32,
    pub asic_serial: [u8; 256],
    pub oam_id: u32,
    pub num_of_compute_units: u32,
    pub target_graphics_version: u64,
    pub subsystem_id: u32,
    pub reserved: [u32; 21],
}

#[repr(C)]
pub struct EnumerationInfo {
    pub drm_render: u32,
    pub drm_card: u32,
    pub hsa_id: u32,
    pub hip_id: u32,
    pub hip_uuid: [u8; 256],
}

#[repr(C)]
pub struct EngineUsage {
    pub gfx_activity: u32,
    pub umc_activity: u32,
    pub mm_activity: u32,
    pub reserved: [u32; 13],
}

#[repr(C)]
pub struct PowerInfo {
    pub socket_power: u64,
    pub current_socket_power: u32,
    pub average_socket_power: u32,
    pub gfx_voltage: u64,
    pub soc_voltage: u64,
    pub mem_voltage: u64,
    pub power_limit: u32,
    pub reserved: [u64; 18],
}

#[repr(C)]
pub struct ProcEngineUsage {
    pub gfx: u64,
    pub enc: u64,
    pub reserved: [u32; 12],
}

#[repr(C)]
pub struct ProcMemoryUsage {
    pub gtt_mem: u64,
    pub cpu_mem: u64,
    pub vram_mem: u64,
    pub reserved: [u32; 10],
}

#[repr(C)]
pub struct ProcInfo {
    pub name: [u8; 256],
    pub pid: u32,
    pub mem: u64,
    pub engine_usage: ProcEngineUsage,
    pub memory_usage: ProcMemoryUsage,
    pub container_name: [u8; 256],
    pub cu_occupancy: u32,
    pub reserved: [u32; 11],
}

#[repr(C)]
pub struct ErrorCount {
    pub correctable_count: u64,
    pub uncorrectable_count: u64,
    pub deferred_count: u64,
    pub reserved: [u64; 5],
}

#[repr(C)]
pub struct RetiredPage {
    pub page_address: u64,
    pub page_size: u64,
    pub status: u32,
}

#[repr(C)]
pub struct KfdInfo {
    pub kfd_id: u64,
    pub node_id: u32,
    pub current_partition_id: u32,
    pub reserved: [u32; 12],
}

#[repr(C)]
pub struct DriverInfo {
    pub driver_version: [u8; 256],
    pub driver_date: [u8; 256],
    pub driver_name: [u8; 256],
}

/// The sizes the PyPI bindings' ctypes structs have (`ctypes.sizeof`), checked in the tests.
pub fn sizes() -> Vec<(&'static str, usize)> {
    use std::mem::size_of;
    vec![
        ("amdsmi_version_t", size_of::<Version>()),
        ("amdsmi_asic_info_t", size_of::<AsicInfo>()),
        ("amdsmi_enumeration_info_t", size_of::<EnumerationInfo>()),
        ("amdsmi_engine_usage_t", size_of::<EngineUsage>()),
        ("amdsmi_power_info_t", size_of::<PowerInfo>()),
        ("amdsmi_proc_info_t", size_of::<ProcInfo>()),
        ("amdsmi_error_count_t", size_of::<ErrorCount>()),
        ("amdsmi_kfd_info_t", size_of::<KfdInfo>()),
        ("amdsmi_retired_page_record_t", size_of::<RetiredPage>()),
        ("amdsmi_driver_info_t", size_of::<DriverInfo>()),
    ]
}

/// `text` into a C string field, cut to fit with its NUL.
fn put(field: &mut [u8], text: &str) {
    let n = text.len().min(field.len() - 1);
    field[..n].copy_from_slice(&text.as_bytes()[..n]);
    field[n] = 0;
}

/// Runs `f` on the initialised state; `NOT_INIT` before `amdsmi_init`.
fn initialised(f: impl FnOnce(&mut State) -> Status) -> Status {
    state::with(|state| if state.initialised { f(state) } else { NOT_INIT }).unwrap_or(INIT_ERROR)
}

/// Runs `f` on the processor behind `handle`: `INVAL` for a handle it never gave, `NO_PERM`
/// for one outside this job's cgroup (unless the call reads only what sysfs tells anyone).
fn processor(
    call: &str,
    handle: *mut c_void,
    identity_only: bool,
    f: impl FnOnce(&mut State, u32) -> Status,
) -> Status {
    // A `[[hang]]` call sleeps outside the lock, so that other threads' calls go on.
    let index = (handle as usize).wrapping_sub(1) as u32;
    if let Ok(Some(hang)) = state::with(|state| state.scenario.hang_of(call, index)) {
        std::thread::sleep(hang);
    }
    initialised(|state| {
        let index = (handle as usize).wrapping_sub(1);
        match state.scenario.gpus.get(index) {
            None => INVAL,
            Some(gpu) if !gpu.accessible && !identity_only => NO_PERM,
            Some(_) => f(state, index as u32),
        }
    })
}

fn gpu(state: &State, index: u32) -> &GpuSpec {
    &state.scenario.gpus[index as usize]
}

/// Writes what fits of `items` into `out` (capacity `*count`) and sets `*count` to how many
/// there are; a null `out` asks only for the count.
///
/// # Safety
/// `count` points to a u32; `out`, unless null, to `*count` writable handles.
unsafe fn hand_out(items: &[usize], count: *mut u32, out: *mut *mut c_void) -> Status {
    if count.is_null() {
        return INVAL;
    }
    if out.is_null() {
        *count = items.len() as u32;
        return SUCCESS;
    }
    let room = (*count as usize).min(items.len());
    for (slot, &item) in items.iter().take(room).enumerate() {
        *out.add(slot) = item as *mut c_void;
    }
    *count = room as u32;
    SUCCESS
}

macro_rules! null_check {
    ($($pointer:expr),+) => {
        if $($pointer.is_null())||+ {
            return INVAL;
        }
    };
}

#[no_mangle]
pub extern "C" fn amdsmi_init(flags: u64) -> Status {
    state::with(|state| match state.scenario.init_error.as_deref() {
        Some("DRIVER_NOT_LOADED") => DRIVER_NOT_LOADED,
        Some("NO_PERM") => NO_PERM,
        Some(_) => INIT_ERROR,
        None if flags & INIT_AMD_GPUS == 0 => INVAL,
        None => {
            state.initialised = true;
            SUCCESS
        }
    })
    .unwrap_or(INIT_ERROR)
}

#[no_mangle]
pub extern "C" fn amdsmi_shut_down() -> Status {
    initialised(|state| {
        state.initialised = false;
        SUCCESS
    })
}

/// # Safety
/// `version` points to an `amdsmi_version_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_lib_version(version: *mut Version) -> Status {
    null_check!(version);
    state::with(|state| {
        let [major, minor, release] = state.scenario.lib_version;
        *version = Version { major, minor, release, build: c"amdsmi-sim".as_ptr() };
        SUCCESS
    })
    .unwrap_or(INIT_ERROR)
}

/// # Safety
/// `text` points to a `const char *`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_status_code_to_string(status: Status, text: *mut *const c_char) -> Status {
    null_check!(text);
    *text = match status {
        SUCCESS => c"AMDSMI_STATUS_SUCCESS: Call succeeded",
        INVAL => c"AMDSMI_STATUS_INVAL: Invalid parameters",
        NOT_SUPPORTED => c"AMDSMI_STATUS_NOT_SUPPORTED: Command not supported",
        NO_PERM => c"AMDSMI_STATUS_NO_PERM: Permission Denied",
        OUT_OF_RESOURCES => c"AMDSMI_STATUS_OUT_OF_RESOURCES: Not enough memory",
        INIT_ERROR => {
            c"AMDSMI_STATUS_INIT_ERROR: An error occurred when initializing internal data structures"
        }
        NOT_INIT => c"AMDSMI_STATUS_NOT_INIT: Device not initialized",
        DRIVER_NOT_LOADED => c"AMDSMI_STATUS_DRIVER_NOT_LOADED: Processor driver not loaded",
        INSUFFICIENT_SIZE => {
            c"AMDSMI_STATUS_INSUFFICIENT_SIZE: Not enough resources were available for the operation"
        }
        _ => c"AMDSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred",
    }
    .as_ptr();
    SUCCESS
}

/// # Safety
/// As `hand_out`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_socket_handles(count: *mut u32, sockets: *mut *mut c_void) -> Status {
    initialised(|state| {
        let handles: Vec<usize> = (0..state.scenario.sockets().len()).map(|s| SOCKETS + s).collect();
        // SAFETY: the caller's pointers, as this function's contract says.
        unsafe { hand_out(&handles, count, sockets) }
    })
}

/// # Safety
/// As `hand_out`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_processor_handles(
    socket: *mut c_void,
    count: *mut u32,
    processors: *mut *mut c_void,
) -> Status {
    initialised(|state| {
        let sockets = state.scenario.sockets();
        let Some(members) = (socket as usize).checked_sub(SOCKETS).and_then(|s| sockets.get(s)) else {
            return INVAL;
        };
        let handles: Vec<usize> = members.iter().map(|&m| m as usize + 1).collect();
        // SAFETY: the caller's pointers, as this function's contract says.
        unsafe { hand_out(&handles, count, processors) }
    })
}

/// # Safety
/// `kind` points to a u32.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_processor_type(handle: *mut c_void, kind: *mut u32) -> Status {
    null_check!(kind);
    processor("amdsmi_get_processor_type", handle, true, |_, _| {
        *kind = PROCESSOR_TYPE_AMD_GPU;
        SUCCESS
    })
}

/// # Safety
/// `length` points to the size of `uuid`, a char buffer.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_device_uuid(
    handle: *mut c_void,
    length: *mut u32,
    uuid: *mut c_char,
) -> Status {
    null_check!(length, uuid);
    processor("amdsmi_get_gpu_device_uuid", handle, true, |state, index| {
        if *length < UUID_SIZE {
            *length = UUID_SIZE;
            return INSUFFICIENT_SIZE;
        }
        let field = std::slice::from_raw_parts_mut(uuid.cast::<u8>(), *length as usize);
        put(field, &gpu(state, index).uuid);
        SUCCESS
    })
}

/// # Safety
/// `info` points to an `amdsmi_enumeration_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_enumeration_info(
    handle: *mut c_void,
    info: *mut EnumerationInfo,
) -> Status {
    null_check!(info);
    processor("amdsmi_get_gpu_enumeration_info", handle, true, |state, index| {
        // HIP's own number with nothing set: its place among the processors it can open.
        // A processor ROCr cannot open has no HIP number: the last one, as AMD SMI gives.
        let hip_id = state.scenario.hip_id(index).unwrap_or(u32::MAX);
        let mut out = EnumerationInfo {
            drm_render: 128 + index,
            drm_card: 1 + index,
            // HSA numbers the CPU agents (one per NUMA node here: 2) first.
            hsa_id: 2 + index,
            hip_id,
            hip_uuid: [0; 256],
        };
        put(&mut out.hip_uuid, &gpu(state, index).hip_uuid);
        *info = out;
        SUCCESS
    })
}

/// # Safety
/// `info` points to an `amdsmi_asic_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_asic_info(handle: *mut c_void, info: *mut AsicInfo) -> Status {
    null_check!(info);
    processor("amdsmi_get_gpu_asic_info", handle, true, |state, index| {
        let spec = gpu(state, index);
        let partitions = state.scenario.gpus.iter().filter(|g| g.bdf == spec.bdf).count() as u32;
        let mut out = AsicInfo {
            market_name: [0; 256],
            vendor_id: 0x1002,
            vendor_name: [0; 256],
            subvendor_id: 0x1002,
            device_id: spec.device_id,
            rev_id: 0,
            asic_serial: [0; 256],
            oam_id: index,
            num_of_compute_units: 304 / partitions.max(1),
            target_graphics_version: 90402,
            subsystem_id: 0x74a1,
            reserved: [0; 21],
        };
        put(&mut out.market_name, &spec.market_name);
        put(&mut out.vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
        put(&mut out.asic_serial, &spec.hip_uuid[4..]);
        *info = out;
        SUCCESS
    })
}

/// # Safety
/// `bdf` points to an `amdsmi_bdf_t` (a u64 of bit fields).
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_device_bdf(handle: *mut c_void, bdf: *mut u64) -> Status {
    null_check!(bdf);
    processor("amdsmi_get_gpu_device_bdf", handle, true, |state, index| {
        let text = &gpu(state, index).bdf;
        let parts: Vec<u64> =
            text.split([':', '.']).map(|part| u64::from_str_radix(part, 16).unwrap_or(0)).collect();
        let [domain, bus, device, function] = parts[..] else { return INVAL };
        // function_number : 3, device_number : 5, bus_number : 8, domain_number : 48
        *bdf = (function & 0x7) | (device & 0x1f) << 3 | (bus & 0xff) << 8 | domain << 16;
        SUCCESS
    })
}

/// # Safety
/// `total` points to a u64.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_memory_total(
    handle: *mut c_void,
    kind: u32,
    total: *mut u64,
) -> Status {
    null_check!(total);
    processor("amdsmi_get_gpu_memory_total", handle, false, |state, index| match kind {
        MEM_TYPE_VRAM | MEM_TYPE_VIS_VRAM => {
            *total = gpu(state, index).vram_total.0;
            SUCCESS
        }
        _ => NOT_SUPPORTED,
    })
}

/// # Safety
/// `used` points to a u64.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_memory_usage(
    handle: *mut c_void,
    kind: u32,
    used: *mut u64,
) -> Status {
    null_check!(used);
    processor("amdsmi_get_gpu_memory_usage", handle, false, |state, index| match kind {
        MEM_TYPE_VRAM | MEM_TYPE_VIS_VRAM => {
            *used = state.vram_used(index);
            SUCCESS
        }
        _ => NOT_SUPPORTED,
    })
}

/// # Safety
/// `info` points to an `amdsmi_engine_usage_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_activity(handle: *mut c_void, info: *mut EngineUsage) -> Status {
    null_check!(info);
    processor("amdsmi_get_gpu_activity", handle, false, |state, index| {
        let spec = gpu(state, index);
        match (spec.gfx_activity, spec.umc_activity) {
            (Some(gfx), umc) => {
                *info = EngineUsage {
                    gfx_activity: gfx,
                    umc_activity: umc.unwrap_or(u32::MAX),
                    mm_activity: u32::MAX,
                    reserved: [0; 13],
                };
                SUCCESS
            }
            (None, _) => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `value` points to an i64.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_temp_metric(
    handle: *mut c_void,
    sensor: u32,
    metric: u32,
    value: *mut i64,
) -> Status {
    null_check!(value);
    processor("amdsmi_get_temp_metric", handle, false, |state, index| {
        match (gpu(state, index).temperature_c, sensor, metric) {
            // MI300 has no edge sensor: hotspot (junction) only.
            (Some(celsius), TEMPERATURE_TYPE_HOTSPOT, TEMP_CURRENT) => {
                *value = celsius;
                SUCCESS
            }
            _ => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `info` points to an `amdsmi_power_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_power_info(handle: *mut c_void, info: *mut PowerInfo) -> Status {
    null_check!(info);
    processor("amdsmi_get_power_info", handle, false, |state, index| match gpu(state, index).power_w {
        Some(watts) => {
            *info = PowerInfo {
                socket_power: u64::from(watts),
                current_socket_power: watts,
                average_socket_power: watts,
                gfx_voltage: u64::MAX,
                soc_voltage: u64::MAX,
                mem_voltage: u64::MAX,
                power_limit: 750,
                reserved: [0; 18],
            };
            SUCCESS
        }
        None => NOT_SUPPORTED,
    })
}

/// The energy counter: the scenario's power for as long as the machine has been up (so every
/// process reads one counter that only grows).
///
/// # Safety
/// `energy` and `timestamp` point to u64s, `resolution` to a float.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_energy_count(
    handle: *mut c_void,
    energy: *mut u64,
    resolution: *mut c_float,
    timestamp: *mut u64,
) -> Status {
    null_check!(energy, resolution, timestamp);
    processor("amdsmi_get_energy_count", handle, false, |state, index| match gpu(state, index).power_w {
        Some(watts) => {
            let up = boottime_ns();
            let microjoules = f64::from(watts) * up as f64 / 1e3;
            *energy = (microjoules / f64::from(ENERGY_RESOLUTION_UJ)) as u64;
            *resolution = ENERGY_RESOLUTION_UJ;
            *timestamp = up;
            SUCCESS
        }
        None => NOT_SUPPORTED,
    })
}

/// Nanoseconds since boot (CLOCK_BOOTTIME: the same in every process).
fn boottime_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// amdsmi.h: `max_processes` is the room in `list`; it is set to the number of processes,
/// and `OUT_OF_RESOURCES` says the list was cut short. Zero room asks for the count.
///
/// # Safety
/// `max_processes` points to a u32; `list`, unless null, to that many `amdsmi_proc_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_process_list(
    handle: *mut c_void,
    max_processes: *mut u32,
    list: *mut ProcInfo,
) -> Status {
    null_check!(max_processes);
    processor("amdsmi_get_gpu_process_list", handle, false, |state, index| {
        let processes = state.listed(index);
        let room = if list.is_null() { 0 } else { *max_processes as usize };
        for (slot, process) in processes.iter().take(room).enumerate() {
            let mut entry: ProcInfo = std::mem::zeroed();
            put(&mut entry.name, &process.name);
            entry.pid = process.pid;
            entry.mem = process.vram;
            entry.memory_usage.vram_mem = process.vram;
            entry.cu_occupancy = u32::MAX;
            list.add(slot).write(entry);
        }
        *max_processes = processes.len() as u32;
        match room != 0 && room < processes.len() {
            true => OUT_OF_RESOURCES,
            false => SUCCESS,
        }
    })
}

/// # Safety
/// `hops` points to a u64, `kind` to a u32.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_topo_get_link_type(
    source: *mut c_void,
    destination: *mut c_void,
    hops: *mut u64,
    kind: *mut u32,
) -> Status {
    null_check!(hops, kind);
    processor("amdsmi_topo_get_link_type", source, true, |state, a| {
        let b = (destination as usize).wrapping_sub(1);
        if b >= state.scenario.gpus.len() || b == a as usize {
            return INVAL;
        }
        let (link, count) = state.scenario.link(a, b as u32);
        *kind = link;
        *hops = count;
        SUCCESS
    })
}

/// # Safety
/// `node` points to a u32.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_topo_get_numa_node_number(handle: *mut c_void, node: *mut u32) -> Status {
    null_check!(node);
    processor("amdsmi_topo_get_numa_node_number", handle, true, |state, index| {
        match gpu(state, index).numa_node {
            Some(numa) => {
                *node = numa;
                SUCCESS
            }
            None => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `counts` points to an `amdsmi_error_count_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_total_ecc_count(
    handle: *mut c_void,
    counts: *mut ErrorCount,
) -> Status {
    null_check!(counts);
    processor("amdsmi_get_gpu_total_ecc_count", handle, false, |state, index| {
        let spec = gpu(state, index);
        if !spec.ecc {
            return NOT_SUPPORTED;
        }
        *counts = ErrorCount {
            correctable_count: spec.ecc_correctable,
            uncorrectable_count: spec.ecc_uncorrectable,
            deferred_count: 0,
            reserved: [0; 5],
        };
        SUCCESS
    })
}

/// amdsmi.h: the first call (a null `info`) gives the number of bad pages, the second fills
/// that many records: the retired ones (RESERVED, 0), then those pending (PENDING, 1).
///
/// # Safety
/// `count` points to a u32; `info`, unless null, to `*count` records.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_bad_page_info(
    handle: *mut c_void,
    count: *mut u32,
    info: *mut RetiredPage,
) -> Status {
    null_check!(count);
    processor("amdsmi_get_gpu_bad_page_info", handle, false, |state, index| {
        let spec = gpu(state, index);
        if !spec.ecc {
            return NOT_SUPPORTED;
        }
        let statuses = std::iter::repeat_n(0, spec.bad_pages_retired as usize)
            .chain(std::iter::repeat_n(1, spec.bad_pages_pending as usize));
        let statuses: Vec<u32> = statuses.collect();
        if !info.is_null() {
            for (at, &status) in statuses.iter().take(*count as usize).enumerate() {
                let page_address = 0x7_0000_0000 + (u64::from(index) << 32) + ((at as u64) << 12);
                info.add(at).write(RetiredPage { page_address, page_size: 4096, status });
            }
        }
        *count = match info.is_null() {
            true => statuses.len() as u32,
            false => (*count).min(statuses.len() as u32),
        };
        SUCCESS
    })
}

/// A partition mode into the caller's buffer of `length` bytes.
///
/// # Safety
/// `out` points to `length` writable bytes.
unsafe fn partition(
    call: &str,
    handle: *mut c_void,
    out: *mut c_char,
    length: u32,
    mode: fn(&GpuSpec) -> Option<&str>,
) -> Status {
    null_check!(out);
    processor(call, handle, true, |state, index| match mode(gpu(state, index)) {
        Some(text) if (length as usize) > text.len() => {
            put(std::slice::from_raw_parts_mut(out.cast::<u8>(), length as usize), text);
            SUCCESS
        }
        Some(_) => INSUFFICIENT_SIZE,
        None => NOT_SUPPORTED,
    })
}

/// # Safety
/// `out` points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_compute_partition(
    handle: *mut c_void,
    out: *mut c_char,
    length: u32,
) -> Status {
    partition("amdsmi_get_gpu_compute_partition", handle, out, length, |gpu| gpu.compute_partition.as_deref())
}

/// # Safety
/// `out` points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_memory_partition(
    handle: *mut c_void,
    out: *mut c_char,
    length: u32,
) -> Status {
    partition("amdsmi_get_gpu_memory_partition", handle, out, length, |gpu| gpu.memory_partition.as_deref())
}

/// # Safety
/// `info` points to an `amdsmi_kfd_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_kfd_info(handle: *mut c_void, info: *mut KfdInfo) -> Status {
    null_check!(info);
    processor("amdsmi_get_gpu_kfd_info", handle, true, |state, index| {
        *info = KfdInfo {
            kfd_id: 0x4000 + u64::from(index),
            node_id: 2 + index,
            current_partition_id: gpu(state, index).partition_id,
            reserved: [0; 12],
        };
        SUCCESS
    })
}

/// # Safety
/// `info` points to an `amdsmi_driver_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amdsmi_get_gpu_driver_info(handle: *mut c_void, info: *mut DriverInfo) -> Status {
    null_check!(info);
    processor("amdsmi_get_gpu_driver_info", handle, true, |state, _| {
        let mut out = DriverInfo { driver_version: [0; 256], driver_date: [0; 256], driver_name: [0; 256] };
        put(&mut out.driver_version, &state.scenario.driver_version);
        put(&mut out.driver_date, "2025/09/30 00:00");
        put(&mut out.driver_name, "amdgpu");
        *info = out;
        SUCCESS
    })
}
