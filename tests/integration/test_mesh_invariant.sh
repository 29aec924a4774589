#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_mesh_invariant.sh — "reproducibility": "mesh_invariant" on data-parallel meshes (issue #18
# item 1, docs/reproducibility.md): 50 steps of `train --local` on batch=1, 2, 4 and 8 give
# byte-identical exports (cmp) and equal state digests at every step (digest_every 1, compared
# by `meshtrain diverge` and by the whole --json output without its speed figures), for
# * the sentiment MLP (examples/dtensor_mlp_data_parallel.json: dense, batch_norm, dense softmax,
#   Adam; text pipeline, 512 generated sentences = 8 full batches per epoch),
# * the same with a dropout layer (masks keyed by global example index),
# * the same with FSDP kernels (sharded over batch; gathered per layer, and kept),
# * the Fashion-MNIST MLP (examples/fashion_mnist_mlp.json: IDX files),
# * the Fashion-MNIST CNN and residual CNN (conv2d, max_pool2d, add, concatenate, batch_norm):
#   10 steps only (a CNN step takes 10-100 ms here; 50 steps on 4 meshes would take ~1 min);
# * model and feature sharding: the tutorial's model- and spatial-parallel MLP specs on
#   batch=2,model=2, batch=1,model=2, batch=2,feature=2,model=2 and batch=1,feature=2,model=1,
#   and the Fashion-MNIST MLP's model-parallel spec on batch=2,model=2, each against the
#   data-parallel spec of its model on batch=1 (identical exports, digests at every step); the
#   CNN on batch=1,feature=2,model=2 with the first conv's filters and the second's input
#   channels over `feature` and the second's filters over `model`, 10 steps.
# * sequence parallelism: a sequence model without attention (embeddings, gelu dense, layer_norm,
#   a tied head; 16 positions) on batch=1,seq=2, batch=2,seq=2 and batch=1,seq=4 against
#   batch=1,seq=1, 20 steps (position leaves); char_lm on split positions refused (attention).
# * height bands: the Fashion-MNIST CNN spatial spec on batch=2,space=2 and batch=1,space=2 against
#   batch=1,space=1, 10 steps (conv2d, pooling and batch norm in height leaves); likewise a
#   ResNet-like stem (a 3x3 stride-2 max pool overlapping the bands, a dense per pixel, layer_norm),
#   and the CNN spatial spec with conv channels over `model` together with the bands.
# * the transformer kinds: examples/char_lm.json cut to 2 blocks, 32 wide, 16 positions (embedding,
#   position_embedding, dropout, layer_norm, attention, gelu dense, adds; AdamW, global_clipnorm)
#   on batch=1, 2, 4, its Megatron layouts (char_lm_tensor_parallel.json) and its residual
#   stream's features split over `model` on batch=2,model=2, 20 steps: identical exports, digests
#   at every step; with its head tied to the token table on batch=1, 2, 4, the vocabulary over
#   `model` on batch=2,model=2 and the table sharded over `batch` (FSDP, gathered per layer on
#   batch=2 and 4, and kept on batch=2), 10 steps.
# * model sharding across processes: the Fashion-MNIST MLP's model-parallel spec as a job on
#   batch=1,model=2 over 2 workers x 1 device (a coordinator and two workers), 50 steps: the
#   export is cmp-identical to the MLP's on batch=1, and the digests the job reported equal at
#   every step (`meshtrain diverge JOB FILE`).
# A checkpoint of batch=2 resumed on batch=4 ends byte-identical to an uninterrupted batch=1 run.
# fixed_mesh (the default) on the same sentiment spec differs between batch=1 and batch=8 (what
# the mode fixes). Refusals: a batch dimension that cannot keep the bits (INVALID_ARGUMENT with
# the sizes that can), a dense kernel, conv2d filters and conv2d input channels split over 16
# (48 units, 32 filters, 32 channels: 8 leaves) and an elastic range that allows 16 replicas
# (INVALID_ARGUMENT).
# Short last batches (520 sentences, batch 64: a step of one leaf) keep the bits on every mesh.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1
STEPS=50

mkdir -p "$T/ex/data"
gen_text "$T/ex/data/sentiment_train.tsv" 512 1
gen_text "$T/ex/data/sentiment_test.tsv" 64 2

