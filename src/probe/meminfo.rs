//! The system's memory, as `/proc/meminfo` says it: what an integrated GPU with no memory of
//! its own (GB10) allocates from. Free is `MemAvailable`, the kernel's estimate of what can be
//! had without swapping (page cache that can be dropped counts); swap is not counted, since a
//! GPU allocation that needs the system to swap is one that thrashes.

use crate::probe::gpu::Memory;

pub(crate) fn system_memory() -> Option<Memory> {
    parse(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse(text: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|line| line.split(':').next() == Some(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    };
    let (total, available) = (field("MemTotal")?, field("MemAvailable")?.min(field("MemTotal")?));
    Some(Memory {
        total_bytes: total,
        reserved_bytes: 0,
        used_bytes: total - available,
        free_bytes: available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_and_available_in_bytes() {
        let text = "MemTotal:       130000000 kB\nMemFree:         1000000 kB\nMemAvailable:   120000000 kB\nSwapFree: 5 kB\n";
        let memory = parse(text).unwrap();
        assert_eq!(memory.total_bytes, 130_000_000 * 1024);
        assert_eq!(memory.free_bytes, 120_000_000 * 1024);
        assert_eq!(memory.used_bytes, 10_000_000 * 1024);
        assert_eq!(parse("MemTotal: 1 kB\n"), None, "no MemAvailable (a kernel before 3.14): unknown");
    }
}
