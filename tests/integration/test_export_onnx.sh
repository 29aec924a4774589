#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_export_onnx.sh — `meshtrain export --format onnx` end to end (issue #21):
#  * refusals: --layout with --format onnx and an unknown format are usage errors (exit 2), a
#    checkpoint that stores no job spec is refused (exit 4); none leaves a file behind; an
#    output in a missing directory is named (exit 4);
#  * the Fashion-MNIST MLP and CNN examples, a graph model with every layer type and the edge
#    cases (even kernel with "same" padding, batch norm on an image, on a flattened image and
#    without scale or center, dropout, add, concatenate, a dense without bias) and a flattened
#    image concatenated with a dense output (which --layout torch refuses) are trained a few steps
#    with `train --local --save` and exported; examples/onnx_check.py must pass
#    onnx.checker.check_model(full_check=True) and, run on the first 2000 test images (onnxruntime
#    when installed, else its numpy evaluator of the ONNX operators), predict the class
#    `meshtrain predict` predicts for every image, with the same softmax probability to the 4
#    decimals predict prints.
# Needs a python3 that imports onnx and numpy (Debian: python3-onnx; tried: $MT_PYTHON, else
# python3 then /usr/bin/python3); install-deps.sh installs it.
source "$(dirname "$0")/lib.sh"
FM=/usr/share/datasets/fashion-mnist
MT="$BIN/meshtrain"

"$BIN/mt_mkckpt" "$T/ckpt-300.mtc"
expect_fail 2 "format 'tflite' is not supported (use safetensors or onnx)" \
    "$MT" export "$T/ckpt-300.mtc" --format tflite -o "$T/x"
expect_fail 2 "--layout is for safetensors" \
    "$MT" export "$T/ckpt-300.mtc" --format onnx --layout torch -o "$T/x"
