//! What a run's watch reads of the chosen GPUs, as plain data whichever library answered: the
//! processes with a context on a device, why a list could not be read, and the Xid errors.

/// A process with a compute context on one GPU, as NVML lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) pid: u32,
    pub(crate) used_bytes: Option<u64>,
    /// Listed as an MPS client (the MPS list), not in the compute list.
    pub(crate) mps_client: bool,
}

/// Why a GPU's processes could not be listed: whether the GPU is lost (GPU_IS_LOST: it fell
/// off the bus, and nothing on it can be checked any more), and NVML's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListError {
    pub(crate) lost: bool,
    pub(crate) text: String,
}

/// How many are kept: the first ones, and after them each (GPU, code) not seen yet, so that
/// the Xid 79 after a burst of Xid 13 is never the one lost; the rest are counted.
pub(crate) const XIDS_KEPT: usize = 64;

/// What one look at the Xid events found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XidBatch {
    pub(crate) kept: Vec<Xid>,
    /// Read and not kept: repeats of kept (GPU, code) pairs past `XIDS_KEPT`.
    pub(crate) dropped: u64,
}

impl XidBatch {
    pub(crate) fn keep(&mut self, xid: Xid) {
        let new = !self.kept.iter().any(|kept| kept.gpu == xid.gpu && kept.code == xid.code);
        match self.kept.len() < XIDS_KEPT || new {
            true => self.kept.push(xid),
            false => self.dropped += 1,
        }
    }
}

/// An Xid error NVML raised on a GPU (`nvmlEventTypeXidCriticalError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Xid {
    /// NVML index.
    pub(crate) gpu: u32,
    /// The Xid; 999 where the driver does not know it.
    pub(crate) code: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_keeps_the_first_xids_and_every_new_pair_and_counts_the_rest() {
        let mut batch = XidBatch::default();
        for _ in 0..XIDS_KEPT + 10 {
            batch.keep(Xid { gpu: 0, code: 13 });
        }
        batch.keep(Xid { gpu: 0, code: 79 });
        batch.keep(Xid { gpu: 1, code: 13 });
        batch.keep(Xid { gpu: 0, code: 79 });
        assert_eq!(batch.kept.len(), XIDS_KEPT + 2);
        assert_eq!(batch.kept[XIDS_KEPT..], [Xid { gpu: 0, code: 79 }, Xid { gpu: 1, code: 13 }]);
        assert_eq!(batch.dropped, 11);
    }
}
