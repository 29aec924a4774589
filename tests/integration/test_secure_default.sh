#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_secure_default.sh — a coordinator is not open to other machines by accident (issue 19,
# fault 12; redis's protected mode): without --token-file, an RPC, HTTP or metrics address
# that is not loopback makes it refuse to start (exit 1, a message naming the flag, the address
# and the three ways out) before it creates anything; --insecure starts it anyway with a
# warning per address; with a token it starts, and a CLI or worker without the token is refused
# (UNAUTHENTICATED). Loopback without a token keeps working as before.
source "$(dirname "$0")/lib.sh"

refused() { # refused NAME FLAG ADDRESS ARGS...: the coordinator exits 1 and names FLAG ADDRESS
    local name=$1 flag=$2 addr=$3; shift 3
    local rc=0
    timeout 20 "$BIN/meshtrain-coordinator" --state-dir "$T/$name" "$@" >"$T/$name.log" 2>&1 || rc=$?
    [ "$rc" = 1 ] || fail "$name: exit $rc, expected 1: $(cat "$T/$name.log")"
    grep -qF "FAILED_PRECONDITION: $flag $addr is reachable from other machines and there is no --token-file: give one, listen on 127.0.0.1, or pass --insecure" \
        "$T/$name.log" || fail "$name: message: $(cat "$T/$name.log")"
    [ ! -e "$T/$name" ] || fail "$name: the state dir was created before the refusal"
}

P=$(free_port)
refused any_rpc --listen "tcp://0.0.0.0:$P" --listen "tcp://0.0.0.0:$P" --http off
refused any_http --http "0.0.0.0:$P" --listen tcp://127.0.0.1:0 --http "0.0.0.0:$P"
refused v6_any --listen "tcp://[::]:$P" --listen "tcp://[::]:$P" --http off
refused by_name --metrics-listen "tcp://$(hostname):$P" --listen tcp://127.0.0.1:0 --http off \
    --metrics-listen "tcp://$(hostname):$P"
log "non-loopback addresses without a token refused"

# ---- loopback without a token: as before
start_coordinator lo "$T/lo" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
mt workers >/dev/null || fail "loopback coordinator without a token does not answer"
! grep -q "insecure" "$T/lo.log" || fail "a loopback coordinator warned: $(cat "$T/lo.log")"
kill -9 "$COORD_PID"

# ---- --insecure: starts, warns once per exposed address
start_coordinator ins "$T/ins" --listen tcp://0.0.0.0:0 --http 0.0.0.0:0 --insecure
mt workers >/dev/null || fail "--insecure coordinator does not answer"
[ "$(grep -c 'is reachable from other machines without a token (--insecure)' "$T/ins.log")" = 2 ] ||
    fail "--insecure warnings: $(cat "$T/ins.log")"
kill -9 "$COORD_PID"
log "--insecure starts with a warning per address"

# ---- a token: starts on every interface; callers without it are refused
(umask 077 && head -c 24 /dev/urandom | base64 >"$T/token")
start_coordinator tok "$T/tok" --listen tcp://0.0.0.0:0 --http 0.0.0.0:0 --token-file "$T/token"
! grep -q "reachable from other machines" "$T/tok.log" || fail "warned with a token"
expect_exit 4 mt workers
grep -q "UNAUTHENTICATED" "$T/last.out" || fail "no token: $(cat "$T/last.out")"
mt --token-file "$T/token" workers >/dev/null || fail "the token is not accepted"
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$HTTP_URL/api/v1/jobs")" = 401 ] ||
    fail "HTTP without the token"
log "with a token: listening on every interface, callers without it refused"
log "PASS"
