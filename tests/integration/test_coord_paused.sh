#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coord_paused.sh — a coordinator frozen for longer than its heartbeat timeout loses no
# worker for its own pause (docs/robustness.md). Real coordinator (heartbeat timeout 1.5 s) and
# two workers x 1 device on loopback, a 2-worker data-parallel job of the Fashion-MNIST MLP:
#  1. the coordinator is SIGSTOPped for 4 s while the job runs; after SIGCONT both workers stay
#     alive (before the fix the sweep, which libuv runs before the queued heartbeats, found every
#     worker silent for 4 s and lost them: the job restarted), the coordinator logs its pause,
#     and the job SUCCEEDS without a restart;
#  2. the timeout still applies to a worker: one SIGSTOPped for 4 s is lost.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

STEPS=8000 # a few thousand steps a second on an idle 2-core host: the job outlasts the freeze
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 1500
start_worker1 wa
start_worker1 wb
WB_PID=$LAST_PID
wait_for 20 "two workers" workers_alive 2

jq --argjson s "$STEPS" '. + {mesh: {batch: 2}, steps: $s} | del(.epochs) | del(.checkpoint)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
st() { mt status --json "$1"; }
step_ge() { st "$1" | jq -e --argjson s "$2" '.state == "RUNNING" and .step >= $s' >/dev/null; }

# ---- 1. the coordinator's own pause
JOB=$(mt submit "$T/job.json") || fail "submit: $JOB"
wait_for 60 "$JOB past step 20" step_ge "$JOB" 20
st "$JOB" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB should span both workers: $(st "$JOB" | jq -c .placement)"
kill -STOP "$COORD_PID"
sleep 4
kill -CONT "$COORD_PID"
sleep 1
workers_alive 2 || fail "workers lost after the coordinator's pause: $(mt workers --json | jq -c '[.workers[] | [.name, .state]]')"
! grep -q "lost (no heartbeat)\|lost: no heartbeat" "$T/coord.log" || fail "a worker was lost: $(grep -m1 lost "$T/coord.log")"
grep -q "coordinator loop paused for" "$T/coord.log" || fail "the pause was not logged"
finished() { st "$JOB" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")' >/dev/null; }
wait_for 120 "$JOB to finish" finished
st "$JOB" | jq -e '.state == "SUCCEEDED" and .restarts == 0' >/dev/null ||
    fail "$JOB: $(st "$JOB" | jq -c '[.state, .restarts, [.events[] | [.state, .reason]]]')"
log "coordinator frozen 4 s (timeout 1.5 s): no worker lost, $JOB SUCCEEDED without a restart"

# ---- 2. a worker's own silence still counts
kill -STOP "$WB_PID"
lost_wb() { mt workers --json | jq -e '[.workers[] | select(.name == "wb" and .state != "alive")] | length == 1' >/dev/null; }
wait_for 10 "wb lost" lost_wb
kill -CONT "$WB_PID"
log "a worker frozen past the timeout is still lost"
log "PASS"
