# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_http_api.sh — the coordinator's HTTP status endpoint with real processes:
# JSON API answers (content, content types, caching headers, 400/404 JSON errors)
# over a state dir seeded through the store API (tests/tools/mt_seed_state),
# Prometheus /metrics validated by promtool (RPC counters after a real worker
# registers), static assets with ETag/304, and token auth (Bearer, login form
# cookie, /healthz open).
source "$(dirname "$0")/lib.sh"

S=$T/state
JOB=$("$BIN/mt_seed_state" "$S" --steps 300)
[ "$JOB" = "job-000001" ] || fail "seed printed '$JOB'"
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 600000 \
    --dashboard-dir "$SRC/coordinator/dashboard"
log "coordinator http $HTTP_URL"
COORD1_PID=$COORD_PID

# get PATH: body to $T/body, headers to $T/hdr, prints the status code
get() { curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' "$@"; }
hdr() { grep -i "^$1:" "$T/hdr" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
expect() { # expect STATUS CURL_ARGS...
    local want=$1; shift
    local got
    got=$(get "$@")
    [ "$got" = "$want" ] || fail "$* -> HTTP $got, expected $want: $(head -c 300 "$T/body")"
}
jqb() { jq -e "$@" "$T/body" >/dev/null || fail "jq $1 on $(head -c 400 "$T/body")"; }

expect 200 "$HTTP_URL/healthz"
[ "$(cat "$T/body")" = "ok" ] || fail "healthz body"

expect 200 "$HTTP_URL/api/v1/workers"
[ "$(hdr Content-Type)" = "application/json; charset=utf-8" ] || fail "content type $(hdr Content-Type)"
[ "$(hdr Cache-Control)" = "no-store" ] || fail "cache-control $(hdr Cache-Control)"
jqb '[.workers[].name] == ["worker-a","worker-b"] and all(.workers[]; (.devices|length) == 2)'
expect 200 "$HTTP_URL/api/v1/workers?state=lost"
jqb '.workers == []'
expect 400 "$HTTP_URL/api/v1/workers?state=zombie"
jqb '.error.code == "INVALID_ARGUMENT" and .error.http_status == 400'

expect 200 "$HTTP_URL/api/v1/jobs"
jqb '[.jobs[].state] == ["RUNNING","FAILED","QUEUED"] and .jobs[0].progress == 0.5'
jqb '.jobs[1].name == "bad-\"quoted\"-job" and (.jobs[1].error | test("shape mismatch"))'
expect 200 "$HTTP_URL/api/v1/jobs?state=QUEUED,FAILED"
jqb '[.jobs[].job_id] == ["job-000002","job-000003"]'
expect 400 "$HTTP_URL/api/v1/jobs?state=BOGUS"
jqb '.error.message | test("BOGUS")'

expect 200 "$HTTP_URL/api/v1/jobs/$JOB"
jqb '.state == "RUNNING" and .step == 300 and (.spec.model.layers | length) == 3'
jqb '[.events[].state] == ["QUEUED","SCHEDULED","RUNNING"]'
jqb '(.placement | length) == 4 and .placement[3].coords == [1,1] and .placement[3].worker_id == "worker-b"'
jqb '.latest_metrics.loss.step == 300 and .latest_metrics.test_accuracy.step == 300'
jqb '.checkpoints[0].step == 150 and .checkpoints[0].complete == true'
expect 404 "$HTTP_URL/api/v1/jobs/job-999999"
jqb '.error.code == "NOT_FOUND"'

expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics"
jqb '.count == 960 and .last_step == 300 and (.series.loss.step | length) == 300'
jqb '(.series.test_loss.step | length) == 30 and .series.test_loss.step[0] == 10'
jqb '(.series | keys_unsorted) == (.series | keys) and (.series | length) >= 3'  # name order
expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics?names=nope,loss&since_step=300"
jqb '.count == 1 and (.series | keys_unsorted) == ["loss"] and .series.loss.step == [300]'
expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics?since_step=291&names=loss,test_accuracy"
jqb '.count == 11 and (.series | keys) == ["loss","test_accuracy"] and .series.loss.step[0] == 291'
jqb '(.series.loss.value | length) == 10 and (.series.loss.value[0] | type) == "number"'
expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics?max_points=10&names=loss,test_loss"
jqb '(.series.loss.step | length) == 10 and .series.loss.step[0] == 1 and .series.loss.step[9] == 300 and (.series.test_loss.step | length) <= 10 and .series.test_loss.step[-1] == 300'
expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics?limit=5"
jqb '.count == 5 and .last_step == 2'  # 3 names per step (eval every 10th)
expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics?since_step=301"
jqb '.count == 0 and .last_step == null and .series == {}'
for bad in "since_step=-1" "since_step=abc" "since_step=" "limit=x" "names=,loss" "max_points=1" \
    "names=$(printf 'n%.0s' {1..70})" "since_step=%zz"; do
    expect 400 "$HTTP_URL/api/v1/jobs/$JOB/metrics?$bad"
    jqb '.error.code == "INVALID_ARGUMENT"'
done
expect 404 "$HTTP_URL/api/v1/jobs/job-999999/metrics"
expect 404 "$HTTP_URL/api/v1/jobs/$JOB/nothing"
expect 404 "$HTTP_URL/api/v1/nothing"
jqb '.error.code == "NOT_FOUND" and (.error.message | test("/api/v1/nothing"))'
expect 404 "$HTTP_URL/no/such/page"
jqb '.error.code == "NOT_FOUND"'
# actions (http_act.c) need a token: this coordinator has none, so they are refused
expect 403 -X POST -H 'Content-Type: application/json' -d '{}' "$HTTP_URL/api/v1/jobs/$JOB/cancel"
jqb '.error.code == "PERMISSION_DENIED" and (.error.message | test("--token-file"))'
expect 403 -X POST -H 'Content-Type: application/json' -d '{"spec": {}}' "$HTTP_URL/api/v1/jobs"
expect 405 -X POST "$HTTP_URL/api/v1/mesh"
expect 405 -X PUT "$HTTP_URL/api/v1/jobs"
expect 405 -X POST "$HTTP_URL/jobs/$JOB"
curl -sf "$HTTP_URL/api/v1/jobs/$JOB" | jq -e '.actions == []' >/dev/null || fail "actions offered without a token"
curl -sf "$HTTP_URL/api/v1/jobs?metrics=latest" | jq -e --arg j "$JOB" '.jobs[] | select(.job_id == $j) |
    .latest_metrics | has("loss") and has("test_accuracy")' >/dev/null || fail "jobs?metrics=latest"
expect 400 "$HTTP_URL/api/v1/jobs?metrics=all"
expect 404 "$HTTP_URL/api/v1/jobs/$JOB/checkpoint?step=999999"
jqb '.error.code == "NOT_FOUND"'
expect 404 "$HTTP_URL/api/v1/jobs/$JOB/model?step=999999"
jqb '.error.code == "NOT_FOUND"'

expect 200 "$HTTP_URL/api/v1/mesh"
jqb '.devices_total == 4 and .devices_busy == 4 and .devices_free == 0'
jqb '[.workers[].devices[].job_id] == ["job-000001","job-000001","job-000001","job-000001"]'
jqb '.workers[1].devices[0].coords == [1,0] and .jobs[0].devices == 4'
log "JSON API ok"

# a real worker registers: RPC counters and store write latency appear in /metrics
bg worker "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name worker-c
wait_for 20 "worker-c alive" bash -c "curl -sf '$HTTP_URL/api/v1/workers?state=alive' | jq -e '[.workers[].name] | index(\"worker-c\")'"
wait_for 10 "heartbeats counted" bash -c "curl -sf '$HTTP_URL/metrics' | grep -q 'meshtrain_rpc_requests_total{method=\"Heartbeat\",code=\"OK\"}'"
expect 200 "$HTTP_URL/metrics"
case "$(hdr Content-Type)" in "text/plain; version=0.0.4"*) ;; *) fail "metrics type $(hdr Content-Type)";; esac
grep -q '^meshtrain_rpc_requests_total{method="RegisterWorker",code="OK"} 1$' "$T/body" || fail "RegisterWorker counter"
grep -q '^meshtrain_workers{state="alive"} 3$' "$T/body" || fail "alive workers"
grep -q '^meshtrain_devices{state="busy"} 4$' "$T/body" || fail "busy devices"
grep -q '^meshtrain_devices{state="free"} 1$' "$T/body" || fail "free devices"
grep -q '^meshtrain_jobs{state="RUNNING"} 1$' "$T/body" || fail "running jobs"
grep -q '^meshtrain_job_step{job_id="job-000001",job_name="mnist-dp"} 300$' "$T/body" || fail "job step"
grep -q '^meshtrain_job_loss{job_id="job-000001",job_name="mnist-dp"} 0\.' "$T/body" || fail "job loss"
grep -q '^meshtrain_job_examples_per_second{job_id="job-000001",job_name="mnist-dp"} ' "$T/body" ||
    fail "examples/s"
