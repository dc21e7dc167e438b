#!/usr/bin/env bash
# rpm, for tests/dist.rs to list the .rpm that make dist builds (rpm -qlp), when missing.
set -euo pipefail
missing=()
command -v rpm >/dev/null || missing+=(rpm)
exec "$(dirname "$0")/../apt-install.sh" tests/dist/install.sh tests/dist.rs "${missing[@]}"
