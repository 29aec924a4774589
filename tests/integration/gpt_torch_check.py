#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpt_torch_check.py — one training step of meshtrain's transformer layers against PyTorch's.

Usage:
  gpt_torch_check.py data DIR            write DIR/x.npy, DIR/y.npy (token ids, next tokens)
  gpt_torch_check.py check SPEC W0 W1 LR compare one SGD step

SPEC is the job spec both runs used (its model: embedding, position_embedding, GPT blocks of
layer_norm -> dense qkv -> attention -> dense proj -> add -> layer_norm -> dense gelu -> dense ->
add, final layer_norm, dense head, or a head tied to the token table: GPT-2's
lm_head.weight = wte.weight). W0 is the export of the initial weights, W1 after one SGD
step of rate LR on the whole data set as one batch. PyTorch builds the same model from W0 out
of its own modules (nn.Embedding, nn.LayerNorm, nn.MultiheadAttention with a causal mask,
nn.Linear, GELU), takes the step and compares every weight with W1:
max |a - b| / max |b| of the update, which must be <= 1e-4. Prints one line per tensor.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

V, T, N = 14, 16, 8


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(v["shape"])
    return out


def write_data(d):
    rng = np.random.default_rng(7)
    seq = rng.integers(0, V, size=(N, T + 1))
    np.save(d + "/x.npy", seq[:, :T].astype(np.int32))
    np.save(d + "/y.npy", seq[:, 1:].astype(np.int32))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(c, eps=1e-3)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(c, eps=1e-3)
        self.fc = nn.Linear(c, 4 * c)
        self.out = nn.Linear(4 * c, c)

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


def linear_from(lin, w, name):
    lin.weight.data = torch.tensor(w[name + ".kernel"].T.copy())
    lin.bias.data = torch.tensor(w[name + ".bias"].copy())


def qkv_perm(c, heads):
    """Column j of meshtrain's fused kernel -> row of torch's in_proj_weight: meshtrain keeps
    each head's q | k | v side by side, torch all queries, then all keys, then all values."""
    hd = c // heads
    perm = np.empty(3 * c, dtype=np.int64)
    for h in range(heads):
        for part in range(3):
            for e in range(hd):
                perm[part * c + h * hd + e] = h * 3 * hd + part * hd + e
    return perm


def build(spec, w):
    layers = spec["model"]["layers"]
    names = [l.get("name") for l in layers]
    blocks = [l for l in layers if l["type"] == "attention"]
    heads = blocks[0]["num_heads"]
    emb = nn.Embedding(V, w["tok.embeddings"].shape[1])
    emb.weight.data = torch.tensor(w["tok.embeddings"].copy())
    c = emb.weight.shape[1]
    pos = torch.tensor(w["pos.embeddings"].copy(), requires_grad=True)
    perm = qkv_perm(c, heads)
    mods = []
    for b in range(len(blocks)):
        blk = Block(c, heads)
        blk.ln1.weight.data = torch.tensor(w[f"ln1_{b}.gamma"].copy())
        blk.ln1.bias.data = torch.tensor(w[f"ln1_{b}.beta"].copy())
        blk.ln2.weight.data = torch.tensor(w[f"ln2_{b}.gamma"].copy())
        blk.ln2.bias.data = torch.tensor(w[f"ln2_{b}.beta"].copy())
        blk.attn.in_proj_weight.data = torch.tensor(w[f"qkv_{b}.kernel"].T[perm].copy())
        blk.attn.in_proj_bias.data = torch.tensor(w[f"qkv_{b}.bias"][perm].copy())
        linear_from(blk.attn.out_proj, w, f"proj_{b}")
        linear_from(blk.fc, w, f"fc_{b}")
        linear_from(blk.out, w, f"out_{b}")
        mods.append(blk)
    lnf = nn.LayerNorm(c, eps=1e-3)
    lnf.weight.data = torch.tensor(w["lnf.gamma"].copy())
    lnf.bias.data = torch.tensor(w["lnf.beta"].copy())
    spec_head = layers[names.index("head")]
    if spec_head.get("tied_to") == "tok":  # one Parameter: its gradient sums both uses
        head = nn.Linear(c, V, bias=False)
        head.weight = emb.weight
    else:
        head = nn.Linear(c, V)
        linear_from(head, w, "head")
    assert "tok" in names and "head" in names
    return emb, pos, mods, lnf, head, perm


def check(spec_path, w0_path, w1_path, lr):
    spec = json.load(open(spec_path))
    w0, w1 = read_safetensors(w0_path), read_safetensors(w1_path)
    x = torch.tensor(np.load(spec["dataset"]["train"]["x"]).astype(np.int64))
    y = torch.tensor(np.load(spec["dataset"]["train"]["y"]).astype(np.int64))
    emb, pos, mods, lnf, head, perm = build(spec, w0)
    mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    h = emb(x) + pos
    for blk in mods:
        h = blk(h, mask)
    logits = head(lnf(h))
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    grads = {"tok.embeddings": emb.weight.grad.numpy(), "pos.embeddings": pos.grad.numpy(),
             "lnf.gamma": lnf.weight.grad.numpy(), "lnf.beta": lnf.bias.grad.numpy()}
    if head.weight is not emb.weight:
        grads["head.kernel"] = head.weight.grad.numpy().T
        grads["head.bias"] = head.bias.grad.numpy()
    inv = np.argsort(perm)
    for b, blk in enumerate(mods):
        grads[f"ln1_{b}.gamma"] = blk.ln1.weight.grad.numpy()
        grads[f"ln1_{b}.beta"] = blk.ln1.bias.grad.numpy()
        grads[f"ln2_{b}.gamma"] = blk.ln2.weight.grad.numpy()
        grads[f"ln2_{b}.beta"] = blk.ln2.bias.grad.numpy()
        grads[f"qkv_{b}.kernel"] = blk.attn.in_proj_weight.grad.numpy()[inv].T
        grads[f"qkv_{b}.bias"] = blk.attn.in_proj_bias.grad.numpy()[inv]
        for name, lin in ((f"proj_{b}", blk.attn.out_proj), (f"fc_{b}", blk.fc),
                          (f"out_{b}", blk.out)):
            grads[name + ".kernel"] = lin.weight.grad.numpy().T
            grads[name + ".bias"] = lin.bias.grad.numpy()
    worst = 0.0
    for name in sorted(w0):
        ours = (w0[name].astype(np.float64) - w1[name]) / lr
        theirs = grads[name].astype(np.float64)
        rel = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-12)
        worst = max(worst, rel)
        print(f"{name:20s} max|grad| {np.abs(theirs).max():.3e}  rel diff {rel:.2e}")
    print(f"loss (PyTorch) {loss.item():.6f}; worst relative difference {worst:.2e}")
    if set(w0) != set(grads):
        sys.exit(f"tensors differ: {sorted(set(w0) ^ set(grads))}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    if sys.argv[1] == "data":
        write_data(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
