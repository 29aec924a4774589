#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_ckpt_fallback.sh — one corrupt newest checkpoint costs a few steps, not the job (issue 19,
# fault 3). A real job on a real worker writes checkpoints; the worker is kill -9'd and the
# newest checkpoint file is corrupted (one byte flipped, same size) while the job waits in
# RESTARTING; a new worker comes: the coordinator reads the files back before it places the job,
# marks the corrupt one incomplete and resumes from the one before; the SCHEDULED event says
# which checkpoint was skipped and why. Then the job is cancelled, its newest checkpoint
# corrupted again, and `meshtrain export JOB` exports the newest that verifies, saying which it
# skipped. Before the fix the restart failed with DATA_LOSS and so did the export.
source "$(dirname "$0")/lib.sh"

S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200 \
    --heartbeat-timeout-ms 1500
worker() { bg "$1" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$1" \
    --data-root /usr/share/datasets --rpc-timeout-ms 1000; }
jq '. + {mesh: {batch: 1}, steps: 100000, batch_size: 64, checkpoint: {every_steps: 20, keep: 10},
    restart: {max_restarts: 5}} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"

worker w1
W1=$LAST_PID
JOB=$(mt submit "$T/job.json")
st() { mt status --json "$JOB"; }
complete() { mt checkpoints --json "$JOB" | jq -r '[.checkpoints[] | select(.complete) | .step] | sort | .[]'; }
n_complete() { [ "$(complete | wc -l)" -ge "$1" ]; }
wait_for 120 "3 complete checkpoints" n_complete 3
kill -9 "$W1"
job_is() { st | jq -e --arg s "$1" '.state == $s' >/dev/null; }
wait_for 30 "RESTARTING after the worker's loss" job_is RESTARTING
mapfile -t STEPS < <(complete)
NEWEST=${STEPS[-1]}
OLDER=${STEPS[-2]}
F=$S/checkpoints/$JOB/step-$NEWEST.ckpt
[ -f "$F" ] || fail "no file $F: $(ls "$S/checkpoints/$JOB")"
corrupt() { # flip one byte in the middle of FILE (same size)
    local size off b
    size=$(stat -c %s "$1")
    off=$((size / 2))
    b=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
    printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}
corrupt "$F"
log "job $JOB: checkpoints ${STEPS[*]}; step $NEWEST corrupted while RESTARTING"

# ---- the restart resumes from the older checkpoint and says why
worker w2
running() { st | jq -e '.state == "RUNNING"' >/dev/null; }
wait_for 60 "RUNNING again" running
st >"$T/status.json"
jq -e --arg a "resuming from a checkpoint at step $OLDER)" \
    --arg b "; checkpoint step $NEWEST skipped: crc32:" \
    '[.events[] | select(.state == "SCHEDULED") | .reason] | last |
     startswith("placed on 1 worker (attempt 2") and contains($a) and contains($b)' \
    "$T/status.json" >/dev/null ||
    fail "SCHEDULED event: $(jq -c '[.events[] | select(.state == "SCHEDULED") | .reason]' "$T/status.json")"
! grep -q "$S" <(jq -r '.events[].reason' "$T/status.json") || fail "an event shows the coordinator's path"
mt checkpoints --json "$JOB" | jq -e --argjson s "$NEWEST" '.checkpoints[] | select(.step == $s) | .complete == false' \
    >/dev/null || fail "the corrupt checkpoint is still listed complete"
grep -q "checkpoint step $NEWEST skipped" "$T/coord.log" || fail "the coordinator did not log the skip"
past() { st | jq -e --argjson s "$((OLDER + 25))" '.step >= $s' >/dev/null; }
wait_for 120 "training past step $((OLDER + 25))" past
log "restart resumed from step $OLDER, skipping $NEWEST"

# ---- export falls back too
mt cancel "$JOB" >/dev/null
mapfile -t STEPS < <(complete)
NEWEST=${STEPS[-1]}
OLDER=${STEPS[-2]}
corrupt "$S/checkpoints/$JOB/step-$NEWEST.ckpt"
mt export "$JOB" --format safetensors -o "$T/model.safetensors" >"$T/export.out" 2>"$T/export.err" ||
    fail "export: $(cat "$T/export.err")"
grep -q "checkpoint step $NEWEST skipped: crc32:.*; exporting checkpoint step $OLDER" "$T/export.err" ||
    fail "export note: $(cat "$T/export.err")"
grep -q "of step $OLDER" "$T/export.out" || fail "export output: $(cat "$T/export.out")"
log "export used step $OLDER, skipping the corrupt $NEWEST"
log "PASS"
