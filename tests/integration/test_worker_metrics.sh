# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_worker_metrics.sh — the worker's Prometheus endpoint (meshtrain-worker --metrics-listen,
# worker/metrics.c): a worker with two devices and a token runs a 40-step data-parallel job with
# checkpoints every 20 steps; its /metrics then passes `promtool check metrics` and counts what
# happened: 40 steps in the step-time histogram, allreduces with their time and bytes, two
# checkpoint uploads with their bytes (the sizes the coordinator recorded), no collective
# failures, no running task, process_* and meshtrain_build_info{program="meshtrain-worker"}.
# Without the token /metrics answers 401; /healthz is open; an address that cannot be bound
# stops the worker at start (exit 2, naming the flag).
source "$(dirname "$0")/lib.sh"

command -v promtool >/dev/null || fail "promtool not installed (deploy/install-deps.sh installs prometheus)"
(umask 077 && head -c 24 /dev/urandom | base64 >"$T/token")
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 --token-file "$T/token"
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" --token-file "$T/token" "$@"; }
MPORT=$(free_port)
bg worker "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --token-file "$T/token" --devices 2 \
    --name w1 --data-root /usr/share/datasets --metrics-listen "127.0.0.1:$MPORT"
METRICS=http://127.0.0.1:$MPORT
wait_for 20 "the metrics endpoint" curl -sf "$METRICS/healthz"
grep -q "metrics on http://127.0.0.1:$MPORT/metrics" "$T/worker.log" || fail "the worker does not log its metrics address"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$METRICS/metrics")" = 401 ] || fail "/metrics without the token"
scrape() { curl -sf -H "Authorization: Bearer $(cat "$T/token")" "$METRICS/metrics"; }
grep -q '^meshtrain_worker_tasks 0$' <<<"$(scrape)" || fail "idle worker: $(scrape | head -20)"

jq '. + {name: "wm", steps: 40, mesh: {batch: 2}, checkpoint: {every_steps: 20}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json")
wait_for 120 "$JOB to finish" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' --token-file '$T/token' status --json $JOB | jq -e '.state | IN(\"SUCCEEDED\", \"FAILED\", \"CANCELLED\")'"
mt status --json "$JOB" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$JOB: $(mt status "$JOB")"

scrape >"$T/metrics.txt"
promtool check metrics <"$T/metrics.txt" >"$T/promtool.log" 2>&1 || fail "promtool check metrics: $(cat "$T/promtool.log")"
val() { awk -v k="$1" '$1 == k { print $2 }' "$T/metrics.txt"; }
[ "$(val meshtrain_worker_step_seconds_count)" = 40 ] || fail "step count $(val meshtrain_worker_step_seconds_count)"
awk '$1 ~ /^meshtrain_worker_step_seconds_sum$/ { exit !($2 > 0) }' "$T/metrics.txt" || fail "step time sum"
AR=$(val 'meshtrain_worker_collective_seconds_count{op="allreduce"}')
ARB=$(val 'meshtrain_worker_collective_bytes_total{op="allreduce"}')
[ "${AR:-0}" -ge 80 ] || fail "allreduce calls: $AR (2 devices x 40 steps at least)"
[ "${ARB:-0}" -gt 0 ] || fail "allreduce bytes: $ARB"
! grep -E '^meshtrain_worker_collective_failures_total\{.*\} [1-9]' "$T/metrics.txt" || fail "collective failures counted"
[ "$(val 'meshtrain_worker_checkpoints_total{result="uploaded"}')" = 2 ] || fail "checkpoint uploads"
[ "$(val meshtrain_worker_checkpoint_upload_seconds_count)" = 2 ] || fail "checkpoint upload time"
SIZES=$(mt status --json "$JOB" | jq '[.checkpoints[] | select(.complete) | .size_bytes] | add')
[ "$(val meshtrain_worker_checkpoint_bytes_total)" = "$SIZES" ] ||
    fail "checkpoint bytes $(val meshtrain_worker_checkpoint_bytes_total), the coordinator recorded $SIZES"
[ "$(val meshtrain_worker_tasks)" = 0 ] || fail "running tasks after the job"
grep -q '^meshtrain_build_info{version="[^"]*",program="meshtrain-worker"} 1$' "$T/metrics.txt" || fail "build info"
for f in process_cpu_seconds_total process_resident_memory_bytes process_open_fds process_start_time_seconds; do
    grep -q "^$f " "$T/metrics.txt" || fail "no $f"
done
log "worker /metrics: 40 steps, $AR allreduces ($ARB bytes), 2 checkpoints ($SIZES bytes); promtool clean"

# an address that cannot be bound: the worker stops at start and names the flag
rc=0
timeout 20 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --token-file "$T/token" --name w2 \
    --metrics-listen "127.0.0.1:$MPORT" >"$T/w2.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a busy --metrics-listen address: exit $rc: $(cat "$T/w2.log")"
grep -q -- "--metrics-listen 127.0.0.1:$MPORT" "$T/w2.log" || fail "message: $(cat "$T/w2.log")"
log "a busy address stops the worker at start: $(grep -- --metrics-listen "$T/w2.log" | head -1)"
