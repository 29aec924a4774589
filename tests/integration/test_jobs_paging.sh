#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_jobs_paging.sh — job listings come in pages (issue 19, fault 10): over 1,201 jobs
# (tests/tools/mt_seed_state --jobs 1198), `meshtrain jobs` and GET /api/v1/jobs answer 100 by
# default with the total and a cursor; following the cursors (CLI --cursor / --all, HTTP
# cursor=) gives every job exactly once in the scheduler's order (priority, then submission),
# also with a state filter; malformed cursors and limits are refused; a page the endpoint kept
# is not served after a job changed (submit, cancel). Timing is bench/list_jobs.sh's business.
source "$(dirname "$0")/lib.sh"

S=$T/state
"$BIN/mt_seed_state" "$S" --jobs 1198 --steps 10 >/dev/null
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
log "coordinator at $COORD_URL with $(sqlite3 "$S/meshtrain.db" 'select count(*) from jobs') jobs"
in_order() { # in_order FILE: jobs sorted by priority desc, then id, no duplicates
    jq -e '[.jobs[] | [-.priority, .job_id]] as $k | $k == ($k | sort) and
        ([.jobs[].job_id] | length) == ([.jobs[].job_id] | unique | length)' "$1" >/dev/null
}

# ---- the default page, then every page
mt jobs --json >"$T/p1.json"
jq -e '(.jobs | length) == 100 and .total == 1201 and (.next_cursor | type) == "string"' \
    "$T/p1.json" >/dev/null || fail "first page: $(jq -c '{n: (.jobs | length), total, next_cursor}' "$T/p1.json")"
mt jobs >"$T/p1.txt"
tail -n 1 "$T/p1.txt" | grep -q "^(100 of 1201 jobs; the next page: --cursor $(jq -r .next_cursor "$T/p1.json"), or --all)$" ||
    fail "table footer: $(tail -n 1 "$T/p1.txt")"
mt jobs --all --json >"$T/all.json"
jq -e '(.jobs | length) == 1201 and .next_cursor == null' "$T/all.json" >/dev/null ||
    fail "--all: $(jq -c '{n: (.jobs | length), next_cursor}' "$T/all.json")"
in_order "$T/all.json" || fail "--all is not in scheduling order or repeats a job"
jq -e --slurpfile a "$T/all.json" '[.jobs[].job_id] == [$a[0].jobs[:100][].job_id]' "$T/p1.json" \
    >/dev/null || fail "the first page is not the head of the whole list"

# ---- following the cursor by hand: CLI pages of 500, HTTP pages of 97
cur=""
: >"$T/cli.ids"
for _ in 1 2 3 4; do
    mt jobs --json --limit 500 ${cur:+--cursor "$cur"} >"$T/page.json"
    jq -r '.jobs[].job_id' "$T/page.json" >>"$T/cli.ids"
    cur=$(jq -r '.next_cursor // empty' "$T/page.json")
    [ -n "$cur" ] || break
done
[ -z "$cur" ] || fail "CLI: more than 3 pages of 500"
diff <(jq -r '.jobs[].job_id' "$T/all.json") "$T/cli.ids" >/dev/null || fail "CLI pages differ from --all"
cur=""
: >"$T/http.ids"
pages=0
while :; do
    curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?limit=97${cur:+&cursor=$cur}" >"$T/page.json" ||
        fail "HTTP page $pages"
    jq -r '.jobs[].job_id' "$T/page.json" >>"$T/http.ids"
    pages=$((pages + 1))
    cur=$(jq -r '.next_cursor // empty' "$T/page.json")
    [ -n "$cur" ] || break
    [ $pages -lt 20 ] || fail "HTTP: too many pages"
done
[ $pages = 13 ] || fail "HTTP: $pages pages of 97 for 1201 jobs"
diff <(jq -r '.jobs[].job_id' "$T/all.json") "$T/http.ids" >/dev/null || fail "HTTP pages differ from the CLI's"
log "1201 jobs: CLI --all, CLI pages of 500 and HTTP pages of 97 agree, in order"

# ---- a state filter pages too; totals count the filter
curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?state=FAILED,CANCELLED&limit=1000" >"$T/f.json"
want=$(sqlite3 "$S/meshtrain.db" "select count(*) from jobs where state in ('FAILED','CANCELLED')")
jq -e --argjson w "$want" '.total == $w and (.jobs | length) == 799 and
    all(.jobs[]; .state == "FAILED" or .state == "CANCELLED")' "$T/f.json" >/dev/null ||
    fail "filtered page: $(jq -c '{total, n: (.jobs | length), next_cursor}' "$T/f.json") want total $want"
mt jobs --json --state FAILED,CANCELLED --all >"$T/f2.json"
[ "$(jq '.jobs | length' "$T/f2.json")" = "$want" ] || fail "CLI filtered --all"

# ---- refusals
expect_exit 4 mt jobs --cursor bogus
grep -q "INVALID_ARGUMENT: cursor 'bogus': malformed" "$T/last.out" || fail "bad cursor: $(cat "$T/last.out")"
expect_exit 2 mt jobs --limit 1001
expect_exit 2 mt jobs --all --cursor 0.5
for q in "limit=0" "limit=1001" "limit=x" "cursor=abc" "state=BOGUS"; do
    code=$(curl -s -o "$T/err.json" -w '%{http_code}' --max-time 10 "$HTTP_URL/api/v1/jobs?$q")
    [ "$code" = 400 ] || fail "?$q: HTTP $code"
done

# ---- a kept page is not served once a job changed
jq '. + {mesh: {batch: 64}, steps: 10} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?state=QUEUED" >"$T/q0.json"
curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?state=QUEUED" >"$T/q1.json" # the kept answer
cmp -s "$T/q0.json" "$T/q1.json" || fail "two reads without a change differ"
NEW=$(mt submit "$T/job.json")
curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?state=QUEUED" >"$T/q2.json"
jq -e --arg j "$NEW" --slurpfile o "$T/q0.json" '([.jobs[].job_id] | index($j)) != null and
    .total == $o[0].total + 1' "$T/q2.json" >/dev/null || fail "the new job $NEW is not listed: $(jq -c . "$T/q2.json")"
mt cancel "$NEW" >/dev/null
curl -sf --max-time 10 "$HTTP_URL/api/v1/jobs?state=QUEUED" >"$T/q3.json"
jq -e --arg j "$NEW" '([.jobs[].job_id] | index($j)) == null' "$T/q3.json" >/dev/null ||
    fail "cancelled $NEW still listed as QUEUED"
[ "$(mt jobs --json --state CANCELLED | jq .total)" = "$(($(jq .total "$T/f.json") - 400 + 1))" ] ||
    fail "CANCELLED total after a cancel: $(mt jobs --json --state CANCELLED | jq .total)"
log "kept pages follow submit and cancel"
log "PASS"
