#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mesh_invariant.sh [BUILD] [ROUNDS] [OLD_BUILD] — the step cost of "reproducibility":
# "mesh_invariant" against "fixed_mesh" (docs/reproducibility.md), in one run: the seed models on
# 1 and 2 devices (`train --local --mesh batch=D`), each pair run ROUNDS times (default 3) in
# alternating order; prints the median examples/s of the final line of `train --json` per mode and
# invariant/fixed (< 1: the mode is slower), with the load average beside each row. With
# OLD_BUILD, also fixed_mesh on that build in the same rounds and fixed/old (the default mode's
# speed A/B of a change). Never run by ctest; about a minute on 2 idle cores (1.5 with OLD_BUILD).
# MI_SCALE=N runs N times the steps (the 1-device MLP runs are tens of ms at N = 1).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
R=${2:-3}
SCALE=${MI_SCALE:-1} # MI_SCALE=N: N times the steps per run (fewer startup effects)
OLD=${3:+$(cd "$3" && pwd)}
W=$(mktemp -d /tmp/mt-bench-inv.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1

# the sentiment example's data: generated sentences (gen_text of tests/integration/lib.sh, which
# cannot be sourced here: it wants a test's environment)
eval "$(sed -n '/^gen_text()/,/^}/p' "$SRC/tests/integration/lib.sh")"
mkdir -p "$W/data"
gen_text "$W/data/sentiment_train.tsv" 4096 1
gen_text "$W/data/sentiment_test.tsv" 64 2

# spec NAME EXAMPLE MODE: a copy of an example without checkpoints or a test set
spec() {
    python3 - "$SRC/examples/$2.json" "$W/$1-$3.json" "$3" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["reproducibility"] = sys.argv[3]
s.pop("checkpoint", None)
ds = s["dataset"]
for k in ("test", "test_images", "test_labels"):
    ds.pop(k, None)
json.dump(s, open(sys.argv[2], "w"))
PY
}

# speed NAME MODE DEVICES STEPS [BUILD]: examples/s of the run's final line
speed() {
    (cd "$W" && "${5:-$BUILD}/meshtrain" train --local "$1-$2.json" --mesh "batch=$3" --steps "$(($4 * SCALE))" \
        --json 2>/dev/null | tail -1 | sed 's/.*"examples_per_sec":\([0-9.e+-]*\).*/\1/')
}

median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf "%-22s %-3s %12s %12s %9s" model dev fixed_ex/s invar_ex/s inv/fixed
[ -n "$OLD" ] && printf " %12s %9s" old_fixed fixed/old
printf "  %s\n" load
for m in "sentiment-mlp dtensor_mlp_data_parallel 96" "fmnist-mlp fashion_mnist_mlp 150" \
    "fmnist-cnn fashion_mnist_cnn 12" "fmnist-residual-cnn fashion_mnist_residual_cnn 12"; do
    set -- $m
    spec "$1" "$2" fixed_mesh
    spec "$1" "$2" mesh_invariant
    for d in 1 2; do
        : >"$W/f" && : >"$W/i" && : >"$W/o"
        for r in $(seq "$R"); do
            [ -n "$OLD" ] && speed "$1" fixed_mesh "$d" "$3" "$OLD" >>"$W/o"
            if [ $((r % 2)) = 1 ]; then
                speed "$1" fixed_mesh "$d" "$3" >>"$W/f"
                speed "$1" mesh_invariant "$d" "$3" >>"$W/i"
            else
                speed "$1" mesh_invariant "$d" "$3" >>"$W/i"
                speed "$1" fixed_mesh "$d" "$3" >>"$W/f"
            fi
        done
        f=$(median <"$W/f")
        i=$(median <"$W/i")
        printf "%-22s %-3s %12.0f %12.0f %9.3f" "$1" "$d" "$f" "$i" \
            "$(awk -v a="$f" -v b="$i" 'BEGIN { print b / a }')"
        if [ -n "$OLD" ]; then
            o=$(median <"$W/o")
            printf " %12.0f %9.3f" "$o" "$(awk -v a="$o" -v b="$f" 'BEGIN { print b / a }')"
        fi
        printf "  %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
