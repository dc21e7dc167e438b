//! Logs go to stderr only (stdout belongs to the child), one line each, prefixed `gpurun:`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::Verbosity;

/// `gpurun: warning: message`, with the level left out for plain information.
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
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        write!(writer, "gpurun: {level}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Installs the stderr logger. `GPURUN_LOG` (a level, or `target=level,...` directives) wins
/// over -q/-v. (`Targets` rather than `EnvFilter`: no regex engine in a process that stays
/// resident for the whole job.)
pub fn init(verbosity: &Verbosity) {
    let level = match verbosity {
        Verbosity::Quiet => LevelFilter::ERROR,
        Verbosity::Normal => LevelFilter::INFO,
        Verbosity::Debug => LevelFilter::DEBUG,
        Verbosity::Trace => LevelFilter::TRACE,
    };
    let from_env = std::env::var("GPURUN_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = match from_env.as_deref().map(str::parse::<Targets>) {
        Some(Ok(targets)) => targets,
        Some(Err(error)) => {
            eprintln!("gpurun: warning: ignoring GPURUN_LOG ({error}); expected a level like debug, or gpurun=debug");
            Targets::new().with_default(level)
        }
        None => Targets::new().with_default(level),
    };
    let lines =
        tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).event_format(Lines);
    tracing_subscriber::registry().with(lines).with(filter).init();
}
