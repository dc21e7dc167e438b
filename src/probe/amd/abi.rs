//! The part of AMD SMI's C ABI gpurun calls, written from amdsmi.h as of ROCm 7.0 (the header
//! the PyPI `amdsmi` 7.0.2 bindings were generated from). The library is opened once and left
//! loaded for the life of the process, like NVML.
//!
//! Older libraries lay these out otherwise: 6.3 has no `amdsmi_get_gpu_enumeration_info` and a
//! 32-byte process name; 6.4 has both as 7.0 does, but numbers the link types the other way
//! round and has a shorter `amdsmi_power_info_t` (PyPI amdsmi 6.3.3, 6.4.4 and 7.0.2 compared).
//! So only AMD SMI 26 (ROCm 7.0) and later is read: a library without that function, or whose
//! `amdsmi_get_lib_version` is older, is refused rather than misread.

use std::ffi::{c_char, c_float, c_void};
use std::path::Path;

pub(super) type Handle = *mut c_void;

/// An `amdsmi_status_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Status(pub(super) u32);

impl Status {
    pub(super) const SUCCESS: Status = Status(0);
    pub(super) const NOT_SUPPORTED: Status = Status(2);
    pub(super) const NO_PERM: Status = Status(10);
    pub(super) const OUT_OF_RESOURCES: Status = Status(15);
    pub(super) const DRIVER_NOT_LOADED: Status = Status(34);

