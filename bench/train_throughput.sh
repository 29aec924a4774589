#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# train_throughput.sh [BUILD_DIR] — single-thread training throughput (examples/s) of the
# Fashion-MNIST MLP (batch 128) and CNN (batch 64) in meshtrain, beside PyTorch's figure for the
# same model, batch and optimizer measured in the same run (installs python3-torch if missing and
# allowed; PyTorch gets the same OPENBLAS_CORETYPE and torch.set_num_threads(1)). Also the peak RSS
# of a full MLP training run against the target 2 x dataset float32 + 64 MiB.
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, one thread; load: $(cut -d' ' -f1-3 /proc/loadavg)"

mt_rate() { # JOB STEPS -> examples/s
    "$BUILD/meshtrain" train --local "$SRC/examples/$1" --steps "$2" --json |
        python3 -c 'import json,sys; print(round([json.loads(l) for l in sys.stdin][-1]["examples_per_sec"]))'
}

# Debian's python3-torch installs for the system interpreter, which may not be the first python3
PY=${TORCH_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import torch' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q python3-torch >/dev/null 2>&1 || true
    fi
fi
torch_rate() { # mlp|cnn -> examples/s
    "$PY" - "$1" <<'PY'
import sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
nn = torch.nn
if sys.argv[1] == "mlp":
    model, batch, steps = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)), 128, 300
else:
    model, batch, steps = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 64), nn.ReLU(), nn.Linear(64, 10)), 64, 100
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
loss_fn = nn.CrossEntropyLoss()
x = torch.rand(batch * 16, 1, 28, 28)
y = torch.randint(0, 10, (batch * 16,))
def step(i):
    j = (i % 16) * batch
    opt.zero_grad()
    loss = loss_fn(model(x[j:j + batch]), y[j:j + batch])
    loss.backward()
    opt.step()
for i in range(10):
    step(i)
t0 = time.perf_counter()
for i in range(steps):
    step(i)
print(round(batch * steps / (time.perf_counter() - t0)))
PY
}

printf "%-6s %14s %14s %8s\n" model "meshtrain ex/s" "pytorch ex/s" ratio
for m in mlp:fashion_mnist_mlp.json:469 cnn:fashion_mnist_cnn.json:200; do
    IFS=: read -r name job steps <<<"$m"
    ours=$(mt_rate "$job" "$steps")
    if "$PY" -c 'import torch' 2>/dev/null; then
        theirs=$(torch_rate "$name")
        ratio=$(python3 -c "print(f'{$ours / $theirs:.2f}x')")
    else
        theirs="n/a" ratio="n/a (python3-torch not installed)"
    fi
    printf "%-6s %14s %14s %8s\n" "$name" "$ours" "$theirs" "$ratio"
done

# peak RSS of a full MLP run (3 epochs) against 2 x dataset float32 + 64 MiB
rss_kb=$(/usr/bin/time -f '%M' "$BUILD/meshtrain" train --local "$SRC/examples/fashion_mnist_mlp.json" --json 2>&1 >/dev/null | tail -1)
limit_kb=$(( (2 * (60000 + 10000) * 784 * 4 + 64 * 1024 * 1024) / 1024 ))
echo "MLP peak RSS: $((rss_kb / 1024)) MiB (target <= $((limit_kb / 1024)) MiB): $([ "$rss_kb" -le "$limit_kb" ] && echo PASS || echo FAIL)"
