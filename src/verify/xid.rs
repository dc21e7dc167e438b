//! What an Xid error usually means (NVIDIA's Xid catalog, "XID Errors" in the GPU deployment
//! and management documentation), in one line, and whether an application can cause it: a
//! user reading "Xid 13" after a crash needs to know whether to fix the code or drain the node.

/// Who usually causes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The program (a bug, a bad kernel, memory misuse).
    Application,
    /// The hardware or the driver.
    Hardware,
    /// Either.
    Either,
}

/// The meaning of a common Xid, and its usual cause; `None` for codes outside the list.
pub(crate) fn meaning(code: u64) -> Option<(&'static str, Cause)> {
    Some(match code {
        13 => ("graphics engine exception: usually an out-of-range memory access or an illegal instruction in a kernel", Cause::Application),
        31 => ("GPU memory page fault: usually the application touched memory it does not own (an illegal address)", Cause::Application),
        43 => ("the GPU stopped processing: the application hit a fault and its context was torn down", Cause::Application),
        45 => ("preemptive cleanup: the driver ended the context (the process was killed or another error came first)", Cause::Either),
        48 => ("double-bit ECC error: an uncorrectable memory error (reset the GPU; repeats mean RMA)", Cause::Hardware),
        63 => ("ECC page retirement or row remapping recorded: the next reset applies it", Cause::Hardware),
        64 => ("ECC page retirement or row remapping failed: the GPU needs service", Cause::Hardware),
        68 => ("video processor exception (NVDEC/NVENC): a driver or hardware error", Cause::Hardware),
        74 => ("NVLink error: the link between GPUs failed (check the NVLink bridge or the board)", Cause::Hardware),
        79 => ("the GPU has fallen off the bus: it is no longer reachable (reboot; check power and seating)", Cause::Hardware),
        92 => ("high single-bit ECC error rate: the memory is degrading", Cause::Hardware),
        94 => ("contained ECC error: an uncorrectable error stopped only the applications that used that memory (restart them)", Cause::Hardware),
        95 => ("uncontained ECC error: an uncorrectable error affected every application on the GPU (reset the GPU)", Cause::Hardware),
        119 => ("GSP RPC timeout: the GPU's system processor stopped answering the driver (reset the GPU)", Cause::Hardware),
        120 => ("GSP error: the GPU's system processor failed (reset the GPU)", Cause::Hardware),
        _ => return None,
    })
}

/// `Xid 79 on GPU 3: the GPU has fallen off the bus (...); usually the hardware`.
pub(crate) fn describe(code: u64, gpu: u32) -> String {
    let label = crate::probe::gpu::label(gpu);
    match meaning(code) {
        Some((what, cause)) => format!(
            "Xid {code} on {label}: {what}; {}",
            match cause {
                Cause::Application => "usually the application",
                Cause::Hardware => "the hardware or driver, not the application",
                Cause::Either => "the application or the driver",
            }
        ),
        None if code == 999 => format!("an Xid the driver could not name on {label} (see dmesg)"),
        None => format!("Xid {code} on {label} (see NVIDIA's Xid catalog and dmesg)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_codes_are_explained_and_attributed() {
        for code in [13, 31, 43, 45, 48, 63, 64, 68, 74, 79, 92, 94, 95, 119, 120] {
            assert!(meaning(code).is_some(), "Xid {code}");
        }
        assert_eq!(meaning(13).map(|(_, cause)| cause), Some(Cause::Application));
        assert!(describe(79, 3).starts_with("Xid 79 on GPU 3: the GPU has fallen off the bus"));
        assert!(describe(79, 3).ends_with("the hardware or driver, not the application"));
        assert_eq!(describe(12345, 0), "Xid 12345 on GPU 0 (see NVIDIA's Xid catalog and dmesg)");
    }
}
