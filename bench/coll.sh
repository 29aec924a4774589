#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/coll.sh [BUILD_DIR] — allreduce latency and bus bandwidth of core/coll between 2 and 4
# processes of this host, in one run, with the load average beside each table:
#   shm  tcp:// addresses; the processes find they share the host and move to shared memory
#   tcp  the same with --shm off: the direct socket transport (driven)
#   ipc  --shm off over Unix sockets; nng: the nng transport over tcp
# next to OpenMPI's MPI_Allreduce over its shared-memory path (--mca btl vader,self) and over
# TCP (btl tcp,self), with ratios. busbw = algbw x 2(n-1)/n, algbw = bytes / time of one
# allreduce; each figure is the best of 3 timed trials on both sides (the machine is shared).
# Then COLL_ROUNDS (default 5) interleaved rounds at COLL_ROUND_SIZES (default 4 KiB, 1 and
# 16 MiB): shm, tcp, MPI shm, MPI tcp one after the other in each round, each round's ratios and
# the medians. COLL_BASE=DIR adds DIR/mt_coll_peer (a build of the tree before a change) over
# shm and over tcp to each round and prints the same-run A/B speed ratios shm(new)/shm(base) and
# tcp(new)/tcp(base) (>= 0.97 wanted).
# Env: COLL_SIZES (bytes), COLL_PROCS, COLL_SEGMENTS (segment sizes tried at 16 MiB over tcp
# first; the best is used), COLL_SKIP_MPI=1, COLL_ROUNDS=0 (none), COLL_ROUND_SIZES, COLL_BASE,
# COLL_SKIP_MPI_BACKEND=1 (no table of the MPI backend beside OpenMPI's own).
set -u
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PEER=$BUILD/mt_coll_peer
SIZES=${COLL_SIZES:-"4096 1048576 16777216"}
PROCS=${COLL_PROCS:-"2 4"}
SEGMENTS=${COLL_SEGMENTS:-"262144 1048576"}
BASE=${COLL_BASE:-}
[ -x "$PEER" ] || { echo "coll.sh: $PEER not built (make build)"; exit 1; }
[ -z "$BASE" ] || [ -x "$BASE/mt_coll_peer" ] || { echo "coll.sh: no $BASE/mt_coll_peer"; exit 1; }
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

load() { cut -d' ' -f1 /proc/loadavg; }

# run_mt NAME NPROCS KIND SEGMENT SIZES-BYTES [PEER] -> BENCH lines on stdout
# KIND: shm (tcp:// with shared memory allowed), tcp, ipc (shm off), nng, base (PEER over tcp),
# baseshm (PEER, shared memory allowed)
run_mt() {
    local name=$1 np=$2 kind=$3 seg=$4 sizes=$5 peer=${6:-$PEER} dir=$TMP/$1 floats="" b p
    mkdir -p "$dir"
    for b in $sizes; do floats="$floats${floats:+,}$((b / 4))"; done
    local pids=() extra=()
    case $kind in tcp | ipc | nng) extra=(--shm off) ;; esac
    # a base build that knows shared memory: compare its sockets with ours
    [ "$kind" = base ] && "$peer" 2>&1 | grep -q -- '--shm' && extra=(--shm off)
    for ((p = 0; p < np; p++)); do
        local url=tcp://127.0.0.1:0
        [ "$kind" = ipc ] && url=ipc://$dir/p$p.ipc
        [ "$kind" = nng ] && url=nng+tcp://127.0.0.1:0
        "$peer" --alarm 300 --listen "$url" --addr-file "$dir/addr.$p" --table-file "$dir/table" \
            --mode bench --sizes "$floats" --segment "$seg" --deadline 60000 "${extra[@]}" \
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
    # via=none: no exchange of this run's collectives needed that process
    if [ "$kind" = shm ] && grep -h '^LINK' "$dir"/out.* | grep -v 'via=none' | grep -qv 'via=shm'; then
        echo "coll.sh: $name: not every link used shared memory: $(grep -h '^LINK' "$dir"/out.* | sort -u | tr '\n' ' ')" >&2
    fi
    grep '^BENCH' "$dir/out.0"
}

field() { # LINE KEY
    echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}
ratio() { # A B -> A / B with 2 decimals, or -
    if [ -n "$1" ] && [ -n "$2" ] && [ "$(echo "$2 > 0" | bc)" = 1 ]; then
        echo "scale=2; $1 / $2" | bc
    else echo -; fi
}
lat() { field "$(grep "bytes=$2 " "$1")" lat_us; }
bw() { field "$(grep "bytes=$2 " "$1")" busbw_GBps; }

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
run_mpi() { # NPROCS SIZES BTL(vader|tcp)
    local btl=(--mca btl vader,self)
    [ "$3" = tcp ] && btl=(--mca btl tcp,self --mca btl_tcp_if_include lo)
    [ $MPI_OK = 1 ] || return 0
    OMPI_MCA_plm_rsh_agent= mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca pml ob1 "${btl[@]}" -np "$1" \
        "$BUILD/bench_mpi/mpi_allreduce" $2 2>"$TMP/mpi.err" | grep '^BENCH'
}

