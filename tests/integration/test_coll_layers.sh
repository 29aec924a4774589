#!/usr/bin/env bash
# ctest: lane 2 (one process, no daemons, no deadlines: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_coll_layers.sh — issue 20, item 1: no file of core/coll calls a file above it.
# tests/tools/coll_graph.py reads what each core/coll object of libmtcore.a defines and uses
# (nm) and fails on a circle, on a call to a file of a higher layer (public -> algorithms ->
# engine -> endpoint -> transports -> progress -> wire: a transport reaches the engine only
# through the table it is handed, the engine never names the algorithms), on the MPI backend
# (libmtmpi.a) using anything but public mt_coll_* functions, and, from the #include lines, on
# an algorithm file reaching a header that names a transport (coll_int.h), and on nng anywhere
# but in the nng transport's file (coll_net.c): an object calling nng_*, or a file including an
# nng header or naming an nng type, itself or through a header it reaches (the engine's structs
# hold the nng transport's state only as opaque pointers). The graph is printed either way
# (docs/collectives.md shows it).
source "$(dirname "$0")/lib.sh"

command -v nm >/dev/null || { echo "SKIP: nm not installed"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 0; }
python3 "$SRC/tests/tools/coll_graph.py" "$BIN/libmtcore.a" "$BIN/libmtmpi.a" "$SRC/core/coll" \
    >"$T/graph.txt" ||
    fail "core/coll's files form circles or call upward: $(grep -E '^(circles|layer)' "$T/graph.txt")"
cat "$T/graph.txt"
grep -q '^layers: ok$' "$T/graph.txt" || fail "no layer verdict"
# the algorithms see the engine (and the wire format's names) only
grep -Eq '^coll_algo\.c +-> coll_world\.c$' "$T/graph.txt" || fail "coll_algo.c: $(grep '^coll_algo.c ' "$T/graph.txt")"
grep -q '^coll_algo\.c includes: coll_engine\.h, coll_wire\.h, mt_coll\.h, mt_coll_backend\.h$' "$T/graph.txt" ||
    fail "the algorithms' headers: $(grep '^coll_algo.c includes' "$T/graph.txt")"
# no transport calls the engine by name
grep -Eq '^coll_(net|raw|shm)\.c +->.*coll_world' "$T/graph.txt" && fail "a transport calls the engine"
# the engine reaches transports only through the endpoint's tables (driving included)
grep -Eq '^coll_world\.c +->.*coll_(raw|shm)\.c' "$T/graph.txt" &&
    fail "the engine calls a transport file: $(grep '^coll_world.c ' "$T/graph.txt")"
# ... and no file but the nng transport's calls nng, includes it or names its types (the
# engine's structs keep nng's send slots and sockets as opaque pointers only)
grep -q '^nng: coll_net\.c only$' "$T/graph.txt" || fail "nng outside coll_net.c: $(grep '^nng' "$T/graph.txt")"
# the checker itself catches an upward call and a transport-naming header (synthetic inputs)
PYTHONPATH="$SRC/tests/tools" python3 - <<'PY' || fail "coll_graph.py missed a breach"
import coll_graph as g
edges = {f: [] for _, fs in g.LAYERS for f in fs}
edges["coll_raw.c"] = ["coll_world.c"]
assert g.layer_breaches(edges) == ["layer: coll_raw.c (transports) -> coll_world.c (engine)"]
edges["coll_raw.c"], edges["coll_world.c"] = [], ["coll_algo.c"]
assert g.layer_breaches(edges) == ["layer: coll_world.c (engine) -> coll_algo.c (algorithms)"]
assert g.nng_calls({"coll_world.c": {"nng_aio_wait", "memcpy"}, "coll_net.c": {"nng_send_aio"}}) == [
    "nng: coll_world.c calls nng_aio_wait"]
PY
# ... and an engine that includes nng or names its types, itself or through its header, in a
# synthetic source tree (comments and strings do not count)
mkdir -p "$T/src/core/coll" "$T/src/core/status"
cat >"$T/src/core/coll/coll_int.h" <<'C'
/* an nng_msg in a comment */
#include "status/mt_status.h"
typedef struct { nng_aio *a; } c;
C
cat >"$T/src/core/coll/coll_world.c" <<'C'
#include "coll/coll_int.h"
const char *s = "nng_socket";
C
echo '#include <nng/nng.h>' >"$T/src/core/coll/coll_raw.c"
printf '#include <nng/nng.h>\nnng_socket s;\n' >"$T/src/core/coll/coll_net.c"
echo '/* NNG_OPT_RECVFD */' >"$T/src/core/status/mt_status.h"
PYTHONPATH="$SRC/tests/tools" python3 - "$T/src/core/coll" <<'PY' || fail "coll_graph.py missed nng in the engine"
import sys
import coll_graph as g
got = g.nng_breaches(sys.argv[1])
assert got == ["nng: coll_raw.c includes an nng header",
               "nng: coll_world.c names nng_aio (through coll/coll_int.h)"], got
PY
log "PASS"
