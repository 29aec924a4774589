# SPDX-License-Identifier: MIT
# bench/lib.sh — sourced by the bench/ scripts (never run by itself):
#   bench_blas_env    one OpenBLAS thread per process, and OPENBLAS_CORETYPE from the CPU flags
#                     unless the caller set it (Debian's OpenBLAS 0.3.21 misdetects some CPUs)
#   bench_workdir     a temporary directory T and the processes PIDS, both gone at exit
#   bench_coordinator a local coordinator (URL) and mt, its CLI; bench_workers, bench_wait_workers N
#   BENCH_AWK_MEDIAN  an awk function med(s): the median of the space-separated numbers in s;
#                     prepend it to an awk program: awk "$BENCH_AWK_MEDIAN"'{ ... med(x) ... }'
bench_blas_env() {
    export OPENBLAS_NUM_THREADS=1
    if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
        if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
        elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
    fi
    return 0
}
# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_AWK_MEDIAN='function med(s,    a, n, i, j, t) { n = split(s, a, " ");
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
'
# bench_workdir NAME: T = a fresh directory /tmp/mt-bench-NAME.XXXXXX and PIDS = (); when the
# script exits, every process whose pid was added to PIDS is killed (and waited for) and T removed
bench_workdir() {
    T=$(mktemp -d "/tmp/mt-bench-$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
}
bench_cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
# bench_coordinator BUILD: BUILD's coordinator on loopback (state $T/state, log $T/coord.log,
# heartbeat 200 ms), its pid in PIDS; sets URL, after which mt runs BUILD's CLI against it
bench_coordinator() {
    BENCH_BUILD=$1
    "$1/meshtrain-coordinator" --state-dir "$T/state" --listen tcp://127.0.0.1:0 \
        --http 127.0.0.1:0 --heartbeat-ms 200 2>"$T/coord.log" &
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$T/state/endpoints.json" ] && break; sleep 0.1; done
    URL=$(sed 's/.*"rpc": "\([^"]*\)".*/\1/' "$T/state/endpoints.json")
}
mt() { "$BENCH_BUILD/meshtrain" --coordinator "$URL" "$@"; }
# bench_workers BUILD N DEVICES PREFIX: N workers of DEVICES devices named PREFIX1.. (data roots:
# /usr/share/datasets and JOB_DATA_DIR when set; log $T/workers.log), their pids in PIDS
bench_workers() {
    local i
    for i in $(seq "$2"); do
        "$1/meshtrain-worker" --coordinator "$URL" --devices "$3" --name "$4$i" \
            --data-root /usr/share/datasets ${JOB_DATA_DIR:+--data-root "$JOB_DATA_DIR"} \
            2>>"$T/workers.log" &
        PIDS+=($!)
    done
}
# bench_wait_workers N: return once N workers are alive; after 20 s say so and exit 1
bench_wait_workers() {
    for _ in $(seq 200); do
        [ "$(mt workers --state alive --json | grep -c '"worker_id"')" = "$1" ] && return 0
        sleep 0.1
    done
    echo "workers did not register" >&2
    exit 1
}
