#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spatial.sh [BUILD_DIR] — images sharded on their height (docs/spmd.md, "Images sharded on their
# height") against data parallelism on the same number of devices: the Fashion-MNIST CNN of
# examples/fashion_mnist_cnn_spatial.json (global batch 64) trained with `train --local` on
# batch=2,space=1 (2 devices, data parallel: the band code with one band) and batch=1,space=2
# (2 devices, each image's rows in 2 bands with conv2d halo exchange and a flatten gather),
# rounds alternating the meshes so that the machine's load weighs on both alike. Prints per run
# the examples/s of the final JSON line (training steps only) with the load average, then the
# medians and the bands/data-parallel ratio of the same run, and each mesh's per-device
# collective bytes and activations from `meshtrain plan`. Never run by ctest.
# Env: SPATIAL_STEPS (default 30), SPATIAL_REPEAT (default 2 rounds).
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${SPATIAL_STEPS:-30}
REPEAT=${SPATIAL_REPEAT:-2}
SPEC="$SRC/examples/fashion_mnist_cnn_spatial.json"
MESHES=("batch=2,space=1" "batch=1,space=2")
export OPENBLAS_NUM_THREADS=1
T=$(mktemp -d /tmp/mt-bench-spatial.XXXXXX)
trap 'rm -rf "$T"' EXIT

echo "height bands vs data parallel, 2 devices, $STEPS steps of global batch 64, $REPEAT rounds;" \
    "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPEAT"); do
    for m in "${MESHES[@]}"; do
        "$BUILD/meshtrain" train --local "$SPEC" --mesh "$m" --steps "$STEPS" --json \
            >"$T/run.out" 2>"$T/run.err" || { cat "$T/run.err" >&2; exit 1; }
        eps=$(tail -n 1 "$T/run.out" | sed -n 's/.*"examples_per_sec":\([0-9.e+]*\).*/\1/p')
        echo "$eps" >>"$T/$m.eps"
        printf "round %d  %-18s %8s examples/s  (load %s)\n" "$r" "$m" "$eps" \
            "$(cut -d' ' -f1 /proc/loadavg)"
    done
done
median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
dp=$(median "$T/${MESHES[0]}.eps")
sp=$(median "$T/${MESHES[1]}.eps")
awk -v d="$dp" -v s="$sp" -v l="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
    printf "median: data parallel %.1f, height bands %.1f examples/s: bands / data parallel = %.2fx (load %s)\n", d, s, s / d, l }'
for m in "${MESHES[@]}"; do
    echo "plan $m:"
    "$BUILD/meshtrain" plan --offline --mesh "$m" "$SPEC" | grep -E "^per |^halo|^ "
done
