#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# demo.sh BUILD_DIR — the README's first command (`make demo`) after the build:
# starts a coordinator (state in BUILD_DIR/demo/) and two workers with 2 devices
# each on loopback, submits examples/fashion_mnist_cnn.json on mesh batch=4,
# follows it with the progress bar, exports the trained model, prints the final
# test accuracy and the model's path, then stops everything it started (the dashboard too;
# `make cluster` / deploy/cluster.sh starts a local cluster that stays up).
set -euo pipefail
B=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
D=$B/demo
SPEC=${MT_DEMO_SPEC:-$SRC/examples/fashion_mnist_cnn.json}
rm -rf "$D"
mkdir -p "$D"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}; fi
export OPENBLAS_NUM_THREADS=1
T0=$SECONDS

"$B/meshtrain-coordinator" --state-dir "$D/state" --listen tcp://127.0.0.1:0 \
    --http 127.0.0.1:0 2>"$D/coordinator.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$D/state/endpoints.json" ] && break; sleep 0.1; done
[ -s "$D/state/endpoints.json" ] || { cat "$D/coordinator.log"; echo "demo: coordinator did not start" >&2; exit 1; }
URL=$(sed 's/.*"rpc": "\([^"]*\)".*/\1/' "$D/state/endpoints.json")
HTTP=$(sed 's/.*"http": "\([^"]*\)".*/\1/' "$D/state/endpoints.json")
echo "demo: coordinator at $URL (dashboard: $HTTP/), logs in $D/"
for n in a b; do
    "$B/meshtrain-worker" --coordinator "$URL" --devices 2 --name "demo-worker-$n" \
        2>"$D/worker-$n.log" &
    PIDS+=($!)
done
n=0
for _ in $(seq 100); do
    n=$("$B/meshtrain" --coordinator "$URL" workers --state alive --json 2>/dev/null |
        grep -c '"worker_id"' || true)
    [ "$n" = 2 ] && break
    sleep 0.1
done
"$B/meshtrain" --coordinator "$URL" workers
[ "$n" = 2 ] || { echo "demo: workers did not register" >&2; exit 1; }
echo "demo: submitting $(basename "$SPEC") on mesh batch=4 (2 workers x 2 devices)"
JOB=$("$B/meshtrain" --coordinator "$URL" submit "$SPEC" --mesh batch=4)
echo "demo: job $JOB"
rc=0
"$B/meshtrain" --coordinator "$URL" watch "$JOB" || rc=$?
if [ "$rc" != 0 ]; then
    "$B/meshtrain" --coordinator "$URL" status "$JOB" || true
    echo "demo: job $JOB did not succeed" >&2
    exit 1
fi
ACC=$("$B/meshtrain" --coordinator "$URL" watch --json "$JOB" | grep '"test_accuracy"' |
    tail -n 1 | sed 's/.*"value": \([0-9.e+-]*\).*/\1/')
MODEL=$D/model.safetensors
"$B/meshtrain" --coordinator "$URL" export "$JOB" --format safetensors -o "$MODEL"
echo "demo: final test accuracy ${ACC:-?}; model exported to $MODEL; $((SECONDS - T0)) s"
echo "demo: stopping the coordinator and workers (a cluster that stays up: make cluster)"
