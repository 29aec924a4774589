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
a coll__ one. Only the nng transport's file (NNG_FILES) may call nng: any other object that
leaves an nng_ symbol undefined is a breach. With the source folder it also follows the
#include "..." lines (into the other folders of core/ too): an algorithm file may reach no
header that names a transport (coll_int.h), the wire format's header includes no other header
of the module, and no file but NNG_FILES may include an nng header or name an nng type or
constant (nng_*, NNG_*) in its code or in a header it reaches (comments and strings do not
count). Exit status 1 when there is a circle or a breach.
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
# the only files that may include nng or name its types: the nng transport lives in the endpoint
# (its table); the engine and everything else reach it through that table and opaque pointers
NNG_FILES = {"coll_net.c"}
NNG_NAME = re.compile(r"\b(?:nng|NNG)_\w+")
NNG_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]nng/", re.M)


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


def headers(core, rel, seen=None):
    """The headers under core/ that core/rel reaches through #include "..." lines (transitively),
    as paths relative to core/ ("coll/coll_int.h", "status/mt_status.h")."""
    seen = set() if seen is None else seen
    try:
        text = open(os.path.join(core, rel)).read()
    except OSError:
        return seen
    for h in re.findall(r'^#include "([^"]+)"', text, re.M):
        if h not in seen and os.path.isfile(os.path.join(core, h)):
            seen.add(h)
            headers(core, h, seen)
    return seen


def includes(folder, name):
    """The core/coll headers name (a file of folder, core/coll) reaches, by file name."""
    core = os.path.dirname(os.path.abspath(folder))
    reach = headers(core, os.path.join(os.path.basename(os.path.abspath(folder)), name))
    return {os.path.basename(h) for h in reach if os.path.dirname(h) == "coll"}


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


def code_of(path):
    """The text of a C file without its comments and string and character literals."""
    text = open(path).read()
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', " ", text,
                  flags=re.S)


def nng_breaches(folder):
    """Files of the layers (but NNG_FILES) that include nng or name its types, themselves or
    through a header they reach."""
    core = os.path.dirname(os.path.abspath(folder))
    sub = os.path.basename(os.path.abspath(folder))
    out = []
    files = sorted(f for _, fs in LAYERS for f in fs if f not in NNG_FILES)
    for f in files:
        if not os.path.isfile(os.path.join(folder, f)):
            continue
        for rel in [os.path.join(sub, f)] + sorted(headers(core, os.path.join(sub, f))):
            code = code_of(os.path.join(core, rel))
            where = "" if rel == os.path.join(sub, f) else f" (through {rel})"
            if NNG_INCLUDE.search(code):
                out.append(f"nng: {f} includes an nng header{where}")
            names = sorted(set(NNG_NAME.findall(code)))
            if names:
                out.append(f"nng: {f} names {', '.join(names)}{where}")
    return out


def nng_calls(uses):
    """Objects (but NNG_FILES) that call nng (an undefined nng_ symbol)."""
    return [f"nng: {o} calls {', '.join(sorted(s for s in uses[o] if s.startswith('nng_')))}"
            for o in sorted(uses) if o not in NNG_FILES and any(s.startswith("nng_") for s in uses[o])]


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
    nng = nng_calls(uses)
    if folders:
        bad += header_breaches(folders[0])
        nng += nng_breaches(folders[0])
    if not nng:
        print(f"nng: {', '.join(sorted(NNG_FILES))} only")
    bad += nng
    print("\n".join(bad) if bad else "layers: ok")
    return 1 if cyc or bad else 0


if __name__ == "__main__":
    sys.exit(main())
