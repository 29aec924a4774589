#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# char_lm_convergence.sh [BUILD_DIR] — the convergence acceptance of issue #23: trains
# examples/char_lm.json with meshtrain (`train --local`, one device, one OpenBLAS thread) and
# the same model in PyTorch (bench/char_lm_torch.py, one thread: the same initial weights,
# batches, dropout masks, AdamW, schedule and clipnorm), side by side, and prints both
# validation losses (the whole of brown_validation.txt, the example's test file, after the last
# step), their ratio, the wall times and the load average; then exports meshtrain's model and
# evaluates each side's own final weights with the PyTorch script (the same ids, one forward:
# meshtrain's export loaded; PyTorch's weights saved by its run, reloaded, which must reproduce
# its in-run figure to the last digit), prints max|a-b| / max|b| per tensor between the two
# sides' weights, and `generate`s a sample from meshtrain's model.
# Env:
#   CONV_STEPS       steps (default 3000, the example's); the schedule's decay_steps become
#                    CONV_STEPS - warmup_steps so a shorter run still ends its cosine decay
#   CONV_EVAL_EVERY  steps between PyTorch's validations (default CONV_STEPS: only at the end;
#                    meshtrain evaluates the test file at epoch ends and after the last step)
#   CONV_OUT         directory for the spec, logs, checkpoints and export (default: a new one
#                    under /tmp; kept)
#   CONV_NICE        nice level of both runs (default 10)
#   CONV_VAL_SEQS    evaluate only the first N sequences of the validation file (both sides;
#                    default: all 4,683) — for a short check
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
if [ -n "${CONV_VAL_SEQS:-}" ]; then # the first N sequences of the validation file, both sides
    $PY - "$OUT/spec.json" "$OUT/validation.txt" "$CONV_VAL_SEQS" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ds = s["dataset"]
open(sys.argv[2], "wb").write(open(ds["test"], "rb").read()[:int(sys.argv[3]) * ds["block_size"] + 1])
ds["test"] = sys.argv[2]
json.dump(s, open(sys.argv[1], "w"), indent=1)
PY
fi
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
        --save "$OUT/torch.safetensors" >"$OUT/torch.log" 2>"$OUT/torch.err"
    echo $(($(date +%s) - s)) >"$OUT/torch.seconds"
) &
th_pid=$!
wait "$mt_pid" || { echo "meshtrain failed: $(tail -n 3 "$OUT/meshtrain.err")"; exit 1; }
wait "$th_pid" || { echo "torch failed: $(tail -n 3 "$OUT/torch.err")"; exit 1; }
echo "both done in $(($(date +%s) - t0)) s; end load $(load)"

# Each side's loss from its own final weights, through one evaluation (the PyTorch script's
# forward on the same ids): meshtrain's export loaded, and PyTorch's trained model (its in-run
# figure; its saved weights reloaded must give the very same double). Then the two sets of
# weights tensor by tensor.
"$MT" export "$(last_ckpt "$OUT/ckpt")" -o "$OUT/meshtrain.safetensors" >/dev/null
for w in meshtrain torch; do
    nice -n "$NICE" $PY "$SRC/bench/char_lm_torch.py" "$OUT/spec.json" --steps 0 \
        --load "$OUT/$w.safetensors" >"$OUT/eval-$w.log"
done
nice -n "$NICE" $PY "$SRC/bench/char_lm_torch.py" "$OUT/spec.json" --steps 0 \
    --load "$OUT/torch.safetensors" --compare "$OUT/meshtrain.safetensors" \
    --eval-file /dev/null >"$OUT/compare.log"

$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def lines(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
def points(path):
    p = {}
    for o in lines(path):
        k = o.get("step", o.get("steps"))
        v = o.get("val_loss", o.get("test_loss"))
        if v is not None and k is not None:
            p[k] = v
    return p
a, b = points(out + "/meshtrain.log"), points(out + "/torch.log")
print("in-run evaluations (meshtrain: its own test evaluation; PyTorch: its trained model):")
print(f"{'step':>6} {'meshtrain':>20} {'pytorch':>20} {'ratio':>7}")
for k in sorted(set(a) & set(b)):
    print(f"{k:>6} {a[k]!r:>20} {b[k]!r:>20} {a[k] / b[k]:>7.4f}")
final = lambda path: [o for o in lines(path) if o.get("final")][-1]
mt, th = final(out + "/eval-meshtrain.log"), final(out + "/eval-torch.log")
trained = final(out + "/torch.log")
print("validation loss of each side's final weights, evaluated by the PyTorch script:")
print(f"  meshtrain (its export, {mt['loaded']}): {mt['val_loss']!r}")
print(f"  PyTorch (its trained model, in the run):    {trained['val_loss']!r}")
print(f"  PyTorch (its saved weights, {th['loaded']}): {th['val_loss']!r}"
      f" ({'the same double' if th['val_loss'] == trained['val_loss'] else 'DIFFERS from the run'})")
print(f"  ratio meshtrain / PyTorch: {mt['val_loss'] / trained['val_loss']:.6f}")
rel = [o for o in lines(out + "/compare.log") if "tensor" in o]
worst = max(rel, key=lambda o: o["max_rel"])
print(f"weights, max|a-b| / max|b| per tensor (a PyTorch, b meshtrain), {len(rel)} tensors:")
for o in rel:
    print(f"  {o['tensor']:<24} {o['max_rel']:.3e}")
print(f"  worst {worst['tensor']}: {worst['max_rel']:.3e}")
if mt["val_loss"] == trained["val_loss"] and worst["max_rel"] > 0:
    print("  NOTE: equal losses from different weights")
for side in ("meshtrain", "torch"):
    print(f"{side} wall {open(out + '/' + side + '.seconds').read().strip()} s")
PY

echo "sample (temperature 0.8, seed 1):"
"$MT" generate "$OUT/meshtrain.safetensors" --spec "$OUT/spec.json" --prompt "The jury said" \
    --tokens 300 --temperature 0.8 --seed 1
