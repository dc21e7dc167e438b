"""Checks the NVML simulator against NVIDIA's own Python binding (nvidia-ml-py).

Every answer the simulated libnvidia-ml.so.1 gives through pynvml is compared with what the
scenario file says the machine is, using NVML's documented semantics (nvml.h):

  - v2 memory: free = total - reserved - used, `used` excludes `reserved`; v1 `used` includes it;
  - the count/size protocol of nvmlDeviceGetComputeRunningProcesses_*;
  - injected errors per call and per device, transient ones by count;
  - a process is listed only while it is alive and not a zombie;
  - the scenario is re-read when its file changes;
  - [[hang]] calls take as long as they say (or never return), after and for as many calls as
    they say, without holding up other calls; `helper_thread` starts a thread in nvmlInit.

Usage: check_sim.py SCENARIO SIM_CUDA   (LD_LIBRARY_PATH must hold the simulated library)
Prints one line per failure and ends with "N passed, M failed"; exit status 1 on any failure.
"""

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
import threading
import tomllib

import pynvml

UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
ERROR_CODES = {
    name[len("NVML_ERROR_"):]: getattr(pynvml, name)
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}
COMPUTE_MODES = {"default": 0, "exclusive_thread": 1, "prohibited": 2, "exclusive_process": 3}
TOPOLOGY = {"internal": 0, "single": 10, "multiple": 20, "hostbridge": 30, "node": 40, "system": 50}


