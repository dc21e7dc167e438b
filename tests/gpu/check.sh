#!/usr/bin/env bash
# make test-gpu: what only a real NVIDIA GPU can show (DESIGN 12). CI has no GPU and never runs
# this; run it on a GPU machine. It needs the NVIDIA driver and nothing else: the CUDA program
# is cuda-hold (crates/cuda-hold: the driver API through libcuda.so.1, no toolkit, no PyTorch).
# GPURUN=/path/to/gpurun and CUDA_HOLD=/path/to/cuda-hold use prebuilt binaries; from make
# dist's gpu-check kit (gpurun, cuda-hold and this script in one folder, for a GPU machine
# without a Rust toolchain) the ones beside it; in a clone, cargo builds them. PyTorch checks
# run as extras where torch with CUDA is installed. Every check prints PASS, FAIL or SKIP; the
# script exits 1 if any failed. It never changes a GPU's clocks, modes or MIG layout; the MPS
# check starts a control daemon of the caller's own, in a private pipe directory, and stops it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "SKIP: $*"; }

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
trap 'rm -rf "$work"' EXIT
export GPURUN_LOCK_DIR="$work/locks"
# JSON without python: the file with its blanks and newlines gone (gpurun pretty-prints), and
# the first number or string after "KEY":.
flat() { tr -d ' \n' < "$1"; }
field() { flat "$2" | grep -o "\"$1\":\(\"[^\"]*\"\|[0-9]*\)" | head -1 | sed 's/^[^:]*://; s/"//g'; }

# 1. The real NVML through nvml-wrapper: every GPU readable.
if "$gpurun" --list --json > "$work/list.json"; then
    count=$(flat "$work/list.json" | grep -o '"uuid":"\(GPU\|MIG\)-' | wc -l)
    if [ "$count" -gt 0 ] && ! flat "$work/list.json" | grep -q '"error":"'; then
        pass "--list --json reads $count device(s), driver $(field driver_version "$work/list.json")"
    else
        fail "--list --json: $count devices, or one unreadable"
    fi
    "$gpurun" --list
else
    fail "gpurun --list failed: is the NVIDIA driver loaded?"
    exit 1
fi
gpus=$(flat "$work/list.json" | grep -o '"mig_devices":' | wc -l)

# 2. A CUDA program lands on the chosen card: verified, with its peak memory.
if "$gpurun" --gpus 1 --report-json "$work/report.json" -- "$hold" --mib 1024 --hold 3 > "$work/hold.out"; then
    verdict=$(field verdict "$work/report.json")
    peak=$(flat "$work/report.json" | grep -o '"peak_memory_bytes":{"[^"]*":[0-9]*' | sed 's/.*://')
    chosen=$(field uuid "$work/report.json")
    landed=$(field uuid "$work/hold.out")
    if [ "$verdict" = verified ] && [ "${peak:-0}" -ge $((1 << 30)) ] && [ "$chosen" = "$landed" ]; then
        pass "cuda-hold verified on the chosen GPU $chosen, peak $peak bytes"
    else
        fail "verification: verdict $verdict, peak ${peak:-none}, chosen $chosen, landed $landed"
    fi
else
    fail "gpurun --gpus 1 -- cuda-hold failed"
fi

# 3. CUDA_VISIBLE_DEVICES pins the program: one device under --gpus 1, none under --gpus 0.
seen=$("$gpurun" -q --gpus 1 -- "$hold" --mib 0 --hold 0 | sed -n 's/.*"visible":\([0-9]*\).*/\1/p')
[ "$seen" = 1 ] && pass "CUDA sees exactly 1 device under --gpus 1" || fail "CUDA saw '$seen' devices under --gpus 1"
if "$gpurun" -q --gpus 0 -- "$hold" --mib 0 --hold 0 2> "$work/none.err"; then
    fail "a CUDA program found a device under --gpus 0"
else
    pass "CUDA finds no device under --gpus 0 ($(head -c 120 "$work/none.err"))"
fi

# 4. A program that escapes to another card is caught, and --verify strict ends it (two GPUs);
# a program on the right card is left alone by --verify strict.
if "$gpurun" -q --verify strict -- "$hold" --mib 256 --hold 2 > /dev/null; then
    pass "--verify strict leaves a program on the chosen GPU alone"
else
    fail "--verify strict ended a program on the chosen GPU"
