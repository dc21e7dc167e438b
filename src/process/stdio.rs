//! Descriptors 0, 1 and 2. Started from cron, a daemon or `2>&-`, gpurun may find them closed;
//! then the first file it opens (a lease, the `--report-json` file) would become its stdout or
//! stderr and receive its log lines. So before anything else each closed one is filled with
//! `/dev/null`, as daemons and coreutils do. The placeholders are close-on-exec: the command
//! still starts with exactly the caller's descriptors.

use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

/// Whether the caller left stdout closed: then a mode's output cannot be written.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether the FIFO at `path` has a reader (`Some(true)`), exists without one (`Some(false)`:
/// opening it for writing without blocking fails with ENXIO), or is not a FIFO one can open
/// (`None`). Nothing is written.
pub(crate) fn fifo_has_reader(path: &std::path::Path) -> Option<bool> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, stat, Mode, SFlag};
    let is_fifo = |mode: u32| SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) == SFlag::S_IFIFO;
    if !is_fifo(stat(path).ok()?.st_mode) {
        return None;
    }
    match open(
        path,
        OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    ) {
        Ok(fd) => Some(fstat(&fd).is_ok_and(|st| is_fifo(st.st_mode))),
        Err(nix::errno::Errno::ENXIO) => Some(false),
        Err(_) => None,
    }
}

/// The text of a small regular file someone else named (a user's --cidfile or --env-file), or
/// `None`: opened without blocking, so that a FIFO nobody writes cannot hold gpurun; read only
/// if it is a regular file, and at most `limit` bytes, so that a device is not read whole.
pub(crate) fn read_small_file(path: &std::path::Path, limit: u64) -> Option<String> {
    String::from_utf8(read_small_bytes(path, limit)?).ok()
}

/// As `read_small_file`, the bytes as they are (for a caller that says what is wrong with
/// text that is not UTF-8, or longer than it reads: ask for one byte more than it takes).
pub(crate) fn read_small_bytes(path: &std::path::Path, limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path, 0).ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// `path` opened for reading without blocking (`flags` besides: O_NOFOLLOW), refused unless it
/// is a regular file: a FIFO nobody writes cannot hold gpurun, and a device is never read.
pub(crate) fn open_regular(path: &std::path::Path, flags: i32) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .and_then(only_regular)
}

/// `file` if it is a regular file; a FIFO, a device or a socket planted where a file belongs
/// is refused.
pub(crate) fn only_regular(file: std::fs::File) -> std::io::Result<std::fs::File> {
    match file.metadata()?.is_file() {
        true => Ok(file),
        false => Err(std::io::Error::other("it is not a regular file (a FIFO or a device?): left alone")),
    }
}

/// Fills every closed descriptor among 0-2 with `/dev/null`.
pub(crate) fn ensure_open() {
    for fd in (0..3).filter(|fd| !is_open(*fd)) {
        if fd == 1 {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
        // open() returns the lowest free number: the closed one, as 0..fd are open by now.
        // (Anything else, such as a /proc that is not mounted, is closed again on drop.)
        if let Ok(null) = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()) {
            if null.as_raw_fd() == fd {
                // Kept for the life of the process.
                let _ = null.into_raw_fd();
            }
        }
    }
}

/// Without /proc: F_GETFD fails (EBADF) only on a descriptor that is not open.
fn is_open(fd: i32) -> bool {
    // SAFETY: a borrowed descriptor that is only asked for its flags.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_ok()
}

/// Writes a mode's output (`--list`, `--export`, help...) to stdout. Failing to write it is an
/// error, as in coreutils: a closed stdout (which gpurun filled with /dev/null for itself) or a
/// full disk must not look like success.
pub(crate) fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Err(std::io::Error::from_raw_os_error(libc::EBADF));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
}

