#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_progress_term.sh — the progress display fits the terminal and paces itself off one
# (client/progress.h), with real daemons on loopback and a 3-epoch CSV job of about 0.3 s/epoch:
#  * `watch` in a tmux pane of 80 columns: the pane's history holds exactly one row
#    starting "Epoch" per epoch (a line wider than the pane wrapped, and every redraw left a row
#    behind), no row wider than 80, and the final state; `train --local` likewise;
#  * piped: `watch` of the ended job prints one line per epoch and the final state;
#    `submit --follow` piped prints the id, one line per epoch and the final state with the
#    default --log-every (30 s), and with --log-every 0.3 (on a job of 1.2 s epochs) at most one
#    progress line per 0.3 s besides (and at least one);
#  * --log-every rejects a bad value (exit 2).
source "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || { echo "SKIP: no tmux"; exit 0; }
SOCK=$T/tmux.sock # a server of our own, its socket in the temp dir
trap 'rc=$?; tmux -S "$SOCK" kill-server 2>/dev/null || true; set +e; (exit $rc); cleanup' EXIT

start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http off --heartbeat-ms 200
bg w1 "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name w1 --data-root "$T"
wait_for 20 "the worker" sh -c "'$BIN/meshtrain' --coordinator '$COORD_URL' workers --json |
    jq -e '.workers | length == 1'"

EPOCHS=3
awk 'BEGIN { srand(3); print "a,b,c,d,label";
    for (i = 0; i < 8000; i++) { a = rand(); b = rand(); c = rand(); d = rand();
        printf "%.4f,%.4f,%.4f,%.4f,%d\n", a, b, c, d, (a + b > c + d) } }' >"$T/train.csv"
head -n 200 "$T/train.csv" >"$T/test.csv"
# about 0.3 s per epoch here: a few metric batches (one per 100 ms) redraw each epoch's line
jq -n --arg t "$T" --argjson e $EPOCHS '{seed: 7, batch_size: 16, epochs: $e, optimizer: "sgd",
    learning_rate: 0.05, mesh: {batch: 1},
    dataset: {format: "csv", train: ($t + "/train.csv"), test: ($t + "/test.csv"),
              label_column: "label", num_classes: 2},
    model: {input_shape: [4], layers: [{type: "dense", units: 512, activation: "relu"},
                                       {type: "dense", units: 512, activation: "relu"},
                                       {type: "dense", units: 2}]}}' >"$T/job.json"

# in_pane NAME CMD: run CMD in a detached tmux pane of 80 x 24, wait for it to end, and write
# the pane's whole history to $T/NAME.rows (rows as drawn) and $T/NAME.lines (wrapped rows joined)
in_pane() {
    local name=$1 cmd=$2
    tmux -S "$SOCK" new-session -d -s "$name" -x 80 -y 24 "$cmd; echo PANE_EXIT=\$?; sleep 600"
    wait_for 300 "$name in tmux" sh -c "tmux -S '$SOCK' capture-pane -p -t '$name' -S - |
        grep -q PANE_EXIT="
    tmux -S "$SOCK" capture-pane -p -t "$name" -S - -E - >"$T/$name.rows"
    tmux -S "$SOCK" capture-pane -p -J -t "$name" -S - -E - >"$T/$name.lines"
    tmux -S "$SOCK" kill-session -t "$name"
}

# ---- watch on a terminal of 80 columns, started as the job is submitted (live redraws)
MT="'$BIN/meshtrain' --coordinator '$COORD_URL'"
in_pane follow "JOB=\$($MT submit '$T/job.json') && $MT watch \$JOB"
grep -q "PANE_EXIT=0" "$T/follow.rows" || fail "watch: $(cat "$T/follow.rows")"
JOB=$(grep -m1 -o 'job-[0-9]*' "$T/follow.rows")
n=$(grep -c '^Epoch ' "$T/follow.rows" || true)
[ "$n" = "$EPOCHS" ] || fail "tmux 80 columns: $n rows start with Epoch, want $EPOCHS: $(cat "$T/follow.rows")"
[ "$(grep -c '^Epoch .* - test_accuracy: ' "$T/follow.lines")" = "$EPOCHS" ] ||
    fail "tmux: each epoch's line should end with its test results: $(cat "$T/follow.lines")"
