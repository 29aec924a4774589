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

/* Whether splitting n (a batch, a kernel axis) over p keeps the bits; if not, *l = its leaves
 * and sizes = the sizes that do ("1, 2, 4" for 4 leaves), for the message. */
static bool split_keeps(size_t n, int p, int *l, char sizes[64])
{
    int at = 0;
    *l = mt_repro_leaves(n);
    if (mt_repro_keeps_bits(n, p))
        return true;
    sizes[0] = '\0';
    for (int k = 1; k <= *l && at < 64; k *= 2)
        at += snprintf(sizes + at, 64 - (size_t)at, "%s%d", k > 1 ? ", " : "", k);
    return false;
}

mt_code mt_repro_check_mesh(size_t batch, int p, mt_err *err)
{
    int l;
    char sizes[64];

    if (split_keeps(batch, p, &l, sizes))
        return MT_OK;
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
    a->n = a->cap = n;
    a->count = count;
    return MT_OK;
}

void mt_repro_acc_reset(mt_repro_acc *a, size_t n)
{
    a->n = n < a->cap ? n : a->cap;
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
static void wb_reset(const float *dw, const float *db, mt_repro_acc *aw, mt_repro_acc *ab,
                     size_t nw, size_t nb)
{
    if (dw != NULL)
        mt_repro_acc_reset(aw, nw);
    if (db != NULL)
        mt_repro_acc_reset(ab, nb);
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
                            size_t in, size_t out, int kl)
{
    mt_repro_gemm(y, out, x, in, 1, w, out, b, rows, out, in, kl);
}

/* out[j] = the sum over rows of a[i, j] in row order (float), for a (rows, cols). */
static void col_chain(float *out, const float *a, size_t rows, size_t cols)
{
    memset(out, 0, cols * sizeof(float));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            out[j] = out[j] + a[i * cols + j];
}

void mt_repro_dense_backward(float *dx, float *dw, float *db, float *wt, const float *dy,
                             const float *x, const float *w, size_t rows, size_t r, int leaves,
                             size_t in, size_t out, int jl, mt_repro_acc *acc_w,
                             mt_repro_acc *acc_b)
{
    if (dx != NULL && rows > 0) {
        for (size_t k = 0; k < in; k++)
            for (size_t j = 0; j < out; j++)
                wt[j * in + k] = w[k * out + j];
        mt_repro_gemm(dx, in, dy, out, 1, wt, in, NULL, rows, in, out, jl);
    }
    /* dw(k, j): per leaf the chain over its rows of x(row, k) * dy(row, j), the leaves folded in
     * the canonical tree. With every leaf whole that is one product whose chains are the leaves
     * (one pass over dw); a short batch's short or empty leaves go through the accumulator. */
    if (dw != NULL && rows == (size_t)leaves * r) {
        mt_repro_gemm(dw, out, x, 1, in, dy, out, NULL, in, out, rows, leaves);
        dw = NULL;
    }
    wb_reset(dw, db, acc_w, acc_b, in * out, out);
    for (int i = 0; i < leaves; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        /* an empty leaf still pushes its zeros: the tree's shape is the same on every mesh */
        if (dw != NULL)
            mt_repro_gemm(mt_repro_acc_slot(acc_w), out, x + a * in, 1, in, dy + a * out, out, NULL,
                          in, out, len, 1);
        if (db != NULL)
            col_chain(mt_repro_acc_slot(acc_b), dy + a * out, len, out);
        wb_push(dw, db, acc_w, acc_b);
    }
    wb_result(dw, db, acc_w, acc_b, in * out, out);
}

mt_code mt_repro_check_split(int layer, const char *name, int axis, size_t width, const char *dim,
                             int f, mt_err *err)
{
    int l;
    char sizes[64];

    if (split_keeps(width, f, &l, sizes))
        return MT_OK;
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" needs mesh "
                      "dimension '%s' (size %d), which splits the kernel's axis %d (%zu wide), to "
                      "be a power of two dividing its %d leaves (sizes that keep the bits: %s)",
                      layer, name, dim, f, axis, width, l, sizes);
}

/* ------------------------------------------------------------------ batch norm */

void mt_repro_bn_sum(float *out, const float *x, size_t rows, size_t r, int leaves, size_t c,
                     mt_repro_acc *acc)
{
    mt_repro_acc_reset(acc, c);
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
    mt_repro_acc_reset(acc, c);
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

    mt_repro_acc_reset(acc, 2 * c);
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
    wb_reset(dw, db, acc_w, acc_b, nw, g->f);
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
