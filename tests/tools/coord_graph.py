#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""coord_graph.py — the coordinator's file-level call graph from its static library.

   tests/tools/coord_graph.py BUILD/libmtcoord.a

Prints one line per file, "a.c -> b.c, c.c" when a.c uses a symbol b.c defines (nm: what each
object defines and leaves undefined), then the circles (strongly connected components of more
than one file) or "circles: none". Exit status 1 when there is a circle.
docs/architecture.md shows its output; tests/integration/test_coord_no_circles.sh runs it.
"""
import subprocess
import sys


def graph(lib):
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


def main():
    edges = graph(sys.argv[1])
    for f in sorted(edges):
        print(f"{f:13s}-> {', '.join(edges[f])}")
    cyc = circles(edges)
    print("circles: " + ("; ".join(" <-> ".join(c) for c in cyc) if cyc else "none"))
    return 1 if cyc else 0


if __name__ == "__main__":
    sys.exit(main())
