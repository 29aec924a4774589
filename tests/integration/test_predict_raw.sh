#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_predict_raw.sh — `meshtrain predict` on raw input (issue #22 item 6), end to end: small
# models are trained with `train --local --save`, exported, and asked about
#  * a CSV row with named columns in another order than training (plus an extra column), on a
#    model trained with string class labels: the class prints as its name;
#  * PNG files (JPEG decoding is unit-tested in test_data_image.c), on a model with input
#    [4, 4, 1] trained from CSV pixels: decoded, resized (8×8 files) and scaled as the model
#    expects;
#  * sentences (--text) for a TF-IDF model: the vocabulary is refitted from the spec's training
#    files (the export carries none), with a note on stderr;
# and bad raw input (a truncated PNG, a CSV without the feature columns, --text on an image
# model) exits 4 with a message naming the file or the cause.
source "$(dirname "$0")/lib.sh"
MT="$BIN/meshtrain"

train_export() { # NAME: train $T/NAME.json, export $T/NAME.safetensors
    "$MT" train --local "$T/$1.json" --data-root "$T" --save "$T/$1" >"$T/$1.log" 2>&1 ||
        fail "train $1: $(tail -5 "$T/$1.log")"
    ck=$(ls "$T/$1"/ckpt-*.mtc | sort -V | tail -1)
    "$MT" export "$ck" -o "$T/$1.safetensors" >/dev/null 2>"$T/$1.export.err" ||
        fail "export $1: $(cat "$T/$1.export.err")"
}

expect_exit() { # CODE PATTERN CMD...: CMD exits CODE with PATTERN on stderr
    local want=$1 pat=$2 rc=0
    shift 2
    "$@" >"$T/out.txt" 2>"$T/err.txt" || rc=$?
    [ "$rc" = "$want" ] || fail "$*: exit $rc, want $want: $(cat "$T/err.txt")"
    grep -q -- "$pat" "$T/err.txt" || fail "$*: no '$pat' in: $(cat "$T/err.txt")"
}

# -- CSV with string labels ---------------------------------------------------------------------
python3 - "$T" <<'EOF'
import random, sys
random.seed(3)
t = sys.argv[1]
centres = {"setosa": (0.0, 0.0), "versicolor": (4.0, 0.0), "virginica": (0.0, 4.0)}
with open(t + "/iris.csv", "w") as f:
    f.write("x1,x2,species\n")
    for i in range(300):
        name = sorted(centres)[i % 3]
        cx, cy = centres[name]
        f.write("%.3f,%.3f,%s\n" % (cx + random.gauss(0, 0.4), cy + random.gauss(0, 0.4), name))
