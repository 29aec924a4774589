#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# list_jobs.sh — listing under concurrency (issue 19, fault 10): a coordinator whose database
# holds 1,201 jobs (tests/tools/mt_seed_state --jobs 1198) answers ROUNDS rounds of C concurrent
# `meshtrain jobs` processes (ListJobs RPC, one page of 100) and C concurrent
# `GET /api/v1/jobs` (python3 threads released together, one connection each); prints the p50,
# p99 and max latency of each, the same for `meshtrain jobs --all` (every page), and the load
# average. The target: p99 <= 200 ms with 200 concurrent clients.
#   bench/list_jobs.sh [BUILD_DIR] [CLIENTS] [ROUNDS]
set -euo pipefail

B=$(cd "${1:-build}" && pwd)
C=${2:-200}
ROUNDS=${3:-3}
T=$(mktemp -d /tmp/mt-bench-list.XXXXXX)
COORD=
cleanup() { [ -n "$COORD" ] && kill "$COORD" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT

"$B/mt_seed_state" "$T/state" --jobs 1198 --steps 10 >/dev/null
"$B/meshtrain-coordinator" --state-dir "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --log-level warn >"$T/coord.log" 2>&1 &
COORD=$!
for _ in $(seq 1 100); do [ -s "$T/state/endpoints.json" ] && break; sleep 0.1; done
RPC=$(jq -r .rpc "$T/state/endpoints.json")
HTTP=$(jq -r .http "$T/state/endpoints.json")
total=$("$B/meshtrain" --coordinator "$RPC" jobs --json | jq .total)
echo "coordinator with $total jobs; $C concurrent clients, $ROUNDS rounds; $(nproc) cores"

# pct FILE: p50 p99 max of the millisecond values in FILE
pct() {
    sort -n "$1" | awk '{ v[NR] = $1 } END {
        p50 = v[int(NR * 0.50 + 0.5)]; p99 = v[int(NR * 0.99 + 0.5)]; if (p99 == "") p99 = v[NR]
        printf "p50 %4d ms  p99 %4d ms  max %4d ms  (n=%d)", p50, p99, v[NR], NR }'
}

# cli NAME ARGS...: ROUNDS rounds of C concurrent `meshtrain ARGS`, each timed
cli() {
    local name=$1; shift
    : >"$T/$name.ms"
    for _ in $(seq 1 "$ROUNDS"); do
        local pids=()
        for _ in $(seq 1 "$C"); do
            (s=$(date +%s%N); "$B/meshtrain" --coordinator "$RPC" "$@" >/dev/null
             echo $((($(date +%s%N) - s) / 1000000)) >>"$T/$name.ms") &
            pids+=($!)
        done
        wait "${pids[@]}"
    done
    echo "meshtrain $*: $(pct "$T/$name.ms")"
}

http() {
    python3 - "$HTTP" "$C" "$ROUNDS" "$1" >"$T/http.ms" <<'EOF'
import socket, sys, threading, time
base, n, rounds, path = sys.argv[1].rstrip("/"), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
host, port = base[len("http://"):].rsplit(":", 1)
req = ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode()
for _ in range(rounds):
    gate = threading.Barrier(n)
    out = []
    def one():
        gate.wait()
        t0 = time.monotonic()
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(req)
        got = b""
        while True:
            c = s.recv(65536)
            if not c: break
            got += c
        s.close()
        if not got.startswith(b"HTTP/1.1 200"): raise SystemExit("bad answer: %r" % got[:80])
        out.append((time.monotonic() - t0) * 1000)
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    for v in out: print(int(v))
EOF
    echo "GET $1: $(pct "$T/http.ms")"
}

http /healthz # the client's own floor
echo "ListJobs RPC ($C threads): $("$B/bench_list" "$RPC" --clients "$C" --rounds "$ROUNDS")"
http /api/v1/jobs
cli jobs jobs
echo "ListJobs RPC --all: $("$B/bench_list" "$RPC" --clients "$C" --rounds "$ROUNDS" --all)"
http "/api/v1/jobs?limit=1000"
cli jobs_all jobs --all
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
