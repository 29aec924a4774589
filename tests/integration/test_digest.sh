#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_digest.sh — the digests of issue #18 end to end (docs/reproducibility.md):
# * `train --local --json` prints state digests (digest_every, epoch ends, checkpoints) on a
#   sharded mesh (batch=2,model=2) and on one device, and each equals the state root of the
#   checkpoint of that step (`meshtrain digest`): the sharded digest is the logical one;
# * `diverge`: a rerun and a run resumed from a checkpoint equal the original at every step; a
#   run perturbed after step 4 (another learning rate) diverges first at step 6; the two meshes
#   diverge (fixed_mesh rounding); a job id asks the coordinator (none here: UNAVAILABLE; jobs:
#   test_job_digests.sh);
# * a checkpoint and its safetensors export print the same weights root, which the Python of
#   docs/reproducibility.md recomputes from the export; a version 1 checkpoint is recomputed;
# * one bit flipped in a checkpoint's tensor data with every crc32 made consistent: the restore
#   refuses with DATA_LOSS naming the tensor, and so does `meshtrain digest`.
source "$(dirname "$0")/lib.sh"
export OPENBLAS_NUM_THREADS=1
mt() { "$BIN/meshtrain" "$@"; } # no coordinator: local training, export and digests

# spec NAME LR: the tutorial MLP on synthetic data (8 steps per epoch), model parallel
spec() {
    cat >"$T/$1.json" <<JSON
{
  "seed": 5, "batch_size": 32, "epochs": 2, "optimizer": "adam", "learning_rate": $2,
  "digest_every": 2,
  "dataset": {"format": "synthetic", "examples": 256, "test_examples": 64, "features": 120},
  "mesh": {"batch": 2, "model": 2}, "input_layout": ["batch", "unsharded"],
  "layouts": {"dense_1\\\\.kernel": ["unsharded", "model"], "dense_2\\\\.kernel": ["model", "unsharded"]},
  "checkpoint": {"every_steps": 4, "keep": 10},
  "model": {"input_shape": [120], "layers": [
    {"type": "dense", "units": 48, "activation": "relu"},
    {"type": "batch_norm"},
    {"type": "dense", "units": 2, "activation": "softmax"}]}
}
JSON
}
spec base 0.01
spec other 0.02
digest_at() { # digest_at STEP FILE: the digest of that step (its own line or its epoch line)
    jq -r --argjson s "$1" 'select(.step == $s and .digest != null) | .digest' "$2"
}
root_of() { # root_of weights|state FILE: a line of `meshtrain digest`
    mt digest "$2" | sed -n "s/^$1 *\([0-9a-f]*\) .*/\1/p"
}

# digests on the sharded mesh and on one device, equal to their checkpoints' state roots
mt train --local "$T/base.json" --steps 12 --save "$T/a" --json >"$T/a.out"
mt train --local "$T/base.json" --mesh batch=1,model=1 --steps 12 --save "$T/one" --json >"$T/one.out"
steps=$(jq -r 'select(.step != null and .digest != null) | .step' "$T/a.out" | tr '\n' ' ')
[ "$steps" = "2 4 6 8 10 12 " ] || fail "digest steps: '$steps' in $(cat "$T/a.out")"
# epoch ends in the epoch lines (8, and 12: the last), the others on lines of their own
[ "$(jq -c 'select(.epoch != null) | [.step, (.digest | length)]' "$T/a.out" | tr '\n' ' ')" = "[8,64] [12,64] " ] ||
    fail "epoch lines: $(cat "$T/a.out")"
[ "$(jq -r 'select(.final) | .digest' "$T/a.out")" = "$(digest_at 12 "$T/a.out")" ] ||
    fail "final line digest: $(cat "$T/a.out")"
