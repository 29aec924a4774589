#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_submit_wait.sh — `meshtrain submit --wait [--timeout S]` with real daemons on loopback,
# and the worker's default data-plane address:
#  * worker wa listens on tcp://0.0.0.0:0 and reports tcp://127.0.0.1:PORT (its address toward
#    the coordinator), worker wb has no --data-listen and reports tcp://127.0.0.1:PORT too; a
#    job across both runs (the advertised address is dialable and its ranks are local);
#  * a short job: `submit --wait` prints the id, then "job ID SUCCEEDED", and exits 0, with no
#    progress lines;
#  * a long job cancelled while `submit --wait` waits: exit 1, "job ID CANCELLED";
#  * `--timeout` on a job that does not end in time: exit 3, DEADLINE_EXCEEDED, job still runs;
#  * the coordinator killed and restarted while `submit --wait` waits: it still ends (exit 1
#    after a cancel), through the GetJob that backs a silent stream.
source "$(dirname "$0")/lib.sh"

PORT=$(free_port) # fixed: the coordinator restarts on it below
COORD_FLAGS=(--listen "tcp://127.0.0.1:$PORT" --http 127.0.0.1:0 --heartbeat-ms 200
    --heartbeat-timeout-ms 3000)
start_coordinator coord "$T/state" "${COORD_FLAGS[@]}"
bg wa "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name wa \
    --data-listen tcp://0.0.0.0:0
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name wb
wait_for 20 "two workers" workers_alive 2
mt workers --json >"$T/workers.json"
for w in wa wb; do
    jq -e --arg n "$w" '.workers[] | select(.name == $n) | .data_address |
        test("^tcp://127\\.0\\.0\\.1:[1-9][0-9]*$")' "$T/workers.json" >/dev/null ||
        fail "$w data-plane address: $(jq -c '[.workers[] | {name, data_address}]' "$T/workers.json")"
done
log "data-plane addresses: $(jq -c '[.workers[] | {name, data_address}]' "$T/workers.json")"

state_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s'; }

# ---- a short job across both workers: id, then the final state line, exit 0
jq '. + {mesh: {batch: 2}, steps: 3} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/short.json"
rc=0
timeout 120 "$BIN/meshtrain" --coordinator "$COORD_URL" submit --wait "$T/short.json" \
    >"$T/short.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "submit --wait of a short job exited $rc: $(cat "$T/short.out")"
JOB=$(head -n 1 "$T/short.out")
[ "$(wc -l <"$T/short.out")" = 2 ] || fail "submit --wait printed more than 2 lines: $(cat "$T/short.out")"
[ "$(sed -n 2p "$T/short.out")" = "job $JOB SUCCEEDED" ] || fail "final line: $(cat "$T/short.out")"
state_is "$JOB" SUCCEEDED >/dev/null || fail "$JOB: $(mt status "$JOB")"
mt status --json "$JOB" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB did not span both workers: $(mt status --json "$JOB" | jq -c .placement)"
log "short job $JOB: submit --wait exited 0 ($(sed -n 2p "$T/short.out"))"

# ---- a long job cancelled while submit --wait waits: exit 1
jq '. + {mesh: {batch: 2}, steps: 100000} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/long.json"
# start_waiter NAME: `submit --wait long.json` in the background (output in $T/NAME.log) until
# its job is stepping; sets WAITER (pid) and WJOB (job id)
start_waiter() {
    bg "$1" timeout 120 "$BIN/meshtrain" --coordinator "$COORD_URL" submit --wait "$T/long.json"
    WAITER=$LAST_PID
    wait_for 20 "the job id from submit --wait" test -s "$T/$1.log"
    WJOB=$(head -n 1 "$T/$1.log")
    wait_for 60 "$WJOB running" stepping "$WJOB"
}
stepping() { mt status --json "$1" | jq -e '.state == "RUNNING" and .step > 0'; }
start_waiter wait_long
LONG=$WJOB
mt cancel "$LONG" >/dev/null
wrc=0
wait "$WAITER" || wrc=$?
[ "$wrc" = 1 ] || fail "submit --wait of a cancelled job exited $wrc: $(cat "$T/wait_long.log")"
grep -qx "job $LONG CANCELLED" "$T/wait_long.log" || fail "output: $(cat "$T/wait_long.log")"
log "cancelled job $LONG: submit --wait exited 1"

# ---- --timeout: exit 3 and the job keeps running
idle() { mt jobs --json | jq -e '[.jobs[] | select(.state == "RUNNING")] | length == 0'; }
wait_for 30 "no job running" idle
expect_exit 3 mt submit --wait --timeout 1.5 "$T/long.json"
grep -q "DEADLINE_EXCEEDED: job .* did not end within 1.5 s" "$T/last.out" ||
    fail "timeout message: $(cat "$T/last.out")"
TJOB=$(head -n 1 "$T/last.out")
finished() { mt status --json "$TJOB" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
! finished >/dev/null || fail "$TJOB ended after the --timeout: $(mt status "$TJOB")"
mt cancel "$TJOB" >/dev/null
log "submit --wait --timeout 1.5: exit 3, $TJOB still running (cancelled now)"

# ---- the coordinator is killed and restarts (same port) while submit --wait waits: the final
# event may never reach the old subscription; the waiter still ends (a silent stream is backed
# by GetJob every 5 s)
wait_for 30 "no job running" idle
start_waiter wait_restart
RJOB=$WJOB
kill -9 "$COORD_PID"
start_coordinator coord2 "$T/state" "${COORD_FLAGS[@]}"
mt cancel "$RJOB" >/dev/null
t0=$SECONDS
wrc=0
wait "$WAITER" || wrc=$?
[ "$wrc" = 1 ] || fail "submit --wait across a coordinator restart exited $wrc: $(cat "$T/wait_restart.log")"
grep -qx "job $RJOB CANCELLED" "$T/wait_restart.log" || fail "output: $(cat "$T/wait_restart.log")"
log "coordinator restarted while submit --wait waited: exit 1 ~$((SECONDS - t0)) s after the cancel"

expect_exit 2 mt submit --timeout 3 "$T/long.json"
expect_exit 2 mt submit --wait --follow "$T/long.json"
expect_exit 2 mt submit --wait --timeout -1 "$T/long.json"
log "PASS"
