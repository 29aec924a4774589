#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_generate.sh — `meshtrain generate` end to end on a hand-made language model: a dense
# layer over block_size 4 char ids whose logits are l_j = 2j·x_3 + 2j − j² (the argmax is
# x_3 + 1, capped at the last id), written as safetensors by python. It checks
#  * greedy decoding (temperature 0, and top-k 1) continues "abc" with "defgh" then repeats the
#    last id: the prompt is encoded with the tokenizer refitted on the spec's training file (a
#    note says so), the model's last row is read, the text decoded;
#  * the export's "meshtrain.tokenizer" metadata wins over the refit (a vocabulary whose id 8 is
#    'z' instead of 'h');
#  * sampling is repeatable for a seed and changes with it;
#  * a causal-attention model trained with `train --local` on a tokens dataset (the pattern
#    "abcdefg" repeated) and exported carries its vocabulary (checkpoint tensor
#    meta/meshtrain.tokenizer -> export metadata), so generate needs no training file, and
#    continues the pattern greedily, beyond block_size;
#  * bad input exits 4 (a spec without a tokens dataset, a model of another output size, a
#    prompt of no tokens), 1 (DATA_LOSS: a corrupt vocabulary in the metadata) or 2 (usage),
#    with a message naming the cause.
source "$(dirname "$0")/lib.sh"
MT="$BIN/meshtrain"

printf 'abcdefghabcdefghabcdefgh\n' >"$T/train.txt" # ids: '\n' 1, a..h 2..9 (byte order)
spec() { # NAME UNITS
    cat >"$T/$1.json" <<JSON
{"name": "gen", "seed": 1, "batch_size": 4, "epochs": 1, "optimizer": "sgd",
 "learning_rate": 0.1,
 "dataset": {"format": "tokens", "train": "train.txt", "block_size": 4},
 "model": {"input_shape": [4], "layers": [{"type": "dense", "units": $2}]}}
JSON
}
spec lm 10
spec wide 12