echo "== core/coll allreduce between processes of one host ($(nproc) cores; $(date -u +%FT%TZ))"
best_seg=262144 best_bw=0
for seg in $SEGMENTS; do
    line=$(run_mt "seg$seg" 2 tcp "$seg" 16777216)
    b=$(field "$line" busbw_GBps)
    echo "segment $seg B: 16 MiB tcp busbw ${b:-?} GB/s (load $(load))"
    if [ -n "$b" ] && [ "$(echo "$b > $best_bw" | bc)" = 1 ]; then best_seg=$seg best_bw=$b; fi
done
echo "using segment $best_seg B"
hdr='%-5s %9s | %9s %7s | %9s %7s | %9s %7s | %9s %7s | %9s %7s | %9s %7s | %7s %7s %7s | %5s\n'
printf "$hdr" procs bytes "shm us" busbw "tcp us" busbw "ipc us" busbw "nng us" busbw \
    "mpishm us" busbw "mpitcp us" busbw "shm/ms" "shm/mt" "tcp/mt" load
for np in $PROCS; do
    for k in shm tcp ipc nng; do run_mt "$k$np" "$np" "$k" "$best_seg" "$SIZES" >"$TMP/$k$np.txt"; done
    run_mpi "$np" "$SIZES" vader >"$TMP/ms$np.txt"
    run_mpi "$np" "$SIZES" tcp >"$TMP/mt$np.txt"
    l=$(load)
    for b in $SIZES; do
        printf "$hdr" "$np" "$b" \
            "$(lat "$TMP/shm$np.txt" "$b")" "$(bw "$TMP/shm$np.txt" "$b")" \
            "$(lat "$TMP/tcp$np.txt" "$b")" "$(bw "$TMP/tcp$np.txt" "$b")" \
            "$(lat "$TMP/ipc$np.txt" "$b")" "$(bw "$TMP/ipc$np.txt" "$b")" \
            "$(lat "$TMP/nng$np.txt" "$b")" "$(bw "$TMP/nng$np.txt" "$b")" \
            "$(lat "$TMP/ms$np.txt" "$b")" "$(bw "$TMP/ms$np.txt" "$b")" \
            "$(lat "$TMP/mt$np.txt" "$b")" "$(bw "$TMP/mt$np.txt" "$b")" \
            "$(ratio "$(lat "$TMP/ms$np.txt" "$b")" "$(lat "$TMP/shm$np.txt" "$b")")" \
            "$(ratio "$(lat "$TMP/mt$np.txt" "$b")" "$(lat "$TMP/shm$np.txt" "$b")")" \
            "$(ratio "$(lat "$TMP/mt$np.txt" "$b")" "$(lat "$TMP/tcp$np.txt" "$b")")" "$l"
    done
done
echo "(us: latency of one allreduce; busbw in GB/s; ratios are speed ratios (time of the other / time"
echo " of ours): shm/ms = against OpenMPI shared memory, shm/mt and tcp/mt = against OpenMPI tcp;"
echo " targets: shm/ms >= 1.0 at 1 and 16 MiB, 4 KiB shm latency <= 1.5x OpenMPI's, i.e. shm/ms >= 0.67)"

# The MPI backend (core/coll/coll_mpi.c through tests/tools/mt_coll_mpi_check --bench) beside
# OpenMPI's own MPI_Allreduce, both over OpenMPI's shared-memory path: "backend" is the default
# (tag check, the world's own buffers, nonblocking collectives polled to the deadline), "raw" has
# the first two off, "blocking" also uses MPI's blocking collectives (mt_coll_mpi_opts), so
# blk/ompi should be 1.00 and the others show what each guarantee costs. COLL_SKIP_MPI_BACKEND=1
# leaves it out.
MPICHECK=$BUILD/mt_coll_mpi_check
run_mtmpi() { # NPROCS SIZES MODE(--bench|--bench-raw|--bench-blocking)
    OMPI_MCA_plm_rsh_agent= mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca pml ob1 --mca btl vader,self -np "$1" "$MPICHECK" "$3" $2 2>"$TMP/mtmpi.err" |
        grep '^BENCH'
}
if [ $MPI_OK = 1 ] && [ "${COLL_SKIP_MPI_BACKEND:-0}" != 1 ] && [ -x "$MPICHECK" ] &&
    ! "$MPICHECK" 2>/dev/null | grep -q SKIPPED; then
    echo "== the MPI backend beside OpenMPI's MPI_Allreduce, shared memory (btl vader,self) ($(date -u +%TZ))"
    mh='%-5s %9s | %10s %7s | %9s %7s | %9s %7s | %9s %7s | %8s %8s %8s | %5s\n'
    printf "$mh" procs bytes "backend us" busbw "raw us" busbw "blk us" busbw "ompi us" busbw \
        "be/ompi" "raw/ompi" "blk/ompi" load
    for np in $PROCS; do
        run_mtmpi "$np" "$SIZES" --bench >"$TMP/be$np.txt"
        run_mtmpi "$np" "$SIZES" --bench-raw >"$TMP/raw$np.txt"
        run_mtmpi "$np" "$SIZES" --bench-blocking >"$TMP/blk$np.txt"
        run_mpi "$np" "$SIZES" vader >"$TMP/om$np.txt"
        l=$(load)
        for b in $SIZES; do
            printf "$mh" "$np" "$b" \
                "$(lat "$TMP/be$np.txt" "$b")" "$(bw "$TMP/be$np.txt" "$b")" \
                "$(lat "$TMP/raw$np.txt" "$b")" "$(bw "$TMP/raw$np.txt" "$b")" \
                "$(lat "$TMP/blk$np.txt" "$b")" "$(bw "$TMP/blk$np.txt" "$b")" \
                "$(lat "$TMP/om$np.txt" "$b")" "$(bw "$TMP/om$np.txt" "$b")" \
                "$(ratio "$(lat "$TMP/om$np.txt" "$b")" "$(lat "$TMP/be$np.txt" "$b")")" \
                "$(ratio "$(lat "$TMP/om$np.txt" "$b")" "$(lat "$TMP/raw$np.txt" "$b")")" \
                "$(ratio "$(lat "$TMP/om$np.txt" "$b")" "$(lat "$TMP/blk$np.txt" "$b")")" "$l"
        done
    done
    echo "(speed ratios: OpenMPI's time / the backend's; 1.00 = the same speed)"