grep -q '^meshtrain_job_restarts_total{job_id="job-000001",job_name="mnist-dp"} 0$' "$T/body" ||
    fail "restarts"
# the seeded failed job ended just now: its final values stay, with its state
grep -q '^meshtrain_job_final_step{job_id="job-000002",job_name="bad-\\"quoted\\"-job",state="FAILED"} 0$' \
    "$T/body" || fail "final step of the failed job: $(grep final_step "$T/body")"
grep -Eq '^meshtrain_build_info\{version="[0-9.]+",program="meshtrain-coordinator"\} 1$' "$T/body" ||
    fail "build_info"
for f in process_cpu_seconds_total process_resident_memory_bytes process_start_time_seconds \
    process_open_fds process_max_fds; do
    grep -Eq "^$f [0-9.e+]+$" "$T/body" || fail "no $f"
done
grep -q '^meshtrain_rpc_duration_seconds_bucket{method="RegisterWorker",le="+Inf"} 1$' "$T/body" ||
    fail "rpc latency histogram"
grep -Eq '^meshtrain_store_write_duration_seconds_count [1-9]' "$T/body" || fail "store write histogram"
if ! command -v promtool >/dev/null; then
    echo "SKIP promtool check: promtool not installed (Debian package prometheus; deploy/install-deps.sh)"
