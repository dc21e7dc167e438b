//! A processor read whole, its processes, the links between processors, and the receipt's
//! counters, from AMD SMI.

use std::time::Instant;

use super::abi::{self, Answered, Handle, Status};
use super::Session;
use crate::probe::gpu::{Gpu, Link, Machine, Memory, Partition, Topology, Utilization};
use crate::probe::health::{classify, Findings};
use crate::probe::meter::{Ask, Reading};
use crate::probe::numa;
use crate::probe::watch::{ListError, Listed};
use crate::process::procfs;

/// A processor's failed queries, as `nvml::Queries` keeps NVML's: an essential one makes the
/// GPU unusable, another only its value unknown; NOT_SUPPORTED is never a failure.
struct Queries<'a> {
    session: &'a Session,
    gpu: u32,
    first_error: Option<String>,
    refused: bool,
    unreadable: Vec<String>,
}

impl Queries<'_> {
    fn ask<T>(
        &mut self,
        what: &str,
        call: &'static str,
        essential: bool,
        query: impl FnOnce() -> Answered<T>,
    ) -> Option<T> {
        match self.session.calls.run(call, Some(self.gpu), query) {
            Ok(value) => Some(value),
            Err(Status::NOT_SUPPORTED) => None,
            Err(status) => {
                tracing::debug!("GPU {}: {what}: {status}", self.gpu);
                self.refused |= status == Status::NO_PERM;
                if essential {
                    let said = match status {
                        Status::NO_PERM => "no permission (outside this job's device cgroup?)".to_owned(),
                        other => other.to_string(),
                    };
                    self.first_error.get_or_insert_with(|| format!("{what}: {said}"));
                } else if matches!(call, "amdsmi_get_gpu_total_ecc_count" | "amdsmi_get_gpu_bad_page_info") {
                    self.unreadable.push(format!("{what} ({call}: {status})"));
                }
                None
            }
        }
    }
}

impl Queries<'_> {
    /// A GPU with what names it: AMD SMI's UUID, ROCr's, the market name, the PCI address.
    fn identity(&mut self, handle: Handle) -> Gpu {
        let api = self.session.api;
        let uuid = self.ask("uuid", "amdsmi_get_gpu_device_uuid", true, || api.uuid(handle));
        let enumeration =
            self.ask("HIP identity", "amdsmi_get_gpu_enumeration_info", false, || api.enumeration(handle));
        let rocr_uuid =
            enumeration.as_ref().map(|info| abi::text(&info.hip_uuid)).filter(|id| id.starts_with("GPU-"));
        let hip_id = enumeration.map(|info| info.hip_id).filter(|&id| id != abi::NO_VALUE_U32);
        let name = self
            .ask("name", "amdsmi_get_gpu_asic_info", false, || api.asic(handle))
            .map(|asic| abi::text(&asic.market_name));
        let pci_bus_id = self
            .ask("pci address", "amdsmi_get_gpu_device_bdf", false, || api.bdf(handle))
            .map(abi::bdf_text);
        Gpu { uuid, rocr_uuid, hip_id, name, pci_bus_id, ..Gpu::unknown(self.gpu) }
    }

    /// VRAM: AMD SMI has no reservation of its own, so what is not used is free.
    fn memory(&mut self, handle: Handle) -> Option<Memory> {
        let api = self.session.api;
        let total = self.ask("memory", "amdsmi_get_gpu_memory_total", true, || api.vram_total(handle))?;
        let used = self.ask("memory", "amdsmi_get_gpu_memory_usage", true, || api.vram_used(handle))?;
        Some(Memory {
            total_bytes: total,
            reserved_bytes: 0,
            used_bytes: used,
            free_bytes: total.saturating_sub(used),
        })
    }

    /// Activity, temperature (MI300 has only the hotspot sensor; older boards an edge one
    /// too) and socket power.
    fn sensors(&mut self, handle: Handle) -> (Option<Utilization>, Option<u32>, Option<f64>) {
        let api = self.session.api;
        let utilization = self
            .ask("utilization", "amdsmi_get_gpu_activity", false, || api.engine_usage(handle))
            .filter(|usage| usage.gfx_activity != abi::NO_VALUE_U32)
            .map(|usage| Utilization {
                gpu_percent: usage.gfx_activity,
                memory_percent: Some(usage.umc_activity).filter(|&p| p != abi::NO_VALUE_U32),
            });
        let temperature_c = self
            .ask("temperature", "amdsmi_get_temp_metric", false, || {
                api.temperature(handle, abi::TEMPERATURE_TYPE_HOTSPOT)
            })
            .or_else(|| {
                self.ask("temperature", "amdsmi_get_temp_metric", false, || {
                    api.temperature(handle, abi::TEMPERATURE_TYPE_EDGE)
                })
            })
            .and_then(|celsius| u32::try_from(celsius).ok());
        let power_watts = self
            .ask("power", "amdsmi_get_power_info", false, || api.power(handle))
            .and_then(|power| socket_watts(&power))
            .map(f64::from);
        (utilization, temperature_c, power_watts)
    }

    /// The compute and memory partition modes, and this processor's partition.
    fn partition(&mut self, handle: Handle) -> Option<Partition> {
        let api = self.session.api;
        let compute = self
            .ask("compute partition", "amdsmi_get_gpu_compute_partition", false, || api.compute_mode(handle));
        let memory = self
            .ask("memory partition", "amdsmi_get_gpu_memory_partition", false, || api.memory_mode(handle));
        let id = self
            .ask("partition", "amdsmi_get_gpu_kfd_info", false, || api.kfd(handle))
            .map(|kfd| kfd.current_partition_id);
        (compute.is_some() || memory.is_some()).then_some(Partition { compute, memory, id })
    }
}

