#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_input_pipeline.sh — per-worker input pipelines with real processes on loopback: a
# coordinator and two workers x 2 devices run a CSV job (four generated files of 30, 20, 25 and
# 15 rows, a batch=4 mesh over both workers, global batch 8) under each shard policy:
#  * file:  worker 0 decodes files 0 and 2 only (55 examples), worker 1 files 1 and 3 (35); the
#           job runs the steps of the longer pipeline (14) — the shorter one feeds empty batches
#           and the count allreduce keeps every collective matched;
#  * data:  both decode all 90 examples; ceil(90 / 8) = 12 steps (the one-device global batches);
#  * data + "batching": "per_replica": each pipeline keeps every 2nd example (45), batches of
#           8 / 4 = 2 per replica, 23 batches over 2 local replicas = 12 steps.
# Each worker's "data: pipeline W of N ..." log line shows what it read; the job must succeed with
# exactly the expected number of steps. A job whose dataset section leaves "prefetch" out gets the
# automatic depth: each worker logs the job's 4 device threads on this host, 2 in the other
# worker, against its cores (prefetch 0 when they fill the cores, else 2). `meshtrain train
# --local` (one process) keeps the thread, and the depth changes no number (its output equals
# prefetch 0's). Then
# `train --local` on a 1-device mesh (through the pipeline) must print the one-device engine's
# numbers for the Fashion-MNIST MLP.
source "$(dirname "$0")/lib.sh"

HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000)
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wa --data-root "$T"
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wb --data-root "$T"
wait_for 20 "two workers" workers_alive 2

# gen_csv FILE ROWS SEED: header, 4 features, a 0/1 label that depends on them
gen_csv() {
    awk -v n="$2" -v seed="$3" 'BEGIN { srand(seed); print "a,b,c,d,label";
        for (i = 0; i < n; i++) { a = rand(); b = rand(); c = rand(); d = rand();
            printf "%.4f,%.4f,%.4f,%.4f,%d\n", a, b, c, d, (a + b > c + d) } }' >"$1"
}
mkdir -p "$T/data"
gen_csv "$T/data/part-0.csv" 30 1
gen_csv "$T/data/part-1.csv" 20 2
gen_csv "$T/data/part-2.csv" 25 3
gen_csv "$T/data/part-3.csv" 15 4
gen_csv "$T/data/test.csv" 16 5

# job POLICY BATCHING [PREFETCH]: the spec text (PREFETCH "": the dataset section leaves it out)
job() {
    jq -n --arg t "$T" --arg p "$1" --arg b "$2" --arg f "${3-2}" '{name: "csv-\($p)-\($b)",
        seed: 7, batch_size: 8, epochs: 1, optimizer: "sgd", learning_rate: 0.1, mesh: {batch: 4},
        dataset: ({format: "csv", train: {glob: ($t + "/data/part-*.csv")},
                   test: ($t + "/data/test.csv"), label_column: "label", num_classes: 2,
                   shard_policy: $p, batching: $b} +
                  (if $f == "" then {} else {prefetch: ($f | tonumber)} end)),
        model: {input_shape: [4], layers: [{type: "dense", units: 8, activation: "relu"},
                                           {type: "dense", units: 2}]}}'
}

# run POLICY BATCHING STEPS LINE0 LINE1 [PREFETCH]: the job succeeds with STEPS steps on both
# workers and each worker logged what its pipeline read
run() {
    local p=$1 b=$2 steps=$3 want0=$4 want1=$5 id n0 n1
    n0=$(wc -l <"$T/wa.log")
    n1=$(wc -l <"$T/wb.log")
    job "$p" "$b" "${6-2}" >"$T/$p-$b.json"
    id=$(mt submit "$T/$p-$b.json") || fail "submit $p/$b: $id"
    wait_for 120 "$id ($p/$b) to finish" finished "$id"
    mt status --json "$id" | jq -e '.state == "SUCCEEDED"' >/dev/null ||
        fail "$p/$b: $(mt status "$id")"
    mt status --json "$id" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
        fail "$p/$b should span both workers: $(mt status --json "$id" | jq -c .placement)"
    got=$(mt status --json "$id" | jq .step)
    [ "$got" = "$steps" ] || fail "$p/$b: $got steps, expected $steps"
    # this job's lines only
    { tail -n +$((n0 + 1)) "$T/wa.log"; tail -n +$((n1 + 1)) "$T/wb.log"; } >"$T/new.log"
    for want in "$want0" "$want1"; do
        grep -qF "$want" "$T/new.log" || fail "$p/$b: no worker logged '$want'"
    done
    log "$p/$b: $steps steps; '$want0' / '$want1'"
}

