#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# demo.sh BUILD_DIR — the README's first command (`make demo`) after the build:
# starts a coordinator (state in BUILD_DIR/demo/) and two workers with 2 devices
# each on loopback, shows them registered, then stops everything it started.
# When distributed training lands (issue #8) it submits and follows a job here.
set -euo pipefail
B=${1:-build}
D=$B/demo
rm -rf "$D"
mkdir -p "$D"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

"$B/meshtrain-coordinator" --state-dir "$D/state" --listen tcp://127.0.0.1:0 \
    --http 127.0.0.1:0 2>"$D/coordinator.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$D/state/endpoints.json" ] && break; sleep 0.1; done
[ -s "$D/state/endpoints.json" ] || { cat "$D/coordinator.log"; echo "demo: coordinator did not start" >&2; exit 1; }
URL=$(sed 's/.*"rpc": "\([^"]*\)".*/\1/' "$D/state/endpoints.json")
HTTP=$(sed 's/.*"http": "\([^"]*\)".*/\1/' "$D/state/endpoints.json")
echo "demo: coordinator at $URL (status: $HTTP/healthz), logs in $D/"
for n in a b; do
    "$B/meshtrain-worker" --coordinator "$URL" --devices 2 --name "demo-worker-$n" \
        2>"$D/worker-$n.log" &
    PIDS+=($!)
done
for _ in $(seq 100); do
    n=$("$B/meshtrain" --coordinator "$URL" workers --state alive --json 2>/dev/null |
        grep -c '"worker_id"' || true)
    [ "$n" = 2 ] && break
    sleep 0.1
done
"$B/meshtrain" --coordinator "$URL" workers
[ "$n" = 2 ] || { echo "demo: workers did not register" >&2; exit 1; }
echo "demo: 2 workers with 2 devices each registered; stopping."
