#!/usr/bin/env bash
# rpm, for tests/dist.rs to list the .rpm that make dist builds (rpm -qlp): Debian's rpm,
# installed when missing. Needs root and apt-get; elsewhere it says so and the test says why
# it skips (a failure where CI_NO_SKIP is set).
set -euo pipefail
command -v rpm >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/dist/install.sh: rpm is missing, and installing it needs root and apt-get"
    exit 0
fi
echo "tests/dist/install.sh: installing Debian's rpm with apt-get (for tests/dist.rs)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends rpm >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends rpm >/dev/null
}
