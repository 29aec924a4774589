#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_e2e.sh — the product end to end with real processes on loopback: a coordinator and real
# workers (worker/task.c runs the SPMD trainer over the network data plane).
#  1. two workers x 4 devices: every example job runs a few steps across the two worker
#     processes and its metrics are in the coordinator; a job asking for more devices than
#     exist stays QUEUED with that reason; an invalid spec is refused at submit (exit 4, path);
#     a running job is cancelled (watch exits 1); `watch` started after the end shows the
#     history; the reference job runs on ONE worker x 4 devices and is exported.
#  2. two workers x 2 devices: the same reference job runs as 2 x 2 and its export is
#     byte-identical to the 1 x 4 one (the collectives reduce in an order fixed by mesh position).
# Under MT_SANITIZED=1 fewer steps and examples are run.
source "$(dirname "$0")/lib.sh"

STEPS=4
[ "${MT_SANITIZED:-0}" = "1" ] && STEPS=2
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000)
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"

state_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s'; }
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
# run_job SPEC: submit, wait for the end, require SUCCEEDED; sets JOB
run_job() {
    JOB=$(mt submit "$1") || fail "submit $1: $JOB"
    wait_for 120 "$JOB ($1) to finish" finished "$JOB"
    state_is "$JOB" SUCCEEDED >/dev/null || fail "$JOB ($1): $(mt status "$JOB")"
}

bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 4 --name wa --data-root "$T" --data-root /usr/share/datasets
WA=$LAST_PID
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 4 --name wb --data-root "$T" --data-root /usr/share/datasets
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2