/// The width in columns of the terminal on `fd`; `None` for anything else (TIOCGWINSZ fails
/// on a pipe or a file) or a terminal that gives no size.
pub(crate) fn terminal_columns(fd: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize through the pointer, which outlives the call, and
    // touches nothing else.
    let done = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    (done == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// `text` cut to fit in `columns` without reaching the last one (where a terminal would wrap
/// at the next character), ending in `…` when cut.
pub(crate) fn fit(text: &str, columns: usize) -> String {
    clip(text, columns.saturating_sub(1).max(2))
}

/// `text` with its control characters written out (`\n`, `\t`, `\r`, `\x1b`, `\u{9b}`):
/// text that came from the environment, another user's file or another user's process (a
/// command line, a node name, a waiter's request) cannot add lines to a listing or send
/// escape sequences to the terminal that shows it.
pub(crate) fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write;
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` in at most `width` characters, ending in `…` when cut (a table cell, a command
/// line in a verdict), its control characters written out (`escaped`).
pub(crate) fn clip(text: &str, width: usize) -> String {
    let text = escaped(text);
    if text.chars().count() <= width {
        return text.into_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `line` broken at spaces into lines shorter than `columns`, each continuation indented by
/// `hanging` spaces (None: two more than the line's own indent). A word wider than a line
/// (a list of UUIDs) is broken after its commas; one without commas stays whole on its line.
pub(crate) fn wrap(line: &str, columns: usize, hanging: Option<usize>) -> String {
    let text = line.trim_start();
    let lead = &line[..line.len() - text.len()];
    let indent = " ".repeat(hanging.unwrap_or(lead.len() + 2));
    // Each word, and whether it joins the one before without a space (the rest of a list).
    let mut words: Vec<(&str, bool)> = Vec::new();
    for word in text.split(' ') {
        match word.chars().count() + indent.len() >= columns && word.contains(',') {
            true => words.extend(word.split_inclusive(',').enumerate().map(|(at, piece)| (piece, at > 0))),
            false => words.push((word, false)),
        }
    }
    let (mut out, mut current) = (String::new(), lead.to_owned());
    for (word, joins) in words {
        let glue = if current.trim().is_empty() || joins { "" } else { " " };
        let candidate = format!("{current}{glue}{word}");
        if candidate.chars().count() < columns || current.trim().is_empty() {
            current = candidate;
        } else {
            out.push_str(&current);
            out.push('\n');
            current = format!("{indent}{word}");
        }
    }
    out.push_str(&current);
    out.push('\n');
    out
}

/// A command line in at most `width` characters that keeps the program's name: a long
/// directory in front of it goes first (`…/sim-cuda --sleep 1`), then the end of the arguments.
pub(crate) fn clip_command(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let (program, rest) = line.split_once(' ').map_or((line, ""), |(program, rest)| (program, rest));
    let shortened = match program.rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => format!("…/{name}"),
        _ => program.to_owned(),
    };
    let joined = if rest.is_empty() { shortened } else { format!("{shortened} {rest}") };
    clip(&joined, width)
}

#[cfg(test)]
mod tests {
    use super::{clip, clip_command, fit};

    #[test]
    fn wrapped_lines_break_at_spaces_and_a_long_list_after_its_commas() {
        let line =
            "  GPU 3:        energy 620 J (0.17 Wh), 201 W mean / 230 W max of 400 W, util p50 40% p95 61%";
        let wrapped = super::wrap(line, 60, Some(16));
        assert!(wrapped.lines().all(|l| l.chars().count() < 60), "{wrapped}");
        assert!(wrapped.lines().nth(1).unwrap().starts_with(&" ".repeat(16)), "{wrapped}");
        assert_eq!(
            wrapped.split_whitespace().collect::<Vec<_>>(),
            line.split_whitespace().collect::<Vec<_>>()
        );
        let uuids = "GPURUN_GPU_UUIDS=GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e53,GPU-8f3b2c1d-6e5a-4b7c-8d9e-0a1b2c3d4e52";
        let broken = super::wrap(uuids, 80, None);
        assert_eq!(broken.lines().count(), 2, "{broken}");
        assert!(broken.lines().all(|l| l.chars().count() < 80), "{broken}");
        assert_eq!(broken.replace("\n  ", "").trim_end(), uuids, "nothing lost or added");
        assert_eq!(super::wrap("short", 80, None), "short\n");
    }

    #[test]
    fn a_clipped_command_keeps_its_programs_name() {
        let long =
            "/root/src/github.com/ml-team-with-a-long-name/checkouts/gpurun/target/debug/sim-cuda --sleep 1";
        assert_eq!(clip_command(long, 40), "…/sim-cuda --sleep 1");
        assert_eq!(clip_command("python train.py --lr 3", 40), "python train.py --lr 3");
        assert_eq!(
            clip_command("/usr/bin/python3 train.py --lr 3e-4 --epochs 100", 24),
            "…/python3 train.py --lr…"
        );
        assert_eq!(clip_command("/a-very-long-directory/", 10).chars().count(), 10);
    }

    #[test]
    fn fit_cuts_with_an_ellipsis_before_the_last_column() {
        assert_eq!(fit("short", 80), "short");
        assert_eq!(fit("abcdefghij", 6), "abcd…");
        assert_eq!(fit("abcdefghij", 6).chars().count(), 5);
        assert_eq!(fit("abcde", 6), "abcde");
        assert_eq!(fit("ééééééé", 5).chars().count(), 4);
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abcd", 4), "abcd");
    }

    #[test]
    fn control_characters_are_written_out() {
        use super::escaped;
        assert_eq!(escaped("n1\n  3 H100 FREE"), r"n1\n  3 H100 FREE");
        assert_eq!(escaped("\x1b[2J\tx\r\x7f\u{9b}é"), r"\x1b[2J\tx\r\x7f\u{9b}é");
        assert!(matches!(escaped("plain text"), std::borrow::Cow::Borrowed("plain text")));
        assert_eq!(clip("a\nb\nc", 4), r"a\n…");
    }
}