for run in a one; do
    for s in 4 8 12; do
        [ "$(root_of state "$T/$run/ckpt-$s.mtc")" = "$(digest_at $s "$T/$run.out")" ] ||
            fail "$run: step $s digest $(digest_at $s "$T/$run.out") is not its checkpoint's $(mt digest "$T/$run/ckpt-$s.mtc")"
    done
done
log "state digests on batch=2,model=2 and on one device equal their checkpoints' roots"

# diverge: a rerun and a resumed run equal the original; a perturbed run diverges at step 6
mt train --local "$T/base.json" --steps 12 --json >"$T/rerun.out"
mt diverge "$T/a.out" "$T/rerun.out" >"$T/d1" || fail "rerun diverges: $(cat "$T/d1")"
grep -q "^no divergence: the digests of all 6 common steps (2..12) are equal$" "$T/d1" ||
    fail "rerun: $(cat "$T/d1")"
{
    mt train --local "$T/base.json" --steps 4 --save "$T/r" --json
    mt train --local "$T/base.json" --resume "$T/r/ckpt-4.mtc" --steps 12 --json
} >"$T/resumed.out"
mt diverge "$T/a.out" "$T/resumed.out" >"$T/d2" || fail "resumed run diverges: $(cat "$T/d2")"
{
    mt train --local "$T/base.json" --steps 4 --save "$T/p" --json
    mt train --local "$T/other.json" --resume "$T/p/ckpt-4.mtc" --steps 12 --json
} >"$T/perturbed.out"
rc=0
mt diverge "$T/a.out" "$T/perturbed.out" >"$T/d3" || rc=$?
[ "$rc" = 1 ] || fail "perturbed: exit $rc: $(cat "$T/d3")"
grep -q "^first divergence at step 6 (2 common steps equal before it)$" "$T/d3" ||
    fail "perturbed: $(cat "$T/d3")"
rc=0
mt diverge "$T/a.out" "$T/one.out" >"$T/d4" || rc=$?
[ "$rc" = 1 ] && grep -q "^first divergence at step 2 " "$T/d4" ||
    fail "two meshes (fixed_mesh rounding): exit $rc: $(cat "$T/d4")"
rc=0
mt --coordinator tcp://127.0.0.1:1 diverge job-000003 "$T/a.out" >"$T/d5" 2>&1 || rc=$?
[ "$rc" = 3 ] && grep -q "UNAVAILABLE" "$T/d5" || fail "job id, no coordinator: exit $rc: $(cat "$T/d5")"
log "diverge: rerun and resume equal, perturbed run first differs at step 6, meshes at step 2"

# a checkpoint and its export: one weights root, recomputed by the documented Python
mt export "$T/a/ckpt-12.mtc" --format safetensors -o "$T/a.safetensors" >/dev/null
w_ck=$(root_of weights "$T/a/ckpt-12.mtc")
w_st=$(root_of weights "$T/a.safetensors")
[ -n "$w_ck" ] && [ "$w_ck" = "$w_st" ] || fail "checkpoint weights $w_ck, export $w_st"
mt digest "$T/a.safetensors" | grep -q "matches the recorded root" || fail "export records no root"
sed -n '/<!-- digest-python: begin -->/,/<!-- digest-python: end -->/p' "$SRC/docs/reproducibility.md" |
    sed '1,2d;$d' | sed '$d' >"$T/mtdigest.py"
