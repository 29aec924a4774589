#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/ckpt_gather.sh [BUILD_DIR] [ROUNDS] — what checkpoints of a job sharded over worker
# processes cost: the tutorial's model-parallel MLP (generated text data, mesh batch=1,model=2, two
# workers x 1 device on loopback) run STEPS steps without "checkpoint" (baseline: no stop
# agreement, only the final gathered save) and with checkpoint.every_steps larger than the run
# (a stop agreement after every step), interleaved over ROUNDS rounds in alternating order; prints the examples/s the
# rank-0 worker logs for each run, the median of each variant and their ratio, and the time of
# every gathered save the workers logged.
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
STEPS=${STEPS:-400}
export MT_BIN_DIR=$BUILD MT_SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
source "$MT_SOURCE_DIR/tests/integration/lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
for w in wa wb; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$w" \
        --data-root "$T"
done
alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = 2 ]; }
wait_for 20 "two workers" alive
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
gen_text "$T/train.tsv" 4096 1
gen_text "$T/test.tsv" 64 2
jq --argjson s "$STEPS" --arg t "$T" '. + {steps: $s, mesh: {batch: 1, model: 2}} |
    .dataset.train = $t + "/train.tsv" | .dataset.test = $t + "/test.tsv" | del(.epochs) |
    del(.checkpoint)' "$SRC/examples/dtensor_mlp_model_parallel.json" >"$T/base.json"
jq '. + {checkpoint: {every_steps: 1000000}}' "$T/base.json" >"$T/agree.json"
declare -A RES
for ((r = 0; r < ROUNDS; r++)); do
    order="base agree"
    [ $((r % 2)) = 1 ] && order="agree base" # alternate, so that neither always goes first
    for v in $order; do
        job=$(mt submit "$T/$v.json")
        wait_for 300 "$job" finished "$job"
        eps=$(grep -h "job $job: finished" "$T"/w[ab].log | sed -n 's/.* \([0-9.]*\) examples\/s/\1/p' |
            sort -n | head -1)
        echo "round $r $v: $eps examples/s"
        RES[$v]="${RES[$v]:-} $eps"
    done
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }
b=$(echo "${RES[base]}" | med)
a=$(echo "${RES[agree]}" | med)
echo "median examples/s: without agreement $b, with a stop agreement per step $a," \
    "ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')"
echo "gathered saves (ms): $(grep -ho 'written in [0-9.]* ms' "$T"/w[ab].log | awk '{print $3}' |
    tr '\n' ' ')"