fi
if [ "$gpus" -ge 2 ]; then
    "$gpurun" --devices 0 --verify strict -- env CUDA_VISIBLE_DEVICES=1 "$hold" --mib 256 --hold 30 2> "$work/wrong.err"
    status=$?
    if [ "$status" = 125 ] && grep -q "wrong-gpu" "$work/wrong.err"; then
        pass "--verify strict ends a program on the wrong GPU (125, $(grep -o 'likely cause: [^;]*' "$work/wrong.err" | head -1))"
    else
        fail "wrong GPU under --verify strict: exit $status"
    fi
else
    skip "wrong-gpu detection needs two GPUs (this machine has $gpus)"
fi

# 5. Two exclusive jobs on one card run one after the other.
start=$(date +%s)
"$gpurun" -q --devices 0 --exclusive --wait=120s -- "$hold" --mib 256 --hold 3 > /dev/null &
first=$!
sleep 1
"$gpurun" -q --devices 0 --exclusive --wait=120s -- "$hold" --mib 256 --hold 3 > /dev/null
wait "$first"
took=$(( $(date +%s) - start ))
[ "$took" -ge 6 ] && pass "two --exclusive jobs on one GPU ran one after the other (${took} s)" \
    || fail "two --exclusive jobs overlapped (${took} s for two 3 s jobs)"

# 6. On the real driver: gpurun's threads while it supervises, and a SIGTERM sent to gpurun
# ends the CUDA program by that signal, and gpurun with it (status 143).
"$gpurun" -q --gpus 1 -- "$hold" --mib 256 --hold 30 > "$work/term.out" &
supervisor=$!
for _ in $(seq 200); do grep -q '"pid"' "$work/term.out" 2>/dev/null && break; sleep 0.1; done
threads=$(ls "/proc/$supervisor/task" 2>/dev/null | wc -l)
child=$(field pid "$work/term.out")
kill -TERM "$supervisor"
wait "$supervisor"; status=$?
if [ "$status" = 143 ] && [ -n "$child" ] && ! kill -0 "$child" 2>/dev/null; then
    pass "SIGTERM to gpurun ended the CUDA program and gpurun by SIGTERM ($threads threads while supervising)"
else
    fail "SIGTERM to gpurun: exit $status, program ${child:-?} still there: $(kill -0 "${child:-0}" 2>/dev/null && echo yes || echo no)"
fi

# 7. MPS, where a control daemon can be started as the caller: a client is verified as one.
if command -v nvidia-cuda-mps-control > /dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
        "$gpurun" --mps --mps-threads 50 --report-json "$work/mps.json" -- "$hold" --mib 512 --hold 3 2> "$work/mps.err"
        if grep -q "as an MPS client" "$work/mps.err" && [ "$(field verdict "$work/mps.json")" = verified ]; then
            pass "a client of the caller's MPS server is verified as one"
        else
            fail "MPS client: $(grep -o 'gpurun: [a-z-]*: .*' "$work/mps.err" | head -2 | tr '\n' ' ')"
        fi
        echo quit | nvidia-cuda-mps-control
    else
        skip "nvidia-cuda-mps-control -d failed (the GPU's compute mode, or a daemon already running)"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
    skip "no nvidia-cuda-mps-control: the MPS check needs it"
fi

# Extras where PyTorch with CUDA is installed: a PyTorch job verified, and a SIGTERM reaching
# it exactly once, whatever threads the library made.
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    skip "PyTorch with CUDA is not installed: the PyTorch extras need it"
else
    job='import torch, time; x = torch.ones(256 * 1024 * 1024, device="cuda"); torch.cuda.synchronize(); time.sleep(3)'
    "$gpurun" --gpus 1 --report-json "$work/torch.json" -- python3 -c "$job" \
        && [ "$(field verdict "$work/torch.json")" = verified ] \
        && pass "a PyTorch job is verified on the chosen GPU" || fail "PyTorch verification"
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
    for _ in $(seq 200); do grep -q ready "$work/torchterm.out" 2>/dev/null && break; sleep 0.1; done
    kill -TERM "$supervisor"
    wait "$supervisor"; status=$?
    grep -q "TERM 1" "$work/torchterm.out" && [ "$status" = 0 ] \
        && pass "a SIGTERM sent to gpurun reached the PyTorch job exactly once" \
        || fail "SIGTERM to gpurun: job said '$(tail -1 "$work/torchterm.out")', gpurun exited $status"
fi

echo
if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all GPU checks passed"
