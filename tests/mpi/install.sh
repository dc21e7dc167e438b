#!/usr/bin/env bash
# Open MPI's mpirun for tests/ranks.rs (four ranks of a real mpirun under --per-rank): Debian's
# openmpi-bin, when missing.
set -euo pipefail
missing=()
command -v mpirun >/dev/null || missing+=(openmpi-bin)
exec "$(dirname "$0")/../apt-install.sh" tests/mpi/install.sh tests/ranks.rs "${missing[@]}"
