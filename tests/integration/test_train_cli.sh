#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_train_cli.sh — `meshtrain train` exit codes and messages: usage errors exit 2, invalid
# specs exit 4 with "meshtrain: INVALID_ARGUMENT: <path>: <why>", the Progbar line format, and
# off a terminal one line per epoch plus the progress lines --log-every allows.
set -euo pipefail
BIN="${MT_BIN_DIR:?}/meshtrain"
SRC="${MT_SOURCE_DIR:?}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

expect() { # expect CODE PATTERN ARGS...
    local code=$1 pat=$2 rc=0
    shift 2
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" != "$code" ] || ! grep -q -- "$pat" "$TMP/out" "$TMP/err"; then
        echo "FAIL: meshtrain $* -> exit $rc (want $code), output:"
        cat "$TMP/out" "$TMP/err"
        exit 1
    fi
}

expect 0 "usage: meshtrain train" train --help
expect 2 "expected exactly one JOB.json" train --local
expect 2 "only --local" train "$SRC/examples/fashion_mnist_mlp.json"
expect 2 "log-every '-1': expected seconds >= 0" train --local --log-every -1 "$SRC/examples/fashion_mnist_mlp.json"
expect 2 "expected a positive integer" train --local --epochs 0 "$SRC/examples/fashion_mnist_mlp.json"
expect 4 "meshtrain: NOT_FOUND: open $TMP/none.json" train --local "$TMP/none.json"
echo '{"model":{"layers":[{"type":"flatten"},{"type":"dense","units":10},{"type":"dense","units":0}]}}' >"$TMP/bad.json"
expect 4 "meshtrain: INVALID_ARGUMENT: model.layers\[2\].units: must be a positive integer" \
    train --local "$TMP/bad.json"
echo '{"model":{"layers":[{"type":"dense","units":10}]}}' >"$TMP/flat.json"
expect 4 "INVALID_ARGUMENT: loss: the model outputs 784 rows of 10 classes per example; the dataset has 1 class label per example" train --local "$TMP/flat.json"
echo '{"dataset":{"train_images":"/nonexistent.gz"},"model":{"layers":[{"type":"flatten"},{"type":"dense","units":10}]}}' >"$TMP/nodata.json"
expect 4 "NOT_FOUND: dataset.train_images: cannot read IDX file /nonexistent.gz" train --local --data-root / "$TMP/nodata.json"
# a spec named by a relative path whose dataset paths are relative to its folder (one rule:
# relative to the spec's folder), run from the folder above it
mkdir -p "$TMP/sub"
printf 'x1,x2,y\n0.1,0.2,0\n0.9,0.8,1\n0.2,0.1,0\n0.8,0.9,1\n' >"$TMP/sub/d.csv"
echo '{"batch_size":2,"steps":2,"dataset":{"format":"csv","train":"d.csv","label_column":"y"},"model":{"input_shape":[2],"layers":[{"type":"dense","units":2}]}}' >"$TMP/sub/rel.json"
(cd "$TMP" && "$BIN" train --local sub/rel.json --data-root "$TMP" >"$TMP/out" 2>&1) ||
    { echo "FAIL: train --local sub/rel.json: $(cat "$TMP/out")"; exit 1; }
# data roots (core/pathsafe): without --data-root only the current directory and
# /usr/share/datasets are allowed
expect 4 "PERMISSION_DENIED: path /nonexistent.gz resolves to /nonexistent.gz, outside the data roots" \
    train --local "$TMP/nodata.json"
echo '{"dataset":{"train_images":"'"$TMP"'/../../etc/passwd"},"model":{"layers":[{"type":"flatten"},{"type":"dense","units":10}]}}' >"$TMP/escape.json"
expect 4 "PERMISSION_DENIED: path .*etc/passwd resolves to /etc/passwd, outside the data roots $TMP" \
    train --local --data-root "$TMP" "$TMP/escape.json"
expect 4 "NOT_FOUND: --data-root /nonexistent-root: No such file" train --local --data-root /nonexistent-root "$TMP/escape.json"
# the input-pipeline form (text): relative paths resolve against the spec's directory
mkdir -p "$TMP/root"
printf '1\tgood\n0\tbad\n' >"$TMP/outside.tsv"
echo '{"dataset":{"format":"text","train":"../outside.tsv"},"model":{"input_shape":[1200],"layers":[{"type":"dense","units":2}]}}' >"$TMP/root/text.json"
expect 4 "PERMISSION_DENIED: path $TMP/root/../outside.tsv resolves to $TMP/outside.tsv, outside the data roots $TMP/root" \
    train --local --data-root "$TMP/root" "$TMP/root/text.json"
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    # non-TTY: one Progbar line per epoch, then the test line
    expect 0 "^Epoch 1/1  5/5 \[==============================\] - [0-9]*s [0-9]*ms/step - loss: [0-9.]* - accuracy: [0-9.]* - test_loss" \
        train --local "$SRC/examples/fashion_mnist_mlp.json" --steps 5
    grep -q "^Test loss: " "$TMP/out"
    [ "$(wc -l <"$TMP/out")" = 2 ] || { echo "FAIL: piped, default --log-every:"; cat "$TMP/out"; exit 1; }
    # --log-every 0: a progress line at every update, each with its own step, then the epoch's
    expect 0 "^Epoch 1/1  12/12 \[=*\] .* - test_loss" \
        train --local "$SRC/examples/fashion_mnist_mlp.json" --steps 12 --log-every 0
    prog=$(grep -c '^Epoch 1/1  [0-9]*/12 .* accuracy: [0-9.]*$' "$TMP/out" || true)
    steps=$(grep -o '^Epoch 1/1  [0-9]*/12 .* accuracy: [0-9.]*$' "$TMP/out" | cut -d' ' -f4 | sort -u | wc -l)
    [ "$prog" -ge 2 ] && [ "$steps" = "$prog" ] && [ "$(grep -c test_loss "$TMP/out")" = 1 ] ||
        { echo "FAIL: --log-every 0: $prog progress lines, $steps steps:"; cat "$TMP/out"; exit 1; }
    # --log-every 0.2: at most one progress line per 0.2 s of the run
    start=$(date +%s.%N)
    expect 0 "test_loss" train --local "$SRC/examples/fashion_mnist_mlp.json" --steps 200 --log-every 0.2
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    prog=$(grep -c '^Epoch 1/1 .* accuracy: [0-9.]*$' "$TMP/out" || true)
    awk -v p="$prog" -v s="$secs" 'BEGIN { exit !(p <= s / 0.2 + 1) }' ||
        { echo "FAIL: --log-every 0.2: $prog progress lines in $secs s:"; cat "$TMP/out"; exit 1; }
    echo "train --local piped: --log-every 0.2: $prog progress lines in $secs s"
    # on a terminal the line is redrawn in place with \r (a terminal of 200 columns: room for
    # the closing line's bar; the fitting to narrower ones: tests/unit/test_progress.c)
    if command -v script >/dev/null; then
        COLUMNS=200 script -qec "$BIN train --local $SRC/examples/fashion_mnist_mlp.json --steps 30" /dev/null >"$TMP/tty"
        grep -q $'\rEpoch 1/1  30/30 \[=' "$TMP/tty"
        [ "$(grep -c $'\r' "$TMP/tty")" -ge 1 ]
    fi
fi
echo OK