# write NAME UNITS [VOCAB_CHARS]: the model above as safetensors, with a vocabulary in the
# metadata when VOCAB_CHARS is given
write() {
    python3 - "$T/$1.safetensors" "$2" "${3:-}" <<'PY'
import json, struct, sys, zlib
path, units, chars = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kernel = [[0.0] * units for _ in range(4)]
kernel[3] = [2.0 * j for j in range(units)]
bias = [2.0 * j - j * j for j in range(units)]
data = b"".join(struct.pack("<%df" % units, *row) for row in kernel) + struct.pack("<%df" % units, *bias)
meta = {"format": "pt"}
if chars:
    body = "meshtrain-vocab 1\ntype char\nvocab_size %d\nentries %d\n" % (len(chars) + 1, len(chars))
    body += "".join("%02x\n" % ord(c) for c in sorted(chars))
    meta["meshtrain.tokenizer"] = body + "crc32 %08x\n" % zlib.crc32(body.encode())
header = {"__metadata__": meta,
          "dense_1.kernel": {"dtype": "F32", "shape": [4, units], "data_offsets": [0, 16 * units]},
          "dense_1.bias": {"dtype": "F32", "shape": [units], "data_offsets": [16 * units, 20 * units]}}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
write lm 10
write lm_meta 10 $'\nabcdefgz'
write wide 12

run() { # ARGS...: generate into $T/out.txt / $T/err.txt; fails on a non-zero exit
    "$MT" generate "$@" >"$T/out.txt" 2>"$T/err.txt" || fail "generate $*: $(cat "$T/err.txt")"
}
expect_exit() { # CODE PATTERN ARGS...
    local want=$1 pat=$2 rc=0
    shift 2
    "$MT" generate "$@" >"$T/out.txt" 2>"$T/err.txt" || rc=$?
    [ "$rc" = "$want" ] || fail "generate $*: exit $rc, want $want: $(cat "$T/err.txt")"
    grep -q -- "$pat" "$T/err.txt" || fail "generate $*: no '$pat' in: $(cat "$T/err.txt")"
}

log "greedy decoding with the refitted tokenizer"
run "$T/lm.safetensors" --spec "$T/lm.json" --prompt abc --tokens 8 --temperature 0
[ "$(cat "$T/out.txt")" = "abcdefghhhh" ] || fail "greedy: '$(cat "$T/out.txt")', want abcdefghhhh"
grep -q "refitting the char tokenizer" "$T/err.txt" || fail "no refit note: $(cat "$T/err.txt")"
run "$T/lm.safetensors" --spec "$T/lm.json" --prompt abc --tokens 8 --top-k 1 --seed 5
[ "$(cat "$T/out.txt")" = "abcdefghhhh" ] || fail "top-k 1: '$(cat "$T/out.txt")'"

log "the export's vocabulary wins over the refit"
run "$T/lm_meta.safetensors" --spec "$T/lm.json" --prompt abc --tokens 6 --temperature 0
[ "$(cat "$T/out.txt")" = "abcdefgzz" ] || fail "metadata vocabulary: '$(cat "$T/out.txt")'"
[ ! -s "$T/err.txt" ] || fail "a note although the export has a vocabulary: $(cat "$T/err.txt")"

log "sampling: a seed repeats its text, another seed changes it"
run "$T/lm.safetensors" --spec "$T/lm.json" --prompt abc --tokens 40 --temperature 3 --seed 7
cp "$T/out.txt" "$T/seed7.txt"
run "$T/lm.safetensors" --spec "$T/lm.json" --prompt abc --tokens 40 --temperature 3 --seed 7
cmp -s "$T/out.txt" "$T/seed7.txt" || fail "seed 7 twice: '$(cat "$T/seed7.txt")' vs '$(cat "$T/out.txt")'"
run "$T/lm.safetensors" --spec "$T/lm.json" --prompt abc --tokens 40 --temperature 3 --seed 8
! cmp -s "$T/out.txt" "$T/seed7.txt" || fail "seeds 7 and 8 gave the same text"
[ "$(wc -c <"$T/seed7.txt")" -ge 44 ] || fail "sampled text too short: '$(cat "$T/seed7.txt")'"

log "bad input"
printf '0\thello\n' >"$T/train.tsv"
cat >"$T/notlm.json" <<'JSON'
{"name": "cls", "dataset": {"format": "text", "train": "train.tsv"},
 "model": {"input_shape": [4], "layers": [{"type": "dense", "units": 10}]}}
JSON
expect_exit 4 "generate needs a language model" "$T/lm.safetensors" --spec "$T/notlm.json" \
    --prompt abc --tokens 3
expect_exit 4 "the model outputs 1×12 logits per example; generate needs 4×10 (block_size × vocabulary) or 1×10" \
    "$T/wide.safetensors" --spec "$T/wide.json" --prompt abc --tokens 3
expect_exit 4 "the text has no tokens" "$T/lm.safetensors" --spec "$T/lm.json" --prompt "" \
    --tokens 3
expect_exit 4 "no F32 tensor 'dense_1.kernel'" "$T/wide.safetensors" --spec "$T/lm.json" \
    --prompt abc --tokens 3
python3 - "$T/lm_meta.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
i = b.find(b"crc32 ") + 6
b[i:i + 8] = b"00000000"
open(p, "wb").write(bytes(b))
PY
expect_exit 1 "DATA_LOSS: vocab .*lm_meta.safetensors (metadata meshtrain.tokenizer): crc32 mismatch" \
    "$T/lm_meta.safetensors" --spec "$T/lm.json" --prompt abc --tokens 3
expect_exit 2 "--spec, --prompt and --tokens are required" "$T/lm.safetensors" --spec "$T/lm.json"
expect_exit 2 "--temperature '-1'" "$T/lm.safetensors" --spec "$T/lm.json" --prompt a --tokens 1 \
    --temperature -1
log "end to end: train a causal-attention model on a tokens dataset, export, generate"
mkdir -p "$T/lm2"
python3 -c "open('$T/lm2/train.txt', 'w').write('abcdefg' * 700)" # period 7, block 8: every phase
cat >"$T/lm2/lm.json" <<'JSON'
{"name": "pattern-lm", "seed": 3, "batch_size": 16, "epochs": 3, "optimizer": "adam",
 "learning_rate": 0.01,
 "dataset": {"format": "tokens", "train": "train.txt", "block_size": 8, "shuffle_buffer": 64},
 "model": {"layers": [
   {"type": "embedding", "input_dim": 8, "output_dim": 16},
   {"type": "position_embedding"},
   {"type": "dense", "units": 192},
   {"type": "attention", "num_heads": 2, "causal": true},
   {"type": "dense", "units": 8}]}}
JSON
"$MT" train --local "$T/lm2/lm.json" --data-root "$T" --save "$T/lm2/ck" >"$T/lm2.log" 2>&1 ||
    fail "train: $(tail -5 "$T/lm2.log")"
"$MT" export "$(ls "$T"/lm2/ck/ckpt-*.mtc | sort -V | tail -1)" -o "$T/lm2.safetensors" \
    >/dev/null 2>"$T/export.err" || fail "export: $(cat "$T/export.err")"
# the vocabulary travelled: checkpoint tensor meta/meshtrain.tokenizer -> export metadata
python3 - "$T/lm2.safetensors" <<'PY' || fail "the export carries no meshtrain.tokenizer"
import json, struct, sys
f = open(sys.argv[1], "rb")
meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
assert meta["meshtrain.tokenizer"].startswith("meshtrain-vocab 1\ntype char\nvocab_size 8\n"), meta
PY
rm "$T/lm2/train.txt" # generate needs no training data now
run "$T/lm2.safetensors" --spec "$T/lm2/lm.json" --prompt cde --tokens 30 --temperature 0
[ "$(cat "$T/out.txt")" = "cdefgabcdefgabcdefgabcdefgabcdefg" ] ||
    fail "the trained model does not continue its corpus: '$(cat "$T/out.txt")'"
[ ! -s "$T/err.txt" ] || fail "generate refitted although the export has the vocabulary: $(cat "$T/err.txt")"
echo "PASS: generate (greedy, metadata vocabulary, seeded sampling, errors, trained end to end)"
