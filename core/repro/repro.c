/* SPDX-License-Identifier: MIT */
/*
 * repro.c — the reduction leaves and canonical tree of the mesh_invariant mode (mt_repro.h).
 * Tests: tests/unit/test_repro.c.
 */
#include "repro/mt_repro.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "tensor/mt_tensor.h"

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

/* ------------------------------------------------------------------ streaming tree */

mt_code mt_repro_acc_init(mt_repro_acc *a, int count, size_t n, mt_err *err)
{
    int depth = 1;

    memset(a, 0, sizeof(*a));
    while ((1 << (depth - 1)) < count)
        depth++;
    a->mem = mt_calloc((size_t)depth * (n > 0 ? n : 1), sizeof(float));
    if (a->mem == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "leaf tree: out of memory (%d x %zu floats)",
                          depth, n);
    a->n = n;
    a->count = count;
    return MT_OK;
}

void mt_repro_acc_reset(mt_repro_acc *a)
{
    a->pushed = 0;
    a->top = 0;
}

float *mt_repro_acc_slot(mt_repro_acc *a)
{
    return a->mem + (size_t)a->top * a->n;
}

void mt_repro_acc_push(mt_repro_acc *a)
{
    a->size[a->top++] = 1;
    a->pushed++;
    while (a->top >= 2 && a->size[a->top - 1] == a->size[a->top - 2]) {
        float *restrict l = a->mem + (size_t)(a->top - 2) * a->n;
        const float *restrict rt = a->mem + (size_t)(a->top - 1) * a->n;
        for (size_t e = 0; e < a->n; e++)
            l[e] = l[e] + rt[e];
        a->size[a->top - 2] *= 2;
        a->top--;
    }
}

const float *mt_repro_acc_result(const mt_repro_acc *a)
{
    return a->mem;
}

void mt_repro_acc_free(mt_repro_acc *a)
{
    mt_free(a->mem);
    memset(a, 0, sizeof(*a));
}

/* ------------------------------------------------------------------ dense */

/* Rows of leaf i of a device's rows: [*a, *a + *len). */
static void leaf_rows(size_t rows, size_t r, int i, size_t *a, size_t *len)
{
    size_t lo = (size_t)i * r, hi = lo + r;
    lo = lo < rows ? lo : rows;
    hi = hi < rows ? hi : rows;
    *a = lo;
    *len = hi - lo;
}

/* The weight and bias accumulators of a layer's backward (either output may be NULL: skipped). */
static void wb_reset(const float *dw, const float *db, mt_repro_acc *aw, mt_repro_acc *ab)
{
    if (dw != NULL)
        mt_repro_acc_reset(aw);
    if (db != NULL)
        mt_repro_acc_reset(ab);
}

static void wb_push(const float *dw, const float *db, mt_repro_acc *aw, mt_repro_acc *ab)
{
    if (dw != NULL)
        mt_repro_acc_push(aw);
    if (db != NULL)
        mt_repro_acc_push(ab);
}

static void wb_result(float *dw, float *db, const mt_repro_acc *aw, const mt_repro_acc *ab,
                      size_t nw, size_t nb)
{
    if (dw != NULL)
        memcpy(dw, mt_repro_acc_result(aw), nw * sizeof(float));
    if (db != NULL)
        memcpy(db, mt_repro_acc_result(ab), nb * sizeof(float));
}

void mt_repro_dense_forward(float *y, const float *x, const float *w, const float *b, size_t rows,
                            size_t r, int leaves, size_t in, size_t out)
{
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        if (len > 0)
            mt_dense_forward(y + a * out, x + a * in, w, b, len, in, out);
    }
}

void mt_repro_dense_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                             const float *w, size_t rows, size_t r, int leaves, size_t in,
                             size_t out, mt_repro_acc *acc_w, mt_repro_acc *acc_b)
{
    wb_reset(dw, db, acc_w, acc_b);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        /* an empty leaf still pushes its zeros: the tree's shape is the same on every mesh */
        mt_dense_backward(dx != NULL && len > 0 ? dx + a * in : NULL,
                          dw != NULL ? mt_repro_acc_slot(acc_w) : NULL,
                          db != NULL ? mt_repro_acc_slot(acc_b) : NULL, dy + a * out, x + a * in, w,
                          len, in, out);
        wb_push(dw, db, acc_w, acc_b);
    }
    wb_result(dw, db, acc_w, acc_b, in * out, out);
}

