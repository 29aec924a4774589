# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_dashboard_actions.sh — the dashboard as a person uses it, clicked through in headless
# Chromium driven over WebDriver (Debian's chromium-driver, spoken to with curl): a coordinator
# with a token and a real worker run two real jobs (A: 30 steps with checkpoints, B: long). The
# test signs in through the login form, finds both jobs in the list with their duration and
# latest metrics, sorts and filters the list, ticks A and B and opens the compare view (both
# jobs' curves on both charts), opens B's page (per-step batch_loss beside the epoch-mean loss,
# the smoothing control, spec, log, the workers' log lines), cancels B with the Cancel button and its confirmation (the
# worker stops it), downloads A's checkpoint through the page's link (the bytes of the stored
# file), and resubmits A from its page (a new job with the same spec). Screenshots:
# $MT_BIN_DIR/dashboard-compare.png and dashboard-job-live.png (docs/dashboard.md shows them).
# Skipped (exit 0 with a reason) only when Chromium or its driver is absent and cannot be
# installed.
source "$(dirname "$0")/lib.sh"

CHROME=$(command -v chromium || true)
DRIVER=$(command -v chromedriver || true)
if { [ -z "$CHROME" ] || [ -z "$DRIVER" ]; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing chromium and chromium-driver (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
        chromium-driver >"$T/apt.log" 2>&1 || true
    CHROME=$(command -v chromium || true)
    DRIVER=$(command -v chromedriver || true)
fi
if [ -z "$CHROME" ] || [ -z "$DRIVER" ]; then
    echo "SKIP: chromium and chromium-driver are not installed and could not be (apt-get install chromium chromium-driver)"
    exit 0
fi

# ---- a coordinator with a token, one real worker, two real jobs
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"
chmod 600 "$T/token"
TOKEN=$(cat "$T/token")
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --token-file "$T/token" --heartbeat-ms 200 --heartbeat-timeout-ms 5000
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" --token-file "$T/token" "$@"; }
api() { curl -sf -H "Authorization: Bearer $TOKEN" "$HTTP_URL$1"; }
state_is() { api "/api/v1/jobs/$1" | jq -e --arg s "$2" '.state == $s'; }
bg worker "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --token-file "$T/token" --devices 2 \
    --name w1 --data-root /usr/share/datasets
wait_for 20 "the worker" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' --token-file '$T/token' workers --json | jq -e '.workers | length == 1'"

jq '. + {name: "short-a", steps: 30, checkpoint: {every_steps: 10}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/a.json"
jq '. + {name: "long-b", epochs: 1000}' "$SRC/examples/fashion_mnist_mlp.json" >"$T/b.json"
# one after the other: a worker's data plane serves one job's world at a time
A=$(mt submit "$T/a.json")
wait_for 120 "$A to succeed" state_is "$A" SUCCEEDED
B=$(mt submit "$T/b.json")
log "jobs $A (short, done) and $B (long)"
wait_for 60 "$B to run" bash -c "curl -sf -H 'Authorization: Bearer $TOKEN' '$HTTP_URL/api/v1/jobs/$B' | jq -e '.state == \"RUNNING\" and .latest_metrics.batch_loss != null'"

# ---- WebDriver over HTTP (W3C protocol)
WD_PORT=$(free_port)
bg chromedriver "$DRIVER" --port="$WD_PORT"
WD=http://127.0.0.1:$WD_PORT
wait_for 20 "chromedriver" curl -sf "$WD/status"
ELEM=element-6066-11e4-a52e-4f735466cecf # the W3C element reference key
wd() { # wd METHOD PATH [JSON]: the reply's JSON; fails on a WebDriver error
    local out
    out=$(curl -sS -X "$1" -H 'Content-Type: application/json' ${3:+-d "$3"} "$WD$2") ||
        fail "webdriver $1 $2: no answer"
    if echo "$out" | jq -e '.value | objects | has("error")' >/dev/null 2>&1; then
        fail "webdriver $1 $2: $(echo "$out" | jq -c '.value | {error, message}' | head -c 400)"
    fi
    echo "$out"
}
PROFILE=$(mktemp -d "$T/profile.XXXXXX")
SID=$(wd POST /session "$(jq -nc --arg b "$CHROME" --arg p "$PROFILE" '{capabilities: {alwaysMatch:
    {browserName: "chrome", "goog:chromeOptions": {binary: $b, args: ["--headless=new",
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1500",
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    ("--user-data-dir=" + $p)]}}}}')" | jq -r .value.sessionId)
[ -n "$SID" ] && [ "$SID" != null ] || fail "no WebDriver session"
S=/session/$SID
open_url() { wd POST "$S/url" "$(jq -nc --arg u "$HTTP_URL$1" '{url: $u}')" >/dev/null; }
elem() { wd POST "$S/element" "$(jq -nc --arg v "$1" '{using: "css selector", value: $v}')" | jq -r ".value[\"$ELEM\"]"; }
click() { # the list re-renders its rows on every poll: a row found just before a
    # re-render is gone when clicked ("stale element"), so find it again and retry
    local i out
    for i in 1 2 3 4 5; do
        out=$(curl -sS -X POST -H 'Content-Type: application/json' -d '{}' \
            "$WD$S/element/$(elem "$1")/click") || fail "webdriver click $1: no answer"
        echo "$out" | jq -e '.value | objects | has("error")' >/dev/null 2>&1 || return 0
        echo "$out" | grep -q 'stale element' ||
            fail "webdriver click $1: $(echo "$out" | jq -c '.value | {error, message}' | head -c 400)"
        sleep 0.2
    done
    fail "webdriver click $1: stale after 5 tries"
}
type_in() { wd POST "$S/element/$(elem "$1")/value" "$(jq -nc --arg t "$2" '{text: $t}')" >/dev/null; }
js() { wd POST "$S/execute/sync" "$(jq -nc --arg s "$1" '{script: $s, args: []}')" | jq -r .value; }
js_true() { [ "$(js "$1")" = true ]; }
wait_js() { wait_for "$1" "$2" js_true "$3"; } # wait_js SECONDS WHAT SCRIPT (returns true)
shot() { wd GET "$S/screenshot" | jq -r .value | base64 -d >"$1"; }
cleanup_session() { curl -s -X DELETE "$WD$S" >/dev/null 2>&1 || true; }
trap 'r=$?; cleanup_session; [ "$r" = 0 ] || FAILED=1; cleanup' EXIT

# ---- sign in through the form (a token-protected dashboard redirects there)
open_url /
wait_js 20 "the login form" 'return location.pathname === "/login" && !!document.querySelector("input[name=token]")'
type_in 'input[name=token]' "$TOKEN"
click 'input[type=submit]'
wait_js 20 "the jobs list after signing in" "return location.pathname === '/' && !!document.getElementById('job-$A')"
log "signed in through /login"

# ---- the list: duration, latest metrics, sort, filter
wait_js 20 "metric columns" 'return !!document.querySelector("th[data-key=\"m:loss\"]") && !!document.querySelector("th[data-key=duration]")'
row_text() { js "return document.getElementById('job-$1').innerText"; }
grep -q "SUCCEEDED" <<<"$(row_text "$A")" || fail "row of $A: $(row_text "$A")"
LOSS_A=$(api "/api/v1/jobs/$A" | jq -r '.latest_metrics.loss.value')
COL=$(js 'return [...document.querySelectorAll("#jobs thead th")].findIndex((t) => t.dataset.key === "m:loss")')
CELL=$(js "return document.getElementById('job-$A').cells[$COL].textContent")
awk -v a="$CELL" -v b="$LOSS_A" 'BEGIN { exit !(a - b < 1e-4 && b - a < 1e-4) }' ||
    fail "the list shows loss '$CELL' for $A, the API $LOSS_A"
DCOL=$(js 'return [...document.querySelectorAll("#jobs thead th")].findIndex((t) => t.dataset.key === "duration")')
grep -Eq '^[0-9]+(s|m [0-9]{2}s)$' <<<"$(js "return document.getElementById('job-$A').cells[$DCOL].textContent")" ||
    fail "duration cell of $A: $(js "return document.getElementById('job-$A').cells[$DCOL].textContent")"
first_row() { js 'return document.querySelector("#jobs tbody tr").id'; }
[ "$(first_row)" = "job-$B" ] || fail "newest first by default: $(first_row)"
click 'th[data-key=job_id]'
wait_js 10 "ascending by job id" "return document.querySelector('#jobs tbody tr').id === 'job-$A'"
click 'th[data-key="m:loss"]'
wait_js 10 "sorted by loss" 'return document.querySelector("th[data-key=\"m:loss\"]").classList.contains("sorted-desc")'
type_in '#filter' short-a
wait_js 10 "the filter" "return document.querySelectorAll('#jobs tbody tr').length === 1 && !!document.getElementById('job-$A')"
js 'const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); return true' >/dev/null
wait_js 10 "the filter cleared" 'return document.querySelectorAll("#jobs tbody tr").length === 2'
log "jobs list: duration, loss $CELL, sort and filter"

# ---- compare A and B, chosen from the list
click "input.pick[data-job=\"$A\"]"
click "input.pick[data-job=\"$B\"]"
wait_js 10 "the compare button" 'return !document.getElementById("compare-btn").disabled'
click '#compare-btn'
wait_js 20 "the compare view" "return location.pathname === '/compare' && document.getElementById('cmp-chart-a').dataset.jobs === '$A,$B' && document.getElementById('cmp-chart-b').dataset.jobs === '$A,$B'"
[ "$(js 'return document.getElementById("cmp-chart-a").dataset.metric')" = loss ] || fail "left chart metric"
grep -q 'accuracy$' <<<"$(js 'return document.getElementById("cmp-chart-b").dataset.metric')" || fail "right chart metric"
[ "$(js 'return document.querySelectorAll("#cmp-table tbody tr").length')" = 2 ] || fail "compare table"
PTS=$(js 'return document.getElementById("cmp-chart-a").dataset.points')
[ "$PTS" -gt 30 ] || fail "compare chart has $PTS points"
wait_for 10 "Chart.js to draw" sleep 1
shot "$BIN/dashboard-compare.png"
log "compare view: $A and $B overlaid ($PTS loss points), screenshot $BIN/dashboard-compare.png"

# ---- B's page: raw per-step loss beside the epoch mean, smoothing, spec, log
open_url "/jobs/$B"
wait_js 20 "B's charts" "return document.getElementById('job-state').textContent === 'RUNNING' && /(^|,)batch_loss(,|$)/.test(document.getElementById('loss-chart').dataset.series) && /(^|,)loss(,|$)/.test(document.getElementById('loss-chart').dataset.series)"
js 'const s = document.getElementById("smoothing"); s.value = "0.9"; s.dispatchEvent(new Event("input")); return true' >/dev/null
[ "$(js 'return document.getElementById("smoothing-value").textContent')" = 0.90 ] || fail "smoothing control"
grep -q '"long-b"' <<<"$(js 'return document.getElementById("job-spec").textContent')" || fail "spec panel"
grep -q 'RUNNING' <<<"$(js 'return document.getElementById("job-log").textContent')" || fail "log panel"
wait_js 20 "the worker log" 'return Number(document.getElementById("worker-log").dataset.lines) > 0'
grep -q "job $B attempt 1: starting with" <<<"$(js 'return document.getElementById("worker-log").textContent')" ||
    fail "worker log panel: $(js 'return document.getElementById("worker-log").textContent' | head -5)"
wait_for 10 "Chart.js to draw" sleep 1
shot "$BIN/dashboard-job-live.png"

# ---- cancel B from its page
wait_js 10 "the cancel button" 'return !document.getElementById("cancel-btn").hidden'
click '#cancel-btn'
wait_js 10 "the confirmation" 'return !document.getElementById("confirm").hidden'
state_is "$B" RUNNING >/dev/null || fail "$B stopped before the confirmation"
click '#confirm-yes'
wait_for 20 "$B cancelled" state_is "$B" CANCELLED
wait_js 20 "the page to show CANCELLED" 'return document.getElementById("job-state").textContent === "CANCELLED" && document.getElementById("cancel-btn").hidden'
grep -q 'CANCELLED' <<<"$(js 'return document.getElementById("action-msg").textContent')" ||
    fail "action message: $(js 'return document.getElementById("action-msg").textContent')"
wait_for 20 "the worker to stop $B" grep -q "$B attempt 1: cancelled" "$T/worker.log"
log "cancelled $B from its page; the worker stopped it"

# ---- A's checkpoint through the page's link
open_url "/jobs/$A"
wait_js 20 "A's download link" 'return !document.getElementById("model-download").hidden'
HREF=$(js 'return document.getElementById("model-download").getAttribute("href")')
SIZE=$(api "/api/v1/jobs/$A" | jq '[.checkpoints[] | select(.complete)] | last | .size_bytes')
FILE=$(api "/api/v1/jobs/$A" | jq -r '[.checkpoints[] | select(.complete)] | last | .location')
curl -sf -H "Authorization: Bearer $TOKEN" -o "$T/dl.ckpt" "$HTTP_URL$HREF" || fail "download $HREF"
cmp -s "$T/dl.ckpt" "$FILE" || fail "the download of $HREF differs from $FILE"
[ "$(stat -c %s "$T/dl.ckpt")" = "$SIZE" ] || fail "download size"
"$BIN/meshtrain" export "$T/dl.ckpt" -o "$T/dl.safetensors" >/dev/null || fail "export of the download"
log "checkpoint download ($SIZE bytes) equals the stored file and exports"
# the page's state digest: the latest the worker reported, which at the last checkpoint's step
# is the checkpoint's state root (meshtrain digest)
wait_js 20 "A's state digest" 'return /^[0-9a-f]{64} \(step [0-9]+\)$/.test(document.getElementById("job-digest").textContent)'
DG=$(js 'return document.getElementById("job-digest").textContent')
[ "$DG" = "$(api "/api/v1/jobs/$A" | jq -r '.digest.digest + " (step " + (.digest.step | tostring) + ")"')" ] ||
    fail "page digest $DG differs from the API's"
ROOT=$("$BIN/meshtrain" digest --json "$T/dl.ckpt" | jq -r '.state + " (step " + (.step | tostring) + ")"')
[ "$DG" = "$ROOT" ] || fail "page digest $DG is not the last checkpoint's state root $ROOT"
log "state digest on the page: the last checkpoint's state root, ${DG:0:16}..."
HREF=$(js 'return document.getElementById("model-safetensors").getAttribute("href")')
curl -sf -H "Authorization: Bearer $TOKEN" -o "$T/dl_model.safetensors" "$HTTP_URL$HREF" || fail "download $HREF"
cmp -s "$T/dl_model.safetensors" "$T/dl.safetensors" ||
    fail "the model download $HREF differs from meshtrain export of the checkpoint"
log "model download ($(stat -c %s "$T/dl_model.safetensors") bytes) equals meshtrain export's safetensors"

# ---- resubmit A from its page
click '#resubmit-btn'
wait_js 10 "the resubmit form" 'return !document.getElementById("resubmit-box").hidden && document.getElementById("resubmit-spec").value.includes("short-a")'
click '#resubmit-go'
wait_js 20 "the new job's page" "return /^\\/jobs\\/job-/.test(location.pathname) && location.pathname !== '/jobs/$A'"
C=$(js 'return decodeURIComponent(location.pathname.split("/")[2])')
[ "$(api "/api/v1/jobs/$C" | jq -c '.spec')" = "$(api "/api/v1/jobs/$A" | jq -c '.spec')" ] ||
    fail "$C's spec differs from $A's"
wait_for 120 "$C to succeed" state_is "$C" SUCCEEDED
log "resubmitted $A as $C from the page; it succeeded"
