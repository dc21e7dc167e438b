"""The AMD SMI simulator, read through AMD's own Python bindings (PyPI amdsmi, a ctypes wrapper
whose structs come from amdsmi.h), must answer what its scenario says. The bindings carry no
library: they load libamd_smi.so from ROCM_PATH/lib, which the test points at the simulator.

usage: check_sim.py SCENARIO.toml SIM_HIP
Prints one line per failed check and a last line "N passed, M failed".
"""

import ctypes
import json
import os
import subprocess
import sys
import time
import tomllib

import amdsmi
from amdsmi import amdsmi_wrapper

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size(value):
    if isinstance(value, int):
        return value
    text = value.strip()
    number = text.rstrip("BKMGTi ")
    return round(float(number) * UNITS[text[len(number):].strip() or "B"])


passed = failed = 0


def check(what, got, expected):
    global passed, failed
    if got == expected:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}: got {got!r}, expected {expected!r}")


def status_of(call):
    try:
        call()
        return "SUCCESS"
    except amdsmi.AmdSmiLibraryException as error:
        return error.get_error_code()


scenario = tomllib.load(open(sys.argv[1], "rb"))
gpus = scenario.get("gpu", [])
amdsmi.amdsmi_init()
handles = amdsmi.amdsmi_get_processor_handles()
check("processor count", len(handles), len(gpus))

