#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# compare_safetensors.py A B TOL: every tensor of A and B (float32 safetensors, same names and
# shapes) has max |a - b| / max |b| <= TOL; prints the worst ratio per tensor, exits 1 otherwise.
# Standard library only (no numpy), for the integration tests.
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, expected F32")
        a, b = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack(f"<{(b - a) // 4}f", body[a:b]))
    return out


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        raise SystemExit(f"tensor names differ: {sorted(a)} vs {sorted(b)}")
    bad = 0
    for name in sorted(a):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            raise SystemExit(f"{name}: shape {sa} vs {sb}")
        scale = max(max(abs(x) for x in vb), 1e-12)
        worst = max(abs(x - y) for x, y in zip(va, vb)) / scale
        print(f"{name}: max |a-b|/max|b| = {worst:.3g}")
        bad += worst > tol
    sys.exit(1 if bad else 0)


main()
