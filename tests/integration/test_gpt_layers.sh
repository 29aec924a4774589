#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
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
#  * the same with the head tied to the token table (GPT-2's lm_head.weight = wte.weight): one
#    tensor, equal to one device on batch=2,model=2 (vocabulary over model) and FSDP batch=4;
#  * sequence parallelism: the tied model with its positions split over 'seq' (input_layout
#    [batch, seq]) equals one device on batch=1,seq=2, batch=2,seq=2 (also with FSDP) and, with
#    the Megatron layouts, batch=1,model=2,seq=2 (Megatron-SP: the rows outside the blocks split
#    over model too; plan shows the projection's reduce-scatter and allgather, the layer
#    norm's half rows and less activation memory than plain tensor parallel); plan shows the
#    bytes the seq dim moves and refuses a block_size the seq dim does not divide (submit
#    too); as jobs on 2 workers x 2 devices
#    (batch=2,seq=2 and batch=1,model=2,seq=2) it equals one device too;
#  * `plan --layers` lists per layer what each mesh dim moves (the projection's allreduce);
#  * `plan` refuses heads that do not divide over the model dim, naming the layer and sizes;
#  * one SGD step of the same model against PyTorch's own modules (nn.Embedding,
#    nn.MultiheadAttention with a causal mask, nn.LayerNorm, nn.Linear, GELU) from the same
#    weights (gpt_torch_check.py): every gradient within 1e-4, untied and tied. Skipped (saying
#    so) when no python3 imports torch and numpy.
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
# the tied model at rate 0.2: at 0.5 its steps amplify float rounding (mesh vs one device: 7e-7
# after 1 step, 6e-6 after 6, 5e-5 after 10), at 0.1-0.2 it stays within 5e-6 after 10
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/one_tied.json" "$T/data" 0.2 10 sgd tied
for f in one one_tied; do
    "$PY" - "$T/$f.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
tied = "tied" in sys.argv[1]
s["layouts"] = {"qkv_.*kernel": ["unsharded", "model"], "fc_.*kernel": ["unsharded", "model"],
                "proj_.*kernel": ["model", "unsharded"], "out_.*kernel": ["model", "unsharded"],
                "tok.embeddings": ["model", "unsharded"]}
if not tied:  # a tied head has no kernel: the table's vocabulary axis shards its outputs
    s["layouts"]["head.kernel"] = ["unsharded", "model"]
json.dump(s, open(sys.argv[1].replace("one", "tp"), "w"))
s["layouts"] = {".*kernel": ["batch", "unsharded"], "tok.embeddings": ["unsharded", "batch"]}
json.dump(s, open(sys.argv[1].replace("one", "fsdp"), "w"))
if tied:  # positions over seq: alone, with batch, with the Megatron layouts over model
    tp = json.load(open(sys.argv[1].replace("one", "tp")))
    s["input_layout"] = ["batch", "seq"]  # with the FSDP layouts
    json.dump(s, open(sys.argv[1].replace("one", "fseq"), "w"))
    s["layouts"] = {}
    s["input_layout"] = ["batch", "seq"]
    json.dump(s, open(sys.argv[1].replace("one", "seq"), "w"))
    tp["input_layout"] = ["batch", "seq"]
    json.dump(tp, open(sys.argv[1].replace("one", "tpseq"), "w"))
PY
done
for v in one tp fsdp one_tied tp_tied fsdp_tied seq_tied bseq_tied tpseq_tied fseq_tied; do
    mesh="" spec=$v
    case $v in
    tpseq*) mesh="--mesh batch=1,model=2,seq=2" ;;
    tp*) mesh="--mesh batch=2,model=2" ;; fsdp*) mesh="--mesh batch=4" ;;
    seq*) mesh="--mesh batch=1,seq=2" ;; bseq*) mesh="--mesh batch=2,seq=2" spec=seq_tied ;;
    fseq*) mesh="--mesh batch=2,seq=2" ;;
    esac
    # shellcheck disable=SC2086
    "$MT" train --local "$T/$spec.json" $mesh --save "$T/$v" --data-root / --json >"$T/$v.log" ||
        fail "train $v: $(tail -n 3 "$T/$v.log")"
    "$MT" export "$T/$v/ckpt-10.mtc" -o "$T/$v.safetensors" >/dev/null
