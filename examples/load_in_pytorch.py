#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""load_in_pytorch.py — run a meshtrain model in PyTorch.

Builds the PyTorch module of a job spec (dense, conv2d, max_pool2d, flatten, batch_norm, dropout,
add, concatenate; relu / linear / softmax activations), loads the weights of
`meshtrain export CKPT --layout torch -o MODEL.safetensors` with load_state_dict (strict), and
runs it on an IDX test set (Fashion-MNIST's by default: pixels / 255, images as NCHW).

    python3 examples/load_in_pytorch.py MODEL.safetensors [--spec JOB.json]
        [--images IDX] [--labels IDX] [--predictions PREDICT_OUTPUT] [--out FILE]

It prints the accuracy and, with --predictions (the output of `meshtrain predict MODEL_KERAS
--spec JOB.json --input IDX`, one "i: class (p)" line per example), whether every predicted class
matches; exit status 1 when one does not. --out writes the predicted class of each example, one
per line. The spec defaults to the one the export stores in its metadata ("spec").

Needs PyTorch and numpy (Debian: python3-torch); the safetensors format is read with the standard
library (u64 little-endian header length, JSON header, raw little-endian data). The layout is
described in docs/checkpoints.md ("Export layouts"). Test: tests/integration/test_export_torch.sh.
"""
import argparse
import gzip
import json
import re
import struct
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

FASHION = "/usr/share/datasets/fashion-mnist"
DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def read_safetensors(path):
    """(metadata dict, {name: torch.Tensor}) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        b0, b1 = t["data_offsets"]
        a = np.frombuffer(data[b0:b1], dtype=np.dtype(DTYPES[t["dtype"]]).newbyteorder("<"))
        tensors[name] = torch.from_numpy(a.astype(a.dtype.newbyteorder("="))).reshape(t["shape"])
    return meta, tensors


def read_idx(path):
    """An IDX file (gzip or plain) as a numpy array."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    kind, rank = raw[2], raw[3]
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    return np.frombuffer(raw[4 + 4 * rank:], dtype=dtype[kind]).reshape(dims)


def layer_names(layers):
    """meshtrain's names: "name" or "<type>_N", N counting that type's unnamed layers from 1,
    skipping a name a named layer has (core/model/spec.c assign_default_names)."""
    names = [l.get("name") for l in layers]
    taken = set(n for n in names if n)
    count = {}
    for i, l in enumerate(layers):
        if names[i]:
            continue
        while True:
            count[l["type"]] = count.get(l["type"], 0) + 1
            cand = "%s_%d" % (l["type"], count[l["type"]])
            if cand not in taken:
                break
        names[i] = cand
        taken.add(cand)
    return names


def pair(v, default):
    if v is None:
        return default
    return (v, v) if isinstance(v, int) else tuple(v)


class MeshtrainModel(nn.Module):
    """The model of a meshtrain spec; parameters are attributes named as the layers, so the
    state_dict keys are "<layer>.weight" etc., as the torch-layout export writes them.
    Images are NCHW; a flatten gives PyTorch's c*H*W + h*W + w order."""

    def __init__(self, spec, input_shape):
        super().__init__()
        layers = spec["model"]["layers"]
        self.names = layer_names(layers)
        self.specs = layers
        self.inputs = []
        shapes = []  # per layer: output shape per example, NHWC as in the spec (h, w, c) / (n,)
        for i, l in enumerate(layers):
            ins = l.get("inputs") or ([self.names[i - 1]] if i > 0 else ["input"])
            idx = [-1 if n == "input" else self.names.index(n) for n in ins]
            self.inputs.append(idx)
            x = [tuple(input_shape) if j < 0 else shapes[j] for j in idx]
            t = l["type"]
            if t == "dense":
                m = nn.Linear(x[0][0], l["units"], bias=l.get("use_bias", True))
                out = (l["units"],)
            elif t == "conv2d":
                kh, kw = pair(l.get("kernel_size"), (3, 3))
                h, w, c = x[0]
                same = l.get("padding", "valid") == "same"
                m = nn.Conv2d(c, l["filters"], (kh, kw), bias=l.get("use_bias", True))
                out = (h, w, l["filters"]) if same else (h - kh + 1, w - kw + 1, l["filters"])
            elif t == "max_pool2d":
                m = nn.MaxPool2d(2)
                out = (x[0][0] // 2, x[0][1] // 2, x[0][2])
            elif t == "flatten":
                m = nn.Flatten()
                out = (int(np.prod(x[0])),)
            elif t == "batch_norm":
                # Keras: moving = momentum * moving + (1 - momentum) * batch; PyTorch's momentum
                # is the weight of the batch. eps: Keras' default 1e-3 (PyTorch's is 1e-5).
                affine = l.get("scale", True) or l.get("center", True)
                kw = dict(eps=l.get("epsilon", 1e-3), momentum=1.0 - l.get("momentum", 0.99),
                          affine=affine)
                if len(x[0]) == 3:
                    m = nn.BatchNorm2d(x[0][2], **kw)
                elif len(x[0]) == 1:
                    m = nn.BatchNorm1d(x[0][0], **kw)
                else:
                    raise SystemExit("batch_norm on a rank-%d input is not supported" % len(x[0]))
                out = x[0]
            elif t == "dropout":
                m = nn.Dropout(l.get("rate", 0.0))
                out = x[0]
            elif t == "add":
                m = None
                out = x[0]
            elif t == "concatenate":
                m = None
                out = x[0][:-1] + (sum(s[-1] for s in x),)
            else:
                raise SystemExit("layer type %r is not supported" % t)
            if m is not None:
                self.add_module(self.names[i], m)
            shapes.append(out)

    def forward(self, x):
        outs = []
        for i, l in enumerate(self.specs):
            xs = [x if j < 0 else outs[j] for j in self.inputs[i]]
            t = l["type"]
            if t == "add":
                y = xs[0]
                for z in xs[1:]:
                    y = y + z
            elif t == "concatenate":
                y = torch.cat(xs, dim=1)  # the channel axis of NCHW, the feature axis of (N, F)
            elif t == "conv2d" and l.get("padding", "valid") == "same":
                kh, kw = pair(l.get("kernel_size"), (3, 3))
                # TensorFlow's "same": the odd pixel of padding goes to the bottom / right
                z = F.pad(xs[0], ((kw - 1) // 2, kw // 2, (kh - 1) // 2, kh // 2))
                y = getattr(self, self.names[i])(z)
            else:
                y = getattr(self, self.names[i])(xs[0])
            if l.get("activation") == "relu":
                y = torch.relu(y)
            outs.append(y)  # softmax on the last layer is left out: the logits give the classes
        return outs[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="safetensors file of meshtrain export --layout torch")
    ap.add_argument("--spec", help="job spec JSON (default: the one stored in the export)")
    ap.add_argument("--images", default=FASHION + "/t10k-images-idx3-ubyte.gz")
    ap.add_argument("--labels", default=FASHION + "/t10k-labels-idx1-ubyte.gz")
    ap.add_argument("--predictions", help="output of meshtrain predict to compare with")
    ap.add_argument("--out", help="write the predicted class of each example here")
    a = ap.parse_args()

    meta, state = read_safetensors(a.model)
    if meta.get("layout") != "torch":
        raise SystemExit("%s: not a torch-layout export (run meshtrain export --layout torch)"
                         % a.model)
    if a.spec:
        with open(a.spec) as f:
            spec = json.load(f)
    else:
        spec = json.loads(meta["spec"])
    images = read_idx(a.images).astype(np.float32) / 255.0
    input_shape = spec["model"].get("input_shape") or (list(images.shape[1:]) + [1])[:3]
    model = MeshtrainModel(spec, input_shape)
    model.load_state_dict(state, strict=True)
    model.eval()

    x = torch.from_numpy(images.reshape((len(images),) + tuple(input_shape)))
    if len(input_shape) == 3:
        x = x.permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    with torch.no_grad():
        pred = torch.cat([model(x[i:i + 1000]).argmax(dim=1) for i in range(0, len(x), 1000)])
    pred = pred.numpy()
    labels = read_idx(a.labels).astype(np.int64) if a.labels else None
    if labels is not None:
        correct = int((pred == labels).sum())
        print("accuracy %.4f (%d of %d)" % (correct / len(pred), correct, len(pred)))
    if a.out:
        with open(a.out, "w") as f:
            f.write("".join("%d\n" % p for p in pred))
    if a.predictions:
        theirs = {}
        with open(a.predictions) as f:
            for line in f:
                m = re.match(r"^(\d+):\s+(\d+)", line)
                if m:
                    theirs[int(m.group(1))] = int(m.group(2))
        diff = [i for i in range(len(pred)) if theirs.get(i) != pred[i]]
        if len(theirs) != len(pred) or diff:
            print("predictions differ from meshtrain predict: %d of %d (first: %s); "
                  "meshtrain gave %d predictions" % (len(diff), len(pred), diff[:5], len(theirs)))
            return 1
        print("predictions match meshtrain predict: %d of %d" % (len(pred), len(pred)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
