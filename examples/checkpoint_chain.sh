#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# checkpoint_chain.sh [BIN] — the DTensor tutorial's checkpoint chain on the tutorial MLP:
# train data parallel (batch=8) for 2 epochs and save, restore model parallel (batch=4,model=2)
# and train a 3rd and 4th epoch and save, restore spatial parallel (batch=2,feature=2,model=2)
# and finish the 5th epoch. Then the same 5 epochs uninterrupted on one device: the last lines
# agree (the loss continues where it stopped). Fetches the sentiment data on first use.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$here/../build/meshtrain}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -s "$here/data/sentiment_train.tsv" ] || "$here/../deploy/fetch-sentiment.sh" "$here/data"
export OPENBLAS_NUM_THREADS=1

echo "== data parallel, epochs 1-2, save"
"$BIN" train --local "$here/dtensor_mlp_data_parallel.json" --steps 76 --save "$out/dp"
echo "== model parallel from $out/dp/ckpt-76.mtc, epochs 3-4, save"
"$BIN" train --local "$here/dtensor_mlp_model_parallel.json" --resume "$out/dp/ckpt-76.mtc" \
    --steps 152 --save "$out/mp"
echo "== spatial parallel from $out/mp/ckpt-152.mtc, epoch 5"
"$BIN" train --local "$here/dtensor_mlp_spatial_parallel.json" --resume "$out/mp/ckpt-152.mtc"
echo "== uninterrupted, one device"
"$BIN" train --local "$here/dtensor_mlp_spatial_parallel.json" --mesh batch=1,feature=1,model=1
