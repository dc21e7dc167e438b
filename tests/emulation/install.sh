#!/usr/bin/env bash
# valgrind and qemu-user for tests/emulation.rs (gpurun under valgrind, as tini's suite runs it,
# and under qemu-x86_64-static, which refuses a bare CLONE_VM child), when missing.
set -euo pipefail
missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
command -v qemu-x86_64-static >/dev/null || missing+=(qemu-user-static)
exec "$(dirname "$0")/../apt-install.sh" tests/emulation/install.sh tests/emulation.rs "${missing[@]}"
