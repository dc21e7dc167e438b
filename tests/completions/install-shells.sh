#!/usr/bin/env bash
# zsh and fish, for tests/completions.rs to syntax-check the completion scripts with the shells
# themselves. Installed with apt-get when missing and run as root; elsewhere the test says why
# it skips. Prints what it installs.
set -euo pipefail
missing=()
for shell in zsh fish; do
    command -v "$shell" >/dev/null || missing+=("$shell")
done
exec "$(dirname "$0")/../apt-install.sh" install-shells.sh tests/completions.rs "${missing[@]}"
