#!/usr/bin/env bash
# make test-gpu: what only a real NVIDIA GPU can show (DESIGN 12). CI has no GPU and never runs
# this; run it on a GPU machine. Needs the NVIDIA driver and, for the PyTorch checks, python3
# with torch (skipped with a reason where missing). GPURUN=/path/to/gpurun skips the build. Every check prints PASS, FAIL or SKIP and
# the script exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "SKIP: $*"; }

# GPURUN=path uses a gpurun built elsewhere (a GPU machine without a Rust toolchain).
if [ -n "${GPURUN:-}" ]; then
    gpurun=$GPURUN
else
    cargo build --release --quiet --bin gpurun || { echo "FAIL: build"; exit 1; }
    gpurun=$PWD/target/release/gpurun
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GPURUN_LOCK_DIR="$work/locks"

# 1. The real NVML through nvml-wrapper: every GPU readable, with sane values.
if "$gpurun" --list --json > "$work/list.json"; then
    python3 - "$work/list.json" <<'PY' && pass "--list --json reads every GPU" || fail "--list --json values"
import json, sys
listing = json.load(open(sys.argv[1]))
gpus = listing["gpus"]
assert gpus, "no GPU listed"
for gpu in gpus:
    assert gpu["error"] is None, gpu
    assert gpu["uuid"].startswith(("GPU-", "MIG-")), gpu
    m = gpu["memory"]
    assert m["total_bytes"] > 0 and m["free_bytes"] <= m["total_bytes"] - m["used_bytes"], m
print(f"{len(gpus)} GPU(s), driver {listing['driver_version']}, CUDA {listing['cuda_driver_version']}")
PY
    "$gpurun" --list
else
    fail "gpurun --list failed: is the NVIDIA driver loaded?"
    exit 1
fi
count=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['gpus']))" "$work/list.json")

# 2. A PyTorch child lands on the chosen card, and verification says so.
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    skip "PyTorch with CUDA is not installed: the landing checks need it"
else
    job='import torch, time; x = torch.ones(256 * 1024 * 1024, device="cuda"); torch.cuda.synchronize(); time.sleep(3); print(torch.cuda.get_device_name(0))'
    if "$gpurun" --gpus 1 --report-json "$work/report.json" -- python3 -c "$job"; then
        python3 - "$work/report.json" <<'PY' && pass "a PyTorch job is verified on the chosen GPU" || fail "PyTorch verification"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["verification"]["verdict"] == "verified", report["verification"]
uuid = report["selected"][0]["uuid"]
assert report["peak_memory_bytes"][uuid] >= 1 << 30, report["peak_memory_bytes"]
print(report["verification"]["detail"])
PY
    else
        fail "gpurun --gpus 1 -- python3 (torch) failed"
    fi

    # 3. The child's CUDA_VISIBLE_DEVICES pins it: torch sees exactly the chosen GPUs.
    seen=$("$gpurun" -q --gpus 1 -- python3 -c "import torch; print(torch.cuda.device_count())")
    [ "$seen" = 1 ] && pass "torch sees exactly 1 GPU under --gpus 1" || fail "torch saw $seen GPUs under --gpus 1"
    seen=$("$gpurun" -q --gpus 0 -- python3 -c "import torch; print(torch.cuda.device_count())")
    [ "$seen" = 0 ] && pass "torch sees no GPU under --gpus 0" || fail "torch saw $seen GPUs under --gpus 0"

    # 4. A job that escapes to another card is caught (needs two GPUs).
    if [ "$count" -ge 2 ]; then
        if "$gpurun" --devices 0 --verify strict -- env CUDA_VISIBLE_DEVICES=1 python3 -c "$job"; then
            fail "--verify strict let a job on GPU 1 run"
        else
            [ $? = 125 ] && pass "--verify strict ends a job on the wrong GPU (125)" || fail "--verify strict exit status"
        fi
    else
        skip "wrong-gpu detection needs two GPUs (this machine has $count)"
    fi

    # 5. Two exclusive jobs on one card run one after the other.
    start=$(date +%s.%N)
    "$gpurun" -q --devices 0 --exclusive --wait=120s -- python3 -c "$job" > /dev/null &
    first=$!
    sleep 1
    "$gpurun" -q --devices 0 --exclusive --wait=120s -- python3 -c "$job" > /dev/null
    wait "$first"
    took=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 6 else 1)" "$took" \
        && pass "two --exclusive jobs on one GPU ran one after the other (${took}s)" \
        || fail "two --exclusive jobs overlapped (${took}s for two 3 s jobs)"
fi

# 6. On the real driver: how many threads gpurun has while it supervises (its own, its NVML
# thread, and whatever the library starts), and a SIGTERM sent to gpurun reaches a real CUDA
# job exactly once, whatever thread the library made.
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    skip "PyTorch with CUDA is not installed: the signal check needs it"
else
    counter='import signal, time, torch
hits = []
signal.signal(signal.SIGTERM, lambda *_: hits.append(1))
x = torch.ones(64 * 1024 * 1024, device="cuda"); torch.cuda.synchronize()
print("ready", flush=True)
deadline = time.time() + 20
while not hits and time.time() < deadline: time.sleep(0.05)
time.sleep(1)
print("TERM", len(hits), flush=True)'
    "$gpurun" -q --gpus 1 -- python3 -c "$counter" > "$work/term.out" &
    supervisor=$!
    for _ in $(seq 200); do grep -q ready "$work/term.out" 2>/dev/null && break; sleep 0.1; done
    threads=$(ls "/proc/$supervisor/task" 2>/dev/null | wc -l)
    echo "gpurun has $threads thread(s) while it supervises on the real driver"
    kill -TERM "$supervisor"
    wait "$supervisor"; status=$?
    if grep -q "TERM 1" "$work/term.out" && [ "$status" = 0 ]; then
        pass "a SIGTERM sent to gpurun reached the CUDA job exactly once ($threads threads)"
    else
        fail "SIGTERM to gpurun: job said '$(tail -1 "$work/term.out")', gpurun exited $status"
    fi
fi

echo
if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all GPU checks passed"
