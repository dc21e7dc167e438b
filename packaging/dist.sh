#!/usr/bin/env bash
# make dist: the release artefacts in dist/, from a clean clone.
#   gpurun-<version>-<arch>-linux-gnu.tar.gz   bin/, share/ (man page, completions, docs,
#                                             example config), lib/tmpfiles.d, licences,
#                                             install.sh (make install's rules)
#   gpurun_<version>_<debarch>.deb              cargo-deb; /etc/gpurun/config.toml a conffile
#   gpurun-<version>-1.<arch>.rpm               cargo-generate-rpm; the same files
#   SHA256SUMS                                  one line per artefact (sha256sum -c)
# The binary is linked by cargo-zigbuild against glibc 2.17 (RHEL/CentOS 7 and everything
# newer): gpurun dlopens NVIDIA's glibc libnvidia-ml, so it cannot be a static musl binary.
# The tools come from the registries into the clone: cargo-zigbuild with zig from PyPI
# (.venv-dist), cargo-deb and cargo-generate-rpm from crates.io (target/dist-tools).
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
deb_version=${CARGO_DEB_VERSION:-3.8.0}
rpm_version=${CARGO_GENERATE_RPM_VERSION:-0.21.1}

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
tools=target/dist-tools
for tool in "cargo-deb $deb_version" "cargo-generate-rpm $rpm_version"; do
    set -- $tool
    if [ ! -x "$tools/bin/$1" ] || ! grep -qs "^$2$" "$tools/$1.version"; then
        say "installing $1 $2 from crates.io into $tools (once; a few minutes on two cores)"
        "$cargo" install --quiet --locked --root "$tools" --version "$2" "$1"
        echo "$2" > "$tools/$1.version"
    fi
done

say "building gpurun $version for $target (cargo zigbuild --release)"
# cargo-zigbuild runs zig through this virtual environment's Python.
PATH="$PWD/$venv/bin:$PATH" CARGO_ZIGBUILD_PYTHON_PATH="$PWD/$venv/bin/python" \
    "$venv/bin/cargo-zigbuild" zigbuild --quiet --release --locked -p gpurun -p cuda-hold \
    --bin gpurun --bin cuda-hold --target "$target"
binary="target/$triple/release/gpurun"

rm -rf dist
name="gpurun-$version"
# Staged under a name without the version, which Cargo.toml's package metadata names.
stage=dist/stage/gpurun
mkdir -p "$stage"
# The tree make install lays out under a prefix, plus what a release carries beside it.
make --no-print-directory install-files BIN="$binary" DESTDIR= PREFIX="$PWD/$stage" TMPFILESDIR="$PWD/$stage/lib/tmpfiles.d" >/dev/null
install -m 0644 LICENSE-MIT LICENSE-APACHE README.md "$stage/"
install -m 0755 packaging/install.sh "$stage/install.sh"

tarball="$name-$arch-linux-gnu.tar.gz"
say "packing dist/$tarball"
tar --owner=0 --group=0 --numeric-owner --transform "s,^gpurun,$name," -czf "dist/$tarball" -C dist/stage gpurun

# make test-gpu for a GPU machine without a Rust toolchain: gpurun, the driver-API program and
# the checks in one folder (./check.sh runs them).
kit="gpurun-gpu-check-$version-$arch-linux-gnu.tar.gz"
say "packing dist/$kit"
mkdir -p dist/stage/gpu-check
install -m 0755 "$binary" "target/$triple/release/cuda-hold" tests/gpu/check.sh dist/stage/gpu-check/
tar --owner=0 --group=0 --numeric-owner --transform "s,^gpu-check,gpurun-gpu-check-$version," \
    -czf "dist/$kit" -C dist/stage gpu-check

say "packing the .deb (cargo-deb)"
"$tools/bin/cargo-deb" --no-build --no-strip --quiet --target "$triple" --deb-revision "" \
    --output "dist/gpurun_${version}_${debarch}.deb"

say "packing the .rpm (cargo-generate-rpm)"
# xz, not the default zstd: RHEL/CentOS 7's rpm (4.11) reads no zstd payload.
"$tools/bin/cargo-generate-rpm" --target "$triple" --payload-compress xz --output "dist/$name-1.$arch.rpm"

rm -rf dist/stage
(cd dist && sha256sum "$tarball" "$kit" "gpurun_${version}_${debarch}.deb" "$name-1.$arch.rpm" > SHA256SUMS)
say "done:"
(cd dist && ls -l "$tarball" "$kit" "gpurun_${version}_${debarch}.deb" "$name-1.$arch.rpm" SHA256SUMS)
