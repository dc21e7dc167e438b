//! Logs go to stderr only (stdout belongs to the child), one line each: `gpurun: warning: ...`
//! as text, or one JSON object per line with `--log-format json` (for log shippers).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::options::{LogFormat, Verbosity};

/// Whether `--log-format json` is in force, for the few messages printed outside tracing (the
/// final error, the report).
static JSON: AtomicBool = AtomicBool::new(false);

pub(crate) fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Before any setting is read: JSON lines if the command line asks for them (`--log-format
/// json` or `=json` among gpurun's own words, before `--`), else if GPURUN_LOG_FORMAT does. A
/// usage, variable or config error then reaches a log shipper as JSON too; `init` settles the
/// format once the settings are read.
pub(crate) fn assume_format(args: &[std::ffi::OsString]) {
    let mut asked = None;
    let mut words = args.iter().skip(1).map(|word| word.to_string_lossy());
    while let Some(word) = words.next() {
        match word.as_ref() {
            "--" => break,
            "--log-format" => asked = words.next().map(|value| value == "json"),
            other => {
                if let Some(value) = other.strip_prefix("--log-format=") {
                    asked = Some(value == "json");
                }
            }
        }
    }
    let json =
        asked.unwrap_or_else(|| std::env::var("GPURUN_LOG_FORMAT").is_ok_and(|value| value.trim() == "json"));
    JSON.store(json, Ordering::Relaxed);
}

/// The level words of JSON lines, of GPURUN_LOG and of the help: one vocabulary. (Text lines
/// say `warning:`, as compilers do.)
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

struct Lines;

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        match *event.metadata().level() {
            Level::INFO => write!(writer, "gpurun: ")?,
            Level::WARN => write!(writer, "gpurun: warning: ")?,
            ref level => write!(writer, "gpurun: {}: ", level_name(level))?,
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Collects an event's fields for the JSON line.
#[derive(Default)]
struct Fields(serde_json::Map<String, serde_json::Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), serde_json::Value::from(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), serde_json::Value::from(value));
    }
}

struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        writeln!(writer, "{}", json_line(level_name(event.metadata().level()), fields.0))
    }
}

fn json_line(level: &str, fields: serde_json::Map<String, serde_json::Value>) -> String {
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut line = serde_json::Map::new();
    line.insert("time".to_owned(), serde_json::Value::from((time * 1000.0).round() / 1000.0));
    line.insert("level".to_owned(), serde_json::Value::from(level));
    line.extend(fields);
    serde_json::Value::Object(line).to_string()
}

/// Prints one message outside tracing, in the format in force (the final error, for one).
pub(crate) fn print_outside(level: &str, message: &str, extra: Option<(&str, serde_json::Value)>) {
    if is_json() {
        let mut fields = serde_json::Map::new();
        fields.insert("message".to_owned(), serde_json::Value::from(message));
        if let Some((name, value)) = extra {
            fields.insert(name.to_owned(), value);
        }
        eprintln!("{}", json_line(level, fields));
    } else if level == "error" || level == "info" {
        eprintln!("gpurun: {message}");
    } else if level == "warn" {
        eprintln!("gpurun: warning: {message}");
    } else {
        eprintln!("gpurun: {level}: {message}");
    }
}

/// Installs the stderr logger. `GPURUN_LOG` (a level, or `target=level,...` directives) wins
/// over -q/-v. (`Targets` rather than `EnvFilter`: no regex engine in a process that stays
/// resident for the whole job.)
pub(crate) fn init(verbosity: &Verbosity, format: LogFormat) {
    JSON.store(format == LogFormat::Json, Ordering::Relaxed);
    let level = match verbosity {
        Verbosity::Quiet => LevelFilter::ERROR,
        Verbosity::Normal => LevelFilter::INFO,
        Verbosity::Debug => LevelFilter::DEBUG,
        Verbosity::Trace => LevelFilter::TRACE,
    };
    // "warning" is what text lines say: take it for "warn".
    let from_env = std::env::var("GPURUN_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.replace("warning", "warn"));
    let filter = match from_env.as_deref().map(str::parse::<Targets>) {
        Some(Ok(targets)) => targets,
        Some(Err(error)) => {
            print_outside(
                "warn",
                &format!("ignoring GPURUN_LOG ({error}); expected a level like debug, or gpurun=debug"),
                None,
            );
            Targets::new().with_default(level)
        }
        None => Targets::new().with_default(level),
    };
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false);
    match format {
        LogFormat::Text => tracing_subscriber::registry().with(layer.event_format(Lines)).with(filter).init(),
        LogFormat::Json => {
            tracing_subscriber::registry().with(layer.event_format(JsonLines)).with(filter).init()
        }
    }
}
