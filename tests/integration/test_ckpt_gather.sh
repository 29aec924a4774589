#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_ckpt_gather.sh — checkpoints of a job whose shards are spread over worker processes (real
# coordinator and workers on loopback). The DTensor tutorial's model-parallel MLP
# (examples/dtensor_mlp_model_parallel.json, a few steps, generated label<TAB>text data) on mesh
# batch=1,model=2 over two workers x 1 device, so the "model" axis crosses the processes and the
# worker holding rank 0 has half of each kernel (and, first, model=2,batch=2 on 2 workers x 2):
#  1. the job checkpoints (periodic and final, gathered over the data plane) and
#     `meshtrain export JOB` is byte-identical to the export of the same job trained with
#     `meshtrain train --local` on the same mesh;
#  2. the chain: that checkpoint resumes as a data-parallel job on another mesh (batch=2) and
#     trains on exactly as the local model-parallel checkpoint does;
#  3. SIGTERM to the worker NOT holding rank 0 of a long run: both processes agree to stop, the
#     stop checkpoint is gathered and uploaded, and the job resumes from it on a new worker.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

STEPS=6
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000)
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"
state_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s'; }
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
worker() { # worker NAME [DEVICES]
    bg "$1" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices "${2:-1}" --name "$1" \
        --data-root "$T"
}
gen_text "$T/train.tsv" 512 1
gen_text "$T/test.tsv" 128 2
# spec SRC OUT MESH STEPS EVERY: an example on the generated data
spec() {
    jq --arg t "$T" --argjson m "$3" --argjson s "$4" --argjson e "$5" \
        '. + {steps: $s, mesh: $m, checkpoint: {every_steps: $e, keep: 3}} | del(.epochs) |
        .dataset.train = $t + "/train.tsv" | .dataset.test = $t + "/test.tsv"' \
        "$SRC/examples/$1" >"$T/$2"
}
spec dtensor_mlp_model_parallel.json mp.json '{"batch": 1, "model": 2}' $STEPS 3
spec dtensor_mlp_data_parallel.json dp.json '{"batch": 2}' 10 5

# same_as_local JOB SPEC NAME: `meshtrain export JOB` equals the export of the last checkpoint of
# SPEC trained with `meshtrain train --local` (same mesh, devices as threads)
same_as_local() {
    mt export "$1" --format safetensors -o "$T/$3_dist.safetensors" >/dev/null || fail "export $1"
    "$BIN/meshtrain" train --local "$T/$2" --save "$T/$3" --data-root "$T" --json \
        >"$T/$3.out" 2>&1 || fail "train --local $2: $(tail -3 "$T/$3.out")"
    "$BIN/meshtrain" export "$T/$3/ckpt-$STEPS.mtc" --format safetensors \
        -o "$T/$3_local.safetensors" >/dev/null || fail "export of the local checkpoint of $2"
    cmp "$T/$3_dist.safetensors" "$T/$3_local.safetensors" ||
        fail "$1 exported other weights than train --local $2"
}

# ---- 0. two workers x 2 devices, mesh model=2,batch=2: positions 0,1 (model 0) on one worker,
# 2,3 (model 1) on the other, so each worker gathers with two local devices
worker wd 2
worker we 2
wait_for 20 "two 2-device workers" workers_alive 2
spec dtensor_mlp_model_parallel.json mp4.json '{"model": 2, "batch": 2}' $STEPS 3
JOB=$(mt submit "$T/mp4.json") || fail "submit: $JOB"
wait_for 120 "$JOB to finish" finished "$JOB"
state_is "$JOB" SUCCEEDED >/dev/null || fail "$JOB: $(mt status "$JOB")"
mt status --json "$JOB" | jq -e '[.placement[] | select(.rank == 0 or .rank == 2) | .worker_id] |
    unique | length == 2' >/dev/null ||
    fail "$JOB: ranks 0 and 2 should be on two workers: $(mt status --json "$JOB" | jq -c .placement)"
same_as_local "$JOB" mp4.json mp4
log "model=2,batch=2 on 2 workers x 2 devices: export byte-identical to train --local"
kill "$(mt workers --json | jq -r '.workers[] | select(.name == "wd") | .pid')" \
    "$(mt workers --json | jq -r '.workers[] | select(.name == "we") | .pid')"
wait_for 20 "wd and we gone" workers_alive 0

worker wa
worker wb
wait_for 20 "two workers" workers_alive 2

