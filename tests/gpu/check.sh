#!/usr/bin/env bash
# make test-gpu: what only a real NVIDIA GPU can show (DESIGN 12), and what users run on one.
# CI has no GPU and never runs this; run it on a GPU machine (one GPU is enough; a few minutes).
# It needs the NVIDIA driver and nothing else for its core: the CUDA program is cuda-hold
# (crates/cuda-hold: the driver API through libcuda.so.1, no toolkit). Where PyTorch, JAX,
# torchrun and accelerate are installed it runs them under gpurun too; where one is missing its
# checks SKIP and say why. GPURUN=/path/to/gpurun and CUDA_HOLD=/path/to/cuda-hold use prebuilt
# binaries; from make dist's gpu-check kit (gpurun, cuda-hold, this script and the wheel in one
# folder, for a GPU machine without a Rust toolchain) the ones beside it; in a clone, cargo
# builds them. Every check prints PASS, FAIL or SKIP (with why); the launch cost is printed as
# INFO. At the end it writes a capture of the machine (nvidia-smi's and gpurun's readings, the
# -vv trace, the results as summary.json) into GPU_CAPTURE (default ./gpu-capture-HOST-DATE):
# doc/development.md says how a capture becomes a scenario of the simulator. The script exits 1
# if any check failed. It never changes a GPU's clocks, modes or MIG layout: nvidia-smi is only
# asked (the `smi` function below allows its query options alone); the MPS check starts a
# control daemon of the caller's own, in a private pipe directory, and stops it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s)

failures=0
results=()
# A check's result, printed and kept for summary.json: pass/fail/skip/info NAME DETAIL.
record() {
    local result=$1 name=$2 detail=$3 label
    label=$(echo "$result" | tr a-z A-Z)
    echo "$label: $name: $detail"
    [ "$result" = fail ] && failures=$((failures + 1))
    detail=${detail//\\/\\\\}
    detail=${detail//\"/\\\"}
    results+=("{\"check\": \"$name\", \"result\": \"$result\", \"detail\": \"$(echo "$detail" | tr '\n\t' '  ')\"}")
}
pass() { record pass "$@"; }
fail() { record fail "$@"; }
skip() { record skip "$@"; }
info() { record info "$@"; }

# nvidia-smi, asked only: the query options, never a setter (tests/gpu_check.rs checks that
# every use of nvidia-smi in this script goes through here).
smi() {
    local arg
    for arg in "$@"; do
        case $arg in
            -q | -L | topo | -m | -i | --format=* | --query-gpu=* | --query-compute-apps=* | -lms | -d) ;;
            [0-9]* | GPU-* | csv* | ECC* | noheader* | nounits*) ;;
            *) echo "check.sh: nvidia-smi $arg is not a query" >&2; return 2 ;;
        esac
    done
    command -v nvidia-smi > /dev/null || return 127
    nvidia-smi "$@"
}

if [ -x "$here/gpurun" ] && [ -x "$here/cuda-hold" ]; then
    built=$here
else
    # In a clone: tests/gpu/ is two levels below the root.
    root=$(cd "$here/../.." && pwd)
    built=$root/target/release
    if { [ -z "${GPURUN:-}" ] || [ -z "${CUDA_HOLD:-}" ]; } && command -v cargo > /dev/null; then
        (cd "$root" && cargo build --release --quiet -p gpurun -p cuda-hold --bin gpurun --bin cuda-hold) \
            || { echo "FAIL: build"; exit 1; }
    fi
fi
gpurun=${GPURUN:-$built/gpurun}
hold=${CUDA_HOLD:-$built/cuda-hold}
for binary in "$gpurun" "$hold"; do
    [ -x "$binary" ] || { echo "FAIL: $binary is missing (set GPURUN= and CUDA_HOLD=, or install cargo)"; exit 1; }
