#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""char_lm_torch.py — trains the language model of a meshtrain job spec (examples/char_lm.json)
in PyTorch, the way meshtrain trains it, for the convergence comparison of issue #23.

Usage:
  char_lm_torch.py SPEC [--steps N] [--eval-every K] [--eval-file F] [--threads N]
                        [--compare W.safetensors] [--load W.safetensors] [--save W.safetensors]

What is the same as meshtrain (each rule read from the spec or from meshtrain's code):
  * the model: the spec's layers walked in order as a graph (embedding, position_embedding,
    dropout, layer_norm, dense with its activation, fused-QKV causal attention, add), with
    meshtrain's fused column layout [q_h | k_h | v_h] per head and 1/sqrt(head_size) scaling;
    layer_norm epsilon 0.001 (Keras); GELU the exact erf form;
  * the initial weights: meshtrain's init rule replayed with its Philox4x32-10 stream
    (core/rng: element i of tensor NAME is keyed by (seed, fnv1a(NAME), i)): dense kernels
    Glorot-uniform, embeddings uniform(-0.05, 0.05), biases and betas 0, gammas 1 — so both
    runs start from the same numbers (--compare with --steps 0 checks it against an export);
  * the data: the char tokenizer fitted on the training file (ids 1..K the characters in byte
    order, 0 unknown), non-overlapping examples of block_size tokens with next-token labels,
    each epoch shuffled by meshtrain's permutation mt_rng_permutation(seed, epoch), global
    batch s of the epoch = examples [s*B, s*B + B) of it (the last one partial): the same
    batches at every step;
  * dropout: inverted, meshtrain's masks (mt_rng_dropout_mask keyed by seed, global step,
    layer index and the example's position in the epoch);
  * the loss: the mean token cross-entropy of the batch;
  * the optimizer: meshtrain's AdamW (Keras form: decoupled decay w -= w*lr*wd before the
    step, lr_t = lr*sqrt(1-b2^t)/(1-b1^t), w -= lr_t*m/(sqrt(v)+eps), eps 1e-7), its
    warmup + cosine schedule (mt_optim_lr) and the global clipnorm on the whole gradient.
