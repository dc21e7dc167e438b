#!/usr/bin/env bash
# zsh and fish, for tests/completions.rs to syntax-check the completion scripts with the shells
# themselves. Installed with apt-get when missing and run as root; elsewhere the test says why
# it skips. Prints what it installs.
set -euo pipefail
missing=()
for shell in zsh fish; do
    command -v "$shell" >/dev/null || missing+=("$shell")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-shells.sh: ${missing[*]} missing and not installable here (needs root and apt-get)" >&2
    exit 0
fi
echo "install-shells.sh: installing Debian's ${missing[*]} with apt-get (for tests/completions.rs)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
