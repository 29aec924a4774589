#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/data.sh [BUILD_DIR [bench_data options, e.g. --only text]] — input-pipeline throughput (bench_data) for Fashion-MNIST IDX, a
# generated 60,000 x 785 CSV and the TF-IDF text pipeline (the sentiment sentences when
# deploy/fetch-sentiment.sh can fetch them, synthetic sentences otherwise), each beside the
# training-step proxy measured in the same run. Short runs (SECONDS_PER_CASE, default 1).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
[[ $build = /* ]] || build="$src/$build"
if [[ $# -gt 0 ]]; then shift; fi

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env

args=(--seconds "${SECONDS_PER_CASE:-1}")
data="$build/data"
if bash "$src/deploy/fetch-sentiment.sh" "$data" >/dev/null 2>&1; then
    args+=(--text "$data/sentiment_train.tsv")
else
    echo "(sentiment data not fetchable: the text case uses synthetic sentences)"
fi
exec "$build/bench_data" "${args[@]}" "$@"
