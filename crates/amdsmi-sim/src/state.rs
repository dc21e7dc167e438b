//! The library's process-wide state: the scenario (re-read when its file changes, so a test can
//! change the machine while a client runs), whether it is initialised, and the live processes.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::scenario::{Scenario, Source};
use sim_shared::registry;

pub struct State {
    pub scenario: Scenario,
    pub state_dir: PathBuf,
    source: Source,
    stamp: Option<(SystemTime, u64)>,
    pub initialised: bool,
    registered: registry::Cache,
}

/// One process on one processor, as `amdsmi_get_gpu_process_list` lists it.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub name: String,
    pub vram: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn stamp(source: &Source) -> Option<(SystemTime, u64)> {
    match source {
        Source::File(path) => std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len()))),
        Source::Embedded => None,
    }
}

/// Runs `f` on the state, loading the scenario the first time and again when its file changed.
/// `Err`: the scenario cannot be read (every call then fails as the library would without a
/// driver).
pub fn with<T>(f: impl FnOnce(&mut State) -> T) -> Result<T, String> {
    let mut guard = STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let source = Source::from_env();
    let fresh = match guard.as_ref() {
        Some(state) => state.source != source || state.stamp != stamp(&source),
        None => true,
    };
    if fresh {
        let scenario = source.load()?;
        let initialised = guard.as_ref().is_some_and(|state| state.initialised);
        let registered = guard.take().map(|state| state.registered).unwrap_or_default();
        *guard = Some(State {
            scenario,
            state_dir: source.state_dir(),
            stamp: stamp(&source),
            source,
            initialised,
            registered,
        });
    }
    Ok(f(guard.as_mut().expect("loaded above")))
}

impl State {
    /// What `amdsmi_get_gpu_process_list` gives for processor `index`: its processes, and
    /// under the `process_on_every_gpu` quirk every other GPU's too, with no memory.
    pub fn listed(&mut self, index: u32) -> Vec<Process> {
        let mut listed = self.processes(index);
        if self.scenario.quirks.iter().any(|quirk| quirk == "process_on_every_gpu") {
            for other in (0..self.scenario.gpus.len() as u32).filter(|&other| other != index) {
                for process in self.processes(other) {
                    if !listed.iter().any(|p| p.pid == process.pid) {
                        listed.push(Process { vram: 0, ..process });
                    }
                }
            }
        }
        listed
    }

    /// The processes on processor `index`: the scenario's, then those `sim-hip` registered
    /// (by amd-smi UUID) that are alive.
    pub fn processes(&mut self, index: u32) -> Vec<Process> {
        let gpu = &self.scenario.gpus[index as usize];
        let mut listed: Vec<Process> = self
            .scenario
            .processes
            .iter()
            .filter(|p| p.gpu == index)
            .map(|p| Process { pid: p.pid, name: p.name.clone(), vram: p.vram.0 })
            .collect();
        let uuid = gpu.uuid.clone();
        for registration in self.registered.live(&self.state_dir) {
            if registration.uuid == uuid && !registration.outside {
                listed.push(Process {
                    pid: registration.pid,
                    name: process_name(registration.pid),
                    vram: registration.used_bytes,
                });
            }
        }
        listed
    }

    /// VRAM in use on processor `index`: its own use and its processes'.
    pub fn vram_used(&mut self, index: u32) -> u64 {
        let own = self.scenario.gpus[index as usize].vram_used.0;
        own + self.processes(index).iter().map(|p| p.vram).sum::<u64>()
    }
}

/// What the driver's fdinfo names a process by: its `comm`.
fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_default()
}
