#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_job_digests.sh — state digests of jobs (issue #18 item 2; docs/reproducibility.md): the
# rank-0 worker reports the digests the spec asks for (digest_every, epoch ends, checkpoints) and
# the coordinator keeps them. The Fashion-MNIST MLP in mesh_invariant mode, 20 steps with a
# digest every 5, as a job on 1 worker (batch=1), on 2 workers x 1 device (batch=2), and with
# FSDP kernels sharded over the 2 workers (the digest gathers the shards across processes):
# `meshtrain diverge JOB_A JOB_B` finds no divergence between them nor against `train --local
# --json` of the same spec; the fixed_mesh job on batch=2 diverges from batch=1 (control);
# `status` and `status --json` show the latest digest; GET /api/v1/jobs/{id}/digests lists
# them (pages: since_step, limit) and the job's JSON has the latest; an unknown job is
# NOT_FOUND / 404.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
mt() { "$BIN/meshtrain" --coordinator "$COORD_URL" "$@"; }
api() { curl -sS "$HTTP_URL$1"; }
for w in w1 w2; do
    bg "$w" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$w" \
        --data-root /usr/share/datasets
done
wait_for 20 "two workers" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' workers --json | jq -e '.workers | length == 2'"

# spec NAME MODE [fsdp]: the Fashion-MNIST MLP, 20 steps, a digest every 5, no test set
spec() {
    jq --arg mode "$2" --arg fsdp "${3:-}" '. + {name: "digests", steps: 20, digest_every: 5,
        reproducibility: $mode} | del(.epochs, .checkpoint, .dataset.test_images, .dataset.test_labels)
        | if $fsdp == "" then . else .layouts = {"dense_1\\.kernel": ["batch", "unsharded"],
          "dense_2\\.kernel": ["batch", "unsharded"]} end' \
        "$SRC/examples/fashion_mnist_mlp.json" >"$T/$1.json"
}
# job NAME MESH: submit, wait for SUCCEEDED, print the id
job() {
    local id
    id=$(mt submit "$T/$1.json" --mesh "$2") || fail "submit $1"
    wait_for 120 "$id ($1 on $2) to finish" bash -c "'$BIN/meshtrain' --coordinator '$COORD_URL' status --json $id | jq -e '.state | IN(\"SUCCEEDED\", \"FAILED\", \"CANCELLED\")'"
    mt status --json "$id" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$id: $(mt status "$id")"
    echo "$id"
}

spec inv mesh_invariant
spec inv_fsdp mesh_invariant fsdp
spec fixed fixed_mesh
J1=$(job inv batch=1)
J2=$(job inv batch=2)
J3=$(job inv_fsdp batch=2)
F1=$(job fixed batch=1)
F2=$(job fixed batch=2)
[ "$(mt status --json "$J2" | jq '[.placement[].worker_id] | unique | length')" = 2 ] ||
    fail "$J2 is not spread over the 2 workers: $(mt status "$J2")"

# the digests: every 5 steps and the last, on every job
api "/api/v1/jobs/$J2/digests" >"$T/d2.json"
[ "$(jq -c '[.digests[].step]' "$T/d2.json")" = "[5,10,15,20]" ] ||
    fail "$J2 digests: $(head -c 600 "$T/d2.json")"
jq -e 'all(.digests[]; (.digest | test("^[0-9a-f]{64}$")) and .time_ms > 0)' "$T/d2.json" >/dev/null ||
    fail "digest fields: $(head -c 600 "$T/d2.json")"
[ "$(api "/api/v1/jobs/$J2/digests?since_step=6&limit=2" | jq -c '[.digests[].step]')" = "[10,15]" ] ||
    fail "digests paging: $(api "/api/v1/jobs/$J2/digests?since_step=6&limit=2")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$HTTP_URL/api/v1/jobs/$J2/digests?limit=0")" = 400 ] ||
    fail "digests?limit=0: want 400"
api "/api/v1/jobs/$J2" | jq -e --slurpfile d "$T/d2.json" '.digest == {step: 20, digest: $d[0].digests[-1].digest}' >/dev/null ||
    fail "the job's latest digest: $(api "/api/v1/jobs/$J2" | jq -c .digest)"

for pair in "$J1 $J2" "$J1 $J3" "$J2 $J3"; do
    # shellcheck disable=SC2086
    mt diverge $pair >"$T/div.out" || fail "diverge $pair: $(cat "$T/div.out")"
    grep -q "^no divergence: the digests of all 4 common steps (5..20) are equal$" "$T/div.out" ||
        fail "diverge $pair: $(cat "$T/div.out")"
done
log "mesh_invariant: 1 worker, 2 workers and FSDP over 2 workers report the same 4 digests"

# the same spec trained in this process: the same digests
(cd "$T" && "$BIN/meshtrain" train --local inv.json --json >"$T/local.out" 2>"$T/local.log") ||
    fail "train --local: $(tail -3 "$T/local.log")"
mt diverge "$J3" "$T/local.out" >"$T/div.out" || fail "diverge $J3 local: $(cat "$T/div.out")"
log "and train --local of the spec: $(cat "$T/div.out")"

rc=0
mt diverge "$F1" "$F2" >"$T/div.out" || rc=$?
[ $rc = 1 ] && grep -q "^first divergence at step 5 " "$T/div.out" ||
    fail "fixed_mesh batch=1 vs batch=2: exit $rc: $(cat "$T/div.out")"
log "control: fixed_mesh on batch=1 and batch=2 $(head -1 "$T/div.out")"

LAST=$(jq -r '.digests[-1].digest' "$T/d2.json")
mt status "$J2" | grep -q "^digest    $LAST (step 20)$" || fail "status: $(mt status "$J2")"
mt status --json "$J2" | jq -e --arg d "$LAST" '.digest == {step: 20, digest: $d}' >/dev/null ||
    fail "status --json: $(mt status --json "$J2" | jq -c .digest)"
expect_fail 4 "NOT_FOUND" mt diverge job-999999 "$J1"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$HTTP_URL/api/v1/jobs/job-999999/digests")" = 404 ] ||
    fail "digests of an unknown job: want 404"
log "status shows the latest digest; unknown jobs: NOT_FOUND, 404"
