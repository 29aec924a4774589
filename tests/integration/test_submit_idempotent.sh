#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_submit_idempotent.sh — a retried submit never makes a second job (issue 19, fault 5).
# `meshtrain submit` sends one request id per invocation; a submit repeated with the same id
# (the hidden --request-id flag stands for the CLI's own resends) answers the job the first one
# created: before and after a kill -9 of the coordinator, and from concurrent submits. The same
# id with another spec is ALREADY_EXISTS; a malformed id is INVALID_ARGUMENT. Then submits run
# while the coordinator is kill -9'd and restarted at varying moments: every id a submit printed
# exists, and no invocation made two jobs.
source "$(dirname "$0")/lib.sh"

S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0
log "coordinator at $COORD_URL"
jq '. + {mesh: {batch: 1}, steps: 10} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/job.json"
jq '.steps = 20' "$T/job.json" >"$T/job2.json"
n_jobs() { mt jobs --json | jq '.jobs | length'; }

# ---- the same request id twice: one job, the same id printed
A=$(mt submit --request-id retry-1 "$T/job.json")
B=$(mt submit --request-id retry-1 "$T/job.json")
[ "$A" = "$B" ] || fail "a repeated submit made $B after $A"
[ "$(n_jobs)" = 1 ] || fail "$(n_jobs) jobs after a repeated submit"
grep -q "request id retry-1 repeated" "$T/coord.log" || fail "the coordinator did not log the retry"
log "repeated submit answered $A again"

# ---- survives kill -9: the key is in SQLite, not in memory
kill -9 "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
start_coordinator coord2 "$S" --listen "$COORD_URL"
C=$(mt submit --request-id retry-1 "$T/job.json")
[ "$C" = "$A" ] || fail "after a restart the retry made $C instead of answering $A"
[ "$(n_jobs)" = 1 ] || fail "$(n_jobs) jobs after a retry across a restart"
log "retry across kill -9 answered $A"

# ---- the same id with another spec; a malformed id; without an id every submit is new
expect_exit 4 mt submit --request-id retry-1 "$T/job2.json"
grep -q "ALREADY_EXISTS: request id retry-1 was already used by job $A with another spec" \
    "$T/last.out" || fail "reuse with another spec: $(cat "$T/last.out")"
expect_exit 4 mt submit --request-id 'bad id!' "$T/job.json"
grep -q "INVALID_ARGUMENT: request_id" "$T/last.out" || fail "bad id: $(cat "$T/last.out")"
D=$(mt submit "$T/job.json")
E=$(mt submit "$T/job.json")
[ "$D" != "$E" ] && [ "$D" != "$A" ] || fail "plain submits $D $E should be new jobs"
[ "$(n_jobs)" = 3 ] || fail "$(n_jobs) jobs, expected 3"

# ---- concurrent submits with one id: one job
for i in 1 2 3 4 5 6; do
    mt submit --request-id conc-1 "$T/job.json" >"$T/conc.$i" 2>&1 &
done
wait_for 30 "concurrent submits" bash -c "[ \$(cat $T/conc.* | grep -c '^job-') = 6 ]"
[ "$(cat "$T"/conc.* | sort -u | wc -l)" = 1 ] || fail "concurrent submits: $(cat "$T"/conc.*)"
[ "$(n_jobs)" = 4 ] || fail "$(n_jobs) jobs after 6 concurrent submits with one id"
log "6 concurrent submits with one request id made one job"

# ---- kill -9 while submits are in flight: at most one job per invocation
base=$(n_jobs)
tries=0
for k in 1 2 3 4 5; do
    subs=()
    for i in 1 2 3 4; do
        timeout 20 "$BIN/meshtrain" --coordinator "$COORD_URL" --timeout-ms 8000 \
            submit "$T/job.json" >"$T/crash.$k.$i" 2>&1 &
        subs+=($!)
        tries=$((tries + 1))
    done
    sleep "0.0$((k * 2))" # varying moments: before, during and after the stores
    kill -9 "$COORD_PID"
    wait "$COORD_PID" 2>/dev/null || true
    start_coordinator "coord_k$k" "$S" --listen "$COORD_URL"
    for p in "${subs[@]}"; do wait "$p" || true; done # each bounded by timeout 20
done
printed=$(cat "$T"/crash.* | grep -c '^job-' || true)
made=$(($(n_jobs) - base))
log "$tries submits across 5 kills: $printed printed an id, $made jobs stored"
[ "$made" -le "$tries" ] || fail "$made jobs from $tries submits: a retry made a duplicate"
for id in $(cat "$T"/crash.* | grep '^job-' || true); do
    mt status --json "$id" >/dev/null || fail "printed id $id is not stored"
done
log "PASS"
