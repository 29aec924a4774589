/* SPDX-License-Identifier: MIT */
/*
 * digest.c — the Merkle digest of logical tensors (contract and byte format in mt_digest.h).
 *
 * How it works: blocks of the global row-major order are visited in order; a block lying inside
 * one shard's contiguous memory is hashed in place, any other is gathered row segment by row
 * segment (a "row" is a run along the last axis) from the shards that hold it into one block
 * buffer, the rest from the caller's fill. Leaves go onto a stack that merges equal-height
 * neighbours as they arrive and folds from the right at the end, which is the same tree as
 * pairing neighbours level by level with an odd last node going up unchanged (the format's
 * definition) without keeping a level in memory.
 *
 * Threading: none of its own; pure over caller memory. Tests: tests/unit/test_digest.c.
 */
#include "digest/mt_digest.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "digest/digest_int.h"

#define MAX_HEIGHT 64

typedef struct merkle {
    mt_digest node[MAX_HEIGHT];
    uint64_t size[MAX_HEIGHT]; /* leaves under node[i]: heights strictly decrease up the stack */
    int top;
    bool accel; /* SHA extensions (sha_x86.c) */
} merkle;

static void node_hash(bool accel, const mt_digest *l, const mt_digest *r, mt_digest *out)
{
    static const uint8_t tag = 0x01;
    const void *parts[3] = {&tag, l->b, r->b};
    size_t lens[3] = {1, MT_DIGEST_SIZE, MT_DIGEST_SIZE};
    mt_digest__sha256(accel, parts, lens, 3, out->b);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void merkle_push(merkle *m, const mt_digest *leaf)
{
    m->node[m->top] = *leaf;
    m->size[m->top++] = 1;
    while (m->top >= 2 && m->size[m->top - 1] == m->size[m->top - 2]) {
        node_hash(m->accel, &m->node[m->top - 2], &m->node[m->top - 1], &m->node[m->top - 2]);
        m->size[m->top - 2] *= 2;
        m->top--;
    }
}

/* An empty tree for tensor t (its name in the error), or NULL with err set. */
static merkle *merkle_new(const mt_digest_tensor_desc *t, mt_err *err)
{
    merkle *m = mt_malloc(sizeof(*m));
    if (m == NULL) {
        mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tensor '%s': digest: out of memory", t->name);
        return NULL;
    }
    m->top = 0;
    m->accel = mt_digest__has_sha_ni();
    return m;
}

static void merkle_root(merkle *m, mt_digest *out)
{
    while (m->top >= 2) {
        node_hash(m->accel, &m->node[m->top - 2], &m->node[m->top - 1], &m->node[m->top - 2]);
        m->top--;
    }
    *out = m->node[0];
}

static void leaf_hash(bool accel, uint64_t k, const void *bytes, size_t n, mt_digest *out)
{
    static const uint8_t tag = 0x00;
    uint8_t idx[8];
    const void *parts[3] = {&tag, idx, bytes};
    size_t lens[3] = {1, 8, n};
    put_le(idx, k, 8);
    mt_digest__sha256(accel, parts, lens, 3, out->b);
}

/* ------------------------------------------------------------------ gathering a block */

typedef struct gather {
    const mt_digest_tensor_desc *t;
    const mt_digest_shard *shards;
    int n;
    int rank; /* >= 1 (a scalar is seen as shape (1)) */
    int64_t shape[MT_DIGEST_MAX_RANK];
    mt_digest_fill_fn fill;
    void *fill_ctx;
    uint8_t *buf;  /* MT_DIGEST_BLOCK elements */
    uint8_t *mask; /* MT_DIGEST_BLOCK flags: element written */
} gather;

static int64_t shard_dim(const mt_digest_shard *s, const gather *g, int a, int off)
{
    if (g->t->rank == 0)
        return off ? 0 : 1;
    return off ? s->offsets[a] : s->local_shape[a];
}

/* The block's bytes in place when one shard holds it contiguously (rows of whole trailing axes). */
static const uint8_t *in_place(const gather *g, uint64_t g0, uint64_t cnt)
{
    uint64_t inner = 1;
    for (int a = 1; a < g->rank; a++)
        inner *= (uint64_t)g->shape[a];
    for (int i = 0; i < g->n; i++) {
        const mt_digest_shard *s = &g->shards[i];
        int whole = 1;
        for (int a = 1; a < g->rank && whole; a++)
            whole = shard_dim(s, g, a, 0) == g->shape[a];
        if (!whole)
            continue;
        uint64_t lo = (uint64_t)shard_dim(s, g, 0, 1) * inner;
        uint64_t hi = lo + (uint64_t)shard_dim(s, g, 0, 0) * inner;
        if (g0 >= lo && g0 + cnt <= hi)
            return (const uint8_t *)s->data + (g0 - lo) * g->t->elem_size;
    }
    return NULL;
}

/* Copy the part of global row r, columns [c0, c1), that shard s holds into the block at g0. */
static void copy_row(gather *g, const mt_digest_shard *s, uint64_t r, uint64_t c0, uint64_t c1,
                     uint64_t g0)
{
    int last = g->rank - 1;
    uint64_t rem = r, lrow = 0, lstride = 1;
    size_t es = g->t->elem_size;
    for (int a = last - 1; a >= 0; a--) {
        uint64_t c = rem % (uint64_t)g->shape[a];
        int64_t o = shard_dim(s, g, a, 1), l = shard_dim(s, g, a, 0);
        rem /= (uint64_t)g->shape[a];
        if ((int64_t)c < o || (int64_t)c >= o + l)
            return;
        lrow += (c - (uint64_t)o) * lstride;
        lstride *= (uint64_t)l;
    }
    int64_t o = shard_dim(s, g, last, 1), l = shard_dim(s, g, last, 0);
    uint64_t lo = c0 > (uint64_t)o ? c0 : (uint64_t)o;
    uint64_t hi = c1 < (uint64_t)(o + l) ? c1 : (uint64_t)(o + l);
    if (lo >= hi)
        return;
    uint64_t dst = r * (uint64_t)g->shape[last] + lo - g0;
    memcpy(g->buf + dst * es,
           (const uint8_t *)s->data + (lrow * (uint64_t)l + lo - (uint64_t)o) * es, (hi - lo) * es);
    memset(g->mask + dst, 1, hi - lo);
}

static mt_code gather_block(gather *g, uint64_t g0, uint64_t cnt, mt_err *err)
{
    uint64_t L = (uint64_t)g->shape[g->rank - 1];
    size_t es = g->t->elem_size;

    memset(g->mask, 0, cnt);
    for (uint64_t r = g0 / L; r * L < g0 + cnt; r++) {
        uint64_t c0 = r * L < g0 ? g0 - r * L : 0;
        uint64_t c1 = (r + 1) * L > g0 + cnt ? g0 + cnt - r * L : L;
        for (int i = g->n - 1; i >= 0; i--) /* the first shard holding an element wins */
            copy_row(g, &g->shards[i], r, c0, c1, g0);
    }
    for (uint64_t e = 0; e < cnt;) {
        uint64_t f = e;
        if (g->mask[e]) {
            e++;
            continue;
        }
        while (f < cnt && !g->mask[f])
            f++;
        if (g->fill == NULL)
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "tensor '%s': no shard holds element %llu", g->t->name,
                              (unsigned long long)(g0 + e));
        mt_code rc = g->fill(g->fill_ctx, g0 + e, f - e, g->buf + e * es, err);
        if (rc != MT_OK)
            return rc;
        e = f;
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ tensors */

static mt_code check_desc(const mt_digest_tensor_desc *t, uint64_t *count, mt_err *err)
{
    uint64_t c = 1;
    if (t->name == NULL || t->name[0] == '\0' || strlen(t->name) > 65535)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "digest: empty or over-long tensor name");
    if (t->dtype == NULL || t->dtype[0] == '\0' || strlen(t->dtype) > 255)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tensor '%s': empty or over-long dtype",
                          t->name);
    if (t->elem_size < 1 || t->elem_size > 8 || t->rank < 0 || t->rank > MT_DIGEST_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "tensor '%s': element size %zu or rank %d out of range", t->name,
                          t->elem_size, t->rank);
    for (int a = 0; a < t->rank; a++) {
        if (t->shape[a] < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "tensor '%s': axis %d is negative", t->name,
                              a);
        c *= (uint64_t)t->shape[a];
    }
    *count = c;
    return MT_OK;
}