impl Session {
    /// Every GPU processor, in AMD SMI's order (`amd-smi list`'s GPU numbers).
    pub(crate) fn probe(&mut self) -> Result<Machine, super::OpenError> {
        let processors = self.processors().map_err(super::OpenError::Other)?;
        let gpus: Vec<Gpu> = processors
            .iter()
            .enumerate()
            .map(|(index, &handle)| self.probe_gpu(index as u32, handle))
            .collect();
        let api = self.api;
        let driver_version = processors.first().and_then(|&handle| {
            let info = self.calls.run("amdsmi_get_gpu_driver_info", Some(0), || api.driver(handle));
            info.ok().map(|info| abi::text(&info.driver_version))
        });
        Ok(Machine { driver_version, ..Machine::of(crate::probe::vendor::Vendor::Amd, gpus) })
    }

    fn probe_gpu(&self, index: u32, handle: Handle) -> Gpu {
        let api = self.api;
        let mut queries =
            Queries { session: self, gpu: index, first_error: None, refused: false, unreadable: Vec::new() };
        let identity = queries.identity(handle);
        let memory = queries.memory(handle);
        if queries.refused {
            // Outside this job's device cgroup: ROCr does not enumerate it, and every other
            // call would be refused alike.
            return Gpu { handle_refused: true, error: queries.first_error, ..identity };
        }
        let (utilization, temperature_c, power_watts) = queries.sensors(handle);
        let numa_node = queries
            .ask("NUMA node", "amdsmi_topo_get_numa_node_number", false, || api.numa(handle))
            .or_else(|| identity.pci_bus_id.as_deref().and_then(numa::sysfs_node));
        let partition = queries.partition(handle);
        let ecc = queries.ask("ECC errors", "amdsmi_get_gpu_total_ecc_count", false, || api.ecc(handle));
        let pages = queries.ask("bad pages", "amdsmi_get_gpu_bad_page_info", false, || api.bad_pages(handle));
        let processes = queries
            .ask("processes", "amdsmi_get_gpu_process_list", true, || process_list(api, handle))
            .map(|listed| listed.into_iter().map(process_of).collect());
        let findings = Findings {
            ecc_uncorrectable_since_load: ecc.map(|counts| counts.uncorrectable_count),
            retired_pages_pending: pages.map(|statuses| statuses.contains(&abi::PAGE_STATUS_PENDING)),
            unreadable: std::mem::take(&mut queries.unreadable),
            ..Findings::default()
        };
        Gpu {
            memory,
            utilization,
            temperature_c,
            power_watts,
            numa_node,
            cpus: numa_node.and_then(numa::node_cpus),
            health: classify(&findings),
            processes,
            partition,
            error: queries.first_error,
            ..identity
        }
    }

    /// The processes on processor `key` (what verification polls).
    pub(crate) fn processes(&mut self, key: u32) -> Result<Vec<Listed>, ListError> {
        let failed = |status: Status| ListError { lost: false, text: status.to_string() };
        let handle = self.processor(key).map_err(failed)?;
        let api = self.api;
        self.calls.run("amdsmi_get_gpu_process_list", Some(key), || process_list(api, handle)).map_err(failed)
    }