    pub(super) fn ok(self) -> Result<(), Status> {
        match self {
            Status::SUCCESS => Ok(()),
            error => Err(error),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // amdsmi.h's names, which users search for.
        let name = match self.0 {
            0 => "SUCCESS",
            1 => "INVAL",
            2 => "NOT_SUPPORTED",
            3 => "NOT_YET_IMPLEMENTED",
            7 => "API_FAILED",
            8 => "TIMEOUT",
            10 => "NO_PERM: permission denied",
            15 => "OUT_OF_RESOURCES",
            18 => "INIT_ERROR",
            30 => "BUSY",
            31 => "NOT_FOUND",
            32 => "NOT_INIT",
            34 => "DRIVER_NOT_LOADED",
            41 => "INSUFFICIENT_SIZE",
            _ => return write!(f, "AMDSMI_STATUS {}", self.0),
        };
        write!(f, "AMDSMI_STATUS_{name}")
    }
}

/// For `-vv`'s trace of each call.
impl crate::probe::calls::Answer for Status {
    fn answer(&self) -> String {
        match *self {
            Status::SUCCESS => "ok".to_owned(),
            error => error.to_string(),
        }
    }
}

pub(super) const INIT_AMD_GPUS: u64 = 2;
pub(super) const MEM_TYPE_VRAM: u32 = 0;
pub(super) const TEMPERATURE_TYPE_EDGE: u32 = 0;
pub(super) const TEMPERATURE_TYPE_HOTSPOT: u32 = 1;
pub(super) const TEMP_CURRENT: u32 = 0;
pub(super) const LINK_TYPE_XGMI: u32 = 2;
/// amdsmi.h: `AMDSMI_GPU_UUID_SIZE`.
pub(super) const UUID_SIZE: usize = 38;
/// A value AMD SMI fills in where it has none (`UINT32_MAX`).
pub(super) const NO_VALUE_U32: u32 = u32::MAX;

/// `amdsmi_version_t` as ROCm 7.0 has it. 6.x's began with a `year` (24, 25), which reads here
/// as the major version: below 26 either way.
#[repr(C)]
pub(super) struct Version {
    pub(super) major: u32,
    pub(super) minor: u32,
    pub(super) release: u32,
    pub(super) build: *const c_char,
}

/// The first AMD SMI whose structs gpurun reads (ROCm 7.0's).
pub(super) const FIRST_MAJOR: u32 = 26;

#[repr(C)]
pub(super) struct AsicInfo {
    pub(super) market_name: [u8; 256],
    pub(super) vendor_id: u32,
    pub(super) vendor_name: [u8; 256],
    pub(super) subvendor_id: u32,
    pub(super) device_id: u64,
    pub(super) rev_id: u32,
    pub(super) asic_serial: [u8; 256],
    pub(super) oam_id: u32,
    pub(super) num_of_compute_units: u32,
    pub(super) target_graphics_version: u64,
    pub(super) subsystem_id: u32,
    pub(super) reserved: [u32; 21],
}

#[repr(C)]
pub(super) struct EnumerationInfo {
    pub(super) drm_render: u32,
    pub(super) drm_card: u32,
    pub(super) hsa_id: u32,
    pub(super) hip_id: u32,
    pub(super) hip_uuid: [u8; 256],
}

#[repr(C)]
pub(super) struct EngineUsage {
    pub(super) gfx_activity: u32,
    pub(super) umc_activity: u32,
    pub(super) mm_activity: u32,
    pub(super) reserved: [u32; 13],
}

#[repr(C)]
pub(super) struct PowerInfo {
    pub(super) socket_power: u64,
    pub(super) current_socket_power: u32,
    pub(super) average_socket_power: u32,
    pub(super) gfx_voltage: u64,
    pub(super) soc_voltage: u64,
    pub(super) mem_voltage: u64,
    pub(super) power_limit: u32,
    pub(super) reserved: [u64; 18],
}

#[repr(C)]
pub(super) struct ProcInfo {
    pub(super) name: [u8; 256],
    pub(super) pid: u32,
    pub(super) mem: u64,
    /// engine_usage (gfx, enc: u64; reserved: 12 x u32).
    pub(super) engine_usage: [u64; 8],
    /// memory_usage (gtt_mem, cpu_mem, vram_mem: u64; reserved: 10 x u32).
    pub(super) memory_usage: [u64; 8],
    pub(super) container_name: [u8; 256],
    pub(super) cu_occupancy: u32,
    pub(super) reserved: [u32; 11],
}

#[repr(C)]
pub(super) struct ErrorCount {
    pub(super) correctable_count: u64,
    pub(super) uncorrectable_count: u64,
    pub(super) deferred_count: u64,
    pub(super) reserved: [u64; 5],
}

#[repr(C)]
pub(super) struct RetiredPage {
    pub(super) page_address: u64,
    pub(super) page_size: u64,
    /// `AMDSMI_MEM_PAGE_STATUS_`: RESERVED 0, PENDING 1, UNRESERVABLE 2.
    pub(super) status: u32,
}

/// A bad page waiting to be retired at the next reset.
pub(super) const PAGE_STATUS_PENDING: u32 = 1;

#[repr(C)]
pub(super) struct KfdInfo {
    pub(super) kfd_id: u64,
    pub(super) node_id: u32,
    pub(super) current_partition_id: u32,
    pub(super) reserved: [u32; 12],
}

#[repr(C)]
pub(super) struct DriverInfo {
    pub(super) driver_version: [u8; 256],
    pub(super) driver_date: [u8; 256],
    pub(super) driver_name: [u8; 256],
}

/// All zeros: how each struct is handed to the library (every field is plain data).
pub(super) fn zeroed<T: Plain>() -> T {
    // SAFETY: `Plain` types are repr(C) structs of integers and byte arrays, for which all
    // zeros is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Structs of integers and byte arrays only.
pub(super) trait Plain {}
impl Plain for AsicInfo {}
impl Plain for EnumerationInfo {}
impl Plain for EngineUsage {}
impl Plain for PowerInfo {}
impl Plain for ProcInfo {}
impl Plain for ErrorCount {}
impl Plain for KfdInfo {}
impl Plain for RetiredPage {}
impl Plain for DriverInfo {}

/// A NUL-terminated field as text (lossy: a name is for people).
pub(super) fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).trim().to_owned()
}

