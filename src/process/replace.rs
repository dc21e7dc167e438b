//! A file replaced whole: written beside it under a name of its own (`.NAME.gpurun-PID`, made
//! with `O_EXCL` and `O_NOFOLLOW`, so never through a link someone planted), then renamed over
//! it. A reader (node_exporter's textfile collector, dcgm-exporter's job mapping) sees the old
//! file or the new one, never half of one; a rename replaces a planted symbolic link itself.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub(crate) fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("it names no file"))?;
    let staged = path.with_file_name(format!(".{}.gpurun-{}", name.to_string_lossy(), std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&staged)?;
    let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&staged, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    renamed
}