awk 'length($0) > 80 { exit 1 }' "$T/follow.rows" || fail "a row wider than 80 columns"
grep -q "^job $JOB SUCCEEDED" "$T/follow.rows" || fail "no final state: $(cat "$T/follow.rows")"
log "watch in tmux at 80 columns: $(grep -c . "$T/follow.rows") rows for $EPOCHS epochs"

# ---- train --local on a terminal of 80 columns
in_pane train "cd '$T' && '$BIN/meshtrain' train --local job.json"
grep -q "PANE_EXIT=0" "$T/train.rows" || fail "train --local: $(cat "$T/train.rows")"
n=$(grep -c '^Epoch ' "$T/train.rows" || true)
[ "$n" = "$EPOCHS" ] || fail "train --local in tmux: $n rows start with Epoch: $(cat "$T/train.rows")"
awk 'length($0) > 80 { exit 1 }' "$T/train.rows" || fail "train --local: a row wider than 80"
log "train --local in tmux at 80 columns: $n Epoch rows"

# ---- piped: watch of the ended job (its history), then a live follow with each pace
mt watch "$JOB" | cat >"$T/watch.out"
[ "$(grep -c '^Epoch ' "$T/watch.out")" = "$EPOCHS" ] &&
    [ "$(wc -l <"$T/watch.out")" = $((EPOCHS + 1)) ] ||
    fail "piped watch: want $EPOCHS epoch lines and the final state: $(cat "$T/watch.out")"
grep -q "^Epoch $EPOCHS/$EPOCHS  step [0-9]*/[0-9]* - [0-9]*s - loss: .* - test_accuracy: " \
    "$T/watch.out" || fail "piped watch epoch line: $(cat "$T/watch.out")"

mt submit --follow "$T/job.json" | cat >"$T/follow_pipe.out"
[ "$(wc -l <"$T/follow_pipe.out")" = $((EPOCHS + 2)) ] ||
    fail "piped submit --follow (30 s pace): $(cat "$T/follow_pipe.out")"

# the paced run needs epochs well over 0.3 s (each epoch line restarts the pace): four times the
# examples, about 1.2 s an epoch here and longer on a loaded machine
for i in 1 2 3 4; do tail -n +2 "$T/train.csv"; done | cat <(head -n 1 "$T/train.csv") - >"$T/train4.csv"
jq --arg f "$T/train4.csv" '.dataset.train = $f' "$T/job.json" >"$T/job4.json"
start=$(date +%s.%N)
mt submit --follow --log-every 0.3 "$T/job4.json" | cat >"$T/follow_fast.out"
secs=$(echo "$(date +%s.%N) - $start" | bc)
prog=$(grep -c '^Epoch .* step [0-9/]* - loss' "$T/follow_fast.out" || true)
[ "$(grep -c 'test_accuracy' "$T/follow_fast.out")" = "$EPOCHS" ] ||
    fail "--log-every 0.3: epoch lines: $(cat "$T/follow_fast.out")"
awk -v p="$prog" -v s="$secs" 'BEGIN { exit !(p >= 1 && p <= s / 0.3 + 1) }' ||
    fail "--log-every 0.3: $prog progress lines in $secs s: $(cat "$T/follow_fast.out")"
log "piped: watch $(wc -l <"$T/watch.out") lines; --follow $(wc -l <"$T/follow_pipe.out") lines;" \
    "--log-every 0.3: $prog progress lines in $secs s"

expect_exit 2 mt watch --log-every -1 "$JOB"
expect_exit 2 mt submit --log-every 5 "$T/job.json"
echo OK