# variant NAME: a copy of a seed spec in $T/ex with mesh_invariant, digest_every 1, no own
# checkpoint cadence (one at the end), and the variant's change
variant() {
    python3 - "$SRC" "$T/ex" "$1" <<'PY'
import json, sys
src, ex, name = sys.argv[1:]
base = {"fmnist": "fashion_mnist_mlp", "cnn": "fashion_mnist_cnn",
        "rescnn": "fashion_mnist_residual_cnn", "cnn_mp": "fashion_mnist_cnn",
        "cnn_sp": "fashion_mnist_cnn_spatial", "stem_sp": "fashion_mnist_cnn_spatial",
        "cnn_sp_ch": "fashion_mnist_cnn_spatial",
        "mp": "dtensor_mlp_model_parallel", "sp": "dtensor_mlp_spatial_parallel",
        "fmnist_mp": "fashion_mnist_mlp_model_parallel", "lm": "char_lm",
        "lm_tp": "char_lm_tensor_parallel",
        "lm_fs": "char_lm", "lm_tied": "char_lm", "lm_tied_v": "char_lm", "lm_tied_fs": "char_lm",
        "lm_tied_fk": "char_lm", "lm_seq": "char_lm",
        "lm_seq_attn": "char_lm"}.get(name, "dtensor_mlp_data_parallel")
s = json.load(open(f"{src}/examples/{base}.json"))
s["reproducibility"] = "mesh_invariant" if name != "fixed" else "fixed_mesh"
s["digest_every"] = 1
s.pop("checkpoint", None)
for k in ("test_images", "test_labels"):  # the IDX specs: no test-set evaluation
    s["dataset"].pop(k, None)
if name == "dropout":
    s["model"]["layers"].insert(1, {"type": "dropout", "rate": 0.3})
if name in ("fsdp", "fsdp_keep"):
    s["layouts"] = {"dense_1\\.kernel": ["batch", "unsharded"],
                    "dense_2\\.kernel": ["batch", "unsharded"]}
if name == "cnn_mp":  # conv2d_1's filters over feature, conv2d_2's input channels too (no
    # gather between them) and its filters over model (its dcols summed over model)
    s["layouts"] = {"conv2d_1\\.kernel": ["unsharded", "unsharded", "unsharded", "feature"],
                    "conv2d_2\\.kernel": ["unsharded", "unsharded", "feature", "model"]}
if name == "stem_sp":  # a ResNet-like stem on bands: a 3x3 stride-2 max pool whose windows overlap
    # across the bands (26 rows in bands of 13 -> 12 rows), a dense per pixel and a layer_norm
    s["model"]["layers"] = [
        {"type": "conv2d", "filters": 8, "kernel_size": 3, "use_bias": False},
        {"type": "batch_norm"}, {"type": "activation", "activation": "relu"},
        {"type": "max_pool2d", "pool_size": 3, "strides": 2},
        {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": "same",
         "activation": "relu"},
        {"type": "dense", "units": 8, "activation": "tanh"}, {"type": "layer_norm"},
        {"type": "flatten"}, {"type": "dense", "units": 10}]
if name == "cnn_sp_ch":  # channels split together with the bands: conv2d_2's filters over `model`
    # (batch norm and relu on channel-sharded bands), conv2d_3 contracting them (no gather)
    s["layouts"] = {"conv2d_2\\.kernel": ["unsharded", "unsharded", "unsharded", "model"],
                    "conv2d_3\\.kernel": ["unsharded", "unsharded", "model", "unsharded"]}
if name == "fsdp_keep":
    s["fsdp"] = {"reshard_after_forward": False}
if name == "lm_fs":  # the residual stream's features over `model` (its layer norms split)
    s["layouts"] = {"tok.embeddings": ["unsharded", "model"],
                    "qkv_.*kernel": ["model", "unsharded"], "proj_.*kernel": ["unsharded", "model"],
                    "fc_.*kernel": ["model", "unsharded"], "out_.*kernel": ["unsharded", "model"],
                    "head.kernel": ["model", "unsharded"]}
# the head's kernel is the token table (GPT-2's lm_head)
if name in ("lm_tied", "lm_tied_v", "lm_tied_fs", "lm_tied_fk"):
    s["model"]["layers"][-1]["tied_to"] = "tok"
if name == "lm_tied_v":  # the vocabulary over `model`
    s["layouts"] = {"tok\\.embeddings": ["model", "unsharded"]}
if name in ("lm_tied_fs", "lm_tied_fk"):  # the table over `batch` (FSDP): per layer, and kept
    s["layouts"] = {"tok\\.embeddings": ["batch", "unsharded"]}
if name == "lm_tied_fk":
    s["fsdp"] = {"reshard_after_forward": False}
if name == "lm_seq":  # no attention: embeddings, a gelu dense per position, layer_norm, a tied head
    s["model"]["layers"] = [
        {"type": "embedding", "input_dim": 96, "output_dim": 32, "name": "tok"},
        {"type": "position_embedding", "name": "pos"},
        {"type": "dense", "units": 32, "activation": "gelu", "name": "fc"},
        {"type": "layer_norm", "name": "ln"},
        {"type": "dense", "units": 96, "tied_to": "tok", "name": "head"}]
if name in ("lm_seq", "lm_seq_attn"):  # the positions over `seq`
    s["input_layout"] = ["batch", "seq"]
    s["dataset"].update({"train": "data/lm_train.txt", "block_size": 16})
    s["dataset"].pop("test", None)
    s["model"]["input_shape"] = [16]
# char_lm, 2 of its 4 blocks, 32 wide, 16 positions
if name in ("lm", "lm_tp", "lm_fs", "lm_tied", "lm_tied_v", "lm_tied_fs", "lm_tied_fk",
            "lm_seq_attn"):
    s["dataset"].update({"train": "data/lm_train.txt", "block_size": 16})
    s["dataset"].pop("test", None)
    s["model"]["input_shape"] = [16]
    width = {"tok": 32, "qkv": 96, "proj": 32, "fc": 128, "out": 32}
    layers = []
    for l in s["model"]["layers"]:
        if l["name"][-2:] in ("_2", "_3"):
            continue
        key = l["name"].split("_")[0]
        if key == "tok":
            l["output_dim"] = width[key]
        elif key in width:
            l["units"] = width[key]
        layers.append(l)
    s["model"]["layers"] = layers
json.dump(s, open(f"{ex}/{name}.json", "w"))
PY
}

