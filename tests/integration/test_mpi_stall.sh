# SPDX-License-Identifier: MIT
# test_mpi_stall.sh — the coordinator's hang diagnosis over the MPI backend: MPI workers record
# their collectives in the progress table the heartbeats carry (mt_coll_comm_progress_*), so a
# device that stops before a collective is named, as on the built-in stack (test_stall.sh).
# Two workers as one MPI world (mpirun -np 2 ... --data-plane mpi); rank 1 has the TEST-ONLY
# hook MT_TEST_STALL_AT_STEP=5 (its device sleeps 7 s before its first collective of step 5):
# the job becomes STALLED with "device stuck: ... mw-mpi1 cpu:0 never entered", then runs on
# and SUCCEEDS. Skipped (saying so) when the build has no MPI or mpirun is missing.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/mpi_lib.sh"

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --heartbeat-ms 200 --heartbeat-timeout-ms 3000 --stall-timeout-ms 2000
state_is() { mt status --json "$1" | jq -e --arg s "$2" '.state == $s'; }
finished() { mt status --json "$1" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }

# rank 1 alone gets the hook (Open MPI tells each process its rank in OMPI_COMM_WORLD_RANK)
# shellcheck disable=SC2016 # expanded by the bash each MPI process runs
start_mpi_workers 2 \
    bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export MT_TEST_STALL_AT_STEP=5 MT_TEST_STALL_MS=7000
             exec "$0" "$@"' \
    "$BIN/meshtrain-worker" --data-plane mpi --coordinator "$COORD_URL" --name mw \
    --data-root "$T" --data-root /usr/share/datasets
wait_for 60 "two MPI workers" workers_alive 2
jq '. + {steps: 40, batch_size: 32, mesh: {batch: 2}} | del(.epochs) |
    .model.layers[1].units = 16' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json")
wait_for 40 "$JOB stalled" state_is "$JOB" STALLED
mt status --json "$JOB" >"$T/st.json"
PATTERN='^device stuck: step 5 reduce_scatter #0 on axis batch: mw-mpi1 cpu:0 never entered'
jq -e --arg p "$PATTERN" '.diagnosis | test($p)' "$T/st.json" >/dev/null ||
    fail "diagnosis: $(jq -c '{state, reason, diagnosis}' "$T/st.json")"
log "MPI job STALLED: $(jq -r .diagnosis "$T/st.json")"
wait_for 90 "$JOB to finish" finished "$JOB"
mt status --json "$JOB" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "$JOB: $(mt status "$JOB")"
log "then SUCCEEDED"
stop_mpi
log "PASS"
