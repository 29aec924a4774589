# SPDX-License-Identifier: MIT
# test_multihost.sh — meshtrain across "hosts" that have their own addresses:
# network namespaces joined by veth pairs to a private bridge, all inside the
# sandbox. A switch namespace holds the bridge, so nothing is added to the
# root namespace and 10.213.0.0/24 exists only inside namespaces this run made:
#   mt<pid>sw  bridge br0, one veth end per host
#   mt<pid>c   coordinator 10.213.0.1 (RPC :7400, HTTP :7480)
#   mt<pid>w1  worker w1   10.213.0.2 (own UTS host name)
#   mt<pid>w2  worker w2   10.213.0.3 (--data-listen tcp://0.0.0.0:7500)
#   mt<pid>w3  worker w3   10.213.0.4 (the replacement; no --data-listen)
# Checks: both workers register over the bridge with their own host names,
# data-plane addresses (w2's and w3's from the default-address rule of
# docs/deploy.md) and source addresses; a data-parallel job (8 steps of the
# Fashion-MNIST MLP on mesh batch=4, 2 devices per worker) runs across w1 + w2
# through `submit --wait` and its metrics are in the coordinator; failover: a
# longer job with checkpoints every 20 steps, w1's link goes down mid-job ->
# w1 lost after the heartbeat timeout while w2 stays alive, the job goes
# RESTARTING; w3 starts in a third namespace, the job resumes on w2 + w3 from
# its checkpoint and succeeds; w1's link comes back -> w1 alive again.
# w2's attempt stuck on the dead link must end within 10 s of the cancel (the
# worker cancels its collective world). Runtime ~35 s.
# Every namespace (and with it every veth and the bridge) is removed on exit,
# also on failure; names carry the pid so parallel runs do not collide.
# Runs only as root with `ip` and network namespaces; otherwise prints why it
# skipped and exits 0.
source "$(dirname "$0")/lib.sh"

