# SPDX-License-Identifier: MIT
# test_fault_frozen_worker.sh — issue 19, fault 8 (the coordinator's part): a SIGSTOPped worker
# with a heartbeat timeout (60 s) longer than the job's collective deadline (4 s).
#  * `status` names the frozen worker within a few heartbeats, long before the collective
#    deadline or the heartbeat timeout: in its reason and in its `diagnosis` ("device stuck:
#    worker wb ...", status --json and the text output), which stays through the restart and is
#    gone once the job runs again;
#  * its peer's collective times out; the coordinator restarts the job (it used to FAIL it: the
#    peer gave up before the heartbeat timeout made the worker "lost"), blaming the frozen worker;
#  * the restarted job resumes from its checkpoint once a healthy worker is there;
#  * a collective deadline not longer than the coordinator's heartbeat window is refused at
#    submit.
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $FM not installed"; exit 0; }

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 60000 --stall-timeout-ms 2000
state_in() { mt status --json "$1" | jq -e --arg s "$2" '.state | IN($s | split(",")[])'; }
worker() { bg "$1" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$1"; }

jq '. + {steps: 1000000, batch_size: 32, mesh: {batch: 2},
         checkpoint: {every_steps: 25, keep: 2},
         restart: {max_restarts: 3, collective_deadline_ms: 4000}} | del(.epochs) |
    .model.layers[1].units = 16' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"

# a deadline inside the heartbeat window (3 x 200 ms + 1 s) is refused at submit
jq '.restart.collective_deadline_ms = 1500' "$T/job.json" >"$T/short.json"
got=0
mt submit "$T/short.json" >"$T/short.out" 2>&1 || got=$?
[ "$got" != 0 ] && grep -q "FAILED_PRECONDITION: restart.collective_deadline_ms: 1500 ms is not longer than this coordinator's heartbeat window of 1600 ms" "$T/short.out" ||
    fail "short deadline: exit $got: $(cat "$T/short.out")"

worker wa
worker wb
WB=$LAST_PID
wait_for 20 "two workers" workers_alive 2
JOB=$(mt submit "$T/job.json")
has_ckpt() { [ "$(mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete)] | length')" -ge 1 ]; }
wait_for 120 "a checkpoint of $JOB" has_ckpt
state_in "$JOB" RUNNING >/dev/null || fail "$JOB not RUNNING: $(mt status --json "$JOB" | jq -c '{state, reason}')"

kill -STOP "$WB"
T0=$SECONDS
named() { mt status --json "$JOB" | jq -e '.reason | test("^worker wb \\(.*\\) silent for [0-9]+ s: no heartbeat")'; }
wait_for 10 "status names the frozen worker" named
NAMED=$((SECONDS - T0))
log "status names wb after ${NAMED} s: $(mt status --json "$JOB" | jq -r .reason)"
[ "$NAMED" -lt 4 ] || fail "named after $NAMED s, not within the 4 s collective deadline"
# named within the collective deadline: before the attempt ends (no RESTARTING yet)
diagnosed() { mt status --json "$JOB" >"$T/d.json" && jq -e '.diagnosis | test("^device stuck: worker wb \\(.*\\) silent for [0-9]+ s: no heartbeat")' "$T/d.json"; }
wait_for 10 "the diagnosis naming the frozen worker" diagnosed
DIAG=$((SECONDS - T0))
jq -e '[.events[].state] | index("RESTARTING") == null' "$T/d.json" >/dev/null ||
    fail "diagnosed only after the attempt ended: $(jq -c '[.events[] | .state]' "$T/d.json")"
mt status "$JOB" | grep -q "^diagnosis device stuck: worker wb (" ||
    fail "status text has no diagnosis line: $(mt status "$JOB" | head -5)"
log "diagnosis after ${DIAG} s: $(mt status --json "$JOB" | jq -r .diagnosis)"

restarted() { mt status --json "$JOB" | jq -e '.state | IN("RESTARTING", "FAILED")'; }
wait_for 50 "the attempt to end" restarted
mt status --json "$JOB" >"$T/s.json"
jq -e '.state != "FAILED"' "$T/s.json" >/dev/null || fail "the job FAILED: $(jq -r .error "$T/s.json")"
mt status --json "$JOB" | jq -r '.events[]?.reason // empty' >"$T/events.txt" || true
grep -q "worker wb stopped answering (no heartbeat for [0-9]* s) while worker wa waited on it: DEADLINE_EXCEEDED" \
    "$T/events.txt" "$T/s.json" || fail "restart cause: $(jq -c '{state, reason}' "$T/s.json"); events: $(cat "$T/events.txt")"
log "restarted $((SECONDS - T0)) s after the SIGSTOP (heartbeat timeout 60 s): $(jq -r .reason "$T/s.json" | cut -c1-160)"
jq -e '.diagnosis | test("^device stuck: worker wb \\(.*\\) stopped answering: no heartbeat for [0-9]+ s while worker wa waited on it")' \
    "$T/s.json" >/dev/null || fail "diagnosis after the restart: $(jq -c .diagnosis "$T/s.json")"

# the restart does not land on the frozen worker (still "alive" for 60 s): it waits
sleep 2
mt status --json "$JOB" | jq -e '.state == "RESTARTING"' >/dev/null ||
    fail "the restart did not wait: $(mt status --json "$JOB" | jq -c '{state, reason, placement}')"
# a healthy worker joins: the job resumes from its checkpoint on wa + wc
worker wc
resumed() { mt status --json "$JOB" | jq -e '.state == "RUNNING"'; }
wait_for 90 "the job running again" resumed
mt status --json "$JOB" >"$T/s2.json"
jq -e '.restarts == 1 and ([.placement[].worker_id] | sort == ["wa", "wc"])' "$T/s2.json" >/dev/null ||
    fail "resumed placement: $(jq -c '{restarts, placement: [.placement[].worker_id]}' "$T/s2.json")"
jq -e '.diagnosis == null' "$T/s2.json" >/dev/null || fail "diagnosis kept while running: $(jq -c .diagnosis "$T/s2.json")"
kill -9 "$WB"
mt cancel "$JOB" >/dev/null
log "resumed on wa + wc after the restart; PASS"