else
    promtool check metrics <"$T/body" || fail "promtool check metrics"
    log "promtool check metrics: ok"
fi

# static assets: long cache + ETag, 304 on revalidation; pages revalidate
expect 200 "$HTTP_URL/static/chart.min.js"
ETAG=$(hdr ETag)
[ -n "$ETAG" ] || fail "no ETag"
hdr Cache-Control | grep -q 'max-age=31536000' || fail "static cache-control $(hdr Cache-Control)"
hdr Content-Type | grep -q '^text/javascript' || fail "js content type"
expect 304 -H "If-None-Match: $ETAG" "$HTTP_URL/static/chart.min.js"
expect 200 "$HTTP_URL/"
[ "$(hdr Cache-Control)" = "no-cache" ] || fail "page cache-control $(hdr Cache-Control)"
hdr Content-Type | grep -q '^text/html' || fail "html content type"
hdr Content-Security-Policy | grep -q "frame-ancestors 'none'" || fail "no CSP on pages"
expect 200 "$HTTP_URL/jobs/$JOB"
expect 200 "$HTTP_URL/workers"
expect 404 "$HTTP_URL/static/nothing.js"
log "static assets ok"

# the metrics cache (on by default) holds the job since the queries above; another process adds steps to the
# database directly: the cache sees that it is behind the store and reloads (compared with a
# coordinator without the cache at the end)
"$BIN/mt_seed_state" "$S" --append "$JOB" --steps 25 --interval-ms 0
MQ=("" "?names=loss,test_loss" "?since_step=310" "?max_points=9" "?limit=7&names=accuracy"
    "?since_step=299&max_points=3")
for i in "${!MQ[@]}"; do
    expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics${MQ[$i]}"
    cp "$T/body" "$T/mcached_$i.json"
done
jq -e '.last_step == 325' "$T/mcached_0.json" >/dev/null || fail "cache missed the appended steps"

# token: everything but /healthz and /login needs it
S2=$T/state2
"$BIN/mt_seed_state" "$S2" --steps 10 >/dev/null
(umask 077; printf 's3cret-token\n' >"$T/token")
start_coordinator coord2 "$S2" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --token-file "$T/token" --dashboard-dir "$SRC/coordinator/dashboard"
expect 200 "$HTTP_URL/healthz"
expect 401 "$HTTP_URL/api/v1/jobs"
jqb '.error.code == "UNAUTHENTICATED"'
hdr WWW-Authenticate | grep -q Bearer || fail "no WWW-Authenticate"
expect 401 "$HTTP_URL/metrics"
expect 401 "$HTTP_URL/static/app.js"
expect 401 -H "Authorization: Bearer wrong" "$HTTP_URL/api/v1/jobs"
expect 200 -H "Authorization: Bearer s3cret-token" "$HTTP_URL/api/v1/jobs"
expect 200 -H "Authorization: Bearer s3cret-token" "$HTTP_URL/metrics"
expect 303 "$HTTP_URL/"
[ "$(hdr Location)" = "/login" ] || fail "redirect to $(hdr Location)"
expect 200 "$HTTP_URL/login"
grep -q 'name="token"' "$T/body" || fail "login form"
expect 401 --data-urlencode "token=nope" "$HTTP_URL/login"
expect 303 --data-urlencode "token=s3cret-token" "$HTTP_URL/login"
COOKIE=$(hdr Set-Cookie)
grep -q 'HttpOnly' <<<"$COOKIE" || fail "cookie not HttpOnly: $COOKIE"
grep -q 'SameSite=Strict' <<<"$COOKIE" || fail "cookie not SameSite=Strict: $COOKIE"
expect 200 -H "Cookie: ${COOKIE%%;*}" "$HTTP_URL/api/v1/jobs"
expect 200 -H "Cookie: ${COOKIE%%;*}" "$HTTP_URL/"
expect 401 -H "Cookie: mt_session=s3cret-tokenX" "$HTTP_URL/api/v1/jobs"
log "auth ok"

# clean shutdown with the HTTP side open (under ASan this also checks for leaks)
kill -TERM "$COORD_PID"
rc=0; wait "$COORD_PID" || rc=$?
[ $rc -eq 0 ] || fail "coordinator exited $rc on SIGTERM"
log "clean shutdown"

# the same metrics answers, byte for byte, from a coordinator without the cache
kill -TERM "$COORD1_PID"
wait "$COORD1_PID" || fail "first coordinator exited $? on SIGTERM"
start_coordinator coord3 "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 --metrics-cache-mb 0
for i in "${!MQ[@]}"; do
    expect 200 "$HTTP_URL/api/v1/jobs/$JOB/metrics${MQ[$i]}"
    cmp -s "$T/body" "$T/mcached_$i.json" || fail "cache on/off answers differ for ?${MQ[$i]}"
done
log "metrics answers identical with the cache on and off (${#MQ[@]} queries)"
