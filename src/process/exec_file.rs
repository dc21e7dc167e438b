//! The file the kernel executed to start this process: `getauxval(AT_EXECFN)`, the path given
//! to execve(2). When binfmt_script runs gpurun as a script's interpreter (`#!/usr/local/bin/gpurun
//! --gpus 1 -- python3`), it is the script's path; when a person or a program runs gpurun, it is
//! gpurun's own. argv alone cannot tell `gpurun 'pa -n' ./s` typed by hand from the kernel's
//! own call for `./s` (argv[0] may be the very path on the `#!` line); this can (issue 65).

use std::ffi::{CStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The path execve(2) was given, where the kernel says (`None`: no AT_EXECFN entry).
pub(crate) fn exec_filename() -> Option<OsString> {
    // SAFETY: getauxval has no preconditions and reads the auxiliary vector the kernel left.
    let address = unsafe { libc::getauxval(libc::AT_EXECFN) };
    if address == 0 {
        return None;
    }
    // SAFETY: AT_EXECFN is the address of a NUL-terminated string the kernel put on this
    // process's initial stack, above everything main's frames use, and never freed or moved.
    let name = unsafe { CStr::from_ptr(address as *const libc::c_char) };
    Some(std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_test_binary_was_executed_as_itself() {
        let name = super::exec_filename().expect("Linux sets AT_EXECFN");
        let ran = std::fs::canonicalize(&name).unwrap();
        assert_eq!(ran, std::env::current_exe().unwrap());
    }
}