done
python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one.safetensors" \
    "$T/tp.safetensors" 1e-5 || fail "batch=2,model=2 differs from one device"
log "tensor parallel batch=2,model=2 equals one device after 10 steps"
python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one.safetensors" \
    "$T/fsdp.safetensors" 1e-5 || fail "FSDP on batch=4 differs from one device"
log "FSDP (every kernel and the embedding over batch=4) equals one device after 10 steps"
python3 - "$T/one_tied.safetensors" <<'PY' || fail "the tied head's export is not one table"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
names = set(json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])) - {"__metadata__"}
sys.exit(0 if "tok.embeddings" in names and not any(n.startswith("head.") for n in names) else 1)
PY
for v in tp fsdp; do
    python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one_tied.safetensors" \
        "$T/${v}_tied.safetensors" 1e-5 || fail "tied head: $v differs from one device"
done
log "tied head: one table in the export; batch=2,model=2 and FSDP batch=4 equal one device"
for v in seq bseq tpseq fseq; do
    python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one_tied.safetensors" \
        "$T/${v}_tied.safetensors" 1e-5 || fail "sequence parallel: $v differs from one device"
done
log "positions over seq: batch=1,seq=2, batch=2,seq=2 (replicated and FSDP) and batch=1,model=2,seq=2 equal one device"
out=$("$MT" plan --offline --layers --mesh batch=2,seq=2 "$T/seq_tied.json")
echo "$out" | grep -Eq '^attn_0 +attention +\(16, 16\) +[0-9.]+ KiB +- +[0-9.]+ KiB$' ||
    fail "plan --layers: attention should gather and reduce-scatter over seq: $out"
if out=$("$MT" plan --offline --mesh batch=1,seq=3 "$T/seq_tied.json" 2>&1); then
    fail "plan accepted 16 positions over seq=3"
fi
echo "$out" | grep -q "dataset.block_size: 16 positions are not divisible by the 3 devices of 'seq'" ||
    fail "plan: unexpected message: $out"
log "plan refuses 16 positions over seq=3: $out"
# Megatron-SP: with model and seq, the rows outside the blocks are split over model too
out=$("$MT" plan --offline --layers --mesh batch=1,model=2,seq=2 "$T/tpseq_tied.json")
echo "$out" | grep -Eq '^proj_0 +dense +\(16, 16\) +[0-9.]+ KiB +- +8.0 KiB +-$' ||
    fail "plan --layers: proj_0 should reduce-scatter and allgather 8 KiB over model: $out"
echo "$out" | grep -Eq '^ln1_0 +layer_norm +\(16, 16\) +6.5 KiB +- +128 B +-$' ||
    fail "plan --layers: ln1_0 should hold half the rows and sum its gradients over model: $out"
log "plan shows Megatron-SP on batch=1,model=2,seq=2: $(echo "$out" | grep -E '^(proj_0|ln1_0) ' | tr -s ' ' | paste -sd';')"
# ... and, keeping only its own rows between forward and backward (the gathered ones in the work
# area the layers share), less activation memory per device than plain tensor parallelism
act() { # SPEC MESH -> the plan's activation bytes per device
    "$MT" plan --offline --mesh "$2" "$1" | sed -n 's/.*activations \([0-9.]*\) \([KMG]*\)i*B.*/\1 \2/p' |
        awk '{ m = $2 == "K" ? 1024 : $2 == "M" ? 1048576 : $2 == "G" ? 1073741824 : 1; printf "%.0f", $1 * m }'
}
tp_act=$(act "$T/tp_tied.json" batch=1,model=2)
sp_act=$(act "$T/tpseq_tied.json" batch=1,model=2,seq=2)
[ -n "$tp_act" ] && [ -n "$sp_act" ] && [ "$sp_act" -lt "$tp_act" ] ||
    fail "plan: Megatron-SP should hold less activation memory than plain tensor parallel ($sp_act vs $tp_act bytes)"
log "plan: activations per device, batch=1,model=2: $tp_act B; Megatron-SP batch=1,model=2,seq=2: $sp_act B"

