//! cuda-hold: the CUDA program `make test-gpu` runs where PyTorch is not installed (a GPU
//! machine lent for a few minutes has the driver and nothing else). Through the driver API
//! alone (`libcuda.so.1`, loaded at run time, so it builds anywhere): cuInit, the device at
//! ordinal `--device` among those CUDA_VISIBLE_DEVICES leaves, a context on it, `--mib` MiB
//! allocated and written (so the driver counts them), one JSON line on stdout naming the
//! device, a hold of `--hold` seconds, then exit 0. SIGTERM ends it at once, by that signal,
//! as it would any CUDA program; a failing call exits 1 naming the call and CUDA's error.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: cuda-hold [--mib N] [--hold SECONDS] [--device ORDINAL]

  --mib N           MiB to allocate and write on the device (default 1024)
  --hold SECONDS    how long to keep the context and the memory (default 3)
  --device ORDINAL  the CUDA ordinal among the visible devices (default 0), like cuda:N";

type CuResult = c_int;
type CuDevice = c_int;

struct Options {
    mib: usize,
    hold: Duration,
    device: c_int,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options { mib: 1024, hold: Duration::from_secs(3), device: 0 };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--mib" => {
                options.mib = value()?.parse().map_err(|_| format!("--mib: a number of MiB\n{USAGE}"))?
            }
            "--hold" => {
                let seconds: f64 =
                    value()?.parse().map_err(|_| format!("--hold: a number of seconds\n{USAGE}"))?;
                options.hold = Duration::try_from_secs_f64(seconds).map_err(|e| format!("--hold: {e}"))?;
            }
            "--device" => {
                options.device = value()?.parse().map_err(|_| format!("--device: a CUDA ordinal\n{USAGE}"))?
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(options)
}

/// The driver library and the few entry points used, as cuda.h declares them.
struct Cuda {
    library: libloading::Library,
}

impl Cuda {
    fn load() -> Result<Cuda, String> {
        // SAFETY: loading the NVIDIA driver's libcuda runs its initialisers, which is what
        // every CUDA program does; nothing else is in this process yet.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| format!("cannot load libcuda.so.1 (is the NVIDIA driver installed?): {e}"))?;
        Ok(Cuda { library })
    }

    /// `name`'s function pointer of type `T`.
    ///
    /// # Safety
    /// `T` must be the C signature cuda.h gives `name`.
    unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T, String> {
        // SAFETY: forwarded caller contract on T.
        unsafe { self.library.get::<T>(name.as_bytes()) }
            .map(|symbol| *symbol)
            .map_err(|e| format!("{name}: {e}"))
    }

    /// CUDA's name for an error code, as cuGetErrorName gives it.
    fn error(&self, code: CuResult) -> String {
        type GetErrorName = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
        // SAFETY: cuGetErrorName(CUresult, const char**) in cuda.h.
        let Ok(get) = (unsafe { self.symbol::<GetErrorName>("cuGetErrorName") }) else {
            return code.to_string();
        };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: one out-pointer; the driver points it at a static string.
        match unsafe { get(code, &mut name) } {
            0 if !name.is_null() => {
                // SAFETY: a NUL-terminated static string of the driver's.
                format!("{} ({code})", unsafe { CStr::from_ptr(name) }.to_string_lossy())
            }
            _ => code.to_string(),
        }
    }

    fn check(&self, call: &str, code: CuResult) -> Result<(), String> {
        match code {
            0 => Ok(()),
            code => Err(format!("{call}: {}", self.error(code))),
        }
    }
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and nvidia-smi write a UUID.
fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

fn run(options: &Options) -> Result<(), String> {
    type Init = unsafe extern "C" fn(c_uint) -> CuResult;
    type DeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
    type DeviceGetCount = unsafe extern "C" fn(*mut c_int) -> CuResult;
    type DeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult;
    type CtxCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint, CuDevice) -> CuResult;
    type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> CuResult;
    type MemsetD8 = unsafe extern "C" fn(u64, u8, usize) -> CuResult;
    type CtxSynchronize = unsafe extern "C" fn() -> CuResult;
    let cuda = Cuda::load()?;
    // SAFETY: each symbol's type is the signature cuda.h declares for its name (the _v2 entry
    // points are what the headers map cuCtxCreate, cuMemAlloc and cuMemsetD8 to).
    let (init, device_get, device_count, device_uuid, ctx_create, mem_alloc, memset, synchronize) = unsafe {
        (
            cuda.symbol::<Init>("cuInit")?,
            cuda.symbol::<DeviceGet>("cuDeviceGet")?,
            cuda.symbol::<DeviceGetCount>("cuDeviceGetCount")?,
            cuda.symbol::<DeviceGetUuid>("cuDeviceGetUuid")?,
            cuda.symbol::<CtxCreate>("cuCtxCreate_v2")?,
            cuda.symbol::<MemAlloc>("cuMemAlloc_v2")?,
            cuda.symbol::<MemsetD8>("cuMemsetD8_v2")?,
            cuda.symbol::<CtxSynchronize>("cuCtxSynchronize")?,
        )
    };
    let (mut count, mut device, mut uuid, mut context, mut pointer) =
        (0, 0, [0u8; 16], std::ptr::null_mut(), 0u64);
    let bytes = options.mib << 20;
    // SAFETY: each call gets valid out-pointers to locals of the types cuda.h names; the
    // context and the allocation live until the process exits, which frees both.
    unsafe {
        cuda.check("cuInit", init(0))?;
        cuda.check("cuDeviceGetCount", device_count(&mut count))?;
        cuda.check(
            &format!("cuDeviceGet({}) of {count} visible", options.device),
            device_get(&mut device, options.device),
        )?;
        cuda.check("cuDeviceGetUuid", device_uuid(&mut uuid, device))?;
        cuda.check("cuCtxCreate", ctx_create(&mut context, 0, device))?;
        if bytes > 0 {
            cuda.check("cuMemAlloc", mem_alloc(&mut pointer, bytes))?;
            cuda.check("cuMemsetD8", memset(pointer, 1, bytes))?;
        }
        cuda.check("cuCtxSynchronize", synchronize())?;
    }
    println!(
        "{{\"pid\":{},\"ordinal\":{},\"visible\":{count},\"uuid\":\"{}\",\"mib\":{}}}",
        std::process::id(),
        options.device,
        uuid_text(&uuid),
        options.mib
    );
    std::thread::sleep(options.hold);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("cuda-hold: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("cuda-hold: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_written_as_nvml_writes_them() {
        let bytes = [0x8f, 0x3b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff];
        assert_eq!(uuid_text(&bytes), "GPU-8f3b0001-0203-0405-0607-08090a0b0cff");
    }

    #[test]
    fn options_are_checked() {
        let args = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let parsed = parse(&args(&["--mib", "64", "--hold", "0.5", "--device", "1"])).unwrap();
        assert_eq!((parsed.mib, parsed.hold, parsed.device), (64, Duration::from_millis(500), 1));
        assert!(parse(&args(&["--mib", "lots"])).is_err());
        assert!(parse(&args(&["--hold", "-1"])).is_err());
        assert!(parse(&args(&["--bogus"])).is_err());
    }
}
