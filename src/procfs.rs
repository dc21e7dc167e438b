//! What `/proc` says about a process: owner and command line. `None` where it cannot be read
//! (gone, another PID namespace, hidepid).

use std::ffi::CStr;
use std::os::unix::fs::MetadataExt;

/// The owning user's name, or the numeric uid when it has no passwd entry.
pub fn owner(pid: u32) -> Option<String> {
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(user_name(uid).unwrap_or_else(|| uid.to_string()))
}

fn user_name(uid: u32) -> Option<String> {
    let mut record: libc::passwd = zeroed_passwd();
    let mut buffer = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are to live, correctly sized buffers owned by this frame;
    // getpwuid_r writes only within them.
    let status = unsafe { libc::getpwuid_r(uid, &mut record, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if status != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buffer`.
    Some(unsafe { CStr::from_ptr(record.pw_name) }.to_string_lossy().into_owned())
}

fn zeroed_passwd() -> libc::passwd {
    // SAFETY: passwd is plain C data; all-zero (null pointers, zero ids) is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The command line, arguments joined by spaces; the short name for kernel threads and
/// processes whose cmdline is empty.
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(format!("[{}]", comm.trim_end()));
    }
    Some(words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(command_line(pid).is_some());
        assert!(owner(pid).is_some());
    }

    #[test]
    fn missing_process_is_unknown() {
        // Above the largest pid_max Linux allows (2^22).
        assert_eq!(command_line(4_194_305), None);
        assert_eq!(owner(4_194_305), None);
    }
}
