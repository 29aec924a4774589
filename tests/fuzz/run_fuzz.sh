#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run_fuzz.sh BUILD_DIR SECONDS [JOBS] [TARGET...] — `make fuzz`: builds the libFuzzer targets
# (BUILD_DIR configured with clang and -DMT_FUZZ=ON) and runs each for SECONDS on a copy of its
# committed corpus (tests/fuzz/corpus/<target>/), so the committed seeds never change by
# themselves. A crash, leak or sanitizer report fails the run: the input is copied into the
# committed corpus as crash-<sha1>, where the gcc build replays it in ctest from then on
# (fuzzreplay_<target>), i.e. it becomes a regression test once the bug is fixed.
# Prints per target: executions, exec/s, coverage (edges) and features.
set -u
build=${1:?usage: run_fuzz.sh BUILD_DIR SECONDS [JOBS] [TARGET...]}
secs=${2:-30}
jobs=${3:-2}
shift $(($# < 3 ? $# : 3))
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in "$src"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
cmake "$build" >/dev/null || exit 1 # re-glob: targets added since the last configure
cmake --build "$build" -j "$jobs" --target "${targets[@]}" || exit 1
failed=0
for t in "${targets[@]}"; do
    work="$build/fuzz-work/$t"
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    cp "$src/tests/fuzz/corpus/$t"/* "$work/corpus/" 2>/dev/null
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | grep -o '[0-9]*')
    ft=$(grep -o 'ft: [0-9]*' "$work/log" | tail -1 | grep -o '[0-9]*')
    if [ $rc -ne 0 ]; then
        failed=1
        echo "FAIL $t (exit $rc) after ${execs:-?} execs; log: $work/log"
        grep -m3 -E 'ERROR|runtime error|SUMMARY' "$work/log"
        for a in "$work"/artifacts/*; do
            [ -f "$a" ] || continue
            h=$(sha1sum "$a" | cut -c1-16)
            cp "$a" "$src/tests/fuzz/corpus/$t/crash-$h"
            echo "  new seed (regression input): tests/fuzz/corpus/$t/crash-$h"
        done
    else
        printf '%-22s ok  %6ss  execs %-10s exec/s %-7s cov %-6s ft %s\n' "$t" "$secs" \
            "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}"
    fi
done
exit $failed
