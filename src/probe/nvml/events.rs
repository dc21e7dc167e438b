//! The chosen GPUs' Xid errors (`nvmlEventTypeXidCriticalError`), read without waiting.

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::{Device, EventSet, Nvml};

use super::Session;
use crate::probe::watch::{Xid, XidBatch};

/// The event set of the chosen GPUs' Xid errors, and (NVML index, raw handle) of each GPU in it.
pub(super) type XidEvents = (EventSet<'static>, Vec<(u32, usize)>);

/// How many Xid events one poll reads, and the run's last look at most (a flood of thousands
/// is read in a few milliseconds; each is one call that answers at once).
const XIDS_PER_POLL: usize = 1024;
const XIDS_DRAINED: usize = 65_536;

impl Session {
    /// The Xid errors raised on `gpus` since the last call, without waiting. The first call
    /// registers for them (GPUs that cannot report Xids are left out); none where events are
    /// not supported at all. `drain`: the run's last look, which reads all that is there.
    pub(crate) fn xids(&mut self, gpus: &[u32], drain: bool) -> XidBatch {
        let nvml: &'static Nvml = self.nvml;
        let calls = self.calls.clone();
        let set = self.xid_events.get_or_insert_with(|| {
            let create = || calls.run("nvmlEventSetCreate", None, || nvml.create_event_set()).ok();
            let register = |device: &Device<'static>, gpu: u32, set: EventSet<'static>| {
                calls
                    .run("nvmlDeviceRegisterEvents", Some(gpu), || {
                        device.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    })
                    .map_err(|error| error.error)
            };
            let mut set = create()?;
            let mut registered: Vec<(u32, Device<'static>)> = Vec::new();
            // SAFETY: the raw handle is only compared, never called through.
            let handle_of = |device: &Device<'static>| unsafe { device.handle() } as usize;
            for &gpu in gpus {
                let Ok(device) = nvml.device_by_index(gpu) else { continue };
                match register(&device, gpu, set) {
                    Ok(kept) => {
                        set = kept;
                        registered.push((gpu, device));
                    }
                    Err(error) => {
                        tracing::debug!("GPU {gpu}: Xid events: {error}");
                        // nvml-wrapper frees the set when a registration fails: a new one, with
                        // the GPUs registered so far registered again.
                        set = create()?;
                        for (again, device) in &registered {
                            set = register(device, *again, set).ok()?;
                        }
                    }
                }
            }
            let handles = registered.iter().map(|(gpu, device)| (*gpu, handle_of(device))).collect();
            Some((set, handles))
        });
        let Some((set, handles)) = set.as_ref() else { return XidBatch::default() };
        let mut batch = XidBatch::default();
        // Bounded: a driver that keeps answering cannot keep the thread here.
        for _ in 0..if drain { XIDS_DRAINED } else { XIDS_PER_POLL } {
            match calls.run("nvmlEventSetWait_v2", None, || set.wait(0)) {
                Ok(event) => {
                    // SAFETY: the raw handle is only compared, never called through.
                    let handle = unsafe { event.device.handle() } as usize;
                    let registered = handles.iter().find(|(_, known)| *known == handle).map(|(gpu, _)| *gpu);
                    let Some(gpu) = registered.or_else(|| event.device.index().ok()) else { continue };
                    let code = match event.event_data {
                        Some(XidError::Value(code)) => code,
                        Some(XidError::Unknown) | None => 999,
                    };
                    batch.keep(Xid { gpu, code });
                }
                Err(_) => break,
            }
        }
        batch
    }
}
