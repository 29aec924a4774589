#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""idx_head.py N SRC DST: the first N items of the IDX file SRC (gzip or plain) as a gzipped IDX
file DST (all of them when SRC holds fewer). Used by tests/integration/lib.sh and bench/."""
import gzip
import struct
import sys

n, src, dst = int(sys.argv[1]), sys.argv[2], sys.argv[3]
raw = (gzip.open if src.endswith(".gz") else open)(src, "rb").read()
rank = raw[3]
dims = list(struct.unpack(">%dI" % rank, raw[4:4 + 4 * rank]))
item = len(raw[4 + 4 * rank:]) // dims[0]
dims[0] = min(n, dims[0])
with gzip.open(dst, "wb", compresslevel=1) as f:
    f.write(raw[:4] + struct.pack(">%dI" % rank, *dims))
    f.write(raw[4 + 4 * rank:4 + 4 * rank + dims[0] * item])
