#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_export.sh — `meshtrain export CKPT --format safetensors -o FILE` end to end:
# a checkpoint written by tests/tools/mt_mkckpt is exported; the safetensors file
# is checked by python3 (header JSON, 8-byte alignment, offsets, weights only, data)
# when python3 is available; then the error exits: missing file 4, corrupt 1, usage 2.
set -euo pipefail
BIN=${MT_BIN_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BIN/mt_mkckpt" "$tmp/ckpt-300.mtc"
"$BIN/meshtrain" export "$tmp/ckpt-300.mtc" --format safetensors -o "$tmp/model.safetensors" \
    >"$tmp/out.txt"
grep -q "exported 6 weights of step 300" "$tmp/out.txt"
ls "$tmp" | grep -q tmp && { echo "temporary file left behind"; ls "$tmp"; exit 1; }

if python3 -c 'import json' 2>/dev/null; then
    python3 - "$tmp/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
assert n % 8 == 0, n
h = json.loads(b[8:8 + n].decode("utf-8"))
data = b[8 + n:]
meta = h.pop("__metadata__")
assert meta["step"] == "300" and meta["producer"] == "meshtrain", meta
assert all("/" not in k for k in h), list(h)
assert set(h) == {"dense_1.kernel", "dense_1.bias", "batch_norm.gamma", "batch_norm.beta",
                  "dense_2.kernel", "dense_2.bias"}, list(h)
assert h["dense_1.kernel"]["shape"] == [1200, 48]
end = 0
for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b0, b1 = v["data_offsets"]
    assert v["dtype"] == "F32" and b0 == end, (k, v, end)
    count = 1
    for d in v["shape"]:
        count *= d
    assert b1 - b0 == 4 * count, (k, v)
    end = b1
assert end == len(data), (end, len(data))
# values as mt_mkckpt wrote them: (k % 97) * 0.01 + index
b0 = h["dense_2.kernel"]["data_offsets"][0]
x = struct.unpack("<3f", data[b0:b0 + 12])
assert abs(x[0] - 4.0) < 1e-6 and abs(x[2] - 4.02) < 1e-6, x
print("safetensors ok:", len(h), "tensors,", len(data), "bytes")
PY
fi

# missing file: rejected (4) with the path in the message
set +e
"$BIN/meshtrain" export "$tmp/none.mtc" -o "$tmp/x.safetensors" 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 4 ] || { echo "missing file: exit $rc"; cat "$tmp/err.txt"; exit 1; }
grep -q "NOT_FOUND" "$tmp/err.txt"

# corrupt file: a flipped byte in the middle of dense_1.kernel's data -> exit 1 naming it
cp "$tmp/ckpt-300.mtc" "$tmp/bad.mtc"
printf '\xff' | dd of="$tmp/bad.mtc" bs=1 seek=100000 conv=notrunc status=none
set +e
"$BIN/meshtrain" export "$tmp/bad.mtc" -o "$tmp/x.safetensors" 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 1 ] || { echo "corrupt file: exit $rc"; cat "$tmp/err.txt"; exit 1; }
grep -q "DATA_LOSS: checkpoint .*bad.mtc: tensor 'dense_1.kernel': checksum mismatch" "$tmp/err.txt"
[ ! -e "$tmp/x.safetensors" ]

# truncated file -> exit 1
head -c 5000 "$tmp/ckpt-300.mtc" >"$tmp/short.mtc"
set +e
"$BIN/meshtrain" export "$tmp/short.mtc" -o "$tmp/x.safetensors" 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 1 ] || { echo "truncated file: exit $rc"; cat "$tmp/err.txt"; exit 1; }
grep -q "tensor 'dense_1.kernel': truncated" "$tmp/err.txt"

# usage errors -> 2
for args in "" "--format tflite $tmp/ckpt-300.mtc -o $tmp/y" "$tmp/ckpt-300.mtc"; do
    set +e
    # shellcheck disable=SC2086
    "$BIN/meshtrain" export $args 2>/dev/null; rc=$?
    set -e
    [ "$rc" = 2 ] || { echo "usage '$args': exit $rc"; exit 1; }
done
"$BIN/meshtrain" export --help | grep -q safetensors
echo "test_export: ok"