# run NAME MESH [STEPS]: STEPS steps, the --json lines without their speed, the export of the last
# (MESH: a batch size, or a whole mesh "batch=2,model=2", whose files are NAME-batch-2_model-2)
run() {
    local out="$T/$1-$(echo "$2" | tr ',=' '_-')" STEPS=${3:-$STEPS} mesh=$2
    case $mesh in *=*) ;; *) mesh="batch=$mesh" ;; esac
    (cd "$T/ex" && "$BIN/meshtrain" train --local "$1.json" --mesh "$mesh" --epochs 7 \
        --steps $STEPS --json --save "$out" >"$out.json" 2>"$out.log") ||
        fail "train $1 on batch=$2: $(tail -3 "$out.log")"
    sed 's/"examples_per_sec":[0-9.e+-]*,//' "$out.json" >"$out.bits"
    [ "$(grep -c '"digest"' "$out.bits")" -ge $STEPS ] || fail "$1 batch=$2: a digest per step"
    "$BIN/meshtrain" export "$out/ckpt-$STEPS.mtc" -o "$out.safetensors" >/dev/null ||
        fail "export $1 batch=$2"
}

# same_bits NAME STEPS REF MESH...: NAME on every MESH, STEPS steps, gives the export and the
# digests of the run whose files are $T/REF.* (identical exports, digests at every step)
same_bits() {
    local name=$1 steps=$2 ref=$3 m tag
    shift 3
    for m in "$@"; do
        run "$name" "$m" "$steps"
        tag=$(echo "$m" | tr ',=' '_-')
        cmp "$T/$ref.safetensors" "$T/$name-$tag.safetensors" ||
            fail "$name: the export of $m differs from $ref"
        "$BIN/meshtrain" diverge "$T/$ref.json" "$T/$name-$tag.json" >"$T/div.out" ||
            fail "$name $m: $(cat "$T/div.out")"
    done
}