/* ------------------------------------------------------------------ batch norm */

void mt_repro_bn_sum(float *out, const float *x, size_t rows, size_t r, int leaves, size_t c,
                     mt_repro_acc *acc)
{
    mt_repro_acc_reset(acc);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        mt_bn_sum(mt_repro_acc_slot(acc), x + a * c, len, c);
        mt_repro_acc_push(acc);
    }
    memcpy(out, mt_repro_acc_result(acc), c * sizeof(float));
}

void mt_repro_bn_sqdev(float *out, const float *x, const float *mean, size_t rows, size_t r,
                       int leaves, size_t c, mt_repro_acc *acc)
{
    mt_repro_acc_reset(acc);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        mt_bn_sqdev(mt_repro_acc_slot(acc), x + a * c, mean, len, c);
        mt_repro_acc_push(acc);
    }
    memcpy(out, mt_repro_acc_result(acc), c * sizeof(float));
}

void mt_repro_bn_grad_sums(float *sum_dy, float *sum_dy_xhat, const float *dy, const float *xhat,
                           size_t rows, size_t r, int leaves, size_t c, mt_repro_acc *acc)
{
    const float *res;

    mt_repro_acc_reset(acc);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        float *slot = mt_repro_acc_slot(acc);
        leaf_rows(rows, r, i, &a, &len);
        mt_bn_grad_sums(slot, slot + c, dy + a * c, xhat + a * c, len, c);
        mt_repro_acc_push(acc);
    }
    res = mt_repro_acc_result(acc);
    memcpy(sum_dy, res, c * sizeof(float));
    memcpy(sum_dy_xhat, res + c, c * sizeof(float));
}

/* ------------------------------------------------------------------ conv2d */

/* Per-example sizes of a conv2d geometry: input, output, cols floats. */
static void conv_sizes(const mt_conv2d_geom *g, size_t *xin, size_t *yout, size_t *cols)
{
    mt_conv2d_geom one = *g;
    one.batch = 1;
    *xin = g->h * g->w * g->c;
    *yout = mt_conv2d_out_h(g) * mt_conv2d_out_w(g) * g->f;
    *cols = mt_conv2d_cols_size(&one);
}

void mt_repro_conv2d_forward(float *y, float *cols, const float *x, const float *w, const float *b,
                             const mt_conv2d_geom *g, size_t r, int leaves)
{
    size_t xs, ys, cs;

    conv_sizes(g, &xs, &ys, &cs);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        mt_conv2d_geom lg = *g;
        leaf_rows(g->batch, r, i, &a, &len);
        if (len == 0)
            continue;
        lg.batch = len;
        mt_conv2d_forward(y + a * ys, cols + a * cs, x + a * xs, w, b, &lg);
    }
}

void mt_repro_conv2d_backward(float *dx, float *dw, float *db, float *dcols, const float *dy,
                              const float *cols, const float *w, const mt_conv2d_geom *g, size_t r,
                              int leaves, mt_repro_acc *acc_w, mt_repro_acc *acc_b)
{
    size_t xs, ys, cs, nw = g->kh * g->kw * g->c * g->f;

    conv_sizes(g, &xs, &ys, &cs);
    wb_reset(dw, db, acc_w, acc_b);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        mt_conv2d_geom lg = *g;
        leaf_rows(g->batch, r, i, &a, &len);
        lg.batch = len;
        /* an empty leaf still pushes its zeros: the tree's shape is the same on every mesh */
        mt_conv2d_backward(dx != NULL && len > 0 ? dx + a * xs : NULL,
                           dw != NULL ? mt_repro_acc_slot(acc_w) : NULL,
                           db != NULL ? mt_repro_acc_slot(acc_b) : NULL,
                           dcols != NULL ? dcols + a * cs : NULL, dy + a * ys, cols + a * cs, w,
                           &lg);
        wb_push(dw, db, acc_w, acc_b);
    }
    wb_result(dw, db, acc_w, acc_b, nw, g->f);
}
