#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_train_npy_images.sh — the NumPy and image-folder datasets (issue #22 item 5) through the
# whole trainer: `plan` accepts each spec and `train --local` learns a separable task from
# generated data (an .npz of two Gaussian blobs; PNG folders of top-bright vs bottom-bright
# images), on one device and on a batch=2 mesh with the same test loss; a spec naming a FIFO as
# its data is refused without blocking.
source "$(dirname "$0")/lib.sh"
MT="$BIN/meshtrain"
PY=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "no python3 with numpy (deploy/install-deps.sh installs python3-numpy)"

"$PY" - "$T" <<'EOF'
import os, struct, sys, zlib
import numpy as np
t = sys.argv[1]
rng = np.random.default_rng(3)
def blobs(n):
    y = rng.integers(0, 2, n)
    x = rng.normal(0, 1, (n, 6)).astype(np.float32) + (y[:, None] * 2.5 - 1.25)
    return x, y.astype(np.int64)
x, y = blobs(256)
np.savez_compressed(t + "/train.npz", x=x, y=y)
x, y = blobs(64)
np.save(t + "/x_test.npy", x)
np.save(t + "/y_test.npy", y)
def png(path, rows):
    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xffffffff)
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", len(rows[0]), len(rows), 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for split, n in (("train", 24), ("test", 8)):
    for cls in ("bottom", "top"):
        os.makedirs("%s/img/%s/%s" % (t, split, cls), exist_ok=True)
        for i in range(n):
            hi, lo = 200 + int(rng.integers(-30, 30)), 30 + int(rng.integers(-20, 20))
            rows = [[hi if (r < 4) == (cls == "top") else lo] * 8 for r in range(8)]
            png("%s/img/%s/%s/%03d.png" % (t, split, cls, i), rows)
EOF

cat >"$T/npy.json" <<EOF
{"name": "blobs", "seed": 1, "batch_size": 32, "epochs": 4, "optimizer": "adam",
 "learning_rate": 0.05,
 "dataset": {"format": "npy", "train": "$T/train.npz",
             "test": {"x": "$T/x_test.npy", "y": "$T/y_test.npy"}},
 "model": {"input_shape": [6], "layers": [
   {"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 2}]}}
EOF
cat >"$T/img.json" <<EOF
{"name": "halves", "seed": 2, "batch_size": 16, "epochs": 6, "optimizer": "adam",
 "learning_rate": 0.02,
 "dataset": {"format": "images", "train": "$T/img/train", "test": "$T/img/test",
             "image_size": [4, 4], "color_mode": "grayscale"},
 "model": {"input_shape": [4, 4, 1], "layers": [
   {"type": "conv2d", "filters": 2, "kernel_size": 2, "activation": "relu"},
   {"type": "global_average_pooling2d"}, {"type": "dense", "units": 2}]}}
EOF

for job in npy img; do
    (cd "$T" && "$MT" plan --offline "$T/$job.json") >"$T/$job.plan" 2>&1 ||
        fail "plan $job: $(cat "$T/$job.plan")"
    grep -q ": valid" "$T/$job.plan" || fail "plan $job: $(cat "$T/$job.plan")"
    for mesh in batch=1 batch=2; do
        "$MT" train --local "$T/$job.json" --data-root "$T" --mesh "$mesh" --json \
            >"$T/$job-$mesh.out" 2>"$T/$job-$mesh.err" ||
            fail "train $job on $mesh: $(tail -3 "$T/$job-$mesh.err")"
    done
    acc=$(tail -1 "$T/$job-batch=1.out" | jq -r .test_accuracy)
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "$job: test accuracy $acc < 0.9"
    l1=$(tail -1 "$T/$job-batch=1.out" | jq -r .test_loss)
    l2=$(tail -1 "$T/$job-batch=2.out" | jq -r .test_loss)
    awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }' ||
        fail "$job: test loss $l1 on one device, $l2 on batch=2"
    log "$job: test accuracy $acc, test loss $l1 (batch=1) $l2 (batch=2)"
done

# a FIFO where the training file should be is refused at once (nothing blocks on it)
mkfifo "$T/fifo.npz"
jq --arg f "$T/fifo.npz" '.dataset.train = $f' "$T/npy.json" >"$T/fifo.json"
rc=0
timeout 20 "$MT" train --local "$T/fifo.json" --data-root "$T" >"$T/fifo.out" 2>&1 || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "a FIFO as data: exit $rc: $(cat "$T/fifo.out")"
grep -q "fifo.npz" "$T/fifo.out" || fail "the FIFO is not named: $(cat "$T/fifo.out")"
log "a FIFO as data: refused ($(tail -1 "$T/fifo.out"))"
log "PASS"
