#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_ipc_data_plane.sh — workers on one machine can exchange tensors over Unix-domain sockets
# (`--data-listen ipc:///PATH`): two workers with ipc listeners register with those addresses, a
# job across both (mesh batch=4, 2 devices each) succeeds, and its exported weights are
# byte-identical to the same job on two workers with tcp listeners (the reduction order does not
# depend on the transport). A worker whose ipc path cannot be bound still registers and its task
# fails with the reason.
source "$(dirname "$0")/lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200 \
    --heartbeat-timeout-ms 3000
mkdir -p "$T/sock"
bg ia "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name ia \
    --data-listen "ipc://$T/sock/ia.ipc"
bg ib "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name ib \
    --data-listen "ipc://$T/sock/ib.ipc"
wait_for 20 "two ipc workers" workers_alive 2
mt workers --json | jq -e --arg d "$T/sock" \
    '[.workers[].data_address] | sort == ["ipc://\($d)/ia.ipc", "ipc://\($d)/ib.ipc"]' >/dev/null ||
    fail "data addresses: $(mt workers --json | jq -c '[.workers[] | {name, data_address}]')"
[ -S "$T/sock/ia.ipc" ] && [ -S "$T/sock/ib.ipc" ] || fail "no Unix-domain sockets in $T/sock"

# the same job on ipc, then on tcp: the weights must not differ by a bit
jq '. + {mesh: {batch: 4}, steps: 40} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" \
    >"$T/job.json"
run_job() { # NAME: submit --wait, check it spanned both workers, export its model
    local out=$T/$1.out rc=0
    timeout 180 "$BIN/meshtrain" --coordinator "$COORD_URL" submit --wait "$T/job.json" \
        >"$out" 2>&1 || rc=$?
    [ "$rc" = 0 ] || fail "$1: submit --wait exited $rc: $(cat "$out")"
    local job
    job=$(head -n 1 "$out")
    mt status --json "$job" | jq -e '[.placement[].worker_id] | unique | length == 2' \
        >/dev/null || fail "$1: $job did not span both workers"
    mt export "$job" --format safetensors -o "$T/$1.safetensors" >"$T/$1.export" 2>&1 ||
        fail "$1: export: $(cat "$T/$1.export")"
    log "$1: $job SUCCEEDED across both workers"
}
run_job ipc
kill "$(pgrep -f -- "--name ia")" "$(pgrep -f -- "--name ib")" 2>/dev/null
gone() { mt workers --json | jq -e '[.workers[] | select(.state == "alive")] | length == 0'; }
wait_for 20 "the ipc workers left" gone
bg ta "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name ta \
    --data-listen tcp://127.0.0.1:0
bg tb "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 2 --name tb \
    --data-listen tcp://127.0.0.1:0
wait_for 20 "two tcp workers" workers_alive 2
run_job tcp
cmp "$T/ipc.safetensors" "$T/tcp.safetensors" ||
    fail "the ipc and tcp runs exported different weights"
log "ipc and tcp runs exported byte-identical weights ($(stat -c %s "$T/ipc.safetensors") bytes)"

# an ipc path that cannot be bound: the worker registers (monitoring) and says why in its log
bg bad "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name bad \
    --data-listen "ipc://$T/no-such-dir/bad.ipc"
wait_for 20 "the worker with an unbindable ipc path registers" workers_alive 3
wait_for 10 "its log names the path" grep -q "no-such-dir/bad.ipc" "$T/bad.log"
log "PASS"