    /// The link of every pair of `gpus`: XGMI, else PCIe within or across NUMA nodes.
    pub(crate) fn links(&mut self, gpus: &[u32]) -> Topology {
        let mut topology = Topology::default();
        let Ok(processors) = self.processors() else { return topology };
        let api = self.api;
        for (at, &a) in gpus.iter().enumerate() {
            for &b in &gpus[at + 1..] {
                let (Some(&first), Some(&second)) = (processors.get(a as usize), processors.get(b as usize))
                else {
                    continue;
                };
                let link =
                    match self.calls.run("amdsmi_topo_get_link_type", Some(a), || api.link(first, second)) {
                        Ok(abi::LINK_TYPE_XGMI) => Link::Xgmi,
                        Ok(_) if api.numa(first).ok().is_some_and(|node| api.numa(second) == Ok(node)) => {
                            Link::Node
                        }
                        Ok(_) => Link::System,
                        Err(_) => continue,
                    };
                topology.insert(a, b, link);
            }
        }
        topology
    }

    /// The receipt's reading of `ask`'s GPUs: socket power, activity and the energy counter.
    /// AMD SMI has no throttle counters or clock-event reasons in NVML's sense: those stay
    /// unknown.
    pub(crate) fn meter(&mut self, ask: &Ask) -> Vec<Reading> {
        let Ok(processors) = self.processors() else { return Vec::new() };
        let api = self.api;
        ask.gpus
            .iter()
            .filter_map(|&gpu| Some((gpu, *processors.get(gpu as usize)?)))
            .map(|(gpu, handle)| {
                let power = self.calls.run("amdsmi_get_power_info", Some(gpu), || api.power(handle)).ok();
                let activity =
                    self.calls.run("amdsmi_get_gpu_activity", Some(gpu), || api.engine_usage(handle)).ok();
                let energy = self.calls.run("amdsmi_get_energy_count", Some(gpu), || api.energy_mj(handle));
                Reading {
                    gpu,
                    at: Instant::now(),
                    power_mw: power.as_ref().and_then(socket_watts).map(|watts| watts.saturating_mul(1000)),
                    gpu_percent: activity.map(|usage| usage.gfx_activity).filter(|&p| p != abi::NO_VALUE_U32),
                    clock_events: None,
                    energy_mj: energy.ok().map(|millijoules| millijoules as u64),
                    limit_mw: power
                        .as_ref()
                        .map(|p| p.power_limit)
                        .filter(|&w| w != 0 && w != abi::NO_VALUE_U32)
                        .map(|watts| watts.saturating_mul(1000)),
                    throttle_ns: Vec::new(),
                    utilization_samples: None,
                    memory_used: None,
                }
            })
            .collect()
    }
}

/// Socket power in watts: the current reading where the board has one (MI300), else the
/// average (MI200 reports only that); `UINT32_MAX` or 0 is none.
fn socket_watts(power: &abi::PowerInfo) -> Option<u32> {
    [power.current_socket_power, power.average_socket_power]
        .into_iter()
        .find(|&w| w != 0 && w != abi::NO_VALUE_U32)
}

/// The processes on `handle`: listed with room for 16, again with room for all if more were
/// there (amdsmi.h: OUT_OF_RESOURCES says the list was cut short, with the whole count). An
/// entry with no memory on this GPU is left out: AMD SMI before its per-GPU attribution fix
/// (ROCm/rocm-systems#8396, 2026) lists every process under every GPU, with memory only where
/// the process has some, which would make each job look as if it ran on every GPU.
fn process_list(api: &abi::Api, handle: Handle) -> Answered<Vec<Listed>> {
    let mut room = 16u32;
    loop {
        let (status, count, entries) = api.process_list(handle, room);
        match status {
            Status::OUT_OF_RESOURCES if count > room => room = count,
            status => {
                status.ok()?;
                return Ok(entries
                    .iter()
                    .take(count.min(room) as usize)
                    .filter(|entry| entry.mem > 0 || entry.memory_usage[2] > 0)
                    .map(|entry| Listed { pid: entry.pid, used_bytes: Some(entry.mem), mps_client: false })
                    .collect());
            }
        }
    }
}

fn process_of(listed: Listed) -> crate::probe::gpu::GpuProcess {
    crate::probe::gpu::GpuProcess {
        pid: listed.pid,
        used_bytes: listed.used_bytes,
        user: procfs::owner(listed.pid),
        command: procfs::command_line(listed.pid),
    }
}