/// The functions, looked up once.
pub(super) struct Api {
    pub(super) init: unsafe extern "C" fn(u64) -> Status,
    pub(super) lib_version: unsafe extern "C" fn(*mut Version) -> Status,
    pub(super) socket_handles: unsafe extern "C" fn(*mut u32, *mut Handle) -> Status,
    pub(super) processor_handles: unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status,
    pub(super) device_uuid: unsafe extern "C" fn(Handle, *mut u32, *mut c_char) -> Status,
    pub(super) enumeration_info: unsafe extern "C" fn(Handle, *mut EnumerationInfo) -> Status,
    pub(super) asic_info: unsafe extern "C" fn(Handle, *mut AsicInfo) -> Status,
    pub(super) device_bdf: unsafe extern "C" fn(Handle, *mut u64) -> Status,
    pub(super) memory_total: unsafe extern "C" fn(Handle, u32, *mut u64) -> Status,
    pub(super) memory_usage: unsafe extern "C" fn(Handle, u32, *mut u64) -> Status,
    pub(super) activity: unsafe extern "C" fn(Handle, *mut EngineUsage) -> Status,
    pub(super) temp_metric: unsafe extern "C" fn(Handle, u32, u32, *mut i64) -> Status,
    pub(super) power_info: unsafe extern "C" fn(Handle, *mut PowerInfo) -> Status,
    pub(super) energy_count: unsafe extern "C" fn(Handle, *mut u64, *mut c_float, *mut u64) -> Status,
    pub(super) process_list: unsafe extern "C" fn(Handle, *mut u32, *mut ProcInfo) -> Status,
    pub(super) link_type: unsafe extern "C" fn(Handle, Handle, *mut u64, *mut u32) -> Status,
    pub(super) numa_node: unsafe extern "C" fn(Handle, *mut u32) -> Status,
    pub(super) total_ecc_count: unsafe extern "C" fn(Handle, *mut ErrorCount) -> Status,
    pub(super) compute_partition: unsafe extern "C" fn(Handle, *mut c_char, u32) -> Status,
    pub(super) memory_partition: unsafe extern "C" fn(Handle, *mut c_char, u32) -> Status,
    pub(super) kfd_info: unsafe extern "C" fn(Handle, *mut KfdInfo) -> Status,
    pub(super) bad_page_info: unsafe extern "C" fn(Handle, *mut u32, *mut RetiredPage) -> Status,
    pub(super) driver_info: unsafe extern "C" fn(Handle, *mut DriverInfo) -> Status,
}

/// Why the library could not be used.
pub(super) enum LoadError {
    /// dlopen failed.
    Missing(String),
    /// A symbol gpurun needs is not there (not AMD SMI, or one older than ROCm 7.0).
    Symbol(String),
}

impl Api {
    /// Loads `library` and looks up every function, or says which is missing.
    pub(super) fn load(library: &Path) -> Result<&'static Api, LoadError> {
        // SAFETY: loading a shared library runs its initialisers; AMD SMI's (and the
        // simulator's) have no preconditions. It stays loaded for the process's life.
        let library: &'static libloading::Library = Box::leak(Box::new(
            unsafe { libloading::Library::new(library.as_os_str()) }
                .map_err(|e| LoadError::Missing(e.to_string()))?,
        ));
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the type is amdsmi.h's signature of this function (ROCm 7.0), and
                // the library outlives the pointer (leaked above).
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|_| LoadError::Symbol($name.to_owned()))?
            };
        }
        Ok(Box::leak(Box::new(Api {
            // First: the one ROCm 7.0 added, whose absence means the older structs.
            enumeration_info: symbol!("amdsmi_get_gpu_enumeration_info"),
            init: symbol!("amdsmi_init"),
            lib_version: symbol!("amdsmi_get_lib_version"),
            socket_handles: symbol!("amdsmi_get_socket_handles"),
            processor_handles: symbol!("amdsmi_get_processor_handles"),
            device_uuid: symbol!("amdsmi_get_gpu_device_uuid"),
            asic_info: symbol!("amdsmi_get_gpu_asic_info"),
            device_bdf: symbol!("amdsmi_get_gpu_device_bdf"),
            memory_total: symbol!("amdsmi_get_gpu_memory_total"),
            memory_usage: symbol!("amdsmi_get_gpu_memory_usage"),
            activity: symbol!("amdsmi_get_gpu_activity"),
            temp_metric: symbol!("amdsmi_get_temp_metric"),
            power_info: symbol!("amdsmi_get_power_info"),
            energy_count: symbol!("amdsmi_get_energy_count"),
            process_list: symbol!("amdsmi_get_gpu_process_list"),
            link_type: symbol!("amdsmi_topo_get_link_type"),
            numa_node: symbol!("amdsmi_topo_get_numa_node_number"),
            total_ecc_count: symbol!("amdsmi_get_gpu_total_ecc_count"),
            compute_partition: symbol!("amdsmi_get_gpu_compute_partition"),
            memory_partition: symbol!("amdsmi_get_gpu_memory_partition"),
            kfd_info: symbol!("amdsmi_get_gpu_kfd_info"),
            bad_page_info: symbol!("amdsmi_get_gpu_bad_page_info"),
            driver_info: symbol!("amdsmi_get_gpu_driver_info"),
        })))
    }
}

