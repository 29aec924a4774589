#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_stall.sh — hang diagnosis with real processes on loopback (docs/jobs.md "Stalled jobs"):
#  1. a coordinator and two real 2-device workers run a 4-device data-parallel job; worker wb has
#     the TEST-ONLY hook MT_TEST_STALL_AT_STEP, so one of its devices sleeps before entering the
#     step's gradient reduce-scatter (the sharded update) while wb keeps heartbeating: the job
#     becomes STALLED within the stall timeout, and `meshtrain status` (text and --json) and
#     GET /api/v1/jobs/{id} name wb's device, the reduce_scatter and the mesh axis "batch"; when
#     the hook lets go the job returns to RUNNING and SUCCEEDS;
#  2. SIGSTOP of a whole worker (no heartbeats) is the lost-worker path: the worker is "lost" and
#     the job goes to RESTARTING, never STALLED.
source "$(dirname "$0")/lib.sh"

HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000 --stall-timeout-ms 2000)
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"

state_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s'; }
step_at_least() { mt status --json "$1" | jq -e --argjson s "$2" '.step >= $s'; }
worker() { # worker NAME [ENV...]
    local name=$1
    shift
    bg "$name" env "$@" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 \
        --name "$name" --data-root "$T" --data-root /usr/share/datasets
}
# a small data-parallel MLP on Fashion-MNIST over 4 devices (batch axis)
jq '. + {steps: 40, batch_size: 32, mesh: {batch: 4}} | del(.epochs) |
    .model.layers[1].units = 16' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"

# ---- 1. one device of wb sleeps 7 s before a collective of step 5; wb keeps heartbeating
worker wa
worker wb MT_TEST_STALL_AT_STEP=5 MT_TEST_STALL_DEVICE=1 MT_TEST_STALL_MS=7000
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2
JOB=$(mt submit "$T/job.json")
T0=$SECONDS
wait_for 30 "$JOB stalled" state_is "$JOB" STALLED
log "$JOB STALLED after $((SECONDS - T0)) s"
mt status --json "$JOB" >"$T/st.json"
# the reason is the stall diagnosis; `diagnosis` says what kind of fault it is: a device that
# never entered is a stuck device, not a link (docs/jobs.md#diagnosis)
PATTERN='^device stuck: step 5 reduce_scatter #0 on axis batch: wb cpu:[01] never entered; its last activity: test stall hook: sleeping before a collective [0-9]+ s ago$'
jq -e --arg p "$PATTERN" '.diagnosis | test($p)' "$T/st.json" >/dev/null ||
    fail "status --json diagnosis: $(jq -c '{state, reason, diagnosis}' "$T/st.json")"
jq -e '.diagnosis == "device stuck: " + .reason' "$T/st.json" >/dev/null || fail "reason and diagnosis differ"
# the device named is the rank whose worker is wb
DEV=$(jq -r '.diagnosis | capture("wb cpu:(?<d>[01])").d' "$T/st.json")
jq -e --argjson d "$DEV" '[.placement[] | select(.worker_id == "wb" and .local_index == $d)] | length == 1' \
    "$T/st.json" >/dev/null || fail "placement has no wb cpu:$DEV"
mt status "$JOB" >"$T/st.txt"
grep -Eq '^stalled   alive but not advancing: step 5 reduce_scatter #0 on axis batch: wb cpu:[01] never entered' \
    "$T/st.txt" || fail "status text: $(cat "$T/st.txt")"
grep -Eq '^diagnosis device stuck: step 5 reduce_scatter #0 on axis batch: wb cpu:[01] never entered' \
    "$T/st.txt" || fail "status text: $(cat "$T/st.txt")"
curl -sf "$HTTP_URL/api/v1/jobs/$JOB" >"$T/api.json" || fail "GET /api/v1/jobs/$JOB"
jq -e --arg p "$PATTERN" '.state == "STALLED" and (.diagnosis | test($p))' "$T/api.json" >/dev/null ||
    fail "API diagnosis: $(jq -c '{state, diagnosis}' "$T/api.json")"
mt workers --json | jq -e '[.workers[] | select(.state == "alive")] | length == 2' >/dev/null ||
    fail "a stalled worker must stay alive"
log "diagnosis: $(jq -r .diagnosis "$T/st.json")"

# the hook lets go after 7 s: progress resumes, RUNNING again, then SUCCEEDED
wait_for 60 "$JOB succeeded" state_is "$JOB" SUCCEEDED
mt status --json "$JOB" >"$T/st2.json"
jq -e '[.events[].state] == ["QUEUED", "SCHEDULED", "RUNNING", "STALLED", "RUNNING", "SUCCEEDED"]' \
    "$T/st2.json" >/dev/null || fail "events: $(jq -c '[.events[] | [.state, .reason]]' "$T/st2.json")"
jq -e '.events[4].reason | test("progress resumed")' "$T/st2.json" >/dev/null ||
    fail "resume reason: $(jq -r '.events[4].reason' "$T/st2.json")"
jq -e '.diagnosis == null and .step == 40 and .restarts == 0' "$T/st2.json" >/dev/null ||
    fail "after the stall: $(jq -c '{diagnosis, step, restarts}' "$T/st2.json")"
log "$JOB: RUNNING -> STALLED -> RUNNING -> SUCCEEDED"

# ---- 2. SIGSTOP of a whole worker: no heartbeats -> lost -> RESTARTING, never STALLED.
# wb (with the hook) leaves; wc takes its place without it.
kill "$WB"
worker wc
WC=$LAST_PID
alive_are() { mt workers --json | jq -e --arg w "$1" '[.workers[] | select(.state == "alive") | .name] | sort | join(",") == $w'; }
wait_for 20 "wb lost, wc registered" alive_are "wa,wc"
sed -i 's/"steps": 40/"steps": 100000/' "$T/job.json"
JOB2=$(mt submit "$T/job.json")
wait_for 30 "$JOB2 running" state_is "$JOB2" RUNNING
kill -STOP "$WC"
T0=$SECONDS
restarting() { mt status --json "$1" | jq -e '[.events[].state] | index("RESTARTING") != null'; }
wait_for 20 "$JOB2 restarting after wc stopped" restarting "$JOB2"
log "wc SIGSTOPped: $JOB2 RESTARTING after $((SECONDS - T0)) s"
mt status --json "$JOB2" >"$T/st3.json"
jq -e '[.events[].state] | index("STALLED") == null' "$T/st3.json" >/dev/null ||
    fail "a stopped worker was reported STALLED: $(jq -c '[.events[] | [.state, .reason]]' "$T/st3.json")"
jq -e '.events[-1].reason | test("worker wc lost")' "$T/st3.json" >/dev/null ||
    fail "restart reason: $(jq -r '.events[-1].reason' "$T/st3.json")"
mt workers --json | jq -e '.workers[] | select(.name == "wc") | .state == "lost"' >/dev/null ||
    fail "wc should be lost"
kill -CONT "$WC" 2>/dev/null || true
mt cancel "$JOB2" >/dev/null
log "SIGSTOP of a worker: lost -> RESTARTING (not STALLED)"
