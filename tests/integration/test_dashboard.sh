# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_dashboard.sh — the dashboard in a real browser: a coordinator serves a
# state dir seeded with a running job and its metric history
# (tests/tools/mt_seed_state); headless Chromium opens the job page, runs its
# scripts (Chart.js from libjs-chart.js, served by the coordinator) for a few
# seconds of virtual time, and the test checks the resulting DOM: state,
# step, progress, the charts' point counts, the mesh grid, the state history,
# that the page refreshed itself several times without a reload, the restart
# marker (the seeded job restarted, resuming from step 150: a marker dataset at
# x=150 on the charts, the restart in the state history and the API's
# restart_markers), and the error text of a failed job. Screenshots go to $MT_BIN_DIR/dashboard-*.png. The
# total transfer of the job page (HTML, CSS, JS, Chart.js) must stay <= 300 KB.
# Skipped (exit 0 with a reason) only when Chromium is absent and cannot be installed.
source "$(dirname "$0")/lib.sh"

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing chromium (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
        >"$T/apt.log" 2>&1 || true
    CHROME=$(command -v chromium || true)
fi
if [ -z "$CHROME" ]; then
    echo "SKIP: Chromium is not installed and could not be installed (apt-get install chromium)"
    exit 0
fi

S=$T/state
JOB=$("$BIN/mt_seed_state" "$S" --steps 300 --restart 150)
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-timeout-ms 600000 --dashboard-dir "$SRC/coordinator/dashboard"
log "coordinator http $HTTP_URL"

# browse URL OUT [extra flags]: run headless Chromium with a fresh profile
browse() {
    local url=$1 out=$2; shift 2
    local prof
    prof=$(mktemp -d "$T/profile.XXXXXX")
    timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --user-data-dir="$prof" --window-size=1280,1400 \
        --virtual-time-budget=6000 "$@" "$url" >"$out" 2>"$T/chromium.log" ||
        { tail -20 "$T/chromium.log"; fail "chromium failed on $url"; }
}

browse "$HTTP_URL/jobs/$JOB" "$T/job.html" --dump-dom
dom() { grep -o "$1" "$T/job.html" | head -1; }
grep -q '<span id="job-state" class="state RUNNING">RUNNING</span>' "$T/job.html" ||
    fail "job state not in DOM: $(dom 'id="job-state"[^<]*')"
grep -q '<span id="job-step">300 / 600</span>' "$T/job.html" || fail "step: $(dom 'id="job-step">[^<]*')"
grep -q '<span id="job-progress">50.0%</span>' "$T/job.html" || fail "progress"
grep -q '<span id="job-eps">[0-9,]*</span>' "$T/job.html" || fail "examples/s: $(dom 'id="job-eps">[^<]*')"
# loss: 300 train + 30 eval points; accuracy the same; examples/s 300
grep -q 'id="loss-chart"[^>]*data-points="330"' "$T/job.html" || fail "loss chart: $(dom '<canvas id="loss-chart"[^>]*')"
grep -q 'id="acc-chart"[^>]*data-points="330"' "$T/job.html" || fail "accuracy chart: $(dom '<canvas id="acc-chart"[^>]*')"
grep -q 'id="eps-chart"[^>]*data-points="300"' "$T/job.html" || fail "examples/s chart"
grep -q '<canvas id="loss-chart"[^>]*style="[^"]*height' "$T/job.html" || fail "Chart.js did not size the canvas"
[ "$(grep -o 'class="dev"' "$T/job.html" | wc -l)" = 4 ] || fail "mesh grid should show 4 devices"
grep -q 'worker-b:1' "$T/job.html" || fail "mesh cell labels"
for st in QUEUED SCHEDULED RUNNING; do
    grep -q "class=\"state $st\">$st</span>" "$T/job.html" || fail "state history lacks $st"
done
curl -sf "$HTTP_URL/api/v1/jobs/$JOB" | jq -e '.restarts == 1 and .restart_markers == [{restart: 1,
    attempt: 2, time_ms: .events[4].time_ms, resume_step: 150, lost_step: 300,
    cause: "worker worker-b lost (no heartbeat)"}] and .events[4].restart == 1 and
    .events[4].resume_step == 150 and ([.events[] | select(.restart)] | length == 1)' >/dev/null ||
    fail "API restart_markers: $(curl -s "$HTTP_URL/api/v1/jobs/$JOB" | jq -c '.restart_markers')"