PyTorch computes every forward, backward and update (autograd, its own kernels, one thread by
default). Prints one JSON object per evaluation ({"step": k, "val_loss": ...}) on the whole
validation file of the spec (validation.path, else dataset.test, or --eval-file; an empty file,
e.g. /dev/null, skips the evaluation), and a final object with the wall time, the loss (JSON:
every digit of the double) and the file the weights were loaded from ("loaded", null: none).
--save writes the weights after the last step (or the loaded ones) as safetensors, with
meshtrain's tensor names. With --compare, prints max|a-b| / max|b| per tensor of the model's
weights (after training, or as loaded: a) against another safetensors file (b, e.g.
meshtrain's export), and the worst.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# ------------------------------------------------------------------ meshtrain's Philox streams

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
STREAM_DROPOUT, STREAM_SHUFFLE = 0x44524F50, 0x53485546


def philox(c0, c1, c2, c3, key):
    """Philox4x32-10 on uint32 arrays (core/rng/mt_rng.c mt_rng_philox)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    k0, k1 = key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0 = c0.astype(np.uint64) * M0
        p1 = c2.astype(np.uint64) * M1
        n0 = (p1 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ np.uint32(k0)
        n2 = (p0 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ np.uint32(k1)
        c1, c3, c0, c2 = p1.astype(np.uint32), p0.astype(np.uint32), n0, n2
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1, c2, c3


def name_id(name):
    h = 2166136261
    for ch in name.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


def uniform(seed, stream, n):
    """mt_rng_uniform(seed, stream, i) for i in 0..n-1, float32."""
    i = np.arange(n, dtype=np.uint64)
    out = philox(i & np.uint64(0xFFFFFFFF), i >> np.uint64(32), np.full(n, stream), np.zeros(n),
                 seed)[0]
    return (out >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def init_tensor(seed, name, shape, kind):
    n = int(np.prod(shape))
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "ones":
        return np.ones(shape, np.float32)
    if kind == "glorot":  # mt_rng_glorot_limit of a rank-2 (in, out) kernel
        limit = np.float32(math.sqrt(6.0 / (shape[0] + shape[1])))
    else:
        limit = np.float32(0.05)
    u = uniform(seed, name_id(name), n)
    return (limit * (np.float32(2.0) * u - np.float32(1.0))).reshape(shape)


def permutation(n, seed, epoch):
    """mt_rng_permutation: Fisher-Yates driven by Philox keyed by (seed, epoch)."""
    key = seed ^ (STREAM_SHUFFLE << 32)
    i = np.arange(n, 1, -1, dtype=np.uint64)
    o0, o1, _, _ = philox(i & np.uint64(0xFFFFFFFF), i >> np.uint64(32),
                          np.full(len(i), epoch & 0xFFFFFFFF), np.full(len(i), epoch >> 32), key)
    r = (o0.astype(np.uint64) << np.uint64(32)) | o1.astype(np.uint64)
    js = (r % i).tolist()
    perm = list(range(n))
    for ii, j in zip(range(n, 1, -1), js):
        perm[ii - 1], perm[j] = perm[j], perm[ii - 1]
    return np.array(perm, dtype=np.int64)


def dropout_mask(seed, step, layer, first, n, per, rate):
    """mt_rng_dropout_mask: (n, per) keep-mask of examples first..first+n-1."""
    key = seed ^ (STREAM_DROPOUT << 32)
    thresh = 0xFFFFFFFF if rate >= 1 else int(float(np.float32(rate)) * 4294967296.0)
    j = np.arange(0, per, 4, dtype=np.uint64)
    ex = np.arange(first, first + n, dtype=np.uint64)
    jj, ee = np.meshgrid(j, ex)
    c2 = ((ee >> np.uint64(32)) ^ np.uint64(layer)) ^ np.uint64(((step >> 32) * 0x9E3779B9)
                                                                & 0xFFFFFFFF)
    c3 = np.uint64((step & 0xFFFFFFFF) ^ ((layer * 0x85EBCA6B) & 0xFFFFFFFF))
    out = philox(jj, ee & np.uint64(0xFFFFFFFF), c2 & np.uint64(0xFFFFFFFF),
                 np.full(jj.shape, c3), key)
    m = np.stack(out, axis=-1).reshape(n, -1)[:, :per]
    return m >= np.uint32(thresh)


# ------------------------------------------------------------------ data


def char_vocab(train_bytes, vocab_size):
    counts = np.bincount(np.frombuffer(train_bytes, np.uint8), minlength=256)
    if counts[128:].any():
        sys.exit("char_lm_torch: the training text is not ASCII (only ASCII is replayed here)")
    present = [c for c in range(256) if counts[c] > 0]
    k = len(present) if vocab_size == 0 else min(len(present), vocab_size - 1)
    top = sorted(present, key=lambda c: (-counts[c], c))[:k]
    table = np.zeros(256, np.int64)
    for i, c in enumerate(sorted(top)):
        table[c] = i + 1
    return table, (k + 1 if vocab_size == 0 else vocab_size)


def sequences(path, table, T):
    ids = table[np.frombuffer(open(path, "rb").read(), np.uint8)]
    n = max((len(ids) - 1) // T, 0)
    x = ids[:n * T].reshape(n, T)
    y = ids[1:n * T + 1].reshape(n, T)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


# ------------------------------------------------------------------ the model


class Model:
    """The spec's layers as a graph: params (name -> tensor), forward(x, step, first)."""

    def __init__(self, spec, vocab_rows):
        self.seed = spec.get("seed", 42)
        self.layers = spec["model"]["layers"]
        T = spec["model"]["input_shape"][0]
        self.params, self.shape = {}, {}
        width = None  # the previous layer's last axis
        widths = {}
        for i, l in enumerate(self.layers):
            name, kind = l.get("name"), l["type"]
            if name is None:
                sys.exit(f"char_lm_torch: model.layers[{i}] has no name")
            ins = l.get("inputs", [self.layers[i - 1]["name"]] if i > 0 else [])
            width = widths[ins[0]] if ins else None
            if kind == "embedding":
                self.add(f"{name}.embeddings", (l["input_dim"], l["output_dim"]), "u005")
                width = l["output_dim"]
            elif kind == "position_embedding":
                self.add(f"{name}.embeddings", (T, width), "u005")
            elif kind == "layer_norm":
                if l.get("center", True):
                    self.add(f"{name}.beta", (width,), "zeros")
                if l.get("scale", True):
                    self.add(f"{name}.gamma", (width,), "ones")
            elif kind == "dense":
                if "tied_to" in l:
                    sys.exit("char_lm_torch: tied heads are not replayed here")
                self.add(f"{name}.kernel", (width, l["units"]), "glorot")
                if l.get("use_bias", True):
                    self.add(f"{name}.bias", (l["units"],), "zeros")
                width = l["units"]
            elif kind == "attention":
                width //= 3
            elif kind not in ("dropout", "add"):
                sys.exit(f"char_lm_torch: layer type {kind} is not replayed here")
            widths[name] = width
        self.T = T

    def add(self, name, shape, kind):
        self.params[name] = torch.tensor(init_tensor(self.seed, name, shape, kind),
                                         requires_grad=True)

    def forward(self, x, training, step=0, first=0):
        outs, h = {}, None
        p = self.params
        for i, l in enumerate(self.layers):
            name, kind = l["name"], l["type"]
            ins = [outs[n] for n in l["inputs"]] if "inputs" in l else ([h] if i > 0 else [x])
            a = ins[0]
            if kind == "embedding":
                h = p[f"{name}.embeddings"][a]
            elif kind == "position_embedding":
                h = a + p[f"{name}.embeddings"][:a.shape[1]]
            elif kind == "dropout":
                rate = np.float32(l["rate"])
                if training and rate > 0:
                    per = int(np.prod(a.shape[1:]))
                    m = dropout_mask(self.seed, step, i, first, a.shape[0], per, rate)
                    scale = float(np.float32(1.0) / (np.float32(1.0) - rate))
                    h = a * torch.from_numpy(m.reshape(a.shape)).to(a.dtype) * scale
                else:
                    h = a
            elif kind == "layer_norm":
                h = F.layer_norm(a, a.shape[-1:], p.get(f"{name}.gamma"), p.get(f"{name}.beta"),
                                 eps=l.get("epsilon", 1e-3))
            elif kind == "dense":
                h = a @ p[f"{name}.kernel"]
                if f"{name}.bias" in p:
                    h = h + p[f"{name}.bias"]
                act = l.get("activation", "linear")
                if act == "gelu":
                    h = F.gelu(h)
                elif act == "relu":
                    h = F.relu(h)
                elif act == "tanh":
                    h = torch.tanh(h)
                elif act not in ("linear", None):
                    sys.exit(f"char_lm_torch: activation {act} is not replayed here")
            elif kind == "attention":
                B, T, W = a.shape
                H = l["num_heads"]
                hd = W // (3 * H)
                qkv = a.reshape(B, T, H, 3, hd).permute(3, 0, 2, 1, 4)  # (3, B, H, T, hd)
                q, k, v = qkv[0], qkv[1], qkv[2]
                s = (q @ k.transpose(-1, -2)) * float(np.float32(1.0) / np.sqrt(np.float32(hd)))
                if l.get("causal", False):
                    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                                      float("-inf"))
                h = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
            elif kind == "add":
                h = ins[0]
                for o in ins[1:]:
                    h = h + o
            outs[name] = h
        return h