static void tensor_node(bool accel, const mt_digest_tensor_desc *t, const mt_digest *tree,
                        mt_digest *out)
{
    uint8_t head[1 + 2], dt[1], rk[1], shape[8 * MT_DIGEST_MAX_RANK];
    size_t nl = strlen(t->name), dl = strlen(t->dtype);
    head[0] = 0x02;
    put_le(head + 1, nl, 2);
    dt[0] = (uint8_t)dl;
    rk[0] = (uint8_t)t->rank;
    for (int a = 0; a < t->rank; a++)
        put_le(shape + 8 * a, (uint64_t)t->shape[a], 8);
    const void *parts[7] = {head, t->name, dt, t->dtype, rk, shape, tree->b};
    size_t lens[7] = {3, nl, 1, dl, 1, 8 * (size_t)t->rank, MT_DIGEST_SIZE};
    mt_digest__sha256(accel, parts, lens, 7, out->b);
}

/* Check t and the shards, and set g up for them (no buffers yet); *count: t's elements. */
static mt_code gather_init(gather *g, const mt_digest_tensor_desc *t, const mt_digest_shard *shards,
                           int n, mt_digest_fill_fn fill, void *fill_ctx, uint64_t *count,
                           mt_err *err)
{
    mt_code rc = check_desc(t, count, err);

    if (rc != MT_OK)
        return rc;
    memset(g, 0, sizeof(*g));
    g->t = t, g->shards = shards, g->n = n < 0 ? 0 : n, g->fill = fill, g->fill_ctx = fill_ctx;
    g->rank = t->rank == 0 ? 1 : t->rank;
    for (int a = 0; a < g->rank; a++)
        g->shape[a] = t->rank == 0 ? 1 : t->shape[a];
    for (int i = 0; i < g->n; i++)
        for (int a = 0; a < g->rank; a++) {
            int64_t o = shard_dim(&shards[i], g, a, 1), l = shard_dim(&shards[i], g, a, 0);
            if (o < 0 || l < 0 || o + l > g->shape[a])
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "tensor '%s': shard %d axis %d [%lld, %lld) outside 0..%lld",
                                  t->name, i, a, (long long)o, (long long)(o + l),
                                  (long long)g->shape[a]);
        }
    return MT_OK;
}

