#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cluster.sh start|stop|status [BUILD_DIR] — a local cluster that stays up (`make cluster`,
# `make cluster-stop`): a coordinator and two workers with 2 devices each on loopback, started
# in the background (their own session, so closing the terminal does not stop them), state and
# logs under BUILD_DIR/cluster/. The coordinator listens on the CLI's default address, so
# `meshtrain submit`, `watch`, `jobs` need no --coordinator, and serves the dashboard.
#
#   start   start what is not running yet; print the addresses (exit 0 when already up)
#   stop    SIGTERM the three processes, SIGKILL those still there after 15 s
#   status  which of them run, and `meshtrain workers`
#
# Settings (environment): MT_CLUSTER_RPC (default tcp://127.0.0.1:7400), MT_CLUSTER_HTTP
# (127.0.0.1:7480), MT_CLUSTER_WORKERS (2), MT_CLUSTER_DEVICES (2 per worker), MT_CLUSTER_DIR
# (BUILD_DIR/cluster). Workers read data under the repository and /usr/share/datasets.
# Test: tests/integration/test_cluster_script.sh.
set -euo pipefail
cmd=${1:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${2:-$SRC/build}" && pwd)
D=${MT_CLUSTER_DIR:-$B/cluster}
RPC=${MT_CLUSTER_RPC:-tcp://127.0.0.1:7400}
HTTP=${MT_CLUSTER_HTTP:-127.0.0.1:7480}
NW=${MT_CLUSTER_WORKERS:-2}
ND=${MT_CLUSTER_DEVICES:-2}
PIDS=$D/pids # one "name pid" line per process started

running() { # running PID: the process exists and is ours (not a reused pid)
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null &&
        grep -q meshtrain "/proc/$1/cmdline" 2>/dev/null
}

alive_workers() {
    "$B/meshtrain" --coordinator "$RPC" workers --state alive --json 2>/dev/null |
        grep -c '"worker_id"' || true
}

start() {
    local name pid n cpid
    mkdir -p "$D"
    if [ -f "$PIDS" ]; then
        while read -r name pid; do
            running "$pid" || { stop; break; } # a partial cluster: start it all again
        done <"$PIDS"
    fi
    if [ -f "$PIDS" ]; then
        echo "cluster: already running (coordinator $RPC, dashboard http://$HTTP/)"
        return 0
    fi
    : >"$PIDS"
    export OPENBLAS_NUM_THREADS=1 # one math thread per device
    rm -f "$D/state/endpoints.json"
    setsid "$B/meshtrain-coordinator" --state-dir "$D/state" --listen "$RPC" --http "$HTTP" \
        </dev/null >"$D/coordinator.log" 2>&1 &
    cpid=$!
    echo "coordinator $cpid" >>"$PIDS"
    # kill -0, not running(): until setsid has exec'd the coordinator, its cmdline is setsid's
    for _ in $(seq 100); do
        [ -s "$D/state/endpoints.json" ] && break
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -s "$D/state/endpoints.json" ]; then
        tail -n 5 "$D/coordinator.log" >&2
        echo "cluster: the coordinator did not start (is $RPC or $HTTP taken? set" \
            "MT_CLUSTER_RPC / MT_CLUSTER_HTTP)" >&2
        stop >/dev/null
        return 1
    fi
    cd "$SRC" # workers read data under the repository by default (their --data-root)
    for n in $(seq "$NW"); do
        setsid "$B/meshtrain-worker" --coordinator "$RPC" --devices "$ND" \
            --name "local-worker-$n" </dev/null >"$D/worker-$n.log" 2>&1 &
        echo "worker-$n $!" >>"$PIDS"
    done
    for _ in $(seq 200); do
        [ "$(alive_workers)" = "$NW" ] && break
        sleep 0.1
    done
    if [ "$(alive_workers)" != "$NW" ]; then
        echo "cluster: the workers did not register (logs in $D/)" >&2
        stop >/dev/null
        return 1
    fi
    echo "cluster: coordinator $RPC, $NW workers x $ND devices, logs in $D/"
    echo "cluster: dashboard http://$HTTP/"
    [ "$RPC" = tcp://127.0.0.1:7400 ] || echo "cluster: export MESHTRAIN_COORDINATOR=$RPC"
    echo "cluster: stop it with 'make cluster-stop' (deploy/cluster.sh stop)"
}

stop() {
    local name pid left
    [ -f "$PIDS" ] || { echo "cluster: not running"; return 0; }
    while read -r name pid; do
        running "$pid" && kill -TERM "$pid" 2>/dev/null || true
    done <"$PIDS"
    for _ in $(seq 150); do
        left=0
        while read -r name pid; do running "$pid" && left=1; done <"$PIDS"
        [ "$left" = 0 ] && break
        sleep 0.1
    done
    while read -r name pid; do
        running "$pid" && { echo "cluster: $name ($pid) did not stop: SIGKILL"; kill -9 "$pid"; }
    done <"$PIDS"
    rm -f "$PIDS"
    echo "cluster: stopped"
}

status() {
    local name pid
    [ -f "$PIDS" ] || { echo "cluster: not running"; return 3; }
    while read -r name pid; do
        if running "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: gone"; fi
    done <"$PIDS"
    "$B/meshtrain" --coordinator "$RPC" workers
}

case $cmd in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: deploy/cluster.sh start|stop|status [BUILD_DIR]" >&2
    exit 2
    ;;
esac
