#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_ckpt_disk_full.sh — the coordinator's checkpoint directory is a 64 KiB tmpfs, so the
# first checkpoint upload of a real job hits ENOSPC on the coordinator (issue 19, fault 4, the
# coordinator's part): the worker is told that the coordinator's disk is full, on which host,
# without the coordinator's paths (the job's error, which status readers see, carries that
# text); the coordinator's log has the full path; no pending checkpoint record is left behind.
# The worker then skips that checkpoint and trains on; the next interval tries again.
# A worker whose own checkpoint directory is full skips the checkpoint the same way.
# Needs root for mount; skipped otherwise.
source "$(dirname "$0")/lib.sh"

S=$T/state
mkdir -p "$S/checkpoints"
if ! mount -t tmpfs -o size=64k tmpfs "$S/checkpoints" 2>/dev/null; then
    echo "SKIP: cannot mount a tmpfs (needs root)"
    exit 0
fi
trap 'rc=$?; umount "$S/checkpoints" 2>/dev/null || true; (exit $rc); cleanup' EXIT

start_coordinator coord "$S" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200 \
    --heartbeat-timeout-ms 3000
bg w1 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w1 \
    --data-root /usr/share/datasets --rpc-timeout-ms 1000
jq '. + {mesh: {batch: 1}, steps: 200, batch_size: 64, checkpoint: {every_steps: 20, keep: 3},
    restart: {max_restarts: 0}} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/job.json"
JOB=$(mt submit "$T/job.json")
HOST=$(hostname)

refused() { grep -q "checkpoint $JOB step 20 not stored: RESOURCE_EXHAUSTED: .*$S/checkpoints/.*No space left on device" "$T/coord.log"; }
wait_for 120 "the coordinator refusing the upload for lack of space" refused
log "the coordinator logged the full cause: $(grep -m1 'not stored' "$T/coord.log" | cut -c1-160)"

# what the worker was told names the coordinator's host and hides its paths
told() { grep -q "not stored by the coordinator on $HOST: its disk is full" "$T/w1.log"; }
wait_for 30 "the worker told the coordinator's disk is full" told
! grep "not stored by the coordinator" "$T/w1.log" | grep -q "$S" || fail "the worker saw the coordinator's path"

# no pending record of the failed upload
gone() { [ "$(mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete | not)] | length')" = 0 ]; }
wait_for 10 "no pending checkpoint record" gone

# the worker skips the checkpoint and trains on (issue 19, fault 4, the worker's part): the job
# succeeds, every interval tried again, a "checkpoint_skipped" point per skipped step on the
# metrics stream, the status reason names the coordinator's host and no path
finished() { mt status --json "$JOB" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
wait_for 300 "the job to end" finished
mt status --json "$JOB" >"$T/status.json"
jq -e '.state == "SUCCEEDED"' "$T/status.json" >/dev/null ||
    fail "the job did not train on past the full disk: $(jq -c '{state, error, reason}' "$T/status.json")"
! grep -q "$S" "$T/status.json" || fail "status shows the coordinator's path"
skipped=$(grep -c "checkpoint step [0-9]* skipped: .*not stored by the coordinator on $HOST: its disk is full" "$T/w1.log" || true)
[ "$skipped" -ge 5 ] || fail "the worker skipped $skipped checkpoints (want every interval tried again)"
mt watch --json "$JOB" >"$T/metrics.json" || true
points=$(jq -c 'select(.name? == "checkpoint_skipped")' "$T/metrics.json" | wc -l)
[ "$points" -ge 5 ] || fail "$points checkpoint_skipped points on the metrics stream"
log "job SUCCEEDED past the full disk: $skipped checkpoints skipped and retried, $points checkpoint_skipped points"
gone() { [ "$(mt checkpoints --json "$JOB" | jq '[.checkpoints[] | select(.complete | not)] | length')" = 0 ]; }
gone || fail "a pending checkpoint record is left"

# a worker whose own checkpoint directory (TMPDIR) is full (issue 19, fault 4, the worker's own
# disk): the trainer skips each checkpoint it cannot write, with a "checkpoint_skipped" point,
# and trains on; the next interval tries again; status shows neither the worker's paths nor a
# failure.
umount "$S/checkpoints"
mkdir -p "$T/wtmp"
mount -t tmpfs -o size=64k tmpfs "$T/wtmp" || fail "mount the worker's tmpfs"
trap 'rc=$?; umount "$T/wtmp" 2>/dev/null || true; (exit $rc); cleanup' EXIT
kill "$LAST_PID"
lost() { mt workers --json | jq -e '[.workers[] | select(.state == "alive")] | length == 0'; }
wait_for 30 "w1 seen lost" lost
bg w2 env TMPDIR="$T/wtmp" "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 \
    --name w2 --data-root /usr/share/datasets --rpc-timeout-ms 1000
JOB2=$(mt submit "$T/job.json")
f2() { mt status --json "$JOB2" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")'; }
wait_for 300 "the second job to end" f2
mt status --json "$JOB2" >"$T/status2.json"
! grep -q "$T/wtmp" "$T/status2.json" || fail "status shows the worker's path: $(jq -c '{error}' "$T/status2.json")"
jq -e '.state == "SUCCEEDED"' "$T/status2.json" >/dev/null ||
    fail "a full worker disk failed the job: $(jq -c '{state, error, reason}' "$T/status2.json")"
wskipped=$(grep -c "job $JOB2: checkpoint step [0-9]* skipped: .*No space left on device" "$T/w2.log" || true)
[ "$wskipped" -ge 5 ] || fail "the worker skipped $wskipped of its own checkpoints (want every interval tried again)"
mt watch --json "$JOB2" >"$T/metrics2.json" || true
points2=$(jq -c 'select(.name? == "checkpoint_skipped")' "$T/metrics2.json" | wc -l)
[ "$points2" -ge 5 ] || fail "$points2 checkpoint_skipped points for the worker's full disk"
log "worker disk full: job SUCCEEDED, $wskipped checkpoints skipped and retried, $points2 checkpoint_skipped points"
log "PASS"
