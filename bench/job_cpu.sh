#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# job_cpu.sh BUILD EXAMPLE STEPS MESH NWORKERS DEVICES — one job on a fresh local cluster (a
# coordinator and NWORKERS workers of DEVICES devices, batch 128, no checkpoints) and what it
# cost: the job's examples/s, the wall time from submit to its end, and the CPU seconds the
# coordinator and the workers used meanwhile (/proc/PID/stat). CPU per job is steadier than a
# rate on a shared host: run it for two builds alternately to tell work from noise, e.g.
#   for b in OLD/build build; do bench/job_cpu.sh $b fashion_mnist_cnn.json 80 batch=2 2 1; done
# JOB_DATA_DIR: where the sentiment TSVs are (deploy/fetch-sentiment.sh DIR), for the text
# examples. Never run by ctest.
set -euo pipefail
B=${1:?usage: job_cpu.sh BUILD EXAMPLE STEPS MESH NWORKERS DEVICES}
EX=$2 STEPS=$3 MESH=$4 NW=$5 DEV=$6
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
bench_workdir cpu
bench_coordinator "$B"
bench_workers "$B" "$NW" "$DEV" c
for i in $(seq 201); do
    [ "$(mt workers --state alive --json | grep -c '"worker_id"')" = "$NW" ] && break
    [ "$i" = 201 ] && { echo "workers did not register:" >&2; cat "$T/workers.log" >&2; exit 1; }
    sleep 0.1
done
sed -e 's/"batch_size": *[0-9]*/"batch_size": 128/' -e '0,/{/s//{"steps": '"$STEPS"',/' \
    -e '/"epochs":/d' -e '/"checkpoint":/d' -e 's#"data/sentiment_#"'"${JOB_DATA_DIR:-data}"'/sentiment_#g' \
    "$SRC/examples/$EX" >"$T/job.json"
ticks() { local s=0 p; for p in "${PIDS[@]}"; do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$s"; }
c0=$(ticks) t0=$(date +%s.%N)
job=$(mt submit "$T/job.json" --mesh "$MESH" --name bench)
mt watch --json "$job" >"$T/points" || { echo "job $job failed" >&2; mt status "$job" >&2; exit 1; }
t1=$(date +%s.%N) c1=$(ticks)
rate=$(grep '"examples_per_sec"' "$T/points" | tail -n 1 | sed 's/.*"value": \([0-9.e+]*\).*/\1/')
awk -v r="$rate" -v w="$(echo "$t1 - $t0" | bc)" -v c="$(( c1 - c0 ))" -v hz="$(getconf CLK_TCK)" \
    -v what="$EX $MESH ${NW}x$DEV" -v l="$(cut -d' ' -f1-3 /proc/loadavg)" \
    'BEGIN { printf "%s: %.0f examples/s, wall %.2f s, CPU %.2f s (coordinator + workers), load %s\n", what, r, w, c / hz, l }'
