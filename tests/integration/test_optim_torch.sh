#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_optim_torch.sh — meshtrain's optimizers, schedules and global-norm clipping against
# torch.optim (optim_torch_check.py, issue #22): from the same initial weights and the same batch
# (a dense tanh -> dense MSE model, the whole data set as one batch), 1 and 6 updates of sgd
# (plain, momentum, Nesterov, weight decay, clipped with a step schedule), adam (plain, clipped with other
# betas, exponential staircase schedule with warmup), adamw with a cosine schedule and warmup,
# rmsprop with a step schedule and adagrad with an exponential schedule: every tensor's total
# update within 1e-4 of its largest value. Skipped (saying so) when no python3 imports torch.
source "$(dirname "$0")/lib.sh"
MT="$BIN/meshtrain"
CHECK="$SRC/tests/integration/optim_torch_check.py"
TPY=$(torch_python)
if [ -z "$TPY" ]; then
    echo "test_optim_torch: skipped (no python3 imports torch and numpy)"
    exit 0
fi
export OPENBLAS_NUM_THREADS=1
mkdir -p "$T/data"

train() { # RUN: train --local $T/RUN.json, export the last checkpoint to $T/RUN.safetensors
    "$MT" train --local "$T/$1.json" --save "$T/$1" --data-root / --json >"$T/$1.log" ||
        fail "train $1: $(tail -n 3 "$T/$1.log")"
    "$MT" export "$T/$1/ckpt-${1##*-}.mtc" -o "$T/$1.safetensors" >/dev/null
}

# python runs twice (importing torch takes seconds): the data and specs, then one check of all
runs=$("$TPY" "$CHECK" specs "$T/data" "$T")
for r in w0-1 $runs; do # w0-1: the initial weights
    train "$r"
done
out=$("$TPY" "$CHECK" check "$T/w0-1.safetensors" "$T" $runs 2>&1) || fail "$out"
echo "$out" | grep -v '^  ' | while read -r l; do log "$l"; done
