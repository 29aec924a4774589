#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_grafana.sh — deploy/grafana/meshtrain.json against a real Prometheus (issue #21): a
# coordinator serves a seeded state (tests/tools/mt_seed_state: a RUNNING job with metric
# history, a FAILED job given metrics that ended just now, two workers) behind a token;
# Prometheus (Debian's prometheus, the same binary as promtool) scrapes its /metrics every
# second with the token, and a real worker's /metrics (--metrics-listen) after it ran a small
# data-parallel job with checkpoints; once it has a few scrapes, every query of every panel of
# the dashboard (the worker panels included) must return at least one series from Prometheus'
# HTTP API. Also: the dashboard is
# importable JSON (each panel has a Prometheus datasource, a title and targets).
source "$(dirname "$0")/lib.sh"

command -v prometheus >/dev/null || fail "prometheus not installed (deploy/install-deps.sh installs it)"
DASH=$SRC/deploy/grafana/meshtrain.json
jq -e '.panels | length > 0 and all(.[]; .title != "" and (.targets | length) > 0 and
    .datasource.type == "prometheus" and all(.targets[]; .expr != ""))' "$DASH" >/dev/null ||
    fail "$DASH: a panel lacks a title, targets or a Prometheus datasource"

S=$T/state
"$BIN/mt_seed_state" "$S" --steps 100 >/dev/null
# the failed job gets metrics (as a job that ran a while before failing), so its final values show
"$BIN/mt_seed_state" "$S" --append job-000002 --steps 20 --interval-ms 1 >/dev/null
(umask 077 && head -c 24 /dev/urandom | base64 >"$T/token")
start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-timeout-ms 600000 --token-file "$T/token"
HOSTPORT=${HTTP_URL#http://}

# a real worker with its metrics endpoint runs a small job (steps, allreduces, checkpoints);
# its two devices are its own (the seeded workers' are taken by the seeded running job)
WPORT=$(free_port)
bg worker "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --token-file "$T/token" --devices 2 \
    --name wreal --data-root /usr/share/datasets --metrics-listen "127.0.0.1:$WPORT"
jq '. + {name: "grafana-job", steps: 20, mesh: {batch: 2}, checkpoint: {every_steps: 10}} | del(.epochs)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
wait_for 20 "the real worker" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' --token-file '$T/token' workers --json | jq -e '[.workers[] | select(.name == \"wreal\" and .state == \"alive\")] | length == 1'"
REAL=$(mt --token-file "$T/token" submit "$T/job.json")
wait_for 120 "$REAL to succeed" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' --token-file '$T/token' status --json $REAL | jq -e '.state == \"SUCCEEDED\"'"

PROM_PORT=$(free_port)
cat >"$T/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: meshtrain
    static_configs: [{targets: ["$HOSTPORT"]}]
    authorization: {credentials_file: $T/token}
  - job_name: meshtrain-worker
    static_configs: [{targets: ["127.0.0.1:$WPORT"]}]
    authorization: {credentials_file: $T/token}
YAML
promtool check config "$T/prometheus.yml" >"$T/promtool.log" 2>&1 || fail "promtool check config: $(cat "$T/promtool.log")"
bg prometheus prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT"
PROM=http://127.0.0.1:$PROM_PORT

# query EXPR: the number of series Prometheus returns for EXPR now
query() { curl -sfG "$PROM/api/v1/query" --data-urlencode "query=$1" | jq -e '.status == "success"
    and (.data.result | length > 0)' >/dev/null; }
wait_for 60 "Prometheus scrapes the coordinator" query 'up{job="meshtrain"} == 1'
wait_for 60 "Prometheus scrapes the worker" query 'up{job="meshtrain-worker"} == 1'
# RPCs to count (the CLI's), and enough scrapes for rate() over [1m] (two samples at least)
for _ in 1 2 3; do mt --token-file "$T/token" jobs >/dev/null; done
wait_for 30 "three scrapes" query 'count_over_time(up{job="meshtrain"}[1m]) >= 3'

n=0
while IFS=$'\t' read -r title expr; do
    query "$expr" || fail "panel '$title': no data for $expr: $(curl -sG "$PROM/api/v1/query" --data-urlencode "query=$expr")"
    n=$((n + 1))
done < <(jq -r '.panels[] | .title as $t | .targets[] | [$t, .expr] | @tsv' "$DASH")
log "Grafana dashboard: $n queries of $(jq '.panels | length' "$DASH") panels return data from a real Prometheus scrape"
curl -sfG "$PROM/api/v1/query" --data-urlencode 'query=meshtrain_job_final_test_accuracy' |
    jq -e '.data.result[0].metric | .job_id == "job-000002" and .state == "FAILED"' >/dev/null ||
    fail "final values of the failed job"
echo "test_grafana: ok"
