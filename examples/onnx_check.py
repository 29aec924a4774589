#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""onnx_check.py — check and run an ONNX model written by `meshtrain export --format onnx`.

    python3 examples/onnx_check.py MODEL.onnx [--images IDX] [--labels IDX]
        [--predictions PREDICT_OUTPUT] [--out FILE]

1. onnx.checker.check_model(full_check=True): the file is a valid ONNX model and ONNX's shape
   inference agrees with the shapes it declares.
2. Runs it on an IDX test set (Fashion-MNIST's by default; pixels / 255, shaped as the model's
   input "input", (N, H, W, C) or (N, F)) with onnxruntime when it is installed, else with the
   numpy evaluator below, which implements the ONNX operators meshtrain's export uses (Transpose,
   Flatten, Gemm, Conv, MaxPool, BatchNormalization, Identity, Sum, Concat, Relu, Softmax) as the
   ONNX operator specification defines them (opset 13).
3. Prints the accuracy and, with --predictions (the output of `meshtrain predict`, one
   "i: class (p)" line per example), whether every predicted class matches; exit status 1 when
   one does not.

Needs the onnx Python package and numpy (Debian: python3-onnx; Debian 12 has no onnxruntime).
Conventions of the export: docs/export.md. Test: tests/integration/test_export_onnx.sh.
"""
import argparse
import gzip
import re
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

FASHION = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip or plain) as a numpy array."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    kind, rank = raw[2], raw[3]
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    return np.frombuffer(raw[4 + 4 * rank:], dtype=dtype[kind]).reshape(dims)


# ---------------------------------------------------------------- numpy evaluator (opset 13)

def conv(x, w, b, a):
    """Conv: x (N, C, H, W), w (F, C, KH, KW), pads [top, left, bottom, right], strides."""
    assert a.get("group", 1) == 1, a
    sh, sw = a.get("strides", [1, 1])
    assert a.get("dilations", [1, 1]) == [1, 1], a
    t, l, bo, r = a.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (t, bo), (l, r)))
    kh, kw = w.shape[2], w.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # N,C,OH,OW,KH,KW
    win = win[:, :, ::sh, ::sw]
    y = np.einsum("ncijkl,fckl->nfij", win, w, optimize=True)
    return y + b.reshape(1, -1, 1, 1) if b is not None else y


def max_pool(x, a):
    """MaxPool without padding: kernel k, strides s, floor."""
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    assert a.get("pads", [0, 0, 0, 0]) == [0, 0, 0, 0], a
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.max(axis=(4, 5))


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def run_numpy(model, x):
    g = model.graph
    env = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    env[g.input[0].name] = x
    for n in g.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        i = [env[name] if name else None for name in n.input]
        op = n.op_type
        if op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Flatten":
            k = a.get("axis", 1)
            y = i[0].reshape(int(np.prod(i[0].shape[:k])), -1)
        elif op == "Gemm":
            assert not a.get("transA") and not a.get("transB"), a
            y = a.get("alpha", 1.0) * (i[0] @ i[1])
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
        elif op == "Conv":
            y = conv(i[0], i[1], i[2] if len(i) > 2 else None, a)
        elif op == "MaxPool":
            y = max_pool(i[0], a)
        elif op == "BatchNormalization":
            shape = (1, -1) + (1,) * (i[0].ndim - 2)
            sc, bi, mu, var = (v.reshape(shape) for v in i[1:5])
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * sc + bi
        elif op == "Identity":
            y = i[0]
        elif op == "Sum":
            y = sum(i[1:], i[0])
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Sigmoid":
            y = 1.0 / (1.0 + np.exp(-i[0].astype(np.float64)))
        elif op == "LeakyRelu":
            y = np.where(i[0] > 0, i[0], a.get("alpha", 0.01) * i[0])
        elif op == "Softmax":
            y = softmax(i[0], a.get("axis", -1))
        else:
            raise SystemExit("operator %s is not in this evaluator" % op)
        env[n.output[0]] = y.astype(np.float32)
    return env[g.output[0].name]


def run(model, path, x):
    try:
        import onnxruntime as ort
    except ImportError:
        return "numpy", np.concatenate([run_numpy(model, x[i:i + 500])
                                        for i in range(0, len(x), 500)])
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return "onnxruntime", s.run(None, {model.graph.input[0].name: x})[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="ONNX file of meshtrain export --format onnx")
    ap.add_argument("--images", default=FASHION + "/t10k-images-idx3-ubyte.gz")
    ap.add_argument("--labels", default=FASHION + "/t10k-labels-idx1-ubyte.gz")
    ap.add_argument("--predictions", help="output of meshtrain predict to compare with")
    ap.add_argument("--out", help="write the predicted class of each example here")
    a = ap.parse_args()
    model = onnx.load(a.model)
    onnx.checker.check_model(model, full_check=True)
    print("onnx.checker: ok (ir_version %d, opset %d, %d nodes)"
          % (model.ir_version, model.opset_import[0].version, len(model.graph.node)))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    images = read_idx(a.images).astype(np.float32) / 255.0
    x = np.ascontiguousarray(images.reshape([len(images)] + dims))
    engine, y = run(model, a.model, x)
    pred = y.argmax(axis=1)
    print("ran %d examples with %s: output %s" % (len(x), engine, tuple(y.shape)))
    if a.labels:
        labels = read_idx(a.labels).astype(np.int64)
        correct = int((pred == labels).sum())
        print("accuracy %.4f (%d of %d)" % (correct / len(pred), correct, len(pred)))
    if a.out:
        with open(a.out, "w") as f:
            f.write("".join("%d\n" % p for p in pred))
    if a.predictions:
        theirs, probs = {}, {}
        with open(a.predictions) as f:
            for line in f:
                m = re.match(r"^(\d+):\s+(\d+)(?:\s+\(([0-9.]+)\))?", line)
                if m:
                    theirs[int(m.group(1))] = int(m.group(2))
                    if m.group(3):
                        probs[int(m.group(1))] = float(m.group(3))
        diff = [i for i in range(len(pred)) if theirs.get(i) != pred[i]]
        if len(theirs) != len(pred) or diff:
            print("predictions differ from meshtrain predict: %d of %d (first: %s); "
                  "meshtrain gave %d predictions" % (len(diff), len(pred), diff[:5], len(theirs)))
            return 1
        print("predictions match meshtrain predict: %d of %d" % (len(pred), len(pred)))
        # a softmax output is predict's probability, which it prints to 4 decimals
        if probs and np.allclose(y.sum(axis=1), 1.0, atol=1e-4):
            err = max(abs(float(y[i, pred[i]]) - p) for i, p in probs.items())
            print("largest probability difference from meshtrain predict: %.6f" % err)
            if err > 6e-5:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
