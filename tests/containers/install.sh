#!/usr/bin/env bash
# Debian's podman, runc and busybox-static for tests/containers.rs (a real container on the
# simulated GPUs, through a CDI spec the test writes), when missing.
set -euo pipefail
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
# The image holds busybox alone: it must be the static one.
linked=$(ldd /bin/busybox 2>&1 || true)
case "$linked" in *"not a dynamic"*) ;; *) missing+=(busybox-static) ;; esac
exec "$(dirname "$0")/../apt-install.sh" tests/containers/install.sh tests/containers.rs "${missing[@]}"