def as_text(value):
    return value.decode() if isinstance(value, bytes) else value


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: 16 bytes."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfo535(ctypes.Structure):
    """What drivers 535.43 to 535.86 wrote for the _v3 call: 32 bytes where nvml.h says 24."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint),
                ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


# Expected value of a call whose result is opaque (a handle): only success is checked.
ANY = object()


def size(value):
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", value)
    return round(float(match.group(1)) * UNITS[match.group(2)])


def is_mig(handle):
    """pynvml hands back the c_uint nvmlDeviceIsMigDeviceHandle wrote."""
    answer = pynvml.nvmlDeviceIsMigDeviceHandle(handle)
    return getattr(answer, "value", answer)


class Checker:
    def __init__(self, scenario_path, sim_cuda):
        self.path = scenario_path
        self.sim_cuda = sim_cuda
        with open(scenario_path, "rb") as f:
            self.scenario = tomllib.load(f)
        self.gpus = self.scenario.get("gpu", [])
        self.errors = self.scenario.get("error", [])
        self.hits = [0] * len(self.errors)
        self.passed = 0
        self.failed = 0

    # -- bookkeeping -------------------------------------------------------------------------

    def check(self, what, got, expected):
        if got == expected:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}: got {got!r}, expected {expected!r}")

    def injected(self, call, gpu):
        """The error the scenario injects for this call, counting transient ones like the sim."""
        for position, spec in enumerate(self.errors):
            call_matches = spec["call"] == call or (spec["call"] == "*" and gpu is not None)
            gpu_matches = "gpu" not in spec or spec["gpu"] == gpu
            if not (call_matches and gpu_matches):
                continue
            if "times" in spec:
                if self.hits[position] >= spec["times"]:
                    continue
                self.hits[position] += 1
            return ERROR_CODES[spec["error"]]
        return None

    def call(self, what, call, gpu, function, expected, *, unsupported=False):
        """Calls `function`; expects the injected error, NOT_SUPPORTED, or `expected()`."""
        error = self.injected(call, gpu)
        if error is None and unsupported:
            error = pynvml.NVML_ERROR_NOT_SUPPORTED
        try:
            got = function()
        except pynvml.NVMLError as e:
            self.check(what, f"error {e.value}", f"error {error}" if error else expected())
            return None
        want = f"error {error}" if error else expected()
        self.check(what, got if want is not ANY else ANY, want)
        return got

    # -- the machine -------------------------------------------------------------------------

    def processes_on(self, index, *, mps_clients=False):
        """The scenario's processes in GPU `index`'s compute list (an MPS server, never its
        clients), or with `mps_clients` those in its MPS list."""
        return [p for p in self.scenario.get("process", [])
                if p["gpu"] == index and (p.get("mps") == "client") == mps_clients]

    def migs_of(self, index):
        return [m for m in self.scenario.get("mig", []) if m["gpu"] == index]

    def used_v2(self, index, extra=0):
        gpu = self.gpus[index]
        every = self.processes_on(index) + self.processes_on(index, mps_clients=True)
        listed = sum(size(p["used"]) for p in every if "used" in p)
        instances = sum(size(m.get("memory_used", 0)) for m in self.migs_of(index))
        return size(gpu.get("memory_used", 0)) + instances + listed + extra

    def check_system(self):
        self.call("driver version", "nvmlSystemGetDriverVersion", None,
                  pynvml.nvmlSystemGetDriverVersion,
                  lambda: self.scenario.get("driver_version", "550.54.15"))
        cuda = self.scenario.get("cuda_driver_version", 12040)
        self.call("CUDA driver version", "nvmlSystemGetCudaDriverVersion", None,
                  pynvml.nvmlSystemGetCudaDriverVersion, lambda: cuda)
        self.call("CUDA driver version v2", "nvmlSystemGetCudaDriverVersion", None,
                  pynvml.nvmlSystemGetCudaDriverVersion_v2, lambda: cuda)
        self.call("device count", "nvmlDeviceGetCount", None,
                  pynvml.nvmlDeviceGetCount, lambda: len(self.gpus))
        self.check_events()
        cc = self.scenario.get("confidential_computing")
        try:
            state = pynvml.nvmlSystemGetConfComputeState()
            ready = pynvml.nvmlSystemGetConfComputeGpusReadyState()
            self.check("CC feature", state.ccFeature,
                       pynvml.NVML_CC_SYSTEM_FEATURE_ENABLED if cc and cc["feature"] == "enabled"
                       else pynvml.NVML_CC_SYSTEM_FEATURE_DISABLED)
            self.check("CC ready", ready, pynvml.NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE if cc and cc.get("ready")
                       else pynvml.NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE)
        except pynvml.NVMLError as e:
            if not self.errors:
                self.check("CC state", e.value, "answered" if cc else pynvml.NVML_ERROR_NOT_SUPPORTED)
        excluded = self.scenario.get("excluded", [])
        self.call("excluded count", "nvmlGetExcludedDeviceCount", None,
                  pynvml.nvmlGetExcludedDeviceCount, lambda: len(excluded))
        for at, spec in enumerate(excluded):
            if self.injected("nvmlGetExcludedDeviceInfoByIndex", None) is None:
                info = pynvml.nvmlGetExcludedDeviceInfoByIndex(at)
                self.check(f"excluded {at}", (as_text(info.pci.busId), as_text(info.uuid)),
                           (spec["pci_bus_id"].upper(), spec["uuid"]))

    def check_gpu(self, index):
        gpu = self.gpus[index]
        tag = f"GPU {index}"
        if not gpu.get("accessible", True):
            try:
                pynvml.nvmlDeviceGetHandleByIndex(index)
                self.check(f"{tag} handle", "a handle", "NO_PERMISSION")
            except pynvml.NVMLError as e:
                self.check(f"{tag} handle", e.value, pynvml.NVML_ERROR_NO_PERMISSION)
            return
        handle = self.call(f"{tag} handle", "nvmlDeviceGetHandleByIndex", index,
                           lambda: pynvml.nvmlDeviceGetHandleByIndex(index), lambda: ANY)
        if handle is None:
            return
        if self.injected_everywhere(index):
            return
        c = lambda what, call, fn, expected, **kw: self.call(f"{tag} {what}", call, index, fn, expected, **kw)
        c("index", "nvmlDeviceGetIndex", lambda: pynvml.nvmlDeviceGetIndex(handle), lambda: index)
        c("name", "nvmlDeviceGetName", lambda: pynvml.nvmlDeviceGetName(handle), lambda: gpu["name"])
        c("uuid", "nvmlDeviceGetUUID", lambda: pynvml.nvmlDeviceGetUUID(handle), lambda: gpu["uuid"])

        def pci():
            info = pynvml.nvmlDeviceGetPciInfo(handle)
            return (info.busId, info.domain, info.bus, info.device, info.pciDeviceId)

        bus_id = gpu["pci_bus_id"].upper()
        domain, bus, dev = (int(part, 16) for part in re.split(r"[:.]", bus_id)[:3])
        c("PCI info", "nvmlDeviceGetPciInfo", pci,
          lambda: (bus_id, domain, bus, dev, gpu.get("pci_device_id", 0x20B510DE)))

        total = size(gpu["memory_total"])
        reserved = size(gpu.get("memory_reserved", 0))
        used = self.used_v2(index)

        def memory_v1():
            m = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return (m.total, m.used, m.free)

        def memory_v2():
            m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            return (m.total, m.reserved, m.used, m.free)

        # nvml.h: an integrated GPU that shares the system's memory answers NOT_SUPPORTED.
        unified = gpu.get("unified_memory", False)
        c("memory v1", "nvmlDeviceGetMemoryInfo", memory_v1,
          lambda: (total, used + reserved, total - reserved - used), unsupported=unified)
        c("memory v2", "nvmlDeviceGetMemoryInfo", memory_v2,
          lambda: (total, reserved, used, total - reserved - used), unsupported=unified)
        try:
            pynvml.nvmlDeviceGetMemoryInfo(handle, version=0x01000028)
            self.check(f"{tag} memory v2 with a wrong version", "success", "ARGUMENT_VERSION_MISMATCH")
        except pynvml.NVMLError as e:
            self.check(f"{tag} memory v2 with a wrong version", e.value,
                       pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)

        def utilization():
            u = pynvml.nvmlDeviceGetUtilizationRates(handle)
            return (u.gpu, u.memory)

        # nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently supported."
        has_util = "utilization_gpu" in gpu and "utilization_memory" in gpu and gpu.get("mig_mode") != "enabled"
        c("utilization", "nvmlDeviceGetUtilizationRates", utilization,
          lambda: (gpu["utilization_gpu"], gpu["utilization_memory"]), unsupported=not has_util)
        c("temperature", "nvmlDeviceGetTemperature",
          lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
          lambda: gpu["temperature_c"], unsupported="temperature_c" not in gpu)
        c("power", "nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
          lambda: gpu["power_mw"], unsupported="power_mw" not in gpu)
        c("compute mode", "nvmlDeviceGetComputeMode", lambda: pynvml.nvmlDeviceGetComputeMode(handle),
          lambda: COMPUTE_MODES[gpu["compute_mode"]], unsupported="compute_mode" not in gpu)
        mig = {"disabled": 0, "enabled": 1}.get(gpu.get("mig_mode"))
        pending = {"disabled": 0, "enabled": 1}.get(gpu.get("mig_pending"), mig)
        c("MIG mode", "nvmlDeviceGetMigMode", lambda: list(pynvml.nvmlDeviceGetMigMode(handle)),
          lambda: [mig, pending], unsupported=mig is None)
        c("max MIG devices", "nvmlDeviceGetMaxMigDeviceCount",
          lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(handle), lambda: 7, unsupported=mig is None)
        if mig is not None and not self.injected_everywhere(index):
            self.check_migs(index, handle)

        def affinity_words():
            words = [0, 0]
            for part in gpu["cpu_affinity"].split(","):
                first, _, last = part.partition("-")
                for cpu in range(int(first), int(last or first) + 1):
                    if cpu < 128:
                        words[cpu // 64] |= 1 << (cpu % 64)
            return words

        c("CPU affinity", "nvmlDeviceGetCpuAffinity",
          lambda: list(pynvml.nvmlDeviceGetCpuAffinity(handle, 2)), affinity_words,
          unsupported="cpu_affinity" not in gpu)
        c("minor number", "nvmlDeviceGetMinorNumber", lambda: pynvml.nvmlDeviceGetMinorNumber(handle),
          lambda: index)
        # nvml.h: "This only applies to platforms where the GPUs are NUMA nodes": NOT_SUPPORTED
        # on a PCIe host (no gpu_numa_id). The host node is the memory affinity's.
        c("GPU NUMA ID", "nvmlDeviceGetNumaNodeId", lambda: pynvml.nvmlDeviceGetNumaNodeId(handle),
          lambda: gpu["gpu_numa_id"], unsupported="gpu_numa_id" not in gpu)
        for scope in (pynvml.NVML_AFFINITY_SCOPE_NODE, pynvml.NVML_AFFINITY_SCOPE_SOCKET):
            c("NUMA affinity", "nvmlDeviceGetMemoryAffinity",
              lambda: list(pynvml.nvmlDeviceGetMemoryAffinity(handle, 2, scope)),
              lambda: [1 << gpu["numa_node"] if gpu["numa_node"] < 64 else 0,
                       1 << (gpu["numa_node"] - 64) if 64 <= gpu["numa_node"] < 128 else 0],
              unsupported="numa_node" not in gpu)
        # As nvml.h documents each call for a data-center board on Linux.
        c("fan speed", "nvmlDeviceGetFanSpeed", lambda: pynvml.nvmlDeviceGetFanSpeed(handle),
          lambda: None, unsupported=True)  # "For all discrete products with dedicated fans"
        c("performance state", "nvmlDeviceGetPerformanceState",
          lambda: pynvml.nvmlDeviceGetPerformanceState(handle), lambda: gpu.get("pstate", 0))
        c("persistence mode", "nvmlDeviceGetPersistenceMode",
          lambda: pynvml.nvmlDeviceGetPersistenceMode(handle),
          lambda: 0 if gpu.get("persistence_mode") == "disabled" else 1)
        c("display mode", "nvmlDeviceGetDisplayMode", lambda: pynvml.nvmlDeviceGetDisplayMode(handle),
          lambda: pynvml.NVML_FEATURE_DISABLED)
        c("display active", "nvmlDeviceGetDisplayActive",
          lambda: pynvml.nvmlDeviceGetDisplayActive(handle), lambda: pynvml.NVML_FEATURE_DISABLED)
        c("power limit", "nvmlDeviceGetPowerManagementLimit",
          lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle), lambda: gpu["power_limit_mw"],
          unsupported="power_limit_mw" not in gpu)
        c("enforced power limit", "nvmlDeviceGetEnforcedPowerLimit",
          lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle), lambda: gpu["power_limit_mw"],
          unsupported="power_limit_mw" not in gpu)
        capability = gpu.get("compute_capability") or next(
            (cc for model, cc in (("V100", "7.0"), ("A100", "8.0"), ("H100", "9.0"), ("H200", "9.0"))
             if model in gpu["name"].upper()), None)
        c("compute capability", "nvmlDeviceGetCudaComputeCapability",
          lambda: list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
          lambda: [int(part) for part in capability.split(".")], unsupported=capability is None)
        c("driver model", "nvmlDeviceGetDriverModel_v2",
          lambda: pynvml.nvmlDeviceGetDriverModel_v2(handle), lambda: None, unsupported=True)  # Windows only
        try:
            pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
            self.check(f"GPU {index} process utilization", "samples", "NOT_FOUND")
        except pynvml.NVMLError as e:
            expected = pynvml.NVML_ERROR_NOT_SUPPORTED if mig else pynvml.NVML_ERROR_NOT_FOUND
            if not self.injected_everywhere(index):
                self.check(f"GPU {index} process utilization", e.value, expected)
        self.check_samples(index, handle, gpu, mig)
        self.check_health(index, handle)
        self.check_processes(index, handle)
        self.check_mps_list(index, handle)
        self.check_process_names(index)
        self.check_fabric(index, handle)
        self.check_lookups(index, handle)

    def check_samples(self, index, handle, gpu, mig):
        """nvmlDeviceGetSamples, NVML_GPU_UTILIZATION_SAMPLES: unsigned ints, oldest first, each
        the GPU's utilization, only those newer than the timestamp given (NOT_FOUND when none
        is); NOT_SUPPORTED for another type, in MIG mode, or without a utilization figure."""
        if self.injected_everywhere(index) or self.errors:
            return
        supported = "utilization_gpu" in gpu and not mig and gpu.get("mig_mode") != "enabled"
        try:
            kind, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        except pynvml.NVMLError as e:
            self.check(f"GPU {index} samples", e.value, "an answer" if supported else pynvml.NVML_ERROR_NOT_SUPPORTED)
            return
        if not supported:
            self.check(f"GPU {index} samples", "an answer", "NOT_SUPPORTED")
            return
        self.check(f"GPU {index} samples value type", kind, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
        stamps = [sample.timeStamp for sample in samples]
        self.check(f"GPU {index} samples oldest first", stamps, sorted(set(stamps)))
        self.check(f"GPU {index} samples kept", 0 < len(samples) <= 120, True)
        self.check(f"GPU {index} samples values", {sample.sampleValue.uiVal for sample in samples},
                   {gpu["utilization_gpu"]})
        try:
            newer = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, stamps[-1])[1]
            self.check(f"GPU {index} samples newer", all(s.timeStamp > stamps[-1] for s in newer), True)
        except pynvml.NVMLError as e:
            self.check(f"GPU {index} samples newer", e.value, pynvml.NVML_ERROR_NOT_FOUND)
        try:
            pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_PROCESSOR_CLK_SAMPLES, 0)
            self.check(f"GPU {index} clock samples", "an answer", "NOT_SUPPORTED")
        except pynvml.NVMLError as e:
            self.check(f"GPU {index} clock samples", e.value, pynvml.NVML_ERROR_NOT_SUPPORTED)

    def check_mps_list(self, index, handle, extra=()):
        """nvmlDeviceGetMPSComputeRunningProcesses_v3 and _v2: the MPS clients only."""
        if self.injected_everywhere(index) or self.errors:
            return
        expected = sorted([(p["pid"], size(p["used"]) if "used" in p else None)
                           for p in self.processes_on(index, mps_clients=True)] + list(extra))
        for tag, function in [("v3", pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3),
                              ("v2", pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v2)]:
            got = sorted((p.pid, p.usedGpuMemory) for p in function(handle))
            self.check(f"GPU {index} MPS clients {tag}", got, expected)

    def check_process_names(self, index):
        """nvmlSystemGetProcessName: a scenario process's `name` (NOT_FOUND without one); and
        cropped to the buffer, as nvml.h says (pynvml asks for 1024 bytes)."""
        if self.errors:
            return
        for process in [p for p in self.scenario.get("process", []) if p["gpu"] == index]:
            try:
                got = pynvml.nvmlSystemGetProcessName(process["pid"])
                got = got.decode() if isinstance(got, bytes) else got
            except pynvml.NVMLError as e:
                got = f"error {e.value}"
            want = process.get("name", f"error {pynvml.NVML_ERROR_NOT_FOUND}")
            self.check(f"GPU {index} PID {process['pid']} name", got, want)

    def check_fabric(self, index, handle):
        """nvmlDeviceGetGpuFabricInfoV (v2 and v3 layouts) and the unversioned call, as nvml.h
        lays them out; NOT_SUPPORTED without a fabric."""
        if self.injected_everywhere(index) or self.errors:
            return
        fabric = self.gpus[index].get("fabric")
        states = {"not-supported": 0, "not-started": 1, "in-progress": 2, "completed": 3}
        for tag, info in [("v3", pynvml.c_nvmlGpuFabricInfo_v3_t()), ("v2", pynvml.c_nvmlGpuFabricInfo_v2_t()),
                          ("v1", pynvml.c_nvmlGpuFabricInfo_t())]:
            call = pynvml.nvmlDeviceGetGpuFabricInfo if tag == "v1" else pynvml.nvmlDeviceGetGpuFabricInfoV
            try:
                call(handle, ctypes.byref(info))
            except pynvml.NVMLError as e:
                self.check(f"GPU {index} fabric {tag}", e.value,
                           "answered" if fabric else pynvml.NVML_ERROR_NOT_SUPPORTED)
                continue
            if not fabric:
                self.check(f"GPU {index} fabric {tag}", "answered", "NOT_SUPPORTED")
                continue
            self.check(f"GPU {index} fabric {tag} state", info.state, states[fabric.get("state", "completed")])
            self.check(f"GPU {index} fabric {tag} clique", info.cliqueId, fabric.get("clique_id", 0))
            want_uuid = bytes.fromhex("".join(c for c in fabric.get("cluster_uuid", "") if c in "0123456789abcdefABCDEF")
                                      .ljust(32, "0"))
            self.check(f"GPU {index} fabric {tag} cluster", bytes(info.clusterUuid), want_uuid)
            status = fabric.get("status", "SUCCESS")
            self.check(f"GPU {index} fabric {tag} status", info.status,
                       pynvml.NVML_SUCCESS if status == "SUCCESS" else ERROR_CODES[status])
            if tag != "v1":
                mask = info.healthMask
                for key, name in [("route_unhealthy", "ROUTE_UNHEALTHY"), ("degraded_bw", "DEGRADED_BW"),
                                  ("access_timeout_recovery", "ACCESS_TIMEOUT_RECOVERY")]:
                    shift = getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}")
                    width = getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{name}")
                    want = {None: 0, True: getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_TRUE"),
                            False: getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_FALSE")}[fabric.get(key)]
                    self.check(f"GPU {index} fabric {tag} {key}", (mask >> shift) & width, want)

    def check_events(self):
        """Xid events: every [[xid]] once per event set registered for its GPU, then TIMEOUT."""
        xids = [x for x in self.scenario.get("xid", []) if x.get("after_ms", 0) == 0]
        if not self.gpus or self.errors or self.scenario.get("hang"):
            return
        events = pynvml.nvmlEventSetCreate()
        for index in range(len(self.gpus)):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.check(f"GPU {index} supported events", pynvml.nvmlDeviceGetSupportedEventTypes(handle),
                       pynvml.nvmlEventTypeXidCriticalError)
            pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
        got = []
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(events, 50)
            except pynvml.NVMLError as e:
                self.check("event wait ends with TIMEOUT", e.value, pynvml.NVML_ERROR_TIMEOUT)
                break
            got.append((pynvml.nvmlDeviceGetIndex(data.device), data.eventType, data.eventData))
        want = sorted((x["gpu"], pynvml.nvmlEventTypeXidCriticalError, x["code"]) for x in xids)
        self.check("Xid events", sorted(got), want)
        pynvml.nvmlEventSetFree(events)

    def check_health(self, index, handle):
        """ECC, row remapping (fields 142-145 too), retired pages, clock events, PCIe width,
        as nvml.h documents them for the board the scenario describes."""
        gpu = self.gpus[index]
        c = lambda what, call, function, expected, **kw: self.call(f"GPU {index} {what}", call, index, function, expected, **kw)
        ecc = gpu.get("ecc_mode")
        c("ECC mode", "nvmlDeviceGetEccMode", lambda: list(pynvml.nvmlDeviceGetEccMode(handle)),
          lambda: [int(ecc == "enabled")] * 2, unsupported=ecc is None)
        for (kind, counter, key) in ((1, 0, "ecc_volatile_uncorrected"), (0, 0, "ecc_volatile_corrected"),
                                     (1, 1, "ecc_aggregate_uncorrected"), (0, 1, "ecc_aggregate_corrected")):
            c(f"ECC {key}", "nvmlDeviceGetTotalEccErrors",
              lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, kind, counter), lambda: gpu.get(key, 0),
              unsupported=ecc != "enabled")
        capability = gpu.get("compute_capability") or next(
            (cc for model, cc in (("V100", "7.0"), ("A100", "8.0"), ("H100", "9.0"), ("H200", "9.0"))
             if model in gpu["name"].upper()), "0.0")
        ampere = int(capability.split(".")[0]) >= 8
        remap = {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        remap.update(gpu.get("remapped_rows", {}))
        remap_supported = ampere and gpu.get("mig_mode") != "enabled"
        c("remapped rows", "nvmlDeviceGetRemappedRows", lambda: list(pynvml.nvmlDeviceGetRemappedRows(handle)),
          lambda: [remap["correctable"], remap["uncorrectable"], int(remap["pending"]), int(remap["failure"])],
          unsupported=not remap_supported)
        if self.injected("nvmlDeviceGetFieldValues", index) is None and not self.injected_everywhere(index):
            fields = pynvml.nvmlDeviceGetFieldValues(handle, [142, 143, 144, 145, 1])
            got = [(f.nvmlReturn, f.value.uiVal if f.nvmlReturn == 0 else None) for f in fields]
            want = [(0, remap["correctable"]), (0, remap["uncorrectable"]), (0, int(remap["pending"])),
                    (0, int(remap["failure"]))] if remap_supported else [(pynvml.NVML_ERROR_NOT_SUPPORTED, None)] * 4
            self.check(f"GPU {index} field values 142-145, 1", got, want + [(pynvml.NVML_ERROR_NOT_SUPPORTED, None)])
        c("retired pages pending", "nvmlDeviceGetRetiredPagesPendingStatus",
          lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
          lambda: int(gpu.get("retired_pages_pending", False)), unsupported=ampere)
        bits = {"idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sync_boost": 0x10,
                "sw_thermal": 0x20, "hw_thermal": 0x40, "power_brake": 0x80, "display_clocks": 0x100,
                "board_limit": 0x200, "reliability": 0x400}
        names = gpu.get("clocks_event_reasons")
        events = sum(bits[n] for n in names) if names is not None else (1 if gpu.get("utilization_gpu") == 0 else 0)
        c("clock events", "nvmlDeviceGetCurrentClocksEventReasons",
          lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle), lambda: events)
        # The energy counter (mJ) grows at power_mw from the Unix epoch: read between two clock
        # reads, it lies between what they give.
        has_energy = gpu.get("energy_counter", "power_mw" in gpu and int(capability.split(".")[0]) >= 7)
        before = time.time()
        energy = c("energy", "nvmlDeviceGetTotalEnergyConsumption",
                   lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), lambda: ANY,
                   unsupported=not has_energy or "power_mw" not in gpu)
        after = time.time()
        if energy is not None and "power_mw" in gpu:
            low, high = int(gpu["power_mw"] * (before - 0.002)), int(gpu["power_mw"] * (after + 0.002))
            self.check(f"GPU {index} energy within the clock reads", low <= energy <= high, True)
        counters = {"sw_power_cap": 74, "sync_boost": 76, "board_limit": 77, "reliability": 79,
                    "sw_thermal": 269, "hw_thermal": 270, "power_brake": 271}
        if self.injected("nvmlDeviceGetFieldValues", index) is None and not self.injected_everywhere(index):
            fields = pynvml.nvmlDeviceGetFieldValues(handle, list(counters.values()))
            got = [(f.nvmlReturn, f.value.ullVal if f.nvmlReturn == 0 else None) for f in fields]
            table = gpu.get("throttle_ns")
            want = [(0, table.get(name, 0)) if table is not None else (pynvml.NVML_ERROR_NOT_SUPPORTED, None)
                    for name in counters]
            self.check(f"GPU {index} throttle counters", got, want)
        c("PCIe width", "nvmlDeviceGetCurrPcieLinkWidth", lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
          lambda: gpu.get("pcie_width", 16))
        c("PCIe max width", "nvmlDeviceGetMaxPcieLinkWidth", lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
          lambda: gpu.get("pcie_max_width", 16))

    def check_migs(self, index, handle):
        """MIG devices: slots in file order, NOT_FOUND past them; each answers as a device of its
        own (UUID, name, ids, memory, processes with their instance ids), without utilization."""
        gpu = self.gpus[index]
        migs = self.migs_of(index)
        for slot in range(7):
            tag = f"GPU {index} MIG {slot}"
            try:
                mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as e:
                self.check(f"{tag} handle", e.value, pynvml.NVML_ERROR_NOT_FOUND if slot >= len(migs) else None)
                continue
            if slot >= len(migs):
                self.check(f"{tag} handle", "a handle", "NOT_FOUND")
                continue
            spec = migs[slot]
            self.check(f"{tag} is MIG", is_mig(mig_handle), 1)
            self.check(f"{tag} parent is not", is_mig(handle), 0)
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_handle)
            self.check(f"{tag} parent", pynvml.nvmlDeviceGetUUID(parent), gpu["uuid"])
            self.check(f"{tag} uuid", pynvml.nvmlDeviceGetUUID(mig_handle), spec["uuid"])
            self.check(f"{tag} name", pynvml.nvmlDeviceGetName(mig_handle), f"{gpu['name']} MIG {spec['profile']}")
            self.check(f"{tag} GPU instance", pynvml.nvmlDeviceGetGpuInstanceId(mig_handle), spec["gpu_instance_id"])
            self.check(f"{tag} compute instance", pynvml.nvmlDeviceGetComputeInstanceId(mig_handle),
                       spec.get("compute_instance_id", 0))
            listed = [p for p in self.scenario.get("process", []) if p.get("mig") == spec["uuid"]]
            used = size(spec.get("memory_used", 0)) + sum(size(p["used"]) for p in listed if "used" in p)
            memory = pynvml.nvmlDeviceGetMemoryInfo(mig_handle, version=pynvml.nvmlMemory_v2)
            total = size(spec["memory_total"])
            self.check(f"{tag} memory", (memory.total, memory.reserved, memory.used, memory.free),
                       (total, 0, used, total - used))
            try:
                pynvml.nvmlDeviceGetUtilizationRates(mig_handle)
                self.check(f"{tag} utilization", "an answer", "NOT_SUPPORTED")
            except pynvml.NVMLError as e:
                self.check(f"{tag} utilization", e.value, pynvml.NVML_ERROR_NOT_SUPPORTED)
            got = sorted((p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId)
                         for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig_handle))
            want = sorted((p["pid"], size(p["used"]) if "used" in p else None, spec["gpu_instance_id"],
                           spec.get("compute_instance_id", 0)) for p in listed)
            self.check(f"{tag} processes", got, want)
            by_uuid = pynvml.nvmlDeviceGetHandleByUUID(spec["uuid"].encode())
            self.check(f"{tag} by UUID", (is_mig(by_uuid), pynvml.nvmlDeviceGetUUID(by_uuid)), (1, spec["uuid"]))
            # A physical GPU has no instance ids.
            try:
                pynvml.nvmlDeviceGetGpuInstanceId(handle)
                self.check(f"GPU {index} instance id", "an answer", "NOT_SUPPORTED")
            except pynvml.NVMLError as e:
                self.check(f"GPU {index} instance id", e.value, pynvml.NVML_ERROR_NOT_SUPPORTED)

    def injected_everywhere(self, index):
        """A `call = "*"` error on this GPU: every device call fails the same way."""
        for spec in self.errors:
            if spec["call"] == "*" and spec.get("gpu", index) == index and "times" not in spec:
                return True
        return False

    def expected_processes(self, index, extra=()):
        listed = [(p["pid"], size(p["used"]) if "used" in p else None) for p in self.processes_on(index)]
        return sorted(listed + list(extra))

    def check_processes(self, index, handle, extra=()):
        tag = f"GPU {index}"
        expected = self.expected_processes(index, extra)

        def listed(function):
            return lambda: sorted((p.pid, p.usedGpuMemory) for p in function(handle))

        def raw(symbol, entry, room):
            return lambda: sorted(self.raw_processes(handle, symbol, entry, room))

        call = "nvmlDeviceGetComputeRunningProcesses"
        v3 = listed(pynvml.nvmlDeviceGetComputeRunningProcesses)
        if "v3_stride_32" in self.scenario.get("quirks", []):
            # The 535 quirk: pynvml's 24-byte reading would be garbled; read 32-byte entries
            # from a buffer sized, as callers size it, for 24-byte ones.
            v3 = raw(call + "_v3", ProcessInfo535, 24)
        fetches = [
            ("processes v3", v3),
            ("processes v2", listed(pynvml.nvmlDeviceGetComputeRunningProcesses_v2)),
            # pynvml no longer wraps the v1 call and its 16-byte entries.
            ("processes v1", raw(call, ProcessInfoV1, 16)),
        ]
        for what, fetch in fetches:
            self.call(f"{tag} {what}", call, index, fetch, lambda: expected)
            # Each reading makes two calls (size, then fill): count both against injections.
            if expected:
                self.injected(call, index)
        if self.injected(call, index) is None:
            self.check_count_protocol(tag, handle, len(expected))

    def raw_processes(self, handle, symbol, entry, room):
        """A process list read through ctypes with `entry` structs; the buffer is announced to
        NVML as holding entries of `room` bytes. Returns (pid, used bytes or None)."""
        function = pynvml._nvmlGetFunctionPointer(symbol)
        count = ctypes.c_uint(0)
        result = function(handle, ctypes.byref(count), None)
        if result == pynvml.NVML_SUCCESS:
            return []
        if result != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(result)
        slots = count.value * 2
        entries = (entry * slots)()
        count = ctypes.c_uint(slots * ctypes.sizeof(entry) // room)
        pynvml._nvmlCheckReturn(function(handle, ctypes.byref(count), entries))
        not_available = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        return [(e.pid, None if e.usedGpuMemory == not_available else e.usedGpuMemory)
                for e in entries[: count.value]]

    def check_count_protocol(self, tag, handle, count_needed):
        function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
        count = ctypes.c_uint(0)
        result = function(handle, ctypes.byref(count), None)
        expected = pynvml.NVML_ERROR_INSUFFICIENT_SIZE if count_needed else pynvml.NVML_SUCCESS
        self.check(f"{tag} size query", (result, count.value), (expected, count_needed))
        if count_needed >= 2:
            count = ctypes.c_uint(count_needed - 1)
            entries = (pynvml.c_nvmlProcessInfo_v3_t * (count_needed - 1))()
            result = function(handle, ctypes.byref(count), entries)
            self.check(f"{tag} too small a buffer", (result, count.value),
                       (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, count_needed))

    def check_lookups(self, index, handle):
        gpu = self.gpus[index]
        tag = f"GPU {index}"
        by_uuid = self.call(f"{tag} handle by UUID", "nvmlDeviceGetHandleByUUID", index,
                            lambda: pynvml.nvmlDeviceGetHandleByUUID(gpu["uuid"]), lambda: ANY)
        if by_uuid is not None:
            self.check(f"{tag} handle by UUID is the same device", pynvml.nvmlDeviceGetIndex(by_uuid), index)
        by_bus = self.call(f"{tag} handle by PCI bus id", "nvmlDeviceGetHandleByPciBusId", index,
                           lambda: pynvml.nvmlDeviceGetHandleByPciBusId(gpu["pci_bus_id"]), lambda: ANY)
        if by_bus is not None:
            self.check(f"{tag} handle by PCI bus id is the same device", pynvml.nvmlDeviceGetIndex(by_bus), index)

    def check_topology(self):
        links = {tuple(sorted(link["gpus"])): TOPOLOGY[link["level"]] for link in self.scenario.get("link", [])}
        usable = [i for i, g in enumerate(self.gpus) if g.get("accessible", True) and not self.injected_everywhere(i)]
        for a in usable:
            for b in usable:
                if a >= b or self.errors:
                    continue
                level = links.get((a, b))
                if level is None:
                    node_a, node_b = self.gpus[a].get("numa_node"), self.gpus[b].get("numa_node")
                    level = 40 if node_a is not None and node_a == node_b else 50
                first, second = pynvml.nvmlDeviceGetHandleByIndex(a), pynvml.nvmlDeviceGetHandleByIndex(b)
                got = pynvml.nvmlDeviceGetTopologyCommonAncestor(first, second)
                self.check(f"topology {a}-{b}", got, level)
                nvlink = any(sorted(link["gpus"]) == [a, b] and link.get("nvlink") for link in self.scenario.get("link", []))
                self.check(f"NVLink {a}-{b}", pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
                           pynvml.NVML_P2P_STATUS_OK if nvlink else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    # -- live processes ----------------------------------------------------------------------

    def healthy_gpu(self):
        for index, gpu in enumerate(self.gpus):
            if gpu.get("accessible", True) and not any(
                    e.get("gpu", index) == index for e in self.errors):
                return index
        return None

    def check_live_registration(self):
        index = self.healthy_gpu()
        if index is None:
            return
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(index), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        mem = 1 << 30

        def start():
            process = subprocess.Popen([self.sim_cuda, "--mem", "1GiB", "--sleep", "30"],
                                       env=env, stdout=subprocess.PIPE, text=True)
            process.stdout.readline()
            return process

        # An integrated GPU has no memory figure to count it in (NOT_SUPPORTED, checked above).
        unified = self.gpus[index].get("unified_memory", False)
        used = lambda: 0 if unified else pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used
        before = used()
        process = start()
        offset = self.scenario.get("pid_offset", 0)
        self.check_processes(index, handle, extra=[(process.pid + offset, mem)])
        after = used()
        self.check("a live process's memory counts as used", after - before, 0 if unified else mem)
        process.send_signal(signal.SIGTERM)
        process.wait()
        self.check("killed by SIGTERM, like a real program", process.returncode, -signal.SIGTERM)
        self.check_processes(index, handle)

        # SIGKILLed: no chance to unregister. Unreaped it is a zombie, which NVML does not list.
        process = start()
        process.send_signal(signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline:
            with open(f"/proc/{process.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        self.check_processes(index, handle)
        process.wait()
        self.check_processes(index, handle)
        self.check_live_mps(index, handle, env)

    def check_live_mps(self, index, handle, env):
        """A sim-cuda MPS server is in the compute list; a later sim-cuda of the same user on
        that GPU is its client, only in the MPS list; both count in the GPU's memory."""
        offset = self.scenario.get("pid_offset", 0)
        started = []
        for args in (["--mps-server", "--mem", "256MiB"], ["--mem", "1GiB"]):
            process = subprocess.Popen([self.sim_cuda, *args, "--sleep", "30"], env=env, stdout=subprocess.PIPE, text=True)
            process.stdout.readline()
            started.append(process)
        server, client = started
        self.check_processes(index, handle, extra=[(server.pid + offset, 256 << 20)])
        self.check_mps_list(index, handle, extra=[(client.pid + offset, 1 << 30)])
        if not self.gpus[index].get("unified_memory", False):
            used = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used
            self.check("MPS server and client memory count as used", used, self.used_v2(index, (256 << 20) + (1 << 30)))
        for process in started:
            process.send_signal(signal.SIGTERM)
            process.wait()
        self.check_mps_list(index, handle)

    def check_reload(self):
        with open(self.path, "rb") as f:
            original = f.read()
        changed = re.sub(rb'driver_version = "[^"]*"', b'driver_version = "999.99.99"', original, count=1)
        if changed == original:
            changed = b'driver_version = "999.99.99"\n' + original
        with open(self.path + ".new", "wb") as f:
            f.write(changed)
        os.replace(self.path + ".new", self.path)
        time.sleep(0.01)  # the simulator looks at the file at most every 2 ms
        self.check("scenario re-read after a change", pynvml.nvmlSystemGetDriverVersion(), "999.99.99")
        with open(self.path + ".new", "wb") as f:
            f.write(original)
        os.replace(self.path + ".new", self.path)
        time.sleep(0.01)
        self.hits = [0] * len(self.errors)

    # -- what a hung or threaded driver does ----------------------------------------------------

    HANGABLE = {
        "nvmlDeviceGetName": pynvml.nvmlDeviceGetName,
        "nvmlDeviceGetPowerUsage": pynvml.nvmlDeviceGetPowerUsage,
        "nvmlDeviceGetMinorNumber": pynvml.nvmlDeviceGetMinorNumber,
    }

    def check_threads(self, before):
        tasks = os.listdir("/proc/self/task")
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
        expected = self.scenario.get("helper_thread", False)
        self.check("helper thread started by nvmlInit", "nvml-sim-helper" in names, expected)
        self.check("threads added by nvmlInit", len(tasks) - before, 1 if expected else 0)

    def timed(self, function, handle, limit):
        """Seconds the call took, or None if it had not returned after `limit` seconds."""
        done = []
        started = time.monotonic()
        worker = threading.Thread(target=lambda: done.append(self.quietly(function, handle)), daemon=True)
        worker.start()
        worker.join(limit)
        return time.monotonic() - started if done else None

    @staticmethod
    def quietly(function, handle):
        try:
            return function(handle)
        except pynvml.NVMLError as e:
            return e

    def check_hangs(self):
        for spec in self.scenario.get("hang", []):
            function = self.HANGABLE.get(spec["call"])
            if function is None:
                continue
            handle = pynvml.nvmlDeviceGetHandleByIndex(spec.get("gpu", 0))
            after, times, ms = spec.get("after", 0), spec.get("times", 1), spec.get("ms")
            tag = f"[[hang]] {spec['call']}"
            for call in range(1, after + times + 2):
                hangs = after < call <= after + times
                limit = 0.6 if ms is None else ms / 1000 + 5
                took = self.timed(function, handle, limit)
                if not hangs:
                    self.check(f"{tag} call {call} returns at once", took is not None and took < 0.25, True)
                elif ms is None:
                    self.check(f"{tag} call {call} never returns", took, None)
                else:
                    self.check(f"{tag} call {call} takes {ms} ms", took is not None and took >= ms / 1000, True)
            # Another call goes on while one hangs.
            self.check(f"{tag}: other calls go on", self.timed(pynvml.nvmlDeviceGetUUID, handle, 1.0) is not None, True)

    def run(self):
        threads_before = len(os.listdir("/proc/self/task"))
        pynvml._LoadNvmlLibrary()
        count = ctypes.c_uint(0)
        self.check("call before init",
                   pynvml._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")(ctypes.byref(count)),
                   pynvml.NVML_ERROR_UNINITIALIZED)
        init_error = self.scenario.get("init", {}).get("error")
        try:
            pynvml.nvmlInit()  # nvmlInitWithFlags(0)
        except pynvml.NVMLError as e:
            self.check("init", e.value, ERROR_CODES.get(init_error))
            return
        self.check("init", None, init_error)
        self.check_threads(threads_before)
        self.check_hangs()
        self.check("nvmlInit_v2", pynvml._nvmlGetFunctionPointer("nvmlInit_v2")(), pynvml.NVML_SUCCESS)
        self.check("nvmlShutdown", pynvml._nvmlGetFunctionPointer("nvmlShutdown")(), pynvml.NVML_SUCCESS)
        self.check("error string", pynvml.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST), "GPU is lost")
        self.check_system()
        for index in range(len(self.gpus)):
            self.check_gpu(index)
        # Errors injected so far were counted; the rest of the checks are about live state.
        self.hits = [spec.get("times", 0) for spec in self.errors]
        self.check_topology()
        self.check_live_registration()
        self.check_reload()
        pynvml.nvmlShutdown()


def main():
    checker = Checker(sys.argv[1], sys.argv[2])
    checker.run()
    print(f"{checker.passed} passed, {checker.failed} failed", flush=True)
    # A call that never returns is still running on its daemon thread: leave without waiting.
    os._exit(1 if checker.failed else 0)


if __name__ == "__main__":
    main()
