# SPDX-License-Identifier: MIT
# test_robustness.sh — bad input against real daemons on 127.0.0.1 (rows of
# docs/robustness.md): a coordinator with a token and a 64 KiB message limit answers raw
# requests (garbage, truncated, empty, oversized, another protocol version, wrong/missing token,
# unknown method, malformed payload) with the documented codes, survives a client that drops
# the connection, a peer that speaks raw TCP instead of SP and a frame beyond the receive limit,
# and keeps serving; the CLI and the worker refuse a bad token, a token file readable by others
# and a data root that does not exist. Raw requests are the committed seeds of the RPC fuzz
# target (tests/fuzz/corpus/fuzz_rpc_envelope, token "fuzz-token"), sent by tests/tools/mt_rawrpc.
source "$(dirname "$0")/lib.sh"

SEEDS=$SRC/tests/fuzz/corpus/fuzz_rpc_envelope
RAW=$BIN/mt_rawrpc
printf 'fuzz-token\n' >"$T/token"
chmod 600 "$T/token"
S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http off --token-file "$T/token" \
    --max-message-bytes 65536 --heartbeat-ms 200 --heartbeat-timeout-ms 2000
log "coordinator at $COORD_URL"

# raw NAME_OR_ARGS... EXPECTED_PREFIX: the server's answer must start with EXPECTED_PREFIX
raw() {
    local want=${!#} out
    out=$("$RAW" "$COORD_URL" "${@:1:$#-1}") || true
    case "$out" in
    "$want"*) log "  $(printf '%-28s' "${*:1:$#-1}" | sed "s|$SEEDS/||") -> $out" ;;
    *) fail "raw ${*:1:$#-1}: got '$out', want '$want'" ;;
    esac
}
# the seed passes every envelope check; its filter "state" is refused by the handler itself
raw "$SEEDS/call_ListWorkers" "INVALID_ARGUMENT: state filter must be 'alive' or 'lost'"
raw "$SEEDS/garbage" "INVALID_ARGUMENT: malformed request"
raw "$SEEDS/truncated" "INVALID_ARGUMENT: malformed request"
raw --zeros 0 "FAILED_PRECONDITION: protocol version mismatch: the client speaks 0.0"
raw "$SEEDS/protocol_v2" "FAILED_PRECONDITION: protocol version mismatch: the client speaks 2.0, this server speaks 1.0"
raw "$SEEDS/bad_token" "UNAUTHENTICATED: invalid credential for Coordinator.ListWorkers"
raw "$SEEDS/no_token" "UNAUTHENTICATED: Coordinator.ListWorkers requires a token"
raw "$SEEDS/unknown_method" "UNIMPLEMENTED: unknown method 'Coordinator.DropTables'"
raw "$SEEDS/malformed_payload" "INVALID_ARGUMENT: malformed RegisterWorkerRequest payload"
raw --zeros 100000 "INVALID_ARGUMENT: request of 100000 bytes exceeds the maximum message size of 65536 bytes"
# beyond 2 x limit + 1 MiB nng drops the connection before reading it: the client times out
# or sees the connection closed, the coordinator stays up. (The client's nng_close then blocks
# in nng 1.5.2 in about one run of three; its call has a 5 s deadline, hence the 10 s timeout;
# exit 124 = killed.)
out=$(timeout 10 "$RAW" "$COORD_URL" --zeros 4000000) && fail "a 4 MB frame was answered: $out"
log "  --zeros 4000000              -> $out"
# a peer that speaks raw TCP (no SP handshake) and one that closes at once
port=${COORD_URL##*:}
trap '' PIPE # the coordinator may close the connection before we are done writing
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET / HTTP/1.0\r\n\r\n\x00\xff\xfe garbage' >&3 2>/dev/null || true
exec 3>&-
exec 3<>"/dev/tcp/127.0.0.1/$port"
exec 3>&-
trap - PIPE
kill -0 "$COORD_PID" || fail "the coordinator died"
expect_exit 0 mt --token-file "$T/token" workers
log "coordinator still serving after every bad request"

# the CLI: a wrong token, no token, a token file readable by others
printf 'not-the-token\n' >"$T/wrong"
chmod 600 "$T/wrong"
expect_exit 4 mt --token-file "$T/wrong" workers
grep -q "UNAUTHENTICATED" "$T/last.out" || fail "wrong token: $(cat "$T/last.out")"
expect_exit 4 mt workers
grep -q "UNAUTHENTICATED.*requires a token" "$T/last.out" || fail "no token: $(cat "$T/last.out")"
cp "$T/token" "$T/open"
chmod 644 "$T/open"
rc=0; mt --token-file "$T/open" workers >"$T/last.out" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "PERMISSION_DENIED.*readable by group or others (mode 0644)" "$T/last.out" ||
    fail "token file mode 0644 accepted (exit $rc): $(cat "$T/last.out")"
expect_exit 0 mt --token-file "$T/token" workers
log "CLI: wrong token, missing token and a 0644 token file refused"

# a worker with a wrong token is refused and never listed; a bad --data-root stops it
bg wbad "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name intruder \
    --token-file "$T/wrong"
WBAD=$LAST_PID
wait_for 20 "the wrong-token worker refused" grep -q UNAUTHENTICATED "$T/wbad.log"
kill "$WBAD"
mt --token-file "$T/token" workers --json | jq -e '.workers | length == 0' >/dev/null ||
    fail "a worker with a wrong token was registered"
rc=0; "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --data-root /nonexistent-root \
    >"$T/last.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "NOT_FOUND\|--data-root /nonexistent-root: No such file" "$T/last.out" ||
    fail "worker with a missing data root: exit $rc: $(cat "$T/last.out")"
log "worker: wrong token refused, missing data root refused"

kill -TERM "$COORD_PID"
rc=0; wait "$COORD_PID" || rc=$?
[ $rc -eq 0 ] || fail "coordinator exited $rc on SIGTERM"
log "robustness: all bad inputs refused with their codes"