/// One AMD SMI answer: the value, or the status it failed with.
pub(super) type Answered<T> = Result<T, Status>;

/// Fills a zeroed `T` through `call`.
fn filled<T: Plain>(call: impl FnOnce(*mut T) -> Status) -> Answered<T> {
    let mut value: T = zeroed();
    call(&mut value).ok()?;
    Ok(value)
}

/// A text answer written into a buffer of `N` bytes.
fn written<const N: usize>(call: impl FnOnce(*mut c_char, u32) -> Status) -> Answered<String> {
    let mut buffer = [0u8; N];
    call(buffer.as_mut_ptr().cast(), N as u32).ok()?;
    Ok(text(&buffer))
}

/// Safe calls. A `Handle` only ever comes from the library (`socket_handles`,
/// `processor_handles`; the type is private to `probe::amd`), and AMD SMI answers a handle it
/// does not know with INVAL; every other pointer is to a value or buffer of this frame, of the
/// size amdsmi.h gives, so the library writes only where it may.
// SAFETY (each unsafe block below): as said above.
impl Api {
    /// The library's version: major, minor, release (callable before `amdsmi_init`).
    pub(super) fn version(&self) -> Answered<[u32; 3]> {
        let mut version = Version { major: 0, minor: 0, release: 0, build: std::ptr::null() };
        // SAFETY: an amdsmi_version_t to fill (its build string is the library's, not read).
        unsafe { (self.lib_version)(&mut version) }.ok()?;
        Ok([version.major, version.minor, version.release])
    }

    pub(super) fn init(&self) -> Status {
        // SAFETY: flags by value.
        unsafe { (self.init)(INIT_AMD_GPUS) }
    }

    /// The handles a counting call gives: asked for the count (null array), then filled.
    fn handles(mut call: impl FnMut(*mut u32, *mut Handle) -> Status) -> Answered<Vec<Handle>> {
        let mut count = 0u32;
        call(&mut count, std::ptr::null_mut()).ok()?;
        let mut found = vec![std::ptr::null_mut(); count as usize];
        call(&mut count, found.as_mut_ptr()).ok()?;
        found.truncate(count as usize);
        Ok(found)
    }

    pub(super) fn sockets(&self) -> Answered<Vec<Handle>> {
        // SAFETY: `count` and `out` as `handles` sizes them.
        Api::handles(|count, out| unsafe { (self.socket_handles)(count, out) })
    }

    pub(super) fn processors(&self, socket: Handle) -> Answered<Vec<Handle>> {
        // SAFETY: as for `sockets`; `socket` came from them.
        Api::handles(|count, out| unsafe { (self.processor_handles)(socket, count, out) })
    }

    pub(super) fn uuid(&self, gpu: Handle) -> Answered<String> {
        let mut buffer = [0u8; UUID_SIZE];
        let mut length = buffer.len() as u32;
        // SAFETY: `length` is the size of `buffer`.
        unsafe { (self.device_uuid)(gpu, &mut length, buffer.as_mut_ptr().cast()) }.ok()?;
        Ok(text(&buffer))
    }

