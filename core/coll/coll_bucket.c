/* SPDX-License-Identifier: MIT */
/*
 * coll_bucket.c — gradient bucketing: many small tensors, one allreduce.
 *
 * The training step registers its gradient tensors once (borrowed pointers),
 * then per step packs them into one contiguous buffer, runs one
 * mt_coll_allreduce_sum over it and unpacks in place. The fused buffer grows
 * as tensors are added and is reused across steps. Used by one device thread.
 * When the registered tensors lie back to back in memory in registration order
 * (t[i+1] == t[i] + n[i]: the training step's gradient arena, core/spmd), they
 * are the fused buffer: the collectives run on them directly, no pack, no
 * unpack (the same elements in the same order, so the same bits).
 * The sharded pair splits that allreduce for a sharded optimizer update (ZeRO-1):
 * mt_coll_bucket_reduce_scatter leaves this member the reduced chunk of the fused
 * elements (mt_coll_chunk_range's layout) in the fused buffer itself
 * (mt_coll_reduce_scatter_inplace: no copy of the input), mt_coll_bucket_allgather
 * then copies each member's chunk of another bucket's tensors to every member.
 * Tests: tests/unit/test_coll.c (test_coll_bucket_*).
 */
#include <stdbool.h>
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
    float *flat;  /* the registered tensors when they lie back to back (the fused buffer in
                     place), else NULL */
    float *buf;   /* fused buffer, total floats (allocated lazily); the allgather's output */
    size_t buf_cap;
    float *chunk; /* the allgather's chunk: ceil(total / members) floats, or NULL */
    size_t chunk_cap;
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
    mt_free(b->chunk);
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
    if (n > 0 && b->total == 0)
        b->flat = t;
    else if (n > 0 && b->flat != NULL && t != b->flat + b->total)
        b->flat = NULL; /* for good: a gap */
    b->total += n;
    return MT_OK;
}

size_t mt_coll_bucket_size(const mt_coll_bucket *b)
{
    return b->total;
}

/* *p grown to at least n floats (its capacity in *cap). */
static mt_code bucket_room(float **p, size_t *cap, size_t n, mt_err *err)
{
    float *nb;
    if (n <= *cap)
        return MT_OK;
    nb = mt_realloc(*p, n * sizeof(float));
    if (nb == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll bucket: out of memory for %zu floats",
                          n);
    *p = nb;
    *cap = n;
    return MT_OK;
}

/* Copy fused elements [off, off + len) between the registered tensors and flat[0..len): into
 * flat when pack, else out of it. */
static void bucket_copy(mt_coll_bucket *b, float *flat, size_t off, size_t len, bool pack)
{
    size_t at = 0;
    for (size_t i = 0; i < b->ne && at < off + len; at += b->e[i].n, i++) {
        size_t lo = at > off ? at : off, hi = at + b->e[i].n;
        if (hi > off + len)
            hi = off + len;
        if (lo >= hi)
            continue;
        if (pack)
            memcpy(flat + (lo - off), b->e[i].t + (lo - at), (hi - lo) * sizeof(float));
        else
            memcpy(b->e[i].t + (lo - at), flat + (lo - off), (hi - lo) * sizeof(float));
    }
}

mt_code mt_coll_bucket_allreduce(mt_coll_bucket *b, mt_coll_comm *comm, const mt_coll_group *group,
                                 const mt_coll_call *call, mt_err *err)
{
    mt_code rc;
    if (b->flat != NULL)
        return mt_coll_allreduce_sum(comm, group, b->flat, b->total, call, err);
    rc = bucket_room(&b->buf, &b->buf_cap, b->total, err);
    if (rc != MT_OK)
        return rc;
    bucket_copy(b, b->buf, 0, b->total, true);
    rc = mt_coll_allreduce_sum(comm, group, b->buf, b->total, call, err);
    if (rc != MT_OK)
        return rc;
    bucket_copy(b, b->buf, 0, b->total, false);
    return MT_OK;
}

/* This member's position in group, or an INVALID_ARGUMENT naming its rank. */
static mt_code bucket_pos(const mt_coll_comm *comm, const mt_coll_group *group, int *pos,
                          mt_err *err)
{
    int r = mt_coll_comm_rank(comm);
    for (int i = 0; i < group->size; i++)
        if (group->ranks[i] == r) {
            *pos = i;
            return MT_OK;
        }
    return mt_err_set(err, MT_INVALID_ARGUMENT, "coll bucket: rank %d is not in the group", r);
}

mt_code mt_coll_bucket_reduce_scatter(mt_coll_bucket *b, mt_coll_comm *comm,
                                      const mt_coll_group *group, const mt_coll_call *call,
                                      float **chunk, size_t *off, size_t *len, mt_err *err)
{
    int pos = 0;
    float *fused = b->flat;
    mt_code rc = bucket_pos(comm, group, &pos, err);

    if (rc == MT_OK && fused == NULL) {
        rc = bucket_room(&b->buf, &b->buf_cap, b->total > 0 ? b->total : 1, err);
        fused = b->buf;
        if (rc == MT_OK)
            bucket_copy(b, fused, 0, b->total, true);
    }
    if (rc != MT_OK)
        return rc;
    rc = mt_coll_reduce_scatter_inplace(comm, group, fused, b->total, call, err);
    if (rc != MT_OK)
        return rc;
    mt_coll_chunk_range(b->total, group->size, pos, off, len);
    *chunk = fused + *off;
    return MT_OK;
}

mt_code mt_coll_bucket_allgather(mt_coll_bucket *b, mt_coll_comm *comm, const mt_coll_group *group,
                                 const mt_coll_call *call, mt_err *err)
{
    int pos = 0;
    size_t p = (size_t)group->size, most = p > 0 ? (b->total + p - 1) / p : 0, off, len;
    bool direct = b->flat != NULL && most * p == b->total; /* each chunk lands where it belongs */
    mt_code rc = bucket_pos(comm, group, &pos, err);

    if (rc == MT_OK && !direct)
        rc = bucket_room(&b->buf, &b->buf_cap, most * p > 0 ? most * p : 1, err);
    if (rc == MT_OK)
        rc = bucket_room(&b->chunk, &b->chunk_cap, most > 0 ? most : 1, err);
    if (rc != MT_OK)
        return rc;
    mt_coll_chunk_range(b->total, group->size, pos, &off, &len);
    bucket_copy(b, b->chunk, off, len, true);
    if (len < most) /* the shorter chunks' last element: sent, never read */
        b->chunk[len] = 0.0f;
    if (direct) /* this member's chunk rewritten with its own values */
        return mt_coll_allgather(comm, group, b->chunk, b->flat, most, call, err);
    rc = mt_coll_allgather(comm, group, b->chunk, b->buf, most, call, err);
    if (rc != MT_OK)
        return rc;
    for (int c = 0; c < group->size; c++) {
        if (c == pos)
            continue;
        mt_coll_chunk_range(b->total, group->size, c, &off, &len);
        bucket_copy(b, b->buf + (size_t)c * most, off, len, false);
    }
    return MT_OK;
}
