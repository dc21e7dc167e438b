#!/usr/bin/env bash
# Debian's podman, runc and busybox-static for tests/containers.rs (a real container on the
# simulated GPUs, through a CDI spec the test writes): installed when missing. Needs root and
# apt-get; elsewhere it says so and the test says why it skips (a failure where CI_NO_SKIP is
# set).
set -euo pipefail
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
# The image holds busybox alone: it must be the static one.
linked=$(ldd /bin/busybox 2>&1 || true)
case "$linked" in *"not a dynamic"*) ;; *) missing+=(busybox-static) ;; esac
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/containers/install.sh: ${missing[*]} missing, and installing them needs root and apt-get"
    exit 0
fi
echo "tests/containers/install.sh: installing Debian's ${missing[*]} with apt-get (for tests/containers.rs)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