    pub(super) fn enumeration(&self, gpu: Handle) -> Answered<EnumerationInfo> {
        // SAFETY: a zeroed amdsmi_enumeration_info_t to fill.
        filled(|info| unsafe { (self.enumeration_info)(gpu, info) })
    }

    pub(super) fn asic(&self, gpu: Handle) -> Answered<AsicInfo> {
        // SAFETY: a zeroed amdsmi_asic_info_t to fill.
        filled(|info| unsafe { (self.asic_info)(gpu, info) })
    }

    pub(super) fn bdf(&self, gpu: Handle) -> Answered<u64> {
        let mut bdf = 0u64;
        // SAFETY: a u64 (amdsmi_bdf_t) to write.
        unsafe { (self.device_bdf)(gpu, &mut bdf) }.ok()?;
        Ok(bdf)
    }

    pub(super) fn vram_total(&self, gpu: Handle) -> Answered<u64> {
        let mut bytes = 0u64;
        // SAFETY: a u64 to write.
        unsafe { (self.memory_total)(gpu, MEM_TYPE_VRAM, &mut bytes) }.ok()?;
        Ok(bytes)
    }

    pub(super) fn vram_used(&self, gpu: Handle) -> Answered<u64> {
        let mut bytes = 0u64;
        // SAFETY: a u64 to write.
        unsafe { (self.memory_usage)(gpu, MEM_TYPE_VRAM, &mut bytes) }.ok()?;
        Ok(bytes)
    }

    pub(super) fn engine_usage(&self, gpu: Handle) -> Answered<EngineUsage> {
        // SAFETY: a zeroed amdsmi_engine_usage_t to fill.
        filled(|info| unsafe { (self.activity)(gpu, info) })
    }

    pub(super) fn temperature(&self, gpu: Handle, sensor: u32) -> Answered<i64> {
        let mut celsius = 0i64;
        // SAFETY: an i64 to write.
        unsafe { (self.temp_metric)(gpu, sensor, TEMP_CURRENT, &mut celsius) }.ok()?;
        Ok(celsius)
    }

    pub(super) fn power(&self, gpu: Handle) -> Answered<PowerInfo> {
        // SAFETY: a zeroed amdsmi_power_info_t to fill.
        filled(|info| unsafe { (self.power_info)(gpu, info) })
    }

    /// The energy counter in millijoules.
    pub(super) fn energy_mj(&self, gpu: Handle) -> Answered<f64> {
        let (mut counter, mut resolution, mut at) = (0u64, 0f32, 0u64);
        // SAFETY: a u64, a float and a u64 to write.
        unsafe { (self.energy_count)(gpu, &mut counter, &mut resolution, &mut at) }.ok()?;
        Ok(counter as f64 * f64::from(resolution) / 1000.0)
    }

    /// One try at the process list with room for `room` entries: the status, the count the
    /// library gave, and the entries.
    pub(super) fn process_list(&self, gpu: Handle, room: u32) -> (Status, u32, Vec<ProcInfo>) {
        let mut entries: Vec<ProcInfo> = (0..room).map(|_| zeroed()).collect();
        let mut count = room;
        // SAFETY: `entries` has `count` zeroed amdsmi_proc_info_t.
        let status = unsafe { (self.process_list)(gpu, &mut count, entries.as_mut_ptr()) };
        (status, count, entries)
    }

    /// The link type between two processors (`LINK_TYPE_XGMI`, PCIe ...).
    pub(super) fn link(&self, a: Handle, b: Handle) -> Answered<u32> {
        let (mut hops, mut kind) = (0u64, 0u32);
        // SAFETY: a u64 and a u32 to write.
        unsafe { (self.link_type)(a, b, &mut hops, &mut kind) }.ok()?;
        Ok(kind)
    }

