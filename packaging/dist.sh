#!/usr/bin/env bash
# make dist: the release artefacts in dist/, from a clean clone.
#   gpurun-<version>-<arch>-linux-gnu.tar.gz   bin/, share/ (man page, completions, docs,
#                                             example config), lib/tmpfiles.d, licences,
#                                             install.sh (make install's rules)
#   gpurun_<version>_<debarch>.deb              dpkg-deb; /etc/gpurun/config.toml a conffile
#   gpurun-<version>-1.<arch>.rpm               rpmbuild; the same files (packaging/packages.sh)
#   gpurun-<version>-py3-none-manylinux_2_17_<arch>.manylinux2014_<arch>.whl
#                                               the binary for pip install (packaging/wheel.py)
#   SHA256SUMS                                  one line per artefact (sha256sum -c)
# The binary is linked by cargo-zigbuild against glibc 2.17 (RHEL/CentOS 7 and everything
# newer): gpurun dlopens NVIDIA's glibc libnvidia-ml, so it cannot be a static musl binary.
# cargo-zigbuild and zig come from PyPI into the clone (.venv-dist; pip's cache keeps the
# wheels for the next clone); the packages are made by dpkg-deb and rpmbuild. Every time in
# the artefacts is the last commit's (SOURCE_DATE_EPOCH), so the same commit packs to the same
# bytes: make dist twice gives the same SHA256SUMS.
#
# usage: packaging/dist.sh [TARGET]   TARGET defaults to x86_64-unknown-linux-gnu.2.17;
#        aarch64-unknown-linux-gnu.2.17 where that Rust standard library is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-x86_64-unknown-linux-gnu.2.17}
triple=${target%.2.*}            # the Rust target without the glibc suffix
arch=${triple%%-*}
case "$arch" in
    x86_64) debarch=amd64 ;;
    aarch64) debarch=arm64 ;;
    *) echo "packaging/dist.sh: $target: only x86_64 and aarch64 Linux targets are packaged" >&2; exit 2 ;;
esac
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
python=${PYTHON:-python3}
cargo=${CARGO:-cargo}
# Pinned, as the test suite's own tools are (the Makefile's pins).
zigbuild_version=${CARGO_ZIGBUILD_VERSION:-0.24.1}
# The last commit's time (a tarball without git history: its files' newest), for every file.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || find . -path ./target -prune -o -type f -printf '%T@\n' | sort -n | tail -n 1 | cut -d. -f1)}
export SOURCE_DATE_EPOCH=$epoch

say() { echo "make dist: $*"; }

if ! rustup target list --installed 2>/dev/null | grep -qx "$triple" && [ "$triple" != "$(rustc -vV | sed -n 's/^host: //p')" ]; then
    echo "make dist: no Rust standard library for $triple here (rustup target add $triple where it can be had)" >&2
    exit 2
fi

venv=.venv-dist
if [ ! -x "$venv/bin/cargo-zigbuild" ] || ! "$venv/bin/cargo-zigbuild" --version | grep -q " $zigbuild_version$"; then
    say "installing cargo-zigbuild $zigbuild_version and zig (PyPI's ziglang) into $venv (once)"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "cargo-zigbuild==$zigbuild_version"
fi
say "building gpurun $version for $target (cargo zigbuild --release)"
# cargo-zigbuild runs zig through this virtual environment's Python.
PATH="$PWD/$venv/bin:$PATH" CARGO_ZIGBUILD_PYTHON_PATH="$PWD/$venv/bin/python" \
    "$venv/bin/cargo-zigbuild" zigbuild --quiet --release --locked -p gpurun -p cuda-hold \
    --bin gpurun --bin cuda-hold --target "$target"
binary="target/$triple/release/gpurun"

rm -rf dist
name="gpurun-$version"
# Staged under a name without the version (packaging/packages.sh reads it there).
stage=dist/stage/gpurun
mkdir -p "$stage"
# The tree make install lays out under a prefix, plus what a release carries beside it.
make --no-print-directory install-files BIN="$binary" DESTDIR= PREFIX="$PWD/$stage" TMPFILESDIR="$PWD/$stage/lib/tmpfiles.d" >/dev/null
install -m 0644 LICENSE-MIT LICENSE-APACHE README.md "$stage/"
install -m 0755 packaging/install.sh "$stage/install.sh"

tarball="$name-$arch-linux-gnu.tar.gz"
say "packing dist/$tarball"
# Reproducible: sorted names, the commit's time, no owner names, gzip without a timestamp.
pack() { # pack TARBALL DIR NAME: DIR/NAME as NAME-renamed in TARBALL
    tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --transform "s,^$2,$3," \
        -cf - -C dist/stage "$2" | gzip -9n > "dist/$1"
}
pack "$tarball" gpurun "$name"

packaging/packages.sh "$stage" "$binary" "$version" "$arch" "$debarch"
say "packing the wheel (packaging/wheel.py)"
wheel=$("$python" packaging/wheel.py "$stage" "$version" "$arch" dist)

# make test-gpu for a GPU machine without a Rust toolchain: gpurun, the driver-API program, the
# checks and the wheel (its pip check) in one folder (./check.sh runs them).
kit="gpurun-gpu-check-$version-$arch-linux-gnu.tar.gz"
say "packing dist/$kit"
mkdir -p dist/stage/gpu-check
install -m 0755 "$binary" "target/$triple/release/cuda-hold" tests/gpu/check.sh dist/stage/gpu-check/
install -m 0644 "dist/$wheel" dist/stage/gpu-check/
pack "$kit" gpu-check "gpurun-gpu-check-$version"

rm -rf dist/stage
artefacts=("$tarball" "$kit" "gpurun_${version}_${debarch}.deb" "$wheel")
[ -e "dist/$name-1.$arch.rpm" ] && artefacts+=("$name-1.$arch.rpm")
(cd dist && sha256sum "${artefacts[@]}" > SHA256SUMS)
say "done:"
(cd dist && ls -l "${artefacts[@]}" SHA256SUMS)
