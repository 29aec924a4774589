#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_coord_no_circles.sh — issue 19, item 1: the coordinator's files do not call each other in
# circles and keep their layers. tests/tools/coord_graph.py reads what each object of
# libmtcoord.a defines and uses (nm) and fails on any strongly connected group of files, on an
# adapter calling an adapter of another kind (RPC handlers, the periodic sweep, HTTP), on the
# core or a shared leaf calling an adapter, the scheduling core (sched.c) calling any file, and (from
# compile_commands.json, the compiler's -M) on a protobuf header (a generated *.pb-c.h, or
# protobuf-c.h itself) reaching the domain core or the scheduling core; the graph is printed
# either way (docs/architecture.md shows it).
source "$(dirname "$0")/lib.sh"

command -v nm >/dev/null || { echo "SKIP: nm not installed"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 0; }
CC_JSON=()
[ -f "$BIN/compile_commands.json" ] && CC_JSON=("$BIN/compile_commands.json")
python3 "$SRC/tests/tools/coord_graph.py" "$BIN/libmtcoord.a" "${CC_JSON[@]}" >"$T/graph.txt" ||
    fail "the coordinator's files form circles or break their layers: $(grep -E '^(circles|layer)' "$T/graph.txt")"
cat "$T/graph.txt"
grep -q '^layers: ok$' "$T/graph.txt" || fail "no layer verdict"
[ ${#CC_JSON[@]} -eq 0 ] || grep -q '^state\.c includes: .*coord_int\.h' "$T/graph.txt" ||
    fail "the core's headers were not checked"
[ ${#CC_JSON[@]} -eq 0 ] || grep -q '^schedpass\.c includes: .*coord_int\.h' "$T/graph.txt" ||
    fail "the scheduler pass's headers were not checked"
[ ${#CC_JSON[@]} -eq 0 ] || grep -q '^sched\.c includes: .*sched\.h' "$T/graph.txt" ||
    fail "the scheduling core's headers were not checked"
# the domain core calls no adapter: only the scheduling core and the stats
grep -Eq '^state\.c +-> sched\.c, stats\.c$' "$T/graph.txt" || fail "state.c: $(grep '^state.c' "$T/graph.txt")"
# the scheduler pass is core too: it applies the scheduling core through state.c, and reaches
# the checkpoint check and the metrics stream only through hooks (no ckpt.c, no metrics.c)
grep -Eq '^schedpass\.c +-> sched\.c, state\.c, stats\.c$' "$T/graph.txt" || fail "schedpass.c: $(grep '^schedpass.c' "$T/graph.txt")"
# the periodic sweep calls only the two cores and the stats (no RPC or HTTP handler)
grep -Eq '^sweep\.c +-> sched\.c, state\.c, stats\.c$' "$T/graph.txt" || fail "sweep.c: $(grep '^sweep.c' "$T/graph.txt")"
# the heartbeat hands device progress and task statuses to the domain core (coord_job_progress,
# coord_task_report) and builds its assignments itself: no other RPC adapter (no jobs.c)
grep -Eq '^workers\.c +-> sched\.c, state\.c, stats\.c$' "$T/graph.txt" || fail "workers.c: $(grep '^workers.c' "$T/graph.txt")"
# the scheduling core calls no file of the coordinator
grep -Eq '^sched\.c +-> *$' "$T/graph.txt" || fail "sched.c: $(grep '^sched.c' "$T/graph.txt")"
log "PASS"
