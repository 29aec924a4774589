#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# resnet.sh [BUILD_DIR] — training examples/s of the small ResNet of
# examples/fashion_mnist_resnet.json (batch 128, AdamW) against PyTorch on the same model and
# batch, in one run:
#   * meshtrain `train --local` on 1 device (mesh batch=1, one OpenBLAS thread) vs PyTorch in one
#     process with 1 thread;
#   * meshtrain on 2 devices (mesh batch=2, each device one OpenBLAS thread) vs PyTorch with 2
#     threads (the cores of this machine).
# meshtrain's figure is the run's examples_per_sec over STEPS steps of Fashion-MNIST (training
# only; its first step included); the test split is cut to 128 images so that the evaluation
# after the last step costs nothing. PyTorch builds the same layers from the spec (Conv2d with
# TensorFlow's "same" padding, BatchNorm2d eps 1e-3, ReLU, the residual adds, global average
# pooling, Linear) and times STEPS steps on random NCHW data after 3 warm-up steps.
# Needs Debian's python3-torch (apt-get install python3-torch). Prints the ratios
# with the load average. Env: RESNET_STEPS (default 15).
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${RESNET_STEPS:-15}
PY=/usr/bin/python3
$PY -c 'import torch' 2>/dev/null ||
    { echo "resnet.sh: needs Debian's python3-torch (apt-get install python3-torch)"; exit 1; }
T=$(mktemp -d /tmp/mt-bench-resnet.XXXXXX)
trap 'rm -rf "$T"' EXIT

# the spec with a 128-image test split (plain IDX files in $T)
$PY - "$SRC/examples/fashion_mnist_resnet.json" "$T" <<'PY'
import gzip, json, struct, sys
spec, d = json.load(open(sys.argv[1])), sys.argv[2]
ds = spec["dataset"]
for key, rank in (("test_images", 3), ("test_labels", 1)):
    raw = gzip.open(ds[key]).read()
    dims = list(struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank]))
    per = 1
    for x in dims[1:]:
        per *= x
    dims[0] = 128
    open(d + "/" + key, "wb").write(raw[:4] + struct.pack(">" + "I" * rank, *dims) +
                                    raw[4 + 4 * rank:4 + 4 * rank + 128 * per])
    ds[key] = d + "/" + key
json.dump(spec, open(d + "/spec.json", "w"))
PY

ours() { # MESH -> examples/s
    OPENBLAS_NUM_THREADS=1 "$BUILD/meshtrain" train --local "$T/spec.json" --mesh "$1" \
        --steps "$STEPS" --json --data-root / | tail -n 1 |
        $PY -c 'import json,sys; print(round(json.load(sys.stdin)["examples_per_sec"], 1))'
}

theirs() { # THREADS -> examples/s
    $PY - "$1" "$STEPS" "$T/spec.json" <<'PY'
import json, math, sys, time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
steps, spec = int(sys.argv[2]), json.load(open(sys.argv[3]))
B, (H, W, C) = spec["batch_size"], spec["model"]["input_shape"]

def same_pad(n, k, s):  # TensorFlow's "same": the odd pixel goes to the bottom / right
    t = max((math.ceil(n / s) - 1) * s + k - n, 0)
    return t // 2, t - t // 2

class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.layers, shapes, prev = spec["model"]["layers"], {"input": (H, W, C)}, "input"
        for l in s.layers:
            ins = l.get("inputs") or [prev]
            h, w, c = shapes[ins[0]] if len(shapes[ins[0]]) == 3 else (1, 1, shapes[ins[0]][0])
            t, out = l["type"], shapes[ins[0]]
            if t == "conv2d":
                k, st = l.get("kernel_size", 3), l.get("strides", 1)
                s.add_module(l["name"], nn.Conv2d(c, l["filters"], k, st, bias=l.get("use_bias", True)))
                same = l.get("padding", "valid") == "same"
                out = ((math.ceil(h / st), math.ceil(w / st)) if same else
                       ((h - k) // st + 1, (w - k) // st + 1)) + (l["filters"],)
            elif t == "batch_norm":
                s.add_module(l["name"], nn.BatchNorm2d(c, eps=1e-3, momentum=0.01))
            elif t == "global_average_pooling2d":
                out = (c,)
            elif t == "dense":
                s.add_module(l["name"], nn.Linear(out[0], l["units"]))
                out = (l["units"],)
            elif t not in ("activation", "add"):
                raise SystemExit("resnet.sh: layer type %r" % t)
            shapes[l["name"]], prev = out, l["name"]
            l["_in"], l["_hw"] = ins, (h, w)

    def forward(s, x):
        outs, prev = {"input": x}, "input"
        for l in s.layers:
            xs, t = [outs[n] for n in l["_in"]], l["type"]
            if t == "conv2d":
                k, st = l.get("kernel_size", 3), l.get("strides", 1)
                z = xs[0]
                if l.get("padding", "valid") == "same":
                    (pt, pb), (pl, pr) = same_pad(l["_hw"][0], k, st), same_pad(l["_hw"][1], k, st)
                    z = F.pad(z, (pl, pr, pt, pb))
                y = getattr(s, l["name"])(z)
            elif t == "add":
                y = xs[0]
                for z in xs[1:]:
                    y = y + z
            elif t == "global_average_pooling2d":
                y = xs[0].mean(dim=(2, 3))
            elif t == "activation":
                y = xs[0]
            else:
                y = getattr(s, l["name"])(xs[0])
            if l.get("activation") == "relu":
                y = torch.relu(y)
            outs[l["name"]] = y
        return y  # the softmax is in the loss (logits)

m = Net()
o = spec["optimizer"]
opt = torch.optim.AdamW(m.parameters(), lr=o["learning_rate"], weight_decay=o["weight_decay"])
x, y = torch.randn(B, C, H, W), torch.randint(0, 10, (B,))
def step():
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
for i in range(3 + steps):  # 3 warm-up steps, then the timed ones
    t = time.perf_counter() if i == 3 else t if i > 3 else None
    step()
print(round(steps * B / (time.perf_counter() - t), 1))
PY
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
a=$(ours batch=1); b=$(theirs 1)
printf '%-40s %10s %10s %7s  load %s\n' "row (examples/s, batch 128)" meshtrain pytorch ratio "$(load)"
printf '%-40s %10s %10s %7.2f  load %s\n' "1 device vs PyTorch 1 thread" "$a" "$b" \
    "$(echo "$a / $b" | bc -l)" "$(load)"
c=$(ours batch=2); d=$(theirs 2)
printf '%-40s %10s %10s %7.2f  load %s\n' "batch=2 (2 devices) vs PyTorch 2 threads" "$c" "$d" \
    "$(echo "$c / $d" | bc -l)" "$(load)"
printf 'scaling 1 -> 2 devices: meshtrain %.2fx, PyTorch %.2fx\n' "$(echo "$c / $a" | bc -l)" \
    "$(echo "$d / $b" | bc -l)"
