#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# build-debs.sh — the three Debian packages of meshtrain from a built CMake tree, with dpkg-deb:
#   meshtrain              the CLI, docs, man page, example specs, deployment templates
#   meshtrain-coordinator  the coordinator daemon, its dashboard assets, its systemd unit
#   meshtrain-worker       the worker daemon and its systemd unit
# Usage: packaging/deb/build-debs.sh BUILD_DIR OUT_DIR
#   `make deb` configures BUILD_DIR for it (Release, prefix /usr, dpkg-buildflags, -Werror
#   off as for any packager) and calls this. The tree is installed with
#   `DESTDIR=... cmake --install BUILD_DIR --prefix /usr --strip`, split by path, and each
#   package gets DEBIAN/control (Depends from dpkg-shlibdeps, plus libjs-chart.js for the
#   dashboard), md5sums, and for the daemons a postinst / postrm that run
#   `systemctl daemon-reload` on a live systemd (never under dpkg --root: $DPKG_ROOT).
#   The units are installed, not enabled: a coordinator needs its token first
#   (docs/deploy.md). Files are owned by root (dpkg-deb --root-owner-group; no fakeroot).
# Writes OUT_DIR/<package>_<version>_<arch>.deb and prints their paths.
# Test: tests/integration/test_deb.sh (contents, and installed into a temporary dpkg root
# where the installed programs run a job).
set -euo pipefail

BUILD=${1:?usage: build-debs.sh BUILD_DIR OUT_DIR}
OUT=${2:?usage: build-debs.sh BUILD_DIR OUT_DIR}
for t in dpkg-deb dpkg-shlibdeps dpkg; do
    command -v "$t" >/dev/null || { echo "build-debs: $t not found (Debian package dpkg-dev)" >&2; exit 1; }
done
[ -f "$BUILD/CMakeCache.txt" ] || { echo "build-debs: $BUILD is not a CMake build tree" >&2; exit 1; }
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
PREFIX=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")
ARCH=$(dpkg --print-architecture)
[ -n "$VERSION" ] || { echo "build-debs: no project version in $BUILD/CMakeCache.txt" >&2; exit 1; }
[ "$PREFIX" = /usr ] || echo "build-debs: note: $BUILD was configured with prefix $PREFIX;" \
    "its coordinator looks for the dashboard there ('make deb' configures /usr)" >&2

W=$(mktemp -d "${TMPDIR:-/tmp}/meshtrain-deb.XXXXXX")
trap 'rm -rf "$W"' EXIT
STAGE=$W/stage
DESTDIR=$STAGE cmake --install "$BUILD" --prefix /usr --strip >"$W/install.log" 2>&1 ||
    { cat "$W/install.log" >&2; exit 1; }
find "$STAGE/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} + 2>/dev/null || true

# move PATH... (relative to the stage) into package P's tree
take() {
    local p=$1 f; shift
    for f in "$@"; do
        [ -e "$STAGE/$f" ] || { echo "build-debs: $f is not in the installed tree" >&2; exit 1; }
        mkdir -p "$W/pkg/$p/$(dirname "$f")"
        mv "$STAGE/$f" "$W/pkg/$p/$f"
    done
}
MAN=usr/share/man/man1
UNITS=usr/lib/systemd/system
take meshtrain-coordinator usr/bin/meshtrain-coordinator usr/share/meshtrain/dashboard \
    "$UNITS/meshtrain-coordinator.service"
take meshtrain-worker usr/bin/meshtrain-worker "$UNITS/meshtrain-worker.service"
for p in meshtrain-coordinator meshtrain-worker; do
    [ -e "$STAGE/$MAN/$p.1.gz" ] && take "$p" "$MAN/$p.1.gz"