EOF
cat >"$T/iris.json" <<'EOF'
{"name": "iris-names", "seed": 1, "batch_size": 30, "epochs": 30, "optimizer": "adam",
 "learning_rate": 0.05,
 "dataset": {"format": "csv", "train": "iris.csv", "label_column": "species",
             "label_type": "string", "feature_columns": ["x1", "x2"]},
 "model": {"input_shape": [2], "layers": [
   {"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 3}]}}
EOF
train_export iris
printf 'extra,x2,x1\n9,0.1,4.2\n9,4.1,-0.2\n9,0,0.1\n' >"$T/rows.csv"
"$MT" predict "$T/iris.safetensors" --spec "$T/iris.json" --input "$T/rows.csv" >"$T/iris.out" 2>&1 ||
    fail "predict rows: $(cat "$T/iris.out")"
[ "$(cut -d' ' -f2 "$T/iris.out" | tr '\n' ' ')" = "versicolor virginica setosa " ] ||
    fail "predict rows: $(cat "$T/iris.out")"
"$MT" predict "$T/iris.safetensors" --spec "$T/iris.json" --input "$T/rows.csv" --json --top-k 1 \
    >"$T/iris.json.out" || fail "predict --json"
head -1 "$T/iris.json.out" | grep -q '"name": "versicolor"' || fail "json: $(cat "$T/iris.json.out")"
printf 'x1,petal\n1,2\n' >"$T/bad.csv"
expect_exit 4 "no column 'x2' in .*bad.csv" \
    "$MT" predict "$T/iris.safetensors" --spec "$T/iris.json" --input "$T/bad.csv"
log "CSV row with named columns: classes by name"

# -- images -------------------------------------------------------------------------------------
# class 0: bright top half, class 1: bright bottom half (4×4 pixels as CSV, scaled to [0, 1])
python3 - "$T" <<'EOF'
import random, struct, sys, zlib
random.seed(5)
t = sys.argv[1]
with open(t + "/px.csv", "w") as f:
    f.write(",".join("p%d" % i for i in range(16)) + ",label\n")
    for i in range(200):
        c = i % 2
        px = [(200 if (r < 2) == (c == 0) else 30) + random.randint(-20, 20) for r in range(4) for _ in range(4)]
        f.write(",".join(map(str, px)) + ",%d\n" % c)
def png(path, rows):
    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xffffffff)
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", len(rows[0]), len(rows), 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    open(path, "wb").write(data)
png(t + "/top.png", [[210] * 8] * 4 + [[20] * 8] * 4)        # 8×8: resized to 4×4
png(t + "/bottom.png", [[20] * 8] * 4 + [[210] * 8] * 4)
EOF
cat >"$T/img.json" <<'EOF'
{"name": "halves", "seed": 2, "batch_size": 20, "epochs": 20, "optimizer": "adam",
 "learning_rate": 0.02,
 "dataset": {"format": "csv", "train": "px.csv", "scale": 0.00392156862745098, "shape": [4, 4]},
 "model": {"input_shape": [4, 4, 1], "layers": [
   {"type": "flatten"}, {"type": "dense", "units": 2}]}}
EOF
train_export img
for f in top:0 bottom:1; do
    "$MT" predict "$T/img.safetensors" --spec "$T/img.json" --input "$T/${f%:*}.png" >"$T/p.out" 2>&1 ||
        fail "predict ${f%:*}.png: $(cat "$T/p.out")"
    [ "$(cut -d' ' -f2 "$T/p.out")" = "${f#*:}" ] || fail "${f%:*}.png: $(cat "$T/p.out")"
done
head -c 60 "$T/top.png" >"$T/cut.png"
expect_exit 4 "cut.png: corrupt PNG" \
    "$MT" predict "$T/img.safetensors" --spec "$T/img.json" --input "$T/cut.png"
expect_exit 4 "needs a text model" \
    "$MT" predict "$T/img.safetensors" --spec "$T/img.json" --text "hello"
log "PNG input: decoded, resized and classified"

# -- text ---------------------------------------------------------------------------------------
python3 - "$T" <<'EOF'
import random, sys
random.seed(7)
good = "good great fine lovely superb nice".split()
bad = "bad awful poor terrible dreadful nasty".split()
filler = "the a movie food it was and very really".split()
with open(sys.argv[1] + "/text.tsv", "w") as f:
    for i in range(300):
        c = i % 2
        words = random.sample(good if c else bad, 2) + random.sample(filler, 3)
        random.shuffle(words)
        f.write("%d\t%s\n" % (c, " ".join(words)))
EOF
cat >"$T/text.json" <<'EOF'
{"name": "words", "seed": 3, "batch_size": 30, "epochs": 20, "optimizer": "adam",
 "learning_rate": 0.02,
 "dataset": {"format": "text", "train": "text.tsv", "max_tokens": 32},
 "model": {"input_shape": [22], "layers": [{"type": "dense", "units": 2}]}}
EOF
train_export text
"$MT" predict "$T/text.safetensors" --spec "$T/text.json" --text "a lovely and superb movie" \
    --text "it was awful, really terrible" >"$T/t.out" 2>"$T/t.err" ||
    fail "predict --text: $(cat "$T/t.out" "$T/t.err")"
[ "$(cut -d' ' -f2 "$T/t.out" | tr '\n' ' ')" = "1 0 " ] || fail "--text: $(cat "$T/t.out")"
grep -q "refitting it on the spec's training files" "$T/t.err" || fail "no refit note: $(cat "$T/t.err")"
log "--text: sentences classified with the training vocabulary"
log "PASS"
