#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_init_from.sh — the DTensor tutorial's checkpoint chain as distributed jobs (real
# coordinator and two 2-device workers on loopback, generated label<TAB>text data): a data-parallel
# job (batch=4) checkpoints; a model-parallel job (batch=2,model=2) submitted with
# `--init-from DP:STEP` starts from that checkpoint and trains on; a spatial-parallel job
# (batch=1,feature=2,model=2) with "init_from" naming the model-parallel job (latest checkpoint)
# finishes the chain. Checks: each job continues at the checkpoint's step, its history names the
# source, and the model-parallel job's export is byte-identical to the same chain run with
# `meshtrain train --local --resume` (same meshes). Bad references are refused at submit: an
# unknown job (FAILED_PRECONDITION), a step without a checkpoint (NOT_FOUND), a malformed field
# (INVALID_ARGUMENT with its path).
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000
for w in wa wb; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name "$w" \
        --data-root "$T"
done
wait_for 20 "two workers" workers_alive 2
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
gen_text "$T/train.tsv" 512 1
gen_text "$T/test.tsv" 128 2
# spec SRC OUT MESH STEPS: an example on the generated data, a checkpoint every 3 steps
spec() {
    jq --arg t "$T" --argjson m "$3" --argjson s "$4" \
        '. + {steps: $s, mesh: $m, checkpoint: {every_steps: 3, keep: 5}} | del(.epochs) |
        .dataset.train = $t + "/train.tsv" | .dataset.test = $t + "/test.tsv"' \
        "$SRC/examples/$1" >"$T/$2"
}
spec dtensor_mlp_data_parallel.json dp.json '{"batch": 4}' 6
spec dtensor_mlp_model_parallel.json mp.json '{"batch": 2, "model": 2}' 12
spec dtensor_mlp_spatial_parallel.json sp.json '{"batch": 1, "feature": 2, "model": 2}' 15
run() { # run JOB: wait for it, require SUCCEEDED
    wait_for 120 "$1 to finish" finished "$1"
    mt status --json "$1" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$1: $(mt status "$1")"
}
first_loss_step() { mt status --json "$1" >/dev/null &&
    curl -sf "$HTTP_URL/api/v1/jobs/$1/metrics?names=loss" | jq '.series.loss.step | min'; }

DP=$(mt submit "$T/dp.json") || fail "submit dp: $DP"
run "$DP"
MP=$(mt submit "$T/mp.json" --init-from "$DP:6") || fail "submit mp: $MP"
run "$MP"
mt status --json "$MP" | jq -e --arg d "$DP" \
    '[.events[] | select(.reason | contains("starting from the checkpoint of " + $d))] | length == 1' \
    >/dev/null || fail "$MP history does not name $DP: $(mt status --json "$MP" | jq -c .events)"
[ "$(first_loss_step "$MP")" = 7 ] || fail "$MP should continue at step 7, first loss step $(first_loss_step "$MP")"
grep -q "resuming from checkpoint step 6 of $DP" "$T/wa.log" "$T/wb.log" || fail "no resume logged"
log "model parallel $MP started from $DP step 6, trained steps 7..12"

# the same chain in one process: byte-identical weights
"$BIN/meshtrain" train --local "$T/dp.json" --save "$T/ldp" --data-root "$T" >/dev/null 2>&1 ||
    fail "local dp"
"$BIN/meshtrain" train --local "$T/mp.json" --resume "$T/ldp/ckpt-6.mtc" --save "$T/lmp" \
    --data-root "$T" >/dev/null 2>&1 || fail "local mp"
"$BIN/meshtrain" export "$T/lmp/ckpt-12.mtc" --format safetensors -o "$T/local.safetensors" \
    >/dev/null || fail "export local"
mt export "$MP" --format safetensors -o "$T/dist.safetensors" >/dev/null || fail "export $MP"
cmp "$T/dist.safetensors" "$T/local.safetensors" ||
    fail "$MP exported other weights than the local chain"
log "export of $MP byte-identical to train --local --resume on the same meshes"

jq --arg m "$MP" '. + {init_from: {job: $m}}' "$T/sp.json" >"$T/sp_init.json"
SP=$(mt submit "$T/sp_init.json") || fail "submit sp: $SP"
run "$SP"
[ "$(first_loss_step "$SP")" = 13 ] || fail "$SP should continue at step 13"
log "spatial parallel $SP started from the latest checkpoint of $MP (step 12), ended at 15"

# a job started from another job's checkpoint starts a fresh validation record: VB (a learning
# rate that ruins the weights) never beats VA's best validation loss, yet its first evaluation is
# a best of its own (issue 22: it used to inherit VA's record and never upload a best)
jq '. + {validation: {split: 0.25, every_steps: 3, best: {monitor: "val_loss"}}}' "$T/dp.json" \
    >"$T/va.json"
jq '. + {steps: 9, optimizer: "sgd", learning_rate: 50}' "$T/va.json" >"$T/vb.json"
best_steps() { curl -sf "$HTTP_URL/api/v1/jobs/$1/metrics?names=best_step" |
    jq -c '[.series.best_step.value // [] | .[] | floor]'; }
VA=$(mt submit "$T/va.json") || fail "submit va: $VA"
run "$VA"
VB=$(mt submit "$T/vb.json" --init-from "$VA:6") || fail "submit vb: $VB"
run "$VB"
[ "$(best_steps "$VB")" = "[9]" ] ||
    fail "$VB: best steps $(best_steps "$VB") (of $VA: $(best_steps "$VA")), expected its own [9]"
log "$VB (from $VA step 6) kept a best of its own at step 9: $VA's best steps $(best_steps "$VA")"

# bad references are refused at submit, before anything is queued
expect_exit 4 mt submit "$T/mp.json" --init-from job-999999
grep -q "FAILED_PRECONDITION.*job-999999 has no complete checkpoint" "$T/last.out" ||
    fail "unknown job: $(cat "$T/last.out")"
expect_exit 4 mt submit "$T/mp.json" --init-from "$DP:5"
grep -q "NOT_FOUND.*$DP has no checkpoint at step 5" "$T/last.out" || fail "step 5: $(cat "$T/last.out")"
jq '. + {init_from: {job: 7}}' "$T/mp.json" >"$T/bad.json"
expect_exit 4 mt submit "$T/bad.json"
grep -q "init_from.job: must be a job id" "$T/last.out" || fail "bad field: $(cat "$T/last.out")"
expect_exit 2 mt submit "$T/mp.json" --init-from "$DP:x"
[ "$(mt jobs --json | jq '.jobs | length')" = 5 ] || fail "a refused submit left a job"
log "PASS"
