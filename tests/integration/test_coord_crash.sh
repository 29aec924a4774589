#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coord_crash.sh — the coordinator is kill -9'd at several points of a real training job
# (two real workers x 1 device, mesh batch=2, checkpoints every CK steps) and restarted on the
# same state dir and ports each time. Kill points, found by polling the job's state and step:
#   1. right after submit is acknowledged        4. right after a checkpoint upload completed
#   2. while the job is being assigned            5. after a random delay
#   3. mid-training between two checkpoints       6. during the final steps / completion
# Before each kill every job, state-history event, metric point (HTTP metrics API) and complete
# checkpoint the coordinator acknowledged is captured; after each restart all of it must still be
# there (events as a prefix, metric values equal, checkpoints complete with the same checksum).
# The job must SUCCEED, and its exported weights must be byte-identical to those of the same job
# run without interruption (every restart re-attaches or resumes from a checkpoint boundary).
source "$(dirname "$0")/lib.sh"

S=$T/state
# the same under sanitizers: the time of a step is OpenBLAS's (not instrumented), and the
# kill points need the steps to take milliseconds and the job to outlast the first restarts (at
# 300 steps a 2-worker job of this MLP took 2 s on a 2-core EPYC and was done before kill 4)
STEPS=1200
CK=100
UNITS=512
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 5000)
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"
HTTP_ADDR=${HTTP_URL#http://}
HTTP_ADDR=${HTTP_ADDR%/}
log "coordinator at $COORD_URL, http $HTTP_URL"

start_worker1 wa
start_worker1 wb
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2

# wide enough that a step takes milliseconds, so the kill points can be hit by polling
jq --argjson s "$STEPS" --argjson ck "$CK" --argjson u "$UNITS" '. + {mesh: {batch: 2},
    steps: $s, batch_size: 256, checkpoint: {every_steps: $ck, keep: 1000},
    restart: {max_restarts: 10}} | .model.layers[1].units = $u | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"

st() { mt status --json "$JOB"; }
job_is() { st | jq -e --arg s "$1" '.state == $s' >/dev/null; }
step_ge() { st | jq -e --argjson s "$1" '.step >= $s' >/dev/null; }
n_ckpt() { mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete)] | length'; }

