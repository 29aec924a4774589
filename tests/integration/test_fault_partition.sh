#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_fault_partition.sh — issue 19, fault 7 with real workers and a real network: two workers
# in their own network namespaces (and UTS namespaces, so they do not share memory as one host)
# reach the coordinator over one veth pair each and each other over a third; that third link is
# taken down in the middle of a job, a partition between the workers only: both keep
# heartbeating.
#  * the collective ends at its deadline; the coordinator restarts the job naming the link
#    ("link wa<->wb broken (both workers heartbeat; not a stuck device)"; the pair in the order
#    of whichever end reported first); within the collective deadline, while the group waits,
#    `status` gives the stall diagnosis "link wa<->wb: ..." and never blames a healthy worker
#    as a stuck device;
#  * with no placement that avoids the pair the job backs off instead of looping through its
#    restarts; the link comes back, the job is placed over it again, resumes from its checkpoint
#    and trains on past the step it was cut at.
# Needs root and network namespaces (`ip netns add`); SKIPs with the reason otherwise.
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $FM not installed"; exit 0; }
source "$(dirname "$0")/netns_lib.sh"
netns_up || { echo "SKIP: $NETNS_WHY"; exit 0; }
netns_cleanup() {
    local rc=$?
    netns_down
    set +e
    (exit $rc) # cleanup reads the exit status
    cleanup
}
trap netns_cleanup EXIT

PORT=$(free_port)
start_coordinator coord "$T/state" --listen "tcp://$NET_CA:$PORT" --insecure --http off \
    --heartbeat-ms 200 --heartbeat-timeout-ms 60000 --stall-timeout-ms 2000 --stall-restart-ms 0
netns_worker wa "$NA" "$NET_DA"
netns_worker wb "$NB" "$NET_DB"
wait_for 30 "two workers in their namespaces" workers_alive 2

jq '. + {steps: 1000000, batch_size: 32, mesh: {batch: 2},
         checkpoint: {every_steps: 25, keep: 2},
         restart: {max_restarts: 20, collective_deadline_ms: 4000}} | del(.epochs) |
    .model.layers[1].units = 16' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json")
has_ckpt() { [ "$(mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete)] | length')" -ge 1 ]; }
wait_for 120 "a checkpoint of $JOB" has_ckpt
mt status --json "$JOB" | jq -e '.state == "RUNNING"' >/dev/null || fail "$JOB not RUNNING"
mt status --json "$JOB" | jq -e '[.placement[].worker_id] | sort == ["wa", "wb"]' >/dev/null ||
    fail "placement: $(mt status --json "$JOB" | jq -c '[.placement[].worker_id]')"

# the partition: the workers' data link goes down; both still reach the coordinator
netns_cut
T0=$SECONDS
log "link wa<->wb down"
# within the collective deadline (before the attempt ends) the stall diagnosis names the link:
# both sides wait for data (one may already be in the next collective), both heartbeat
link_named() { mt status --json "$JOB" >"$T/d.json" && jq -e '(.diagnosis // "") | test("^link (wa<->wb|wb<->wa): step [0-9]+ ")' "$T/d.json"; }
end=$((SECONDS + 30))
until link_named >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "no stall diagnosis naming the link: $(jq -c '{state, diagnosis, reason}' "$T/d.json")"
    sleep 0.1
done
jq -e '.state == "STALLED" and ([.events[].state] | index("RESTARTING") == null)' "$T/d.json" >/dev/null ||
    fail "link named only after the attempt ended: $(jq -c '{state, events: [.events[] | .state]}' "$T/d.json")"
log "diagnosed after $((SECONDS - T0)) s: $(jq -r .diagnosis "$T/d.json" | cut -c1-200)"
mt status "$JOB" | grep -Eq "^diagnosis link (wa<->wb|wb<->wa): " || fail "status text: $(mt status "$JOB" | head -5)"
events() { mt status --json "$JOB" | jq -r '.events[]? | .state + " " + .reason'; }
restarted() { events | grep -Eq '^RESTARTING link (wa<->wb|wb<->wa) broken \(both workers heartbeat; not a stuck device\)'; }
wait_for 60 "the restart naming the link" restarted
log "restarted $((SECONDS - T0)) s after the cut: $(events | grep '^RESTARTING' | tail -1 | cut -c1-200)"
! events | grep -E '^(RESTARTING|STALLED)' | grep -Eq 'device stuck|stopped answering|never entered' ||
    fail "a healthy worker was blamed: $(events | grep -E '^(RESTARTING|STALLED)')"
mt status --json "$JOB" | jq -e '.state != "FAILED"' >/dev/null || fail "the job FAILED: $(mt status --json "$JOB" | jq -r .error)"
backing_off() { mt status --json "$JOB" | jq -e '.state == "RESTARTING" and (.reason | test("^backing off [0-9]+ s after the link (wa<->wb|wb<->wa) broke"))'; }
wait_for 30 "the job backing off from the link" backing_off
log "backing off: $(mt status --json "$JOB" | jq -r .reason)"

# the link heals: after the back-off the job is placed over it again and finishes
netns_heal
log "link wa<->wb up again after $((SECONDS - T0)) s"
AT=$(mt status --json "$JOB" | jq .step)
resumed() { mt status --json "$JOB" >"$T/s.json" && jq -e --argjson at "$AT" '.state == "FAILED" or (.state == "RUNNING" and .step > $at + 25)' "$T/s.json"; }
wait_for 180 "training past step $AT again, or the end" resumed
# frames of the cut attempt still in a connection's send buffer arrive once the link heals; the
# new attempt's world drops them (core/coll: a job id up to MT_COLL_MAX_ATTEMPTS below its own)
jq -e '.state == "RUNNING" and .restarts >= 1 and .diagnosis == null' "$T/s.json" >/dev/null ||
    fail "after the partition: $(jq -c '{state, restarts, diagnosis, error}' "$T/s.json")"
log "training again past step $AT after $(jq .restarts "$T/s.json") restart(s), $((SECONDS - T0)) s after the cut; PASS"
mt cancel "$JOB" >/dev/null
