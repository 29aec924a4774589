#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/coll.sh [BUILD_DIR] — allreduce latency and bus bandwidth of core/coll
# between 2 and 4 processes on loopback (the direct transport over tcp and ipc, and
# the nng transport over tcp for comparison), next to OpenMPI's
# MPI_Allreduce over TCP (btl tcp,self) measured in the same run, with ratios.
# busbw = algbw x 2(n-1)/n, algbw = bytes / time of one allreduce; each figure is
# the best of 3 timed trials on both sides (the machine is shared).
# Then COLL_ROUNDS (default 5) interleaved rounds at COLL_ROUND_SIZES (default 1 and
# 16 MiB) over tcp: the device thread driving its sockets (the default), the same build with
# MT_COLL_DRIVE=0 (reader threads), and OpenMPI, one after the other in each round, with each
# round's ratio to OpenMPI and the median per size (rounds: the machine is shared and noisy).
# Env: COLL_SIZES (bytes), COLL_PROCS, COLL_SEGMENTS (segment sizes to try at
# 16 MiB first; the best is used for the main table), COLL_SKIP_MPI=1, COLL_ROUNDS=0 (none).
set -u
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PEER=$BUILD/mt_coll_peer
SIZES=${COLL_SIZES:-"4096 65536 1048576 16777216 67108864"}
PROCS=${COLL_PROCS:-"2 4"}
SEGMENTS=${COLL_SEGMENTS:-"65536 262144 1048576"}
[ -x "$PEER" ] || { echo "coll.sh: $PEER not built (make build)"; exit 1; }
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
export OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d /tmp/mt_coll_bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# run_mt NAME NPROCS SCHEME SEGMENT SIZES-BYTES -> BENCH lines on stdout
run_mt() {
    local name=$1 np=$2 scheme=$3 seg=$4 sizes=$5 dir=$TMP/$1 floats="" b p
    mkdir -p "$dir"
    for b in $sizes; do floats="$floats${floats:+,}$((b / 4))"; done
    local pids=()
    for ((p = 0; p < np; p++)); do
        local url=tcp://127.0.0.1:0
        [ "$scheme" = ipc ] && url=ipc://$dir/p$p.ipc
        [ "$scheme" = nng ] && url=nng+tcp://127.0.0.1:0
        # shellcheck disable=SC2086
        env ${PEER_ENV:-} "$PEER" --alarm 300 --listen "$url" --addr-file "$dir/addr.$p" --table-file "$dir/table" \
            --mode bench --sizes "$floats" --segment "$seg" --deadline 60000 \
            >"$dir/out.$p" 2>"$dir/err.$p" &
        pids+=($!)
        PIDS+=($!)
    done
    local t_end=$(($(date +%s) + 15))
    for ((p = 0; p < np; p++)); do
        while [ ! -s "$dir/addr.$p" ]; do
            [ "$(date +%s)" -gt $t_end ] && { echo "coll.sh: $name: no address" >&2; return 1; }
            sleep 0.02
        done
    done
    for ((p = 0; p < np; p++)); do echo "$p $(cat "$dir/addr.$p") 0"; done >"$dir/table.tmp"
    mv "$dir/table.tmp" "$dir/table"
    for p in "${pids[@]}"; do wait "$p" || echo "coll.sh: $name: a peer failed: $(cat "$dir"/out.* | grep ERROR | head -1)" >&2; done
    cat "$dir/out.0" | grep '^BENCH'
}