    pub(super) fn numa(&self, gpu: Handle) -> Answered<u32> {
        let mut node = 0u32;
        // SAFETY: a u32 to write.
        unsafe { (self.numa_node)(gpu, &mut node) }.ok()?;
        Ok(node)
    }

    pub(super) fn ecc(&self, gpu: Handle) -> Answered<ErrorCount> {
        // SAFETY: a zeroed amdsmi_error_count_t to fill.
        filled(|counts| unsafe { (self.total_ecc_count)(gpu, counts) })
    }

    pub(super) fn compute_mode(&self, gpu: Handle) -> Answered<String> {
        // SAFETY: `out` is a buffer of `length` bytes.
        written::<256>(|out, length| unsafe { (self.compute_partition)(gpu, out, length) })
    }

    pub(super) fn memory_mode(&self, gpu: Handle) -> Answered<String> {
        // SAFETY: `out` is a buffer of `length` bytes.
        written::<256>(|out, length| unsafe { (self.memory_partition)(gpu, out, length) })
    }

    /// The bad pages' statuses: counted first (a null array), then read.
    pub(super) fn bad_pages(&self, gpu: Handle) -> Answered<Vec<u32>> {
        let mut count = 0u32;
        // SAFETY: a u32 to write, and no array.
        unsafe { (self.bad_page_info)(gpu, &mut count, std::ptr::null_mut()) }.ok()?;
        let mut pages: Vec<RetiredPage> = (0..count).map(|_| zeroed()).collect();
        // SAFETY: `pages` has `count` zeroed records.
        unsafe { (self.bad_page_info)(gpu, &mut count, pages.as_mut_ptr()) }.ok()?;
        Ok(pages.iter().take(count as usize).map(|page| page.status).collect())
    }

    pub(super) fn kfd(&self, gpu: Handle) -> Answered<KfdInfo> {
        // SAFETY: a zeroed amdsmi_kfd_info_t to fill.
        filled(|info| unsafe { (self.kfd_info)(gpu, info) })
    }

    pub(super) fn driver(&self, gpu: Handle) -> Answered<DriverInfo> {
        // SAFETY: a zeroed amdsmi_driver_info_t to fill.
        filled(|info| unsafe { (self.driver_info)(gpu, info) })
    }
}

/// `amdsmi_bdf_t` (function : 3, device : 5, bus : 8, domain : 48) as `0000:0c:00.0`.
pub(super) fn bdf_text(bdf: u64) -> String {
    format!("{:04x}:{:02x}:{:02x}.{:x}", bdf >> 16, (bdf >> 8) & 0xff, (bdf >> 3) & 0x1f, bdf & 0x7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_have_the_sizes_of_rocm_7_0() {
        use std::mem::size_of;
        // ctypes.sizeof of each struct in the PyPI amdsmi 7.0.2 bindings.
        assert_eq!(size_of::<AsicInfo>(), 896);
        assert_eq!(size_of::<EnumerationInfo>(), 272);
        assert_eq!(size_of::<EngineUsage>(), 64);
        assert_eq!(size_of::<PowerInfo>(), 192);
        assert_eq!(size_of::<ProcInfo>(), 704);
        assert_eq!(size_of::<ErrorCount>(), 64);
        assert_eq!(size_of::<KfdInfo>(), 64);
        assert_eq!(size_of::<DriverInfo>(), 768);
        assert_eq!(size_of::<RetiredPage>(), 24);
    }

    #[test]
    fn a_bdf_reads_as_lspci_writes_it() {
        let bdf = (0xc6 << 8) | (0x1f << 3) | 0x7;
        assert_eq!(bdf_text(bdf), "0000:c6:1f.7");
        assert_eq!(bdf_text(1 << 16), "0001:00:00.0");
    }

    #[test]
    fn statuses_read_as_amdsmi_h_names_them() {
        assert_eq!(Status(34).to_string(), "AMDSMI_STATUS_DRIVER_NOT_LOADED");
        assert_eq!(Status(99).to_string(), "AMDSMI_STATUS 99");
    }
}
