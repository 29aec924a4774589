#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_fetch_tabular.sh — deploy/fetch-tabular.sh produces the documented Iris (120/30, species
# names) and Diabetes (354/88, float target) CSV splits, idempotent and deterministic, and
# examples/datasets/iris_species_names.json (string class labels) trains on them to >= 0.9.
# Skips (exit 0, reason printed) when apt-get cannot download python3-sklearn (no package
# lists, or the Debian mirror is not reachable).
set -euo pipefail
src=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${MT_BIN_DIR:?MT_BIN_DIR must point at the build directory}
script="$src/deploy/fetch-tabular.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! (cd "$work" && timeout 120 apt-get download python3-sklearn >/dev/null 2>&1); then
    echo "SKIP: apt-get download python3-sklearn failed (no package lists or no mirror)"
    exit 0
fi
timeout 180 bash "$script" "$work/a" >/dev/null
[[ $(wc -l <"$work/a/iris_train.csv") -eq 121 ]] || fail "iris_train: $(wc -l <"$work/a/iris_train.csv") lines"
[[ $(wc -l <"$work/a/iris_test.csv") -eq 31 ]] || fail "iris_test: $(wc -l <"$work/a/iris_test.csv") lines"
[[ $(wc -l <"$work/a/diabetes_train.csv") -eq 355 ]] || fail "diabetes_train lines"
[[ $(wc -l <"$work/a/diabetes_test.csv") -eq 89 ]] || fail "diabetes_test lines"
[[ $(grep -c ',setosa$' "$work/a/iris_test.csv") -eq 10 ]] || fail "iris_test: not 10 setosa"
head -1 "$work/a/diabetes_train.csv" | grep -qx 'age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,progression' ||
    fail "diabetes header: $(head -1 "$work/a/diabetes_train.csv")"

sum1=$(cat "$work"/a/*.csv | md5sum)
out=$(bash "$script" "$work/a")
[[ $out == *"already holds"* ]] || fail "second run did not detect the files: $out"
timeout 180 bash "$script" "$work/b" >/dev/null
[[ $(cat "$work"/b/*.csv | md5sum) == "$sum1" ]] || fail "a second fetch gave other bytes"

mkdir -p "$work/ex/data"
mkdir -p "$work/ex/datasets"
cp "$src/examples/datasets/iris_species_names.json" "$work/ex/datasets/"
cp "$work"/a/iris_*.csv "$work/ex/data/"
"$bin/meshtrain" train --local "$work/ex/datasets/iris_species_names.json" --data-root "$work/ex" \
    --epochs 40 >"$work/train.log" 2>&1 || fail "train iris: $(tail -3 "$work/train.log")"
acc=$(sed -n 's/^Test loss: [0-9.]* - test accuracy: \([0-9.]*\).*/\1/p' "$work/train.log")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "iris test accuracy $acc < 0.9"
echo "PASS: fetch-tabular splits as documented; iris with species names reaches $acc"