field() { # LINE KEY
    echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

MPI_OK=0
if [ "${COLL_SKIP_MPI:-0}" != 1 ]; then
    if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
        echo "coll.sh: installing openmpi-bin libopenmpi-dev for the baseline"
        DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin libopenmpi-dev >/dev/null 2>&1 ||
            echo "coll.sh: could not install OpenMPI; baseline skipped"
    fi
    if command -v mpicc >/dev/null; then
        mkdir -p "$BUILD/bench_mpi"
        mpicc -O2 -o "$BUILD/bench_mpi/mpi_allreduce" "$SRC/bench/mpi_allreduce.c" && MPI_OK=1
    fi
fi
run_mpi() { # NPROCS SIZES
    OMPI_MCA_plm_rsh_agent= mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo -np "$1" \
        "$BUILD/bench_mpi/mpi_allreduce" $2 2>"$TMP/mpi.err" | grep '^BENCH'
}

echo "== core/coll allreduce on loopback ($(nproc) cores; $(date -u +%FT%TZ))"
# segment size: measure, keep the best bus bandwidth at 16 MiB between 2 processes over tcp
best_seg=262144 best_bw=0
for seg in $SEGMENTS; do
    line=$(run_mt "seg$seg" 2 tcp "$seg" 16777216)
    bw=$(field "$line" busbw_GBps)
    echo "segment $seg B: 16 MiB busbw ${bw:-?} GB/s"
    if [ -n "$bw" ] && [ "$(echo "$bw > $best_bw" | bc)" = 1 ]; then best_seg=$seg best_bw=$bw; fi
done
echo "using segment $best_seg B"
printf '%-6s %10s | %10s %9s | %10s %9s | %10s %9s | %10s %9s | %8s %8s\n' procs bytes \
    "tcp lat_us" "busbw" "ipc lat_us" "busbw" "nng lat_us" "busbw" "mpi lat_us" "busbw" \
    "bw tcp/mpi" "lat mpi/tcp"
for np in $PROCS; do
    run_mt "tcp$np" "$np" tcp "$best_seg" "$SIZES" >"$TMP/tcp$np.txt"
    run_mt "ipc$np" "$np" ipc "$best_seg" "$SIZES" >"$TMP/ipc$np.txt"
    run_mt "nng$np" "$np" nng "$best_seg" "$SIZES" >"$TMP/nng$np.txt"
    : >"$TMP/mpi$np.txt"
    [ $MPI_OK = 1 ] && run_mpi "$np" "$SIZES" >"$TMP/mpi$np.txt"
    for b in $SIZES; do
        t=$(grep "bytes=$b " "$TMP/tcp$np.txt")
        i=$(grep "bytes=$b " "$TMP/ipc$np.txt")
        g=$(grep "bytes=$b " "$TMP/nng$np.txt")
        m=$(grep "bytes=$b " "$TMP/mpi$np.txt")
        tl=$(field "$t" lat_us) tb=$(field "$t" busbw_GBps)
        il=$(field "$i" lat_us) ib=$(field "$i" busbw_GBps)
        gl=$(field "$g" lat_us) gb=$(field "$g" busbw_GBps)
        ml=$(field "$m" lat_us) mb=$(field "$m" busbw_GBps)
        rb=- rl=-
        nonzero() { [ -n "$1" ] && [ "$(echo "$1 > 0" | bc)" = 1 ]; }
        nonzero "$tb" && nonzero "$mb" && rb=$(echo "scale=2; $tb / $mb" | bc)
        nonzero "$tl" && nonzero "$ml" && rl=$(echo "scale=2; $ml / $tl" | bc)
        printf '%-6s %10s | %10s %9s | %10s %9s | %10s %9s | %10s %9s | %8s %8s\n' "$np" "$b" \
            "${tl:--}" "${tb:--}" "${il:--}" "${ib:--}" "${gl:--}" "${gb:--}" "${ml:--}" "${mb:--}" \
            "$rb" "$rl"
    done
done
echo "(busbw in GB/s; 'bw tcp/mpi' >= 1.0 and 4 KiB tcp latency <= 100 us between 2 processes are the targets)"

ROUNDS=${COLL_ROUNDS:-5}
ROUND_SIZES=${COLL_ROUND_SIZES:-"1048576 16777216"}
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
if [ "$ROUNDS" -gt 0 ] && [ $MPI_OK = 1 ]; then
    echo "== $ROUNDS interleaved rounds over tcp: driven, MT_COLL_DRIVE=0, OpenMPI ($(date -u +%TZ))"
    printf '%-6s %5s %10s | %12s %12s %12s | %9s %9s\n' procs round bytes "driven us" \
        "reader us" "mpi us" "drv/mpi" "rdr/mpi"
    : >"$TMP/ratios"
    for np in $PROCS; do
        for ((r = 1; r <= ROUNDS; r++)); do
            run_mt "rd$np.$r" "$np" tcp "$best_seg" "$ROUND_SIZES" >"$TMP/rd.txt"
            PEER_ENV=MT_COLL_DRIVE=0 run_mt "rr$np.$r" "$np" tcp "$best_seg" "$ROUND_SIZES" \
                >"$TMP/rr.txt"
            run_mpi "$np" "$ROUND_SIZES" >"$TMP/rm.txt"
            for b in $ROUND_SIZES; do
                dl=$(field "$(grep "bytes=$b " "$TMP/rd.txt")" lat_us)
                rl=$(field "$(grep "bytes=$b " "$TMP/rr.txt")" lat_us)
                ml=$(field "$(grep "bytes=$b " "$TMP/rm.txt")" lat_us)
                qd=- qr=-
                [ -n "$dl" ] && [ -n "$ml" ] && qd=$(echo "scale=2; $ml / $dl" | bc)
                [ -n "$rl" ] && [ -n "$ml" ] && qr=$(echo "scale=2; $ml / $rl" | bc)
                printf '%-6s %5s %10s | %12s %12s %12s | %9s %9s\n' "$np" "$r" "$b" "${dl:--}" \
                    "${rl:--}" "${ml:--}" "$qd" "$qr"
                echo "$np $b $qd $qr" >>"$TMP/ratios"
            done
        done
    done
    for np in $PROCS; do
        for b in $ROUND_SIZES; do
            md=$(awk -v n="$np" -v b="$b" '$1 == n && $2 == b && $3 != "-" {print $3}' "$TMP/ratios" | median)
            mr=$(awk -v n="$np" -v b="$b" '$1 == n && $2 == b && $4 != "-" {print $4}' "$TMP/ratios" | median)
            echo "median busbw ratio to OpenMPI, $np processes, $b B: driven ${md:--}x, reader threads ${mr:--}x"
        done
    done
fi