for c in loss-chart acc-chart; do
    grep -q "<canvas id=\"$c\"[^>]*data-restarts=\"150\"" "$T/job.html" ||
        fail "no restart marker on $c: $(dom "<canvas id=\"$c\"[^>]*")"
done
grep -q '<tr class="restart">.*<span class="tag">restart 1</span></td><td>resumed from 150</td>' \
    "$T/job.html" || fail "state history: the restart row"
UPDATES=$(grep -o 'data-updates="[0-9]*"' "$T/job.html" | grep -o '[0-9]*')
[ "${UPDATES:-0}" -ge 3 ] || fail "page refreshed ${UPDATES:-0} times in 6 s, expected >= 3 (1 s polling)"
log "job page DOM ok (refreshed $UPDATES times without reload)"

# live: another process keeps adding steps (as a training job would) while the page is
# open; the page must pick them up by polling, and appending only new points must give
# exactly one point per step and name (no gap, no duplicate)
bg appender "$BIN/mt_seed_state" "$S" --append "$JOB" --steps 2000 --interval-ms 20
APPENDER=$LAST_PID
wait_for 10 "appender started" bash -c "curl -sf '$HTTP_URL/api/v1/jobs/$JOB' | jq -e '.step > 310'"
browse "$HTTP_URL/jobs/$JOB" "$T/live.html" --dump-dom --virtual-time-budget=20000
kill "$APPENDER" 2>/dev/null || true
LAST=$(grep -o '<canvas id="loss-chart"[^>]*' "$T/live.html" | grep -o 'data-last-step="[0-9]*"' | grep -o '[0-9]*')
PTS=$(grep -o '<canvas id="loss-chart"[^>]*' "$T/live.html" | grep -o 'data-points="[0-9]*"' | grep -o '[0-9]*')
FIRST=$(grep -o '<span id="job-step">[0-9]*' "$T/live.html" | grep -o '[0-9]*$')
log "live page: loss chart up to step $LAST with $PTS points"
[ -n "$LAST" ] && [ "$LAST" -gt 310 ] || fail "the chart did not follow the live job (last step '$LAST')"
[ "$PTS" = $((LAST + LAST / 10)) ] || fail "loss chart has $PTS points for steps 1..$LAST, expected $((LAST + LAST / 10))"
[ -n "$FIRST" ] || fail "no step in the live DOM"

browse "$HTTP_URL/jobs/$JOB" /dev/null --screenshot="$BIN/dashboard-job.png"
[ -s "$BIN/dashboard-job.png" ] || fail "no screenshot"
log "screenshot: $BIN/dashboard-job.png"

browse "$HTTP_URL/jobs/job-000002" "$T/failed.html" --dump-dom
grep -q 'id="job-error" class="error">INVALID_ARGUMENT: layer dense_1: shape mismatch<' "$T/failed.html" ||
    fail "error text: $(grep -o 'id="job-error"[^<]*' "$T/failed.html")"
grep -q 'class="state FAILED">FAILED' "$T/failed.html" || fail "failed state"

browse "$HTTP_URL/" "$T/index.html" --dump-dom
grep -q "href=\"/jobs/$JOB\">$JOB</a>" "$T/index.html" || fail "jobs table link"
[ "$(grep -o '<tr id="job-' "$T/index.html" | wc -l)" = 3 ] || fail "jobs table rows"
browse "$HTTP_URL/workers" "$T/workers.html" --dump-dom
[ "$(grep -o 'class="dev"' "$T/workers.html" | wc -l)" = 4 ] || fail "workers page device grid"
browse "$HTTP_URL/workers" /dev/null --screenshot="$BIN/dashboard-workers.png"

# page weight: the job page's own files (the API JSON is a few KB per poll)
total=0
for p in "/jobs/$JOB" /static/app.css /static/app.js /static/chart.min.js; do
    n=$(curl -s -o /dev/null -w '%{size_download} %{size_header}' "$HTTP_URL$p" | awk '{print $1 + $2}')
    total=$((total + n))
done
log "job page transfer: $total bytes (limit 307200)"
[ "$total" -le 307200 ] || fail "job page transfer $total bytes > 300 KB"