# ------------------------------------------------------------------ meshtrain's AdamW


class AdamW:
    def __init__(self, params, o):
        if o.get("name") not in ("adamw", "adam"):
            sys.exit("char_lm_torch: only adam/adamw are replayed here")
        self.p = list(params)
        self.lr = o.get("learning_rate", 0.001)
        self.wd = o.get("weight_decay", 0.004) if o["name"] == "adamw" else 0.0
        f32 = lambda v: float(np.float32(v))  # noqa: E731 (meshtrain keeps them as floats)
        self.b1, self.b2 = f32(o.get("beta_1", 0.9)), f32(o.get("beta_2", 0.999))
        self.eps = f32(o.get("epsilon", 1e-7))
        self.clip = o.get("global_clipnorm", 0.0)
        self.sched = o.get("schedule", {"type": "constant"})
        self.m = [torch.zeros_like(q) for q in self.p]
        self.v = [torch.zeros_like(q) for q in self.p]
        self.t = 0

    def rate(self, t):  # mt_optim_lr
        s, base, step = self.sched, self.lr, float(max(t - 1, 0))
        warm = s.get("warmup_steps", 0)
        if s.get("type", "constant") == "constant" and warm == 0:
            return base
        if step < warm:
            return float(np.float32(base * (step + 1.0) / warm))
        step -= warm
        if s["type"] == "cosine":
            f = min(step, s["decay_steps"]) / s["decay_steps"]
            f = 0.5 * (1.0 + math.cos(math.pi * f))
            alpha = s.get("alpha", 0.0)
            return float(np.float32(base * ((1.0 - alpha) * f + alpha)))
        if s["type"] == "constant":
            return base
        sys.exit(f"char_lm_torch: schedule {s['type']} is not replayed here")

    @torch.no_grad()
    def step(self):
        self.t += 1
        t = self.t
        g = [q.grad for q in self.p]
        if self.clip > 0:
            norm = math.sqrt(sum(float((x.double() ** 2).sum()) for x in g))
            if norm > self.clip:
                sc = float(np.float32(self.clip / norm))
                for x in g:
                    x.mul_(sc)
        lr = float(np.float32(self.rate(t)))
        a = float(np.float32(lr * math.sqrt(1.0 - self.b2 ** t) / (1.0 - self.b1 ** t)))
        c1 = float(np.float32(1.0) - np.float32(self.b1))
        c2 = float(np.float32(1.0) - np.float32(self.b2))
        for w, m, v, x in zip(self.p, self.m, self.v, g):
            if self.wd > 0:
                w.sub_(w * float(np.float32(lr * np.float32(self.wd))))
            m.mul_(self.b1).add_(x, alpha=c1)
            v.mul_(self.b2).addcmul_(x, x, value=c2)
            w.sub_(a * m / (v.sqrt() + self.eps))
            w.grad = None