run file global 14 \
    "pipeline 0 of 2 (shard_policy file) reads 2 of 4 file(s), 55 of 90 examples" \
    "pipeline 1 of 2 (shard_policy file) reads 2 of 4 file(s), 35 of 90 examples"
run data global 12 \
    "pipeline 0 of 2 (shard_policy data) reads 4 of 4 file(s), 90 of 90 examples" \
    "pipeline 1 of 2 (shard_policy data) reads 4 of 4 file(s), 90 of 90 examples"
run data per_replica 12 \
    "pipeline 0 of 2 (shard_policy data) reads 4 of 4 file(s), 90 of 90 examples" \
    "pipeline 1 of 2 (shard_policy data) reads 4 of 4 file(s), 90 of 90 examples"
# no "prefetch" in the spec: the job's 4 device threads on this host, 2 of them in the other
# worker, against the cores
CORES=$(nproc)
AUTO=$((4 >= CORES ? 0 : 2))
LINE="input: prefetch $AUTO (dataset.prefetch not set; 4 device threads of the job on this host, 2"
run data global 12 \
    "pipeline 0 of 2 (shard_policy data) reads 4 of 4 file(s), 90 of 90 examples" "$LINE" ""
[ "$(grep -cF "$LINE in other processes, $CORES core" "$T/new.log")" = 2 ] ||
    fail "not both workers chose prefetch $AUTO: $(grep -F "input: prefetch" "$T/new.log")"

# ---- `meshtrain train --local` (one process) keeps the thread; the depth changes no number
MESHES=(batch=1)
[ "$CORES" -gt 1 ] && [ "$CORES" -le 8 ] && MESHES+=("batch=$CORES") # a device for each core
for mesh in "${MESHES[@]}"; do
    dev=${mesh#batch=}
    job data global "" | jq '.batch_size = 16 | .epochs = 2' >"$T/auto.json"
    job data global 0 | jq '.batch_size = 16 | .epochs = 2' >"$T/fixed.json"
    for k in auto fixed; do
        "$BIN/meshtrain" --log-level info train --local "$T/$k.json" --data-root "$T" \
            --mesh "$mesh" --json 2>"$T/$k.log" | jq -c 'del(.examples_per_sec)' >"$T/$k.out" ||
            fail "train --local $k on $mesh: $(tail -3 "$T/$k.log")"
    done
    want="input: prefetch 2 (dataset.prefetch not set; $dev device thread"
    grep -qF "$want" "$T/auto.log" || fail "$mesh without prefetch: $(grep -F "input:" "$T/auto.log")"
    if grep -qF "input: prefetch" "$T/fixed.log"; then
        fail "$mesh with prefetch 0 chose anyway: $(grep -F "input: prefetch" "$T/fixed.log")"
    fi
    [ -s "$T/auto.out" ] && cmp "$T/auto.out" "$T/fixed.out" ||
        fail "$mesh: prefetch 2 and 0 differ: $(cat "$T/auto.out" "$T/fixed.out")"
    log "train --local on $mesh: prefetch 2 chosen, the same output as prefetch 0"
done
# ---- `meshtrain train --local`: the SPMD path now reads through the pipeline; on a 1-device mesh
# it still reproduces the one-device engine's numbers (same permutation, same batches)
FM=/usr/share/datasets/fashion-mnist
if [ -r "$FM/train-images-idx3-ubyte.gz" ]; then
    jq '. + {steps: 3} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/fm.json"
    export OPENBLAS_NUM_THREADS=1
    "$BIN/meshtrain" train --local "$T/fm.json" --json |
        jq -c 'del(.examples_per_sec)' >"$T/engine.out"
    "$BIN/meshtrain" --log-level info train --local "$T/fm.json" --mesh batch=1 --json \
        2>"$T/local.log" |
        jq -c 'del(.examples_per_sec)' >"$T/mesh1.out"
    cmp "$T/engine.out" "$T/mesh1.out" ||
        fail "engine and 1-device mesh differ: $(cat "$T/engine.out" "$T/mesh1.out")"
    grep -qF "data: pipeline 0 of 1 (shard_policy file) reads 1 of 1 file(s), 60000 of 60000" \
        "$T/local.log" || fail "train --local did not use the pipeline: $(cat "$T/local.log")"
    log "train --local: a 1-device mesh through the pipeline equals the engine" \
        "($(head -c 60 "$T/mesh1.out"))"
fi
log "PASS"