# ---- every example across the two worker processes (the text examples read small generated
# label<TAB>sentence files instead of the fetched UCI sentences, the language models the same
# sentences as plain text instead of the Brown corpus)
gen_text "$T/sent_train.tsv" 512 1
gen_text "$T/sent_test.tsv" 128 2
# the language-model examples read the same sentences as plain text instead of the fetched corpus
cut -f2 "$T/sent_train.tsv" >"$T/lm_train.txt"
awk -F"\t" 'NR <= 20 { print $2 }' "$T/sent_test.tsv" >"$T/lm_test.txt" # (not cut | head: SIGPIPE + pipefail)
# the image examples evaluate on the first 2000 test images (the whole test set is the
# ResNet's longest part here)
idx_head 2000 /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz "$T/test-images.gz"
idx_head 2000 /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "$T/test-labels.gz"
for f in "$SRC"/examples/*.json; do
    name=$(basename "$f" .json)
    case $name in *cnn* | *resnet* | char_lm*) [ "${MT_SANITIZED:-0}" = "1" ] && continue ;; esac
    # 8 devices (both workers): the first mesh dimension grows to make up the product
    jq --argjson s "$STEPS" --arg t "$T" 'def prod: reduce .[] as $x (1; . * $x);
        . + {steps: $s} | del(.epochs) | del(.checkpoint) |
        if .dataset.format == "text" then .dataset.train = $t + "/sent_train.tsv" |
            .dataset.test = $t + "/sent_test.tsv" else . end |
        if .dataset.format == "tokens" then .dataset.train = $t + "/lm_train.txt" |
            .dataset.test = $t + "/lm_test.txt" else . end |
        if .dataset.format == "idx" then .dataset.test_images = $t + "/test-images.gz" |
            .dataset.test_labels = $t + "/test-labels.gz" else . end |
        ((.mesh // {batch: 1}) | to_entries) as $e | ($e | map(.value) | prod) as $p |
        .mesh = ($e | .[0].value *= (8 / $p) | from_entries)' "$f" >"$T/$name.json"
    run_job "$T/$name.json"
    st=$(mt status --json "$JOB")
    echo "$st" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
        fail "$name did not span both workers: $(echo "$st" | jq -c '.placement')"
    echo "$st" | jq -e '[.latest_metrics[].name] | index("loss") and any(startswith("test_"))' \
        >/dev/null || fail "$name: metrics missing: $(echo "$st" | jq -c '.latest_metrics')"
    n=$(mt watch --json "$JOB" | jq -s '[.[] | select(.name == "loss")] | length')
    [ "$n" = "$STEPS" ] || fail "$name: $n loss points stored, expected $STEPS"
    log "$name: $(echo "$st" | jq -r '.mesh') on 2 workers, $STEPS steps, metrics stored"
done

# ---- more devices than exist: QUEUED with the reason
jq '. + {mesh: {batch: 16}, steps: 2} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/big.json"
BIG=$(mt submit "$T/big.json")
queued() { mt status --json "$BIG" | jq -e '.state == "QUEUED" and (.reason | test("16 devices"))'; }
wait_for 10 "$BIG queued with a reason" queued
log "big job QUEUED: $(mt status --json "$BIG" | jq -r .reason)"
mt cancel "$BIG" >/dev/null

# ---- an invalid spec is refused with the field path
jq '. + {batch_size: -3}' "$SRC/examples/fashion_mnist_mlp.json" >"$T/bad.json"
expect_exit 4 mt submit "$T/bad.json"
grep -q 'INVALID_ARGUMENT: batch_size' "$T/last.out" || fail "submit message: $(cat "$T/last.out")"
log "invalid spec refused: $(cat "$T/last.out")"

# ---- cancel a running job; its watcher exits 1
jq '. + {mesh: {batch: 4}, steps: 100000} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/long.json"
LONG=$(mt submit "$T/long.json")
stepping() { mt status --json "$LONG" | jq -e '.state == "RUNNING" and .step > 0'; }
wait_for 60 "$LONG running" stepping
bg watch_long "$BIN/meshtrain" --coordinator "$COORD_URL" watch "$LONG"
WATCH=$LAST_PID
mt cancel "$LONG" >/dev/null
wait_for 20 "$LONG cancelled" state_is "$LONG" CANCELLED
wrc=0
wait "$WATCH" || wrc=$?
[ "$wrc" = 1 ] || fail "watch of a cancelled job exited $wrc"
grep -q "CANCELLED" "$T/watch_long.log" || fail "watch output: $(tail -3 "$T/watch_long.log")"
# both workers stop their tasks (the data plane is free for the next job)
idle() {
    for w in wa wb; do
        ! grep -q "$LONG attempt 1: starting" "$T/$w.log" ||
            grep -q "$LONG attempt 1: cancelled$" "$T/$w.log" || return 1
    done
}
wait_for 40 "the workers stopped $LONG" idle
log "$LONG cancelled while running; watch exited 1"

# ---- the reference job: batch=4 on one worker x 4 devices
jq --argjson s $((STEPS * 2)) '. + {mesh: {batch: 4}, steps: $s} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/ref.json"
run_job "$T/ref.json"
REF1=$JOB
mt status --json "$REF1" | jq -e '[.placement[].worker_id] | unique | length == 1' >/dev/null ||
    fail "$REF1 should be on one worker: $(mt status --json "$REF1" | jq -c .placement)"
mt export "$REF1" --format safetensors -o "$T/ref_1x4.safetensors" >/dev/null
# predict with the exported model: the accuracy on the test set is the job's test_accuracy
FM=/usr/share/datasets/fashion-mnist
mt predict "$T/ref_1x4.safetensors" --spec "$T/ref.json" --input $FM/t10k-images-idx3-ubyte.gz \
    --labels $FM/t10k-labels-idx1-ubyte.gz --limit 2 --top-k 2 >"$T/predict.out" ||
    fail "predict: $(cat "$T/predict.out")"
want=$(mt status --json "$REF1" | jq -r '.latest_metrics[] | select(.name == "test_accuracy") |
    .value * 10000 | round / 10000')
got=$(sed -n 's/^accuracy \([0-9.]*\).*/\1/p' "$T/predict.out")
awk -v a="$got" -v b="$want" 'BEGIN { exit !(a - b < 0.00015 && b - a < 0.00015) }' ||
    fail "predict accuracy $got, the job's test_accuracy $want"
