#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_loss.sh — losses, metrics and validation end to end (core/loss, docs/job-spec.md):
#   * a per-pixel classifier (a 1x1 conv2d's (6, 6, 3) logits, NumPy y of shape (N, 6, 6)) trains
#     10 steps with `train --local` on batch=2 x model=3 (logits sharded) to the export of one
#     device within 1e-5;
#   * a regression CSV with "loss": "mse", "metrics": ["mae"] and "validation" (split, early
#     stopping with a min_delta no evaluation can beat, best checkpoint): the run stops after its
#     second evaluation, --json names val_loss / val_mae / test_mae, `export DIR --best` exports
#     the best step;
#   * the same as a job on a real coordinator and worker: it SUCCEEDS after the early stop, its
#     metric history has val_loss / test_mae / best_step, `export JOB --best` gives the bytes of
#     the local best; a job with checkpoint.keep 1 whose best is its first evaluation (step 2 of
#     24, a checkpoint every 2 steps) still exports that best one with `export JOB --best`, also
#     when the same job (48 steps) loses its coordinator and its worker (kill -9) after
#     checkpoint 4 and resumes from its latest checkpoint on a new worker;
#   * refusals naming "loss" (mse on class labels; a per-pixel model on one label per example);
#   * the examples diabetes_regression.json and spam_binary.json train a few steps when their data
#     is in examples/data (deploy/fetch-tabular.sh, deploy/fetch-spam.sh), else say they skip.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1
CMP="$SRC/tests/integration/compare_safetensors.py"

# ---------------------------------------------------------------- per-pixel labels on a mesh
python3 - "$T" <<'PY'
import math, struct, sys
d = sys.argv[1]
def npy(path, descr, shape, fmt, vals):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pad = (64 - (10 + len(head) + 1) % 64) % 64
    head = head + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
        f.write(struct.pack("<%d%s" % (len(vals), fmt), *vals))
n = 32
x = [math.sin(0.37 * i) + 0.2 * (i % 3) for i in range(n * 6 * 6 * 2)]
y = []
for e in range(n):
    for p in range(36):
        v = x[(e * 36 + p) * 2]
        y.append(0 if v < -0.3 else 1 if v < 0.5 else 2)
npy(d + "/px.npy", "<f4", "(32, 6, 6, 2)", "f", x)
npy(d + "/py.npy", "<i4", "(32, 6, 6)", "i", y)
PY
pixel_spec() { # pixel_spec FILE EXTRA
    cat >"$T/$1" <<JSON
{"seed": 3, "batch_size": 8, "steps": 10, "optimizer": "sgd", "learning_rate": 0.1,
 "dataset": {"format": "npy", "train": {"x": "$T/px.npy", "y": "$T/py.npy"}},
 "model": {"input_shape": [6, 6, 2], "layers": [
   {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": "same", "activation": "relu"},
   {"type": "conv2d", "filters": 3, "kernel_size": 1}]}$2}
JSON
}
pixel_spec px1.json ""
pixel_spec px6.json ', "mesh": {"batch": 2, "model": 3},
 "layouts": {"conv2d_2\\.kernel": ["unsharded", "unsharded", "unsharded", "model"]}'
for k in 1 6; do
    "$BIN/meshtrain" train --local "$T/px$k.json" --save "$T/px$k" --data-root "$T" --json \
        >"$T/px$k.out" 2>"$T/px$k.err" || fail "per-pixel px$k: $(cat "$T/px$k.err")"
    "$BIN/meshtrain" export "$T/px$k/ckpt-10.mtc" -o "$T/px$k.safetensors" >/dev/null ||
        fail "export px$k"
done
python3 "$CMP" "$T/px6.safetensors" "$T/px1.safetensors" 1e-5 >"$T/cmp.out" ||
    fail "per-pixel mesh vs one device: $(cat "$T/cmp.out")"
tail -1 "$T/px1.out" | jq -e '.steps == 10' >/dev/null || fail "px1: $(tail -1 "$T/px1.out")"
log "per-pixel classifier: batch=2 x model=3 equals one device (1e-5) after 10 steps"

# ---------------------------------------------------------------- regression, validation, best
awk 'BEGIN { srand(4); print "a,b,c,y";
    for (i = 0; i < 400; i++) { a = rand(); b = rand(); c = rand();
        printf "%.5f,%.5f,%.5f,%.5f\n", a, b, c, 3 * a - 2 * b + 0.5 * c + 0.05 * (rand() - 0.5) } }' \
    >"$T/reg_train.csv"
