#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_cluster_script.sh — deploy/cluster.sh (`make cluster` / `make cluster-stop`, the README's
# quickstart) on free ports: start brings up a coordinator and 2 workers that outlive the
# script that started them, a second start says "already running", the dashboard answers,
# a short job submitted to it succeeds across both workers and leaves no "connection ... lost"
# warning in their logs (core/coll's BYE), status lists the processes, stop ends all three
# (status then exits 3), and a start on a taken port fails with a hint.
source "$(dirname "$0")/lib.sh"
export MT_CLUSTER_DIR=$T/cluster MT_CLUSTER_WORKERS=2 MT_CLUSTER_DEVICES=2
export MT_CLUSTER_RPC=tcp://127.0.0.1:$(free_port) MT_CLUSTER_HTTP=127.0.0.1:$(free_port)
CL=("$SRC/deploy/cluster.sh")
trap 'rc=$?; "${CL[@]}" stop "$BIN" >/dev/null 2>&1 || true; set +e; (exit $rc); cleanup' EXIT
COORD_URL=$MT_CLUSTER_RPC

"${CL[@]}" start "$BIN" >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
grep -q "dashboard http://$MT_CLUSTER_HTTP/" "$T/start.out" || fail "start: $(cat "$T/start.out")"
grep -q "export MESHTRAIN_COORDINATOR=$MT_CLUSTER_RPC" "$T/start.out" ||
    fail "start should say how to reach a non-default address: $(cat "$T/start.out")"
[ "$(wc -l <"$MT_CLUSTER_DIR/pids")" = 3 ] || fail "pids: $(cat "$MT_CLUSTER_DIR/pids")"
"${CL[@]}" start "$BIN" | grep -q "already running" || fail "a second start"
curl -sf "http://$MT_CLUSTER_HTTP/" >/dev/null || fail "no dashboard at $MT_CLUSTER_HTTP"
"${CL[@]}" status "$BIN" >"$T/status.out" || fail "status: $(cat "$T/status.out")"
[ "$(grep -c ': running (pid' "$T/status.out")" = 3 ] || fail "status: $(cat "$T/status.out")"
log "cluster up: $(tr '\n' ' ' <"$MT_CLUSTER_DIR/pids")"

if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    # 2 x 2 devices with a checkpoint at the end, as `make demo`: one worker closes its world
    # while the other still has its own (before core/coll's BYE: a WARN in about half the runs)
    jq '. + {mesh: {batch: 4}, steps: 40, checkpoint: {every_steps: 20}} | del(.epochs)' \
        "$SRC/examples/fashion_mnist_mlp.json" >"$T/short.json"
    timeout 120 "$BIN/meshtrain" --coordinator "$COORD_URL" submit --wait "$T/short.json" \
        >"$T/job.out" 2>&1 || fail "a job on the cluster: $(cat "$T/job.out")"
    log "a job on the cluster: $(tail -n 1 "$T/job.out")"
fi

mapfile -t pids < <(awk '{ print $2 }' "$MT_CLUSTER_DIR/pids")
"${CL[@]}" stop "$BIN" | grep -q "cluster: stopped" || fail "stop"
for p in "${pids[@]}"; do # gone, or a zombie of a parent that does not reap (a container's init)
    st=$(ps -o stat= -p "$p" 2>/dev/null || true)
    [ -z "$st" ] || [ "${st#Z}" != "$st" ] || fail "process $p still runs after stop ($st)"
done
# the job's normal end (each worker closes its data-plane connections) is no lost connection
! grep -H "WARN.*connection .* lost" "$MT_CLUSTER_DIR"/worker-*.log ||
    fail "a successful job left a lost-connection warning in a worker log"
rc=0
"${CL[@]}" status "$BIN" >/dev/null || rc=$?
[ "$rc" = 3 ] || fail "status after stop exited $rc"

# a taken port: the start fails and says which setting to change
bg blocker "$BIN/meshtrain-coordinator" --state-dir "$T/other" --listen "$MT_CLUSTER_RPC" --http off
wait_for 20 "the blocking coordinator" test -s "$T/other/endpoints.json"
rc=0
"${CL[@]}" start "$BIN" >"$T/taken.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "MT_CLUSTER_RPC" "$T/taken.out" || fail "start on a taken port: $(cat "$T/taken.out")"
[ ! -f "$MT_CLUSTER_DIR/pids" ] || fail "a failed start left $(cat "$MT_CLUSTER_DIR/pids")"
log "stop ended all three; a taken port fails the start with a hint"
echo OK