log "predict: accuracy $got = the job's test_accuracy"

# ---- watch started late shows the history (plain lines when stdout is not a terminal)
mt watch "$REF1" >"$T/late.out" || fail "watch $REF1 exited $?"
grep -q "Epoch 1/1  step $((STEPS * 2))/" "$T/late.out" || fail "late watch: $(cat "$T/late.out")"
grep -q "test_accuracy" "$T/late.out" && grep -q "job $REF1 SUCCEEDED" "$T/late.out" ||
    fail "late watch: $(cat "$T/late.out")"
log "watch started late: $(wc -l <"$T/late.out") lines of history and the final state"

# ---- two workers x 2 devices: the same job, the same bytes
kill "$WA" "$WB"
wait_for 20 "wa and wb lost" workers_alive 0
bg wc "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wc --data-root "$T" --data-root /usr/share/datasets
bg wd "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wd --data-root "$T" --data-root /usr/share/datasets
wait_for 20 "two 2-device workers" workers_alive 2
run_job "$T/ref.json"
REF2=$JOB
mt status --json "$REF2" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$REF2 should span two workers: $(mt status --json "$REF2" | jq -c .placement)"
mt export "$REF2" --format safetensors -o "$T/ref_2x2.safetensors" >/dev/null
cmp "$T/ref_1x4.safetensors" "$T/ref_2x2.safetensors" ||
    fail "1 worker x 4 devices and 2 workers x 2 devices exported different weights"
log "1x4 and 2x2 exports are byte-identical ($(stat -c %s "$T/ref_2x2.safetensors") bytes)"

# ---- SIGTERM: the worker holding rank 0 checkpoints and leaves; the job restarts elsewhere from
# that checkpoint and succeeds
jq '. + {mesh: {batch: 4}, steps: 100000, checkpoint: {every_steps: 100000}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/term.json"
TERM_JOB=$(mt submit "$T/term.json")
busy() { mt status --json "$TERM_JOB" | jq -e '.state == "RUNNING" and .step >= 20'; }
wait_for 60 "$TERM_JOB running" busy
R0=$(mt status --json "$TERM_JOB" | jq -r '.placement[] | select(.rank == 0) | .worker_id')
pid=$(mt workers --json | jq -r --arg w "$R0" '.workers[] | select(.worker_id == $w) | .pid')
bg watch_term "$BIN/meshtrain" --coordinator "$COORD_URL" watch "$TERM_JOB"
WATCH_TERM=$LAST_PID
kill -TERM "$pid"
has_ckpt() { [ "$(mt checkpoints --json "$TERM_JOB" | jq '.checkpoints | length')" -ge 1 ]; }
wait_for 30 "$R0 wrote a checkpoint on SIGTERM" has_ckpt
STOP_STEP=$(mt checkpoints --json "$TERM_JOB" | jq '.checkpoints[0].step')
wait_for 30 "$R0 exited" bash -c "! kill -0 $pid 2>/dev/null"
bg we "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name we --data-root "$T" --data-root /usr/share/datasets
resumed() { mt status --json "$TERM_JOB" | jq -e '.state == "RUNNING" and .restarts == 1'; }
wait_for 60 "$TERM_JOB resumed" resumed
wait_for 30 "resume from step $STOP_STEP" \
    bash -c "grep -q 'resuming from checkpoint step $STOP_STEP' '$T'/w[cde].log"
mt cancel "$TERM_JOB" >/dev/null
# `watch` (following since before the SIGTERM) marks the restart with the step it resumed from
wait "$WATCH_TERM" 2>/dev/null || true
grep -q -- "^-- restart 1 (worker $R0 .*): resuming from step $STOP_STEP --\$" "$T/watch_term.log" ||
    fail "watch: no restart marker at step $STOP_STEP: $(tail -5 "$T/watch_term.log")"
log "SIGTERM: $R0 checkpointed step $STOP_STEP and left; the job resumed from it on a new placement"
log "PASS"