static uint64_t leaf_count(uint64_t count)
{
    return count == 0 ? 1 : (count + MT_DIGEST_BLOCK - 1) / MT_DIGEST_BLOCK;
}

/* Leaf k of g's tensor (count elements) into *leaf: in place or gathered into g's buffer. */
static mt_code leaf_at(gather *g, bool accel, uint64_t count, uint64_t k, mt_digest *leaf,
                       mt_err *err)
{
    uint64_t g0 = k * MT_DIGEST_BLOCK;
    uint64_t cnt = count - g0 < MT_DIGEST_BLOCK ? count - g0 : MT_DIGEST_BLOCK;
    const uint8_t *bytes = cnt == 0 ? (const uint8_t *)"" : in_place(g, g0, cnt);

    if (bytes == NULL) {
        if (g->buf == NULL) {
            g->buf = mt_malloc(MT_DIGEST_BLOCK * g->t->elem_size);
            g->mask = mt_malloc(MT_DIGEST_BLOCK);
            if (g->buf == NULL || g->mask == NULL)
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tensor '%s': digest: out of memory",
                                  g->t->name);
        }
        mt_code rc = gather_block(g, g0, cnt, err);
        if (rc != MT_OK)
            return rc;
        bytes = g->buf;
    }
    leaf_hash(accel, k, bytes, cnt * g->t->elem_size, leaf);
    return MT_OK;
}

mt_code mt_digest_tensor(const mt_digest_tensor_desc *t, const mt_digest_shard *shards, int n,
                         mt_digest_fill_fn fill, void *fill_ctx, mt_digest *out, mt_err *err)
{
    gather g;
    merkle *m = NULL;
    uint64_t count = 0, blocks;
    mt_digest leaf, tree;
    mt_code rc = gather_init(&g, t, shards, n, fill, fill_ctx, &count, err);

    if (rc != MT_OK)
        return rc;
    m = merkle_new(t, err);
    if (m == NULL)
        return MT_RESOURCE_EXHAUSTED;
    blocks = leaf_count(count);
    for (uint64_t k = 0; rc == MT_OK && k < blocks; k++) {
        rc = leaf_at(&g, m->accel, count, k, &leaf, err);
        if (rc == MT_OK)
            merkle_push(m, &leaf);
    }
    if (rc == MT_OK) {
        merkle_root(m, &tree);
        tensor_node(m->accel, t, &tree, out);
    }
    mt_free(g.buf);
    mt_free(g.mask);
    mt_free(m);
    return rc;
}

mt_code mt_digest_leaf_count(const mt_digest_tensor_desc *t, uint64_t *out, mt_err *err)
{
    uint64_t count = 0;
    mt_code rc = check_desc(t, &count, err);

    if (rc == MT_OK)
        *out = leaf_count(count);
    return rc;
}

mt_code mt_digest_leaves(const mt_digest_tensor_desc *t, const mt_digest_shard *shards, int n,
                         mt_digest_fill_fn fill, void *fill_ctx, uint64_t first, uint64_t nleaves,
                         mt_digest *out, mt_err *err)
{
    gather g;
    uint64_t count = 0;
    bool accel = mt_digest__has_sha_ni();
    mt_code rc = gather_init(&g, t, shards, n, fill, fill_ctx, &count, err);

    if (rc != MT_OK)
        return rc;
    if (first > leaf_count(count) || nleaves > leaf_count(count) - first)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "tensor '%s': leaves [%llu, %llu) outside its %llu", t->name,
                          (unsigned long long)first, (unsigned long long)(first + nleaves),
                          (unsigned long long)leaf_count(count));
    for (uint64_t k = 0; rc == MT_OK && k < nleaves; k++)
        rc = leaf_at(&g, accel, count, first + k, &out[k], err);
    mt_free(g.buf);
    mt_free(g.mask);
    return rc;
}

