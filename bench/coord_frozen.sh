#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# coord_frozen.sh — training speed while the coordinator is frozen (SIGSTOP), on loopback: two
# real 1-device workers, the Fashion-MNIST MLP, checkpoints only at the last step; per row the
# steps a second of both workers (their --metrics-listen step counters, sampled every 0.5 s)
# while the coordinator runs (3 s), in the first 2.5 s of a FREEZE_S-second freeze and in the
# rest of it, then after SIGCONT, with the load average. Rows: mp (the model-parallel spec on
# mesh batch=1,model=2: checkpoints gathered from both workers, the processes agree after every
# step) and dp (fashion_mnist_mlp.json on mesh batch=2: replicated).
#   bench/coord_frozen.sh [BUILD_DIR]      (default build; FREEZE_S default 5; ROWS "mp dp")
set -euo pipefail
export MT_BIN_DIR=$(cd "${1:-build}" && pwd)
export MT_SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
FREEZE_S=${FREEZE_S:-5}
# shellcheck source=../tests/integration/lib.sh
source "$MT_SOURCE_DIR/tests/integration/lib.sh"
export OPENBLAS_NUM_THREADS=1

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms $(((FREEZE_S + 20) * 1000))
alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = "$1" ]; }
MPA=$(free_port)
MPB=$(free_port)
for w in a b; do
    port=MP${w^^}
    bg "w$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "w$w" \
        --data-root /usr/share/datasets --rpc-timeout-ms 1000 --metrics-listen "127.0.0.1:${!port}"
done
wait_for 20 "two workers" alive 2
steps() { curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "meshtrain_worker_step_seconds_count" { print $2 }'; }
now() { date +%s.%N; }
# rate T0 S0 T1 S1: steps a second between two samples
rate() { awk -v t0="$1" -v s0="$2" -v t1="$3" -v s1="$4" 'BEGIN { printf "%.0f", (s1 - s0) / (t1 - t0) }'; }
# sample SECONDS: the slower worker's step count after SECONDS (sets S, TS)
sample() {
    sleep "$1"
    local a b
    a=$(steps "$MPA")
    b=$(steps "$MPB")
    TS=$(now)
    S=$((a < b ? a : b))
}

printf '%-4s %10s %14s %14s %10s  %s\n' row running "frozen 0-2.5s" "frozen rest" after load
for row in ${ROWS:-mp dp}; do
    case $row in
    mp) spec=fashion_mnist_mlp_model_parallel.json mesh='{"batch": 1, "model": 2}' ;;
    dp) spec=fashion_mnist_mlp.json mesh='{"batch": 2}' ;;
    *) echo "coord_frozen: unknown row '$row'" >&2; exit 2 ;;
    esac
    jq --argjson m "$mesh" '. + {mesh: $m, steps: 1000000, checkpoint: {every_steps: 1000000}} |
        del(.epochs)' "$SRC/examples/$spec" >"$T/$row.json"
    JOB=$(mt submit "$T/$row.json")
    wait_for 60 "$JOB running" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $JOB | jq -e '.step >= 20'"
    sample 0; t0=$TS s0=$S
    sample 3; r_run=$(rate "$t0" "$s0" "$TS" "$S")
    kill -STOP "$COORD_PID"
    t0=$TS s0=$S
    sample 2.5; r_f1=$(rate "$t0" "$s0" "$TS" "$S")
    t0=$TS s0=$S
    sample "$(awk -v f="$FREEZE_S" 'BEGIN { print f - 2.5 }')"; r_f2=$(rate "$t0" "$s0" "$TS" "$S")
    kill -CONT "$COORD_PID"
    t0=$TS s0=$S
    sample 3; r_after=$(rate "$t0" "$s0" "$TS" "$S")
    printf '%-4s %10s %14s %14s %10s  %s\n' "$row" "$r_run" "$r_f1" "$r_f2" "$r_after" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
    mt cancel "$JOB" >/dev/null
    wait_for 30 "$JOB cancelled" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $JOB | jq -e '.state == \"CANCELLED\"'"
done
