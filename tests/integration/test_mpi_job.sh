# SPDX-License-Identifier: MIT
# test_mpi_job.sh — the MPI backend end to end (issue #20 item 4's acceptance): two workers
# started as one MPI world (`mpirun --allow-run-as-root --oversubscribe -np 2 meshtrain-worker
# --data-plane mpi`) register "mpi://WORLD/RANK" addresses with a coordinator on loopback and
# run the Fashion-MNIST MLP job (examples/fashion_mnist_mlp.json, 20 steps, mesh batch=2) to
# SUCCEEDED on the MPI backend; its exported weights are within 1e-5 of the built-in backend's
# (`train --local --mesh batch=2`, the same job on in-process collectives). A job that needs a
# worker on the direct transport as well fails with a message naming the worker that differs.
# Skipped (saying so) when the build has no MPI or mpirun is missing.
source "$(dirname "$0")/lib.sh"
CMP="python3 $SRC/tests/integration/compare_safetensors.py"
if ! grep -q '^MT_MPI:BOOL=ON' "$BIN/CMakeCache.txt" || ! command -v mpirun >/dev/null; then
    echo "SKIP: this build has no MPI backend or there is no mpirun (deploy/install-deps.sh)"
    exit 0
fi

MPI_PID=
stop_mpi() { # SIGTERM to mpirun reaches every worker; they stop and finalize together
    [ -n "$MPI_PID" ] || return 0
    kill -TERM "$MPI_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$MPI_PID" 2>/dev/null || break; sleep 0.1; done
    MPI_PID=
}
trap 'stop_mpi; cleanup' EXIT

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200
alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = "$1" ]; }
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }

# Open MPI as root needs --allow-run-as-root; 2 cores need --oversubscribe; no ssh agent is
# needed for local processes (OMPI_MCA_plm_rsh_agent=)
OMPI_MCA_plm_rsh_agent= bg mpi mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$BIN/meshtrain-worker" --data-plane mpi --coordinator "$COORD_URL" --name mw
MPI_PID=$LAST_PID
wait_for 60 "two MPI workers" alive 2
mt workers --json | jq -e '[.workers[].data_address | test("^mpi://[0-9a-f]{16}/[01]$")] | all' \
    >/dev/null || fail "MPI workers' addresses: $(mt workers --json | jq -c '[.workers[].data_address]')"
log "2 MPI workers registered: $(mt workers --json | jq -c '[.workers[] | [.name, .data_address]]')"

jq '. + {steps: 20, mesh: {batch: 2}} | del(.epochs) | del(.checkpoint)' \
    "$SRC/examples/fashion_mnist_mlp.json" >"$T/fmnist.json"
job=$(mt submit "$T/fmnist.json")
wait_for 240 "$job to finish" finished "$job"
mt status --json "$job" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$job: $(mt status "$job")"
mt status --json "$job" | jq -e '[.placement[].worker_id] | unique | length == 2' >/dev/null ||
    fail "$job did not span both MPI workers"
grep -q "collectives on the MPI backend" "$T/mpi.log" || fail "the workers' log does not say MPI"
mt export "$job" --format safetensors -o "$T/mpi.safetensors" >/dev/null
log "job $job SUCCEEDED on the MPI backend"

# the built-in backend: the same job, 2 devices on in-process collectives
mt train --local "$T/fmnist.json" --mesh batch=2 --save "$T/local" >"$T/local.out"
mt export "$T/local/ckpt-20.mtc" --format safetensors -o "$T/builtin.safetensors" >/dev/null
$CMP "$T/mpi.safetensors" "$T/builtin.safetensors" 1e-5 >"$T/cmp" ||
    fail "MPI job differs from the built-in backend: $(cat "$T/cmp")"
log "MPI weights within 1e-5 of the built-in backend ($(sort -t= -k2 -g "$T/cmp" | tail -1))"

# a job on the MPI workers and one on the direct transport: fails, naming the odd one out
bg tw "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name tw
wait_for 20 "three workers" alive 3
jq '. + {mesh: {batch: 3}}' "$T/fmnist.json" >"$T/mixed.json"
mixed=$(mt submit "$T/mixed.json")
wait_for 60 "$mixed to finish" finished "$mixed"
mt status --json "$mixed" | jq -e '.state == "FAILED"' >/dev/null ||
    fail "mixed job: $(mt status "$mixed")"
mt status "$mixed" | grep -q "mixes data planes" || fail "mixed job's message: $(mt status "$mixed")"
log "a job over MPI and direct-transport workers FAILED: $(mt status --json "$mixed" | jq -r '.error // .message // empty' | head -c 300)"
stop_mpi
log "PASS"
