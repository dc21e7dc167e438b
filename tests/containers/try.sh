#!/usr/bin/env bash
# make demo-container: a container run on the simulated GPUs, without a GPU, ending `verified`.
#
# What it sets up, in a temporary directory it removes again: the bundled simulated 8-GPU
# machine, a busybox image for podman (private storage, runc), and a CDI spec of kind
# nvidia.com/gpu in /etc/cdi naming the simulated GPUs by UUID, as `nvidia-ctk cdi generate`
# names the real ones (each device brings the simulator in, as the driver's libraries come
# in). Then gpurun chooses a GPU and adds it to `podman run` as a CDI device; inside, the
# simulated CUDA program sees that one GPU, and gpurun verifies it from the host.
#
# Needs root, podman and runc (`make test` installs them as root: tests/containers/install.sh).
# Prints "SKIP: reason" and exits 3 where they are missing.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$repo/target/debug
skip() { echo "SKIP: $*"; exit 3; }
[ "$(id -u)" = 0 ] || skip "podman with a CDI spec in /etc/cdi needs root here"
command -v podman >/dev/null && command -v runc >/dev/null || skip "podman and runc are missing (tests/containers/install.sh)"
[ -x "$build/gpurun" ] && [ -x "$build/sim-cuda" ] || skip "build first (make sim)"

dir=$(mktemp -d /tmp/gpurun-demo-container.XXXXXX)
spec=/etc/cdi/gpurun-demo-$$.yaml
podman_at=(podman --root "$dir/root" --runroot "$dir/runroot" --storage-driver vfs)
export CONTAINERS_CONF=$dir/containers.conf
cleanup() {
    { set +x; } 2>/dev/null
    rm -f "$spec"
    "${podman_at[@]}" system reset --force >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

cp "$repo/crates/nvml-sim/scenarios/default.toml" "$dir/scenario.toml"
cat > "$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
lock_type = "file"
tmp_dir = "$dir/tmp"
events_logger = "file"
CONF
mkdir -p "$dir/rootfs/bin"
cp "$(command -v busybox || echo /bin/busybox)" "$dir/rootfs/bin/busybox"
for applet in sh sleep cat; do ln -s busybox "$dir/rootfs/bin/$applet"; done
tar -C "$dir/rootfs" -cf "$dir/rootfs.tar" .
"${podman_at[@]}" import "$dir/rootfs.tar" localhost/gpurun-demo:1 >/dev/null

# The CDI spec: every device brings the simulator (its scenario, the build, the C library);
# each says which simulated GPU it is (NVML_SIM_VISIBLE_<n>: podman keeps the last value of a
# variable that two devices set).
library_dir=$(dirname "$(readlink -f "$build/libnvml_sim.so")")
{
    echo 'cdiVersion: "0.5.0"'
    echo 'kind: nvidia.com/gpu'
    echo 'containerEdits:'
    echo '  env:'
    echo "    - NVML_SIM_SCENARIO=$dir/scenario.toml"
    echo '  mounts:'
    echo "    - {hostPath: $dir, containerPath: $dir, options: [rbind, rw]}"
    for path in "$build" "$library_dir" /lib/x86_64-linux-gnu /lib64; do
        [ -e "$path" ] && echo "    - {hostPath: $path, containerPath: $path, options: [rbind, ro]}"
    done | sort -u
    echo 'devices:'
    n=0
    for uuid in $(sed -n 's/^uuid = "\(GPU-[^"]*\)"/\1/p' "$dir/scenario.toml"); do
        echo "  - name: \"$uuid\""
        echo '    containerEdits:'
        echo "      env: [NVML_SIM_VISIBLE_$n=$uuid]"
        n=$((n + 1))
    done
} > "$spec"

set -x
GPURUN_NVML_LIB=$build/libnvml_sim.so NVML_SIM_SCENARIO=$dir/scenario.toml GPURUN_LOCK_DIR=$dir/locks \
    "$build/gpurun" --no-history --gpus 1 --min-free 8G --report -- \
    "${podman_at[@]}" run --rm localhost/gpurun-demo:1 "$build/sim-cuda" --mem 2GiB --sleep 1
