#!/usr/bin/env bash
# The .deb and the .rpm of make dist, built by the tools every Debian already has: dpkg-deb
# (dpkg) and rpmbuild (Debian's rpm package, which make test installs for tests/dist.rs). No
# packaging tool is compiled from crates.io: that took about ten minutes of a first make test.
# Both packages hold the same files, from one list (ASSETS below), with the release's stage
# (make install-files' tree) as their source; every file's time is SOURCE_DATE_EPOCH, so that
# the same commit packs to the same bytes.
#
# usage: packaging/packages.sh STAGE BINARY VERSION ARCH DEBARCH
#   STAGE    the staged prefix (dist/stage/gpurun), for the man page and completions
#   writes   dist/gpurun_VERSION_DEBARCH.deb and dist/gpurun-VERSION-1.ARCH.rpm
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?STAGE} binary=${2:?BINARY} version=${3:?VERSION} arch=${4:?ARCH} debarch=${5:?DEBARCH}
epoch=${SOURCE_DATE_EPOCH:?SOURCE_DATE_EPOCH}
say() { echo "make dist: $*"; }

# source, destination, mode, and what rpm calls it (config, doc or nothing).
ASSETS=(
    "$binary /usr/bin/gpurun 0755 -"
    "$stage/share/man/man1/gpurun.1 /usr/share/man/man1/gpurun.1 0644 doc"
    "$stage/share/bash-completion/completions/gpurun /usr/share/bash-completion/completions/gpurun 0644 -"
    "$stage/share/zsh/site-functions/_gpurun /usr/share/zsh/vendor-completions/_gpurun 0644 -"
    "$stage/share/fish/vendor_completions.d/gpurun.fish /usr/share/fish/vendor_completions.d/gpurun.fish 0644 -"
    "packaging/gpurun-tmpfiles.conf /usr/lib/tmpfiles.d/gpurun.conf 0644 -"
    "packaging/config.toml /etc/gpurun/config.toml 0644 config"
    "README.md /usr/share/doc/gpurun/README.md 0644 doc"
    "doc/guide.md /usr/share/doc/gpurun/doc/guide.md 0644 doc"
    "doc/design.md /usr/share/doc/gpurun/doc/design.md 0644 doc"
    "doc/performance.md /usr/share/doc/gpurun/doc/performance.md 0644 doc"
    "doc/development.md /usr/share/doc/gpurun/doc/development.md 0644 doc"
)
for page in doc/guide/*.md; do
    ASSETS+=("$page /usr/share/doc/gpurun/$page 0644 doc")
done
summary="Run a command on the right NVIDIA GPU"
description="An exec wrapper for NVIDIA GPU machines: probes the GPUs through NVML, chooses and
reserves the right ones, sets CUDA_VISIBLE_DEVICES, runs the command, forwards its
signals and checks that it landed on the chosen cards."

# The files of ASSETS under ROOT; `deb`: as Debian's policy has them (the man page compressed,
# the licences in the copyright file), else as Fedora's (the licences in /usr/share/licenses).
lay_out() {
    local root=$1 flavour=$2 asset src dest mode
    for asset in "${ASSETS[@]}"; do
        read -r src dest mode _ <<<"$asset"
        install -D -m "$mode" "$src" "$root$dest"
    done
    if [ "$flavour" = deb ]; then
        gzip -9n "$root/usr/share/man/man1/gpurun.1"
        {
            echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
            echo "Upstream-Name: gpurun"
            echo "Copyright: 2026, the gpurun developers"
            echo "License: MIT OR Apache-2.0"
            sed 's/^$/./; s/^/ /' LICENSE-MIT
        } > "$root/usr/share/doc/gpurun/copyright"
        install -m 0644 LICENSE-MIT LICENSE-APACHE "$root/usr/share/doc/gpurun/"
    else
        install -D -m 0644 -t "$root/usr/share/licenses/gpurun" LICENSE-MIT LICENSE-APACHE
    fi
    find "$root" -exec touch -h -d "@$epoch" {} +
}

deb() {
    local root=dist/stage/deb out="dist/gpurun_${version}_${debarch}.deb"
    rm -rf "$root"
    lay_out "$root" deb
    mkdir -p "$root/DEBIAN"
    local size
    size=$(du -sk --apparent-size "$root" | cut -f1)
    {
        echo "Package: gpurun"
        echo "Version: $version"
        echo "Architecture: $debarch"
        echo "Section: utils"
        echo "Priority: optional"
        echo "Maintainer: the gpurun developers"
        echo "Installed-Size: $size"
        echo "Depends: libc6 (>= 2.17)"
        echo "Description: $summary"
        echo "$description" | sed 's/^/ /'
    } > "$root/DEBIAN/control"
    echo /etc/gpurun/config.toml > "$root/DEBIAN/conffiles"
    install -m 0755 packaging/scripts/postinst "$root/DEBIAN/postinst"
    find "$root/DEBIAN" -exec touch -h -d "@$epoch" {} +
    say "packing the .deb (dpkg-deb)"
    SOURCE_DATE_EPOCH=$epoch dpkg-deb --build --root-owner-group -Zxz "$root" "$out" >/dev/null
    rm -rf "$root"
}

rpm_package() {
    if ! command -v rpmbuild >/dev/null; then
        echo "make dist: no rpmbuild here (Debian: apt-get install rpm; make test installs it as root): the .rpm is not built" >&2
        return 0
    fi
    local top=$PWD/dist/stage/rpm root files asset src dest mode kind
    rm -rf "$top"
    root=$top/root
    lay_out "$root" rpm
    files=$(for asset in "${ASSETS[@]}"; do
        read -r _ dest _ kind <<<"$asset"
        case "$kind" in config) echo "%config(noreplace) $dest" ;; doc) echo "%doc $dest" ;; *) echo "$dest" ;; esac
    done)
    mkdir -p "$top/SPECS"
    cat > "$top/SPECS/gpurun.spec" <<SPEC
Name: gpurun
Version: $version
Release: 1
Summary: $summary
License: MIT OR Apache-2.0
BuildArch: $arch
AutoReqProv: no
Requires: glibc >= 2.17
Provides: gpurun = $version-1

%description
$description

%install
cp -a $root/. %{buildroot}/

%post
$(cat packaging/scripts/postinst)

%files
%defattr(-,root,root,-)
$files
%license /usr/share/licenses/gpurun/LICENSE-MIT
%license /usr/share/licenses/gpurun/LICENSE-APACHE
SPEC
    say "packing the .rpm (rpmbuild)"
    # xz, not zstd: RHEL/CentOS 7's rpm (4.11) reads no zstd payload. The build time and host
    # are the commit's and a fixed word, not this machine's: the same bytes twice.
    SOURCE_DATE_EPOCH=$epoch rpmbuild -bb --quiet \
        --define "_topdir $top" \
        --define "_binary_payload w9.xzdio" \
        --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" \
        --define "_buildhost reproducible" \
        --define "__os_install_post %{nil}" \
        --define "debug_package %{nil}" \
        --define "_build_id_links none" \
        "$top/SPECS/gpurun.spec" >/dev/null
    mv "$top/RPMS/$arch/gpurun-$version-1.$arch.rpm" dist/
    rm -rf "$top"
}

deb
rpm_package
