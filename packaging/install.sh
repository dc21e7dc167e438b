#!/bin/sh
# Installs this release of gpurun under PREFIX (default /usr/local), by the rules of the
# source tree's `make install`: the binary, the man page, the bash, zsh and fish completions
# where each shell looks, the docs and the example config under share/doc/gpurun, and the
# tmpfiles.d entry (the lock directory at boot) only for a system prefix (/usr, /usr/local)
# or where TMPFILESDIR says: a user's PREFIX=~/.local never writes outside it.
#   ./install.sh                       (as root: /usr/local)
#   PREFIX=$HOME/.local ./install.sh   (a user's own)
#   DESTDIR=/tmp/pkg PREFIX=/usr ./install.sh
#   ./install.sh --uninstall           (the same PREFIX: takes away what it put there)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case "$PREFIX" in
    /usr | /usr/ | /usr/local | /usr/local/) TMPFILESDIR=${TMPFILESDIR-/usr/lib/tmpfiles.d} ;;
    *) TMPFILESDIR=${TMPFILESDIR-} ;;
esac
root="$DESTDIR$PREFIX"
if [ "${1:-}" = --uninstall ]; then
    # What the install below puts, and nothing else: the directories stay (others' files).
    for file in bin/gpurun share/man/man1/gpurun.1 share/bash-completion/completions/gpurun \
        share/zsh/site-functions/_gpurun share/fish/vendor_completions.d/gpurun.fish; do
        rm -f "$root/$file"
    done
    rm -rf "$root/share/doc/gpurun"
    [ -z "$TMPFILESDIR" ] || rm -f "$DESTDIR$TMPFILESDIR/gpurun.conf"
    echo "removed gpurun from $root"
    exit 0
fi
put() { # mode source destination
    mkdir -p "$(dirname "$3")"
    cp "$2" "$3.new.$$" && chmod "$1" "$3.new.$$" && mv -f "$3.new.$$" "$3"
}
put 0755 "$here/bin/gpurun" "$root/bin/gpurun"
put 0644 "$here/share/man/man1/gpurun.1" "$root/share/man/man1/gpurun.1"
put 0644 "$here/share/bash-completion/completions/gpurun" "$root/share/bash-completion/completions/gpurun"
put 0644 "$here/share/zsh/site-functions/_gpurun" "$root/share/zsh/site-functions/_gpurun"
put 0644 "$here/share/fish/vendor_completions.d/gpurun.fish" "$root/share/fish/vendor_completions.d/gpurun.fish"
for doc in "$here"/share/doc/gpurun/* "$here"/share/doc/gpurun/doc/* "$here"/share/doc/gpurun/doc/guide/*; do
    if [ -f "$doc" ]; then put 0644 "$doc" "$root/share/doc/gpurun/${doc#"$here/share/doc/gpurun/"}"; fi
done
if [ -n "$TMPFILESDIR" ]; then
    put 0644 "$here/lib/tmpfiles.d/gpurun.conf" "$DESTDIR$TMPFILESDIR/gpurun.conf"
    # Now, not at the next boot: else the first user to run gpurun would own the directory.
    if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && command -v systemd-tmpfiles >/dev/null; then
        systemd-tmpfiles --create "$TMPFILESDIR/gpurun.conf" || true
    fi
else
    echo "tmpfiles entry not installed: PREFIX=$PREFIX is not /usr or /usr/local (TMPFILESDIR=DIR installs it); gpurun makes /run/lock/gpurun on first use"
fi
echo "installed gpurun under $root"
