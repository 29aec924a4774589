#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_report_pace.sh — a job's metric reports keep the reporter's pace however short its
# epochs are, and lose no point (worker/task.c, on_progress; docs/cli.md, meshtrain-worker,
# step 4): the tutorial MLP on synthetic data with 2 steps an epoch (a test evaluation and its
# points at every epoch end) runs 20,000 steps on one worker; the coordinator's
# meshtrain_rpc_requests_total{method="ReportMetrics"} stays within one report per 100 ms of the
# job's run plus a margin for the checkpoints' drains and the final flush (kicked at every epoch
# end, the reports went out back to back: 49 in 1.6 s), and the job's history holds every step's
# batch_loss and every epoch's test_loss.
source "$(dirname "$0")/lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
bg w1 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w1
wait_for 20 "one worker" workers_alive 1

STEPS=20000
cat >"$T/job.json" <<JSON
{
  "seed": 3, "batch_size": 32, "steps": $STEPS, "optimizer": "adam", "learning_rate": 0.01,
  "dataset": {"format": "synthetic", "examples": 64, "test_examples": 32, "features": 40},
  "mesh": {"batch": 1}, "input_layout": ["batch", "unsharded"],
  "checkpoint": {"every_steps": 5000, "keep": 2},
  "model": {"input_shape": [40], "layers": [
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 2, "activation": "softmax"}]}
}
JSON
reports() {
    curl -sf "$HTTP_URL/metrics" |
        sed -n 's/^meshtrain_rpc_requests_total{method="ReportMetrics",code="[A-Z_]*"} //p' |
        awk '{ s += $1 } END { print s + 0 }'
}
r0=$(reports)
t0=$(date +%s%N)
JOB=$(mt submit "$T/job.json" --name pace) || fail "submit"
mt watch --json "$JOB" >/dev/null 2>&1 || fail "$JOB: $(mt status "$JOB")"
t1=$(date +%s%N)
mt status --json "$JOB" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$JOB: $(mt status "$JOB")"
n=$(($(reports) - r0))
ms=$(((t1 - t0) / 1000000))
# one report per 100 ms of the job's life, the 4 checkpoints' drains and the last flush, and 10
# spare; the epoch ends (10,000 of them) must not each add one
limit=$((ms / 100 + 15))
log "$STEPS steps in 2-step epochs: $n ReportMetrics calls in $ms ms (limit $limit)"
[ "$n" -ge 1 ] || fail "no ReportMetrics call was counted"
[ "$n" -le "$limit" ] || fail "$n reports in $ms ms: more than one per 100 ms (limit $limit)"

# every point arrived: a batch_loss per step, a test_loss per epoch
curl -sf "$HTTP_URL/api/v1/jobs/$JOB/metrics?names=batch_loss,test_loss" >"$T/m.json" ||
    fail "GET metrics"
jq -e --argjson s "$STEPS" '.series.batch_loss.step == [range(1; $s + 1)]' "$T/m.json" \
    >/dev/null || fail "batch_loss steps: $(jq -c '.series.batch_loss.step | length' "$T/m.json")"
jq -e --argjson s "$STEPS" '.series.test_loss.step == [range(2; $s + 1; 2)]' "$T/m.json" \
    >/dev/null || fail "test_loss steps: $(jq -c '.series.test_loss.step | length' "$T/m.json")"
log "every step's batch_loss and every epoch's test_loss are stored"