expect_fail 4 "the checkpoint's job spec" "$MT" export "$T/ckpt-300.mtc" --format onnx -o "$T/x"
[ ! -e "$T/x" ] || fail "a refused export left $T/x"
for f in "$T"/*.tmp.*; do [ ! -e "$f" ] || fail "temporary file left behind: $f"; done
log "refusals: ok"

PY=
for p in ${MT_PYTHON:-python3 /usr/bin/python3}; do
    if "$p" -c 'import onnx, numpy' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "no python3 imports onnx and numpy (deploy/install-deps.sh installs python3-onnx)"
[ -f $FM/t10k-images-idx3-ubyte.gz ] || fail "no $FM (dataset-fashion-mnist)"
# the first 2000 test images: every prediction compared, at a fifth of the cost
idx_head 2000 $FM/t10k-images-idx3-ubyte.gz "$T/test-images.gz"
idx_head 2000 $FM/t10k-labels-idx1-ubyte.gz "$T/test-labels.gz"

cat >"$T/concat.json" <<'JSON'
{"name": "onnx-concat-flat", "seed": 1, "batch_size": 32,
 "model": {"input_shape": [28, 28, 1], "layers": [
   {"type": "conv2d", "filters": 2, "kernel_size": 3, "activation": "relu"},
   {"type": "conv2d", "filters": 3, "kernel_size": 3, "padding": "same", "name": "c2"},
   {"type": "concatenate", "inputs": ["conv2d_1", "c2"], "name": "channels"},
   {"type": "flatten", "name": "f1"},
   {"type": "dense", "units": 4, "name": "d1"},
   {"type": "concatenate", "inputs": ["f1", "d1"]},
   {"type": "dense", "units": 10}]}}
JSON
cat >"$T/strided.json" <<'JSON'
{"name": "onnx-strided", "seed": 2, "batch_size": 32,
 "model": {"input_shape": [28, 28, 1], "layers": [
   {"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "tanh"},
   {"type": "conv2d", "filters": 4, "kernel_size": [3, 2], "strides": [2, 1], "activation": "leaky_relu"},
   {"type": "activation", "activation": "sigmoid"},
   {"type": "flatten"},
   {"type": "dense", "units": 10}]}}
JSON
cp "$SRC/examples/fashion_mnist_mlp.json" "$SRC/examples/fashion_mnist_cnn.json" "$T/"

# check NAME SPEC STEPS: train, export, predict, compare every prediction
check() {
    local name=$1 spec=$2 steps=$3 ck
    "$MT" train --local "$spec" --steps "$steps" --save "$T/$name" >"$T/$name-train.log" 2>&1 ||
        fail "train $name: $(tail -3 "$T/$name-train.log")"
    ck="$T/$name/ckpt-$steps.mtc"
    "$MT" export "$ck" --format onnx -o "$T/$name.onnx" >"$T/$name-export.log" ||
        fail "export $name --format onnx"
    grep -q "exported an ONNX model (opset 13" "$T/$name-export.log" || fail "$(cat "$T/$name-export.log")"
    "$MT" export "$ck" -o "$T/$name.safetensors" >/dev/null || fail "export $name"
    "$MT" predict "$T/$name.safetensors" --spec "$spec" \
        --input "$T/test-images.gz" --labels "$T/test-labels.gz" \
        >"$T/$name-predict.txt" || fail "predict $name"
    "$PY" "$SRC/examples/onnx_check.py" "$T/$name.onnx" \
        --images "$T/test-images.gz" --labels "$T/test-labels.gz" \
        --predictions "$T/$name-predict.txt" >"$T/$name-onnx.log" 2>&1 ||
        fail "onnx_check $name: $(cat "$T/$name-onnx.log")"
    grep -q "^onnx.checker: ok" "$T/$name-onnx.log" || fail "$name: $(cat "$T/$name-onnx.log")"
    grep -q "predictions match meshtrain predict: 2000 of 2000" "$T/$name-onnx.log" ||
        fail "$name: $(cat "$T/$name-onnx.log")"
    [ "$(grep '^accuracy' "$T/$name-onnx.log")" = "$(grep '^accuracy' "$T/$name-predict.txt")" ] ||
        fail "$name: accuracy $(grep '^accuracy' "$T/$name-onnx.log") vs predict's" \
            "$(grep '^accuracy' "$T/$name-predict.txt")"
    log "$name: ONNX = meshtrain predict on 2000 of 2000 ($(grep '^accuracy' "$T/$name-onnx.log");" \
        "$(grep -o 'largest probability difference.*' "$T/$name-onnx.log" || echo 'logits')," \
        "$(grep -o 'with [a-z]*' "$T/$name-onnx.log"))"
}
check mlp "$T/fashion_mnist_mlp.json" 60
check strided "$T/strided.json" 40
# what opset 13 cannot express is refused, naming the layer
jq '.model.layers[1].activation = "gelu"' "$T/strided.json" >"$T/gelu.json"
"$MT" train --local "$T/gelu.json" --steps 2 --save "$T/gelu" >/dev/null 2>&1 || fail "train gelu"
expect_fail 4 "model.layers\[1\] (conv2d_2): --format onnx cannot express a gelu" \
    "$MT" export "$T/gelu/ckpt-2.mtc" --format onnx -o "$T/gelu.onnx"
[ ! -e "$T/gelu.onnx" ] || fail "a refused export left $T/gelu.onnx"
# an output that cannot be written is named, and nothing is left behind
expect_fail 4 "create $T/nodir/m.onnx.tmp.*: No such file or directory" \
    "$MT" export "$T/mlp/ckpt-60.mtc" --format onnx -o "$T/nodir/m.onnx"
check cnn "$T/fashion_mnist_cnn.json" 30
check edges "$SRC/tests/fixtures/export_edges.json" 30
check concat "$T/concat.json" 30

# the model states where it comes from: the spec and the step as metadata, NHWC input, output
"$PY" - "$T/cnn.onnx" <<'PY' || fail "cnn model header"
import json, sys, onnx
m = onnx.load(sys.argv[1])
meta = {p.key: p.value for p in m.metadata_props}
assert json.loads(meta["meshtrain.spec"])["model"] and meta["meshtrain.step"] == "30", meta
dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
assert [i.name for i in m.graph.input] == ["input"] and dims(m.graph.input[0]) == ["N", 28, 28, 1]
assert [o.name for o in m.graph.output] == ["output"] and dims(m.graph.output[0]) == ["N", 10]
assert m.producer_name == "meshtrain" and m.opset_import[0].version == 13
PY
echo "test_export_onnx: ok"