# ---- 1. distributed model parallel: checkpoints gathered, export equals the local run's
JOB=$(mt submit "$T/mp.json") || fail "submit: $JOB"
wait_for 120 "$JOB to finish" finished "$JOB"
state_is "$JOB" SUCCEEDED >/dev/null || fail "$JOB: $(mt status "$JOB")"
mt status --json "$JOB" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB should span both workers: $(mt status --json "$JOB" | jq -c .placement)"
steps=$(mt checkpoints --json "$JOB" | jq -c '[.checkpoints[] | select(.complete) | .step] | sort')
[ "$steps" = "[3,6]" ] || fail "checkpoints of $JOB: $steps, expected [3,6]"
grep -q "gathered from the workers" "$T/wa.log" "$T/wb.log" || fail "no gathered checkpoint logged"
same_as_local "$JOB" mp.json local
log "model parallel over 2 workers: checkpoints $steps, export byte-identical to train --local" \
    "($(stat -c %s "$T/local_dist.safetensors") bytes)"

# ---- 2. the chain: the distributed checkpoint resumes as data parallel on batch=2
loc=$(mt checkpoints --json "$JOB" | jq -r --argjson s $STEPS '.checkpoints[] | select(.step == $s) |
    .location')
[ -f "$loc" ] || fail "checkpoint file of $JOB step $STEPS: '$loc'"
cp "$loc" "$T/dist.mtc"
for src in dist local/ckpt-$STEPS; do
    "$BIN/meshtrain" train --local "$T/dp.json" --resume "$T/$src.mtc" --data-root "$T" --json \
        >"$T/chain_$(basename "$src").out" 2>&1 || fail "resume $src as data parallel"
done
tail -n 1 "$T/chain_dist.out" | jq -e '.steps == 10' >/dev/null ||
    fail "the resumed run did not train on to step 10: $(tail -n 1 "$T/chain_dist.out")"
# it continues where the model-parallel run stopped: an uninterrupted data-parallel run of 10
# steps ends at the same test loss up to float rounding (the meshes sum in other orders)
"$BIN/meshtrain" train --local "$T/dp.json" --data-root "$T" --json >"$T/dp_ref.out" 2>&1 ||
    fail "uninterrupted data parallel run"
tail -n 1 "$T/dp_ref.out" | jq -e --slurpfile c <(tail -n 1 "$T/chain_dist.out") \
    '.test_loss as $r | ($r - $c[0].test_loss | fabs) <= 1e-4 * ([1, ($r | fabs)] | max)' \
    >/dev/null || fail "chain $(tail -n 1 "$T/chain_dist.out"), uninterrupted $(tail -n 1 "$T/dp_ref.out")"
diff <(grep '^{' "$T/chain_dist.out" | jq -c 'del(.examples_per_sec, .seconds, .epoch_seconds)') \
    <(grep '^{' "$T/chain_ckpt-$STEPS.out" | jq -c 'del(.examples_per_sec, .seconds, .epoch_seconds)') ||
    fail "resuming the distributed checkpoint differs from resuming the local one"
log "chain: step-$STEPS checkpoint of the 2-worker model-parallel job resumed on batch=2 data" \
    "parallel to step 10: $(tail -n 1 "$T/chain_dist.out" | jq -c '{test_loss, test_accuracy}')"

# ---- 3. SIGTERM to the worker without rank 0: the stop checkpoint is gathered and uploaded
spec dtensor_mlp_model_parallel.json term.json '{"batch": 1, "model": 2}' 100000 100000
TJ=$(mt submit "$T/term.json") || fail "submit term: $TJ"
busy() { mt status --json "$TJ" | jq -e '.state == "RUNNING" and .step >= 10'; }
wait_for 60 "$TJ running" busy
R1=$(mt status --json "$TJ" | jq -r '.placement[] | select(.rank == 1) | .worker_id')
pid=$(mt workers --json | jq -r --arg w "$R1" '.workers[] | select(.worker_id == $w) | .pid')
kill -TERM "$pid"
has_ckpt() { [ "$(mt checkpoints --json "$TJ" | jq '[.checkpoints[] | select(.complete)] | length')" -ge 1 ]; }
wait_for 30 "a stop checkpoint of $TJ" has_ckpt
STOP=$(mt checkpoints --json "$TJ" | jq '.checkpoints[0].step')
[ "$STOP" -ge 10 ] || fail "stop checkpoint at step $STOP"
grep -q "stop checkpoint at step $STOP (a process is stopping)" "$T/wa.log" "$T/wb.log" ||
    fail "no agreed stop checkpoint at step $STOP in the worker logs"
wait_for 30 "$R1 exited" bash -c "! kill -0 $pid 2>/dev/null"
worker wc
resumed() { mt status --json "$TJ" | jq -e '.state == "RUNNING" and .restarts == 1'; }
wait_for 60 "$TJ resumed" resumed
wait_for 30 "resume from step $STOP" \
    bash -c "grep -q 'resuming from checkpoint step $STOP' '$T'/w[abc].log"
mt cancel "$TJ" >/dev/null
log "SIGTERM to the rank-1 worker: stop checkpoint at step $STOP gathered; resumed on a new worker"
log "PASS"
