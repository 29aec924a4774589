#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# accuracy.sh [BUILD_DIR] — the full acceptance check on the real Fashion-MNIST: 3 epochs of
# the MLP (>= 0.85 test accuracy) and of the CNN (>= 0.88), one BLAS thread. Prints the figures.
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
export OPENBLAS_NUM_THREADS=1
status=0
for m in mlp:0.85 cnn:0.88; do
    name=${m%%:*} need=${m##*:}
    out=$("$BUILD/meshtrain" train --local "$SRC/examples/fashion_mnist_$name.json" --json)
    echo "$out"
    final=$(echo "$out" | grep '"final":true')
    python3 - "$final" "$need" "$name" <<'PY' || status=1
import json, sys
r = json.loads(sys.argv[1]); need = float(sys.argv[2])
ok = r["test_accuracy"] >= need
print(f"{sys.argv[3]}: test_accuracy {r['test_accuracy']:.4f} (target >= {need}) "
      f"{'PASS' if ok else 'FAIL'}, {r['examples_per_sec']:.0f} examples/s")
sys.exit(0 if ok else 1)
PY
done
exit $status