# the transformer kinds (embedding, position_embedding, dropout, layer_norm, attention, gelu
# dense, residual adds; AdamW with global_clipnorm): char_lm cut down ("lm"), on batch=1, 2, 4
awk -F'\t' '{ print $2 }' "$T/ex/data/sentiment_train.tsv" >"$T/ex/data/lm_train.txt"
# and a dense head tied to the token table (GPT-2's lm_head: its gradient and the embedding's
# meet per leaf), "lm_tied"
for name in sentiment dropout fsdp fsdp_keep fmnist cnn rescnn lm lm_tied; do
    variant "$name"
    steps=$STEPS meshes="1 2 4 8"
    case $name in cnn | rescnn | lm_tied) steps=10 ;; esac
    case $name in lm*) meshes="1 2 4" ;; esac
    [ "$name" = lm ] && steps=20
    for b in $meshes; do
        run "$name" "$b" "$steps"
        [ "$b" = 1 ] && continue
        cmp "$T/$name-1.safetensors" "$T/$name-$b.safetensors" ||
            fail "$name: the export of batch=$b differs from batch=1"
        "$BIN/meshtrain" diverge "$T/$name-1.json" "$T/$name-$b.json" >"$T/div.out" ||
            fail "$name batch=$b: $(cat "$T/div.out")"
        cmp "$T/$name-1.bits" "$T/$name-$b.bits" ||
            fail "$name: the --json lines of batch=$b differ from batch=1"
    done
    log "$name: batch=${meshes// /,} byte-identical after $steps steps, equal digests at every step"
done

# model and feature sharding: the tutorial's model-parallel spec (dense_1's output columns and
# dense_2's contraction over `model`, batch norm on features sharded over `model`), its
# spatial-parallel spec (also dense_1's contraction over `feature`, the input sharded over it) and
# the Fashion-MNIST MLP's model-parallel spec give the bits of the data-parallel spec with the
# same model on batch=1 (only the layouts differ): identical exports, digests at every step;
# so does the CNN with the first conv's filters over `feature` (its output channels sharded
# through max_pool2d into the second conv), the second conv's input channels over `feature` (no
# gather between them: a split contraction) and its filters over `model` (a split output: its
# dcols summed over `model`; its channels gathered by flatten, the dense layers replicated; 10
# steps: a CNN step is the slow part of this test), and
# char_lm's
# Megatron layouts (char_lm_tensor_parallel: heads, fc units and the vocabulary over `model`)
# and its residual stream's features over `model` (layer norms, position table and embedding
# features split; the dense kernels alternate contraction and output splits), and the tied head
# with the vocabulary over `model` (the table's rows, the head's outputs) and with the table
# sharded over `batch` (FSDP: its gradient, both parts met per leaf in the embedding's backward,
# reduce-scattered once; gathered per layer, and kept)
for c in "mp sentiment $STEPS batch=2,model=2 batch=1,model=2" \
    "sp sentiment $STEPS batch=2,feature=2,model=2 batch=1,feature=2,model=1" \
    "fmnist_mp fmnist $STEPS batch=2,model=2" "cnn_mp cnn 10 batch=1,feature=2,model=2" \
    "lm_tp lm 20 batch=2,model=2" "lm_fs lm 20 batch=2,model=2" \
    "lm_tied_v lm_tied 10 batch=2,model=2" "lm_tied_fs lm_tied 10 batch=2 batch=4" \
    "lm_tied_fk lm_tied 10 batch=2"; do
    set -- $c
    name=$1 ref=$2 steps=$3
    shift 3
    variant "$name"
    same_bits "$name" "$steps" "$ref-1" "$@"
    log "$name: $* byte-identical to $ref on batch=1 after $steps steps, equal digests at every step"
done

# height bands: the CNN spatial spec (conv2d over 28 rows in 4 height leaves, max_pool2d, conv2d
# and batch_norm over 14 rows in 2, a strided conv2d) on batch=2,space=2 and batch=1,space=2
# gives the bits of batch=1,space=1 (no bands), 10 steps
# against NAME STEPS MESH0 MESH...: NAME on MESH0, then the same bits on every MESH
against() {
    local name=$1 steps=$2 m0=$3
    shift 3
    variant "$name"
    run "$name" "$m0" "$steps"
    same_bits "$name" "$steps" "$name-$(echo "$m0" | tr ',=' '_-')" "$@"
}
against cnn_sp 10 batch=1,space=1 batch=2,space=2 batch=1,space=2
log "cnn_sp: batch=2,space=2 and batch=1,space=2 byte-identical to batch=1,space=1 after 10 steps"
# and a ResNet-like stem: conv2d "valid" and batch_norm over 26 rows, a 3x3 stride-2 max pool whose
# windows overlap across the bands (dx from a halo of dy), a conv2d, a per-pixel dense and a
# layer_norm over 12 rows (their gradients in height leaves), flatten, dense
against stem_sp 10 batch=1,space=1 batch=2,space=2 batch=1,space=2
log "stem_sp: batch=2,space=2 and batch=1,space=2 byte-identical to batch=1,space=1 after 10 steps"
# and the CNN spatial spec with conv channels split together with the bands (the filters of
# conv2d_2 and the input channels of conv2d_3 over `model`) gives cnn_sp's bits on one device
variant cnn_sp_ch
same_bits cnn_sp_ch 10 cnn_sp-batch-1_space-1 batch=1,space=2,model=2 batch=2,space=2,model=2
log "cnn_sp_ch: batch=1,space=2,model=2 and batch=2,space=2,model=2 byte-identical to cnn_sp on batch=1,space=1 after 10 steps"

