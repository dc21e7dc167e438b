#!/usr/bin/env bash
# Open MPI's mpirun for tests/ranks.rs (four ranks of a real mpirun under --per-rank):
# Debian's openmpi-bin, installed when missing. Needs root and apt-get; elsewhere it says so and
# the test says why it skips (a failure where CI_NO_SKIP is set).
set -euo pipefail
command -v mpirun >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/mpi/install.sh: mpirun is missing, and installing openmpi-bin needs root and apt-get"
    exit 0
fi
echo "tests/mpi/install.sh: installing Debian's openmpi-bin with apt-get (for tests/ranks.rs)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null
}
