#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coll_mpi.sh — the collective conformance suite against the MPI backend
# (core/coll/coll_mpi.c): build/mt_coll_mpi_check under mpirun with 1, 2, 3, 4 and 8 processes
# (the cases are listed in tests/tools/mt_coll_mpi_check.c; with 8 processes every group size
# 1-8). A build without MPI (no libopenmpi-dev, or -DMT_MPI=OFF) or a host without mpirun skips
# it, saying so.
# Open MPI here: run as root needs --allow-run-as-root; 2 cores need --oversubscribe;
# OMPI_MCA_plm_rsh_agent= keeps mpirun from looking for ssh (every process is local).
set -u
BIN=${MT_BIN_DIR:-build}
CHECK=$BIN/mt_coll_mpi_check
[ -x "$CHECK" ] || { echo "FAIL: $CHECK not built"; exit 1; }
if ! command -v mpirun >/dev/null; then
    echo "SKIP: no mpirun (deploy/install-deps.sh installs openmpi-bin)"
    exit 0
fi
out=$("$CHECK" 2>&1 </dev/null) # without mpirun: a singleton MPI world, or the skip
if [ $? = 77 ]; then
    echo "SKIP: $out"
    exit 0
fi
# Open MPI leaks at MPI_Finalize: no leak check of MPI processes under `make asan`
if [ "${MT_SANITIZED:-}" = 1 ]; then
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
FAILS=0
for np in 1 2 3 4 8; do
    t0=$(date +%s.%N)
    out=$(OMPI_MCA_plm_rsh_agent= timeout 180 mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -np "$np" "$CHECK" 2>&1)
    rc=$?
    echo "$out" | grep -E '^(MPI|PASS|FAIL)'
    if [ $rc != 0 ] || ! echo "$out" | grep -q "MPI CHECK PASSED ranks=$np"; then
        echo "FAIL: mpirun -np $np exited $rc"
        echo "$out" | tail -n 30
        FAILS=$((FAILS + 1))
    else
        echo "ok: -np $np in $(echo "$(date +%s.%N) - $t0" | bc) s"
    fi
done
[ $FAILS = 0 ] || exit 1
echo "PASS: MPI backend conformance with 1, 2, 3, 4 and 8 processes"
