//! CPU lists as Linux writes them (`0-15,32-47`), for `--cpu-bind` and the GPUs' local CPUs.

/// `0-15,32-47` from CPU numbers (in any order, repeats allowed); empty for none.
pub(crate) fn list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut at = 0;
    while at < sorted.len() {
        let first = sorted[at];
        let mut last = first;
        while at + 1 < sorted.len() && sorted[at + 1] == last + 1 {
            at += 1;
            last = sorted[at];
        }
        parts.push(if first == last { first.to_string() } else { format!("{first}-{last}") });
        at += 1;
    }
    parts.join(",")
}

/// The CPUs set in an affinity bitmask of machine words (NVML's `cpuSet`), word 0 first.
pub(crate) fn from_mask(words: &[u64]) -> Vec<u32> {
    words
        .iter()
        .enumerate()
        .flat_map(|(at, &word)| {
            (0..64).filter(move |bit| word & (1 << bit) != 0).map(move |bit| at as u32 * 64 + bit)
        })
        .collect()
}

/// For serde: a CPU list as its text.
pub(crate) fn serialize<S: serde::Serializer>(
    cpus: &Option<Vec<u32>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match cpus {
        Some(cpus) => serializer.serialize_str(&list(cpus)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_masks() {
        assert_eq!(list(&[3, 0, 1, 2, 32, 33, 40]), "0-3,32-33,40");
        assert_eq!(list(&[]), "");
        assert_eq!(from_mask(&[0b1011, 1]), vec![0, 1, 3, 64]);
    }
}
