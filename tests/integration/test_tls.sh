#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_tls.sh — TLS on both planes with real processes on loopback (docs/security.md): a
# coordinator listening on tls+tcp://, two workers whose control connection, data plane
# (tls+tcp:// listeners, peers verify each other with the CA) and the CLI (RPC and the watch
# metrics stream) all use TLS, run a short 2 x 2 job to SUCCEEDED. Then the refusals: a client
# trusting another CA, or expecting another name, fails within seconds with UNAUTHENTICATED
# naming the address; no CA, a plain tcp:// client, a world-readable key, TLS flags that do not
# match the addresses. Certificates come from tls_certs.sh (openssl) made in the test's dir.
source "$(dirname "$0")/lib.sh"

C="$T/certs"
bash "$SRC/tests/integration/tls_certs.sh" "$C"
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 3000)
start_coordinator coord "$T/state" --listen tls+tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}" \
    --tls-cert "$C/server.pem" --tls-key "$C/server.key"
[[ $COORD_URL == tls+tcp://127.0.0.1:* ]] || fail "coordinator RPC address $COORD_URL"
metrics=$(jq -r .metrics "$T/state/endpoints.json")
[[ $metrics == tls+tcp://127.0.0.1:* ]] || fail "metrics stream not on TLS: $metrics"
log "coordinator on $COORD_URL, metrics on $metrics"

TLSC=(--tls-ca "$C/ca.pem" --tls-server-name localhost)
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" "${TLSC[@]}" "$@"; }
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }

for w in wa wb; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name "$w" \
        "${TLSC[@]}" --tls-cert "$C/server.pem" --tls-key "$C/server.key" \
        --data-listen tls+tcp://127.0.0.1:0 --data-root "$T" --data-root /usr/share/datasets
done
wait_for 30 "two workers over TLS" workers_alive 2
for w in wa wb; do
    grep -q "data plane tls+tcp://127.0.0.1:" "$T/$w.log" || fail "$w data plane: $(cat "$T/$w.log")"
done

# ---- a short job across both workers: tensors cross the TLS data plane
STEPS=3
jq --argjson s "$STEPS" '. + {steps: $s, mesh: {batch: 4}} | del(.epochs) | del(.checkpoint)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json") || fail "submit: $JOB"
wait_for 180 "$JOB to finish" finished "$JOB"
st=$(mt status --json "$JOB")
echo "$st" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$JOB: $(mt status "$JOB")"
echo "$st" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB did not span both workers: $(echo "$st" | jq -c '.placement')"
n=$(mt watch --json "$JOB" | jq -s '[.[] | select(.name == "loss")] | length')
[ "$n" = "$STEPS" ] || fail "watch over TLS: $n loss points, expected $STEPS"
log "$JOB SUCCEEDED on 2 workers x 2 devices over TLS; watch saw $n loss points"
for w in wa wb; do # closing the job's TLS data-plane sockets did not stall (nng 1.5.2 trap)
    ! grep -q "takes over" "$T/$w.log" || fail "$w: $(grep "takes over" "$T/$w.log")"
done

# ---- refusals: quick, clear, never a hang
quick() { # quick WANT_EXIT PATTERN CMD...: exit code, message, and within 5 s
    local want=$1 pat=$2; shift 2
    local t0=$SECONDS
    expect_exit "$want" "$@"
    [ $((SECONDS - t0)) -le 5 ] || fail "'$*' took $((SECONDS - t0)) s"
    grep -q -- "$pat" "$T/last.out" || fail "'$*' said: $(cat "$T/last.out")"
    log "refused ($want): $(head -1 "$T/last.out")"
}
M=("$BIN/meshtrain" --coordinator "$COORD_URL")
quick 4 "UNAUTHENTICATED: connect $COORD_URL: TLS: .*other-ca.pem" \
    "${M[@]}" --tls-ca "$C/other-ca.pem" --tls-server-name localhost workers
quick 4 "UNAUTHENTICATED: .*name 'wrong.example'" \
    "${M[@]}" --tls-ca "$C/ca.pem" --tls-server-name wrong.example workers
quick 4 "UNAUTHENTICATED: .*name '127.0.0.1'" "${M[@]}" --tls-ca "$C/ca.pem" workers
quick 4 "give --tls-ca" "${M[@]}" workers
MESHTRAIN_TLS_CA="$C/ca.pem" MESHTRAIN_TLS_SERVER_NAME=localhost \
    expect_exit 0 "${M[@]}" workers # the environment works as the flags
quick 3 "UNAVAILABLE" "$BIN/meshtrain" --coordinator "tcp://${COORD_URL#tls+tcp://}" \
    --timeout-ms 2000 workers

# a worker trusting another CA does not register, and says why
bg wx "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name wx \
    --tls-ca "$C/other-ca.pem" --tls-server-name localhost
wait_for 10 "wx's refusal" grep -q "UNAUTHENTICATED.*did not verify" "$T/wx.log"
workers_alive 2 || fail "a worker with the wrong CA registered"

# ---- start-up checks
chmod 644 "$C/server.key"
quick 2 "chmod 600" "$BIN/meshtrain-coordinator" --state-dir "$T/s2" \
    --listen tls+tcp://127.0.0.1:0 --tls-cert "$C/server.pem" --tls-key "$C/server.key"
chmod 600 "$C/server.key"
quick 2 "needs --tls-cert" "$BIN/meshtrain-coordinator" --state-dir "$T/s2" \
    --listen tls+tcp://127.0.0.1:0
quick 2 "need --listen tls+tcp" "$BIN/meshtrain-coordinator" --state-dir "$T/s2" \
    --listen tcp://127.0.0.1:0 --tls-cert "$C/server.pem" --tls-key "$C/server.key"
quick 2 "needs --tls-cert and --tls-key" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" \
    --tls-ca "$C/ca.pem" --data-listen tls+tcp://127.0.0.1:0
quick 2 "give --tls-ca" "$BIN/meshtrain-worker" --coordinator "$COORD_URL"
log "TLS: both planes work, every misconfiguration is refused with its reason"
