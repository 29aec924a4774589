#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fault_matrix.sh — issue 19's fault matrix on loopback: the same data-parallel job (the
# Fashion-MNIST MLP, mesh batch=2 over two real 1-device workers, checkpoints every 25 steps)
# runs once without a fault and once per scenario, each on a fresh coordinator; one line per
# scenario:
#   detect   seconds from the fault to the coordinator acting on it (RESTARTING, or the status
#            reason naming the cause); "-" when the script itself restarts the coordinator
#   recover  seconds from the fault to training past the step `status` showed at the fault
#   redone   steps trained twice as the coordinator saw them: per restart, the last step whose
#            loss point it had stored before the restart minus the checkpoint step it resumed
#            from (a lower bound: steps trained but not yet reported, at most ~100 ms of them,
#            are trained again too)
#   lost     steps 1..N without a stored "loss" point after the job ended (must be 0)
#   bits     the exported model equals the no-fault run's byte for byte (must be "equal")
# with the load average at the end of each row. Scenarios: worker kill -9 (a fresh worker
# replaces it), worker SIGSTOP (replaced likewise), coordinator kill -9 mid-job and right after a
# submit (restarted on the same state and port), the coordinator's checkpoint disk full and a
# worker's own checkpoint disk full (tmpfs mounts, freed once a checkpoint was skipped; need
# root, else skipped), and a partition between the two workers (each in its own network
# namespace, their data link taken down past step 150 and brought up once the job restarted
# naming the link; tests/integration/netns_lib.sh; skipped where namespaces are not allowed).
#   bench/fault_matrix.sh [BUILD_DIR] [STEPS]      (default build, 2000 steps)
# FAULT_ROWS (default all): the scenarios to run after the reference, any of workerkill
# workerstop coordkill coordsubmit coorddisk workerdisk partition.
set -euo pipefail
ROWS=" ${FAULT_ROWS:-all} "
for r in $ROWS; do
    case $r in
    all | workerkill | workerstop | coordkill | coordsubmit | coorddisk | workerdisk | partition) ;;
    *) echo "fault_matrix: unknown row '$r' in FAULT_ROWS" >&2; exit 2 ;;
    esac
done
want() { [[ $ROWS == *" all "* || $ROWS == *" $1 "* ]]; }

export MT_BIN_DIR=$(cd "${1:-build}" && pwd)
export MT_SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${2:-2000}
# shellcheck source=../tests/integration/lib.sh
source "$MT_SOURCE_DIR/tests/integration/lib.sh"
# shellcheck source=../tests/integration/netns_lib.sh
source "$MT_SOURCE_DIR/tests/integration/netns_lib.sh"

FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/t10k-images-idx3-ubyte.gz" ] || { echo "fault_matrix: $FM not installed"; exit 1; }
HB=(--heartbeat-ms 200 --heartbeat-timeout-ms 2000 --http off --log-level warn)
jq --argjson n "$STEPS" '. + {steps: $n, batch_size: 64, mesh: {batch: 2},
      checkpoint: {every_steps: 25, keep: 3}, restart: {max_restarts: 5},
      dataset: {format: "idx",
        train_images: "'"$FM"'/t10k-images-idx3-ubyte.gz",
        train_labels: "'"$FM"'/t10k-labels-idx1-ubyte.gz",
        test_images: "'"$FM"'/t10k-images-idx3-ubyte.gz",
        test_labels: "'"$FM"'/t10k-labels-idx1-ubyte.gz"}} | del(.epochs)' \
    "$MT_SOURCE_DIR/examples/fashion_mnist_mlp.json" >"$T/job.json"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
st() { mt status --json "$JOB" 2>/dev/null; }
step() { st | jq -r '.step // 0'; }
state() { st | jq -r '.state // "?"'; }
worker() {
    bg "$1" "$MT_BIN_DIR/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$1" \
        --log-level warn
    eval "PID_$1=$LAST_PID"
    disown "$LAST_PID" # no "Killed" notices when a scenario ends
}
coordinator() { start_coordinator "$@"; disown "$COORD_PID"; }
alive() { [ "$(mt workers --json | jq '[.workers[] | select(.state == "alive")] | length')" = "$1" ]; }
ended() { state | grep -Eq '^(SUCCEEDED|FAILED|CANCELLED)$'; }
past() { [ "$(step)" -gt "$1" ]; }
until_() { # until_ SECONDS CMD...: poll CMD every 0.1 s (a note on stderr on timeout)
    local secs=$1 end=$((SECONDS + $1)); shift
    while ! "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || { echo "  (gave up waiting after $secs s)" >&2; return 0; }
        sleep 0.1
    done
}

