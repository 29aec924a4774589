#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_mesh_invariant_jobs.sh — "reproducibility": "mesh_invariant" through an elastic resize
# (issue #18 item 1, docs/reproducibility.md): the Fashion-MNIST MLP, 200 steps, a digest every 10
# steps and a checkpoint every 40, as an elastic job (batch 2..4) on 2 workers x 2 devices
# (batch=4); one worker is kill -9'd after the first checkpoint, so the job resumes on the
# survivor resized to batch=2. Its digest sequence (the coordinator's, `meshtrain diverge JOB
# FILE`) is that of an unresized `train --local --json --mesh batch=1` run at every digest, the
# state root of each checkpoint the coordinator stored (`meshtrain digest`) is the digest the
# local run printed for that step, and the exports are cmp-identical. (2 workers x 1 device:
# test_job_digests.sh.) The daemon lane: the restart waits on the coordinator noticing a dead
# worker.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

jq '. + {reproducibility: "mesh_invariant", steps: 200, digest_every: 10,
    checkpoint: {every_steps: 40, keep: 10}}
    | del(.epochs) | del(.dataset.test_images) | del(.dataset.test_labels)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
"$BIN/meshtrain" train --local "$T/job.json" --mesh batch=1 --save "$T/ref" --json \
    >"$T/ref.json" 2>"$T/ref.log" || fail "local batch=1 run: $(tail -3 "$T/ref.log")"
"$BIN/meshtrain" export "$T/ref/ckpt-200.mtc" -o "$T/ref.safetensors" >/dev/null ||
    fail "export of the local run"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200 \
    --heartbeat-timeout-ms 3000
st_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s' >/dev/null; }
past() { mt status --json "$1" | jq -e --argjson s "$2" '.state == "RUNNING" and .step >= $s' >/dev/null; }
for w in wa wb; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name "$w" \
        --data-root /usr/share/datasets
done
WB=$LAST_PID
wait_for 20 "two 2-device workers" workers_alive 2

jq '. + {mesh: {batch: 4}, elastic: {min_batch: 2, max_batch: 4}}' "$T/job.json" >"$T/job4.json"
JOB=$(mt submit "$T/job4.json")
wait_for 120 "$JOB past its first checkpoint" past "$JOB" 60
kill -9 "$WB"
mt status --json "$JOB" >"$T/st1.json"
jq -e '.mesh == "batch=4" and ([.placement[].worker_id] | unique | length == 2)' "$T/st1.json" \
    >/dev/null || fail "$JOB should run as batch=4 on both workers: $(jq -c '{mesh, placement}' "$T/st1.json")"
wait_for 180 "$JOB succeeded" st_is "$JOB" SUCCEEDED
mt status --json "$JOB" | jq -e '.mesh == "batch=2" and .restarts == 1' >/dev/null ||
    fail "$JOB should end resized to batch=2: $(mt status --json "$JOB" | jq -c '{mesh, restarts, events}')"

# the digest sequence: every digest the job reported (steps 10 .. 200) is batch=1's
mt diverge "$JOB" "$T/ref.json" >"$T/div.out" || fail "$JOB: $(cat "$T/div.out")"
grep -q "no divergence: the digests of all 20 common steps (10..200) are equal" "$T/div.out" ||
    fail "$JOB: $(cat "$T/div.out")"
# each checkpoint the coordinator stored has the state root batch=1 printed for its step
for s in 40 80 120 160 200; do
    want=$(jq -r --argjson s "$s" 'select(.step == $s and .digest != null) | .digest' "$T/ref.json" | head -1)
    "$BIN/meshtrain" digest "$T/state/checkpoints/$JOB/step-$s.ckpt" >"$T/digest.out" ||
        fail "digest of the job's step $s: $(cat "$T/digest.out")"
    got=$(awk '$1 == "state" { print $2 }' "$T/digest.out")
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "step $s: state root '$got', batch=1 printed '$want'"
done
mt export "$JOB" -o "$T/job.safetensors" >/dev/null 2>"$T/export.err" ||
    fail "export: $(cat "$T/export.err")"
cmp "$T/job.safetensors" "$T/ref.safetensors" || fail "$JOB: the export differs from batch=1"
log "elastic $JOB: batch=4 on 2 workers x 2 devices, wb killed at step $(jq .step "$T/st1.json"), resumed as batch=2: $(cat "$T/div.out"); checkpoints 40..200 and the export equal batch=1's"
log "PASS"
