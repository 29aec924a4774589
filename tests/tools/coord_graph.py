#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""coord_graph.py — the coordinator's file-level call graph from its static library.

   tests/tools/coord_graph.py BUILD/libmtcoord.a [BUILD/compile_commands.json]

Prints one line per file, "a.c -> b.c, c.c" when a.c uses a symbol b.c defines (nm: what each
object defines and leaves undefined), then the circles (strongly connected components of more
than one file) or "circles: none", then the layering: every file belongs to one layer of LAYERS
and may use only the layers ALLOWED says (the domain core and the shared leaves call no adapter;
the three kinds of adapters — RPC handlers, the periodic sweep, HTTP handlers — never call each
other, and no RPC handler file calls another; only coord.c, the loop that wires them, reaches
everything; the scheduling core calls no file at all), printed as "layers: ok" or one
"layer: a.c (rpc) -> b.c (http)" line per breach. With compile_commands.json it also lists the
headers each core file (the domain core's files, the scheduling core sched.c) includes (the
compiler's -M) and reports any protobuf header (a generated *.pb-c.h, or protobuf-c/protobuf-c.h)
as a breach.
Exit status 1 when there is a circle or a breach.
docs/architecture.md shows its output; tests/integration/test_coord_no_circles.sh runs it.
"""
import json
import os
import shlex
import subprocess
import sys

# The coordinator's layers (adapters -> core -> store; the store is libmtstorage, outside this
# library; the domain core is state.c and schedpass.c, the scheduler pass, which calls state.c
# (never the other way: no circles); sched.c, the scheduling core, is pure and calls no file of
# the coordinator). The
# adapters: RPC handlers ("rpc", which call no other handler file; they share "rpcbase":
# bulk.c, the thread-pool runner of bulk reads, and rpcview.c, the protobuf views of stored rows
# that several of them reply with; both call nothing), the periodic sweep ("sweep", sweep.c: the
# timer's lost-worker, silent-worker and stall rules) and the status endpoint ("http"); no
# adapter calls an adapter of another kind, and no RPC handler calls another. A new file
# must be placed here, or the check fails. The files of the "core" and "sched" layers must not
# see a protobuf header, generated or protobuf-c's own (CORES).
LAYERS = {
    "sched": {"sched.c"},
    "core": {"state.c", "schedpass.c"},
    "shared": {"buf.c", "mcache.c", "stats.c"},
    "rpcbase": {"bulk.c", "rpcview.c"},
    "rpc": {"ckpt.c", "jobs.c", "joblog.c", "metrics.c", "workers.c"},
    "sweep": {"sweep.c"},
    "http": {"http.c", "http_act.c", "http_api.c", "http_prom.c", "http_reply.c"},
    "loop": {"coord.c"},
}
ALLOWED = {
    "sched": set(),
    "shared": {"shared"},
    "core": {"core", "sched", "shared"},
    "rpcbase": set(),
    "rpc": {"rpcbase", "core", "sched", "shared"},
    "sweep": {"core", "sched", "shared"},
    "http": {"http", "core", "shared"},
    "loop": set(LAYERS),
}
CORES = LAYERS["core"] | LAYERS["sched"]


def nm_objects(lib):
    """What each object of lib defines and leaves undefined: ({obj: {sym}}, {obj: {sym}})."""
    out = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
    defs, uses = {}, {}
    for line in out.splitlines():
        head, _, rest = line.rpartition(":")  # "lib.a:file.c.o:<nm line>"
        obj = head.split(":")[-1].replace(".c.o", ".c")
        f = rest.split()
        defs.setdefault(obj, set())
        uses.setdefault(obj, set())
        if len(f) == 3 and f[1] in "TDBR":
            defs[obj].add(f[2])
        elif len(f) == 2 and f[0] == "U":
            uses[obj].add(f[1])
    return defs, uses


def graph(lib):
    defs, uses = nm_objects(lib)
    owner = {s: o for o, ss in defs.items() for s in ss}
    return {o: sorted({owner[s] for s in uses[o] if s in owner and owner[s] != o}) for o in defs}


def circles(edges):
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def layer_breaches(edges):
    layer = {f: name for name, fs in LAYERS.items() for f in fs}
    out = [f"layer: {f} is in no layer (tests/tools/coord_graph.py LAYERS)"
           for f in sorted(edges) if f not in layer]
    for f in sorted(edges):
        for g in edges[f]:
            if f in layer and g in layer and layer[g] not in ALLOWED[layer[f]]:
                out.append(f"layer: {f} ({layer[f]}) -> {g} ({layer[g]})")
    return out


def protobuf_header(path):
    """A generated protobuf header, or protobuf-c's runtime header."""
    return path.endswith(".pb-c.h") or os.path.basename(path) == "protobuf-c.h"


def core_header_breaches(compile_commands):
    """The protobuf headers the cores' files include (compiler -M, as CMake builds)."""
    out = []
    for e in json.load(open(compile_commands)):
        if os.path.basename(e["file"]) not in CORES:
            continue
        args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        keep, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ("-o", "-MF", "-MT", "-MQ"):
                skip = True
            elif a not in ("-c", "-MD", "-MMD"):
                keep.append(a)
        deps = subprocess.run(keep + ["-M"], cwd=e["directory"], capture_output=True, text=True,
                              check=True).stdout
        name = os.path.basename(e["file"])
        print(f"{name} includes: " + ", ".join(sorted(
            {os.path.basename(d) for d in deps.replace("\\\n", " ").split()[1:]
             if d.endswith(".h") and "/usr/" not in d})))
        out += [f"layer: {name} (core) includes {d}" for d in deps.split() if protobuf_header(d)]
    return out


def main():
    edges = graph(sys.argv[1])
    for f in sorted(edges):
        print(f"{f:13s}-> {', '.join(edges[f])}")
    cyc = circles(edges)
    print("circles: " + ("; ".join(" <-> ".join(c) for c in cyc) if cyc else "none"))
    bad = layer_breaches(edges)
    if len(sys.argv) > 2:
        bad += core_header_breaches(sys.argv[2])
    print("\n".join(bad) if bad else "layers: ok")
    return 1 if cyc or bad else 0


if __name__ == "__main__":
    sys.exit(main())