# sequence parallelism: a sequence model without attention (embeddings, a gelu dense, layer_norm,
# a head tied to the token table) with its 16 positions over `seq` (8 position leaves in the
# zig-zag canonical order, the seq allreduce inside the leaf trees) on batch=1,seq=2,
# batch=2,seq=2 and batch=1,seq=4 gives the bits of batch=1,seq=1, 20 steps; char_lm (attention)
# on split positions is refused (UNIMPLEMENTED naming the layer)
against lm_seq 20 batch=1,seq=1 batch=1,seq=2 batch=2,seq=2 batch=1,seq=4
log "lm_seq: batch=1,seq=2, batch=2,seq=2 and batch=1,seq=4 byte-identical to batch=1,seq=1 after 20 steps"
against lm_seq_attn 20 batch=1,seq=1 batch=1,seq=2 batch=2,seq=2 batch=1,seq=4
log "lm_seq_attn: char_lm cut down (attention) on batch=1,seq=2, batch=2,seq=2, batch=1,seq=4 byte-identical to batch=1,seq=1 after 20 steps"

# model sharding across processes: the Fashion-MNIST MLP's model-parallel spec as a job on
# batch=1,model=2 over 2 workers x 1 device (dense_1's units and dense_2's contraction split
# between the processes, so the allreduces over `model` cross them), 50 steps: the export is
# cmp-identical to the MLP's on batch=1 and the digests the job reported equal at every step
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off
for w in w1 w2; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$w" \
        --data-root /usr/share/datasets
done
wait_for 20 "two workers" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' workers --json | jq -e '.workers | length == 2'"
jq ". + {steps: $STEPS}" "$T/ex/fmnist_mp.json" >"$T/ex/fmnist_mp_job.json"
JOB=$(mt submit "$T/ex/fmnist_mp_job.json" --mesh batch=1,model=2) || fail "submit fmnist_mp"
wait_for 120 "$JOB to end" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $JOB | jq -e '.state | IN(\"SUCCEEDED\", \"FAILED\", \"CANCELLED\")'"
mt status --json "$JOB" >"$T/job.st"
jq -e '.state == "SUCCEEDED" and ([.placement[].worker_id] | unique | length == 2)' "$T/job.st" \
    >/dev/null || fail "$JOB should succeed on both workers: $(jq -c '{state, placement}' "$T/job.st")"
mt diverge "$JOB" "$T/fmnist-1.json" >"$T/div.out" || fail "$JOB: $(cat "$T/div.out")"
grep -q "^no divergence: the digests of all $STEPS common steps (1..$STEPS) are equal$" "$T/div.out" ||
    fail "$JOB: $(cat "$T/div.out")"
mt export "$JOB" -o "$T/job.safetensors" >/dev/null 2>"$T/export.err" || fail "export: $(cat "$T/export.err")"
cmp "$T/fmnist-1.safetensors" "$T/job.safetensors" || fail "$JOB: the export differs from fmnist on batch=1"
log "fmnist_mp as a job on batch=1,model=2 over 2 workers: $(cat "$T/div.out"); the export equals batch=1's"

# a restore onto another mesh: 10 steps on batch=2, resumed on batch=4 to step 20, ends with the
# checkpoint of 20 uninterrupted steps on batch=1 (same state digests over steps 11..20)
(cd "$T/ex" && "$BIN/meshtrain" train --local sentiment.json --mesh batch=2 --steps 10 --json \
    --save "$T/res-a" >"$T/res-a.json" 2>"$T/res-a.log" &&
    "$BIN/meshtrain" train --local sentiment.json --mesh batch=4 --resume "$T/res-a/ckpt-10.mtc" \
        --steps 20 --json --save "$T/res-b" >"$T/res-b.json" 2>"$T/res-b.log" &&
    "$BIN/meshtrain" train --local sentiment.json --mesh batch=1 --steps 20 --json \
        --save "$T/res-c" >"$T/res-c.json" 2>"$T/res-c.log") || fail "resume runs: $(tail -3 "$T"/res-*.log)"
