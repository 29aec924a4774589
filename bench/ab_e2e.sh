#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ab_e2e.sh BASE_BUILD NEW_BUILD [ROUNDS] — same-run A/B of bench/e2e.sh between two builds
# (e.g. the commit before a change, built in a git worktree, and the change): ROUNDS rounds
# (default 3), each running e2e.sh once per build in alternating order (A B, then B A, ...), the
# PyTorch column skipped. Prints every round's rows, then per model and placement the median
# examples/s of each build and NEW/BASE. A change that must not slow anything needs every ratio
# >= 0.97. The load average is printed beside each round. Never run by ctest.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
A=${1:?usage: ab_e2e.sh BASE_BUILD NEW_BUILD [ROUNDS]}
B=${2:?usage: ab_e2e.sh BASE_BUILD NEW_BUILD [ROUNDS]}
R=${3:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp /tmp/mt-ab-e2e.XXXXXX)
trap 'rm -f "$OUT" "$OUT.round"' EXIT
for r in $(seq "$R"); do
    order="A B"
    [ $((r % 2)) = 0 ] && order="B A"
    for w in $order; do
        dir=$A
        [ "$w" = B ] && dir=$B
        echo "== round $r, build $w ($dir), load $(cut -d' ' -f1-3 /proc/loadavg)"
        E2E_DDP=0 bash "$SRC/bench/e2e.sh" "$dir" | grep -E '^(mlp|cnn|text) ' >"$OUT.round"
        cat "$OUT.round" # (tee /dev/stderr would reopen, and truncate, a redirected log)
        awk -v w="$w" '{ print w, $1, $2, $3, $4 }' "$OUT.round" >>"$OUT"
    done
done
echo "== medians over $R rounds (examples/s): base -> new, new/base"
awk "$BENCH_AWK_MEDIAN"'{ k = $2; for (c = 3; c <= 5; c++) v[$1 " " k " " c] = v[$1 " " k " " c] " " $c; m[k] = 1 }
    END { split("1x1 1x2 2x1", names, " ");
        for (k in m) for (c = 3; c <= 5; c++) {
            a = med(v["A " k " " c]); b = med(v["B " k " " c]);
            printf "%-4s %-4s %10.0f -> %10.0f  %.3f\n", k, names[c - 2], a, b, b / a } }' "$OUT" | sort
