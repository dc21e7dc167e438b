//! A simulated HIP program: resolves `ROCR_VISIBLE_DEVICES` and `HIP_VISIBLE_DEVICES` (or
//! `CUDA_VISIBLE_DEVICES`) as the ROCm runtime does (`amdsmi_sim::hip`), registers its PID and
//! memory on the devices it uses (so the simulated AMD SMI lists it), prints one JSON line of
//! what it saw, holds them for `--sleep`, then exits with `--exit`.

use std::process::ExitCode;
use std::time::Duration;

use amdsmi_sim::hip::{self, HipDevice};
use amdsmi_sim::scenario::Source;
use sim_shared::registry;

const USAGE: &str = "usage: sim-hip [--mem SIZE] [--use N | --device LIST] [--sleep SECONDS] [--exit CODE] [--quiet] [--count]
  --mem SIZE       memory taken on each device it uses (binary units; default 1GiB)
  --use N          use only the first N visible devices
  --device LIST    use these HIP ordinals, like hipSetDevice(N) (an error if one is not visible)
  --sleep SECONDS  how long to hold the devices (default 0)
  --exit CODE      exit status once done (default 0)
  --quiet          print nothing on stdout
  --count          print how many devices HIP enumerates (hipGetDeviceCount) and exit";

struct Options {
    mem_bytes: u64,
    use_count: Option<usize>,
    ordinals: Option<Vec<usize>>,
    sleep: Duration,
    exit_code: u8,
    quiet: bool,
    count: bool,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        mem_bytes: 1 << 30,
        use_count: None,
        ordinals: None,
        sleep: Duration::ZERO,
        exit_code: 0,
        quiet: false,
        count: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().cloned().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let number =
            |text: String| text.trim().parse::<f64>().map_err(|_| format!("{flag} {text:?} is not a number"));
        match flag.as_str() {
            "--mem" => options.mem_bytes = sim_shared::parse_size(&value()?)?,
            "--use" => options.use_count = Some(number(value()?)? as usize),
            "--device" => {
                let list = value()?;
                let parsed: Result<Vec<usize>, _> =
                    list.split(',').map(|o| o.trim().parse::<usize>()).collect();
                options.ordinals =
                    Some(parsed.map_err(|_| format!("--device {list:?} is not a list of ordinals"))?);
            }
            "--sleep" => options.sleep = Duration::from_secs_f64(number(value()?)?.max(0.0)),
            "--exit" => options.exit_code = number(value()?)? as u8,
            "--quiet" => options.quiet = true,
            "--count" => options.count = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    Ok(options)
}

fn report(devices: &[HipDevice], registered: bool) {
    let quoted =
        |value: Option<String>| value.map_or("null".to_owned(), |v| serde_json::Value::from(v).to_string());
    let devices: Vec<String> = devices
        .iter()
        .map(|d| format!(r#"{{"ordinal":{},"smi_index":{},"uuid":"{}"}}"#, d.ordinal, d.smi_index, d.uuid))
        .collect();
    let env = |name: &str| quoted(std::env::var(name).ok());
    println!(
        r#"{{"pid":{},"registered":{registered},"devices":[{}],"env":{{"ROCR_VISIBLE_DEVICES":{},"HIP_VISIBLE_DEVICES":{},"CUDA_VISIBLE_DEVICES":{}}}}}"#,
        std::process::id(),
        devices.join(","),
        env("ROCR_VISIBLE_DEVICES"),
        env("HIP_VISIBLE_DEVICES"),
        env("CUDA_VISIBLE_DEVICES"),
    );
}

fn run() -> Result<u8, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = parse_options(&args)?;
    let source = Source::from_env();
    let scenario = source.load()?;
    let state_dir = source.state_dir();
    let var = |name: &str| std::env::var(name).ok();
    let visible = hip::visible_devices(
        &scenario,
        var("ROCR_VISIBLE_DEVICES").as_deref(),
        var("HIP_VISIBLE_DEVICES").as_deref(),
        var("CUDA_VISIBLE_DEVICES").as_deref(),
    );
    if options.count {
        println!("{}", visible.len());
        return Ok(0);
    }
    let used: Vec<HipDevice> = match &options.ordinals {
        Some(ordinals) => ordinals
            .iter()
            .map(|&o| {
                visible
                    .get(o)
                    .cloned()
                    .ok_or_else(|| format!("hipErrorInvalidDevice: ordinal {o} ({} visible)", visible.len()))
            })
            .collect::<Result<_, _>>()?,
        None => visible.into_iter().take(options.use_count.unwrap_or(usize::MAX)).collect(),
    };
    let pid = std::process::id();
    if !used.is_empty() {
        let entries: Vec<(String, u64)> = used.iter().map(|d| (d.uuid.clone(), options.mem_bytes)).collect();
        registry::register(&state_dir, pid, &entries)
            .map_err(|e| format!("cannot register in {}: {e}", state_dir.display()))?;
        registry::release_on_termination(registry::entry_path(&state_dir, pid));
    }
    if !options.quiet {
        report(&used, !used.is_empty());
    }
    std::thread::sleep(options.sleep);
    if !used.is_empty() {
        registry::unregister(&state_dir, pid);
    }
    Ok(options.exit_code)
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("sim-hip: {message}");
            ExitCode::from(1)
        }
    }
}
