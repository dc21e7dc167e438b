#!/usr/bin/env bash
# The one way the test scripts install what a test area needs: Debian's packages, with apt-get,
# only those missing, saying so first. Needs root and apt-get; elsewhere it says what is missing
# and exits 0, and the tests say why they skip (a failure where CI_NO_SKIP is set).
#   tests/apt-install.sh WHO FOR PACKAGE...
# WHO names the caller in its lines, FOR the tests it installs for; the caller passes only the
# packages it found missing.
# NO_INSTALL=1 (make test NO_INSTALL=1): install nothing; the tests that need it skip, saying
# why (and fail where CI_NO_SKIP is set, as in CI).
set -euo pipefail
who=$1 for=$2
shift 2
[ $# -eq 0 ] && exit 0
if [ -n "${NO_INSTALL:-}" ] && [ "${NO_INSTALL}" != 0 ]; then
    echo "$who: $* missing, not installed (NO_INSTALL is set): $for skips what needs it"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "$who: $* missing, and installing needs root and apt-get"
    exit 0
fi
echo "$who: installing Debian's $* with apt-get (for $for)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
