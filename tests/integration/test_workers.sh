# SPDX-License-Identifier: MIT
# test_workers.sh — the walking skeleton with real processes on loopback:
# a coordinator and two workers register; `meshtrain workers --json` shows
# both with all devices; a kill -9'd worker is shown lost after the heartbeat
# timeout; a restarted coordinator still knows the workers from SQLite and the
# live one re-registers; /healthz answers; CLI exit codes; tokens; duplicate names.
source "$(dirname "$0")/lib.sh"

S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 1500
log "coordinator at $COORD_URL, http $HTTP_URL"

[ "$(curl -sf "$HTTP_URL/healthz")" = "ok" ] || fail "/healthz did not answer ok"

# task directories left in TMPDIR by workers that died are swept at start: a directory
# from before locks (dead PID, no .lock) and one whose lock is free go; one whose lock is
# held (by this shell here, standing in for a live worker in another PID namespace) stays
mkdir -p "$T/tmp"
DEAD=$(sh -c 'echo $$')
mkdir -m 700 "$T/tmp/meshtrain-worker-$DEAD-job-000001-1" \
    "$T/tmp/meshtrain-worker-$DEAD-job-000002-1-aaaaaa" "$T/tmp/meshtrain-worker-$DEAD-job-000003-1-bbbbbb"
echo x >"$T/tmp/meshtrain-worker-$DEAD-job-000001-1/ckpt-00000010.mtc"
: >"$T/tmp/meshtrain-worker-$DEAD-job-000002-1-aaaaaa/.lock"
: >"$T/tmp/meshtrain-worker-$DEAD-job-000003-1-bbbbbb/.lock"
exec 9>"$T/tmp/meshtrain-worker-$DEAD-job-000003-1-bbbbbb/.lock"
flock -x 9
bg wa env TMPDIR="$T/tmp" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 \
    --name worker-a
WA=$LAST_PID
bg wb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 3 --name worker-b
WB=$LAST_PID

alive_count() { mt workers --json | jq -e "[.workers[] | select(.state == \"alive\")] | length == $1"; }
wait_for 20 "two alive workers" alive_count 2
mt workers --json >"$T/workers.json"
jq -e '.workers | map(.name) == ["worker-a", "worker-b"]' "$T/workers.json" >/dev/null ||
    fail "worker names: $(cat "$T/workers.json")"
jq -e '[.workers[] | .devices | length] == [2, 3]' "$T/workers.json" >/dev/null ||
    fail "device counts"
jq -e '[.workers[1].devices[].index] == [0, 1, 2] and
       all(.workers[].devices[]; .kind == "cpu" and .health == "ok")' "$T/workers.json" \
    >/dev/null || fail "device descriptions"
mt workers | grep -q 'worker-b .*alive .*3 cpu' || fail "table output"
log "both workers registered with 5 devices"
grep -q "removed 2 task directories left by workers that died" "$T/wa.log" ||
    fail "no sweep message: $(cat "$T/wa.log")"
[ "$(ls "$T/tmp")" = "meshtrain-worker-$DEAD-job-000003-1-bbbbbb" ] ||
    fail "after the sweep TMPDIR holds: $(ls "$T/tmp")"
log "start-up sweep removed the 2 dead task directories and kept the locked one"

# a second process with a live worker's name is refused
bg dup "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name worker-a
DUP=$LAST_PID
wait_for 10 "duplicate name refused" grep -q ALREADY_EXISTS "$T/dup.log"
kill "$DUP"

# worker-a dies: lost after the heartbeat timeout, worker-b stays alive
kill -9 "$WA"
lost_a() { mt workers --json | jq -e '.workers[] | select(.name == "worker-a") | .state == "lost"'; }
wait_for 10 "worker-a marked lost" lost_a
mt workers --json | jq -e '.workers[] | select(.name == "worker-b") | .state == "alive"' \
    >/dev/null || fail "worker-b should still be alive"
mt workers --state lost --json | jq -e '.workers | length == 1' >/dev/null || fail "state filter"
log "killed worker marked lost"

# clean shutdown with exit 0, then restart on the same port with the same state
PORT_URL=$COORD_URL
kill -TERM "$COORD_PID"
rc=0; wait "$COORD_PID" || rc=$?
[ $rc -eq 0 ] || fail "coordinator exited $rc on SIGTERM"
grep -q "coordinator stopped" "$T/coord.log" || fail "no clean-stop line"
expect_exit 3 mt workers       # unreachable while it is down
start_coordinator coord2 "$S" --listen "$PORT_URL" --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 1500
mt workers --json >"$T/after.json"
jq -e '[.workers[].name] == ["worker-a", "worker-b"]' "$T/after.json" >/dev/null ||
    fail "workers not remembered after restart: $(cat "$T/after.json")"
jq -e '.workers[] | select(.name == "worker-a") | .state == "lost"' "$T/after.json" >/dev/null ||
    fail "worker-a should stay lost after restart"
wait_for 15 "worker-b re-registers with the new coordinator" \
    grep -q "worker worker-b registered" "$T/coord2.log"
log "restarted coordinator knows both workers; worker-b re-registered"

# a worker leaves cleanly on SIGTERM
kill -TERM "$WB"
rc=0; wait "$WB" || rc=$?
[ $rc -eq 0 ] || fail "worker exited $rc on SIGTERM"
grep -q "worker stopped" "$T/wb.log" || fail "worker did not log a clean stop"

# CLI exit codes and usage
expect_exit 2 "$BIN/meshtrain" no-such-command
expect_exit 2 mt workers --bogus
expect_exit 4 mt workers --state sleeping
expect_exit 0 mt workers --help
expect_exit 0 "$BIN/meshtrain" --help
MESHTRAIN_COORDINATOR=$COORD_URL expect_exit 0 "$BIN/meshtrain" workers
expect_exit 3 "$BIN/meshtrain" --coordinator tcp://127.0.0.1:1 workers
grep -q "tcp://127.0.0.1:1" "$T/last.out" || fail "unreachable message lacks the address"

# a coordinator with a token: calls without it are refused (exit 4), with it served
umask 077
echo "s3cret-token" >"$T/token"
echo "wrong" >"$T/badtoken"
start_coordinator coord3 "$T/state3" --listen tcp://127.0.0.1:0 --http off \
    --token-file "$T/token"
expect_exit 4 mt workers
grep -q UNAUTHENTICATED "$T/last.out" || fail "no UNAUTHENTICATED message"
expect_exit 4 mt --token-file "$T/badtoken" workers
expect_exit 0 mt --token-file "$T/token" workers
bg wt "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name tok \
    --token-file "$T/token"
tok_alive() { mt --token-file "$T/token" workers --json | jq -e '.workers[0].name == "tok"'; }
wait_for 15 "worker with token registers" tok_alive
chmod 644 "$T/token"
expect_exit 2 "$BIN/meshtrain-coordinator" --token-file "$T/token" --state-dir "$T/s4"
grep -q "readable by group or others" "$T/last.out" || fail "token permission check"
log "PASS"
