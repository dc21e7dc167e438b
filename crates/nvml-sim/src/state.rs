//! The library's process-wide state: the scenario (re-read when its file changes, so a test can
//! change the machine while a client runs), init reference count, injected-error counters.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::scenario::{self, Scenario, Source};
use sim_shared::registry;

pub struct State {
    pub scenario: Scenario,
    pub state_dir: PathBuf,
    source: Source,
    stamp: Option<(SystemTime, u64)>,
    /// Calls failed so far by each `[[error]]` entry that has `times`.
    error_hits: Vec<u32>,
    /// Matching calls so far for each `[[hang]]` entry.
    hang_hits: Vec<u32>,
    pub init_count: u32,
    /// When the scenario file was last looked at.
    looked: Option<std::time::Instant>,
    /// Event sets (`nvmlEventSetCreate`), by handle - 1; `None` once freed.
    pub event_sets: Vec<Option<EventSet>>,
    /// The process registry as read so far (re-read only where it changed).
    registered: std::cell::RefCell<registry::Cache>,
    /// The calls this process has made, each with its GPU (a call's first time on a GPU costs a
    /// real driver most: `latency.rs`).
    pub asked: std::collections::HashSet<(String, Option<u32>)>,
}

/// One event set: what it was registered for, and the Xids it has delivered.
#[derive(Debug, Default)]
pub struct EventSet {
    /// (GPU, when it was registered for Xid events).
    pub registered: Vec<(u32, std::time::Instant)>,
    /// `(gpu, code, after_ms)` of the `[[xid]]` entries delivered, so that a re-read scenario
    /// does not deliver them again (a set: a flood of thousands is read one call each).
    pub delivered: std::collections::HashSet<(u32, u64, u64)>,
}

/// A process of the simulated machine as NVML lists it.
#[derive(Debug, Clone, Copy)]
pub struct ListedProcess {
    pub pid: u32,
    /// `None`: NVML_VALUE_NOT_AVAILABLE.
    pub used_bytes: Option<u64>,
    /// (GPU instance id, compute instance id) of the MIG device it runs in.
    pub instance: Option<(u32, u32)>,
}

/// Which of a GPU's process lists: the compute list (with an MPS server, never its clients),
/// the MPS list (the clients), or every process (what its memory counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Compute,
    Mps,
    All,
}

/// Memory as the driver reports it (NVML v2 view: `used` excludes `reserved`).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// How stale the scenario may be within one process: a change is seen within this long.
const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_millis(2);

fn file_stamp(source: &Source) -> Option<(SystemTime, u64)> {
    match source {
        Source::File(path) => std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len()))),
        Source::Embedded => None,
    }
}

impl State {
    fn load() -> Result<State, String> {
        let source = Source::from_env();
        let stamp = file_stamp(&source);
        let scenario = source.load()?;
        Ok(State {
            error_hits: vec![0; scenario.errors.len()],
            hang_hits: vec![0; scenario.hangs.len()],
            state_dir: scenario::state_dir(&source),
            scenario,
            source,
            stamp,
            init_count: 0,
            looked: None,
            event_sets: Vec::new(),
            registered: std::cell::RefCell::new(registry::Cache::default()),
            asked: std::collections::HashSet::new(),
        })
    }