cmp "$T/res-b/ckpt-20.mtc" "$T/res-c/ckpt-20.mtc" || fail "batch=2 -> batch=4 resume differs from batch=1"
"$BIN/meshtrain" diverge "$T/res-b.json" "$T/res-c.json" >"$T/div.out" || fail "resume: $(cat "$T/div.out")"
log "restore onto another mesh: batch=2 then batch=4 equals batch=1 after 20 steps"

# the default mode differs across meshes (batch=8 holds one leaf per device, batch=1 does not)
variant fixed
run fixed 1
run fixed 8
if cmp -s "$T/fixed-1.safetensors" "$T/fixed-8.safetensors"; then
    fail "fixed_mesh: batch=1 and batch=8 gave the same bits (the test would prove nothing)"
fi

# refusals, and what plan says
cd "$T/ex"
"$BIN/meshtrain" plan sentiment.json --mesh batch=4 >"$T/plan.out"
grep -q "repro     mesh_invariant: 8 leaves of 8 examples; batch dimension sizes that keep the bits: 1, 2, 4, 8" \
    "$T/plan.out" || fail "plan: $(cat "$T/plan.out")"
expect_fail 4 "needs the batch dimension's size (3) to be a power of two dividing the 8 leaves" \
    "$BIN/meshtrain" train --local sentiment.json --mesh batch=3 --steps 1
expect_fail 4 "model.layers\[0\] (dense_1): reproducibility: \"mesh_invariant\" needs mesh dimension 'model' (size 16), which splits the kernel's axis 1 (48 wide), to be a power of two dividing its 8 leaves" \
    "$BIN/meshtrain" plan mp.json --mesh batch=1,model=16
python3 -c "
import json; s = json.load(open('cnn.json'))
s['layouts'] = {'conv2d_2\\\\.kernel': ['unsharded', 'unsharded', 'model', 'unsharded']}
json.dump(s, open('cnn_kin.json', 'w'))"
expect_fail 4 "model.layers\[2\] (conv2d_2): reproducibility: \"mesh_invariant\" needs mesh dimension 'model' (size 16), which splits the kernel's axis 2 (32 wide), to be a power of two dividing its 8 leaves" \
    "$BIN/meshtrain" plan cnn_kin.json --mesh batch=1,model=16
expect_fail 4 "model.layers\[0\] (conv2d_1): reproducibility: \"mesh_invariant\" needs mesh dimension 'feature' (size 16), which splits the kernel's axis 3 (32 wide), to be a power of two dividing its 8 leaves" \
    "$BIN/meshtrain" plan cnn_mp.json --mesh batch=1,feature=16,model=1
python3 -c "
import json; s = json.load(open('sentiment.json'))
s['elastic'] = {'min_batch': 2}; json.dump(s, open('elastic.json', 'w'))"
expect_fail 4 "elastic: reproducibility: \"mesh_invariant\" needs every replica count the job may resume on (those in \[2, 65536\] dividing batch_size 64) to keep the bits; 16, 32, 64 do not" \
    "$BIN/meshtrain" plan elastic.json
# 520 sentences: the 9th step of every epoch has 8 examples, one leaf: the pipeline gives it
# whole to the first replica and nothing to the others, on every mesh the same bits
mkdir -p short/data
gen_text short/data/sentiment_train.tsv 520 1
cp data/sentiment_test.tsv short/data/
cp sentiment.json short/
for b in 1 2 4 8; do
    (cd short && "$BIN/meshtrain" train --local sentiment.json --mesh "batch=$b" --steps 20 \
        --json --save "ck-$b" >"out-$b.json" 2>"out-$b.log") || fail "short batch=$b: $(cat short/out-$b.log)"
    sed 's/"examples_per_sec":[0-9.e+-]*,//' "short/out-$b.json" >"short/bits-$b"
    cmp short/bits-1 "short/bits-$b" || fail "short batches: the --json lines of batch=$b differ"
    cmp short/ck-1/ckpt-20.mtc "short/ck-$b/ckpt-20.mtc" || fail "short batches: ckpt of batch=$b"
done
log "short last batches (one leaf of 8): batch=1,2,4,8 byte-identical after 20 steps"
log "refusals: batch=3, a dense kernel, conv2d filters and conv2d channels split over 16, an elastic range holding 16"
