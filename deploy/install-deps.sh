#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# install-deps.sh — install the Debian packages meshtrain builds, tests and
# demos with. Idempotent: packages already present are not touched, and
# apt-get runs only when something is missing.
#
# Usage: deploy/install-deps.sh [--dry-run]
#   MT_EXTRA_PACKAGES="pkg ..." adds packages; MT_NO_BROWSER=1 leaves out the browser the
#   dashboard tests drive (the container image's build stage runs no tests).
set -euo pipefail

PACKAGES=(
    build-essential cmake pkg-config
    protobuf-c-compiler libprotobuf-c-dev
    libuv1-dev libnng-dev libmbedtls-dev libopenblas-dev
    libsqlite3-dev sqlite3 libcmocka-dev libcjson-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev
    dataset-fashion-mnist libjs-chart.js
    jq curl help2man prometheus openssl python3 python3-numpy python3-onnx dpkg-dev
    libopenmpi-dev openmpi-bin
)
# libopenmpi-dev and openmpi-bin: the optional MPI backend (`meshtrain-worker --data-plane mpi`,
# docs/collectives.md) is built when found, so CI builds and tests it
# the dashboard tests drive a real browser (tests/integration/test_dashboard*.sh)
[ "${MT_NO_BROWSER:-0}" = 1 ] || PACKAGES+=(chromium chromium-driver)
# shellcheck disable=SC2206
PACKAGES+=(${MT_EXTRA_PACKAGES:-})

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PACKAGES[@]} packages present"
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
if [ "${1:-}" = "--dry-run" ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