skip() { echo "SKIP test_multihost: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (running as uid $(id -u))"
command -v ip >/dev/null || skip "the 'ip' command (iproute2) is not installed"
command -v unshare >/dev/null || skip "'unshare' (util-linux) is not installed"

R=mt$$
NS_SW=${R}sw
MADE_NS=()
netns_cleanup() {
    local p
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    PIDS=()
    for p in "${MADE_NS[@]:-}"; do
        [ -n "$p" ] && { ip netns del "$p" 2>/dev/null || echo "WARN: could not delete netns $p" >&2; }
    done
    MADE_NS=()
}
trap 'rc=$?; netns_cleanup; (exit $rc); cleanup' EXIT
trap 'exit 130' INT TERM

mkns() {
    ip netns add "$1" || return 1
    MADE_NS+=("$1")
    ip -n "$1" link set lo up
}
mkns "$NS_SW" 2>"$T/netns.err" || skip "cannot create network namespaces: $(cat "$T/netns.err")"
ip -n "$NS_SW" link add br0 type bridge
ip -n "$NS_SW" link set br0 up

# host NAME ADDR: namespace ${R}NAME with eth0=ADDR/24 on the bridge
host() {
    local ns=$R$1
    mkns "$ns"
    ip -n "$NS_SW" link add "v-$1" type veth peer name eth0 netns "$ns"
    ip -n "$NS_SW" link set "v-$1" master br0 up
    ip -n "$ns" addr add "$2/24" dev eth0
    ip -n "$ns" link set eth0 up
}
host c 10.213.0.1
host w1 10.213.0.2
host w2 10.213.0.3
NS_C=${R}c
link_up() { ip -n "$R$1" -o link show eth0 | grep -q 'state UP'; }
for h in c w1 w2; do wait_for 10 "eth0 of $R$h up" link_up "$h"; done
log "namespaces $NS_SW ${R}c ${R}w1 ${R}w2 on bridge br0"

# on_host NAME HOSTNAME CMD...: run CMD in host NAME's namespace with its own
# host name. Every step execs (bg's subshell, ip netns exec, unshare, sh), so the
# pid bg records is CMD's own and cleanup's kill reaches it.
on_host() {
    local ns=$R$1 hn=$2
    shift 2
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$hn" "$@"
}

umask 077
head -c 24 /dev/urandom | base64 >"$T/token"
COORD_URL=tcp://10.213.0.1:7400
# listening on every interface as the units and containers do (here: lo + the bridge)
bg coord on_host c "coord-$R" "$BIN/meshtrain-coordinator" --listen tcp://0.0.0.0:7400 \
    --http 0.0.0.0:7480 --state-dir "$T/state" --token-file "$T/token" \
    --heartbeat-ms 200 --heartbeat-timeout-ms 1500
wait_for 20 "coordinator endpoints" test -s "$T/state/endpoints.json"
[ "$(ip netns exec "$NS_C" curl -sf http://10.213.0.1:7480/healthz)" = ok ] || fail "/healthz in ${R}c"

# mtc ARGS...: the CLI, run on the coordinator's host
mtc() { ip netns exec "$NS_C" "$BIN/meshtrain" --coordinator "$COORD_URL" --token-file "$T/token" "$@"; }

# w1 listens on its own address; w2 on every interface, and reports its address toward the
# coordinator (docs/deploy.md, "The data-plane address"): both report tcp://10.213.0.X:7500
LISTEN=([1]=tcp://10.213.0.2:7500 [2]=tcp://0.0.0.0:7500)
for i in 1 2; do
    bg "w$i" on_host "w$i" "host-w$i-$R" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" \
        --devices 2 --name "w$i" --token-file "$T/token" --data-listen "${LISTEN[$i]}" \
        --data-root /usr/share/datasets
done
state_is() { mtc workers --json | jq -e --arg n "$1" --arg s "$2" '.workers[] | select(.name == $n) | .state == $s'; }
wait_for 20 "w1 alive" state_is w1 alive
wait_for 20 "w2 alive" state_is w2 alive
mtc workers --json >"$T/workers.json"
for i in 1 2; do
    jq -e --arg n "w$i" --arg h "host-w$i-$R" --arg d "tcp://10.213.0.$((i + 1)):7500" \
        '.workers[] | select(.name == $n) | .host == $h and .data_address == $d and (.devices | length) == 2' \
        "$T/workers.json" >/dev/null || fail "w$i registration: $(cat "$T/workers.json")"
done
# the coordinator's RPC connections come from the workers' own addresses
ip netns exec "$NS_C" ss -Htn state established '( sport = :7400 )' >"$T/conns.txt"
for a in 10.213.0.2 10.213.0.3; do
    grep -q " $a:" "$T/conns.txt" || fail "no connection from $a: $(cat "$T/conns.txt")"
done
mtc workers
log "w1 and w2 registered over the bridge from 10.213.0.2 and 10.213.0.3"

# ---- job step: a data-parallel job across the hosts (2 workers x 2 devices), to the end ----
# The Fashion-MNIST files are read in every namespace (network namespaces share the file
# system); each worker confines spec paths to --data-root /usr/share/datasets.
jq '. + {mesh: {batch: 4}, steps: 8} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/dp.json"
rc=0
mtc submit --wait --timeout 60 "$T/dp.json" >"$T/dp.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "data-parallel job across the hosts: submit --wait exited $rc: $(cat "$T/dp.out")"
JOB=$(head -n 1 "$T/dp.out")
[ "$(sed -n 2p "$T/dp.out")" = "job $JOB SUCCEEDED" ] || fail "submit --wait output: $(cat "$T/dp.out")"
mtc status --json "$JOB" >"$T/dp.json.status"
jq -e '.state == "SUCCEEDED" and ([.placement[].worker_id] | unique | length == 2)' \
    "$T/dp.json.status" >/dev/null || fail "$JOB: $(jq -c '{state, placement}' "$T/dp.json.status")"
jq -e '[.latest_metrics[].name] | index("loss") and index("test_accuracy")' "$T/dp.json.status" \
    >/dev/null || fail "$JOB metrics missing: $(jq -c .latest_metrics "$T/dp.json.status")"
n=$(mtc watch --json "$JOB" | jq -s '[.[] | select(.name == "loss")] | length')
[ "$n" = 8 ] || fail "$JOB: $n loss points in the coordinator, expected 8"
for i in 1 2; do
    grep -q "job $JOB: finished: 8 steps" "$T/w$i.log" || fail "w$i did not finish $JOB: $(tail -n 5 "$T/w$i.log")"
done
log "job $JOB: 8 steps on mesh batch=4 over w1 + w2, SUCCEEDED, 8 loss points stored"

# ---- failover: w1's link goes down mid-job -> w1 lost, job RESTARTING; a replacement host w3
# (no --data-listen: it reports its address toward the coordinator) joins; the job resumes from
# its checkpoint and succeeds; w1's link comes back -> w1 alive again ----
FT_STEPS=${MT_MULTIHOST_STEPS:-160}
jq --argjson s "$FT_STEPS" '. + {mesh: {batch: 4}, steps: $s, checkpoint: {every_steps: 20},
    restart: {max_restarts: 2}} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/ft.json"
FT=$(mtc submit "$T/ft.json")
job_is() { mtc status --json "$FT" | jq -e --arg s "$1" '.state == $s'; }
ckpt_running() {
    mtc status --json "$FT" | jq -e '.state == "RUNNING" and any(.checkpoints[]; .complete and .step >= 20)'
}
wait_for 40 "$FT running with a complete checkpoint" ckpt_running
down_step=$(mtc status --json "$FT" | jq .step)
[ "$down_step" -lt "$FT_STEPS" ] || fail "$FT ended before the link went down (step $down_step)"
ip -n "${R}w1" link set eth0 down
t0=$SECONDS
wait_for 15 "w1 marked lost after its link went down" state_is w1 lost
state_is w2 alive >/dev/null || fail "w2 should stay alive while w1's link is down"
wait_for 15 "$FT RESTARTING after w1 was lost" job_is RESTARTING
mtc status --json "$FT" | jq -e '.restarts == 1 and
    any(.events[]; .state == "RESTARTING" and (.reason | test("worker w1 lost")))' >/dev/null ||
    fail "$FT: $(mtc status --json "$FT" | jq -c '{restarts, events}')"
log "w1 link down (job at step >= $down_step) -> w1 lost, $FT RESTARTING after ~$((SECONDS - t0)) s; w2 alive"
# w2's devices wait in a collective for w1's data; the coordinator's cancel ends that wait at
# once (not at the 30 s collective deadline) and frees w2's data plane for the next attempt
w2_stopped() { grep -q "job $FT attempt 1: cancelled$" "$T/w2.log"; }
wait_for 10 "w2 to stop attempt 1 of $FT after the cancel" w2_stopped
host w3 10.213.0.4
bg w3 on_host w3 "host-w3-$R" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" \
    --devices 2 --name w3 --token-file "$T/token" --data-root /usr/share/datasets
wait_for 20 "w3 alive" state_is w3 alive
mtc workers --json | jq -e '.workers[] | select(.name == "w3") | .data_address |
    test("^tcp://10\\.213\\.0\\.4:[1-9][0-9]*$")' >/dev/null ||
    fail "w3 data-plane address: $(mtc workers --json | jq -c '[.workers[] | {name, data_address}]')"
finished() { mtc status --json "$FT" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
wait_for 60 "$FT to end after the restart" finished
mtc status --json "$FT" >"$T/ft.status"
jq -e '.state == "SUCCEEDED" and .restarts >= 1 and any(.events[]; .state == "RESTARTING")' \
    "$T/ft.status" >/dev/null || fail "$FT: $(jq -c '{state, restarts, error, events}' "$T/ft.status")"
jq -e '[.placement[].worker_id] | unique | length == 2' "$T/ft.status" >/dev/null ||
    fail "$FT final placement: $(jq -c .placement "$T/ft.status")"
resumed=$(grep -ho "job $FT: resuming from checkpoint step [0-9]*" "$T/w2.log" "$T/w3.log" |
    awk '{print $NF}' | sort -u)
[ -n "$resumed" ] && [ "$resumed" -ge 20 ] && [ "$resumed" -le "$FT_STEPS" ] ||
    fail "$FT did not resume from a checkpoint: '$resumed'"
grep -q "job $FT: finished: $FT_STEPS steps" "$T/w3.log" || fail "w3 did not finish $FT"
log "$FT: resumed from checkpoint step $resumed on w2 + w3, SUCCEEDED after $((SECONDS - t0)) s"
ip -n "${R}w1" link set eth0 up
wait_for 30 "w1 alive again after its link came back" state_is w1 alive
state_is w2 alive >/dev/null || fail "w2 should still be alive"
log "w1 link up -> alive again"

# teardown now, and prove nothing of this run is left: no namespace, no process
[ "$(readlink "/proc/$LAST_PID/exe")" = "$(readlink -f "$BIN/meshtrain-worker")" ] ||
    fail "bg pid $LAST_PID is not the worker itself: $(readlink "/proc/$LAST_PID/exe")"
netns_cleanup
left=$(ip netns list | grep -c "^$R" || true)
[ "$left" = 0 ] || fail "$left namespaces of this run left: $(ip netns list | grep "^$R")"
! pgrep -f "$T/" >/dev/null || fail "processes of this run left: $(pgrep -af "$T/")"
log "PASS"