mt_code mt_digest_tensor_from_leaves(const mt_digest_tensor_desc *t, const mt_digest *leaves,
                                     uint64_t nleaves, mt_digest *out, mt_err *err)
{
    uint64_t count = 0;
    merkle *m = NULL;
    mt_digest tree;
    mt_code rc = check_desc(t, &count, err);

    if (rc != MT_OK)
        return rc;
    if (nleaves != leaf_count(count))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tensor '%s': %llu leaves given, it has %llu",
                          t->name, (unsigned long long)nleaves,
                          (unsigned long long)leaf_count(count));
    m = merkle_new(t, err);
    if (m == NULL)
        return MT_RESOURCE_EXHAUSTED;
    for (uint64_t k = 0; k < nleaves; k++)
        merkle_push(m, &leaves[k]);
    merkle_root(m, &tree);
    tensor_node(m->accel, t, &tree, out);
    mt_free(m);
    return MT_OK;
}

mt_code mt_digest_tensor_whole(const mt_digest_tensor_desc *t, const void *data, mt_digest *out,
                               mt_err *err)
{
    int64_t zero[MT_DIGEST_MAX_RANK] = {0};
    mt_digest_shard s = {data, zero, t->shape};
    return mt_digest_tensor(t, &s, 1, NULL, NULL, out, err);
}

/* ------------------------------------------------------------------ roots */

typedef struct named {
    const char *name;
    const mt_digest *d;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

mt_code mt_digest_root(const char *const *names, const mt_digest *tensors, int n, mt_digest *out,
                       mt_err *err)
{
    named *v = NULL;
    uint8_t *msg = NULL;
    size_t len;

    if (n < 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "digest: negative tensor count");
    len = 5 + (size_t)n * MT_DIGEST_SIZE;
    msg = mt_malloc(len);
    if (msg == NULL || (n > 0 && (v = mt_malloc((size_t)n * sizeof(*v))) == NULL)) {
        mt_free(msg);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    }
    for (int i = 0; i < n; i++)
        v[i].name = names[i], v[i].d = &tensors[i];
    if (n > 1)
        qsort(v, (size_t)n, sizeof(*v), cmp_named); /* strcmp: unsigned bytes, as UTF-8 order */
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0) {
            mt_code rc = mt_err_set(err, MT_INVALID_ARGUMENT, "digest: tensor '%s' appears twice",
                                    v[i].name);
            mt_free(v);
            mt_free(msg);
            return rc;
        }
    msg[0] = 0x03;
    put_le(msg + 1, (uint64_t)n, 4);
    for (int i = 0; i < n; i++)
        memcpy(msg + 5 + (size_t)i * MT_DIGEST_SIZE, v[i].d->b, MT_DIGEST_SIZE);
    {
        const void *parts[1] = {msg};
        mt_digest__sha256(mt_digest__has_sha_ni(), parts, &len, 1, out->b);
    }
    mt_free(v);
    mt_free(msg);
    return MT_OK;
}

char *mt_digest_hex(const mt_digest *d, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < MT_DIGEST_SIZE; i++) {
        hex[2 * i] = digits[d->b[i] >> 4];
        hex[2 * i + 1] = digits[d->b[i] & 15];
    }
    hex[2 * MT_DIGEST_SIZE] = '\0';
    return hex;
}

/* Value of a hex digit of either case, -1 for anything else. */
static int hexval(char c)
{
    static const char digits[] = "0123456789abcdef";
    const char *p = c != '\0' ? strchr(digits, tolower((unsigned char)c)) : NULL;
    return p != NULL ? (int)(p - digits) : -1;
}

mt_code mt_digest_parse_hex(const char *hex, mt_digest *out, mt_err *err)
{
    mt_digest d;
    if (hex == NULL || strlen(hex) != 2 * MT_DIGEST_SIZE)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "digest: expected 64 hex digits");
    for (int i = 0; i < MT_DIGEST_SIZE; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "digest '%.64s': not a hex digit at %d",
                              hex, hi < 0 ? 2 * i : 2 * i + 1);
        d.b[i] = (uint8_t)(hi << 4 | lo);
    }
    *out = d;
    return MT_OK;
}

int mt_digest_equal(const mt_digest *a, const mt_digest *b)
{
    return memcmp(a->b, b->b, MT_DIGEST_SIZE) == 0;
}
