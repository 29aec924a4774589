# SPDX-License-Identifier: MIT
# test_fault_link.sh — issue 19, fault 7 (the coordinator's part): a broken link between two
# workers that both keep heartbeating. Fake workers (tests/tools/mt_fakeworker) stand for the
# real ones: fa's task fails 10 steps into every attempt that has fb in its rank table with
# "UNAVAILABLE: ... the link to rank 1 (fb's data address) broke", as a real worker's collective
# does at its deadline.
#  * the coordinator tells a link from a stuck device: the restart cause is "link fa<->fb
#    broken (both workers heartbeat; not a stuck device)", the status diagnosis "link fa<->fb:
#    ...", and the job RESTARTS (not FAILED);
#  * with no placement that avoids the pair it backs off (2 s, then 4 s: "backing off … after the
#    link fa<->fb broke") instead of looping through its restarts;
#  * once a third worker is there, the restart avoids the link (fa + fc) and the job SUCCEEDS.
source "$(dirname "$0")/lib.sh"

FAKE=$BIN/mt_fakeworker
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 5000
fake() { # fake NAME PORT [ENV...]
    local name=$1 port=$2
    shift 2
    bg "$name" env MT_FAKE_DATA_ADDRESS="tcp://127.0.0.1:$port" "$@" \
        "$FAKE" run "$COORD_URL" "$name" 1 "$T/$name.acks" 20
}
events() { mt status --json "$1" | jq -r '.events[]? | .state + " " + .reason'; }

fake fa 41001 MT_FAKE_LINK_FAIL="tcp://127.0.0.1:41002@10"
fake fb 41002
wait_for 20 "two fake workers" workers_alive 2
cat >"$T/job.json" <<'JSON'
{"name": "link", "steps": 120, "batch_size": 2, "mesh": {"batch": 2},
 "dataset": {"format": "synthetic", "examples": 64, "features": 4, "classes": 2},
 "checkpoint": {"every_steps": 5}, "restart": {"max_restarts": 6},
 "model": {"layers": [{"type": "dense", "units": 2}]}}
JSON
JOB=$(mt submit "$T/job.json")
T0=$SECONDS

backing_off() { mt status --json "$JOB" | jq -e '.state == "RESTARTING" and (.reason | test("^backing off [0-9]+ s after the link fa<->fb broke"))'; }
wait_for 30 "the job backing off from the link" backing_off
log "after the first failure ($((SECONDS - T0)) s): $(mt status --json "$JOB" | jq -r .reason)"
# the diagnosis names the link, not a device (docs/jobs.md#diagnosis), in JSON and in the text
mt status --json "$JOB" | jq -e '.diagnosis | test("^link fa<->fb: a collective between them failed while both workers heartbeat \\(not a stuck device\\)")' >/dev/null ||
    fail "diagnosis: $(mt status --json "$JOB" | jq -c .diagnosis)"
mt status "$JOB" | grep -q "^diagnosis link fa<->fb: " || fail "status text: $(mt status "$JOB" | head -5)"
events "$JOB" >"$T/ev1.txt"
grep -q "^RESTARTING link fa<->fb broken (both workers heartbeat; not a stuck device): worker fa" "$T/ev1.txt" ||
    grep -q "^RESTARTING link fa<->fb broken (both workers heartbeat; not a stuck device): UNAVAILABLE" "$T/ev1.txt" ||
    fail "restart cause: $(cat "$T/ev1.txt")"

# the back-off ends, the pair is tried again (the link may have healed), fails again: 4 s now
second() { [ "$(events "$JOB" | grep -c '^RESTARTING link fa<->fb')" -ge 2 ]; }
wait_for 40 "the second link failure" second
wait_for 10 "a longer back-off" backing_off
mt status --json "$JOB" | jq -e '.state != "FAILED"' >/dev/null || fail "the job FAILED"
events "$JOB" | grep '^SCHEDULED' | tail -1 | grep -q "again over the link fa<->fb after 2 s of back-off" ||
    fail "second placement: $(events "$JOB" | grep '^SCHEDULED')"
RESTARTS=$(mt status --json "$JOB" | jq .restarts)
log "second failure after $((SECONDS - T0)) s, $RESTARTS restarts: $(mt status --json "$JOB" | jq -r .reason)"

# a third worker: the next placement avoids holding both ends of the link
fake fc 41003
done_() { mt status --json "$JOB" | jq -e '.state | IN("SUCCEEDED", "FAILED")'; }
wait_for 60 "the job ends" done_
mt status --json "$JOB" >"$T/s.json"
jq -e '.state == "SUCCEEDED"' "$T/s.json" >/dev/null || fail "job: $(jq -c '{state, error}' "$T/s.json")"
events "$JOB" | grep '^SCHEDULED' | tail -1 | grep -q "avoiding the link fa<->fb" ||
    fail "last placement: $(events "$JOB" | grep '^SCHEDULED' | tail -1)"
jq -e '[.placement[].worker_id] | sort == ["fa", "fc"]' "$T/s.json" >/dev/null ||
    fail "placement: $(jq -c '[.placement[].worker_id]' "$T/s.json")"
log "SUCCEEDED on fa + fc, avoiding the link, $(jq .restarts "$T/s.json") restarts in all; PASS"
