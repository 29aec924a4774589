#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_export_torch.sh — `meshtrain export --layout torch` end to end (issue #21):
#  * the default (keras) layout is unchanged byte for byte (a golden sha256 of the export of
#    tests/tools/mt_mkckpt's checkpoint, as written before --layout existed: the file without
#    the two digest keys issue #18 added to __metadata__; and the golden of the file with them),
#    and `--layout keras` is the same file;
#  * a model the torch layout cannot express (a flattened image concatenated) and a checkpoint
#    whose spec has no model are refused (exit 4) without leaving a file; a bad --layout is usage;
#  * the Fashion-MNIST MLP and CNN examples and a graph model with the conversion's edge cases
#    (batch norm on a flattened image, a batch norm without scale, dropout, even kernel with
#    "same" padding, add, concatenate, a dense without bias) are trained a few steps with
#    `train --local --save`, exported in both layouts, and examples/load_in_pytorch.py must
#    predict the class `meshtrain predict` predicts for every one of the first 2000 test images.
# The PyTorch part is skipped (exit 0) when no python3 can import torch and numpy (tried:
# $MT_PYTHON, else python3 then /usr/bin/python3, Debian's, which python3-torch serves).
source "$(dirname "$0")/lib.sh"
FM=/usr/share/datasets/fashion-mnist
MT="$BIN/meshtrain"

# -- keras layout: unchanged --------------------------------------------------------------------
KERAS_SHA=983f7af042d27828295d9287efd28c04210970869732081100766603fc5a96a8 # before issue #18
KERAS_DIGEST_SHA=98a0bb542409721dc9c546085e8a4b4b89813442361150a183f9fda15c631864
"$BIN/mt_mkckpt" "$T/ckpt-300.mtc"
"$MT" export "$T/ckpt-300.mtc" -o "$T/default.safetensors" >/dev/null
"$MT" export "$T/ckpt-300.mtc" --layout keras -o "$T/keras.safetensors" >/dev/null
got=$(sha256sum "$T/default.safetensors" | cut -d' ' -f1)
[ "$got" = "$KERAS_DIGEST_SHA" ] || fail "default export changed: sha256 $got, want $KERAS_DIGEST_SHA"
got=$(python3 - "$T/default.safetensors" <<'PY'
import collections, hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n], object_pairs_hook=collections.OrderedDict)
del h["__metadata__"]["mt_digest"], h["__metadata__"]["mt_digest_format"]
j = json.dumps(h, separators=(",", ":")).encode()
pad = (len(j) + 7) // 8 * 8
print(hashlib.sha256(struct.pack("<Q", pad) + j + b" " * (pad - len(j)) + b[8 + n:]).hexdigest())
PY
)
[ "$got" = "$KERAS_SHA" ] || fail "without the digest keys the export is not the old one: $got"
cmp -s "$T/default.safetensors" "$T/keras.safetensors" || fail "--layout keras differs from default"
log "keras layout: byte for byte as before"

# -- refusals -----------------------------------------------------------------------------------
expect_fail 2 "layout 'tf' is not supported" "$MT" export "$T/ckpt-300.mtc" --layout tf -o "$T/x"
expect_fail 4 "the checkpoint's job spec" "$MT" export "$T/ckpt-300.mtc" --layout torch -o "$T/x"
cat >"$T/concat.json" <<'EOF'
{"name": "concat-flat", "seed": 1, "batch_size": 32, "steps": 1,
 "model": {"input_shape": [28, 28, 1], "layers": [
   {"type": "conv2d", "filters": 2, "kernel_size": 3},
   {"type": "flatten", "name": "f1"},
   {"type": "dense", "units": 4, "name": "d1"},
   {"type": "concatenate", "inputs": ["f1", "d1"]},
   {"type": "dense", "units": 10}]}}
EOF
"$MT" train --local "$T/concat.json" --steps 1 --save "$T/concat" >"$T/concat.log" 2>&1 ||
    fail "train concat: $(tail -3 "$T/concat.log")"
expect_fail 4 "concatenate_1): concatenates a flattened image" \
    "$MT" export "$T/concat/ckpt-1.mtc" --layout torch -o "$T/x"
