#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_coord_no_circles.sh — issue 19, item 1: the coordinator's files do not call each other in
# circles. tests/tools/coord_graph.py reads what each object of libmtcoord.a defines and uses
# (nm) and fails on any strongly connected group of files; the graph is printed either way
# (docs/architecture.md shows it).
source "$(dirname "$0")/lib.sh"

command -v nm >/dev/null || { echo "SKIP: nm not installed"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 0; }
python3 "$SRC/tests/tools/coord_graph.py" "$BIN/libmtcoord.a" >"$T/graph.txt" ||
    fail "the coordinator's files form circles: $(tail -1 "$T/graph.txt")"
cat "$T/graph.txt"
# the domain core calls no adapter: only the stats
grep -Eq '^state\.c +-> stats\.c$' "$T/graph.txt" || fail "state.c: $(grep '^state.c' "$T/graph.txt")"
log "PASS"
