#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# seq_balance.sh BUILD_DIR OTHER_MESHTRAIN — sequence parallelism's causal work balance as an
# A/B in one run: training tokens/s of a one-block causal LM with long sequences (block 1024,
# width 64, 4 heads, batch 2: attention is most of the step) on mesh batch=1,seq=2
# (`train --local`, one OpenBLAS thread per device) with BUILD_DIR/meshtrain against
# OTHER_MESHTRAIN (e.g. a build of the commit before the zig-zag split), in alternating pairs,
# each figure with the load average. The ratio is the figure to read on a shared machine.
# Env: SEQ_BALANCE_STEPS (default 8), SEQ_BALANCE_PAIRS (default 3). Needs examples/data
# (deploy/fetch-corpus.sh).
set -euo pipefail
A=$(cd "${1:?usage: seq_balance.sh BUILD_DIR OTHER_MESHTRAIN}" && pwd)/meshtrain
B=${2:?usage: seq_balance.sh BUILD_DIR OTHER_MESHTRAIN}
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${SEQ_BALANCE_STEPS:-8}
PAIRS=${SEQ_BALANCE_PAIRS:-3}
T=$(mktemp -d /tmp/mt-seq-balance.XXXXXX)
trap 'rm -rf "$T"' EXIT
bash "$SRC/deploy/fetch-corpus.sh" "$SRC/examples/data" >/dev/null
python3 - "$SRC/examples/data/brown_train.txt" "$T/spec.json" <<'PY'
import json, sys
L = lambda **k: k
layers = [L(type="embedding", input_dim=96, output_dim=64, name="tok"),
          L(type="position_embedding", name="pos"), L(type="layer_norm", name="ln1"),
          L(type="dense", units=192, use_bias=False, name="qkv"),
          L(type="attention", num_heads=4, causal=True, name="attn"),
          L(type="dense", units=64, name="proj"), L(type="add", inputs=["pos", "proj"], name="r1"),
          L(type="layer_norm", name="ln2"), L(type="dense", units=256, activation="gelu", name="fc"),
          L(type="dense", units=64, name="out"), L(type="add", inputs=["r1", "out"], name="r2"),
          L(type="layer_norm", name="lnf"), L(type="dense", units=96, name="head")]
spec = {"name": "seq-balance", "seed": 1, "batch_size": 2,
        "optimizer": {"name": "adamw", "learning_rate": 0.001},
        "dataset": {"format": "tokens", "train": sys.argv[1], "block_size": 1024,
                    "tokenizer": {"type": "char", "vocab_size": 96}},
        "model": {"input_shape": [1024], "layers": layers},
        "input_layout": ["batch", "seq"], "mesh": {"batch": 1, "seq": 2}}
json.dump(spec, open(sys.argv[2], "w"))
PY
run() { # MESHTRAIN -> tokens/s
    OPENBLAS_NUM_THREADS=1 "$1" train --local "$T/spec.json" --steps "$STEPS" --json \
        --data-root / | tail -n 1 |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["examples_per_sec"] * 1024))'
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
printf '%-6s %12s %12s %7s  %s\n' pair "this build" other ratio load
for p in $(seq 1 "$PAIRS"); do
    if [ $((p % 2)) = 1 ]; then a=$(run "$A"); b=$(run "$B"); else b=$(run "$B"); a=$(run "$A"); fi
    printf '%-6s %12s %12s %7.2f  %s\n' "$p" "$a" "$b" "$(echo "$a / $b" | bc -l)" "$(load)"
done
