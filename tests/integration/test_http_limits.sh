#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_http_limits.sh — the status endpoint answers oversized, slow and excess requests with a
# status instead of a dropped connection, and never lets them pile up (issue 19, fault 11):
# a 100 KB URL -> 414; 5,000 headers or one 20 KB header -> 431; a 300 KB body (over the 256 KiB a submitted spec may take) -> 413; a
# malformed request line -> 400; a client that sends half a request -> 408 and closed after
# --http-timeout-ms; an idle one closed; past --http-max-conns -> 503, and served again once
# the idle ones are gone; keep-alive and pipelined requests still work; /healthz answers
# throughout. Every client is bounded in time (python3 sockets with timeouts, curl --max-time).
source "$(dirname "$0")/lib.sh"

S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --http-timeout-ms 1500 --http-max-conns 24
HP=${HTTP_URL#http://}
HP=${HP%/}
HOST=${HP%:*}
PORT=${HP##*:}
log "status endpoint at $HTTP_URL"

# raw MODE: one python3 client; prints the status code it read (or "closed" / "timeout")
raw() {
    python3 - "$HOST" "$PORT" "$@" <<'EOF'
import socket, sys, time
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=10)
def status():
    try:
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return "closed"
            data += chunk
        return data.split(b" ")[1].decode()
    except socket.timeout:
        return "timeout"
    except ConnectionResetError:
        return "reset"
def send(b):
    try:
        s.sendall(b)
    except (BrokenPipeError, ConnectionResetError):
        pass
if mode == "headers":        # 5,000 small headers
    send(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(5000)) + b"\r\n")
elif mode == "bighdr":       # one 20 KB header
    send(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
elif mode == "body":         # a 300 KB body
    send(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n" + b"t" * 300000)
elif mode == "garbage":
    send(b"HELLO\r\n\r\n")
elif mode == "slow":         # half a request, then nothing: 408 after the timeout
    send(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time(); st = status(); print(st, "%.1f" % (time.time() - t0)); sys.exit(0)
elif mode == "idle":         # nothing at all: closed after the timeout
    t0 = time.time(); st = status(); print(st, "%.1f" % (time.time() - t0)); sys.exit(0)
elif mode == "pipeline":     # two requests in one write, then a third on the same connection
    send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while got.count(b"HTTP/1.1 200") < 2:
        c = s.recv(4096)
        if not c: break
        got += c
    send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while True:
        c = s.recv(4096)
        if not c: break
        got += c
    print(got.count(b"HTTP/1.1 200 OK"), got.count(b"ok\n"))
    sys.exit(0)
print(status())
EOF
}
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" || true; }

# ---- oversized requests get their status, not a closed connection
LONG=$(head -c 100000 /dev/zero | tr '\0' a)
[ "$(code "$HTTP_URL/api/v1/jobs?x=$LONG")" = 414 ] || fail "100 KB URL: $(code "$HTTP_URL/api/v1/jobs?x=$LONG")"
[ "$(raw headers)" = 431 ] || fail "5,000 headers: $(raw headers)"
[ "$(raw bighdr)" = 431 ] || fail "a 20 KB header: $(raw bighdr)"
[ "$(raw body)" = 413 ] || fail "a 300 KB body: $(raw body)"
[ "$(raw garbage)" = 400 ] || fail "a malformed request line: $(raw garbage)"
curl -s --max-time 10 "$HTTP_URL/api/v1/jobs?x=$LONG" | jq -e '.error.http_status == 414' >/dev/null ||
    fail "414 body: $(curl -s --max-time 10 "$HTTP_URL/api/v1/jobs?x=$LONG")"
log "414 / 431 / 413 / 400 answered"

# ---- keep-alive and pipelining
[ "$(raw pipeline)" = "3 3" ] || fail "pipelined keep-alive requests: $(raw pipeline)"
[ "$(code "$HTTP_URL/healthz")" = 200 ] || fail "healthz"

# ---- a slow client gets 408 after the timeout, an idle one is closed
read -r st secs < <(raw slow)
[ "$st" = 408 ] || fail "half a request: $st after $secs s"
awk -v s="$secs" 'BEGIN { exit !(s >= 1.0 && s <= 4.0) }' || fail "408 after $secs s (timeout 1.5 s)"
read -r st secs < <(raw idle)
[ "$st" = closed ] || fail "idle connection: $st after $secs s"
awk -v s="$secs" 'BEGIN { exit !(s >= 1.0 && s <= 4.0) }' || fail "idle closed after $secs s"
log "slow client: 408 after ${secs}s; idle client closed"

# ---- the connection cap: 24 held open, the next gets 503; /healthz works again after
python3 - "$HOST" "$PORT" >"$T/cap.out" <<'EOF' &
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
held = [socket.create_connection((host, port), timeout=5) for _ in range(24)]
for h in held:
    h.sendall(b"GET /api/v1/jobs HTTP/1.1\r\n")   # half requests: held until the timeout
time.sleep(0.3)
s = socket.create_connection((host, port), timeout=5)
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
d = s.recv(4096)
print(d.split(b" ")[1].decode() if d else "closed")
time.sleep(3)  # every held one timed out
s = socket.create_connection((host, port), timeout=5)
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
d = s.recv(4096)
print(d.split(b" ")[1].decode() if d else "closed")
EOF
CAP_PID=$!
PIDS+=("$CAP_PID")
wait_for 20 "the cap client" bash -c "[ \$(wc -l <$T/cap.out) = 2 ]"
[ "$(sed -n 1p "$T/cap.out")" = 503 ] || fail "over the cap: $(cat "$T/cap.out")"
[ "$(sed -n 2p "$T/cap.out")" = 200 ] || fail "after the held connections timed out: $(cat "$T/cap.out")"
log "connection cap: 503 past 24, 200 once they timed out"

# ---- 200 slow clients do not keep the endpoint from answering (cap raised)
kill -9 "$COORD_PID"
start_coordinator coord2 "$S" --listen "$COORD_URL" --http 127.0.0.1:0 --http-timeout-ms 3000
python3 - "${HTTP_URL#http://}" >"$T/slow.out" <<'EOF' &
import socket, sys, time
host, port = sys.argv[1].rstrip("/").rsplit(":", 1)
held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(200)]
for h in held:
    h.sendall(b"GET / HTTP/1.1\r\n")
time.sleep(5)
print("done")
EOF
PIDS+=("$!")
sleep 0.5 # the 200 slow clients connect (the check below polls anyway)
t0=$(date +%s%N)
[ "$(code "$HTTP_URL/healthz")" = 200 ] || fail "healthz beside 200 slow clients"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 1000 ] || fail "healthz took $ms ms beside 200 slow clients"
log "healthz in $ms ms beside 200 slow clients"
log "PASS"
