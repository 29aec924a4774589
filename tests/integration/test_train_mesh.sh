#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_train_mesh.sh — `meshtrain train --local` on meshes (devices as threads): the DTensor
# tutorial's chain data parallel -> save -> model parallel -> save -> spatial parallel ends where
# an uninterrupted one-device run ends; --mesh overrides (size-1 dims valid, a layout naming a
# missing dimension exits 4 with its JSON path, a malformed --mesh exits 2); checkpoint
# retention (checkpoint.keep); `meshtrain export` on these checkpoints.
set -euo pipefail
BIN="${MT_BIN_DIR:?}/meshtrain"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1

fail() {
    echo "FAIL: $*"
    exit 1
}

# spec NAME MESH INPUT_LAYOUT LAYOUTS: the tutorial MLP on synthetic data, 8 steps per epoch
spec() {
    cat >"$TMP/$1.json" <<JSON
{
  "seed": 5, "batch_size": 32, "epochs": 3, "optimizer": "adam", "learning_rate": 0.01,
  "dataset": {"format": "synthetic", "examples": 256, "test_examples": 64, "features": 1200},
  "mesh": $2, "input_layout": $3, "layouts": $4,
  "checkpoint": {"every_steps": 4, "keep": 2},
  "model": {"input_shape": [1200], "layers": [
    {"type": "dense", "units": 48, "activation": "relu"},
    {"type": "batch_norm"},
    {"type": "dense", "units": 2, "activation": "softmax"}]}
}
JSON
}
spec data '{"batch": 8}' '["batch", "unsharded"]' '{}'
spec model '{"batch": 4, "model": 2}' '["batch", "unsharded"]' \
    '{"dense_1\\.kernel": ["unsharded", "model"], "dense_2\\.kernel": ["model", "unsharded"]}'
spec spatial '{"batch": 2, "feature": 2, "model": 2}' '["batch", "feature"]' \
    '{"dense_1\\.kernel": ["feature", "model"], "dense_2\\.kernel": ["model", "unsharded"]}'

field() { # field NAME FILE: a number from the last JSON line
    tail -n 1 "$2" | sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"
}
close() { # close A B: |A-B| <= 1e-4 * max(1, |B|)
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
        if (m < 1) m = 1; exit !(d <= 1e-4 * m) }'
}

# the uninterrupted reference: the spatial spec on one device
"$BIN" train --local "$TMP/spatial.json" --mesh batch=1,feature=1,model=1 --steps 20 --json \
    >"$TMP/ref.out" || fail "one-device run"
ref=$(field test_loss "$TMP/ref.out")
[ -n "$ref" ] || fail "no test_loss in: $(cat "$TMP/ref.out")"

# the chain
"$BIN" train --local "$TMP/data.json" --steps 6 --save "$TMP/a" --json >"$TMP/a.out" ||
    fail "data parallel: $(cat "$TMP/a.out")"
[ -f "$TMP/a/ckpt-6.mtc" ] && [ -f "$TMP/a/ckpt-4.mtc" ] || fail "data parallel checkpoints: $(ls "$TMP/a")"
"$BIN" train --local "$TMP/model.json" --resume "$TMP/a/ckpt-6.mtc" --steps 13 --save "$TMP/b" \
    --json >"$TMP/b.out" || fail "model parallel: $(cat "$TMP/b.out")"
"$BIN" train --local "$TMP/spatial.json" --resume "$TMP/b/ckpt-13.mtc" --steps 20 --json \
    >"$TMP/c.out" || fail "spatial parallel: $(cat "$TMP/c.out")"
got=$(field test_loss "$TMP/c.out")
close "$got" "$ref" || fail "chain ends at test_loss $got, the one-device run at $ref"
[ "$(field steps "$TMP/c.out")" = 20 ] || fail "chain step count: $(tail -n 1 "$TMP/c.out")"

# retention: every 4 steps, keep 2 -> steps 16 and 20 remain after 20 steps
"$BIN" train --local "$TMP/model.json" --steps 20 --save "$TMP/k" >/dev/null || fail "retention run"
[ "$(ls "$TMP/k" | tr '\n' ' ')" = "ckpt-16.mtc ckpt-20.mtc " ] || fail "retention: $(ls "$TMP/k")"

# --mesh errors
rc=0
"$BIN" train --local "$TMP/model.json" --mesh batch=8 >"$TMP/e.out" 2>&1 || rc=$?
[ "$rc" = 4 ] || fail "missing dimension: exit $rc"
grep -q 'INVALID_ARGUMENT: layouts\["dense_1\\\\.kernel"\]\[1\]: mesh has no dimension .model.' \
    "$TMP/e.out" || fail "missing dimension message: $(cat "$TMP/e.out")"
rc=0
"$BIN" train --local "$TMP/model.json" --mesh "batch=0" >"$TMP/e.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "bad --mesh: exit $rc ($(cat "$TMP/e.out"))"
rc=0
"$BIN" train --local "$TMP/model.json" --resume "$TMP/none.mtc" >"$TMP/e.out" 2>&1 || rc=$?
[ "$rc" = 4 ] || fail "missing checkpoint: exit $rc ($(cat "$TMP/e.out"))"

# export of a sharded-training checkpoint
"$BIN" export "$TMP/b/ckpt-13.mtc" --format safetensors -o "$TMP/m.safetensors" >/dev/null ||
    fail "export"
head -c 600 "$TMP/m.safetensors" | grep -q '"dense_1.kernel":{"dtype":"F32","shape":\[1200,48\]' ||
    fail "export header: $(head -c 300 "$TMP/m.safetensors")"
echo OK
