//! Byte counts as people read them.

/// `31.7 GiB`, `512 MiB`, `0 B`: binary units, as nvidia-smi and the size options use.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(512 << 20), "512 MiB");
        assert_eq!(human(80 << 30), "80 GiB");
        assert_eq!(human((6 << 30) + (1 << 27)), "6.1 GiB");
    }
}