# -- the positions over seq as a job: 2 workers x 2 devices, mesh batch=2,seq=2 ---------------
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wa --data-root "$T"
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wb --data-root "$T"
wait_for 20 "two workers" workers_alive 2
jq '. + {mesh: {batch: 1, seq: 3}}' "$T/seq_tied.json" >"$T/seq3.json"
if out=$(mt submit "$T/seq3.json" 2>&1); then fail "submit accepted 16 positions over seq=3"; fi
echo "$out" | grep -q "dataset.block_size: 16 positions are not divisible by the 3 devices of 'seq'" ||
    fail "submit: unexpected message: $out"
jq '. + {mesh: {batch: 2, seq: 2}}' "$T/seq_tied.json" >"$T/seqjob.json"
jq '. + {mesh: {batch: 1, model: 2, seq: 2}}' "$T/tpseq_tied.json" >"$T/tpseqjob.json"
for v in seqjob tpseqjob; do
    job=$(mt submit "$T/$v.json")
    wait_for 120 "$job ($v) to finish" finished "$job"
    mt status --json "$job" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$job: $(mt status "$job")"
    mt status --json "$job" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
        fail "$v did not span both workers"
    mt export "$job" --format safetensors -o "$T/$v.safetensors" >/dev/null
    python3 "$SRC/tests/integration/compare_safetensors.py" "$T/one_tied.safetensors" \
        "$T/$v.safetensors" 1e-5 >"$T/$v.cmp" ||
        fail "$v differs from one device: $(cat "$T/$v.cmp")"
    log "$v: job $job ($(jq -c .mesh "$T/$v.json")) on 2 workers x 2 devices equals one device ($(sort -t= -k2 -g "$T/$v.cmp" | tail -1))"
done

# -- a tied head through export and generate: a char LM on a period-7 text continues it --------
mkdir -p "$T/gen"
python3 -c "open('$T/gen/train.txt', 'w').write('abcdefg' * 700)"
cat >"$T/gen/lm.json" <<'JSON'
{"name": "tied-lm", "seed": 3, "batch_size": 16, "epochs": 3, "optimizer": "adam",
 "learning_rate": 0.01,
 "dataset": {"format": "tokens", "train": "train.txt", "block_size": 8, "shuffle_buffer": 64},
 "model": {"layers": [
   {"type": "embedding", "input_dim": 8, "output_dim": 16, "name": "tok"},
   {"type": "position_embedding"},
   {"type": "dense", "units": 192},
   {"type": "attention", "num_heads": 2, "causal": true},
   {"type": "dense", "units": 16},
   {"type": "dense", "units": 8, "tied_to": "tok", "name": "head"}]}}
JSON
"$MT" train --local "$T/gen/lm.json" --data-root "$T" --save "$T/gen/ck" >"$T/gen.log" 2>&1 ||
    fail "train the tied LM: $(tail -5 "$T/gen.log")"
"$MT" export "$(ls "$T"/gen/ck/ckpt-*.mtc | sort -V | tail -1)" -o "$T/gen.safetensors" \
    >/dev/null || fail "export the tied LM"
out=$("$MT" generate "$T/gen.safetensors" --spec "$T/gen/lm.json" --prompt cde --tokens 16 \
    --temperature 0) || fail "generate with a tied head: $out"
[ "$out" = "cdefgabcdefgabcdefg" ] || fail "the tied LM does not continue its corpus: '$out'"
log "a tied LM trains, exports one table and generates its corpus: $out"

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
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/w0t.json" "$T/data" 1e-30 1 sgd tied
"$PY" "$SRC/tests/integration/gpt_spec.py" "$T/w1t.json" "$T/data" 1.0 1 sgd tied
for v in w0 w1 w0t w1t; do
    "$MT" train --local "$T/$v.json" --save "$T/$v" --data-root / --json >"$T/$v.log" ||
        fail "train $v: $(tail -n 3 "$T/$v.log")"
    "$MT" export "$T/$v/ckpt-1.mtc" -o "$T/$v.safetensors" >/dev/null
done
"$TPY" "$SRC/tests/integration/gpt_torch_check.py" check "$T/w1.json" "$T/w0.safetensors" \
    "$T/w1.safetensors" 1.0 || fail "one step differs from PyTorch"
log "one SGD step equals PyTorch's modules"
"$TPY" "$SRC/tests/integration/gpt_torch_check.py" check "$T/w1t.json" "$T/w0t.safetensors" \
    "$T/w1t.safetensors" 1.0 || fail "one step of the tied model differs from PyTorch"
log "one SGD step of the tied model equals PyTorch's (lm_head.weight = wte.weight)"