awk 'BEGIN { srand(5); print "a,b,c,y";
    for (i = 0; i < 100; i++) { a = rand(); b = rand(); c = rand();
        printf "%.5f,%.5f,%.5f,%.5f\n", a, b, c, 3 * a - 2 * b + 0.5 * c } }' >"$T/reg_test.csv"
# 360 training examples after the split (40 held out): 12 steps per epoch at batch 30; a
# min_delta no evaluation beats: the second evaluation does not improve, patience 0 stops there
cat >"$T/reg.json" <<JSON
{"seed": 9, "batch_size": 30, "epochs": 20, "optimizer": "adam", "learning_rate": 0.05,
 "loss": "mse", "metrics": ["mae"],
 "dataset": {"format": "csv", "train": "$T/reg_train.csv", "test": "$T/reg_test.csv",
             "label_type": "float", "label_column": "y"},
 "validation": {"split": 0.1, "early_stopping": {"monitor": "val_loss", "min_delta": 1e9},
                "best": {"monitor": "val_mae"}},
 "checkpoint": {"every_steps": 6, "keep": 1},
 "model": {"input_shape": [3], "layers": [
   {"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense", "units": 1}]}}
JSON
"$BIN/meshtrain" train --local "$T/reg.json" --save "$T/reg" --data-root "$T" --json \
    >"$T/reg.out" 2>"$T/reg.err" || fail "regression: $(cat "$T/reg.err")"
final=$(tail -1 "$T/reg.out")
echo "$final" | jq -e '.final and .steps == 24 and .stopped_early and .best_step > 0 and
    (.val_loss | type) == "number" and (.val_mae | type) == "number" and
    (.test_mae | type) == "number" and (has("test_accuracy") | not)' >/dev/null ||
    fail "regression final line: $final"
grep "^{\"epoch\":1," "$T/reg.out" | jq -e 'has("loss") and has("mae") and has("val_loss") and has("test_loss")' \
    >/dev/null || fail "regression epoch line: $(cat "$T/reg.out")"
best=$(echo "$final" | jq .best_step)
[ -f "$T/reg/best.mtc" ] || fail "no best.mtc in $(ls "$T/reg")"
ls "$T/reg" | grep -q '^ckpt-24.mtc$' || fail "the stop step has no checkpoint: $(ls "$T/reg")"
"$BIN/meshtrain" export "$T/reg" --best -o "$T/best.safetensors" >"$T/best.out" ||
    fail "export --best: $(cat "$T/best.out")"
grep -q "of step $best from $T/reg/best.mtc" "$T/best.out" || fail "export --best: $(cat "$T/best.out")"
"$BIN/meshtrain" train --local "$T/reg.json" --data-root "$T" >"$T/reg.txt" 2>&1 ||
    fail "regression (text): $(cat "$T/reg.txt")"
grep -q "^Early stopping: val_loss did not improve" "$T/reg.txt" &&
    grep -q "^Epoch 2/20 .* - loss: .* - mae: .* - val_loss: .* - val_mae: .* - test_loss: .* - test_mae: " \
        "$T/reg.txt" || fail "regression text output: $(cat "$T/reg.txt")"
log "regression: mse with mae, validation split, early stop at step 24, best step $best exported"

# without "validation" the targets go through the per-worker input pipeline: batch=2 = one device
jq 'del(.validation) | .epochs = 2 | del(.checkpoint)' "$T/reg.json" >"$T/regp.json"
for m in batch=1 batch=2; do
    "$BIN/meshtrain" train --local "$T/regp.json" --mesh "$m" --save "$T/regp-$m" --data-root "$T" \
        >/dev/null 2>"$T/regp.err" || fail "regression pipeline $m: $(cat "$T/regp.err")"
    "$BIN/meshtrain" export "$T/regp-$m/ckpt-28.mtc" -o "$T/regp-$m.safetensors" >/dev/null ||
        fail "export regp $m: $(ls "$T/regp-$m")"
done
python3 "$CMP" "$T/regp-batch=2.safetensors" "$T/regp-batch=1.safetensors" 1e-5 >"$T/cmp.out" ||
    fail "regression through the pipeline, batch=2 vs one device: $(cat "$T/cmp.out")"
