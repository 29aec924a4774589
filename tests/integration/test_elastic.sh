#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_elastic.sh — an elastic data-parallel job ("elastic": {"min_batch": 1, "max_batch": 2})
# runs as mesh batch=2 over two real workers x 1 device; one worker is kill -9'd for good; the
# job goes RESTARTING and resumes from its latest checkpoint on the remaining worker as mesh
# batch=1 (same global batch), also when the coordinator is kill -9'd while that attempt is
# SCHEDULED (the reload keeps batch=1 and the resume checkpoint), and SUCCEEDS; the state history and the status show the mesh
# change. A job without "elastic" in the same situation waits for a second worker instead.
source "$(dirname "$0")/lib.sh"

S=$T/state
# long enough that the job cannot finish between the step-50 poll and the kill: CI's ASan run
# once saw 100 steps (then the ASan setting) go by in 1.6 s, before the kill landed
STEPS=400
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000)
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http off "${HB[@]}"

worker() { # worker NAME
    bg "$1" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$1" \
        --data-root /usr/share/datasets
}
worker wa
WA=$LAST_PID
worker wb
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2

spec() { # spec FILE EXTRA_JSON
    jq --argjson s "$STEPS" --argjson extra "$2" '. + {mesh: {batch: 2}, steps: $s, batch_size: 64,
        checkpoint: {every_steps: 20, keep: 2}} + $extra | del(.epochs)' \
        "$SRC/examples/fashion_mnist_mlp.json" >"$1"
}
spec "$T/elastic.json" '{"elastic": {"min_batch": 1, "max_batch": 2}}'
# long enough that it cannot finish between the step-30 poll and the kill on a loaded machine
spec "$T/rigid.json" '{"steps": 100000}'

st() { mt status --json "$JOB"; }
job_is() { st | jq -e --arg s "$1" '.state == $s' >/dev/null; }
running_at() { st | jq -e --argjson s "$1" '.state == "RUNNING" and .step >= $s' >/dev/null; }

JOB=$(mt submit "$T/elastic.json")
wait_for 60 "$JOB running" job_is RUNNING
st | jq -e '.mesh == "batch=2" and ([.placement[].worker_id] | unique | length == 2)' >/dev/null ||
    fail "$JOB should start as batch=2 on both workers: $(st | jq -c '{mesh, placement}')"
VICTIM=$(st | jq -r '.placement[1].worker_id') # decided before the poll: the kill follows it at once
wait_for 60 "$JOB running past step 50 (past its checkpoints at 20 and 40)" running_at 50
if [ "$VICTIM" = wa ]; then kill -9 "$WA"; SURVIVOR=wb; SPID=$WB; else kill -9 "$WB"; SURVIVOR=wa; SPID=$WA; fi
log "$JOB at step $(st | jq .step) as batch=2; $VICTIM killed for good"

# the survivor is frozen for a moment, so attempt 2 stays SCHEDULED (its assignment not yet
# fetched) when the coordinator is kill -9'd: the reloaded job must hand out the same resume
# checkpoint and keep the resized mesh (it is the placement's)
sleep 1.5
kill -STOP "$SPID"
sched2() { st | jq -e '.restarts == 1 and .state == "SCHEDULED"' >/dev/null; }
wait_for 10 "$JOB placed again (SCHEDULED)" sched2
st >"$T/st_a2.json"
kill -9 "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
start_coordinator coord2 "$S" --listen "$COORD_URL" --http off "${HB[@]}"
kill -CONT "$SPID"
st | jq -e '.mesh == "batch=1" and .restarts == 1' >/dev/null ||
    fail "after the coordinator restart: $(st | jq -c '{state, mesh, restarts}')"
jq -e --arg w "$SURVIVOR" '.mesh == "batch=1" and ([.placement[].worker_id] == [$w])' \
    "$T/st_a2.json" >/dev/null || fail "attempt 2: $(jq -c '{mesh, placement}' "$T/st_a2.json")"
jq -e '[.events[] | select(.state == "SCHEDULED")] | last | .reason |
    test("attempt 2, resuming from a checkpoint at step [1-9][0-9]*, elastic: mesh batch=1, was batch=2")' \
    "$T/st_a2.json" >/dev/null ||
    fail "the history should show the mesh change: $(jq -c '[.events[] | [.state, .reason]]' "$T/st_a2.json")"
wait_for 30 "$JOB running again" job_is RUNNING
grep -q "$JOB attempt 2: starting with 1 of 1 devices here (resume step [1-9]" "$T/$SURVIVOR.log" ||
    fail "attempt 2 on $SURVIVOR: $(grep "$JOB" "$T/$SURVIVOR.log" | tail -3)"
log "$JOB resumed on $SURVIVOR as batch=1 across a coordinator restart: $(jq -r '[.events[] | select(.state == "SCHEDULED")] | last | .reason' "$T/st_a2.json")"

wait_for 90 "$JOB succeeded" job_is SUCCEEDED
st >"$T/st_end.json"
jq -e --argjson s "$STEPS" '[.events[].state] == ["QUEUED", "SCHEDULED", "RUNNING", "RESTARTING",
    "SCHEDULED", "RUNNING", "SUCCEEDED"] and .step == $s and .mesh == "batch=1"' \
    "$T/st_end.json" >/dev/null ||
    fail "end: $(jq -c '{mesh, step, events: [.events[] | [.state, .reason]]}' "$T/st_end.json")"
mt status "$JOB" | grep -q "batch=1" || fail "meshtrain status should show batch=1: $(mt status "$JOB")"
log "$JOB SUCCEEDED on batch=1 after losing $VICTIM"

# without "elastic": the same loss makes the job wait for two devices
worker wc
WC=$LAST_PID
wait_for 20 "two workers again" workers_alive 2
JOB=$(mt submit "$T/rigid.json")
wait_for 60 "$JOB running past step 30" running_at 30
VICTIM=$(st | jq -r '.placement[1].worker_id')
pid=$(mt workers --json | jq -r --arg w "$VICTIM" '.workers[] | select(.worker_id == $w) | .pid')
kill -9 "$pid"
waiting() { st | jq -e '.state == "RESTARTING" and (.reason | test("needs 2 devices, 1 registered"))' >/dev/null; }
wait_for 30 "$JOB waiting for 2 devices" waiting
log "without elastic: $JOB $(st | jq -r '.state + ": " + .reason')"
mt cancel "$JOB" >/dev/null
log "PASS"