for index, (handle, gpu) in enumerate(zip(handles, gpus)):
    at = f"GPU {index}"
    check(f"{at} type", amdsmi.amdsmi_get_processor_type(handle)["processor_type"], "AMDSMI_PROCESSOR_TYPE_AMD_GPU")
    check(f"{at} uuid", amdsmi.amdsmi_get_gpu_device_uuid(handle), gpu["uuid"])
    check(f"{at} bdf", amdsmi.amdsmi_get_gpu_device_bdf(handle), gpu["bdf"])
    check(f"{at} market name", amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"], gpu["market_name"])
    enumeration = amdsmi.amdsmi_get_gpu_enumeration_info(handle)
    check(f"{at} hip uuid", enumeration["hip_uuid"], gpu["hip_uuid"])
    accessible = gpu.get("accessible", True)
    before = sum(1 for other in gpus[:index] if other.get("accessible", True))
    check(f"{at} hip id", enumeration["hip_id"], gpu.get("hip_id", before) if accessible else "N/A")
    vram = amdsmi.AmdSmiMemoryType.VRAM
    if not accessible:
        no_perm = amdsmi_wrapper.AMDSMI_STATUS_NO_PERM
        check(f"{at} memory outside the cgroup", status_of(lambda: amdsmi.amdsmi_get_gpu_memory_total(handle, vram)), no_perm)
        continue
    check(f"{at} vram total", amdsmi.amdsmi_get_gpu_memory_total(handle, vram), size(gpu["vram_total"]))
    processes = [p for p in scenario.get("process", []) if p["gpu"] == index]
    used = size(gpu.get("vram_used", 0)) + sum(size(p["vram"]) for p in processes)
    check(f"{at} vram used", amdsmi.amdsmi_get_gpu_memory_usage(handle, vram), used)
    listed = amdsmi.amdsmi_get_gpu_process_list(handle)
    check(f"{at} processes", [(p["pid"], p["name"], p["mem"]) for p in listed],
          [(p["pid"], p.get("name") or "N/A", size(p["vram"])) for p in processes])
    if "gfx_activity" in gpu:
        activity = amdsmi.amdsmi_get_gpu_activity(handle)
        check(f"{at} gfx activity", activity["gfx_activity"], gpu["gfx_activity"])
        check(f"{at} umc activity", activity["umc_activity"], gpu.get("umc_activity", "N/A"))
    if "temperature_c" in gpu:
        hotspot = amdsmi.amdsmi_get_temp_metric(
            handle, amdsmi.AmdSmiTemperatureType.HOTSPOT, amdsmi.AmdSmiTemperatureMetric.CURRENT)
        check(f"{at} hotspot temperature", hotspot, gpu["temperature_c"])
    if "power_w" in gpu:
        power = amdsmi.amdsmi_get_power_info(handle)
        check(f"{at} socket power", power["current_socket_power"], gpu["power_w"])
        first = amdsmi.amdsmi_get_energy_count(handle)
        time.sleep(0.2)
        second = amdsmi.amdsmi_get_energy_count(handle)
        joules = (second["energy_accumulator"] - first["energy_accumulator"]) * second["counter_resolution"] / 1e6
        seconds = (second["timestamp"] - first["timestamp"]) / 1e9
        check(f"{at} energy counter at the socket power", round(joules / seconds), gpu["power_w"])
    else:
        check(f"{at} no power", status_of(lambda: amdsmi.amdsmi_get_power_info(handle)),
              amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    if "compute_partition" in gpu:
        check(f"{at} compute partition", amdsmi.amdsmi_get_gpu_compute_partition(handle), gpu["compute_partition"])
    else:
        check(f"{at} no compute partition", status_of(lambda: amdsmi.amdsmi_get_gpu_compute_partition(handle)),
              amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    if "memory_partition" in gpu:
        check(f"{at} memory partition", amdsmi.amdsmi_get_gpu_memory_partition(handle), gpu["memory_partition"])
    check(f"{at} partition id", amdsmi.amdsmi_get_gpu_kfd_info(handle)["current_partition_id"], gpu.get("partition_id", 0))
    ecc = amdsmi.amdsmi_get_gpu_total_ecc_count(handle)
    check(f"{at} uncorrectable ECC", ecc["uncorrectable_count"], gpu.get("ecc_uncorrectable", 0))
    check(f"{at} correctable ECC", ecc["correctable_count"], gpu.get("ecc_correctable", 0))
    pages = amdsmi.amdsmi_get_gpu_bad_page_info(handle)
    check(f"{at} bad pages", [page["status"] for page in pages],
          [0] * gpu.get("bad_pages_retired", 0) + [1] * gpu.get("bad_pages_pending", 0))
    if "numa_node" in gpu:
        check(f"{at} NUMA node", amdsmi.amdsmi_topo_get_numa_node_number(handle), gpu["numa_node"])

# Links: one hive (or one card) is XGMI at one hop.
for a in range(len(handles)):
    for b in range(a + 1, len(handles)):
        first, second = gpus[a], gpus[b]
        joined = first["bdf"] == second["bdf"] or (
            first.get("xgmi_hive") is not None and first.get("xgmi_hive") == second.get("xgmi_hive"))
        if any(sorted(link["gpus"]) == [a, b] for link in scenario.get("link", [])):
            continue
        link = amdsmi.amdsmi_topo_get_link_type(handles[a], handles[b])
        expected = amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI if joined else amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE
        check(f"link {a}-{b}", link["type"], expected)

# A simulated HIP program shows in the process list of the GPU ROCr gave it, by PID.
reachable = [i for i, gpu in enumerate(gpus) if gpu.get("accessible", True)]
if reachable:
    target = reachable[-1]
    env = dict(os.environ, ROCR_VISIBLE_DEVICES=gpus[target]["hip_uuid"])
    env.pop("HIP_VISIBLE_DEVICES", None)
    hip = subprocess.Popen([sys.argv[2], "--mem", "2GiB", "--sleep", "5"], env=env, stdout=subprocess.PIPE, text=True)
    line = json.loads(hip.stdout.readline())
    check("sim-hip sees the one GPU", [d["smi_index"] for d in line["devices"]], [target])
    listed = amdsmi.amdsmi_get_gpu_process_list(handles[target])
    check("sim-hip listed with its memory", [(p["pid"], p["mem"]) for p in listed if p["pid"] == hip.pid],
          [(hip.pid, 2 << 30)])
    hip.terminate()
    hip.wait()
    listed = amdsmi.amdsmi_get_gpu_process_list(handles[target])
    check("sim-hip gone once ended", [p["pid"] for p in listed if p["pid"] == hip.pid], [])

# The struct sizes the bindings use are the ones the simulator writes.
for name, expected in json.loads(os.environ["AMDSMI_SIM_SIZES"]).items():
    check(f"sizeof {name}", ctypes.sizeof(getattr(amdsmi_wrapper, name)), expected)

amdsmi.amdsmi_shut_down()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
