# SPDX-License-Identifier: MIT
# test_soak.sh — bounded load test on loopback (issue #10 item 8, docs/robustness.md "Soak").
# One coordinator; fake workers (tests/tools/mt_fakeworker.c) that come and go (kill -9 and
# fresh ones started every few seconds); MT_SOAK_CLIENTS concurrent client loops, each a
# stream of CLI processes that submit small jobs, read their status, list jobs, watch and
# cancel them; one HTTP poller on the JSON API, /metrics and /healthz. Runs for
# MT_SOAK_SECONDS (default 15; the whole test stays under 3 minutes; set e.g. 600 for a long
# run), then reports the requests served by method and code (the coordinator's own RPC
# counters), the CLI and HTTP outcomes by code, and asserts:
#   * no daemon crashed: the coordinator and every worker not killed on purpose are alive;
#   * no acknowledged job lost: every id `meshtrain submit` printed is in `meshtrain jobs
#     --json` with a valid state, and once cancelled, every one ends in a terminal state;
#   * no INTERNAL / DATA_LOSS answer and no HTTP 5xx other than 503, no failed HTTP connect;
#   * coordinator RSS (/proc/PID/status VmRSS) at the end <= 1.5x RSS at the midpoint
#     (reported but not checked under MT_SANITIZED=1: ASan's quarantine keeps freed memory).
source "$(dirname "$0")/lib.sh"

DURATION=${MT_SOAK_SECONDS:-15}
NCLIENTS=${MT_SOAK_CLIENTS:-6}
NWORKERS=3
S=$T/state
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 2000
log "coordinator $COORD_PID at $COORD_URL, http $HTTP_URL; load for ${DURATION}s," \
    "$NCLIENTS clients, $NWORKERS workers churning"

# small jobs: 1 or 2 devices, 20..80 steps of 20 ms, a checkpoint every 10 steps
jq '. + {mesh: {batch: 1}, steps: 40, checkpoint: {every_steps: 10, keep: 1}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job1.json"
jq '. + {mesh: {batch: 2}, steps: 80, checkpoint: {every_steps: 10, keep: 1}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job2.json"
jq '. + {mesh: {batch: 1}, steps: 20} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job3.json"

END=$((SECONDS + DURATION))
touch "$T/acked.txt" "$T/killed.txt"

# ---- workers come and go: NWORKERS alive; every 2-4 s one is killed -9 and a new one starts
WN=0
declare -A WPID
start_worker() {
    WN=$((WN + 1))
    bg "fw$WN" "$BIN/mt_fakeworker" run "$COORD_URL" "soak-w$WN" 2 "$T/fw-acks.txt" 20
    WPID[$WN]=$LAST_PID
}
for _ in $(seq "$NWORKERS"); do start_worker; done

