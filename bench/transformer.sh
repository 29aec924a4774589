#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# transformer.sh [BUILD_DIR] — training tokens/s of the char-level GPT (examples/char_lm.json:
# 4 blocks, width 128, 4 heads, block 128, batch 32, AdamW) against PyTorch on the same model
# and batch, in one run:
#   * meshtrain `train --local` on 1 device (OPENBLAS_NUM_THREADS=1) vs PyTorch in one process
#     with 1 thread;
#   * meshtrain on 2 devices (mesh batch=2, each device one OpenBLAS thread) and on batch=1,model=2
#     (tensor parallel) vs PyTorch with 2 threads (the cores of this machine).
# meshtrain's figure is the run's examples_per_sec (training only) times the block size; PyTorch
# runs the same layers (nn.Embedding, nn.MultiheadAttention with a causal mask, nn.LayerNorm,
# nn.Linear, GELU, dropout 0.1) on random tokens, timing STEPS steps after 3 warm-up steps.
# Needs examples/data from deploy/fetch-corpus.sh (fetched when missing) and Debian's
# python3-torch (installed when missing, as root). Prints the ratios with the load average.
# Env: TRANSFORMER_STEPS (default 30).
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${TRANSFORMER_STEPS:-30}
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "transformer.sh: needs python3-torch (apt-get install python3-torch)"; exit 1; }
    apt-get install -y -q python3-torch >/dev/null
fi
bash "$SRC/deploy/fetch-corpus.sh" "$SRC/examples/data" >/dev/null
T=$(mktemp -d /tmp/mt-bench-transformer.XXXXXX)
trap 'rm -rf "$T"' EXIT

ours() { # MESH LAYOUTS_JSON -> tokens/s
    python3 - "$SRC/examples/char_lm.json" "$T/spec.json" "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["mesh"] = dict(kv.split("=") for kv in sys.argv[3].split(","))
s["mesh"] = {k: int(v) for k, v in s["mesh"].items()}
s["layouts"] = json.loads(sys.argv[4])
for k in ("train", "test"):
    s["dataset"][k] = sys.argv[1].rsplit("/", 1)[0] + "/" + s["dataset"][k]
s["dataset"].pop("test")
json.dump(s, open(sys.argv[2], "w"))
PY
    (cd "$T" && OPENBLAS_NUM_THREADS=1 "$BUILD/meshtrain" train --local spec.json --steps "$STEPS" \
        --json --data-root / | tail -n 1 |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["examples_per_sec"] * 128))')
}

theirs() { # THREADS -> tokens/s
    $PY - "$1" "$STEPS" <<'PY'
import sys, time, torch, torch.nn as nn
torch.set_num_threads(int(sys.argv[1]))
steps, V, C, H, L, T, B = int(sys.argv[2]), 96, 128, 4, 4, 128, 32
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(C, eps=1e-3), nn.LayerNorm(C, eps=1e-3)
        s.attn = nn.MultiheadAttention(C, H, batch_first=True)
        s.fc, s.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x, m):
        h = s.ln1(x)
        x = x + s.attn(h, h, h, attn_mask=m, need_weights=False)[0]
        return x + s.out(nn.functional.gelu(s.fc(s.ln2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Parameter(torch.zeros(T, C))
        s.drop, s.blocks = nn.Dropout(0.1), nn.ModuleList(Block() for _ in range(L))
        s.lnf, s.head = nn.LayerNorm(C, eps=1e-3), nn.Linear(C, V)
    def forward(s, x, m):
        h = s.drop(s.tok(x) + s.pos)
        for b in s.blocks:
            h = b(h, m)
        return s.head(s.lnf(h))
m = GPT()
opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.01)
mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
def step():
    opt.zero_grad()
    loss = nn.functional.cross_entropy(m(x, mask).reshape(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
for _ in range(3):
    step()
t = time.perf_counter()
for _ in range(steps):
    step()
print(round(steps * B * T / (time.perf_counter() - t)))
PY
}

TP='{"qkv_.*kernel":["unsharded","model"],"fc_.*kernel":["unsharded","model"],"fc_.*bias":["model"],"proj_.*kernel":["model","unsharded"],"out_.*kernel":["model","unsharded"]}'
load() { cut -d' ' -f1-3 /proc/loadavg; }
a=$(ours batch=1 '{}'); b=$(theirs 1)
printf '%-44s %10s %10s %7s  load %s\n' "row" meshtrain pytorch ratio "$(load)"
printf '%-44s %10s %10s %7.2f  load %s\n' "1 device vs PyTorch 1 thread (tokens/s)" "$a" "$b" \
    "$(echo "$a / $b" | bc -l)" "$(load)"
c=$(ours batch=2 '{}'); d=$(theirs 2)
printf '%-44s %10s %10s %7.2f  load %s\n' "batch=2 vs PyTorch 2 threads" "$c" "$d" \
    "$(echo "$c / $d" | bc -l)" "$(load)"
e=$(ours batch=1,model=2 "$TP")
printf '%-44s %10s %10s %7.2f  load %s\n' "batch=1,model=2 (tensor parallel) vs 2 threads" "$e" "$d" \
    "$(echo "$e / $d" | bc -l)" "$(load)"
printf 'scaling 1 -> 2 devices: data parallel %.2fx, tensor parallel %.2fx\n' \
    "$(echo "$c / $a" | bc -l)" "$(echo "$e / $a" | bc -l)"
