# SPDX-License-Identifier: MIT
# mpi_lib.sh — for the integration tests of the MPI backend (test_mpi_*.sh), sourced after
# lib.sh: skips the test (exit 0, saying so) when the build has no MPI backend or there is no
# mpirun; start_mpi_workers starts workers as one MPI world in the background and stop_mpi ends
# it (also on exit, before lib.sh's cleanup).
if ! grep -q '^MT_MPI:BOOL=ON' "$BIN/CMakeCache.txt" || ! command -v mpirun >/dev/null; then
    echo "SKIP: this build has no MPI backend or there is no mpirun (deploy/install-deps.sh)"
    exit 0
fi

# Open MPI leaks at MPI_Finalize (its own allocations): under `make asan` LeakSanitizer would
# fail every MPI process, so leak checks are off for them (ASan's other checks stay on)
if [ "${MT_SANITIZED:-}" = 1 ]; then
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

MPI_PID=
# start_mpi_workers N CMD...: `mpirun -np N CMD...` as one MPI world (log $T/mpi.log); sets
# MPI_PID. Open MPI as root needs --allow-run-as-root; 2 cores need --oversubscribe; local
# processes need no ssh agent (OMPI_MCA_plm_rsh_agent=).
start_mpi_workers() {
    local n=$1
    shift
    OMPI_MCA_plm_rsh_agent='' bg mpi mpirun --allow-run-as-root --oversubscribe --bind-to none \
        -np "$n" "$@"
    MPI_PID=$LAST_PID
}
stop_mpi() { # SIGTERM to mpirun reaches every worker; they stop and finalize together
    [ -n "$MPI_PID" ] || return 0
    kill -TERM "$MPI_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$MPI_PID" 2>/dev/null || break; sleep 0.1; done
    MPI_PID=
}
trap 'stop_mpi; cleanup' EXIT
