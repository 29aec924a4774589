#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_start_together.sh — a job over processes agrees to start before its first timed step
# (core/spmd/spmd_run.c start_together; docs/spmd.md "Per-step synchronisation"): a coordinator
# and two 1-device workers, one of them (wb) with the TEST-ONLY hook MT_TEST_STALL_AT_STEP=0, so
# its device sleeps 2 s before its very first collective — as a worker that loads its data late
# would. That wait must land in the start agreement, not in step 1: the job's step-1
# examples_per_sec point (batch 128 over step 1's time) must show a step 1 far shorter than the
# 2 s (before the agreement, step 1's first collective held the whole wait: 128 / 2 s = 64
# examples/s), both workers log the agreement, and the job succeeds.
source "$(dirname "$0")/lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200
worker() { # worker NAME [ENV...]
    local name=$1
    shift
    bg "$name" env "$@" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 \
        --name "$name" --data-root /usr/share/datasets
}
jq '. + {steps: 20} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
worker wa
worker wb MT_TEST_STALL_AT_STEP=0 MT_TEST_STALL_MS=2000
wait_for 20 "two workers" workers_alive 2
JOB=$(mt submit "$T/job.json" --mesh batch=2)
mt watch --json "$JOB" >"$T/points" || fail "$JOB did not succeed: $(mt status "$JOB")"
RATE=$(jq -rR 'fromjson? | select(.name == "examples_per_sec" and .step == 1) | .value' "$T/points")
[ -n "$RATE" ] || fail "no examples_per_sec point at step 1"
# step 1 took 128 / RATE seconds: well under the 2 s that wb's device slept
awk -v r="$RATE" 'BEGIN { exit !(128 / r < 0.5) }' ||
    fail "step 1 took $(awk -v r="$RATE" 'BEGIN { printf "%.3f", 128 / r }') s: the start wait was timed"
grep -q "test stall hook\|TEST HOOK armed" "$T/wb.log" || fail "wb's hook was not armed"
for w in wa wb; do
    grep -q "data plane connected, every process ready to train (waited [0-9]* ms)" "$T/$w.log" ||
        fail "$w did not log the start agreement"
done
WAITED=$(sed -n 's/.*every process ready to train (waited \([0-9]*\) ms).*/\1/p' "$T/wa.log")
[ "$WAITED" -ge 1500 ] || fail "wa waited $WAITED ms for wb, expected about 2000"
log "step 1: $(awk -v r="$RATE" 'BEGIN { printf "%.1f", 1000 * 128 / r }') ms; wa waited $WAITED ms at the start agreement"