log "regression through the input pipeline: batch=2 equals one device (1e-5)"

# ---------------------------------------------------------------- refusals naming "loss"
jq '.loss = "mse" | .metrics = []' "$T/px1.json" >"$T/bad1.json"
expect_fail 4 "INVALID_ARGUMENT: loss: mse needs float targets" \
    "$BIN/meshtrain" train --local "$T/bad1.json" --data-root "$T"
jq '.model.layers[1].filters = 3 | .dataset.train.y = "'"$T"'/py1.npy"' "$T/px1.json" >"$T/bad2.json"
python3 - "$T" <<'PY'
import struct, sys
d = sys.argv[1]
head = "{'descr': '<i4', 'fortran_order': False, 'shape': (32,), }"
head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
open(d + "/py1.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) +
                                 head.encode() + struct.pack("<32i", *([1] * 32)))
PY
expect_fail 4 "loss: the model outputs 36 rows of 3 classes per example; the dataset has 1 class" \
    "$BIN/meshtrain" train --local "$T/bad2.json" --data-root "$T"
log "refusals name the loss"

# ---------------------------------------------------------------- the same regression as a job
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
bg w1 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w1 --data-root "$T"
W1=$LAST_PID
wait_for 20 "the worker" workers_alive 1
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
JOB=$(mt submit "$T/reg.json") || fail "submit: $JOB"
wait_for 120 "$JOB to finish" finished "$JOB"
mt status --json "$JOB" >"$T/job.json"
jq -e '.state == "SUCCEEDED"' "$T/job.json" >/dev/null || fail "$JOB: $(cat "$T/job.json")"
jq -e '[.latest_metrics[].name] | (index("val_loss") and index("val_mae") and index("test_mae")
    and index("best_step") and index("mae")) and (index("eval_loss") | not)' "$T/job.json" \
    >/dev/null || fail "$JOB metric names: $(jq -c '[.latest_metrics[].name]' "$T/job.json")"
jq -e --argjson b "$best" '.latest_metrics[] | select(.name == "best_step") | .value == $b' \
    "$T/job.json" >/dev/null || fail "$JOB best_step is not $best"
mt export "$JOB" --best -o "$T/job_best.safetensors" >"$T/job_best.out" ||
    fail "export JOB --best: $(cat "$T/job_best.out")"
python3 "$CMP" "$T/job_best.safetensors" "$T/best.safetensors" 0 >/dev/null ||
    fail "the job's best checkpoint differs from the local run's"
log "job $JOB: early stop, val_/test_ names in its history, export --best = the local best"

# keep 1 with a best that peaks early: "max" of val_loss is the first evaluation (step 2); nine
# checkpoints come after it, and keep-1 retention must spare it for `export JOB --best`
jq 'del(.validation.early_stopping) | .validation.every_steps = 2 | .epochs = 2 |
    .validation.best = {"monitor": "val_loss", "mode": "max"} |
    .checkpoint = {"every_steps": 2, "keep": 1}' "$T/reg.json" >"$T/early_best.json"
"$BIN/meshtrain" train --local "$T/early_best.json" --save "$T/eb" --data-root "$T" --json \
    >"$T/eb.out" 2>"$T/eb.err" || fail "early best: $(cat "$T/eb.err")"
tail -1 "$T/eb.out" | jq -e '.best_step == 2 and .steps == 24' >/dev/null ||
    fail "early best local: $(tail -1 "$T/eb.out")"
"$BIN/meshtrain" export "$T/eb" --best -o "$T/eb_local.safetensors" >/dev/null ||
    fail "export DIR --best (early best)"
JOB2=$(mt submit "$T/early_best.json") || fail "submit: $JOB2"
wait_for 120 "$JOB2 to finish" finished "$JOB2"
mt status --json "$JOB2" >"$T/job2.json"
jq -e '.state == "SUCCEEDED" and (.latest_metrics[] | select(.name == "best_step") | .value == 2)' \
    "$T/job2.json" >/dev/null || fail "$JOB2: $(cat "$T/job2.json")"
mt export "$JOB2" --best -o "$T/job2_best.safetensors" >"$T/job2_best.out" 2>&1 ||
    fail "export JOB --best after keep-1 retention: $(cat "$T/job2_best.out")"
