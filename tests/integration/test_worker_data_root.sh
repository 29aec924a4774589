# SPDX-License-Identifier: MIT
# test_worker_data_root.sh — a worker reads job files only under its --data-root
# directories: a job whose dataset lies outside them FAILS with PERMISSION_DENIED
# naming the path (the coordinator accepted it: the files are valid IDX); the same
# job with the files under the root succeeds.
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $FM not installed"; exit 0; }
mkdir -p "$T/inside" "$T/outside"
for d in inside outside; do
    cp "$FM/t10k-images-idx3-ubyte.gz" "$FM/t10k-labels-idx1-ubyte.gz" "$T/$d/"
done
spec() { # spec DIR -> a 2-step MLP on DIR's files
    cat <<JSON
{"name": "root-$1", "seed": 1, "batch_size": 16, "steps": 2, "optimizer": "sgd",
 "learning_rate": 0.1, "mesh": {"batch": 1},
 "dataset": {"format": "idx",
   "train_images": "$T/$1/t10k-images-idx3-ubyte.gz", "train_labels": "$T/$1/t10k-labels-idx1-ubyte.gz",
   "test_images": "$T/$1/t10k-images-idx3-ubyte.gz", "test_labels": "$T/$1/t10k-labels-idx1-ubyte.gz"},
 "model": {"input_shape": [28, 28, 1],
   "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]}}
JSON
}
spec outside >"$T/outside.json"
spec inside >"$T/inside.json"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000
bg w "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w1 \
    --data-root "$T/inside"
alive() { mt workers --json | jq -e '[.workers[] | select(.state == "alive")] | length == 1'; }
wait_for 20 "worker registered" alive
grep -q "data root $T/inside" "$T/w.log" || fail "worker did not log its data root"

finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
OUT=$(mt submit "$T/outside.json")
wait_for 60 "job outside the root ends" finished "$OUT"
mt status --json "$OUT" >"$T/out.json"
jq -e '.state == "FAILED"' "$T/out.json" >/dev/null || fail "outside job: $(cat "$T/out.json")"
jq -e '.error | test("PERMISSION_DENIED|outside") and test("outside/t10k")' "$T/out.json" \
    >/dev/null || fail "outside job error: $(jq -r .error "$T/out.json")"
log "outside the root: FAILED: $(jq -r .error "$T/out.json" | cut -c1-160)"

IN=$(mt submit "$T/inside.json")
wait_for 120 "job inside the root ends" finished "$IN"
mt status --json "$IN" | jq -e '.state == "SUCCEEDED"' >/dev/null ||
    fail "inside job: $(mt status --json "$IN" | jq -c '{state, error}')"
log "PASS"
