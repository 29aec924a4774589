# SPDX-License-Identifier: MIT
# test_valgrind.sh — valgrind memcheck over the daemons' start-run-shutdown cycle: a
# coordinator and a worker (both under valgrind --leak-check=full
# --errors-for-leak-kinds=definite --error-exitcode=99) start, the worker registers, the CLI
# lists it, a raw garbage request is refused, then both get SIGTERM and must exit 0 with no
# memcheck error and no definite leak. tests/valgrind.supp holds suppressions ONLY for
# third-party blocks (nng's listener-side pipes of connections that close before the SP
# handshake, its threads' reachable memory), never for definite leaks in meshtrain code.
# Skipped (exit 0 with a reason) without valgrind, and under the ASan build (MT_SANITIZED=1).
if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: valgrind is not installed (Debian package valgrind)"
    exit 0
fi
if [ "${MT_SANITIZED:-0}" = "1" ]; then
    echo "SKIP: the ASan/UBSan build cannot run under valgrind"
    exit 0
fi
source "$(dirname "$0")/lib.sh"

VG=(valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99
    --show-leak-kinds=definite --num-callers=30 --suppressions="$SRC/tests/valgrind.supp")
export OPENBLAS_NUM_THREADS=1
unset DEBUGINFOD_URLS # valgrind would ask a debuginfod server (unreachable here) for every library
# the daemons re-exec themselves through /proc/self/exe to set the OpenBLAS core type
# (core/blas), which valgrind cannot follow: set it here so they do not
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
else export OPENBLAS_CORETYPE=Prescott; fi

# a coordinator that is not under valgrind cannot be found by the worker before it listens,
# so start the coordinator first and give valgrind time (it is ~20x slower)
S=$T/state
rm -f "$S/endpoints.json"
bg coord "${VG[@]}" --log-file="$T/vg-coord.txt" "$BIN/meshtrain-coordinator" --state-dir "$S" \
    --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 --heartbeat-ms 200 --heartbeat-timeout-ms 5000
COORD_PID=$LAST_PID
wait_for 120 "coordinator endpoints (under valgrind)" test -s "$S/endpoints.json"
COORD_URL=$(jq -r .rpc "$S/endpoints.json")
log "coordinator under valgrind at $COORD_URL"

bg worker "${VG[@]}" --log-file="$T/vg-worker.txt" "$BIN/meshtrain-worker" \
    --coordinator "$COORD_URL" --devices 2 --name vg-worker --rpc-timeout-ms 10000
WPID=$LAST_PID
alive() { kill -0 "$WPID" || fail "the worker under valgrind died: $(cat "$T/worker.log")"; mt workers --json | jq -e '[.workers[] | select(.name == "vg-worker" and .state == "alive")] | length == 1'; }
wait_for 120 "the worker registered (under valgrind)" alive
mt workers >/dev/null || fail "workers listing"
log "worker registered and listed"
# bad input on the way: a garbage request, a peer speaking raw TCP, one closing at once
"$BIN/mt_rawrpc" "$COORD_URL" "$SRC/tests/fuzz/corpus/fuzz_rpc_envelope/garbage" |
    grep -q "INVALID_ARGUMENT" || fail "garbage request not refused"
port=${COORD_URL##*:}
trap '' PIPE # the coordinator may close the connection before we are done writing
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'garbage\r\n' >&3 2>/dev/null || true
exec 3>&-
exec 3<>"/dev/tcp/127.0.0.1/$port"
exec 3>&-
trap - PIPE
mt workers >/dev/null || fail "workers listing after bad input"

kill -TERM "$WPID"
rc=0; wait "$WPID" || rc=$?
[ $rc -eq 0 ] || { cat "$T/vg-worker.txt"; fail "worker under valgrind exited $rc (99 = memcheck errors or definite leaks)"; }
kill -TERM "$COORD_PID"
rc=0; wait "$COORD_PID" || rc=$?
[ $rc -eq 0 ] || { cat "$T/vg-coord.txt"; fail "coordinator under valgrind exited $rc (99 = memcheck errors or definite leaks)"; }
for f in "$T/vg-coord.txt" "$T/vg-worker.txt"; do
    grep -q "ERROR SUMMARY: 0 errors" "$f" || { cat "$f"; fail "$f: memcheck errors"; }
    grep -E "definitely lost: [1-9]" "$f" && fail "$f: definite leaks"
    grep -E "possibly lost:|still reachable:|suppressed:" "$f" | sed 's/^==[0-9]*==/   /'
    log "$(basename "$f"): $(grep -o 'definitely lost: [0-9,]* bytes in [0-9,]* blocks' "$f" || echo 'no leaks possible') / $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$f")"
done
log "valgrind: both daemons clean"