py=$(cd "$T" && python3 -c "import mtdigest, sys; print(mtdigest.safetensors_root(sys.argv[1]))" "$T/a.safetensors")
[ "$py" = "$w_st" ] || fail "docs' Python gives $py, meshtrain $w_st"
meta=$(python3 -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(json.loads(f.read(n))['__metadata__']['mt_digest'])" "$T/a.safetensors")
[ "$meta" = "$w_st" ] || fail "__metadata__ mt_digest $meta, data $w_st"
mt digest "$SRC/tests/fixtures/ckpt-compat/ckpt-6-ac32123.mtc" >"$T/v1" ||
    fail "version 1 checkpoint: $(cat "$T/v1")"
grep -q "^state   [0-9a-f]\{64\} " "$T/v1" || fail "version 1 checkpoint: $(cat "$T/v1")"
# a damaged export: the recorded root no longer matches; not a safetensors file: exit 4
python3 - "$T/a.safetensors" "$T/bad.safetensors" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-3] ^= 0x01
open(sys.argv[2], "wb").write(b)
PY
rc=0
mt digest "$T/bad.safetensors" >"$T/bad.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "DATA_LOSS: $T/bad.safetensors: the data's Merkle root [0-9a-f]* differs from the recorded $w_st" "$T/bad.out" ||
    fail "damaged export: exit $rc: $(cat "$T/bad.out")"
echo "not a model" >"$T/text.txt"
rc=0
mt digest "$T/text.txt" >"$T/text.out" 2>&1 || rc=$?
[ "$rc" = 4 ] && grep -q "INVALID_ARGUMENT: $T/text.txt: not a safetensors file" "$T/text.out" ||
    fail "text file: exit $rc: $(cat "$T/text.out")"
rc=0
mt digest "$T/none.safetensors" >"$T/none.out" 2>&1 || rc=$?
[ "$rc" = 4 ] && grep -q "NOT_FOUND" "$T/none.out" || fail "missing file: exit $rc: $(cat "$T/none.out")"
log "checkpoint and export share the weights root $w_ck; the documented Python agrees"

# one bit flipped in dense_1.kernel's data, every crc32 made consistent (docs/checkpoints.md)
cp "$T/a/ckpt-8.mtc" "$T/flip.mtc"
python3 - "$T/flip.mtc" dense_1.kernel <<'PY'
import struct, sys, zlib
path, want = sys.argv[1], sys.argv[2].encode()
b = bytearray(open(path, "rb").read())
hlen = struct.unpack_from("<I", b, 12)[0]
p = 24 + 32
nt, slen = struct.unpack_from("<II", b, p)
p += 8 + slen
data_start = (24 + hlen + 63) // 64 * 64
for _ in range(nt):
    nl = struct.unpack_from("<H", b, p)[0]
    name = bytes(b[p + 2:p + 2 + nl]); p += 2 + nl
    rank = b[p + 1]; p += 2 + 8 * rank
    off, nbytes = struct.unpack_from("<QQ", b, p)
    if name == want:
        at = data_start + off + nbytes // 2
        b[at] ^= 0x04
        struct.pack_into("<I", b, p + 16, zlib.crc32(bytes(b[data_start + off:data_start + off + nbytes])))
    p += 20 + 32
struct.pack_into("<I", b, 16, zlib.crc32(bytes(b[24:24 + hlen])))
struct.pack_into("<I", b, 20, zlib.crc32(bytes(b[0:20])))
open(path, "wb").write(b)
PY
for mesh in batch=2,model=2 batch=1,model=1; do
    rc=0
    mt train --local "$T/base.json" --mesh "$mesh" --resume "$T/flip.mtc" --steps 12 >"$T/flip.out" 2>&1 || rc=$?
    [ "$rc" != 0 ] || fail "restore of a flipped checkpoint on $mesh succeeded"
    grep -q "DATA_LOSS: checkpoint $T/flip.mtc: tensor 'dense_1.kernel': the Merkle digest of what the devices loaded" "$T/flip.out" ||
        fail "flipped restore on $mesh: $(cat "$T/flip.out")"
done
rc=0
mt digest "$T/flip.mtc" >"$T/flip.dg" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "DATA_LOSS: checkpoint $T/flip.mtc: tensor 'dense_1.kernel': Merkle digest of the data" "$T/flip.dg" ||
    fail "digest of the flipped checkpoint: exit $rc: $(cat "$T/flip.dg")"
log "a flipped bit with consistent crc32s: restore and digest refuse with DATA_LOSS naming dense_1.kernel"
