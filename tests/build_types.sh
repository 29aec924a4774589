#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# build_types.sh — check that every build type compiles: the libraries and the three programs
# (tests and benchmarks are left out to keep the CPU cost down), each in a fresh build tree,
# with MT_WERROR=ON so that a warning an optimisation level brings out (gcc's
# -Wmaybe-uninitialized at -O3, _FORTIFY_SOURCE checks) fails here rather than for a packager.
#
# Usage: tests/build_types.sh [TYPE...]   (default: Release RelWithDebInfo Debug debian)
#   debian = CMAKE_BUILD_TYPE=None with CFLAGS/CPPFLAGS/LDFLAGS from dpkg-buildflags, as
#   debhelper's cmake build does. Build trees go under $MT_BUILD_TYPES_DIR (default: a temp dir,
#   removed at the end). JOBS sets the parallelism (default nproc).
# Run by .ci/run and `make build-types`; not part of ctest (a few minutes of CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Release RelWithDebInfo Debug debian)
jobs=${JOBS:-$(nproc)}
if [ -n "${MT_BUILD_TYPES_DIR:-}" ]; then
    top=$MT_BUILD_TYPES_DIR
    mkdir -p "$top"
else
    top=$(mktemp -d "${TMPDIR:-/tmp}/mt-build-types-XXXXXX")
    trap 'rm -rf "$top"' EXIT
fi

failed=()
for t in "${types[@]}"; do
    dir=$top/$t
    rm -rf "$dir"
    args=(-S "$src" -B "$dir" -DMT_WERROR=ON)
    envs=()
    case $t in
    debian)
        command -v dpkg-buildflags >/dev/null || { echo "build-types: no dpkg-buildflags" >&2; exit 1; }
        args+=(-DCMAKE_BUILD_TYPE=None)
        envs=("CFLAGS=$(dpkg-buildflags --get CFLAGS)" "CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)"
            "LDFLAGS=$(dpkg-buildflags --get LDFLAGS)")
        # CMake reads CFLAGS but not CPPFLAGS: debhelper appends CPPFLAGS to CFLAGS the same way
        envs[0]="CFLAGS=$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
        ;;
    *) args+=(-DCMAKE_BUILD_TYPE="$t") ;;
    esac
    start=$(date +%s)
    if env "${envs[@]}" cmake "${args[@]}" >"$dir.log" 2>&1 &&
        cmake --build "$dir" -j "$jobs" --target meshtrain meshtrain-coordinator meshtrain-worker \
            >>"$dir.log" 2>&1; then
        echo "build-types: $t ok ($(($(date +%s) - start)) s)"
    else
        echo "build-types: $t FAILED; the end of its log:" >&2
        grep -E 'error|warning' "$dir.log" | head -40 >&2 || tail -40 "$dir.log" >&2
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "build-types: failed: ${failed[*]}" >&2
    exit 1
fi
echo "build-types: all ${#types[@]} build types compile"
