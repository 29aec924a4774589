/* SPDX-License-Identifier: MIT */
/*
 * repro.c — the reduction leaves and canonical tree of the mesh_invariant mode (mt_repro.h).
 * Tests: tests/unit/test_repro.c.
 */
#include "repro/mt_repro.h"

#include <stdio.h>

int mt_repro_leaves(size_t batch)
{
    int l = 1;
    while (l < MT_REPRO_MAX_LEAVES && batch % (size_t)(2 * l) == 0)
        l *= 2;
    return l;
}

bool mt_repro_keeps_bits(size_t batch, int p)
{
    int l = mt_repro_leaves(batch);
    return p >= 1 && (p & (p - 1)) == 0 && l % p == 0;
}

void mt_repro_leaf_range(size_t batch, size_t n, int leaf, size_t *start, size_t *len)
{
    size_t r = batch / (size_t)mt_repro_leaves(batch), a = (size_t)leaf * r, b = a + r;
    a = a < n ? a : n;
    b = b < n ? b : n;
    *start = a;
    *len = b - a;
}

void mt_repro_tree_fold(float *const *leaves, int count, size_t n)
{
    for (int d = 1; d < count; d *= 2)
        for (int v = 0; v + d < count; v += 2 * d) {
            float *restrict a = leaves[v];
            const float *restrict b = leaves[v + d];
            for (size_t e = 0; e < n; e++)
                a[e] = a[e] + b[e];
        }
}

mt_code mt_repro_check_mesh(size_t batch, int p, mt_err *err)
{
    int l = mt_repro_leaves(batch);
    char sizes[64];
    int at = 0;

    if (mt_repro_keeps_bits(batch, p))
        return MT_OK;
    for (int k = 1; k <= l; k *= 2)
        at += snprintf(sizes + at, sizeof(sizes) - (size_t)at, "%s%d", k > 1 ? ", " : "", k);
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "reproducibility: \"mesh_invariant\" needs the batch dimension's size (%d) "
                      "to be a power of two dividing the %d leaves of batch_size %zu (sizes that "
                      "keep the bits: %s; a batch_size that is a multiple of 8 allows 1, 2, 4, 8)",
                      p, l, batch, sizes);
}
