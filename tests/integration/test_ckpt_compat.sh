# SPDX-License-Identifier: MIT
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# test_ckpt_compat.sh — a checkpoint written by an earlier release restores: the fixture
# tests/fixtures/ckpt-compat/ckpt-6-ac32123.mtc was written by `meshtrain train --local spec.json
# --steps 6 --save DIR` at commit ac32123 (before the typed job spec, graph models and FSDP);
# this build resumes it on the same mesh (batch=2, model=2) and on one device, and both end
# within 1e-5 (of each tensor's largest value) of this build's uninterrupted 12 steps. (Not bit
# for bit: batch-norm sums accumulate in double since then.)
source "$(dirname "$0")/lib.sh"
F=$SRC/tests/fixtures/ckpt-compat
CMP="python3 $SRC/tests/integration/compare_safetensors.py"
mt() { "$BIN/meshtrain" "$@"; } # no coordinator: local training and export only

mt train --local "$F/spec.json" --save "$T/full" >/dev/null
mt train --local "$F/spec.json" --resume "$F/ckpt-6-ac32123.mtc" --save "$T/resumed" >"$T/resumed.out"
mt train --local "$F/spec.json" --mesh batch=1,model=1 --resume "$F/ckpt-6-ac32123.mtc" \
    --save "$T/one" >/dev/null
mt export "$T/full/ckpt-12.mtc" --format safetensors -o "$T/full.st" >/dev/null
for run in resumed one; do
    mt export "$T/$run/ckpt-12.mtc" --format safetensors -o "$T/$run.st" >/dev/null
    $CMP "$T/$run.st" "$T/full.st" 1e-5 >"$T/$run.cmp" ||
        fail "$run from the ac32123 checkpoint: $(cat "$T/$run.cmp")"
done
log "a checkpoint of release ac32123 restores on its mesh and on one device ($(sort -t= -k2 -g "$T/resumed.cmp" | tail -1))"
