/* SPDX-License-Identifier: MIT */
/*
 * coll_bucket.c — gradient bucketing: many small tensors, one allreduce.
 *
 * The training step registers its gradient tensors once (borrowed pointers),
 * then per step packs them into one contiguous buffer, runs one
 * mt_coll_allreduce_sum over it and unpacks in place. The fused buffer grows
 * as tensors are added and is reused across steps. Used by one device thread.
 * Tests: tests/unit/test_coll.c (test_coll_bucket_*).
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "coll/mt_coll.h"

typedef struct bucket_entry {
    float *t; /* borrowed */
    size_t n;
} bucket_entry;

struct mt_coll_bucket {
    bucket_entry *e;
    size_t ne, cap;
    size_t total; /* sum of n */
    float *buf;   /* fused buffer, total floats (allocated lazily) */
    size_t buf_cap;
};

mt_code mt_coll_bucket_new(mt_coll_bucket **out, mt_err *err)
{
    *out = mt_calloc(1, sizeof(**out));
    if (*out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll bucket: out of memory");
    return MT_OK;
}

void mt_coll_bucket_free(mt_coll_bucket *b)
{
    if (b == NULL)
        return;
    mt_free(b->e);
    mt_free(b->buf);
    mt_free(b);
}

mt_code mt_coll_bucket_add(mt_coll_bucket *b, float *t, size_t n, mt_err *err)
{
    if (t == NULL && n > 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll bucket: NULL tensor of %zu floats", n);
    if (n > SIZE_MAX / sizeof(float) - b->total)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll bucket: size overflows");
    if (b->ne == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 16;
        bucket_entry *ne = mt_realloc(b->e, ncap * sizeof(*ne));
        if (ne == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll bucket: out of memory");
        b->e = ne;
        b->cap = ncap;
    }
    b->e[b->ne++] = (bucket_entry){t, n};
    b->total += n;
    return MT_OK;
}

size_t mt_coll_bucket_size(const mt_coll_bucket *b)
{
    return b->total;
}

mt_code mt_coll_bucket_allreduce(mt_coll_bucket *b, mt_coll_comm *comm, const mt_coll_group *group,
                                 const mt_coll_call *call, mt_err *err)
{
    mt_code rc;
    size_t off = 0;
    if (b->total > b->buf_cap) {
        float *nb = mt_realloc(b->buf, b->total * sizeof(float));
        if (nb == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                              "coll bucket: out of memory for %zu floats", b->total);
        b->buf = nb;
        b->buf_cap = b->total;
    }
    for (size_t i = 0; i < b->ne; i++) {
        if (b->e[i].n > 0)
            memcpy(b->buf + off, b->e[i].t, b->e[i].n * sizeof(float));
        off += b->e[i].n;
    }
    rc = mt_coll_allreduce_sum(comm, group, b->buf, b->total, call, err);
    if (rc != MT_OK)
        return rc;
    off = 0;
    for (size_t i = 0; i < b->ne; i++) {
        if (b->e[i].n > 0)
            memcpy(b->e[i].t, b->buf + off, b->e[i].n * sizeof(float));
        off += b->e[i].n;
    }
    return MT_OK;
}
