#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# char_lm_convergence.sh [BUILD_DIR] — the convergence acceptance of issue #23: trains
# examples/char_lm.json with meshtrain (`train --local`, one device, one OpenBLAS thread) and
# the same model in PyTorch (bench/char_lm_torch.py, one thread: the same initial weights,
# batches, dropout masks, AdamW, schedule and clipnorm), side by side, and prints both
# validation losses (the whole of brown_validation.txt, the example's test file, after the last
# step), their ratio, the wall times and the load average; then exports meshtrain's model,
# evaluates its weights with the PyTorch script too (the same ids, an independent forward) and
# `generate`s a sample from it.
# Env:
#   CONV_STEPS       steps (default 3000, the example's); the schedule's decay_steps become
#                    CONV_STEPS - warmup_steps so a shorter run still ends its cosine decay
#   CONV_EVAL_EVERY  steps between PyTorch's validations (default CONV_STEPS: only at the end;
#                    meshtrain evaluates the test file at epoch ends and after the last step)
#   CONV_OUT         directory for the spec, logs, checkpoints and export (default: a new one
#                    under /tmp; kept)
#   CONV_NICE        nice level of both runs (default 10)
#   CONV_CHECK=1     instead: 1 step of each side, then the weights compared tensor by tensor
#                    (max|a-b| / max|b|), and the initial weights (a step of rate 1e-30; the
#                    kernels and tables, as the zero-initialised biases move by ~1e-30)
# Needs examples/data (deploy/fetch-corpus.sh) and Debian's python3-torch.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${CONV_STEPS:-3000}
EVERY=${CONV_EVAL_EVERY:-$STEPS}
NICE=${CONV_NICE:-10}
OUT=${CONV_OUT:-$(mktemp -d /tmp/mt-conv.XXXXXX)}
PY=/usr/bin/python3
MT="$BUILD/meshtrain"
$PY -c 'import torch' 2>/dev/null || { echo "char_lm_convergence.sh: needs python3-torch"; exit 1; }
bash "$SRC/deploy/fetch-corpus.sh" "$SRC/examples/data" >/dev/null
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
load() { cut -d' ' -f1-3 /proc/loadavg; }

spec() { # OUT STEPS EVERY [LR]: the example with absolute paths, the scaled decay, validations
    $PY - "$SRC/examples/char_lm.json" "$@" <<'PY'
import json, os, sys
src, out, steps, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = json.load(open(src))
d = os.path.dirname(os.path.abspath(src))
ds = s["dataset"]
ds["train"], ds["test"] = d + "/" + ds["train"], d + "/" + ds["test"]
s["steps"] = steps
sch = s["optimizer"]["schedule"]
sch["decay_steps"] = max(steps - sch["warmup_steps"], 1)
if len(sys.argv) > 5:
    s["optimizer"]["learning_rate"] = float(sys.argv[5])
# the validation set is the dataset's test file, which meshtrain evaluates at every epoch end
# and after the last step, with the training split's tokenizer. (Not validation.path: meshtrain
# fits a tokens dataset's tokenizer on that file itself, so its ids would differ.)
json.dump(s, open(out, "w"), indent=1)
PY
}

last_ckpt() { ls "$1"/ckpt-*.mtc | sort -V | tail -n 1; }

if [ "${CONV_CHECK:-0}" = 1 ]; then
    # initial weights: one step at rate 1e-30 leaves them as they were (to float precision)
    spec "$OUT/w0.json" 1 1 1e-30
    spec "$OUT/w1.json" 1 1
    for v in w0 w1; do # no test evaluation: only the weights are compared
        $PY -c 'import json,sys; s=json.load(open(sys.argv[1])); s["dataset"].pop("test"); json.dump(s, open(sys.argv[1], "w"))' "$OUT/$v.json"
        rm -rf "${OUT:?}/$v"
        nice -n "$NICE" "$MT" train --local "$OUT/$v.json" --save "$OUT/$v" --data-root / \
            --json >"$OUT/$v.log"
        "$MT" export "$(last_ckpt "$OUT/$v")" -o "$OUT/$v.safetensors" >/dev/null
    done
    echo "initial weights (torch replay of meshtrain's init vs meshtrain's export):"
    nice -n "$NICE" $PY "$SRC/bench/char_lm_torch.py" "$OUT/w0.json" --steps 0 \
        --eval-file /dev/null --compare "$OUT/w0.safetensors" | grep -E 'kernel|embeddings' |
        sort -t: -k3 -g | tail -n 1
    echo "after 1 step (same batch, dropout mask, AdamW):"
    nice -n "$NICE" $PY "$SRC/bench/char_lm_torch.py" "$OUT/w1.json" --steps 1 \
        --eval-file /dev/null --compare "$OUT/w1.safetensors" | grep -E '"step": 1,|compare'
    grep -h '"loss"' "$OUT/w1.log"
    exit 0
fi

spec "$OUT/spec.json" "$STEPS" "$EVERY"
echo "steps $STEPS, validation every $EVERY steps, logs in $OUT; start load $(load)"
t0=$(date +%s)
(
    s=$(date +%s)
    nice -n "$NICE" "$MT" train --local "$OUT/spec.json" --save "$OUT/ckpt" --data-root / \
        --json >"$OUT/meshtrain.log" 2>"$OUT/meshtrain.err"
    echo $(($(date +%s) - s)) >"$OUT/meshtrain.seconds"
) &
mt_pid=$!
(
    s=$(date +%s)
    nice -n "$NICE" $PY "$SRC/bench/char_lm_torch.py" "$OUT/spec.json" --eval-every "$EVERY" \
        >"$OUT/torch.log" 2>"$OUT/torch.err"
    echo $(($(date +%s) - s)) >"$OUT/torch.seconds"
) &
th_pid=$!
wait "$mt_pid" || { echo "meshtrain failed: $(tail -n 3 "$OUT/meshtrain.err")"; exit 1; }
wait "$th_pid" || { echo "torch failed: $(tail -n 3 "$OUT/torch.err")"; exit 1; }
echo "both done in $(($(date +%s) - t0)) s; end load $(load)"

$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def points(path):
    p = {}
    for line in open(path):
        o = json.loads(line)
        k = o.get("step", o.get("steps"))
        v = o.get("val_loss", o.get("test_loss"))
        if v is not None and k is not None:
            p[k] = v
    return p
a, b = points(out + "/meshtrain.log"), points(out + "/torch.log")
print(f"{'step':>6} {'meshtrain':>10} {'pytorch':>10} {'ratio':>7}")
for k in sorted(set(a) & set(b)):
    print(f"{k:>6} {a[k]:>10.4f} {b[k]:>10.4f} {a[k] / b[k]:>7.4f}")
for side in ("meshtrain", "torch"):
    print(f"{side} wall {open(out + '/' + side + '.seconds').read().strip()} s")
PY

"$MT" export "$(last_ckpt "$OUT/ckpt")" -o "$OUT/char_lm.safetensors" >/dev/null
echo "meshtrain's weights evaluated by the PyTorch script: $(nice -n "$NICE" $PY \
    "$SRC/bench/char_lm_torch.py" "$OUT/spec.json" --steps 0 --load "$OUT/char_lm.safetensors" |
    tail -n 1)"
echo "sample (temperature 0.8, seed 1):"
"$MT" generate "$OUT/char_lm.safetensors" --spec "$OUT/spec.json" --prompt "The jury said" \
    --tokens 300 --temperature 0.8 --seed 1
