#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fsdp.sh [BUILD_DIR] — weights sharded over the batch dimension (FSDP) against replicated
# weights, on 2 workers x 2 devices (mesh batch=4), through the whole product: a real
# coordinator and fresh workers per run on loopback. Models: the Fashion-MNIST MLP and CNN
# (examples/, global batch 128, Adam) and a wide MLP (784 -> 2048 -> 2048 -> 10, 5.8M
# parameters) where memory shows. Prints per run: examples/s (the job's examples_per_sec),
# the per-device weight + optimizer-slot bytes and FSDP working-copy bytes from `meshtrain
# plan`, and the workers' RSS in the second half of training (the larger of the two, sampled every
# 0.2 s; the Fashion-MNIST rows include the loaded data set); then FSDP/replicated ratios
# measured in the same run, with the load average. Never run by ctest.
# Layouts: replicated; fsdp (every kernel over batch, gathered per layer and freed after use,
# the default "fsdp": {"reshard_after_forward": true}); fsdp-kept (the gathered copies kept).
# Env: FSDP_STEPS (default 200), FSDP_REPEAT (default 2: rounds, alternating the layouts).
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${FSDP_STEPS:-200}
REPEAT=${FSDP_REPEAT:-2}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
bench_workdir fsdp
echo "FSDP vs replicated, 2 workers x 2 devices (batch=4), $STEPS steps, $REPEAT rounds;" \
    "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; load: $(cut -d' ' -f1-3 /proc/loadavg)"

bench_coordinator "$BUILD"
WPIDS=()
workers() { # fresh workers: 2 x 2 devices
    for p in "${WPIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    WPIDS=()
    for i in 1 2; do
        "$BUILD/meshtrain-worker" --coordinator "$URL" --devices 2 --name "f$RANDOM$i" \
            --data-root /usr/share/datasets 2>>"$T/workers.log" &
        WPIDS+=($!)
        PIDS+=($!)
    done
    bench_wait_workers 2
}
rss() { # the larger RSS of the two workers now, MiB
    local m=0 v
    for p in "${WPIDS[@]}"; do
        v=$(awk '/VmRSS/ { print $2 }' "/proc/$p/status")
        [ "$v" -gt "$m" ] && m=$v
    done
    echo $((m / 1024))
}
spec() { # spec MODEL LAYOUT -> $T/job.json
    local layouts='{}' keep=true
    [ "$2" != replicated ] && layouts='{".*kernel": ["batch", "unsharded"]}'
    [ "$2" = fsdp-kept ] && keep=false
    case $1 in
    mlp | cnn)
        jq --argjson s "$STEPS" --argjson l "$layouts" \
            '. + {steps: $s, batch_size: 128, mesh: {batch: 4}, layouts: $l} | del(.epochs)' \
            "$SRC/examples/fashion_mnist_$1_data_parallel.json" >"$T/job.json"
        ;;
    wide) # generated data (8 MiB), so the parameters dominate the workers' memory
        jq -n --argjson s "$STEPS" --argjson l "$layouts" \
            '{name: "wide", seed: 1, steps: $s, batch_size: 128, optimizer: "adam",
              learning_rate: 0.001, mesh: {batch: 4}, layouts: $l,
              dataset: {format: "synthetic", examples: 2048, test_examples: 256, features: 1024,
                        classes: 10},
              model: {input_shape: [1024], layers: [
                 {type: "dense", units: 2048, activation: "relu"},
                 {type: "dense", units: 2048, activation: "relu"},
                 {type: "dense", units: 10}]}}' >"$T/job.json"
        ;;
    esac
    jq --argjson k $keep '.fsdp = {reshard_after_forward: $k}' "$T/job.json" >"$T/j2.json"
    mv "$T/j2.json" "$T/job.json"
    if [ "$1" = cnn ] && [ "$2" != replicated ]; then # conv kernels: the output-channel axis
        jq '.layouts = {"conv2d_.*kernel": ["unsharded", "unsharded", "unsharded", "batch"],
                        "dense_.*kernel": ["batch", "unsharded"]}' "$T/job.json" >"$T/j2.json"
        mv "$T/j2.json" "$T/job.json"
    fi
}
run() { # run MODEL LAYOUT -> "examples/s weights+slots working peak_rss_MiB"
    local job rate plan ws
    spec "$1" "$2"
    plan=$(mt plan --offline "$T/job.json")
    ws=$(echo "$plan" | sed -n 's/.*weights \([0-9.]* [KMG]*i*B\), optimizer state \([0-9.]* [KMG]*i*B\).*/\1 + \2/p')
    workers
    job=$(mt submit "$T/job.json" --name "bench-$1-$2")
    mt watch --json "$job" >"$T/points" &
    local w=$! m=0 v
    while kill -0 "$w" 2>/dev/null; do # RSS while training (the final checkpoint gathers more)
        if mt status --json "$job" | jq -e --argjson h $((STEPS / 2)) '.step >= $h and .step < $h * 2' \
            >/dev/null 2>&1; then
            v=$(rss)
            [ "$v" -gt "$m" ] && m=$v
        fi
        sleep 0.2
    done
    wait "$w" || { echo "job $job failed:" >&2; mt status "$job" >&2; exit 1; }
    rate=$(grep '"examples_per_sec"' "$T/points" | tail -n 1 | sed 's/.*"value": \([0-9.e+]*\).*/\1/' |
        awk '{ printf "%.0f", $1 }')
    echo "$rate|$ws|$(echo "$plan" | sed -n 's/.*FSDP working copies \([0-9.]* [KMG]*i*B\).*/\1/p')|$m" >"$T/res"
}
bytes() { # "1.5 MiB" -> bytes
    awk '{ v = $1; u = $2; m = (u == "KiB") ? 1024 : (u == "MiB") ? 1048576 : (u == "GiB") ? 1073741824 : 1; printf "%.0f", v * m }'
}
printf '%-5s %-10s %12s %28s %14s %9s\n' model layout "examples/s" "weights + slots / device" \
    "working copies" "RSS"
for model in mlp cnn wide; do
    declare -A rates=() ws_of=() rss_of=()
    for r in $(seq "$REPEAT"); do
        for layout in replicated fsdp fsdp-kept; do
            run $model $layout # in this shell: it keeps the worker pids (no subshell)
            IFS='|' read -r rate ws wc rss <"$T/res"
            printf '%-5s %-10s %12s %28s %14s %7s MiB\n' $model $layout "$rate" "$ws" "${wc:--}" "$rss"
            rates[$layout]="${rates[$layout]:-} $rate"
            ws_of[$layout]=$ws
            rss_of[$layout]=$rss
        done
    done
    med() { printf '%s\n' $@ | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
    wsb() { local w=$1; echo $(($(echo "$w" | awk -F' [+] ' '{ print $1 }' | bytes) + $(echo "$w" | awk -F' [+] ' '{ print $2 }' | bytes))); }
    a=$(med ${rates[replicated]})
    for layout in fsdp fsdp-kept; do
        b=$(med ${rates[$layout]})
        awk -v a="$a" -v b="$b" -v r="$(wsb "${ws_of[replicated]}")" -v f="$(wsb "${ws_of[$layout]}")" \
            -v mr="${rss_of[replicated]}" -v mf="${rss_of[$layout]}" -v m=$model -v l=$layout \
            'BEGIN { printf "%-5s %s/replicated: step time %.2fx (median examples/s %s vs %s), weights + slots %.2fx, RSS %.2fx\n",
                     m, l, a / b, b, a, f / r, mf / mr }'
    done
    unset rates ws_of rss_of
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
