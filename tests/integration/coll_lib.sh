# SPDX-License-Identifier: MIT
# coll_lib.sh — helpers sourced by the collectives' integration tests (test_coll_procs.sh,
# test_coll_faults.sh): waiting for mt_coll_peer processes polls their files with a deadline.

# coll_wait_file FILE [PATTERN] [SECONDS]: wait until FILE is non-empty (or contains PATTERN);
# 1 after SECONDS (default 15)
coll_wait_file() {
    local f=$1 pat=${2:-} deadline=$(($(date +%s) + ${3:-15}))
    while if [ -n "$pat" ]; then ! grep -q "$pat" "$f" 2>/dev/null; else [ ! -s "$f" ]; fi; do
        [ "$(date +%s)" -gt "$deadline" ] && return 1
        sleep 0.02
    done
    return 0
}

# coll_wait_addrs DIR NPROCS: wait for DIR/addr.0 .. addr.N-1; the addresses go to WADDR;
# 1 (and COLL_LATE: the process that never wrote one) after 15 s
coll_wait_addrs() {
    local dir=$1 np=$2 p
    WADDR=()
    for ((p = 0; p < np; p++)); do
        coll_wait_file "$dir/addr.$p" || { COLL_LATE=$p; return 1; }
        WADDR+=("$(cat "$dir/addr.$p")")
    done
}

# coll_wait_started DIR NPROCS: wait until every DIR/out.P says STARTED (20 s); as above
coll_wait_started() {
    local dir=$1 np=$2 p
    for ((p = 0; p < np; p++)); do
        coll_wait_file "$dir/out.$p" STARTED 20 || { COLL_LATE=$p; return 1; }
    done
}