fi

ROUNDS=${COLL_ROUNDS:-5}
ROUND_SIZES=${COLL_ROUND_SIZES:-"4096 1048576 16777216"}
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
if [ "$ROUNDS" -gt 0 ]; then
    echo "== $ROUNDS interleaved rounds: shm, tcp, OpenMPI shm, OpenMPI tcp${BASE:+, base shm and tcp ($BASE)} ($(date -u +%TZ))"
    rh='%-5s %5s %9s | %9s %9s %9s %9s %9s %9s | %7s %7s %8s %8s | %5s\n'
    printf "$rh" procs round bytes "shm us" "tcp us" "mpishm us" "mpitcp us" "bshm us" "btcp us" \
        "shm/ms" "tcp/mt" "shm/base" "tcp/base" load
    : >"$TMP/ratios"
    for np in $PROCS; do
        for ((r = 1; r <= ROUNDS; r++)); do
            run_mt "rs$np.$r" "$np" shm "$best_seg" "$ROUND_SIZES" >"$TMP/rs.txt"
            run_mt "rt$np.$r" "$np" tcp "$best_seg" "$ROUND_SIZES" >"$TMP/rt.txt"
            run_mpi "$np" "$ROUND_SIZES" vader >"$TMP/rms.txt"
            run_mpi "$np" "$ROUND_SIZES" tcp >"$TMP/rmt.txt"
            : >"$TMP/rb.txt"
            : >"$TMP/rbs.txt"
            [ -n "$BASE" ] && run_mt "rb$np.$r" "$np" base "$best_seg" "$ROUND_SIZES" \
                "$BASE/mt_coll_peer" >"$TMP/rb.txt"
            [ -n "$BASE" ] && run_mt "rbs$np.$r" "$np" baseshm "$best_seg" "$ROUND_SIZES" \
                "$BASE/mt_coll_peer" >"$TMP/rbs.txt"
            l=$(load)
            for b in $ROUND_SIZES; do
                s=$(lat "$TMP/rs.txt" "$b") t=$(lat "$TMP/rt.txt" "$b")
                ms=$(lat "$TMP/rms.txt" "$b") mt=$(lat "$TMP/rmt.txt" "$b") bs=$(lat "$TMP/rb.txt" "$b")
                bss=$(lat "$TMP/rbs.txt" "$b")
                q1=$(ratio "$ms" "$s") q2=$(ratio "$mt" "$t") q3=$(ratio "$bs" "$t") q4=$(ratio "$bss" "$s")
                printf "$rh" "$np" "$r" "$b" "${s:--}" "${t:--}" "${ms:--}" "${mt:--}" "${bss:--}" \
                    "${bs:--}" "$q1" "$q2" "$q4" "$q3" "$l"
                echo "$np $b $q1 $q2 $q3 $q4" >>"$TMP/ratios"
            done
        done
    done
    for np in $PROCS; do
        for b in $ROUND_SIZES; do
            m=()
            for c in 3 4 5 6; do
                m+=("$(awk -v n="$np" -v b="$b" -v c="$c" '$1 == n && $2 == b && $c != "-" {print $c}' "$TMP/ratios" | median)")
            done
            echo "median, $np processes, $b B: shm/mpi-shm ${m[0]:--}x, tcp/mpi-tcp ${m[1]:--}x${BASE:+, shm new/base ${m[3]:--}x, tcp new/base ${m[2]:--}x}"
        done
    done
fi
