#!/usr/bin/env bash
# valgrind and qemu-user for tests/emulation.rs (gpurun under valgrind, as tini's suite runs it,
# and under qemu-x86_64-static, which refuses a bare CLONE_VM child): Debian's valgrind and
# qemu-user-static, installed when missing. Needs root and apt-get; elsewhere it says so and
# the tests say why they skip (a failure where CI_NO_SKIP is set).
set -euo pipefail
missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
command -v qemu-x86_64-static >/dev/null || missing+=(qemu-user-static)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/emulation/install.sh: ${missing[*]} missing, and installing needs root and apt-get"
    exit 0
fi
echo "tests/emulation/install.sh: installing Debian's ${missing[*]} with apt-get (for tests/emulation.rs)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
