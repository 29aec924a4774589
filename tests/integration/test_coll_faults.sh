#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coll_faults.sh — data-plane faults of issue 19 (items 6-8) between real processes
# (build/mt_coll_peer over tcp, shared memory off):
#  6. 64 idle connections to each process's data port, opened before the job's peers dial
#     (strangers that never say hello), do not keep the peers out: the collectives succeed
#     (with the data-plane token) because connections still in their handshake are bounded and
#     the oldest is dropped for a newcomer, and the handshake has a deadline;
#  7. a broken link (every packet dropped: loopback down in a network namespace of the test)
#     ends the collective at its deadline on both members with UNAVAILABLE naming both ends and
#     the mesh axis (--axes), instead of a deadline that blames the peer;
#  8. a stopped process (SIGSTOP) is named with DEADLINE_EXCEEDED at the collective's own
#     deadline (the --deadline option, not a fixed 30 s), with the mesh axis.
# Every child has an alarm and is killed on exit.
set -u
BIN=${MT_BIN_DIR:-build}
PEER=$(cd "$(dirname "$BIN/mt_coll_peer")" && pwd)/mt_coll_peer
# shellcheck source=coll_lib.sh
. "$(dirname "$0")/coll_lib.sh"
[ -x "$PEER" ] || { echo "FAIL: $PEER not built"; exit 1; }
TMP=${COLL_FAULTS_TMP:-$(mktemp -d /tmp/mt_coll_faults.XXXXXX)}
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${COLL_FAULTS_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
now() { date +%s.%N; }
WPIDS=()
WADDR=()

# start_world NAME NPROCS ARGS... : start the processes (tcp, shm off), wait for addresses
start_world() {
    local name=$1 np=$2 p dir=$TMP/$1
    shift 2
    mkdir -p "$dir"
    WPIDS=()
    for ((p = 0; p < np; p++)); do
        "$PEER" --alarm 60 --listen tcp://127.0.0.1:0 --addr-file "$dir/addr.$p" \
            --table-file "$dir/table" --shm off "$@" >"$dir/out.$p" 2>"$dir/err.$p" &
        WPIDS+=($!) PIDS+=($!)
    done
    coll_wait_addrs "$dir" "$np" || { fail "$name: process $COLL_LATE never listened"; return 1; }
}
hand_table() { # NAME
    local dir=$TMP/$1 p
    for p in "${!WADDR[@]}"; do echo "$p ${WADDR[$p]} 0"; done >"$dir/table.tmp"
    mv "$dir/table.tmp" "$dir/table"
}
wait_started() { # NAME
    coll_wait_started "$TMP/$1" "${#WPIDS[@]}" || { fail "$1: process $COLL_LATE never started"; return 1; }
    sleep 0.3
}
# expect_fail NAME T0 DEADLINE_MS CODE PATTERN... : every process but the skipped one exits with
# CODE within the deadline + 1 s, its ERROR line matching every PATTERN
expect_fail() {
    local name=$1 t0=$2 dl=$3 want=$4 skip=$5 p
    shift 5
    for p in "${!WPIDS[@]}"; do
        [ "$p" = "$skip" ] && continue
        wait "${WPIDS[$p]}"
        local code=$? el out pat
        el=$(echo "$(now) - $t0" | bc)
        out=$(grep -h '^ERROR' "$TMP/$name/out.$p" | head -1)
        [ "$code" = "$want" ] || fail "$name: process $p exited $code, want $want: $out"
        [ "$(echo "$el > $dl / 1000 + 1" | bc)" = 1 ] && fail "$name: process $p took $el s (deadline $dl ms)"
        for pat in "$@"; do
            case "$out" in *"$pat"*) ;; *) fail "$name: process $p does not say '$pat': $out" ;; esac
        done
        echo "ok: $name: process $p exited $code after $el s: $(echo "$out" | cut -c1-230)"
    done
}

if [ "${1:-}" = --partition ]; then # 7, inside a network namespace of its own
    ip link set lo up || { echo "SKIP: cannot bring loopback up in a network namespace"; exit 0; }
    DL=2000
    start_world partition 2 --mode loop --sizes 262144 --iters 1000000 --deadline $DL \
        --axes batch=2 || exit 1
    hand_table partition
    wait_started partition || exit 1
    t0=$(now)
    ip link set lo down # from now on every packet between the two is dropped, none refused
    expect_fail partition "$t0" $((DL + 300)) 14 -1 "UNAVAILABLE" "link between rank" \
        "${WADDR[0]}" "${WADDR[1]}" "allreduce over batch"
    exit $((FAILS != 0))
fi

# 6. idle strangers on the data ports before the peers dial
start_world idle 2 --mode check --sizes 1,4099,262147 --seed 3 --deadline 8000 \
    --token s3cret || exit 1
FDS=()
for a in "${WADDR[@]}"; do
    port=${a##*:}
    for ((i = 0; i < 64; i++)); do
        exec {fd}<>"/dev/tcp/127.0.0.1/$port" && FDS+=("$fd")
    done
done
echo "opened ${#FDS[@]} idle connections to the data ports"
t0=$(now)
hand_table idle
for p in "${!WPIDS[@]}"; do
    wait "${WPIDS[$p]}" || fail "idle: process $p exited $?: $(head -3 "$TMP/idle/out.$p")"
done
el=$(echo "$(now) - $t0" | bc)
n=$(cat "$TMP"/idle/out.* | grep -c '^RESULT .* ok ')
[ "$n" = 2 ] || fail "idle: $n of 2 ranks reported ok"
for fd in "${FDS[@]}"; do exec {fd}>&-; done
[ "$n" = 2 ] && echo "ok: idle: the job ran beside ${#FDS[@]} idle connections in $el s ($(grep -h "dropping a data-plane connection still in its handshake" "$TMP"/idle/err.* | wc -l) dropped)"

# 7. a broken link (in a network namespace, so nothing outside the test is touched)
if unshare -n true 2>/dev/null; then
    mkdir -p "$TMP/ns"
    COLL_FAULTS_TMP=$TMP/ns MT_BIN_DIR=$BIN unshare -n bash "$0" --partition || fail "partition (see above)"
else
    echo "SKIP: partition: no network namespaces here (unshare -n)"
fi

# 8. a stopped member is named at the collective's own deadline, with the mesh axis
DL=1500
start_world stopped 3 --mode loop --sizes 262144 --iters 1000000 --deadline $DL --axes batch=3 ||
    exit 1
hand_table stopped
wait_started stopped
t0=$(now)
kill -STOP "${WPIDS[1]}"
expect_fail stopped "$t0" $DL 4 1 "DEADLINE_EXCEEDED" "within $DL ms" "never arrived: rank 1" \
    "${WADDR[1]}, no answer" "allreduce over batch"
kill -CONT "${WPIDS[1]}"

if [ $FAILS -ne 0 ]; then
    echo "test_coll_faults: $FAILS failure(s)"
    exit 1
fi
echo "test_coll_faults: all passed"
