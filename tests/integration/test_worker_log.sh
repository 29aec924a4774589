# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_worker_log.sh — the workers' log lines of a job (issue #21; docs/api.md "Worker log
# lines"): a 2-worker data-parallel job runs to SUCCEEDED; GET /api/v1/jobs/{id}/log then holds
# lines of both workers (each tagged with its worker id and attempt, in order, each line once),
# pages with after/limit, and refuses bad parameters; a job that fails on the workers (its data
# file is missing there) has the failure as an error line. `meshtrain logs` prints the same
# lines (text, --json, --tail, --worker, --follow until the job ends; errors). The dashboard
# shows the same lines (test_dashboard_actions.sh).
source "$(dirname "$0")/lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" "$@"; }
api() { curl -sS "$HTTP_URL$1"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$HTTP_URL$1"; }
for w in w1 w2; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$w" \
        --data-root /usr/share/datasets
done
wait_for 20 "two workers" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' workers --json | jq -e '.workers | length == 2'"

jq '. + {name: "logs", steps: 30, mesh: {batch: 2}, checkpoint: {every_steps: 10}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json") || fail "submit $T/job.json"
wait_for 120 "$JOB to finish" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $JOB | jq -e '.state | IN(\"SUCCEEDED\", \"FAILED\", \"CANCELLED\")'"
mt status --json "$JOB" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$JOB: $(mt status "$JOB")"

api "/api/v1/jobs/$JOB/log" >"$T/log.json"
jq -e '.job_id == "'"$JOB"'" and (.lines | length) > 0' "$T/log.json" >/dev/null ||
    fail "no lines: $(head -c 600 "$T/log.json")"
NW=$(jq '[.lines[].worker_id] | unique | length' "$T/log.json")
[ "$NW" = 2 ] || fail "lines of $NW workers, expected 2: $(jq -c '[.lines[] | {worker_id, text}]' "$T/log.json" | head -c 800)"
# ids ascend; (worker, attempt, seq) unique; every line names attempt 1 and a level
jq -e '[.lines[].id] as $i | $i == ($i | sort) and ($i | unique | length) == ($i | length)' "$T/log.json" >/dev/null || fail "ids not ascending"
jq -e '[.lines[] | [.worker_id, .attempt, .seq]] | (unique | length) == length' "$T/log.json" >/dev/null || fail "a line stored twice"
jq -e 'all(.lines[]; .attempt == 1 and (.level | IN("debug", "info", "warn", "error")) and .time_ms > 0)' "$T/log.json" >/dev/null || fail "fields"
jq -e 'any(.lines[]; .text | test("finished: 30 steps"))' "$T/log.json" >/dev/null ||
    fail "the rank-0 worker's 'finished' line is missing: $(jq -r '.lines[].text' "$T/log.json" | tail -5)"
# each worker's own lines: they are in that worker's stderr too
for w in w1 w2; do
    WID=$(mt workers --json | jq -r ".workers[] | select(.name == \"$w\") | .worker_id")
    FIRST=$(jq -r --arg w "$WID" '[.lines[] | select(.worker_id == $w)][0].text' "$T/log.json")
    [ -n "$FIRST" ] && [ "$FIRST" != null ] || fail "no line of $w ($WID)"
    grep -qF -- "$FIRST" "$T/$w.log" || fail "$w's line '$FIRST' is not in its own log"
done
N=$(jq '.lines | length' "$T/log.json")
log "$JOB: $N lines from 2 workers, e.g. $(jq -r '.lines[-1].text' "$T/log.json")"

# paging: limit=1 then after=next; after the last id nothing
P1=$(api "/api/v1/jobs/$JOB/log?limit=1")
[ "$(jq '.lines | length' <<<"$P1")" = 1 ] || fail "limit=1: $P1"
NEXT=$(jq '.next' <<<"$P1")
[ "$NEXT" = "$(jq '.lines[0].id' "$T/log.json")" ] || fail "next $NEXT"
[ "$(api "/api/v1/jobs/$JOB/log?after=$NEXT" | jq '.lines | length')" = $((N - 1)) ] || fail "after=$NEXT"
LAST=$(jq '.next' "$T/log.json")
api "/api/v1/jobs/$JOB/log?after=$LAST" | jq -e '(.lines | length) == 0 and .next == '"$LAST" >/dev/null || fail "after the last line"
[ "$(code "/api/v1/jobs/$JOB/log?after=x")" = 400 ] || fail "after=x"
[ "$(code "/api/v1/jobs/$JOB/log?limit=0")" = 400 ] || fail "limit=0"
[ "$(code "/api/v1/jobs/job-999999/log")" = 404 ] || fail "unknown job"
log "paging and bad parameters: limit, after/next, 400s, 404"

# the CLI: the same lines in the same order, as text and as JSON
mt logs --json "$JOB" >"$T/cli.ndjson" || fail "meshtrain logs --json $JOB"
[ "$(jq -s -c '[.[].id]' "$T/cli.ndjson")" = "$(jq -c '[.lines[].id]' "$T/log.json")" ] ||
    fail "logs --json ids differ from the API's: $(head -c 400 "$T/cli.ndjson")"
mt logs "$JOB" >"$T/cli.txt" || fail "meshtrain logs $JOB"
[ "$(wc -l <"$T/cli.txt")" = "$N" ] || fail "logs: $(wc -l <"$T/cli.txt") lines, want $N"
LASTTXT=$(jq -r '.lines[-1].text' "$T/log.json")
tail -n 1 "$T/cli.txt" | grep -qE "^[0-9-]{10} [0-9:]{8}\.[0-9]{3} .* #1 (DEBUG|INFO|WARN|ERROR) +" ||
    fail "logs line format: $(tail -n 1 "$T/cli.txt")"
tail -n 1 "$T/cli.txt" | grep -qF -- "$LASTTXT" || fail "logs: last line is not '$LASTTXT'"
[ "$(mt logs --tail 3 --json "$JOB" | jq -s -c '[.[].id]')" = "$(jq -c '[.lines[-3:][].id]' "$T/log.json")" ] ||
    fail "logs --tail 3"
WID=$(mt workers --json | jq -r '.workers[] | select(.name == "w2") | .worker_id')
mt logs --worker "$WID" --json "$JOB" | jq -s -e --arg w "$WID" 'length > 0 and all(.[]; .worker_id == $w)' >/dev/null ||
    fail "logs --worker $WID"
mt logs --after "$NEXT" --json "$JOB" | jq -s -e "length == $((N - 1))" >/dev/null || fail "logs --after"
expect_fail 4 "NOT_FOUND" mt logs job-999999
expect_fail 2 "tail" mt logs --tail x "$JOB"
log "meshtrain logs: $N lines as the API, --tail, --worker, --after, NOT_FOUND, usage"

# a job whose data the workers do not have fails there; the failure is an error line
jq '. + {name: "nodata", steps: 5, mesh: {batch: 2}, restart: {max_restarts: 0}} | del(.epochs) |
    .dataset.train_images = "/usr/share/datasets/fashion-mnist/missing-idx3-ubyte.gz"' "$SRC/examples/fashion_mnist_mlp.json" >"$T/bad.json"
BAD=$(mt submit "$T/bad.json") || fail "submit: the coordinator refused $T/bad.json"
mt logs --follow --json "$BAD" >"$T/follow.ndjson" 2>"$T/follow.err" &
FOLLOW=$!
wait_for 60 "$BAD to fail" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $BAD | jq -e '.state == \"FAILED\"'"
api "/api/v1/jobs/$BAD/log" >"$T/bad.log.json"
jq -e 'any(.lines[]; .level == "error" and (.text | test("failed")))' "$T/bad.log.json" >/dev/null ||
    fail "no error line for $BAD: $(jq -c '.lines' "$T/bad.log.json" | head -c 800)"
log "$BAD failed; its log has: $(jq -r '[.lines[] | select(.level == "error")][0].text' "$T/bad.log.json" | head -c 160)"
# logs --follow ends by itself once the job has ended, with every line (the error line too)
wait_for 30 "logs --follow to end" bash -c "! kill -0 $FOLLOW 2>/dev/null"
rc=0
wait "$FOLLOW" || rc=$?
[ $rc = 0 ] || fail "logs --follow exited $rc: $(cat "$T/follow.err")"
[ "$(jq -s -c '[.[].id]' "$T/follow.ndjson")" = "$(api "/api/v1/jobs/$BAD/log" | jq -c '[.lines[].id]')" ] ||
    fail "logs --follow printed other lines than the API: $(head -c 400 "$T/follow.ndjson")"
log "logs --follow of $BAD ended with the job: $(wc -l <"$T/follow.ndjson") lines"
