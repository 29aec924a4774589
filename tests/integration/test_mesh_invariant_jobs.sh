#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_mesh_invariant_jobs.sh — "reproducibility": "mesh_invariant" as coordinator jobs (issue #18
# item 1, docs/reproducibility.md): the Fashion-MNIST MLP, 200 steps with a checkpoint every 40,
# * on 2 workers x 1 device (mesh batch=2),
# * elastic (batch 2..4) on 2 workers x 2 devices (batch=4), one worker kill -9'd after the first
#   checkpoint, so the job resumes on the survivor resized to batch=2,
# keeps the digest sequence of an unresized local batch=1 run: the state root (weights, Adam
# slots, step) of each checkpoint the job stored (40 .. 200, `meshtrain digest` of the
# coordinator's file) is the digest `train --local --json --mesh batch=1` printed for that step
# (jobs carry no per-step digests yet, so the checkpoints are the sequence), and the export of
# the last one is cmp-identical.
# The daemon lane: the elastic restart waits on the coordinator noticing a dead worker.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1
STEPS="40 80 120 160 200"

jq '. + {reproducibility: "mesh_invariant", steps: 200, checkpoint: {every_steps: 40, keep: 10}}
    | del(.epochs) | del(.dataset.test_images) | del(.dataset.test_labels)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
"$BIN/meshtrain" train --local "$T/job.json" --mesh batch=1 --save "$T/ref" --json \
    >"$T/ref.json" 2>"$T/ref.log" || fail "local batch=1 run: $(tail -3 "$T/ref.log")"
"$BIN/meshtrain" export "$T/ref/ckpt-200.mtc" -o "$T/ref.safetensors" >/dev/null ||
    fail "export of the local run"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200 \
    --heartbeat-timeout-ms 3000
alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = "$1" ]; }
st_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s' >/dev/null; }
past() { mt status --json "$1" | jq -e --argjson s "$2" '.state == "RUNNING" and .step >= $s' >/dev/null; }
worker() { # worker NAME DEVICES
    bg "$1" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices "$2" --name "$1" \
        --data-root /usr/share/datasets
}
# same_as_local JOB WHAT: each checkpoint's state root is the local run's digest of that step,
# the last one's export the local export
same_as_local() {
    local s want got
    for s in $STEPS; do
        want=$(jq -r --argjson s "$s" 'select(.step == $s and .digest != null) | .digest' "$T/ref.json")
        [ -n "$want" ] || fail "the local run printed no digest for step $s"
        "$BIN/meshtrain" digest "$T/state/checkpoints/$1/step-$s.ckpt" >"$T/digest.out" ||
            fail "$2: digest of the job's step $s: $(cat "$T/digest.out")"
        got=$(awk '$1 == "state" { print $2 }' "$T/digest.out")
        [ "$got" = "$want" ] || fail "$2: step $s: state root $got, batch=1 printed $want"
    done
    mt export "$1" -o "$T/job.safetensors" >/dev/null 2>"$T/export.err" ||
        fail "$2: export: $(cat "$T/export.err")"
    cmp "$T/job.safetensors" "$T/ref.safetensors" || fail "$2: the export differs from batch=1"
}

worker wa 1
WA=$LAST_PID
worker wb 1
WB=$LAST_PID
wait_for 20 "two 1-device workers" alive 2
jq '. + {mesh: {batch: 2}}' "$T/job.json" >"$T/job2.json"
JOB=$(mt submit "$T/job2.json")
wait_for 120 "$JOB succeeded" st_is "$JOB" SUCCEEDED
mt status --json "$JOB" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB did not span both workers: $(mt status --json "$JOB" | jq -c .placement)"
same_as_local "$JOB" "2 workers x 1 device"
log "$JOB on 2 workers x 1 device (batch=2): the state digests of batch=1 at steps ${STEPS// /, }"

kill -9 "$WA" "$WB"
worker wc 2
worker wd 2
WD=$LAST_PID
wait_for 30 "two 2-device workers (the 1-device ones gone)" alive 2
jq '. + {mesh: {batch: 4}, elastic: {min_batch: 2, max_batch: 4}}' "$T/job.json" >"$T/job4.json"
JOB=$(mt submit "$T/job4.json")
wait_for 120 "$JOB past its first checkpoint" past "$JOB" 60
kill -9 "$WD"
mt status --json "$JOB" >"$T/st1.json"
jq -e '.mesh == "batch=4" and ([.placement[].worker_id] | unique | length == 2)' "$T/st1.json" \
    >/dev/null || fail "$JOB should run as batch=4 on both workers: $(jq -c '{mesh, placement}' "$T/st1.json")"
wait_for 180 "$JOB succeeded" st_is "$JOB" SUCCEEDED
mt status --json "$JOB" | jq -e '.mesh == "batch=2" and .restarts == 1' >/dev/null ||
    fail "$JOB should end resized to batch=2: $(mt status --json "$JOB" | jq -c '{mesh, restarts, events}')"
same_as_local "$JOB" "elastic 4 -> 2"
log "elastic $JOB: batch=4 on 2 workers x 2 devices, wd killed at step $(jq .step "$T/st1.json"), resumed as batch=2: the state digests of batch=1 at steps ${STEPS// /, }"
log "PASS"
