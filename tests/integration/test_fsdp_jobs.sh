# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_fsdp_jobs.sh — weights sharded over the batch dimension (FSDP) and graph models as real
# jobs: the DTensor Keras tutorial's LayoutMap spec (examples/dtensor_keras_layout_map.json) and
# a residual MLP with FSDP kernels, each 10 steps on 2 workers x 2 devices (mesh batch=4), equal
# one device (`train --local --mesh batch=1`) within 1e-5 of each tensor's largest value; the
# Fashion-MNIST CNN on height bands (examples/fashion_mnist_cnn_spatial.json, space=2,batch=2,
# halo rows between the workers) equals its one-device run the same way; an
# FSDP checkpoint restores onto a replicated spec and continues where the uninterrupted FSDP run
# goes (checkpoints hold global tensors).
source "$(dirname "$0")/lib.sh"
CMP="python3 $SRC/tests/integration/compare_safetensors.py"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wa
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wb
wait_for 20 "two workers" workers_alive 2

# job_vs_local NAME SPEC [MESH ONE]: 10 steps as a 2x2 job on MESH (default {"batch": 4}) and on
# one device (--mesh ONE, default batch=1), exports compared
job_vs_local() {
    local name=$1 spec=$2 mesh=${3:-'{"batch": 4}'} one=${4:-batch=1} job
    jq --argjson m "$mesh" '. + {steps: 10, mesh: $m} | del(.epochs) | del(.checkpoint)' "$spec" \
        >"$T/$name.json"
    job=$(mt submit "$T/$name.json")
    wait_for 120 "$job ($name) to finish" finished "$job"
    mt status --json "$job" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$job: $(mt status "$job")"
    mt status --json "$job" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
        fail "$name did not span both workers"
    mt export "$job" --format safetensors -o "$T/$name.job.safetensors" >/dev/null
    mt train --local "$T/$name.json" --mesh "$one" --save "$T/$name.local" >"$T/$name.local.out"
    mt export "$T/$name.local/ckpt-10.mtc" --format safetensors -o "$T/$name.one.safetensors" \
        >/dev/null
    $CMP "$T/$name.job.safetensors" "$T/$name.one.safetensors" 1e-5 >"$T/$name.cmp" ||
        fail "$name: 2x2 job differs from one device: $(cat "$T/$name.cmp")"
    log "$name: job $job on 2 workers x 2 devices equals one device ($(sort -t= -k2 -g "$T/$name.cmp" | tail -1))"
}

job_vs_local layout_map "$SRC/examples/dtensor_keras_layout_map.json"

# images sharded on their height (docs/spmd.md): mesh space=2,batch=2 puts each pair of bands on
# both workers (rank r: space r / 2), so the conv2d halo rows cross processes
job_vs_local spatial "$SRC/examples/fashion_mnist_cnn_spatial.json" '{"space": 2, "batch": 2}' \
    space=1,batch=1
# plan prints the halo bytes; submit refuses a height the dim does not divide, at the input and
# after a pooling layer, naming the field and the sizes
mt plan --offline "$T/spatial.json" >"$T/plan.out"
grep -q "^halo        height sharded over space: 238.0 KiB sent per device per step" "$T/plan.out" ||
    fail "plan: no halo line: $(cat "$T/plan.out")"
jq '.mesh = {space: 3, batch: 1}' "$T/spatial.json" >"$T/bands3.json"
expect_fail 4 "input_layout\[1\]: the input's height 28 is not divisible by mesh dimension 'space' of size 3" \
    mt submit "$T/bands3.json"
jq '.mesh = {space: 4, batch: 1}' "$T/spatial.json" >"$T/bands4.json"
expect_fail 4 "(max_pool2d_1): output (14, 14, 16): its height is not divisible by mesh dimension 'space' of size 4" \
    mt submit "$T/bands4.json"
log "spatial: plan prints the halo bytes; submit refuses bands that do not divide"

# a residual MLP (two skip connections) with every kernel sharded over batch
jq -n '{name: "residual-fsdp", seed: 3, batch_size: 32, optimizer: "sgd", learning_rate: 0.05,
    dataset: {format: "synthetic", examples: 512, test_examples: 64, features: 64, classes: 4},
    layouts: {"h.*kernel": ["batch", "unsharded"], "out\\.kernel": ["batch", "unsharded"]},
    model: {input_shape: [64], layers: [
        {type: "dense", units: 32, activation: "relu", name: "h1"},
        {type: "dense", units: 32, activation: "relu", name: "h2"},
        {type: "add", inputs: ["h2", "h1"], name: "r1"},
        {type: "dense", units: 32, activation: "relu", name: "h3"},
        {type: "add", inputs: ["h3", "r1"]},
        {type: "batch_norm"},
        {type: "dense", units: 4, name: "out"}]}}' >"$T/residual_spec.json"
job_vs_local residual "$T/residual_spec.json"

# FSDP checkpoint -> replicated spec: resume and end where the uninterrupted FSDP run ends
mt train --local "$T/residual_spec.json" --mesh batch=4 --steps 10 --save "$T/fsdp_a" >/dev/null
mt train --local "$T/residual_spec.json" --mesh batch=4 --steps 5 --save "$T/fsdp_b" >/dev/null
jq 'del(.layouts)' "$T/residual_spec.json" >"$T/replicated.json"
mt train --local "$T/replicated.json" --mesh batch=2 --resume "$T/fsdp_b/ckpt-5.mtc" --steps 10 \
    --save "$T/repl" >/dev/null
mt export "$T/fsdp_a/ckpt-10.mtc" --format safetensors -o "$T/a.safetensors" >/dev/null
mt export "$T/repl/ckpt-10.mtc" --format safetensors -o "$T/b.safetensors" >/dev/null
$CMP "$T/b.safetensors" "$T/a.safetensors" 1e-5 >"$T/restore.cmp" ||
    fail "restored onto a replicated mesh: $(cat "$T/restore.cmp")"
log "an FSDP checkpoint restored onto a replicated batch=2 spec continues as the FSDP run"
