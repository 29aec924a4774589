#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fetch-tabular.sh DEST_DIR — two small public tabular datasets as CSV files with a header, for
# the CSV source's string class labels and float (regression) targets.
#
# Debian's python3-sklearn ships them among its data files; we `apt-get download` the .deb into
# a temporary directory and extract only those files (nothing is installed, no Python runs):
#   * Iris (Fisher 1936; 150 flowers, 3 species): DEST_DIR/iris_{train,test}.csv with columns
#     sepal_length, sepal_width, petal_length, petal_width, species — species as its NAME
#     (setosa, versicolor, virginica), for "label_type": "string";
#   * Diabetes (Efron, Hastie, Johnstone, Tibshirani 2004, "Least Angle Regression"; 442
#     patients, raw unscaled values): DEST_DIR/diabetes_{train,test}.csv with columns age, sex,
#     bmi, bp, s1..s6, progression — progression (disease progression after one year, 25..346) is
#     the float target for "label_type": "float".
# Split: deterministic 80/20 — row i (0-based, file order) goes to test when i % 5 == 4 (iris:
# 120/30, 10 test rows per species; diabetes: 354/88).
# Idempotent: when the four files exist with the stamp of this version it does nothing; otherwise
# it writes temporary files and renames them into place. Tested by
# tests/integration/test_fetch_tabular.sh.
set -euo pipefail

dest=${1:?usage: fetch-tabular.sh DEST_DIR}
version=1.2.1+dfsg-1
stamp="$dest/.tabular-$version.stamp"
files=(iris_train.csv iris_test.csv diabetes_train.csv diabetes_test.csv)

have=1
for f in "${files[@]}"; do [[ -s $dest/$f ]] || have=0; done
if [[ $have = 1 && -f $stamp ]]; then
    echo "fetch-tabular: $dest already holds the tables (remove $stamp to refetch)"
    exit 0
fi
command -v apt-get >/dev/null || { echo "fetch-tabular: apt-get not found (Debian only)" >&2; exit 1; }

mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "python3-sklearn=$version" >/dev/null 2>&1) ||
    (cd "$tmp" && apt-get download python3-sklearn >/dev/null 2>&1) || {
    echo "fetch-tabular: apt-get download python3-sklearn failed (run apt-get update?)" >&2
    exit 1
}
dpkg-deb -x "$tmp"/python3-sklearn_*.deb "$tmp/x"
data="$tmp/x/usr/lib/python3/dist-packages/sklearn/datasets/data"
for f in iris.csv diabetes_data_raw.csv.gz diabetes_target.csv.gz; do
    [[ -s $data/$f ]] || { echo "fetch-tabular: $f missing from python3-sklearn" >&2; exit 1; }
done

# iris.csv: "150,4,setosa,versicolor,virginica" then rows "5.1,3.5,1.4,0.2,0"
awk -F, -v tr="$tmp/iris_train.csv" -v te="$tmp/iris_test.csv" '
    NR == 1 { for (k = 3; k <= NF; k++) name[k - 3] = $k
              h = "sepal_length,sepal_width,petal_length,petal_width,species"
              print h > tr; print h > te; next }
    NF == 5 { i = NR - 2; line = $1 "," $2 "," $3 "," $4 "," name[$5]
              if (i % 5 == 4) print line > te; else print line > tr }' "$data/iris.csv"
# diabetes: whitespace-separated features, one target per line
paste -d' ' <(gzip -dc "$data/diabetes_data_raw.csv.gz") <(gzip -dc "$data/diabetes_target.csv.gz") |
    awk -v tr="$tmp/diabetes_train.csv" -v te="$tmp/diabetes_test.csv" '
    BEGIN { h = "age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,progression"; print h > tr; print h > te }
    NF == 11 { i = NR - 1; line = $1
               for (k = 2; k <= 10; k++) line = line "," $k
               line = line "," sprintf("%g", $11)
               if (i % 5 == 4) print line > te; else print line > tr }'
for f in "${files[@]}"; do mv -f "$tmp/$f" "$dest/$f"; done
rm -f "$dest"/.tabular-*.stamp
touch "$stamp"
echo "fetch-tabular: iris $(($(wc -l <"$dest/iris_train.csv") - 1)) train / $(($(wc -l <"$dest/iris_test.csv") - 1)) test," \
    "diabetes $(($(wc -l <"$dest/diabetes_train.csv") - 1)) / $(($(wc -l <"$dest/diabetes_test.csv") - 1)) rows in $dest"