python3 "$CMP" "$T/job2_best.safetensors" "$T/eb_local.safetensors" 0 >/dev/null ||
    fail "the job's best checkpoint (step 2) differs from the local run's"
mt export "$JOB2" -o "$T/job2_last.safetensors" >/dev/null 2>&1 || fail "export $JOB2 (latest)"
log "job $JOB2: keep 1, best at step 2 of 24 survives retention; export --best = the local best"

# the same job, 4 epochs (48 steps, a checkpoint upload every 2), across a coordinator and a
# worker kill -9: as soon as checkpoint 4 is stored (the best, step 2, before it) the coordinator
# and the worker are killed (the worker frozen first); the coordinator restarts
# on its state dir and a new worker resumes the job from its latest checkpoint S (4 or a few
# more: 44 steps of uploads were still to come). The resumed run continues the validation
# bookkeeping its checkpoint carries (meta/meshtrain.validation), so its first evaluation is no
# new best: the best stays step 2, retention keeps sparing it, export --best gives its bytes
jq '.epochs = 4' "$T/early_best.json" >"$T/eb4.json"
JOB3=$(mt submit "$T/eb4.json") || fail "submit: $JOB3"
# a tight poll of the coordinator's log (not wait_for's 0.1 s): the worker is frozen a few
# uploads after checkpoint 4, far from the end on a fast machine too
stored4() { grep -q "checkpoint $JOB3 step 4 stored" "$T/coord.log"; }
for _ in $(seq 6000); do stored4 && break; sleep 0.01; done
stored4 || fail "$JOB3: checkpoint 4 was not stored: $(grep "$JOB3" "$T/coord.log" | tail -3)"
kill -STOP "$W1"
kill -9 "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
kill -9 "$W1"
start_coordinator coord2 "$T/state" --listen "$COORD_URL" --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000
mt status --json "$JOB3" | jq -e '.state == "RUNNING" and .step < 48' >/dev/null ||
    fail "$JOB3 should have been mid-run at the kill: $(mt status --json "$JOB3" | jq -c '{state, step}')"
bg w3 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w3 --data-root "$T"
wait_for 60 "$JOB3 to finish after the restart" finished "$JOB3"
mt status --json "$JOB3" >"$T/job3.json"
jq -e '.state == "SUCCEEDED" and .restarts == 1 and .step == 48 and
    (.latest_metrics[] | select(.name == "best_step") | .value == 2)' "$T/job3.json" >/dev/null ||
    fail "$JOB3 after the restart: $(jq -c '{state, restarts, step, best: [.latest_metrics[] | select(.name == "best_step")]}' "$T/job3.json")"
S=$(sed -n "s/.*$JOB3: resuming from checkpoint step \([0-9]*\) .*/\1/p" "$T/w3.log" | head -1)
[ "${S:-0}" -ge 4 ] || fail "$JOB3 should resume from checkpoint 4 or later: $(grep "$JOB3" "$T/w3.log" | tail -3)"
mt export "$JOB3" --best -o "$T/job3_best.safetensors" >"$T/job3_best.out" 2>&1 ||
    fail "export JOB --best after the restart: $(cat "$T/job3_best.out")"
python3 "$CMP" "$T/job3_best.safetensors" "$T/eb_local.safetensors" 0 >/dev/null ||
    fail "the restarted job's best checkpoint differs from the local run's (step 2)"
log "job $JOB3: coordinator and worker kill -9'd, resumed from checkpoint $S: best still step 2, export --best = the local best"

# ---------------------------------------------------------------- the examples
for ex in diabetes_regression:diabetes_train.csv spam_binary:spam_train.tsv; do
    name=${ex%%:*} file=${ex#*:}
    if [ ! -s "$SRC/examples/data/$file" ]; then
        log "SKIP example $name: examples/data/$file absent (deploy/fetch-*.sh examples/data)"
        continue
    fi
    "$BIN/meshtrain" train --local "$SRC/examples/datasets/$name.json" --steps 5 --json \
        --data-root "$SRC/examples" >"$T/$name.out" 2>&1 || fail "example $name: $(cat "$T/$name.out")"
    tail -1 "$T/$name.out" | jq -e '.final and .steps == 5' >/dev/null ||
        fail "example $name: $(tail -1 "$T/$name.out")"
    log "example $name: 5 steps, $(tail -1 "$T/$name.out" | jq -c 'del(.digest)')"
done