# snapshot DIR: everything the coordinator acknowledged so far
snapshot() {
    mkdir -p "$1"
    st >"$1/status.json"
    mt jobs --json >"$1/jobs.json"
    mt checkpoints --json "$JOB" >"$1/ckpt.json"
    curl -sf "$HTTP_URL/api/v1/jobs/$JOB/metrics" >"$1/metrics.json"
}
# verify BEFORE AFTER: nothing of BEFORE is missing from AFTER
verify() {
    local b=$1 a=$2
    jq -e --slurpfile a "$a/jobs.json" '[.jobs[].job_id] - [$a[0].jobs[].job_id] == []' \
        "$b/jobs.json" >/dev/null || fail "$b: a job was lost"
    jq -e --slurpfile a "$a/status.json" '.events as $e | ($a[0].events[0:($e | length)]) as $p |
        [$e[] | {time_ms, state, reason}] == [$p[] | {time_ms, state, reason}]' \
        "$b/status.json" >/dev/null ||
        fail "$b: state history lost: $(jq -c '[.events[].state]' "$b/status.json") vs $(jq -c '[.events[].state]' "$a/status.json")"
    jq -e --slurpfile a "$a/ckpt.json" '[.checkpoints[] | select(.complete) | {step, checksum}] -
        [$a[0].checkpoints[] | select(.complete) | {step, checksum}] == []' "$b/ckpt.json" \
        >/dev/null || fail "$b: a complete checkpoint was lost: $(jq -c '[.checkpoints[].step]' "$a/ckpt.json")"
    # every acknowledged point is there with the same value, except examples_per_sec
    # (re-measured) and, once the job resumed from checkpoint $RESUME (kill point 4), the steps
    # after it: they are redone, and loss and accuracy are running means over the epoch that
    # restart at the resume point
    local redo=1e18
    [ "$(jq .restarts "$a/status.json")" = 0 ] || redo=$RESUME
    jq -e --slurpfile a "$a/metrics.json" --argjson redo "$redo" '.series | to_entries |
        all(.key as $n | .value as $v | ($a[0].series[$n] // {step: [], value: []}) as $w |
        ([$w.step, $w.value] | transpose | map({key: (.[0] | tostring), value: .[1]}) | from_entries) as $m |
        [$v.step, $v.value] | transpose | all(($m[.[0] | tostring]) as $x |
            $x != null and ($n == "examples_per_sec" or .[0] > $redo or $x == .[1])))' "$b/metrics.json" \
        >/dev/null || fail "$b: acknowledged metric points lost or changed"
}

K=0
RESUME=0 # checkpoint step the job resumed from after the worker loss (kill point 4)
# crash WHAT [now]: snapshot, kill -9, restart on the same ports, verify the snapshot survived.
# With "now" the kill comes first and the snapshot is what was captured before: $T/pre
# (status/jobs written by the caller) plus the previous restart's checkpoints and metrics.
crash() {
    K=$((K + 1))
    if [ "${2:-}" = now ]; then
        kill -9 "$COORD_PID" 2>/dev/null || true
        mkdir -p "$T/k$K.before"
        cp "$T/pre/"*.json "$T/k$K.before/"
    else
        snapshot "$T/k$K.before"
        kill -9 "$COORD_PID" 2>/dev/null || true
    fi
    wait "$COORD_PID" 2>/dev/null || true
    log "kill $K ($1): state $(jq -r .state "$T/k$K.before/status.json") step $(jq -r .step "$T/k$K.before/status.json"), $(jq '.count' "$T/k$K.before/metrics.json") points, $(jq '[.checkpoints[] | select(.complete)] | length' "$T/k$K.before/ckpt.json") checkpoints acked"
    sleep 0.$((RANDOM % 5))
    start_coordinator "coord_k$K" "$S" --listen "$COORD_URL" --http "$HTTP_ADDR" "${HB[@]}"
    snapshot "$T/k$K.after"
    verify "$T/k$K.before" "$T/k$K.after"
}

# 1. right after submit is acknowledged (the job and its QUEUED event are acknowledged)
mkdir -p "$T/pre"
JOB=$(mt submit "$T/job.json")
kill -9 "$COORD_PID"
jq -n --arg j "$JOB" '{jobs: [{job_id: $j}]}' >"$T/pre/jobs.json"
jq -n '{state: "QUEUED", step: 0, events: []}' >"$T/pre/status.json"
jq -n '{checkpoints: []}' >"$T/pre/ckpt.json"
jq -n '{count: 0, series: {}}' >"$T/pre/metrics.json"
crash "right after submit" now
# 2. while the job is being assigned: SCHEDULED (placed, not every task reported running)
cp "$T/k1.after/"*.json "$T/pre/"
placed() { st >"$T/pre/status.json" && jq -e '.state != "QUEUED"' "$T/pre/status.json" >/dev/null; }
wait_for 30 "$JOB placed" placed
crash "assigning: $(jq -r .state "$T/pre/status.json")" now
# 3. mid-training between two checkpoints
between() { st | jq -e --argjson ck "$CK" '.state == "RUNNING" and .step > $ck and .step % $ck != 0' >/dev/null; }
wait_for 60 "$JOB between checkpoints" between
crash "between checkpoints"
# 4. a worker dies while the coordinator is down and a new one takes its place: after the
# restart the job is RESTARTING (wb never comes back) and resumes from its latest checkpoint
# on wa + wc — a restart on a checkpoint boundary, so the final weights must not change
mid_run() { st | jq -e --argjson s "$STEPS" '.state == "RUNNING" and .step < $s - 60' >/dev/null; }
mid_run || fail "too late for the worker-loss kill point: $(st | jq -c '{state, step}')"
kill -9 "$WB"
start_worker1 wc
crash "wb killed while the coordinator is down, wc started"
resumed() { st | jq -e '.restarts == 1 and .state == "RUNNING"' >/dev/null; }
wait_for 60 "$JOB resumed on wa and wc" resumed
grep -q "$JOB attempt 2: starting with 1 of 2 devices here (resume step [1-9]" "$T/wa.log" ||
    fail "attempt 2 should resume from a checkpoint: $(grep "$JOB attempt 2" "$T/wa.log")"
loaded() { grep -q "$JOB: resuming from checkpoint step" "$T/wa.log" &&
    grep -q "$JOB: resuming from checkpoint step" "$T/wc.log"; }
wait_for 30 "wa and wc loaded the checkpoint" loaded
RESUME=$(sed -n "s/.*$JOB: resuming from checkpoint step \([0-9]*\) of .*$/\1/p" "$T/wa.log" | tail -1)
[ -n "$RESUME" ] || fail "no resume step in wa.log"
# 5. during a checkpoint upload: the coordinator is frozen (SIGSTOP) before the next checkpoint
# step, the worker holding rank 0 writes the checkpoint and starts uploading it, then kill -9
snapshot "$T/pre"
next=$(( ($(jq .step "$T/pre/status.json") / CK + 1) * CK ))
kill -STOP "$COORD_PID"
wait_for 60 "the checkpoint of step $next written" grep -qE "ckpt-$next\.mtc \(step $next[),]" "$T/wa.log" "$T/wb.log"
sleep 0.2
crash "during the upload of checkpoint $next" now
# 6. right after a checkpoint upload was acknowledged
n0=$(n_ckpt)
more_ckpt() { [ "$(n_ckpt)" -gt "$n0" ] || job_is SUCCEEDED; }
wait_for 60 "a new checkpoint of $JOB" more_ckpt
crash "after a checkpoint upload"
# 7. after a random delay
sleep "0.$((RANDOM % 10))"
crash "random delay"
# 8. during the final steps and completion
final_steps() { st | jq -e --argjson s "$STEPS" '.step >= $s - 3 or .state == "SUCCEEDED"' >/dev/null; }
wait_for 60 "$JOB near its end" final_steps
crash "final steps"

wait_for 60 "$JOB succeeded" job_is SUCCEEDED
snapshot "$T/end"
verify "$T/k$K.after" "$T/end"
jq -e --argjson s "$STEPS" '.step == $s' "$T/end/status.json" >/dev/null || fail "final step"
jq -e --argjson s "$STEPS" '.series.loss.step == [range(1; $s + 1)]' "$T/end/metrics.json" \
    >/dev/null || fail "loss history has gaps: $(jq -c '.series.loss.step | length' "$T/end/metrics.json") points"
jq -e --argjson s "$STEPS" --argjson ck "$CK" '[.checkpoints[] | select(.complete) | .step] ==
    [range($ck; $s + 1; $ck)]' "$T/end/ckpt.json" >/dev/null ||
    fail "checkpoints: $(jq -c '[.checkpoints[] | [.step, .complete]]' "$T/end/ckpt.json")"
jq -e '[.events[].state] == ["QUEUED", "SCHEDULED", "RUNNING", "RESTARTING", "SCHEDULED",
    "RUNNING", "SUCCEEDED"] and .restarts == 1' "$T/end/status.json" >/dev/null ||
    fail "the job should have been re-attached after each kill but the worker loss: $(jq -c '[.events[] | [.state, .reason]]' "$T/end/status.json")"
log "$JOB SUCCEEDED after $K kills: $(jq -c '[.events[].state]' "$T/end/status.json"), restarts $(jq .restarts "$T/end/status.json")"
mt export "$JOB" --format safetensors -o "$T/crashed.safetensors" >/dev/null

# the same job without interruption: the same bytes
JOB_CRASHED=$JOB
JOB=$(mt submit "$T/job.json")
wait_for 90 "$JOB (uninterrupted) succeeded" job_is SUCCEEDED
mt export "$JOB" --format safetensors -o "$T/clean.safetensors" >/dev/null
cmp "$T/crashed.safetensors" "$T/clean.safetensors" ||
    fail "$JOB_CRASHED ($K coordinator crashes) and $JOB (uninterrupted) exported different weights"
log "exports byte-identical ($(stat -c %s "$T/clean.safetensors") bytes)"
log "PASS"
