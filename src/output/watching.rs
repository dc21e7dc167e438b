//! `--list --watch [SECONDS]` (as `watch nvidia-smi`, `nvitop`, `gpustat -i`): the listing
//! again every SECONDS (2 by default). On a terminal each frame replaces the last in place
//! (cursor home, erase the screen: what `watch` does), under a header with the interval and
//! the time; to a pipe or a file, frames follow each other whole; with `--json`, one JSON
//! object per line per refresh, with the time it was taken (`sampled_at`). Ctrl-C ends it
//! with status 0, as `watch` and `nvitop` end; TERM and HUP end it as they end any program
//! (128+N); Ctrl-Z stops it and `fg` redraws; a resized terminal is redrawn at once.

use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime};

use crate::exit_code::Exit;
use crate::options::clock;
use crate::process::signals::{stop_self, Receiver};
use crate::process::stdio::print;

/// Cursor home, then erase the screen: the next frame is drawn over the last.
const REDRAW: &str = "\x1b[H\x1b[2J";

/// How a frame is written: to a terminal (in place), to a pipe (whole frames), or JSON lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Terminal,
    Pipe,
    JsonLines,
}

/// One frame as written: `text` is the listing (or its JSON object, on one line already).
fn framed(output: Output, every: Duration, text: &str, at: SystemTime) -> String {
    let header = || {
        let time = clock::rfc3339(at);
        format!(
            "Every {}: gpurun --list    {} UTC\n\n",
            crate::options::duration::shown(every),
            &time[..19].replace('T', " ")
        )
    };
    match output {
        Output::Terminal => format!("{REDRAW}{}{text}", header()),
        Output::Pipe => format!("{}{text}\n", header()),
        Output::JsonLines => format!("{text}\n"),
    }
}

/// A JSON listing on one line, with the time it was taken.
fn json_line(text: &str, at: SystemTime) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(mut fields)) => {
            fields.insert("sampled_at".to_owned(), serde_json::json!(clock::rfc3339(at)));
            serde_json::Value::Object(fields).to_string()
        }
        _ => text.replace('\n', " "),
    }
}

/// Shows `frame()` every `every` until a signal ends it.
pub(crate) fn run(
    every: Duration,
    json: bool,
    receiver: &Receiver,
    mut frame: impl FnMut() -> String,
) -> Exit {
    let output = match (json, std::io::stdout().is_terminal()) {
        (true, _) => Output::JsonLines,
        (false, true) => Output::Terminal,
        (false, false) => Output::Pipe,
    };
    loop {
        let at = SystemTime::now();
        let text = frame();
        let text = if json { json_line(&text, at) } else { text };
        if print(&framed(output, every, &text, at)).is_err() {
            // The reader went away (`| head`): nothing more to show it.
            return Exit::Code(0);
        }
        let next = Instant::now() + every;
        'waiting: loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let (received, _) = receiver.wait(None, Some(left));
            for signal in received {
                match signal.signal {
                    libc::SIGINT => return Exit::Code(0),
                    libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT => return Exit::Signal(signal.signal),
                    libc::SIGTSTP | libc::SIGTTOU | libc::SIGTTIN => stop_self(),
                    // Continued after a stop, or a new window size: draw again now.
                    libc::SIGCONT | libc::SIGWINCH => break 'waiting,
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_drawn_in_place_on_a_terminal_and_whole_elsewhere() {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_796_063_853);
        let every = Duration::from_secs(2);
        let drawn = framed(Output::Terminal, every, "GPU  NAME\n", at);
        assert_eq!(drawn, "\x1b[H\x1b[2JEvery 2 s: gpurun --list    2026-11-30 18:37:33 UTC\n\nGPU  NAME\n");
        assert_eq!(
            framed(Output::Pipe, every, "GPU\n", at),
            "Every 2 s: gpurun --list    2026-11-30 18:37:33 UTC\n\nGPU\n\n"
        );
        let line = json_line("{\n  \"gpus\": []\n}", at);
        assert_eq!(line, r#"{"gpus":[],"sampled_at":"2026-11-30T18:37:33.000Z"}"#);
        assert_eq!(framed(Output::JsonLines, every, &line, at), format!("{line}\n"));
    }
}