# up NAME [ENV_PREFIX...]: a fresh coordinator and workers wa, wb
up() {
    S=$T/$1
    mkdir -p "$S"
    coordinator "coord_$1" "$S" --listen tcp://127.0.0.1:0 "${HB[@]}"
    worker wa
    worker wb
    wait_for 20 "two workers" alive 2
}
down() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    PIDS=()
}

# finish NAME DETECT RECOVER: wait for the end, count redone and lost steps, compare bits, print.
# Redone: per restart (a record of `watch --json`), the highest step with a stored loss point
# reported before it minus the step it resumed from.
finish() {
    local name=$1 lost bits redone
    until_ 600 ended
    if [ "$(state)" != SUCCEEDED ]; then
        printf '%-34s job %s: %s\n' "$name" "$(state)" "$(st | jq -r .error | cut -c1-100)"
        down
        return
    fi
    mt watch --json "$JOB" >"$T/$name.points" 2>/dev/null || true
    lost=$(jq -r 'select(.name? == "loss") | .step' "$T/$name.points" | sort -un |
        awk -v n="$STEPS" '$1 >= 1 && $1 <= n { k++ } END { print n - k }')
    redone=$(jq -s '[.[] | select(.name? == "loss")] as $p |
        [.[] | select(.restart?) | . as $r |
         ([$p[] | select(.time_ms < $r.time_ms) | .step] | max // 0) - ($r.resume_step // 0)] |
        add // 0' "$T/$name.points")
    if mt export "$JOB" --format safetensors -o "$T/$name.st" >/dev/null 2>&1; then
        if [ "$name" = ref ]; then bits=reference
        elif cmp -s "$T/ref.st" "$T/$name.st"; then bits=equal
        else bits=DIFFER; fi
    else
        bits="no export"
    fi
    printf '%-34s detect %5s s  recover %5s s  redone %4s  lost %3s  bits %-9s load %s\n' \
        "$name" "$2" "$3" "$redone" "$lost" "$bits" "$(cut -d' ' -f1-3 /proc/loadavg)"
    down
}

echo "fault matrix: $STEPS steps, mesh batch=2 over 2 workers x 1 device, checkpoints every 25;" \
    "$(nproc) cores"

# ---- no fault: the reference
up ref
JOB=$(mt submit "$T/job.json")
finish ref - -

# worker_fault NAME SIGNAL DETECTED: send SIGNAL to worker wb past step 150, start a fresh
# worker wc, time DETECTED (a jq test on the status) and the resumed training, print the row
worker_fault() {
    local name=$1 sig=$2 detected=$3
    up "$sig"
    JOB=$(mt submit "$T/job.json")
    until_ 120 past 150
    AT=$(step)
    T0=$(now)
    kill "-$sig" "$PID_wb"
    worker wc
    seen() { st | jq -e "$detected"; }
    until_ 60 seen
    DET=$(since "$T0")
    resumed() { st | jq -e --argjson at "$AT" '.restarts >= 1 and .step > $at'; }
    until_ 120 resumed
    REC=$(since "$T0")
    kill -9 "$PID_wb" 2>/dev/null || true
    finish "$name" "$DET" "$REC"
}
want workerkill && worker_fault "worker kill -9" KILL '.restarts >= 1 or .state == "RESTARTING"'
want workerstop && worker_fault "worker SIGSTOP" STOP '(.reason | test("worker wb")) or .restarts >= 1'

# ---- the coordinator killed with kill -9 mid-job, restarted on the same state and port
if want coordkill; then
    up coordkill
    JOB=$(mt submit "$T/job.json")
    until_ 120 past 150
    AT=$(step); T0=$(now)
    kill -9 "$COORD_PID"
    coordinator coord_coordkill2 "$S" --listen "$COORD_URL" "${HB[@]}"
    until_ 120 past "$AT"
    REC=$(since "$T0")
    finish "coordinator kill -9 mid-job" - "$REC"
fi

# ---- the coordinator killed right after acknowledging a submit
if want coordsubmit; then
    up coordsubmit
    JOB=$(mt submit "$T/job.json")
    T0=$(now)
    kill -9 "$COORD_PID"
    coordinator coord_coordsubmit2 "$S" --listen "$COORD_URL" "${HB[@]}"
    until_ 120 past 0
    REC=$(since "$T0")
    finish "coordinator kill -9 after submit" - "$REC"
fi

# disk_full NAME FULL STATE WORKER_TMPDIR NOTED: FULL (a directory) mounted as an 8 MiB tmpfs and
# filled; a coordinator on STATE and two workers (TMPDIR=WORKER_TMPDIR when not empty) run the
# job; detect = until the status passes the jq test NOTED, then the filler goes and recover =
# until a checkpoint is stored. Mounting needs root, else the row is skipped.
disk_full() {
    local name=$1 full=$2 wtmp=${4:-${TMPDIR:-/tmp}} noted_q=$5
    S=$3
    if ! { mkdir -p "$full" "$S" && mount -t tmpfs -o size=8m tmpfs "$full" 2>/dev/null; }; then
        printf '%-34s skipped (mounting a tmpfs needs root)\n' "$name"
        return 0
    fi
    trap 'rc=$?; umount "'"$full"'" 2>/dev/null || true; (exit $rc); cleanup' EXIT
    dd if=/dev/zero of="$full/filler" bs=64k count=1000 2>/dev/null || true
    coordinator "coord_${name// /_}" "$S" --listen tcp://127.0.0.1:0 "${HB[@]}"
    TMPDIR=$wtmp worker wa
    TMPDIR=$wtmp worker wb
    wait_for 20 "two workers" alive 2
    JOB=$(mt submit "$T/job.json")
    until_ 60 past 0
    T0=$(now)
    noted() { st | jq -e "$noted_q"; }
    until_ 120 noted
    DET=$(since "$T0")
    rm -f "$full/filler"
    stored() { [ "$(mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete)] | length')" -ge 1 ]; }
    until_ 120 stored
    REC=$(since "$T0")
    finish "$name" "$DET" "$REC"
    umount "$full" 2>/dev/null || true
}

# ---- the coordinator's checkpoint directory full, freed after two skipped checkpoints
want coorddisk && disk_full "coordinator disk full" "$T/full/checkpoints" "$T/full" "" \
    '.reason | test("skipped")'
# ---- a worker's own checkpoint directory (its TMPDIR) full, freed after a skipped checkpoint
want workerdisk && disk_full "worker disk full" "$T/wfull" "$T/wfull-state" "$T/wfull" \
    '[.latest_metrics[] | select(.name == "checkpoint_skipped")] | length > 0'

# ---- a partition between the two workers: their data link down, both still reach the
# coordinator; brought up again once the job restarted naming the link
if want partition; then
    if netns_up; then
        trap 'rc=$?; netns_down; umount "$T/wfull" 2>/dev/null || true; set +e; (exit $rc); cleanup' EXIT
        S=$T/partition
        mkdir -p "$S"
        coordinator coord_partition "$S" --listen "tcp://$NET_CA:$(free_port)" --insecure "${HB[@]}" \
            --stall-timeout-ms 2000 --stall-restart-ms 0
        netns_worker wa "$NA" "$NET_DA" --log-level warn
        disown "$LAST_PID"
        netns_worker wb "$NB" "$NET_DB" --log-level warn
        disown "$LAST_PID"
        wait_for 20 "two workers" alive 2
        jq '.restart.collective_deadline_ms = 4000 | .restart.max_restarts = 20' "$T/job.json" >"$T/job_p.json"
        JOB=$(mt submit "$T/job_p.json")
        until_ 120 past 150
        AT=$(step)
        T0=$(now)
        netns_cut
        linked() { st | jq -e '(.diagnosis // "") | test("^link (wa<->wb|wb<->wa)")'; }
        until_ 60 linked
        DET=$(since "$T0")
        restarted() { st | jq -e '.restarts >= 1'; }
        until_ 120 restarted
        netns_heal
        resumed() { st | jq -e --argjson at "$AT" '.restarts >= 1 and .step > $at'; }
        until_ 120 resumed
        REC=$(since "$T0")
        finish "workers partitioned (netns)" "$DET" "$REC"
        netns_down
    else
        printf '%-34s skipped (%s)\n' "workers partitioned (netns)" "$NETNS_WHY"
    fi
fi
