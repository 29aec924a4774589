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
"$TPY" "$CHECK" data "$T/data"

train() { # NAME CASE STEPS: train --local, export the last checkpoint to $T/NAME.safetensors
    "$TPY" "$CHECK" spec "$T/$1.json" "$T/data" "$2" "$3"
    "$MT" train --local "$T/$1.json" --save "$T/$1" --data-root / --json >"$T/$1.log" ||
        fail "train $1: $(tail -n 3 "$T/$1.log")"
    "$MT" export "$T/$1/ckpt-$3.mtc" -o "$T/$1.safetensors" >/dev/null
}

# the initial weights: one step of sgd at rate 1e-30 (the seed fixes them, not the optimizer)
train w0 init 1
for c in $("$TPY" "$CHECK" cases); do
    for steps in 1 6; do
        train "$c-$steps" "$c" "$steps"
        out=$("$TPY" "$CHECK" check "$T/$c-$steps.json" "$T/w0.safetensors" \
            "$T/$c-$steps.safetensors" "$c" "$steps" 2>&1) || fail "$c, $steps steps: $out"
        log "$(echo "$out" | tail -n 1)"
    done
done