    fn refresh(&mut self) {
        // A stat per call would be most of a call's cost (a real driver's call is an ioctl):
        // the file is looked at again once REFRESH_EVERY has passed.
        if self.looked.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
            return;
        }
        self.looked = Some(std::time::Instant::now());
        let stamp = file_stamp(&self.source);
        if stamp == self.stamp {
            return;
        }
        match self.source.load() {
            Ok(scenario) => {
                self.error_hits = vec![0; scenario.errors.len()];
                self.hang_hits = vec![0; scenario.hangs.len()];
                self.scenario = scenario;
                self.stamp = stamp;
            }
            // Half-written file: keep the last good scenario and look again on the next call.
            Err(message) => eprintln!("nvml-sim: keeping the previous scenario: {message}"),
        }
    }

    /// The NVML error injected for this call, if any. `call` is the name without version suffix.
    pub fn injected(&mut self, call: &str, gpu: Option<u32>) -> Option<u32> {
        for (position, spec) in self.scenario.errors.iter().enumerate() {
            let call_matches = same_call(&spec.call, call) || (spec.call == "*" && gpu.is_some());
            let gpu_matches = spec.gpu.is_none() || spec.gpu == gpu;
            if !(call_matches && gpu_matches) {
                continue;
            }
            if let Some(times) = spec.times {
                if self.error_hits[position] >= times {
                    continue;
                }
                self.error_hits[position] += 1;
            }
            return scenario::error_code(&spec.error);
        }
        None
    }

    /// How long this call must hang (`Some(None)`: forever), from `[[hang]]`.
    pub fn hang(&mut self, call: &str, gpu: Option<u32>) -> Option<Option<std::time::Duration>> {
        for (position, spec) in self.scenario.hangs.iter().enumerate() {
            let call_matches = same_call(&spec.call, call) || (spec.call == "*" && gpu.is_some());
            if !call_matches || !(spec.gpu.is_none() || spec.gpu == gpu) {
                continue;
            }
            self.hang_hits[position] += 1;
            let hit = self.hang_hits[position];
            let hanging = hit > spec.after && spec.times.is_none_or(|times| hit <= spec.after + times);
            if hanging {
                return Some(spec.ms.map(std::time::Duration::from_millis));
            }
        }
        None
    }

    /// Whether this call must crash, from `[[crash]]`.
    pub fn crashes(&self, call: &str, gpu: Option<u32>) -> bool {
        self.scenario
            .crashes
            .iter()
            .any(|spec| same_call(&spec.call, call) && (spec.gpu.is_none() || spec.gpu == gpu))
    }

    /// The processes on GPU `gpu` in `list`: in MIG mode, those of all its MIG devices, as the
    /// driver lists them to a privileged caller.
    pub fn processes_in(&self, gpu: u32, list: List) -> Vec<ListedProcess> {
        let uuid = &self.scenario.gpus[gpu as usize].uuid;
        let mut listed = self.listed(list, |p| p.gpu == gpu && p.mig.is_none(), |r| &r.uuid == uuid, None);
        for position in self.scenario.migs.iter().enumerate().filter(|(_, m)| m.gpu == gpu).map(|(at, _)| at)
        {
            listed.extend(self.mig_processes_in(position, list));
        }
        listed
    }

    /// The processes in `list` of the MIG device at `position` of the scenario's `[[mig]]` list.
    pub fn mig_processes_in(&self, position: usize, list: List) -> Vec<ListedProcess> {
        let mig = &self.scenario.migs[position];
        let instance = Some((mig.gpu_instance_id, mig.compute_instance_id));
        self.listed(list, |p| p.mig.as_deref() == Some(mig.uuid.as_str()), |r| r.uuid == mig.uuid, instance)
    }

    fn listed(
        &self,
        list: List,
        from_scenario: impl Fn(&scenario::ProcessSpec) -> bool,
        registered: impl Fn(&registry::Registration) -> bool,
        instance: Option<(u32, u32)>,
    ) -> Vec<ListedProcess> {
        let client = |mps: Option<registry::MpsRole>| mps == Some(registry::MpsRole::Client);
        let clients_too = self.scenario.has_quirk(scenario::QUIRK_MPS_CLIENTS_IN_COMPUTE_LIST);
        let wanted = |mps: Option<registry::MpsRole>| match list {
            List::Compute => clients_too || !client(mps),
            List::Mps => client(mps),
            List::All => true,
        };
        // A process outside the caller's PID namespace is in no list, its memory still used.
        let listable = |r: &registry::Registration| list == List::All || !r.outside;
        let registered = |r: &registry::Registration| registered(r) && wanted(r.mps) && listable(r);
        let mut listed: Vec<ListedProcess> = self
            .scenario
            .processes
            .iter()
            .filter(|p| from_scenario(p) && wanted(p.mps))
            .map(|p| ListedProcess { pid: p.pid, used_bytes: p.used.map(|s| s.0), instance })
            .collect();
        let live = self.registered.borrow_mut().live(&self.state_dir);
        listed.extend(live.into_iter().filter(|r| registered(r)).map(|r| ListedProcess {
            pid: r.pid + self.scenario.pid_offset,
            used_bytes: Some(r.used_bytes),
            instance,
        }));
        listed
    }

    /// A listed process's name (`nvmlSystemGetProcessName`): the scenario's, or the program a
    /// live registered process runs.
    pub fn process_name(&self, pid: u32) -> Option<String> {
        if let Some(spec) = self.scenario.processes.iter().find(|p| p.pid == pid) {
            return spec.name.clone();
        }
        let own = pid.checked_sub(self.scenario.pid_offset)?;
        let cmdline = std::fs::read(format!("/proc/{own}/cmdline")).ok()?;
        let program = cmdline.split(|&b| b == 0).next().filter(|p| !p.is_empty())?;
        Some(String::from_utf8_lossy(program).into_owned())
    }

    pub fn memory(&self, gpu: u32) -> Memory {
        let spec = &self.scenario.gpus[gpu as usize];
        let instances: u64 =
            self.scenario.migs_of(gpu).map(|mig| mig.memory_used.0).fold(0, u64::saturating_add);
        let by_processes: u64 = self
            .processes_in(gpu, List::All)
            .iter()
            .filter_map(|p| p.used_bytes)
            .fold(0u64, u64::saturating_add);
        let total = spec.memory_total.0;
        let reserved = spec.memory_reserved.0.min(total);
        let used =
            spec.memory_used.0.saturating_add(instances).saturating_add(by_processes).min(total - reserved);
        Memory { total, reserved, used, free: total - reserved - used }
    }

    /// A MIG device's own memory (no driver reservation of its own).
    pub fn mig_memory(&self, position: usize) -> Memory {
        let mig = &self.scenario.migs[position];
        let by_processes: u64 = self
            .mig_processes_in(position, List::All)
            .iter()
            .filter_map(|p| p.used_bytes)
            .fold(0u64, u64::saturating_add);
        let total = mig.memory_total.0;
        let used = mig.memory_used.0.saturating_add(by_processes).min(total);
        Memory { total, reserved: 0, used, free: total - used }
    }
}

/// Runs `body` with the current state, loading or refreshing it first. A scenario that cannot
/// be loaded makes every call fail with `NVML_ERROR_UNKNOWN` and says why on stderr.
pub fn with_state<T>(body: impl FnOnce(&mut State) -> Result<T, u32>) -> Result<T, u32> {
    let mut guard = STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match guard.as_mut() {
        Some(state) => state.refresh(),
        None => match State::load() {
            Ok(state) => *guard = Some(state),
            Err(message) => {
                eprintln!("nvml-sim: cannot load the scenario: {message}");
                return Err(scenario::error_code("UNKNOWN").unwrap_or(999));
            }
        },
    }
    let state = guard.as_mut().expect("loaded above");
    body(state)
}

/// Whether a scenario's `call` names this call: the same name, or the name without the
/// version suffix this call carries (`nvmlDeviceGetMemoryInfo` covers `..._v2`; `..._v2` alone
/// only the versioned entry point, as a driver older than it would fail there).
fn same_call(spec: &str, call: &str) -> bool {
    spec == call || spec == crate::latency::unversioned(call)
}