# ---- one client: a stream of CLI requests; each outcome "ACTION EXIT CODE_NAME" in its log
client() {
    local me=$1 out=$T/client$1.txt jid rc code
    local -a mine=()
    while [ $SECONDS -lt $END ]; do
        local r=$((RANDOM % 10))
        rc=0
        if [ $r -lt 3 ] || [ ${#mine[@]} -eq 0 ]; then
            jid=$("$BIN/meshtrain" --coordinator "$COORD_URL" submit --name "soak-c$me" \
                --priority $((RANDOM % 3)) "$T/job$((RANDOM % 3 + 1)).json" 2>"$T/c$me.err") || rc=$?
            [ $rc -eq 0 ] && { echo "$jid" >>"$T/acked.txt"; mine+=("$jid"); }
            action=submit
        else
            jid=${mine[$((RANDOM % ${#mine[@]}))]}
            case $r in
            3 | 4) action=status
                "$BIN/meshtrain" --coordinator "$COORD_URL" status --json "$jid" >/dev/null \
                    2>"$T/c$me.err" || rc=$? ;;
            5) action=jobs
                "$BIN/meshtrain" --coordinator "$COORD_URL" jobs --json >/dev/null \
                    2>"$T/c$me.err" || rc=$? ;;
            6 | 7) action=cancel
                "$BIN/meshtrain" --coordinator "$COORD_URL" cancel "$jid" >/dev/null \
                    2>"$T/c$me.err" || rc=$? ;;
            8) action=watch # follows the job to its end; cut after 3 s (exit 124)
                timeout 3 "$BIN/meshtrain" --coordinator "$COORD_URL" watch "$jid" >/dev/null \
                    2>"$T/c$me.err" || rc=$? ;;
            *) action=checkpoints
                "$BIN/meshtrain" --coordinator "$COORD_URL" checkpoints --json "$jid" \
                    >/dev/null 2>"$T/c$me.err" || rc=$? ;;
            esac
        fi
        code=-
        [ $rc -ne 0 ] && code=$(sed -n 's/^meshtrain: \([A-Z_]*\): .*/\1/p' "$T/c$me.err" | head -1)
        echo "$action $rc ${code:--}" >>"$out"
    done
}

# ---- the HTTP poller: "PATH STATUS" per request
poller() {
    local out=$T/http.txt jid p
    while [ $SECONDS -lt $END ]; do
        jid=$(tail -n 1 "$T/acked.txt" 2>/dev/null || true)
        for p in /healthz /api/v1/workers /api/v1/jobs /api/v1/mesh /metrics \
            "/api/v1/jobs/${jid:-job-000001}" "/api/v1/jobs/${jid:-job-000001}/metrics?since_step=0"; do
            echo "${p%%\?*} $(curl -s -o /dev/null -m 10 -w '%{http_code}' "$HTTP_URL$p" || true)" >>"$out"
        done
        sleep 0.1
    done
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$COORD_PID/status"; }

CPIDS=()
for i in $(seq "$NCLIENTS"); do
    client "$i" &
    CPIDS+=($!)
    PIDS+=($!)
done
poller &
CPIDS+=($!)
PIDS+=($!)

RSS_START=$(rss_kb)
MID=$((SECONDS + DURATION / 2))
RSS_MID=""
while [ $SECONDS -lt $END ]; do
    sleep $((2 + RANDOM % 3))
    kill -0 "$COORD_PID" 2>/dev/null || fail "coordinator died during the load"
    [ -z "$RSS_MID" ] && [ $SECONDS -ge $MID ] && RSS_MID=$(rss_kb) && log "midpoint RSS ${RSS_MID} kB"
    [ $SECONDS -lt $END ] || break
    # kill -9 a random live worker and start a fresh one
    live=()
    for k in "${!WPID[@]}"; do grep -qx "$k" "$T/killed.txt" || live+=("$k"); done
    victim=${live[$((RANDOM % ${#live[@]}))]}
    kill -0 "${WPID[$victim]}" 2>/dev/null || fail "worker soak-w$victim died by itself"
    kill -9 "${WPID[$victim]}"
    echo "$victim" >>"$T/killed.txt"
    start_worker
done
for p in "${CPIDS[@]}"; do wait "$p" || true; done
RSS_END=$(rss_kb)
[ -n "$RSS_MID" ] || RSS_MID=$RSS_START
log "load done: $WN workers started, $(wc -l <"$T/killed.txt") killed -9;" \
    "coordinator RSS start ${RSS_START} kB, mid ${RSS_MID} kB, end ${RSS_END} kB"

# ---- no daemon crashed
kill -0 "$COORD_PID" 2>/dev/null || fail "coordinator crashed"
for k in "${!WPID[@]}"; do
    grep -qx "$k" "$T/killed.txt" && continue
    kill -0 "${WPID[$k]}" 2>/dev/null || fail "worker soak-w$k crashed (see $T/fw$k.log)"
done

# ---- the report: requests served by method and code (the coordinator's counters), CLI and
# HTTP outcomes
curl -sf "$HTTP_URL/metrics" >"$T/prom.txt" || fail "GET /metrics after the load"
log "RPCs served by the coordinator (method code count):"
sed -n 's/^meshtrain_rpc_requests_total{method="\([^"]*\)",code="\([^"]*\)"} \(.*\)/  \1 \2 \3/p' \
    "$T/prom.txt" | sort
cat "$T"/client*.txt >"$T/cli.txt"
log "CLI requests: $(wc -l <"$T/cli.txt") (action exit code: count)"
sort "$T/cli.txt" | uniq -c | sort -rn | sed 's/^/  /'
log "HTTP requests: $(wc -l <"$T/http.txt") (status: count)"
awk '{print $2}' "$T/http.txt" | sort | uniq -c | sed 's/^/  /'

if grep -Eq ' (INTERNAL|DATA_LOSS)$' "$T/cli.txt"; then
    fail "INTERNAL/DATA_LOSS answers: $(grep -E ' (INTERNAL|DATA_LOSS)$' "$T/cli.txt" | sort | uniq -c)"
fi
if awk '$2 == "000" || ($2 >= 500 && $2 != 503)' "$T/http.txt" | grep -q .; then
    fail "HTTP failures: $(awk '$2 == "000" || ($2 >= 500 && $2 != 503)' "$T/http.txt" | sort | uniq -c)"
fi
n_submit=$(grep -c '^submit 0 ' "$T/cli.txt" || true)
[ "$n_submit" -gt 0 ] || fail "no job was submitted"

# ---- no acknowledged job lost: every acked id listed, in a valid state
mt jobs --all --json >"$T/jobs.json"
sort -u "$T/acked.txt" >"$T/acked.sorted"
jq -r '.jobs[] | select(.state | IN("QUEUED", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED",
    "CANCELLED", "RESTARTING", "STALLED")) | .job_id' "$T/jobs.json" | sort -u >"$T/listed.sorted"
missing=$(comm -23 "$T/acked.sorted" "$T/listed.sorted")
[ -z "$missing" ] || fail "acknowledged jobs missing or in an invalid state: $missing"
log "$(wc -l <"$T/acked.sorted") acknowledged jobs, all listed:" \
    "$(jq -r '[.jobs[].state] | group_by(.) | map("\(.[0]) \(length)") | join(", ")' "$T/jobs.json")"

jq -r '.jobs[] | select(.state == "FAILED") | "  FAILED \(.job_id): \(.reason)"' "$T/jobs.json"

# ---- and every one can still be brought to an end: cancel the rest, all become terminal
for j in $(jq -r '.jobs[] | select(.state | IN("SUCCEEDED", "FAILED", "CANCELLED") | not) | .job_id' \
    "$T/jobs.json"); do
    mt cancel "$j" >/dev/null || fail "cancel $j after the load"
done
all_terminal() {
    mt jobs --all --json | jq -e '[.jobs[].state] | all(IN("SUCCEEDED", "FAILED", "CANCELLED"))'
}
wait_for 30 "every job terminal after cancel" all_terminal
log "every job terminal after cancelling the rest"

# ---- RSS bounded: the second half must not grow past 1.5x the midpoint. Not under ASan
# (MT_SANITIZED=1): its quarantine holds freed memory, so RSS grows by design.
if [ "${MT_SANITIZED:-0}" = "1" ]; then
    log "RSS bound not checked under sanitizers (ASan quarantine); end/mid =" \
        "$(awk -v a="$RSS_END" -v b="$RSS_MID" 'BEGIN {printf "%.2f", a / b}')"
    exit 0
fi
[ "$RSS_END" -le $((RSS_MID * 3 / 2)) ] ||
    fail "coordinator RSS grew from ${RSS_MID} kB (midpoint) to ${RSS_END} kB (end)"
log "soak passed: RSS end/mid = $(awk -v a="$RSS_END" -v b="$RSS_MID" 'BEGIN {printf "%.2f", a / b}')"
