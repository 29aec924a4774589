#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coord_frozen.sh — a job keeps training at full speed while its coordinator is frozen
# (SIGSTOP), and loses no metric point (docs/robustness.md). Real coordinator and two workers x 1
# device on loopback; the Fashion-MNIST MLP's model-parallel spec on mesh batch=1,model=2, so the
# "model" axis crosses the two processes: its checkpoints are gathered from both, and after
# each progress event the processes agree whether one of them stops (one allreduce over the
# world) — the path that crawled at a step a second when a worker's progress hook waited on its
# ReportMetrics call (each worker's 1 s RPC timeout, every step waiting for the slowest).
#  1. the coordinator is SIGSTOPped for 5 s before the job's one checkpoint (the last step's; a
#     checkpoint upload does wait for the coordinator): both workers (their --metrics-listen step
#     counters) take at least MIN_STEPS steps in the freeze's last 2.5 s (a step takes a few ms;
#     the crawl, which set in 0.5-2 s into a freeze, managed one step a second);
#  2. after SIGCONT the job SUCCEEDS without a restart, and every metric series has exactly one
#     point per step, 1..STEPS (none lost while frozen, none twice);
#  3. a second job: frozen again, then cancelled as soon as the coordinator answers — CANCELLED.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

# About 1000 steps a second on an idle 2-core host: the job outlasts the freeze, and its ~24,000
# points (4 series a step) are more than one report carries (8,192, worker/task.c
# REPORT_POINTS), so the backlog goes out in several; a worker keeps up to 131,072 unreported
# points (MAX_POINTS; beyond that the oldest are dropped with a warning, docs/robustness.md).
STEPS=6000
BATCH=128
MIN_STEPS=20
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 15000)
start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 "${HB[@]}"
MPA=$(free_port)
MPB=$(free_port)
start_worker1 wa --metrics-listen "127.0.0.1:$MPA"
start_worker1 wb --metrics-listen "127.0.0.1:$MPB"
wait_for 20 "two workers" workers_alive 2
# steps: the step-time histogram's count on a worker's /metrics
steps() { curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "meshtrain_worker_step_seconds_count" { print $2 }'; }

jq --argjson s "$STEPS" --argjson b "$BATCH" '. + {mesh: {batch: 1, model: 2}, steps: $s, batch_size: $b,
    checkpoint: {every_steps: $s, keep: 2}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp_model_parallel.json" >"$T/job.json"
st() { mt status --json "$1"; }
job_is() { st "$1" | jq -e --arg s "$2" '.state == $s' >/dev/null; }
step_ge() { st "$1" | jq -e --argjson s "$2" '.state == "RUNNING" and .step >= $s' >/dev/null; }

# ---- 1. frozen before the checkpoint: both workers keep stepping
JOB=$(mt submit "$T/job.json") || fail "submit: $JOB"
wait_for 60 "$JOB past step 20" step_ge "$JOB" 20
st "$JOB" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$JOB should span both workers: $(st "$JOB" | jq -c .placement)"
a0=$(steps "$MPA")
kill -STOP "$COORD_PID"
sleep 2.5
a1=$(steps "$MPA")
b1=$(steps "$MPB")
sleep 2.5
a2=$(steps "$MPA")
b2=$(steps "$MPB")
kill -CONT "$COORD_PID"
log "coordinator frozen 5 s: wa at step $a0, $a1 after 2.5 s, $a2 after 5 s; wb $b1, $b2"
# a job that ended meanwhile did not crawl either (its last step needs both workers)
moved() { [ $(($2 - $1)) -ge $MIN_STEPS ] || [ "$2" = "$STEPS" ]; }
moved "$a1" "$a2" && moved "$b1" "$b2" ||
    fail "the workers crawled while the coordinator was frozen: wa $((a2 - a1)), wb $((b2 - b1)) steps in the freeze's last 2.5 s (at least $MIN_STEPS expected)"

# ---- 2. the job succeeds, no restart, every point once
finished() { st "$JOB" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
wait_for 120 "$JOB to finish" finished
job_is "$JOB" SUCCEEDED || fail "$JOB: $(mt status "$JOB")"
st "$JOB" | jq -e '.restarts == 0' >/dev/null || fail "$JOB restarted: $(st "$JOB" | jq -c '[.events[] | [.state, .reason]]')"
curl -sf "$HTTP_URL/api/v1/jobs/$JOB/metrics" >"$T/metrics.json"
for n in loss accuracy batch_loss examples_per_sec; do
    jq -e --arg n "$n" --argjson s "$STEPS" '.series[$n].step == [range(1; $s + 1)]' \
        "$T/metrics.json" >/dev/null ||
        fail "series $n: $(jq -c --arg n "$n" '.series[$n].step | length' "$T/metrics.json") points, steps 1..$STEPS expected once each"
done
grep -q "gathered from the workers" "$T/wa.log" "$T/wb.log" || fail "no gathered checkpoint logged"
jq -e '[.series[].step | length] | add <= 131072' "$T/metrics.json" >/dev/null ||
    fail "the job reports more points than a worker keeps: $(jq -c '[.series[].step | length] | add' "$T/metrics.json"); lower STEPS"
log "$JOB SUCCEEDED, $STEPS points in each series"

# ---- 3. frozen again, cancelled once the coordinator is back: the cancel reaches the job
JOB2=$(mt submit "$T/job.json") || fail "submit: $JOB2"
wait_for 60 "$JOB2 past step 20" step_ge "$JOB2" 20
kill -STOP "$COORD_PID"
sleep 1
kill -CONT "$COORD_PID"
mt cancel "$JOB2" >/dev/null || fail "cancel $JOB2"
wait_for 30 "$JOB2 cancelled" job_is "$JOB2" CANCELLED
stopped() { grep -q "job $JOB2 attempt 1: cancelled$" "$T/wa.log" && grep -q "job $JOB2 attempt 1: cancelled$" "$T/wb.log"; }
wait_for 30 "both workers' tasks of $JOB2 to stop" stopped
log "$JOB2: frozen 1 s, cancelled after SIGCONT: both workers stopped it"
log "PASS"
