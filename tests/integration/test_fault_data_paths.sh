# SPDX-License-Identifier: MIT
# test_fault_data_paths.sh — issue 19, faults 1 and 2: the coordinator never opens a job's data
# files, and relative dataset paths follow one rule (relative to the spec file's folder) for
# `plan`, `train --local` and `submit`.
#  * a spec naming a FIFO: `plan` and `train --local` refuse it at once; 4 submits are accepted
#    (structure only) and the coordinator keeps answering; the worker fails each task with
#    "... is a FIFO, not a regular file"; SIGTERM stops the coordinator.
#  * /etc/shadow and a missing /etc file submit alike (no existence oracle at submit) and fail
#    alike on the worker: PERMISSION_DENIED outside its --data-root.
#  * every spec of examples/ submits as it is, from another working directory; the text example
#    (relative "data/..." paths) runs to SUCCEEDED on the files next to the spec.
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $FM not installed"; exit 0; }
command -v mkfifo >/dev/null || { echo "SKIP: no mkfifo"; exit 0; }

mkdir -p "$T/ex/data" "$T/idx"
cp "$SRC"/examples/*.json "$T/ex/"
gen_text "$T/ex/data/sentiment_train.tsv" 512 1
gen_text "$T/ex/data/sentiment_test.tsv" 128 2
cp "$FM/t10k-images-idx3-ubyte.gz" "$FM/t10k-labels-idx1-ubyte.gz" "$T/idx/"
mkfifo "$T/idx/p"
idx_spec() { # idx_spec TRAIN_IMAGES -> a 2-step MLP whose training images are TRAIN_IMAGES
    cat <<JSON
{"name": "paths", "seed": 1, "batch_size": 16, "steps": 2, "optimizer": "sgd",
 "learning_rate": 0.1, "mesh": {"batch": 1},
 "dataset": {"format": "idx",
   "train_images": "$1", "train_labels": "t10k-labels-idx1-ubyte.gz",
   "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"},
 "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]}}
JSON
}
idx_spec p >"$T/idx/fifo.json"
idx_spec t10k-images-idx3-ubyte.gz >"$T/idx/good.json"
idx_spec /etc/shadow >"$T/idx/shadow.json"
idx_spec /etc/meshtrain-no-such-file >"$T/idx/missing.json"

# --- the CLI alone: relative to the spec's folder, whatever the working directory
(cd / && "$BIN/meshtrain" plan --offline "$T/idx/good.json") >"$T/plan.out" 2>&1 ||
    fail "plan of a spec with paths relative to its folder: $(cat "$T/plan.out")"
grep -q "valid" "$T/plan.out" || fail "plan: $(cat "$T/plan.out")"
(cd / && "$BIN/meshtrain" train --local "$T/idx/good.json" --data-root "$T") >"$T/train.out" 2>&1 ||
    fail "train --local with relative paths: $(cat "$T/train.out")"
got=0
(cd / && timeout 20 "$BIN/meshtrain" plan --offline "$T/idx/fifo.json") >"$T/fifo_plan.out" 2>&1 ||
    got=$?
[ "$got" = 4 ] || fail "plan of a FIFO spec exited $got (124 = it hung): $(cat "$T/fifo_plan.out")"
grep -q "dataset.train_images: $T/idx/p is a FIFO, not a regular file" "$T/fifo_plan.out" ||
    fail "plan FIFO message: $(cat "$T/fifo_plan.out")"
got=0
timeout 20 "$BIN/meshtrain" train --local "$T/idx/fifo.json" --data-root "$T" >"$T/fifo_train.out" 2>&1 ||
    got=$?
[ "$got" = 4 ] || fail "train --local of a FIFO spec exited $got: $(cat "$T/fifo_train.out")"
grep -q "is a FIFO" "$T/fifo_train.out" || fail "train FIFO message: $(cat "$T/fifo_train.out")"
log "plan / train --local: relative paths from the spec's folder; FIFO refused: $(tail -1 "$T/fifo_plan.out")"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000

# --- every example submits as it is (before any worker: they wait), from another directory
declare -A IDS
for f in "$T"/ex/*.json; do
    id=$(cd / && "$BIN/meshtrain" --coordinator "$COORD_URL" submit "$f") ||
        fail "submit $(basename "$f") as it is: $id"
    IDS[$(basename "$f")]=$id
done
TEXT=${IDS[dtensor_mlp_data_parallel.json]}
for f in "${!IDS[@]}"; do
    [ "$f" = dtensor_mlp_data_parallel.json ] || mt cancel "${IDS[$f]}" >/dev/null
done
log "all ${#IDS[@]} examples accepted as they are"

# --- FIFO, /etc/shadow, a missing /etc file: accepted at submit without opening anything
FIFO_IDS=()
for i in 1 2 3 4; do
    id=$(timeout 20 "$BIN/meshtrain" --coordinator "$COORD_URL" submit "$T/idx/fifo.json") ||
        fail "submit $i of the FIFO spec: $id"
    FIFO_IDS+=("$id")
done
timeout 10 "$BIN/meshtrain" --coordinator "$COORD_URL" jobs >/dev/null ||
    fail "the coordinator stopped answering after 4 FIFO submits"
SHADOW=$(mt submit "$T/idx/shadow.json") || fail "submit /etc/shadow spec: $SHADOW"
MISSING=$(mt submit "$T/idx/missing.json") || fail "submit missing-file spec: $MISSING"
log "4 FIFO submits, /etc/shadow and a missing file: all accepted, the coordinator answers"

bg w "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 8 --name w1 --data-root "$T"
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
for id in "${FIFO_IDS[@]}" "$SHADOW" "$MISSING" "$TEXT"; do
    wait_for 180 "job $id ends" finished "$id"
done
for id in "${FIFO_IDS[@]}"; do
    mt status --json "$id" >"$T/s.json"
    jq -e '.state == "FAILED" and (.error | test("INVALID_ARGUMENT: dataset.train_images: .*/idx/p is a FIFO, not a regular file"))' \
        "$T/s.json" >/dev/null || fail "FIFO job $id: $(jq -c '{state, error}' "$T/s.json")"
done
log "FIFO jobs FAILED on the worker: $(jq -r .error "$T/s.json" | cut -c1-150)"
for id in "$SHADOW" "$MISSING"; do
    mt status --json "$id" >"$T/s.json"
    jq -e '.state == "FAILED" and (.error | test("PERMISSION_DENIED: path /etc/.* outside the data roots"))' \
        "$T/s.json" >/dev/null || fail "/etc job $id: $(jq -c '{state, error}' "$T/s.json")"
done
log "/etc/shadow and a missing /etc file fail alike: $(jq -r .error "$T/s.json" | cut -c1-120)"
mt status --json "$TEXT" >"$T/s.json"
jq -e '.state == "SUCCEEDED"' "$T/s.json" >/dev/null ||
    fail "the text example with relative paths: $(jq -c '{state, error}' "$T/s.json")"
log "examples/dtensor_mlp_data_parallel.json (relative data/ paths) SUCCEEDED on 8 devices"

kill -TERM "$COORD_PID"
wait_for 15 "the coordinator exits on SIGTERM" bash -c "! kill -0 $COORD_PID 2>/dev/null"
log "PASS"
