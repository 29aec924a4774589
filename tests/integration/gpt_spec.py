#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpt_spec.py OUT.json DATA_DIR [LR] [STEPS] [OPTIMIZER] [tied] — the small GPT job spec that
test_gpt_layers.sh trains: token + position embedding, 2 blocks (layer_norm, fused QKV dense,
causal attention with 2 heads, projection, residual add, layer_norm, gelu MLP, residual add),
final layer_norm and a dense head over the 14-token vocabulary (with "tied": GPT-2's tied head,
the token table as its kernel and no bias); npy data from DATA_DIR, the whole
data set (8 sequences of 16 tokens) as one batch. The names are the ones gpt_torch_check.py reads.
"""
import json
import sys

C, V, T = 16, 14, 16
out, data = sys.argv[1], sys.argv[2]
lr = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 1
opt = sys.argv[5] if len(sys.argv) > 5 else "sgd"
tied = len(sys.argv) > 6 and sys.argv[6] == "tied"
layers = [{"type": "embedding", "input_dim": V, "output_dim": C, "name": "tok"},
          {"type": "position_embedding", "name": "pos"}]
resid = "pos"
for b in range(2):
    layers += [
        {"type": "layer_norm", "name": f"ln1_{b}", "inputs": [resid]},
        {"type": "dense", "units": 3 * C, "name": f"qkv_{b}"},
        {"type": "attention", "num_heads": 2, "causal": True, "name": f"attn_{b}"},
        {"type": "dense", "units": C, "name": f"proj_{b}"},
        {"type": "add", "inputs": [resid, f"proj_{b}"], "name": f"res1_{b}"},
        {"type": "layer_norm", "name": f"ln2_{b}"},
        {"type": "dense", "units": 4 * C, "activation": "gelu", "name": f"fc_{b}"},
        {"type": "dense", "units": C, "name": f"out_{b}"},
        {"type": "add", "inputs": [f"res1_{b}", f"out_{b}"], "name": f"res2_{b}"},
    ]
    resid = f"res2_{b}"
head = {"type": "dense", "units": V, "name": "head"}
if tied:
    head.update({"tied_to": "tok", "use_bias": False})
layers += [{"type": "layer_norm", "name": "lnf"}, head]
spec = {
    "name": "gpt-layers-check",
    "seed": 3,
    "batch_size": 8,
    "steps": steps,
    "optimizer": {"name": opt, "learning_rate": lr},
    "dataset": {"format": "npy", "train": {"x": data + "/x.npy", "y": data + "/y.npy"},
                "test": {"x": data + "/x.npy", "y": data + "/y.npy"}},
    "model": {"input_shape": [T], "layers": layers},
}
json.dump(spec, open(out, "w"), indent=1)
