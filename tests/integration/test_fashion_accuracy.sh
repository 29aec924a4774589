#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_fashion_accuracy.sh — acceptance: `meshtrain train --local` on the real Fashion-MNIST.
# The MLP runs its full 3 epochs (>= 0.85 test accuracy); the CNN runs a shorter budget here
# (the full 3-epoch check, >= 0.88, is bench/accuracy.sh). Under MT_SANITIZED=1 (the ASan run)
# both run a few hundred steps with lower thresholds.
set -euo pipefail
BIN="${MT_BIN_DIR:?}/meshtrain"
SRC="${MT_SOURCE_DIR:?}"
DATA=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
if [ ! -r "$DATA" ]; then
    echo "SKIP: $DATA not installed"
    exit 0
fi

# run NAME MIN_ACCURACY ARGS...: train with --json, check the final test accuracy
run() {
    local name=$1 min=$2
    shift 2
    local out
    out=$(timeout 500 "$BIN" train --local "$@" --json)
    echo "$out"
    local final
    final=$(echo "$out" | grep '"final":true')
    python3 - "$final" "$min" "$name" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); need = float(sys.argv[2])
print(f"{sys.argv[3]}: test_accuracy {r['test_accuracy']:.4f} (need >= {need}), "
      f"{r['examples_per_sec']:.0f} examples/s")
sys.exit(0 if r["test_accuracy"] >= need else 1)
PY
}

if [ "${MT_SANITIZED:-0}" = "1" ]; then
    run mlp 0.75 "$SRC/examples/fashion_mnist_mlp.json" --steps 300
    run cnn 0.55 "$SRC/examples/fashion_mnist_cnn.json" --steps 60
else
    run mlp 0.85 "$SRC/examples/fashion_mnist_mlp.json"
    run cnn 0.78 "$SRC/examples/fashion_mnist_cnn.json" --steps 300
fi
# the per-epoch lines: one JSON object per epoch with every field
out=$("$BIN" train --local "$SRC/examples/fashion_mnist_mlp.json" --steps 20 --json)
head -n 1 <<<"$out" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
for k in ("epoch", "step", "loss", "accuracy", "test_loss", "test_accuracy"):
    assert k in r, k
assert r["epoch"] == 1 and r["step"] == 20, r'
echo OK
