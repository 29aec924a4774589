#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/images.sh [BUILD_DIR [N]] — the image-folder reader's images/s against the model's
# consumption, in one run (issue #22's benchmark): bench_images writes the first N (default
# 10000) Fashion-MNIST test images as PNG and as JPEG class folders and decodes them through
# core/data (listing, decode, resize, normalise; one thread), then the Fashion-MNIST CNN example
# trains STEPS (default 40) steps with `train --local` (one device) for its examples/s. Prints
# each rate with the load average and the reader/model ratios. Never run by ctest.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
[[ $build = /* ]] || build="$src/$build"
n=${2:-10000}
steps=${STEPS:-40}

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bench_images" "$tmp" --n "$n" | tee "$tmp/decode.txt"
"$build/meshtrain" train --local "$src/examples/fashion_mnist_cnn.json" --steps "$steps" \
    >"$tmp/train.txt" 2>&1 || { tail -5 "$tmp/train.txt" >&2; exit 1; }
model=$(sed -n 's/.* \([0-9][0-9.]*\) examples\/s.*/\1/p' "$tmp/train.txt" | tail -1)
echo "model: examples/fashion_mnist_cnn.json trains $model examples/s (train --local, 1 device," \
    "$steps steps), load $(cut -d' ' -f1 /proc/loadavg)"
for fmt in png jpeg; do
    rate=$(awk -v f="$fmt" '$1 == f {for (i = 1; i <= NF; i++) if ($i == "images/s") print $(i - 1)}' \
        "$tmp/decode.txt")
    awk -v r="$rate" -v m="$model" -v f="$fmt" \
        'BEGIN { printf "%s reader / model consumption: %.1fx\n", f, r / m }'
done
