#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ab_local.sh OLD_BUILD NEW_BUILD [ROUNDS] — same-run A/B of the training engine alone:
# `meshtrain train --local` examples/s of every spec below with two builds, interleaved
# (old, new, old, new, ...) so both see the same load; prints each build's median and the ratio
# new/old per spec, with the load average. One OpenBLAS thread; mesh devices run as threads.
set -euo pipefail
OLD=${1:?usage: ab_local.sh OLD_BUILD NEW_BUILD [ROUNDS]}
NEW=${2:?usage: ab_local.sh OLD_BUILD NEW_BUILD [ROUNDS]}
ROUNDS=${3:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
export OPENBLAS_NUM_THREADS=1
# spec:steps — the Fashion-MNIST models on one device and on meshes of threads (steps long enough
# for a few seconds of training: shorter runs swing by ±15% on a shared host)
SPECS="fashion_mnist_mlp.json:1000 fashion_mnist_cnn.json:150 fashion_mnist_residual_cnn.json:150
fashion_mnist_mlp_model_parallel.json:600 fashion_mnist_cnn_data_parallel.json:150
dtensor_keras_layout_map.json:1000"

rate() { # BUILD SPEC STEPS -> examples/s
    (cd "$SRC/examples" && "$1/meshtrain" train --local "$2" --steps "$3" --json) |
        python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin][-1]["examples_per_sec"])'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-40s %10s %10s %7s  %s\n' spec old_ex/s new_ex/s ratio load
for entry in $SPECS; do
    spec=${entry%%:*} steps=${entry##*:}
    o="" n=""
    for _ in $(seq "$ROUNDS"); do
        o="$o $(rate "$OLD" "$spec" "$steps")"
        n="$n $(rate "$NEW" "$spec" "$steps")"
    done
    mo=$(echo "$o" | median) mn=$(echo "$n" | median)
    printf '%-40s %10s %10s %7.3f  %s\n' "$spec" "$mo" "$mn" "$(awk -v a="$mn" -v b="$mo" 'BEGIN {print a / b}')" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
done