[ ! -e "$T/x" ] || fail "a refused export left $T/x"
ls "$T" | grep -q '\.tmp\.' && fail "temporary file left behind: $(ls "$T")"
log "refusals: ok"

# -- PyTorch ------------------------------------------------------------------------------------
PY=
for p in ${MT_PYTHON:-python3 /usr/bin/python3}; do
    if "$p" -c 'import torch, numpy' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
    echo "test_export_torch: PyTorch part skipped (no python3 imports torch and numpy)"
    exit 0
fi
[ -f $FM/t10k-images-idx3-ubyte.gz ] || { echo "test_export_torch: skipped (no $FM)"; exit 0; }
# the first 2000 test images: every prediction compared, at a fifth of the cost
idx_head 2000 $FM/t10k-images-idx3-ubyte.gz "$T/test-images.gz"
idx_head 2000 $FM/t10k-labels-idx1-ubyte.gz "$T/test-labels.gz"

cp "$SRC/examples/fashion_mnist_mlp.json" "$SRC/examples/fashion_mnist_cnn.json" "$T/"

# check NAME SPEC STEPS: train, export both layouts, predict, compare every prediction
check() {
    local name=$1 spec=$2 steps=$3 ck
    "$MT" train --local "$spec" --steps "$steps" --save "$T/$name" >"$T/$name-train.log" 2>&1 ||
        fail "train $name: $(tail -3 "$T/$name-train.log")"
    ck="$T/$name/ckpt-$steps.mtc"
    "$MT" export "$ck" --layout torch -o "$T/$name-torch.safetensors" >"$T/$name-export.log" ||
        fail "export $name --layout torch"
    "$MT" export "$ck" -o "$T/$name-keras.safetensors" >/dev/null || fail "export $name"
    "$MT" predict "$T/$name-keras.safetensors" --spec "$spec" \
        --input "$T/test-images.gz" --labels "$T/test-labels.gz" \
        >"$T/$name-predict.txt" || fail "predict $name"
    "$PY" "$SRC/examples/load_in_pytorch.py" "$T/$name-torch.safetensors" \
        --images "$T/test-images.gz" --labels "$T/test-labels.gz" \
        --predictions "$T/$name-predict.txt" >"$T/$name-torch.log" 2>&1 ||
        fail "load_in_pytorch $name: $(cat "$T/$name-torch.log")"
    grep -q "predictions match meshtrain predict: 2000 of 2000" "$T/$name-torch.log" ||
        fail "$name: $(cat "$T/$name-torch.log")"
    # the same accuracy line as predict's, to the last example
    [ "$(grep '^accuracy' "$T/$name-torch.log")" = "$(grep '^accuracy' "$T/$name-predict.txt")" ] ||
        fail "$name: accuracy $(grep '^accuracy' "$T/$name-torch.log") vs predict's" \
            "$(grep '^accuracy' "$T/$name-predict.txt")"
    log "$name: PyTorch = meshtrain predict on 2000 of 2000 ($(grep '^accuracy' "$T/$name-torch.log"))"
}
check mlp "$T/fashion_mnist_mlp.json" 60
check cnn "$T/fashion_mnist_cnn.json" 30
check edges "$SRC/tests/fixtures/export_edges.json" 30

# the torch file states its layout and the spec; the names and shapes are PyTorch's
"$PY" - "$T/cnn-torch.safetensors" <<'PY' || fail "cnn torch header"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
m = h.pop("__metadata__")
assert m["layout"] == "torch" and m["format"] == "pt" and json.loads(m["spec"])["model"], m
want = {"conv2d_1.weight": [32, 1, 3, 3], "conv2d_1.bias": [32],
        "conv2d_2.weight": [64, 32, 3, 3], "conv2d_2.bias": [64],
        "dense_1.weight": [64, 1600], "dense_1.bias": [64],
        "dense_2.weight": [10, 64], "dense_2.bias": [10]}
assert {k: v["shape"] for k, v in h.items()} == want, h
PY
echo "test_export_torch: ok"
