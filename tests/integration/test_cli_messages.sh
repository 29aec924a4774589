#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_cli_messages.sh — the CLI's help for mistakes (client/main.c, client/msgs.c): an unknown
# command with a close one gets "did you mean" (exit 2), a far one does not; a coordinator that
# is not running gives UNAVAILABLE naming its address, a hint line, and exit 3.
source "$(dirname "$0")/lib.sh"

expect_exit 2 "$BIN/meshtrain" sumbit job.json
grep -qx "meshtrain: 'sumbit' is not a command; did you mean 'submit'? See 'meshtrain --help'." \
    "$T/last.out" || fail "sumbit: $(cat "$T/last.out")"
expect_exit 2 "$BIN/meshtrain" wacth job-000001
grep -q "did you mean 'watch'" "$T/last.out" || fail "wacth: $(cat "$T/last.out")"
expect_exit 2 "$BIN/meshtrain" frobnicate
grep -qx "meshtrain: 'frobnicate' is not a command. See 'meshtrain --help'." "$T/last.out" ||
    fail "frobnicate: $(cat "$T/last.out")"

PORT=$(free_port)
expect_exit 3 "$BIN/meshtrain" --coordinator "tcp://127.0.0.1:$PORT" jobs
grep -q "^meshtrain: UNAVAILABLE: .*tcp://127.0.0.1:$PORT" "$T/last.out" &&
    grep -q "^meshtrain: hint: is the coordinator running at that address?" "$T/last.out" ||
    fail "unreachable coordinator: $(cat "$T/last.out")"

# a heartbeat window (3 x --heartbeat-ms + 1000) not shorter than the workers' default collective
# deadline (30 s) would read a frozen worker as a broken link: refused at startup, naming both
# (timeout: were it accepted, the coordinator would run; that fails here with 124, not a hang)
expect_exit 2 timeout 10 "$BIN/meshtrain-coordinator" --listen "tcp://127.0.0.1:$PORT" \
    --state-dir "$T/hb" --heartbeat-ms 9667 --heartbeat-timeout-ms 60000
grep -q "^meshtrain-coordinator: --heartbeat-ms 9667: the workers' default collective deadline of 30000 ms .* heartbeat window of 30001 ms .*; use --heartbeat-ms 9666 or less$" \
    "$T/last.out" || fail "--heartbeat-ms 9667: $(cat "$T/last.out")"
log "did you mean; UNAVAILABLE with a hint: $(tail -n 1 "$T/last.out")"
echo OK
