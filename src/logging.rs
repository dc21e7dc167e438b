//! Logs go to stderr only (stdout belongs to the child), one line each, prefixed `gpurun:`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

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

/// Installs the stderr logger. `GPURUN_LOG` (EnvFilter syntax) wins over -q/-v.
pub fn init(verbosity: &Verbosity) {
    let default = match verbosity {
        Verbosity::Quiet => "error",
        Verbosity::Normal => "info",
        Verbosity::Debug => "debug",
        Verbosity::Trace => "trace",
    };
    let filter = EnvFilter::try_from_env("GPURUN_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).event_format(Lines).init();
}
