# SPDX-License-Identifier: MIT
# test_fault_uneven_devices.sh — issue 19, fault 9: a data-parallel job whose mesh leaves the
# workers holding unequal device counts (2 workers x 2 devices, --mesh batch=3: 2 + 1) trains to
# the end, with checkpoints and evaluations, and exports the same bytes as the same job on one
# worker x 3 devices (the placement never changes the bits).
# Before the fix every evaluation failed: "allreduce ... message from rank 2 has step
# 9223372036854775807, expected 9223372036854775837" (core/spmd tagged an evaluation with its
# device-thread generation, which a process with one device never advances; it now counts its
# evaluations).
# Then, issue 19's "no data lost": a worker that dies the moment its checkpoint upload is stored
# (MT_TEST_EXIT_AFTER_UPLOAD, as kill -9 there) leaves no step of the job without its loss point
# (the checkpoint of a step used to go out before that step's points, and the restart resumes
# after it, never reporting the step again; bench/fault_matrix.sh saw "lost 1").
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $FM not installed"; exit 0; }

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
# 2 epochs over the 10k test images (an evaluation at each epoch end), checkpoints every 40 steps
jq '. + {batch_size: 96, epochs: 2, checkpoint: {every_steps: 40, keep: 2},
         restart: {max_restarts: 0},
         dataset: {format: "idx",
           train_images: "'"$FM"'/t10k-images-idx3-ubyte.gz",
           train_labels: "'"$FM"'/t10k-labels-idx1-ubyte.gz",
           test_images: "'"$FM"'/t10k-images-idx3-ubyte.gz",
           test_labels: "'"$FM"'/t10k-labels-idx1-ubyte.gz"}}' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"

bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wa
WA=$LAST_PID
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name wb
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2
UNEVEN=$(mt submit "$T/job.json" --mesh batch=3)
wait_for 300 "the 2 + 1 job ends" finished "$UNEVEN"
mt status --json "$UNEVEN" >"$T/s.json"
jq -e '[.placement[].worker_id] | unique | length == 2' "$T/s.json" >/dev/null ||
    fail "the job was not spread over both workers: $(jq -c .placement "$T/s.json")"
jq -e '.state == "SUCCEEDED"' "$T/s.json" >/dev/null ||
    fail "batch=3 over 2 + 1 devices: $(jq -c '{state, error}' "$T/s.json")"
mt export "$UNEVEN" --format safetensors -o "$T/uneven.safetensors" >/dev/null
log "batch=3 over workers holding 2 and 1 of its devices: SUCCEEDED"

kill "$WA" "$WB"
wait_for 30 "both workers lost" workers_alive 0
bg wc "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 3 --name wc
WC=$LAST_PID
wait_for 20 "one worker" workers_alive 1
ONE=$(mt submit "$T/job.json" --mesh batch=3)
wait_for 300 "the 1 x 3 job ends" finished "$ONE"
mt status --json "$ONE" | jq -e '.state == "SUCCEEDED"' >/dev/null ||
    fail "the reference job: $(mt status --json "$ONE" | jq -c '{state, error}')"
mt export "$ONE" --format safetensors -o "$T/one.safetensors" >/dev/null
cmp "$T/uneven.safetensors" "$T/one.safetensors" ||
    fail "2 + 1 devices and 1 x 3 devices exported different weights"
log "the 2 + 1 and the 1 x 3 exports are byte-identical ($(stat -c %s "$T/one.safetensors") bytes)"

kill "$WC"
wait_for 30 "worker wc lost" workers_alive 0
jq '. + {steps: 60, checkpoint: {every_steps: 20, keep: 2}, restart: {max_restarts: 2}} |
    del(.epochs)' "$T/job.json" >"$T/die.json"
MT_TEST_EXIT_AFTER_UPLOAD=40 bg wd "$BIN/meshtrain-worker" --coordinator "$COORD_URL" \
    --devices 1 --name wd
WD=$LAST_PID
wait_for 20 "worker wd" workers_alive 1
DIE=$(mt submit "$T/die.json" --mesh batch=1)
gone() { ! kill -0 "$WD" 2>/dev/null; }
wait_for 120 "wd gone after storing checkpoint 40" gone
bg we "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name we
wait_for 120 "the resumed job ends" finished "$DIE"
mt status --json "$DIE" >"$T/die_s.json"
jq -e '.state == "SUCCEEDED" and .restarts == 1' "$T/die_s.json" >/dev/null ||
    fail "the job of the dead worker: $(jq -c '{state, restarts, error}' "$T/die_s.json")"
mt watch --json "$DIE" >"$T/die.points" 2>/dev/null || true
missing=$(jq -r 'select(.name? == "loss") | .step' "$T/die.points" | sort -un |
    awk '$1 >= 1 && $1 <= 60 { seen[$1] = 1 } END { for (s = 1; s <= 60; s++) if (!(s in seen)) printf "%d ", s }')
[ -z "$missing" ] || fail "steps without a loss point after the worker died at checkpoint 40: $missing"
log "a worker dead right after storing checkpoint 40: resumed, every step 1..60 has its loss point"
log "PASS"
