#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_gpt_layers.sh — the transformer layers (issue #23) end to end through `train --local`:
#  * a small GPT (gpt_spec.py: embeddings, 2 causal attention blocks, gelu MLPs, residual adds,
#    layer norms, a dense head; a label per token) trains 10 SGD steps on one device and on the
#    mesh batch=2,model=2 with Megatron tensor-parallel layouts (QKV and first MLP kernels on
#    their output axis, projections on their input axis, the embedding's and the head's
#    vocabulary over model), and on batch=4 with every kernel and the embedding table sharded
#    over batch (FSDP): the exports agree within 1e-5 of each tensor's largest value. (SGD: the key bias's gradient is
#    zero in exact arithmetic — softmax ignores a constant per row — so its float gradient is
#    rounding noise, which Adam scales up to full-size steps on any two meshes alike.)
#  * `plan --layers` lists per layer what each mesh dim moves (the projection's allreduce);
#  * `plan` refuses heads that do not divide over the model dim, naming the layer and sizes;
#  * one SGD step of the same model against PyTorch's own modules (nn.Embedding,
#    nn.MultiheadAttention with a causal mask, nn.LayerNorm, nn.Linear, GELU) from the same
#    weights (gpt_torch_check.py): every gradient within 1e-4. Skipped (saying so) when no
#    python3 imports torch and numpy.
source "$(dirname "$0")/lib.sh"
MT="$BIN/meshtrain"
PY=""
for p in ${MT_PYTHON:-} python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "test_gpt_layers: skipped (no python3 with numpy)"; exit 0; }
export OPENBLAS_NUM_THREADS=1
mkdir -p "$T/data"
"$PY" "$SRC/tests/integration/gpt_torch_check.py" data "$T/data" 2>/dev/null ||
    "$PY" - "$T/data" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(7)
seq = rng.integers(0, 14, size=(8, 17))
np.save(sys.argv[1] + "/x.npy", seq[:, :16].astype(np.int32))
np.save(sys.argv[1] + "/y.npy", seq[:, 1:].astype(np.int32))
PY

# -- tensor parallel on a 2x2 mesh equals one device -------------------------------------------
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/one.json" "$T/data" 0.5 10 sgd
"$PY" - "$T/one.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["layouts"] = {"qkv_.*kernel": ["unsharded", "model"], "fc_.*kernel": ["unsharded", "model"],
                "proj_.*kernel": ["model", "unsharded"], "out_.*kernel": ["model", "unsharded"],
                "tok.embeddings": ["model", "unsharded"], "head.kernel": ["unsharded", "model"]}
json.dump(s, open(sys.argv[1].replace("one", "tp"), "w"))
s["layouts"] = {".*kernel": ["batch", "unsharded"], "tok.embeddings": ["unsharded", "batch"]}
json.dump(s, open(sys.argv[1].replace("one", "fsdp"), "w"))
PY
for v in one tp fsdp; do
    mesh=""
    [ $v = tp ] && mesh="--mesh batch=2,model=2"
    [ $v = fsdp ] && mesh="--mesh batch=4"
    # shellcheck disable=SC2086
    "$MT" train --local "$T/$v.json" $mesh --save "$T/$v" --data-root / --json >"$T/$v.log" ||
        fail "train $v: $(tail -n 3 "$T/$v.log")"
    "$MT" export "$T/$v/ckpt-10.mtc" -o "$T/$v.safetensors" >/dev/null
done
python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one.safetensors" \
    "$T/tp.safetensors" 1e-5 || fail "batch=2,model=2 differs from one device"
log "tensor parallel batch=2,model=2 equals one device after 10 steps"
python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one.safetensors" \
    "$T/fsdp.safetensors" 1e-5 || fail "FSDP on batch=4 differs from one device"
log "FSDP (every kernel and the embedding over batch=4) equals one device after 10 steps"

# -- plan --layers: per layer, the output shape, buffers and what each mesh dim moves ----------
out=$("$MT" plan --offline --layers --mesh batch=2,model=2 "$T/tp.json")
echo "$out" | grep -Eq '^attn_0 +attention +\(16, 16\) +[0-9.]+ KiB +- +-$' ||
    fail "plan --layers: no attention line without collectives: $out"
echo "$out" | grep -Eq '^proj_0 +dense +\(16, 16\) +[0-9.]+ KiB +- +4.0 KiB$' ||
    fail "plan --layers: the row-parallel projection should allreduce 4 KiB over model: $out"

# -- a layout that splits heads is refused by plan, naming the layer and the sizes ------------
"$PY" - "$T/one.json" "$T/heads.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["mesh"] = {"batch": 1, "model": 4}
s["layouts"] = {"qkv_.*kernel": ["unsharded", "model"], "proj_.*kernel": ["model", "unsharded"]}
json.dump(s, open(sys.argv[2], "w"))
PY
if out=$("$MT" plan --offline "$T/heads.json" 2>&1); then fail "plan accepted 2 heads over model=4"; fi
echo "$out" | grep -q "model.layers\[4\] (attn_0): num_heads 2 is not divisible by the 4 devices of 'model'" ||
    fail "plan: unexpected message: $out"
log "plan refuses 2 heads over model=4: $out"

# -- one step against PyTorch -------------------------------------------------------------------
TPY=$(torch_python)
if [ -z "$TPY" ]; then
    echo "test_gpt_layers: PyTorch part skipped (no python3 imports torch and numpy)"
    exit 0
fi
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/w0.json" "$T/data" 1e-30
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/w1.json" "$T/data" 1.0
for v in w0 w1; do
    "$MT" train --local "$T/$v.json" --save "$T/$v" --data-root / --json >"$T/$v.log" ||
        fail "train $v: $(tail -n 3 "$T/$v.log")"
    "$MT" export "$T/$v/ckpt-1.mtc" -o "$T/$v.safetensors" >/dev/null
done
"$TPY" "$SRC/tests/integration/gpt_torch_check.py" check "$T/w1.json" "$T/w0.safetensors" \
    "$T/w1.safetensors" 1.0 || fail "one step differs from PyTorch"
log "one SGD step equals PyTorch's modules"
