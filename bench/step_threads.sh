#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# step_threads.sh BUILD EXAMPLE STEPS MESH NWORKERS DEVICES — where a job's steps spend the
# machine's time, thread by thread: one job on a fresh local cluster (as bench/job_cpu.sh: a
# coordinator, NWORKERS workers of DEVICES devices, the example's batch — 128, or 64 for the
# sentiment MLP as bench/e2e.sh —, no checkpoints), and between two moments of its steady state
# (STEP_WINDOW_S seconds, default 3, starting STEP_SKIP_S = 1 s after the first reported point)
# every thread of the coordinator, the workers and the `meshtrain watch` client is read from
# /proc: CPU time, voluntary and involuntary context switches, and the time it
# was runnable but waiting for a core (schedstat). Printed per training step of the window
# (the steps come from the job's own points: their step and time_ms). Threads are named
# (pthread_setname_np: mt-run, mt-dev N, mt-coll-rd, mt-coll-acc, mt-data, ...); a build without
# names shows the process name. JOB_DATA_DIR: the sentiment TSVs (deploy/fetch-sentiment.sh DIR).
# STEP_PERF=1 adds `perf sched` latency figures of the window (root); STEP_PERF=record a CPU
# profile of the first worker (perf record -g, symbols by share; STEP_PERF_OUT=FILE keeps it;
# STEP_PERF_PID=0 profiles the coordinator instead, 2 the second worker). STEP_CKPT_EVERY=N keeps
# a checkpoint every N steps (default: none). Never run by ctest.
set -euo pipefail
B=${1:?usage: step_threads.sh BUILD EXAMPLE STEPS MESH NWORKERS DEVICES}
EX=$2 STEPS=$3 MESH=$4 NW=$5 DEV=$6
SKIP=${STEP_SKIP_S:-1} WIN=${STEP_WINDOW_S:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
bench_workdir thr
bench_coordinator "$B"
COORD=${PIDS[0]}
bench_workers "$B" "$NW" "$DEV" t
bench_wait_workers "$NW"
batch=128
[ "$EX" = dtensor_mlp_data_parallel.json ] && batch=64
sed -e 's/"batch_size": *[0-9]*/"batch_size": '"$batch"'/' -e '0,/{/s//{"steps": '"$STEPS"',/' \
    -e '/"epochs":/d' -e '/"checkpoint":/d' \
    -e 's#"data/sentiment_#"'"${JOB_DATA_DIR:-data}"'/sentiment_#g' \
    "$SRC/examples/$EX" >"$T/job.json"
if [ -n "${STEP_CKPT_EVERY:-}" ]; then # periodic checkpoints (and the stop agreement they bring)
    jq --argjson n "$STEP_CKPT_EVERY" '.checkpoint = {every_steps: $n, keep: 1}' "$T/job.json" \
        >"$T/job.ck.json" && mv "$T/job.ck.json" "$T/job.json"
fi
# snap FILE: one line per thread: role pid tid name run_ns voluntary involuntary wait_ns (one awk
# per process, so a snapshot takes milliseconds and the window's steps and CPU cover the same time)
snap() {
    local role p
    for p in "${PIDS[@]}" "$WATCH"; do
        role=worker
        [ "$p" = "$COORD" ] && role=coord
        [ "$p" = "$WATCH" ] && role=watch
        awk -v role="$role" -v p="$p" 'FNR == 1 { n = split(FILENAME, f, "/"); t = f[n - 1]; k = f[n] }
            k == "comm" { c[t] = $0; gsub(/ /, "_", c[t]) }
            k == "schedstat" { run[t] = $1; w[t] = $2 }
            k == "status" && /^voluntary_ctxt/ { v[t] = $2 }
            k == "status" && /^nonvoluntary_ctxt/ { i[t] = $2 }
            END { for (t in run) print role, p, t, c[t], run[t], v[t], i[t], w[t] }' \
            /proc/"$p"/task/*/comm /proc/"$p"/task/*/schedstat /proc/"$p"/task/*/status \
            2>/dev/null || true
    done >"$1"
}
job=$(mt submit "$T/job.json" --mesh "$MESH" --name threads)
mt watch --json "$job" >"$T/points" &
WATCH=$!
PIDS+=("$WATCH")
for _ in $(seq 300); do [ -s "$T/points" ] && break; sleep 0.05; done
sleep "$SKIP"
PERF=()
if [ "${STEP_PERF:-0}" = 1 ]; then
    perf sched record -o "$T/sched.data" -- sleep "$WIN" >/dev/null 2>&1 &
    PERF=($!)
elif [ "${STEP_PERF:-0}" = record ]; then
    perf record -F 4999 -g -o "$T/perf.data" -p "${PIDS[${STEP_PERF_PID:-1}]}" -- sleep "$WIN" >/dev/null 2>&1 &
    PERF=($!)
fi
t0=$(date +%s%3N)
snap "$T/a"
load=$(cut -d' ' -f1-3 /proc/loadavg)
sleep "$WIN"
snap "$T/b"
t1=$(date +%s%3N)
[ ${#PERF[@]} = 0 ] || wait "${PERF[0]}" || true
wait "$WATCH" || { echo "job $job failed" >&2; mt status "$job" >&2; exit 1; }
# steps trained in [t0, t1]: the last step reported at or before each end (batch_loss: every step)
read -r s0 s1 < <(jq -rR --argjson a "$t0" --argjson b "$t1" 'fromjson? |
    select(.name == "batch_loss") | "\(.time_ms) \(.step)"' "$T/points" | awk -v a="$t0" -v b="$t1" \
    '$1 <= a && $2 > s0 { s0 = $2 } $1 <= b && $2 > s1 { s1 = $2 } END { print s0 + 0, s1 + 0 }')
n=$((s1 - s0))
[ "$n" -gt 0 ] || { echo "no steps in the window (t0 $t0 t1 $t1)" >&2; exit 1; }
echo "$EX $MESH ${NW}x$DEV: $n steps in $(((t1 - t0))) ms ($(awk -v n="$n" -v t=$((t1 - t0)) \
    'BEGIN { printf "%.1f", 1000 * t / n }') us/step), load $load -> $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-16s %8s %10s %10s %10s %12s\n' role thread tid "CPU us" "vol cs" "invol cs" \
    "rq wait us"
awk -v n="$n" 'NR == FNR { a[$3] = $0; next }
    { split(a[$3], x, " "); if (!($3 in a)) { x[5] = 0; x[6] = 0; x[7] = 0; x[8] = 0 }
      c = ($5 - x[5]) / 1e3 / n; v = ($6 - x[6]) / n; i = ($7 - x[7]) / n; w = ($8 - x[8]) / 1e3 / n
      if (c == 0 && v == 0 && i == 0) next
      printf "%-7s %-16s %8s %10.1f %10.3f %10.3f %12.1f\n", $1, $4, $3, c, v, i, w
      C[$1] += c; V[$1] += v; I[$1] += i; W[$1] += w }
    END { for (r in C) printf "%-7s %-16s %8s %10.1f %10.3f %10.3f %12.1f\n", r, "(all)", "-", C[r], V[r], I[r], W[r] }' \
    "$T/a" "$T/b"
echo "(per training step of the window; CPU and runqueue wait from /proc/PID/task/TID/schedstat)"
if [ "${STEP_PERF:-0}" = record ]; then
    [ -z "${STEP_PERF_OUT:-}" ] || cp "$T/perf.data" "$STEP_PERF_OUT"
    perf report -i "$T/perf.data" --no-children --sort sym --stdio 2>/dev/null | grep -v '^#' |
        grep -E '^ +[0-9.]+%' | head -"${STEP_PERF_TOP:-30}"
elif [ ${#PERF[@]} != 0 ]; then
    perf sched latency -i "$T/sched.data" --sort max 2>/dev/null | grep -E 'meshtrain|mt-|Task|TOTAL' | head -20
fi