done
work=$(mktemp -d)
chmod 755 "$work"
leftovers=()
cleanup() {
    local pid
    for pid in "${leftovers[@]}"; do kill -KILL "$pid" 2> /dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
export GPURUN_LOCK_DIR="$work/locks"
# On the simulator (tests/gpu_check.rs) the stand-in for cuda-hold says so.
simulated=${SIM_CUDA:+yes}
capture=${GPU_CAPTURE:-$PWD/gpu-capture-$(hostname 2> /dev/null || echo host)-$(date +%Y-%m-%d)}
# JSON without python: the file with its blanks and newlines gone (gpurun pretty-prints), and
# the first number or string after "KEY":.
flat() { tr -d ' \n' < "$1"; }
field() { flat "$2" | grep -o "\"$1\":\(\"[^\"]*\"\|[0-9]*\)" | head -1 | sed 's/^[^:]*://; s/"//g'; }
# The PIDs a report's verification names.
verified_pids() { field detail "$1" | grep -o 'PID *[0-9]*' | sed 's/PID *//'; }
# Whether any of these PIDs is still on a GPU, as NVML lists them now.
on_gpu() {
    local pid listing=$work/now.json
    "$gpurun" --list --json > "$listing" 2> /dev/null || return 1
    for pid in "$@"; do
        flat "$listing" | grep -q "\"pid\":$pid," && return 0
    done
    return 1
}
have_python() { python3 -c "import $1" 2> /dev/null; }
torch_cuda=no
python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null && torch_cuda=yes

# 1. The real NVML through nvml-wrapper: every GPU readable, and healthy as nvidia-smi sees it
# (a standalone card has no fabric: that is no fault).
if "$gpurun" --list --json > "$work/list.json"; then
    count=$(flat "$work/list.json" | grep -o '"uuid":"\(GPU\|MIG\)-' | wc -l)
    if [ "$count" -gt 0 ] && ! flat "$work/list.json" | grep -q '"error":"'; then
        pass list "--list --json reads $count device(s), driver $(field driver_version "$work/list.json")"
    else
        fail list "--list --json: $count devices, or one unreadable"
    fi
    "$gpurun" --list
else
    fail list "gpurun --list failed: is the NVIDIA driver loaded?"
    exit 1
fi
gpus=$(flat "$work/list.json" | grep -o '"mig_devices":' | wc -l)
eligible=$(flat "$work/list.json" | grep -o '"eligible":true' | wc -l)
[ "$eligible" -ge 1 ] && pass eligible "$eligible GPU(s) eligible for a job" \
    || fail eligible "no GPU eligible: $(flat "$work/list.json" | grep -o '"reasons":\[[^]]*\]' | head -2 | tr '\n' ' ')"
if "$gpurun" --doctor > "$work/doctor.txt"; then
    problems=$(grep -c '^  PROBLEM' "$work/doctor.txt")
    if grep -q 'PROBLEM  GPU' "$work/doctor.txt"; then
        fail doctor "--doctor calls a GPU a problem: $(grep 'PROBLEM  GPU' "$work/doctor.txt" | head -1)"
    else
        pass doctor "--doctor finds no GPU problem ($problems other problem(s): $(grep -o 'PROBLEM .*' "$work/doctor.txt" | head -1 | cut -c1-100))"
    fi
else
    fail doctor "gpurun --doctor failed"
fi

# 2. A CUDA program lands on the chosen card: verified, with its peak memory.
if "$gpurun" --gpus 1 --report-json "$work/report.json" -- "$hold" --mib 1024 --hold 3 > "$work/hold.out"; then
    verdict=$(field verdict "$work/report.json")
    peak=$(flat "$work/report.json" | grep -o '"peak_memory_bytes":{"[^"]*":[0-9]*' | sed 's/.*://')
    chosen=$(field uuid "$work/report.json")
    landed=$(field uuid "$work/hold.out")
    if [ "$verdict" = verified ] && [ "${peak:-0}" -ge $((1 << 30)) ] && [ "$chosen" = "$landed" ]; then
        pass cuda-context "cuda-hold verified on the chosen GPU $chosen, peak $peak bytes"
    else
        fail cuda-context "verdict $verdict, peak ${peak:-none}, chosen $chosen, landed $landed"
    fi
else
    fail cuda-context "gpurun --gpus 1 -- cuda-hold failed"
fi
uuid=$(flat "$work/list.json" | grep -o '"uuid":"GPU-[^"]*"' | head -1 | sed 's/.*:"//; s/"//')

# 3. CUDA_VISIBLE_DEVICES pins the program: one device under --gpus 1, none under --gpus 0.
seen=$("$gpurun" -q --gpus 1 -- "$hold" --mib 0 --hold 0 | sed -n 's/.*"visible":\([0-9]*\).*/\1/p')
[ "$seen" = 1 ] && pass visible-1 "CUDA sees exactly 1 device under --gpus 1" || fail visible-1 "CUDA saw '$seen' devices under --gpus 1"
if "$gpurun" -q --gpus 0 -- "$hold" --mib 0 --hold 0 2> "$work/none.err"; then
    fail visible-0 "a CUDA program found a device under --gpus 0"
else
    pass visible-0 "CUDA finds no device under --gpus 0 ($(head -c 120 "$work/none.err"))"
fi

# 4. A program that escapes to another card is caught, and --verify strict ends it (two GPUs);
# a program on the right card is left alone by --verify strict.
if "$gpurun" -q --verify strict -- "$hold" --mib 256 --hold 2 > /dev/null; then
    pass verify-strict "--verify strict leaves a program on the chosen GPU alone"
else
    fail verify-strict "--verify strict ended a program on the chosen GPU"
fi
if [ "$gpus" -ge 2 ]; then
    "$gpurun" --devices 0 --verify strict -- env CUDA_VISIBLE_DEVICES=1 "$hold" --mib 256 --hold 30 2> "$work/wrong.err"
    status=$?
    if [ "$status" = 125 ] && grep -q "wrong-gpu" "$work/wrong.err"; then
        pass wrong-gpu "--verify strict ends a program on the wrong GPU (125, $(grep -o 'likely cause: [^;]*' "$work/wrong.err" | head -1))"
    else
        fail wrong-gpu "wrong GPU under --verify strict: exit $status"
    fi
else
    skip wrong-gpu "needs two GPUs (this machine has $gpus)"
fi

# 5. Two exclusive jobs on one card run one after the other.
start=$(date +%s)
"$gpurun" -q --devices 0 --exclusive --wait=120s -- "$hold" --mib 256 --hold 3 > /dev/null &
first=$!
sleep 1
"$gpurun" -q --devices 0 --exclusive --wait=120s -- "$hold" --mib 256 --hold 3 > /dev/null
wait "$first"
took=$(( $(date +%s) - start ))
[ "$took" -ge 6 ] && pass exclusive-queue "two --exclusive jobs on one GPU ran one after the other (${took} s)" \
    || fail exclusive-queue "two --exclusive jobs overlapped (${took} s for two 3 s jobs)"

# 6. A SIGTERM sent to gpurun ends the CUDA program by that signal, and gpurun with it (143).
"$gpurun" -q --gpus 1 -- "$hold" --mib 256 --hold 30 > "$work/term.out" &
supervisor=$!
for _ in $(seq 200); do grep -q '"pid"' "$work/term.out" 2>/dev/null && break; sleep 0.1; done
threads=$(ls "/proc/$supervisor/task" 2>/dev/null | wc -l)
child=$(field pid "$work/term.out")
kill -TERM "$supervisor"
wait "$supervisor"; status=$?
if [ "$status" = 143 ] && [ -n "$child" ] && ! kill -0 "$child" 2>/dev/null; then
    pass sigterm "SIGTERM to gpurun ended the CUDA program and gpurun by SIGTERM ($threads threads while supervising)"
else
    fail sigterm "exit $status, program ${child:-?} still there: $(kill -0 "${child:-0}" 2>/dev/null && echo yes || echo no)"
fi

# 7. An intruder: a CUDA program started outside gpurun on the job's GPU is warned about and
# listed in the report.
"$gpurun" --gpus 1 --devices 0 --report-json "$work/intr.json" -- "$hold" --mib 256 --hold 9 > /dev/null 2> "$work/intr.err" &
supervisor=$!
# Once the job is verified: what appears after it is an intruder.
for _ in $(seq 300); do grep -q "verified:" "$work/intr.err" 2>/dev/null && break; sleep 0.1; done
CUDA_VISIBLE_DEVICES=$uuid CUDA_DEVICE_ORDER=PCI_BUS_ID "$hold" --mib 512 --hold 4 > "$work/intruder.out" 2>&1 &
intruder=$!
wait "$intruder"
wait "$supervisor"
intruder_pid=$(field pid "$work/intruder.out")
if grep -q "appeared on GPU" "$work/intr.err" && flat "$work/intr.json" | grep -q "\"intruders\":\[{[^]]*\"pid\":${intruder_pid:-x}"; then
    pass intruder "PID $intruder_pid started outside gpurun was warned about and listed in the report"
else
    fail intruder "PID ${intruder_pid:-?}: $(grep -o 'warning: .*' "$work/intr.err" | head -1) report: $(flat "$work/intr.json" | grep -o '"intruders":\[[^]]*\]' | cut -c1-160)"
fi

# 8. --time-limit on a job that spins on the GPU (PyTorch, else cuda-hold), verified first:
# 124, and nothing of it left on the GPU.
if [ "$torch_cuda" = yes ]; then
    spinner=(python3 -c 'import torch
x = torch.randn(4096, 4096, device="cuda")
print("spinning", flush=True)
while True: x = x @ x; x = x / x.norm()')
else
    spinner=("$hold" --mib 256 --hold 600)
fi
"$gpurun" --time-limit 12s --report-json "$work/tl.json" -- "${spinner[@]}" > /dev/null 2> "$work/tl.err"
status=$?
pids=$(verified_pids "$work/tl.json")
if [ "$status" = 124 ] && [ "$(field verdict "$work/tl.json")" = verified ] && ! on_gpu $pids; then
    pass time-limit "--time-limit 12s on ${spinner[0]##*/}: 124, verified first, nothing left on the GPU"
else
    fail time-limit "exit $status, verdict $(field verdict "$work/tl.json"), left on the GPU: $(on_gpu $pids && echo yes || echo no)"
fi

# 9. Leftovers: a setsid child holding GPU memory is ended and its memory freed; with
# --keep-orphans it is left and the report says memory-held.
"$gpurun" --report-json "$work/orphan.json" -- sh -c "setsid $hold --mib 256 --hold 20 > /dev/null & sleep 3" 2> "$work/orphan.err"
pids=$(verified_pids "$work/orphan.json")
if grep -q "left 1 process running" "$work/orphan.err" && [ -n "$pids" ] && ! on_gpu $pids; then
    pass leftover "the setsid leftover (PID $pids) was ended and its memory freed"
else
    fail leftover "$(grep -o 'warning: .*' "$work/orphan.err" | head -1); PIDs '$pids' still on the GPU: $(on_gpu $pids && echo yes || echo no)"
fi
"$gpurun" --keep-orphans --report-json "$work/keep.json" -- sh -c "setsid $hold --mib 256 --hold 8 > /dev/null & sleep 3" 2> "$work/keep.err"
pids=$(verified_pids "$work/keep.json")
leftovers+=($pids)
if flat "$work/keep.json" | grep -q '"kind":"memory-held"'; then
    pass keep-orphans "--keep-orphans left PID $pids running and the report says memory-held"
else
    fail keep-orphans "no memory-held in the report: $(grep -o 'warning: .*' "$work/keep.err" | head -1)"
fi
for pid in $pids; do kill -TERM "$pid" 2> /dev/null; done

# 10. --cpu-bind numa: the command runs on the GPU's local CPUs, within what it inherited.
expand() {
    local part
    for part in ${1//,/ }; do
        case $part in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
    done | sort -n | tr '\n' ' '
}
local_cpus=$(field cpus "$work/list.json")
inherited=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
bound=$("$gpurun" -q --gpus 1 --devices 0 --cpu-bind numa -- grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
if [ -z "$local_cpus" ]; then
    skip cpu-bind "NVML gives no local CPUs for GPU 0"
else
    expected=$(comm -12 <(expand "$local_cpus" | tr ' ' '\n' | sort) <(expand "$inherited" | tr ' ' '\n' | sort) | sort -n | tr '\n' ' ')
    [ "$(expand "$bound")" = "$expected" ] \
        && pass cpu-bind "--cpu-bind numa ran the command on CPUs $bound (GPU 0's $local_cpus, inherited $inherited)" \
        || fail cpu-bind "CPUs $bound, expected GPU 0's $local_cpus within $inherited"
fi

# 11. A non-root user's job is verified (root runs this; the binaries copied where it can read
# them, a lock directory of its own).
if [ -n "$simulated" ]; then
    skip non-root "the simulator's files belong to the test"
elif [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null; then
    skip non-root "needs root and setpriv to become another user"
else
    mkdir -p "$work/nobody/locks" "$work/nobody/state"
    cp "$gpurun" "$hold" "$work/nobody/"
    chown -R 65534:65534 "$work/nobody"
    setpriv --reuid 65534 --regid 65534 --clear-groups env HOME="$work/nobody" XDG_STATE_HOME="$work/nobody/state" \
        GPURUN_LOCK_DIR="$work/nobody/locks" "$work/nobody/gpurun" --report-json "$work/nobody/r.json" \
        -- "$work/nobody/cuda-hold" --mib 256 --hold 3 > /dev/null 2> "$work/nobody.err"
    status=$?
    [ "$status" = 0 ] && [ "$(field verdict "$work/nobody/r.json")" = verified ] \
        && pass non-root "uid 65534's job verified" \
        || fail non-root "exit $status, verdict $(field verdict "$work/nobody/r.json" 2> /dev/null): $(head -c 200 "$work/nobody.err")"
fi

# 11b. In a PID namespace of its own, as in a container: drivers since 535.113 list the
# caller's own PIDs there, so the job is verified; --doctor says which regime the driver is in.
if [ -n "$simulated" ]; then
    skip pid-namespace "the simulator's namespaces are tests/containers.rs's"
elif [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null; then
    skip pid-namespace "needs root and unshare for a PID namespace"
else
    unshare -pf --mount-proc "$gpurun" --report-json "$work/ns.json" -- "$hold" --mib 256 --hold 3 > "$work/ns.out" 2> "$work/ns.err"
    status=$?
    unshare -pf --mount-proc "$gpurun" --doctor > "$work/nsdoctor.txt" 2>&1
    regime=$(grep -i 'namespace' "$work/nsdoctor.txt" | head -1 | sed 's/^ *[a-zA-Z]* *//')
    [ "$status" = 0 ] && [ "$(field verdict "$work/ns.json")" = verified ] \
        && pass pid-namespace "a job in its own PID namespace verified as PID $(field pid "$work/ns.out"); --doctor there: $regime" \
        || fail pid-namespace "exit $status, verdict $(field verdict "$work/ns.json" 2> /dev/null): $(head -c 200 "$work/ns.err"); --doctor there: $regime"
fi

# 12. MPS, where a control daemon can be started as the caller: a client is verified as one.
if [ -n "$simulated" ]; then
    skip mps "the simulator's MPS is tests/mps.rs's"
elif command -v nvidia-cuda-mps-control > /dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
        # A fresh daemon starts no server before its first client (the real driver, issue 62).
        "$gpurun" --mps --mps-threads 50 --report-json "$work/mps.json" -- "$hold" --mib 512 --hold 3 2> "$work/mps.err"
        if grep -q "as an MPS client" "$work/mps.err" && [ "$(field verdict "$work/mps.json")" = verified ]; then
            pass mps "a client of the caller's fresh MPS daemon is verified as one"
        else
            fail mps "$(grep -o 'gpurun: [a-z-]*: .*' "$work/mps.err" | head -2 | tr '\n' ' ')"
        fi
        echo quit | nvidia-cuda-mps-control
    else
        skip mps "nvidia-cuda-mps-control -d failed (the GPU's compute mode, or a daemon already running)"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
    skip mps "no nvidia-cuda-mps-control"
fi

# 13. What users run: PyTorch, JAX, a load beside nvidia-smi's samples, a spawn tree, torchrun
# and accelerate.
if [ "$torch_cuda" != yes ]; then
    for check in torch torch-sigterm load spawn-tree torchrun accelerate; do
        skip "$check" "PyTorch with CUDA is not installed"
    done
else
    cat > "$work/torchjob.py" << 'EOF'
import json, time, torch
count = torch.cuda.device_count()
uuid = str(torch.cuda.get_device_properties(0).uuid)
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
print(json.dumps({"count": count, "uuid": "GPU-" + uuid.removeprefix("GPU-")}), flush=True)
time.sleep(3)
EOF
    "$gpurun" --gpus 1 --report-json "$work/torch.json" -- python3 "$work/torchjob.py" > "$work/torch.out" 2> "$work/torch.err"
    count=$(field count "$work/torch.out"); landed=$(field uuid "$work/torch.out"); chosen=$(field uuid "$work/torch.json")
    peak=$(flat "$work/torch.json" | grep -o '"peak_memory_bytes":{"[^"]*":[0-9]*' | sed 's/.*://')
    if [ "$count" = 1 ] && [ "$landed" = "$chosen" ] && [ "$(field verdict "$work/torch.json")" = verified ] && [ "${peak:-0}" -ge $((2 << 30)) ]; then
        pass torch "device_count 1, the device's UUID is the chosen GPU's ($chosen), verified with peak $peak bytes for 2 GiB"
    else
        fail torch "count '$count', UUID '$landed' vs chosen '$chosen', verdict $(field verdict "$work/torch.json"), peak ${peak:-none}"
    fi

    counter='import signal, time, torch
hits = []
signal.signal(signal.SIGTERM, lambda *_: hits.append(1))
x = torch.ones(64 * 1024 * 1024, device="cuda"); torch.cuda.synchronize()
print("ready", flush=True)
deadline = time.time() + 20
while not hits and time.time() < deadline: time.sleep(0.05)
time.sleep(1)
print("TERM", len(hits), flush=True)'
    "$gpurun" -q --gpus 1 -- python3 -c "$counter" > "$work/torchterm.out" &
    supervisor=$!
    for _ in $(seq 300); do grep -q ready "$work/torchterm.out" 2>/dev/null && break; sleep 0.1; done
    kill -TERM "$supervisor"
    wait "$supervisor"; status=$?
    grep -q "TERM 1" "$work/torchterm.out" && [ "$status" = 0 ] \
        && pass torch-sigterm "a SIGTERM sent to gpurun reached the PyTorch job exactly once" \
        || fail torch-sigterm "the job said '$(tail -1 "$work/torchterm.out")', gpurun exited $status"

    # A 10 s load with the receipt, beside nvidia-smi's own 250 ms samples of power and clock
    # event reasons: energy within 10%, utilization p50 high, throttling as nvidia-smi says.
    cat > "$work/load.py" << 'EOF'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + 10
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize()
EOF
    smi --query-gpu=timestamp,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 250 -i "$uuid" > "$work/load.smi.csv" 2> /dev/null &
    sampler=$!
    "$gpurun" --gpus 1 --devices 0 --report-json "$work/load.json" --prom-file "$work/load.prom" -- python3 "$work/load.py" 2> "$work/load.err"
    kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
    python3 - "$work/load.json" "$work/load.smi.csv" "$work/load.prom" > "$work/load.verdict" << 'EOF'
import datetime, json, sys
report = json.load(open(sys.argv[1]))
uuid = report["selected"][0]["uuid"]
start = datetime.datetime.fromisoformat(report["job"]["start"].replace("Z", "+00:00")).timestamp()
end = datetime.datetime.fromisoformat(report["job"]["end"].replace("Z", "+00:00")).timestamp()
samples = []
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    try:
        when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").astimezone().timestamp()
        samples.append((when, float(parts[1]), int(parts[2], 16)))
    except (ValueError, IndexError):
        continue
inside = [s for s in samples if start <= s[0] <= end]
smi_joules = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(inside, inside[1:]))
ours = report.get("energy_joules", {}).get(uuid)
util = report.get("utilization_percent", {}).get(uuid, {})
capped = sum(1 for s in inside if s[2] & 0x4) / max(len(inside), 1)
ours_capped = report.get("throttled_seconds", {}).get(uuid, {}).get("sw_power_cap", 0)
prom = open(sys.argv[3]).read() if sys.argv[3] else ""
problems = []
if not inside or ours is None or abs(ours - smi_joules) > 0.1 * smi_joules:
    problems.append(f"energy {ours} J against nvidia-smi's {smi_joules:.0f} J")
if report["verification"]["verdict"] != "verified":
    problems.append("verdict " + report["verification"]["verdict"])
if util.get("p50", 0) < 50:
    problems.append(f"utilization p50 {util.get('p50')}% (nvidia-smi's samples: busy)")
if (capped >= 0.2) != (ours_capped >= 1):
    problems.append(f"sw_power_cap in {capped:.0%} of nvidia-smi's samples, {ours_capped} s in the receipt")
if "gpurun_" not in prom:
    problems.append("the --prom-file has no gpurun_ metric")
print(("fail " if problems else "pass ") + (
    "; ".join(problems) if problems else
    f"energy {ours:.0f} J against nvidia-smi's {smi_joules:.0f} J, util p50 {util.get('p50')}%, "
    f"sw_power_cap {ours_capped} s (nvidia-smi: {capped:.0%} of samples)"))
EOF
    read -r outcome detail < "$work/load.verdict" || { outcome=fail; detail="the comparison failed"; }
    record "${outcome:-fail}" load "$detail"

    cat > "$work/spawn.py" << 'EOF'
import os, time, torch, torch.multiprocessing as mp
def work(rank):
    x = torch.ones(64 << 20, device="cuda"); torch.cuda.synchronize()
    print("worker", os.getpid(), flush=True)
    time.sleep(4)
if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
EOF
    "$gpurun" --gpus 1 --report-json "$work/spawn.json" -- python3 "$work/spawn.py" > "$work/spawn.out" 2> "$work/spawn.err"
    named=$(verified_pids "$work/spawn.json" | sort | tr '\n' ' ')
    workers=$(awk '/^worker/ {print $2}' "$work/spawn.out" | sort | tr '\n' ' ')
    [ "$(field verdict "$work/spawn.json")" = verified ] && [ -n "$workers" ] && [ "$named" = "$workers" ] \
        && pass spawn-tree "a torch.multiprocessing spawn tree verified, every worker named ($workers)" \
        || fail spawn-tree "verdict $(field verdict "$work/spawn.json"), named '$named', workers '$workers'"

    cat > "$work/ddp.py" << 'EOF'
import json, os, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(0)
t = torch.ones(1, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
print(json.dumps({"rank": rank, "sum": t.item(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
dist.destroy_process_group()
EOF
    if command -v torchrun > /dev/null; then
        torchrun --standalone --nproc-per-node 1 --no-python "$gpurun" --per-rank --report-json "$work/ddp.json" \
            -- python3 "$work/ddp.py" > "$work/ddp.out" 2> "$work/ddp.err"
        status=$?
        [ "$status" = 0 ] && grep -q '"sum": 1.0' "$work/ddp.out" && [ "$(field verdict "$work/ddp.json")" = verified ] \
            && pass torchrun "torchrun --no-python gpurun --per-rank: NCCL all-reduce done, rank 0 verified" \
            || fail torchrun "exit $status, $(head -c 160 "$work/ddp.out"), verdict $(field verdict "$work/ddp.json" 2> /dev/null)"
    else
        skip torchrun "no torchrun on PATH"
    fi
    if command -v accelerate > /dev/null; then
        printf 'import torch\nx = torch.ones(1, device="cuda")\nprint("accelerate device", x.device, flush=True)\nimport time; time.sleep(3)\n' > "$work/acc.py"
        "$gpurun" --report-json "$work/acc.json" -- accelerate launch --num_processes 1 --num_machines 1 \
            --mixed_precision no --dynamo_backend no "$work/acc.py" > "$work/acc.out" 2> "$work/acc.err"
        status=$?
        [ "$status" = 0 ] && grep -q -- "--gpu_ids" "$work/acc.err" && [ "$(field verdict "$work/acc.json")" = verified ] \
            && pass accelerate "accelerate launch was handed --gpu_ids and its job verified" \
            || fail accelerate "exit $status, $(grep -o 'running accelerate launch [^ ]* [^ ]*' "$work/acc.err"), verdict $(field verdict "$work/acc.json" 2> /dev/null)"
    else
        skip accelerate "no accelerate on PATH"
    fi
fi

# JAX: with gpurun's variables it allocates as it goes; with --no-framework-env it takes most of
# the card (XLA preallocates 75%): the variables do what the docs say. Both verified.
if ! python3 -c "import jax; assert jax.devices('gpu')" 2> /dev/null; then
    skip jax "JAX with CUDA is not installed"
else
    jaxjob='import jax, jax.numpy as jnp, time
x = jnp.ones((4096, 4096)); (x @ x).block_until_ready()
time.sleep(3)'
    total=$(flat "$work/list.json" | grep -o '"total_bytes":[0-9]*' | head -1 | sed 's/.*://')
    "$gpurun" --gpus 1 --report-json "$work/jax.json" -- python3 -c "$jaxjob" > /dev/null 2>&1
    "$gpurun" --gpus 1 --no-framework-env --report-json "$work/jaxnoenv.json" -- python3 -c "$jaxjob" > /dev/null 2>&1
    small=$(flat "$work/jax.json" | grep -o '"peak_memory_bytes":{"[^"]*":[0-9]*' | sed 's/.*://')
    big=$(flat "$work/jaxnoenv.json" | grep -o '"peak_memory_bytes":{"[^"]*":[0-9]*' | sed 's/.*://')
    if [ "$(field verdict "$work/jax.json")" = verified ] && [ "$(field verdict "$work/jaxnoenv.json")" = verified ] \
        && [ "${small:-0}" -gt 0 ] && [ "${small:-0}" -lt $((total / 10)) ] && [ "${big:-0}" -gt $((total / 2)) ]; then
        pass jax "peak ${small} bytes with gpurun's variables, ${big} with --no-framework-env, of $total; both verified"
    else
        fail jax "peaks ${small:-none} / ${big:-none} of $total, verdicts $(field verdict "$work/jax.json") / $(field verdict "$work/jaxnoenv.json")"
    fi
fi

# 14. The wheel installs with pip and lists.
wheel=${GPURUN_WHEEL:-$(ls "$here"/gpurun-*.whl 2> /dev/null | head -1)}
if [ -z "$wheel" ]; then
    skip wheel "no gpurun-*.whl beside this script (make dist makes one; GPURUN_WHEEL= names it)"
elif ! python3 -m pip --version > /dev/null 2>&1; then
    skip wheel "no pip for python3"
else
    python3 -m pip install --quiet --no-index --no-deps --target "$work/wheel" "$wheel" > "$work/wheel.err" 2>&1
    if PATH="$work/wheel/bin:$PATH" PYTHONPATH="$work/wheel" "$work/wheel/bin/gpurun" --list > /dev/null 2>> "$work/wheel.err"; then
        pass wheel "pip installed ${wheel##*/} and its gpurun lists the GPUs"
    else
        fail wheel "$(tail -2 "$work/wheel.err" | tr '\n' ' ')"
    fi
fi

# 15. The launch cost beside nvidia-smi -L (printed, never asserted: DESIGN 13).
median() {
    local runs=() i t0 t1
    for i in $(seq 20); do
        t0=$(date +%s%N); "$@" > /dev/null 2>&1; t1=$(date +%s%N)
        runs+=($(( (t1 - t0) / 1000 )))
    done
    printf '%s\n' "${runs[@]}" | sort -n | sed -n 10p | awk '{printf "%.2f", $1 / 1000}'
}
cost="env true $(median env true) ms, gpurun --gpus 1 -- true $(median "$gpurun" -q --gpus 1 -- true) ms"
cost+=", --export $(median "$gpurun" --export) ms, --list $(median "$gpurun" --list) ms"
command -v nvidia-smi > /dev/null && cost+=", nvidia-smi -L $(median smi -L) ms"
info launch-cost "$cost (medians of 20)"

# What the receipt's energy counter costs, by its own call and as field 83 beside the throttle
# counters (issue 63: 15.5 ms, then 8.3 ms, by the call; the field was never timed). Read-only.
energy_timing() {
    python3 - << 'EOF'
import ctypes, time
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
handle = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
class Field(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_ulonglong)]
def timed(call):
    t0 = time.perf_counter(); code = call(); return code, (time.perf_counter() - t0) * 1000
energy = ctypes.c_ulonglong()
calls = [timed(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy))) for _ in range(5)]
fields = (Field * 1)()
def field():
    fields[0].fieldId = 83
    return nvml.nvmlDeviceGetFieldValues(handle, 1, fields)
by_field = [timed(field) for _ in range(5)]
print("energy call: %s ms (%d mJ); field 83: %s ms (return %d, nvmlReturn %d, %d mJ)" % (
    " ".join("%.3f" % ms for _, ms in calls), energy.value,
    " ".join("%.3f" % ms for _, ms in by_field), by_field[-1][0], fields[0].nvmlReturn, fields[0].value))
EOF
}
if timing=$(energy_timing 2>&1); then info energy-counter "$timing"; else info energy-counter "not timed: ${timing##*$'\n'}"; fi

# The capture of this machine (doc/development.md: how a capture becomes a scenario).
mkdir -p "$capture"
cp "$work/list.json" "$capture/gpurun-list.json"
"$gpurun" --list > "$capture/gpurun-list.txt" 2>&1
"$gpurun" -vv --list --json > /dev/null 2> "$capture/gpurun-list-vv-trace.txt"
cp "$work/doctor.txt" "$capture/gpurun-doctor.txt"
echo "$cost" > "$capture/launch-cost.txt"
echo "${timing:-}" > "$capture/energy-counter.txt"
# A plain launch's calls: which GPUs it reads, and what each call costs (not -vv, which reads
# every GPU to say why each was passed over).
GPURUN_LOG=gpurun::probe::calls=trace,gpurun=info "$gpurun" --gpus 1 -- true > /dev/null 2> "$capture/gpurun-launch-true-trace.txt"
if command -v nvidia-smi > /dev/null; then
    smi -q > "$capture/nvidia-smi-q.txt" 2>&1
    smi topo -m > "$capture/nvidia-smi-topo-m.txt" 2>&1
    smi --query-gpu=index,uuid,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw,persistence_mode,compute_mode \
        --format=csv > "$capture/nvidia-smi-query-gpu.csv" 2>&1
fi
cp "$work/nsdoctor.txt" "$capture/gpurun-doctor-pid-namespace.txt" 2> /dev/null
for report in load torch jax jaxnoenv ddp spawn tl ns mps intr; do
    [ -f "$work/$report.json" ] && cp "$work/$report.json" "$capture/$report.report.json"
done
[ -f "$work/load.smi.csv" ] && cp "$work/load.smi.csv" "$capture/load.nvidia-smi-samples.csv"
{
    echo "kernel $(uname -r), $(grep PRETTY_NAME /etc/os-release 2> /dev/null | cut -d= -f2)"
    echo "glibc $(ldd --version 2> /dev/null | head -1 | awk '{print $NF}'), $(nproc) CPUs"
    python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2> /dev/null
    python3 -c "import jax; print('jax', jax.__version__)" 2> /dev/null
} > "$capture/facts.txt"
elapsed=$(( $(date +%s) - started ))
{
    echo "{"
    echo "  \"driver_version\": \"$(field driver_version "$work/list.json")\","
    echo "  \"gpus\": $gpus,"
    echo "  \"seconds\": $elapsed,"
    echo "  \"failed\": $failures,"
    echo "  \"checks\": ["
    for i in "${!results[@]}"; do
        [ "$i" -gt 0 ] && echo ","
        printf '    %s' "${results[$i]}"
    done
    echo
    echo "  ]"
    echo "}"
} > "$capture/summary.json"
echo
echo "capture written to $capture (summary.json: ${#results[@]} checks, $elapsed s)"
if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all GPU checks passed"
