#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""coll_graph.py — core/coll's file-level call graph, checked against its layers.

   tests/tools/coll_graph.py BUILD/libmtcore.a [BUILD/libmtmpi.a] [SRC/core/coll]

Prints one line per file of core/coll, "a.c -> b.c, c.c" when a.c uses a symbol b.c defines
(nm: what each object defines and leaves undefined), then the circles (strongly connected
components of more than one file) or "circles: none", then the layering: every file belongs to
one layer of LAYERS (top first) and may use only the layers below its own (a transport never
calls the engine, the engine never the algorithms: what goes up goes through the tables the
upper layer hands down, which nm does not see), printed as "layers: ok" or one
"layer: a.c (engine) -> b.c (algorithms)" line per breach. The MPI backend (libmtmpi.a) is a
client of the public interface: it may use only public mt_coll_* functions of the module, never
a coll__ one. With the source folder it also follows the #include "coll/..." lines: an
algorithm file may reach no header that names a transport (coll_int.h), and the wire format's
header includes no other header of the module. Exit status 1 when there is a circle or a breach.
docs/collectives.md shows its output; tests/integration/test_coll_layers.sh runs it.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coord_graph import circles, nm_objects  # noqa: E402 (the coordinator's graph tool)

# core/coll's layers, top first. A new file must be placed here, or the check fails.
LAYERS = [
    ("buckets", {"coll_bucket.c"}),
    ("public", {"coll_backend.c"}),
    ("algorithms", {"coll_algo.c"}),
    ("engine", {"coll_world.c"}),
    ("endpoint", {"coll_net.c"}),
    ("transports", {"coll_raw.c", "coll_shm.c", "coll_auth.c"}),
    ("progress", {"coll_progress.c"}),
    ("wire", {"coll_wire.c"}),
]
# layers whose files may call each other (the graph among them must still have no circle)
PEERS = {"transports"}
# the headers an algorithm file may include from core/coll (transitively)
ALGO_HEADERS = {"coll_engine.h", "coll_wire.h", "mt_coll.h", "mt_coll_backend.h"}


def coll_objects(lib):
    """nm_objects of lib restricted to the files of core/coll (coll_*.c)."""
    defs, uses = nm_objects(lib)
    keep = [o for o in defs if o.startswith("coll_")]
    return {o: defs[o] for o in keep}, {o: uses[o] for o in keep}


def graph(defs, uses):
    owner = {s: o for o, ss in defs.items() for s in ss}
    return {o: sorted({owner[s] for s in uses[o] if s in owner and owner[s] != o}) for o in defs}


def layer_breaches(edges):
    rank = {f: i for i, (_, fs) in enumerate(LAYERS) for f in fs}
    name = {f: n for n, fs in LAYERS for f in fs}
    out = [f"layer: {f} is in no layer (tests/tools/coll_graph.py LAYERS)"
           for f in sorted(edges) if f not in rank]
    out += [f"layer: {f} ({name[f]}) is not in the library" for f in sorted(rank) if f not in edges]
    for f in sorted(edges):
        for g in edges[f]:
            if f not in rank or g not in rank:
                continue
            same_ok = rank[g] == rank[f] and name[f] in PEERS
            if rank[g] <= rank[f] and not same_ok:
                out.append(f"layer: {f} ({name[f]}) -> {g} ({name[g]})")
    return out


def mpi_breaches(mpi_lib, core_defs):
    """The MPI backend may use only public mt_coll_* functions of core/coll."""
    defs, uses = coll_objects(mpi_lib)
    owner = {s: o for o, ss in core_defs.items() for s in ss}
    out = []
    for obj in sorted(uses):
        used = sorted({s for s in uses[obj] if s in owner})
        print(f"{obj:16s}-> {', '.join(sorted({owner[s] for s in used}))} (public calls only)")
        out += [f"layer: {obj} (MPI backend) uses {s} of {owner[s]}: not public"
                for s in used if not s.startswith("mt_coll_")]
    return out


def includes(folder, name, seen=None):
    """The core/coll headers name reaches through #include "coll/..." lines (transitively)."""
    seen = set() if seen is None else seen
    try:
        text = open(os.path.join(folder, name)).read()
    except OSError:
        return seen
    for h in re.findall(r'^#include "coll/([^"]+)"', text, re.M):
        if h not in seen:
            seen.add(h)
            includes(folder, h, seen)
    return seen


def header_breaches(folder):
    out = []
    algo = [f for n, fs in LAYERS if n == "algorithms" for f in sorted(fs)]
    for f in algo:
        reach = includes(folder, f)
        print(f"{f} includes: {', '.join(sorted(reach))}")
        out += [f"layer: {f} (algorithms) reaches {h}" for h in sorted(reach - ALGO_HEADERS)]
    wire = includes(folder, "coll_wire.h")
    out += [f"layer: coll_wire.h (wire) includes {h}" for h in sorted(wire)]
    return out


def main():
    args = sys.argv[1:]
    libs = [a for a in args if a.endswith(".a")]
    folders = [a for a in args if os.path.isdir(a)]
    defs, uses = coll_objects(libs[0])
    edges = graph(defs, uses)
    for f in sorted(edges):
        print(f"{f:16s}-> {', '.join(edges[f])}")
    cyc = circles(edges)
    print("circles: " + ("; ".join(" <-> ".join(c) for c in cyc) if cyc else "none"))
    bad = layer_breaches(edges)
    if len(libs) > 1:
        bad += mpi_breaches(libs[1], defs)
    if folders:
        bad += header_breaches(folders[0])
    print("\n".join(bad) if bad else "layers: ok")
    return 1 if cyc or bad else 0


if __name__ == "__main__":
    sys.exit(main())
