# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_spec_errors.sh — one validation path: for each invalid job spec or layout below,
# `meshtrain plan --offline`, `meshtrain submit` (SubmitJob on a real coordinator) and
# `meshtrain train --local` all exit 4 with the very same "CODE: path: why" line, and the
# coordinator stores no job. Then the DTensor Keras tutorial's LayoutMap spec (named layers,
# weights sharded over the batch dimension) is valid for all three and trains.
source "$(dirname "$0")/lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
log "coordinator at $COORD_URL"

# base: the tutorial's LayoutMap model on generated data (no files: every process sees the same)
base() {
    jq -n '{name: "bad", seed: 1, batch_size: 32, steps: 4, optimizer: "adam",
        dataset: {format: "synthetic", examples: 256, test_examples: 64, features: 16, classes: 24},
        mesh: {batch: 4},
        layouts: {"feature.*kernel": ["batch", "unsharded"], "feature.*bias": ["batch"]},
        model: {input_shape: [16], layers: [
            {type: "dense", units: 16, name: "feature"},
            {type: "dropout", rate: 0.1},
            {type: "dense", units: 24, name: "feature_2"}]}}'
}

# case 'JQ_EDIT' 'EXPECTED MESSAGE PREFIX'
N=0
case_() {
    local f=$T/case$N.json want=$2 m_plan m_submit m_train
    base | jq "$1" >"$f"
    expect_exit 4 mt plan --offline "$f"
    m_plan=$(grep -m1 -E '^meshtrain: [A-Z_]+: ' "$T/last.out" || cat "$T/last.out")
    expect_exit 4 mt submit "$f"
    m_submit=$(grep -m1 -E '^meshtrain: [A-Z_]+: ' "$T/last.out" || cat "$T/last.out")
    expect_exit 4 mt train --local "$f"
    m_train=$(grep -m1 -E '^meshtrain: [A-Z_]+: ' "$T/last.out" || cat "$T/last.out")
    [ "$m_plan" = "$m_submit" ] && [ "$m_plan" = "$m_train" ] ||
        fail "case $N ($1): plan '$m_plan' / submit '$m_submit' / train '$m_train'"
    case "$m_plan" in
    "meshtrain: $want"*) ;;
    *) fail "case $N ($1): '$m_plan' does not start with '$want'" ;;
    esac
    N=$((N + 1))
}

case_ '.layouts = {"featue.*kernel": ["batch", "unsharded"]}' \
    'INVALID_ARGUMENT: layouts["featue.*kernel"]: matches no weight of the model'
case_ '.layouts["feature.*kernel"] = ["model", "unsharded"]' \
    "INVALID_ARGUMENT: layouts[\"feature.*kernel\"][0]: mesh has no dimension 'model'"
case_ '.layouts["feature.*kernel"] = ["batch"]' \
    'INVALID_ARGUMENT: layouts["feature.*kernel"]: layout [batch] has rank 1 but parameter feature.kernel has rank 2'
case_ '.mesh = {batch: 3}' \
    'INVALID_ARGUMENT: layouts["feature.*kernel"][0]: tensor feature.kernel: axis 0 of size 16 is not divisible'
case_ '.mesh = {batch: 0}' 'INVALID_ARGUMENT: mesh.batch'
case_ '.model.layers[2].name = "feature"' \
    'INVALID_ARGUMENT: model.layers[2].name: "feature" is already the name of model.layers[0]'
case_ '.model.layers[0].name = "fe.ature"' 'INVALID_ARGUMENT: model.layers[0].name: must be'
case_ '.model.layers[0].name = ""' 'INVALID_ARGUMENT: model.layers[0].name: must be 1 to 31 characters'
case_ '.model.layers[0].name = 7' 'INVALID_ARGUMENT: model.layers[0].name'
case_ '.model.layers[0].units = 0' 'INVALID_ARGUMENT: model.layers[0].units'
case_ '.model.layers[0].type = "dense3d"' 'INVALID_ARGUMENT: model.layers[0].type'
case_ '.model.layers[1].rate = 1.5' 'INVALID_ARGUMENT: model.layers[1].rate'
case_ '.model.layers[0].colour = "red"' 'INVALID_ARGUMENT: model.layers[0].colour: unknown field'
# a likely typo of a known field is named (issue #21: "did you mean")
case_ '.model.layers[0].unitz = 8' 'INVALID_ARGUMENT: model.layers[0].unitz: unknown field; did you mean units?'
case_ '.epochz = 2' 'INVALID_ARGUMENT: epochz: unknown field; did you mean epochs?'
case_ '.checkpoint = {"every_step": 2}' 'INVALID_ARGUMENT: checkpoint.every_step: unknown field; did you mean every_steps?'
case_ '.model.layers = []' 'INVALID_ARGUMENT: model.layers'
case_ '.model.layers[0] = {type: "attention", num_heads: 3}' 'INVALID_ARGUMENT: model.layers[0]: attention needs a sequence'
case_ '.batch_size = 0' 'INVALID_ARGUMENT: batch_size'
case_ '.optimizer = "adagrad9"' 'INVALID_ARGUMENT: optimizer'
case_ '.learning_rate = -1' 'INVALID_ARGUMENT: learning_rate'
case_ '.dataset.features = 0' 'INVALID_ARGUMENT: dataset'
case_ '.dataset.colour = 1' 'INVALID_ARGUMENT: dataset.colour'
case_ '.input_layout = ["batch", "model"]' "INVALID_ARGUMENT: input_layout[1]: mesh has no dimension 'model'"
case_ '.layouts["(["] = ["batch"]' 'INVALID_ARGUMENT: layouts["(["]: invalid regular expression'
case_ '.checkpoint = {every_steps: 0}' 'INVALID_ARGUMENT: checkpoint.every_steps'
case_ '.mesh = {batch: 2, model: 2} |
       .layouts = {"feature_2\\.kernel": ["unsharded", "model"], "feature_2\\.bias": ["unsharded"]}' \
    'INVALID_ARGUMENT: layouts["feature_2\\.bias"]: feature_2.bias must follow'
case_ '.model.layers[0].units = 18' \
    'INVALID_ARGUMENT: layouts["feature.*bias"][0]: tensor feature.bias: axis 0 of size 18 is not divisible'
[ "$N" -ge 20 ] || fail "only $N cases"
[ "$(mt jobs --json | jq '.jobs | length')" = 0 ] || fail "an invalid spec was stored"
log "$N invalid specs: plan, submit and train --local give the same message"

# the tutorial's own LayoutMap: valid everywhere, trains locally
base >"$T/good.json"
mt plan --offline "$T/good.json" >"$T/plan.out"
grep -q 'FSDP working copies' "$T/plan.out" || fail "plan: $(cat "$T/plan.out")"
mt train --local --json "$T/good.json" >"$T/train.out"
jq -e 'select(.final) | .steps == 4' "$T/train.out" >/dev/null || fail "train: $(cat "$T/train.out")"
JOB=$(mt submit "$T/good.json")
mt status --json "$JOB" | jq -e '.state == "QUEUED"' >/dev/null || fail "status of $JOB"
log "the LayoutMap spec plans, trains and is accepted ($JOB)"