done
# the rest: the CLI, its man page (or the --help texts), docs, examples, deploy templates
mkdir -p "$W/pkg/meshtrain"
find "$STAGE" -type d -empty -delete
cp -a "$STAGE/." "$W/pkg/meshtrain/"
left=$(find "$W/pkg/meshtrain" -type f | sed "s|$W/pkg/meshtrain/||" | grep -v '^usr/' || true)
[ -z "$left" ] || { echo "build-debs: files outside /usr: $left" >&2; exit 1; }

# Depends of the ELF programs of package P (dpkg-shlibdeps reads debian/control)
mkdir -p "$W/debian"
printf 'Source: meshtrain\n\nPackage: meshtrain\nArchitecture: any\n' >"$W/debian/control"
shlibs() { (cd "$W" && dpkg-shlibdeps -O "$@" 2>/dev/null | sed -n 's/^shlibs:Depends=//p'); }

declare -A DESC=(
    [meshtrain]="command-line client of the meshtrain distributed training service
 Submits job specs to a meshtrain coordinator, follows them, exports models
 (safetensors, ONNX) and trains locally (train --local). Also ships the
 documentation, example job specs and the Docker, Kubernetes, Slurm, systemd
 and Grafana templates under /usr/share/meshtrain/deploy."
    [meshtrain-coordinator]="meshtrain coordinator daemon for workers, jobs and state
 Schedules training jobs on registered workers, keeps the state in SQLite,
 serves the JSON API, Prometheus metrics and the dashboard over HTTP. The
 systemd unit meshtrain-coordinator.service is installed but not enabled."
    [meshtrain-worker]="meshtrain worker daemon that runs training shards
 Registers with a meshtrain coordinator and runs its share of training jobs
 on this machine's CPUs. The systemd unit meshtrain-worker.service is
 installed but not enabled."
)
declare -A EXTRA=(
    [meshtrain]=""
    [meshtrain-coordinator]="libjs-chart.js"
    [meshtrain-worker]=""
)
declare -A RECOMMENDS=(
    [meshtrain]="dataset-fashion-mnist"
    [meshtrain-coordinator]="meshtrain (= $VERSION), sqlite3, dataset-fashion-mnist"
    [meshtrain-worker]="meshtrain (= $VERSION), dataset-fashion-mnist"
)

mkdir -p "$OUT"
for p in meshtrain meshtrain-coordinator meshtrain-worker; do
    root=$W/pkg/$p
    mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$p"
    cat >"$root/usr/share/doc/$p/copyright" <<EOT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: meshtrain

Files: *
Copyright: meshtrain developers
License: MIT
Comment: meshtrain's \`export --format onnx\` is compiled from a subset of ONNX's
 onnx.proto (Copyright (c) ONNX Project Contributors, Apache-2.0).
EOT
    deps=$(shlibs "$root/usr/bin/$p")
    [ -n "$deps" ] || { echo "build-debs: dpkg-shlibdeps found no dependencies of $p" >&2; exit 1; }
    [ -n "${EXTRA[$p]}" ] && deps="$deps, ${EXTRA[$p]}"
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    {
        echo "Package: $p"
        echo "Version: $VERSION"
        echo "Architecture: $ARCH"
        echo "Maintainer: meshtrain developers <meshtrain@localhost>"
        echo "Installed-Size: $size"
        echo "Depends: $deps"
        echo "Recommends: ${RECOMMENDS[$p]}"
        echo "Section: science"
        echo "Priority: optional"
        echo "Homepage: https://github.com/meshtrain/meshtrain"
        echo "Description: ${DESC[$p]}"
    } >"$root/DEBIAN/control"
    if [ "$p" != meshtrain ]; then
        for s in postinst postrm; do
            cat >"$root/DEBIAN/$s" <<'EOT'
#!/bin/sh
# reload systemd's view of the installed unit (not enabled: see docs/deploy.md)
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
EOT
            chmod 0755 "$root/DEBIAN/$s"
        done
    fi
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
        xargs -0 md5sum >DEBIAN/md5sums)
    chmod -R u+rwX,go+rX,go-w "$root"
    deb=$OUT/${p}_${VERSION}_${ARCH}.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
    echo "$deb"
done