# ------------------------------------------------------------------ main


def write_safetensors(path, tensors):
    """tensors: name -> float32 numpy array, written in name order (F32, little-endian)."""
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        b = np.ascontiguousarray(tensors[k], dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(tensors[k].shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dtype=np.float32).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}


@torch.no_grad()
def evaluate(model, x, y, V, batch):
    if len(x) == 0:
        return None
    total, count = 0.0, 0
    for i in range(0, len(x), batch):
        # the token losses and their sums in float64: float32 batch sums round away weight
        # differences of ~1e-7 (two sides' weights could give the very same loss)
        logits = model.forward(x[i:i + batch], False).double()
        total += float(F.cross_entropy(logits.reshape(-1, V), y[i:i + batch].reshape(-1),
                                       reduction="sum"))
        count += y[i:i + batch].numel()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare")
    ap.add_argument("--load", help="start from these weights (an export); with --steps 0: only "
                    "evaluate them (e.g. meshtrain's trained model on the same validation ids)")
    ap.add_argument("--save", help="write the final weights here (safetensors)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.load(open(a.spec))
    base = os.path.dirname(os.path.abspath(a.spec))
    ds = spec["dataset"]
    if ds.get("format") != "tokens" or ds.get("tokenizer", {}).get("type") != "char":
        sys.exit("char_lm_torch: needs a tokens dataset with the char tokenizer")
    if ds.get("shuffle_buffer", 0) != 0:
        sys.exit("char_lm_torch: replays the default full reshuffle only (shuffle_buffer 0)")
    train_path = os.path.join(base, ds["train"])
    table, V = char_vocab(open(train_path, "rb").read(), ds["tokenizer"].get("vocab_size", 0))
    T, B = ds["block_size"], spec["batch_size"]
    xt, yt = sequences(train_path, table, T)
    val_path = a.eval_file or spec.get("validation", {}).get("path") or ds.get("test")
    if val_path is None:
        sys.exit("char_lm_torch: no validation file (validation.path, dataset.test or --eval-file)")
    xv, yv = sequences(os.path.join(base, val_path), table, T)
    seed = spec.get("seed", 42)
    steps = a.steps if a.steps is not None else spec["steps"]
    model = Model(spec, V)
    if a.load:
        loaded = read_safetensors(a.load)
        if set(loaded) != set(model.params):
            sys.exit(f"char_lm_torch: {a.load} holds {sorted(set(loaded) ^ set(model.params))} "
                     "that the model does not (or lacks them)")
        with torch.no_grad():
            for k, v in loaded.items():
                if tuple(v.shape) != tuple(model.params[k].shape):
                    sys.exit(f"char_lm_torch: {a.load}: {k} has shape {v.shape}, the model's is "
                             f"{tuple(model.params[k].shape)}")
                model.params[k].copy_(torch.from_numpy(v.copy()))
    opt = AdamW(model.params.values(), spec["optimizer"])
    n = len(xt)
    per_epoch = (n + B - 1) // B
    print(json.dumps({"train_examples": n, "val_examples": len(xv), "vocab": V,
                      "params": sum(q.numel() for q in model.params.values()),
                      "steps_per_epoch": per_epoch}), flush=True)
    t0, step, perm, train_s = time.perf_counter(), 0, None, 0.0
    while step < steps:
        epoch, s = divmod(step, per_epoch)
        if s == 0 or perm is None:
            perm = torch.from_numpy(permutation(n, seed, epoch))
        ts = time.perf_counter()
        idx = perm[s * B:(s + 1) * B]
        logits = model.forward(xt[idx], True, step, s * B)
        loss = F.cross_entropy(logits.reshape(-1, V), yt[idx].reshape(-1))
        loss.backward()
        opt.step()
        step += 1
        train_s += time.perf_counter() - ts
        if step == 1 or step % 50 == 0:
            print(json.dumps({"step": step, "batch_loss": round(float(loss), 6),
                              "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
        if a.eval_every and step % a.eval_every == 0 and step < steps:
            print(json.dumps({"step": step, "val_loss": evaluate(model, xv, yv, V, B)}),
                  flush=True)
    val = evaluate(model, xv, yv, V, B) if steps > 0 or a.load else None
    if a.save:
        write_safetensors(a.save, {k: q.detach().numpy() for k, q in model.params.items()})
    print(json.dumps({"final": True, "steps": steps, "val_loss": val,
                      "loaded": a.load,
                      "train_seconds": round(train_s, 1),
                      "seconds": round(time.perf_counter() - t0, 1),
                      "tokens_per_sec": round(steps * B * T / train_s) if train_s else 0}),
          flush=True)
    if a.compare:
        ref = read_safetensors(a.compare)
        worst = 0.0
        for k in sorted(model.params):
            if k not in ref:
                sys.exit(f"char_lm_torch: {k} missing from {a.compare}")
            mine, theirs = model.params[k].detach().numpy(), ref[k]
            if mine.shape != theirs.shape:
                sys.exit(f"char_lm_torch: {k}: shape {mine.shape} here, {theirs.shape} in "
                         f"{a.compare}")
            r = float(np.abs(mine - theirs).max() / max(np.abs(theirs).max(), 1e-30))
            worst = max(worst, r)
            print(json.dumps({"tensor": k, "max_rel": r}))
        print(json.dumps({"compare": a.compare, "worst": worst}))


if __name__ == "__main__":
    main()
