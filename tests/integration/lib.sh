# SPDX-License-Identifier: MIT
# lib.sh — helpers for integration tests that run the real daemons on loopback.
# Source it: every child started with `bg` is killed on exit (also on failure),
# every wait is a poll with a deadline, state lives in a fresh temp dir.
set -euo pipefail

BIN=${MT_BIN_DIR:?MT_BIN_DIR must point at the build directory}
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source directory}
T=$(mktemp -d /tmp/mt-integ.XXXXXX)
PIDS=()
FAILED=0

cleanup() {
    local rc=$?
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if [ $rc -ne 0 ] || [ $FAILED -ne 0 ]; then
        echo "--- logs in $T (kept) ---"
        for f in "$T"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 30 "$f"; }; done
    else
        rm -rf "$T"
    fi
}
trap cleanup EXIT

log() { echo "[$(date +%H:%M:%S)] $*"; }
fail() { FAILED=1; echo "FAIL: $*" >&2; exit 1; }

# torch_python: prints the first of $MT_PYTHON, python3, /usr/bin/python3 that imports torch and
# numpy (Debian's python3-torch is only in /usr/bin/python3); nothing when none does.
torch_python() {
    local p
    for p in ${MT_PYTHON:-} python3 /usr/bin/python3; do
        if "$p" -c 'import torch, numpy' 2>/dev/null; then echo "$p"; return 0; fi
    done
}

# bg NAME CMD...: start CMD in the background with stderr+stdout in $T/NAME.log;
# sets LAST_PID.
bg() {
    local name=$1; shift
    "$@" >"$T/$name.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.1 s until it succeeds.
wait_for() {
    local secs=$1 what=$2; shift 2
    local end=$((SECONDS + secs))
    while ! "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || fail "timed out after ${secs}s waiting for: $what"
        sleep 0.1
    done
}

# start_coordinator NAME STATE_DIR [FLAGS...]: start, wait for endpoints.json; sets COORD_PID,
# COORD_URL, HTTP_URL. An RPC address tcp://127.0.0.1:0 becomes a free port below the ephemeral
# range (free_port), since tests restart coordinators on the same URL.
start_coordinator() {
    local name=$1 dir=$2 a args=(); shift 2
    for a in "$@"; do
        [ "$a" = tcp://127.0.0.1:0 ] && a=tcp://127.0.0.1:$(free_port)
        args+=("$a")
    done
    rm -f "$dir/endpoints.json"
    bg "$name" "$BIN/meshtrain-coordinator" --state-dir "$dir" "${args[@]}"
    COORD_PID=$LAST_PID
    wait_for 20 "coordinator $name endpoints" test -s "$dir/endpoints.json"
    COORD_URL=$(jq -r .rpc "$dir/endpoints.json")
    HTTP_URL=$(jq -r .http "$dir/endpoints.json")
}

# free_port: print a TCP port nothing listens on now (for a daemon that must keep its port
# across a restart), below the kernel's ephemeral range: a port from inside it can be taken, once its listener is
# killed, by a client's own connect to it (TCP self-connect while a worker redials a restarting
# coordinator), and the restart then fails with "Address in use".
free_port() {
    local p lo
    lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$lo" -gt 12000 ] 2>/dev/null || lo=32768
    for p in $(shuf -i 10000-$((lo - 1)) -n 20); do
        ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
    done
    fail "no free port"
}

# mt ARGS...: the CLI against the current coordinator
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" "$@"; }
# workers_alive N: exactly N workers are alive (for wait_for).
workers_alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = "$1" ]; }
# start_worker1 NAME [FLAGS...]: a one-device worker of the coordinator at COORD_URL with the
# Debian datasets and a 1 s RPC timeout, log in $T/NAME.log; sets LAST_PID.
start_worker1() {
    local name=$1; shift
    bg "$name" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$name" \
        --data-root /usr/share/datasets --rpc-timeout-ms 1000 "$@"
}

# expect_exit CODE CMD...: run CMD, require its exit code
expect_exit() {
    local want=$1; shift
    local got=0
    "$@" >"$T/last.out" 2>&1 || got=$?
    [ "$got" = "$want" ] || { cat "$T/last.out" >&2; fail "'$*' exited $got, expected $want"; }
}

# expect_fail CODE PATTERN CMD...: CMD exits CODE with PATTERN (grep) on stderr
expect_fail() {
    local want=$1 pat=$2 rc=0; shift 2
    "$@" >"$T/out.txt" 2>"$T/err.txt" || rc=$?
    [ "$rc" = "$want" ] || fail "$*: exit $rc, want $want: $(cat "$T/err.txt")"
    grep -q -- "$pat" "$T/err.txt" || fail "$*: no '$pat' in: $(cat "$T/err.txt")"
}

# gen_text FILE N SEED: N generated label<TAB>sentence lines (12 words, 30% of them carrying
# the label's sentiment) for the text examples instead of the fetched UCI sentences.
gen_text() { # gen_text FILE N SEED
    awk -v n="$2" -v seed="$3" 'BEGIN { srand(seed);
        split("good great fine love nice best happy superb", p, " ");
        split("bad awful poor hate worst sad boring broken", q, " ");
        for (i = 0; i < n; i++) { y = int(rand() * 2); s = "";
            for (k = 0; k < 12; k++) { r = rand();
                w = r < 0.3 ? (y ? p[1 + int(rand() * 8)] : q[1 + int(rand() * 8)]) : "w" int(rand() * 3000);
                s = s (k ? " " : "") w }
            print y "\t" s } }' >"$1"
}

# idx_head N SRC DST: the first N items of the IDX file SRC (gzip or plain) as a gzipped IDX
idx_head() { python3 "$SRC/tests/tools/idx_head.py" "$@"; }
