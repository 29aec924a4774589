/* SPDX-License-Identifier: MIT */
/*
 * repro.c — the reduction leaves and canonical tree of the mesh_invariant mode (mt_repro.h).
 * Tests: tests/unit/test_repro.c.
 */
#include "repro/mt_repro.h"

#include <math.h>
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

mt_code mt_repro_check_elastic(size_t batch, uint32_t lo, uint32_t hi, mt_err *err)
{
    char bad[96] = "", sizes[64];
    int l, at = 0, nbad = 0;

    for (uint64_t b = lo; b <= hi && b <= batch; b++) {
        if (batch % b != 0 || mt_repro_keeps_bits(batch, (int)b))
            continue;
        if (at < (int)sizeof(bad) - 16)
            at += snprintf(bad + at, sizeof(bad) - (size_t)at, "%s%llu", nbad > 0 ? ", " : "",
                           (unsigned long long)b);
        else if (at < (int)sizeof(bad) - 4)
            at += snprintf(bad + at, sizeof(bad) - (size_t)at, ", ...");
        nbad++;
    }
    if (nbad == 0)
        return MT_OK;
    (void)split_keeps(batch, 0, &l, sizes);
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "elastic: reproducibility: \"mesh_invariant\" needs every replica count the "
                      "job may resume on (those in [%u, %u] dividing batch_size %zu) to keep the "
                      "bits; %s %s not (sizes that keep the bits: %s): narrow min_batch and "
                      "max_batch to them",
                      lo, hi, batch, bad, nbad > 1 ? "do" : "does", sizes);
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

/* Floats of x up to which dense's dW is one product over all leaves (1 MB). */
#define DW_ONE_PRODUCT (256u * 1024u)

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

/* out[j] += the sum over rows of a[i, j] in row order (float), for a (rows, cols): a chain
 * continued from out. */
static void col_more(float *out, const float *a, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            out[j] = out[j] + a[i * cols + j];
}

/* out[j] = the sum over rows of a[i, j] in row order (float), for a (rows, cols). */
static void col_chain(float *out, const float *a, size_t rows, size_t cols)
{
    memset(out, 0, cols * sizeof(float));
    col_more(out, a, rows, cols);
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
     * the canonical tree. With every leaf whole and x small that is one product whose chains are
     * the leaves (one pass over dw); a short batch's short or empty leaves, and an x larger than
     * a cache (a conv2d's im2col rows: each tile of that product would walk all of x), go through
     * the accumulator a leaf at a time. The same bits either way. */
    if (dw != NULL && rows == (size_t)leaves * r && rows * in <= DW_ONE_PRODUCT) {
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

/* INVALID_ARGUMENT unless splitting n over dim (size f) keeps the bits: "model.layers[i] (name):
 * ... needs mesh dimension 'dim' (size f), which <what>, to be a power of two dividing its
 * <l> <leaves> (sizes that keep the bits: ...)". */
static mt_code layer_split_check(int layer, const char *name, size_t n, const char *dim, int f,
                                 const char *what, const char *leaves, mt_err *err)
{
    int l;
    char sizes[64];

    if (split_keeps(n, f, &l, sizes))
        return MT_OK;
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" needs mesh "
                      "dimension '%s' (size %d), which %s, to be a power of two dividing its %d "
                      "%s (sizes that keep the bits: %s)",
                      layer, name, dim, f, what, l, leaves, sizes);
}

mt_code mt_repro_check_split(int layer, const char *name, int axis, size_t width, const char *dim,
                             int f, mt_err *err)
{
    char what[64];
    snprintf(what, sizeof(what), "splits the kernel's axis %d (%zu wide)", axis, width);
    return layer_split_check(layer, name, width, dim, f, what, "leaves", err);
}

mt_code mt_repro_check_bands(int layer, const char *name, size_t rows, const char *dim, int bands,
                             mt_err *err)
{
    char what[64];
    snprintf(what, sizeof(what), "cuts the image's %zu rows into height bands", rows);
    return layer_split_check(layer, name, rows, dim, bands, what, "height leaves", err);
}

mt_code mt_repro_check_seq(size_t positions, const char *dim, int s, mt_err *err)
{
    int half = mt_repro_leaves(positions) / 2, at = 0;
    char sizes[64];

    if (s == 1 || (half > 0 && s >= 1 && half % s == 0 && (s & (s - 1)) == 0))
        return MT_OK;
    for (int k = 1; k <= (half > 1 ? half : 1) && at < 64; k *= 2)
        at += snprintf(sizes + at, 64 - (size_t)at, "%s%d", k > 1 ? ", " : "", k);
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "input_layout[1]: reproducibility: \"mesh_invariant\" needs mesh dimension "
                      "'%s' (size %d), which splits the %zu positions into zig-zag blocks, to be a "
                      "power of two dividing half their %d position leaves (sizes that keep the "
                      "bits: %s)",
                      dim, s, positions, 2 * half > 0 ? 2 * half : 1, sizes);
}

/* ------------------------------------------------------------------ height leaves */

/* The first row (of an example's hrows) of local height or position leaf j of hl rows. */
static size_t hleaf_row(const mt_repro_bands *hb, size_t hl, int j)
{
    size_t u = (size_t)j / 2;
    if (!hb->zig || hb->lh == 1)
        return (size_t)j * hl;
    return j % 2 == 0 ? u * hl : hb->hrows / 2 + ((size_t)hb->lh / 2 - 1 - u) * hl;
}

size_t mt_repro_bands_row(const mt_repro_bands *hb, int j)
{
    return hleaf_row(hb, hb->hrows / (size_t)hb->lh, j);
}

/* The end of a batch leaf's height leaves (pushed into hb->acc): the bands' allreduce of their
 * fold (n floats, the top of the height tree), left in hb->acc->mem (its result). */
static mt_code hleaf_done(const mt_repro_bands *hb, size_t n)
{
    return hb->reduce != NULL ? hb->reduce(hb->ctx, hb->acc->mem, n) : MT_OK;
}

/* Per-feature double sums (rounded to float into o1, o2) over the rows [off, off + len) of ne
 * examples of `stride` rows each: of x (y, mean NULL), of (x - mean)^2, or of x and x * y. The
 * arithmetic of core/tensor's mt_bn_sum, mt_bn_sqdev and mt_bn_grad_sums over those rows. */
static void hleaf_sums(float *o1, float *o2, const float *x, const float *y, const float *mean,
                       size_t ne, size_t stride, size_t off, size_t len, size_t c)
{
    enum { W = 64 };
    double a[W], b[W];

    for (size_t j0 = 0; j0 < c; j0 += W) {
        size_t w = c - j0 < W ? c - j0 : W;
        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        for (size_t e = 0; e < ne; e++)
            for (size_t rr = 0; rr < len; rr++) {
                size_t row = e * stride + off + rr;
                const float *xr = x + row * c + j0;
                if (y != NULL) {
                    const float *yr = y + row * c + j0;
                    for (size_t j = 0; j < w; j++) {
                        a[j] += xr[j];
                        b[j] += (double)xr[j] * yr[j];
                    }
                } else if (mean != NULL) {
                    for (size_t j = 0; j < w; j++) {
                        double d = (double)xr[j] - (double)mean[j0 + j];
                        a[j] += d * d;
                    }
                } else {
                    for (size_t j = 0; j < w; j++)
                        a[j] += xr[j];
                }
            }
        for (size_t j = 0; j < w; j++) {
            o1[j0 + j] = (float)a[j];
            if (o2 != NULL)
                o2[j0 + j] = (float)b[j];
        }
    }
}

mt_code mt_repro_bn_sums_h(float *out, float *out2, const float *x, const float *y,
                           const float *mean, size_t rows, size_t r, int leaves, size_t c,
                           const mt_repro_bands *hb, mt_repro_acc *acc)
{
    size_t n = y != NULL ? 2 * c : c, hl = hb->hrows / (size_t)hb->lh;
    const float *res;
    mt_code rc = MT_OK;

    if (hb->lh == 1 && hb->reduce == NULL) { /* one height leaf: one sum per batch leaf */
        if (y != NULL)
            mt_repro_bn_grad_sums(out, out2, x, y, rows, r, leaves, c, acc);
        else if (mean != NULL)
            mt_repro_bn_sqdev(out, x, mean, rows, r, leaves, c, acc);
        else
            mt_repro_bn_sum(out, x, rows, r, leaves, c, acc);
        return MT_OK;
    }
    mt_repro_acc_reset(acc, n);
    for (int i = 0; i < leaves && rc == MT_OK; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        mt_repro_acc_reset(hb->acc, n);
        for (int j = 0; j < hb->lh; j++) {
            float *slot = mt_repro_acc_slot(hb->acc);
            hleaf_sums(slot, y != NULL ? slot + c : NULL, x + a * c, y != NULL ? y + a * c : NULL,
                       mean, len / hb->hrows, hb->hrows, hleaf_row(hb, hl, j), hl, c);
            mt_repro_acc_push(hb->acc);
        }
        rc = hleaf_done(hb, n);
        memcpy(mt_repro_acc_slot(acc), mt_repro_acc_result(hb->acc), n * sizeof(float));
        mt_repro_acc_push(acc);
    }
    if (rc != MT_OK)
        return rc;
    res = mt_repro_acc_result(acc);
    memcpy(out, res, c * sizeof(float));
    if (out2 != NULL)
        memcpy(out2, res + c, c * sizeof(float));
    return MT_OK;
}

void mt_repro_pool_sums(float *out, const float *x, size_t batch, size_t hrows, size_t c, int lh)
{
    size_t hl = hrows / (size_t)lh;
    float part[MT_REPRO_MAX_LEAVES];

    for (size_t b = 0; b < batch; b++)
        for (size_t j = 0; j < c; j++) {
            for (int t = 0; t < lh; t++) {
                const float *xt = x + (b * hrows + (size_t)t * hl) * c + j;
                double s = 0.0;
                for (size_t rr = 0; rr < hl; rr++)
                    s += xt[rr * c];
                part[t] = (float)s;
            }
            for (int d = 1; d < lh; d *= 2)
                for (int v = 0; v + d < lh; v += 2 * d)
                    part[v] = part[v] + part[v + d];
            out[b * c + j] = part[0];
        }
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

/* ------------------------------------------------------------------ layer norm's rows */

void mt_repro_row_sums(float *out, float *out2, const float *x, const float *sub, const float *w,
                       const float *h, size_t rows, size_t c, int kl)
{
    size_t cl = c / (size_t)kl;
    float p1[MT_REPRO_MAX_LEAVES], p2[MT_REPRO_MAX_LEAVES];

    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        for (int t = 0; t < kl; t++) {
            double a = 0.0, b = 0.0;
            for (size_t j = (size_t)t * cl; j < (size_t)(t + 1) * cl; j++) {
                double v = h != NULL ? (double)xr[j] * (w != NULL ? w[j] : 1.0f)
                                     : (double)xr[j] - (sub != NULL ? sub[r] : 0.0);
                a += h == NULL && sub != NULL ? v * v : v;
                b += h != NULL ? v * h[r * c + j] : 0.0;
            }
            p1[t] = (float)a;
            p2[t] = (float)b;
        }
        for (int d = 1; d < kl; d *= 2)
            for (int v = 0; v + d < kl; v += 2 * d) {
                p1[v] = p1[v] + p1[v + d];
                p2[v] = p2[v] + p2[v + d];
            }
        out[r] = p1[0];
        if (out2 != NULL)
            out2[r] = p2[0];
    }
}

/* ------------------------------------------------------------------ embedding */

/* The embedding's rows [a, a + len) added to the table rows [lo, lo + n) of their ids, in row
 * order. */
static void add_rows(float *slot, const float *ids, const float *dy, size_t a, size_t len,
                     size_t lo, size_t n, size_t c)
{
    for (size_t row = a; row < a + len; row++) {
        size_t id = (size_t)ids[row]; /* checked by the forward */
        if (id < lo || id >= lo + n)
            continue;
        for (size_t j = 0; j < c; j++)
            slot[(id - lo) * c + j] += dy[row * c + j];
    }
}

/* Leaf i's table gradient into slot (n x c): a tied head's dy^T . x over its leaf rows (one chain
 * per element from 0; h NULL: zeros), then the embedding's rows added in row order. */
static void table_leaf(float *slot, const mt_repro_head *h, const float *ids, const float *dy,
                       size_t rows, size_t r, int i, size_t lo, size_t n, size_t c)
{
    size_t a, len;
    if (h != NULL) {
        leaf_rows(h->rows, h->r, i, &a, &len);
        mt_repro_gemm(slot, c, h->dy + a * n, 1, n, h->x + a * c, c, NULL, n, c, len, 1);
    } else {
        memset(slot, 0, n * c * sizeof(float));
    }
    leaf_rows(rows, r, i, &a, &len);
    add_rows(slot, ids, dy, a, len, lo, n, c);
}

void mt_repro_embedding_grad(float *g, const float *ids, const float *dy, size_t rows, size_t r,
                             int leaves, size_t lo, size_t n, size_t c, mt_repro_acc *acc)
{
    mt_repro_tied_grad(g, NULL, ids, dy, rows, r, leaves, lo, n, c, acc);
}

void mt_repro_tied_grad(float *g, const mt_repro_head *h, const float *ids, const float *dy,
                        size_t rows, size_t r, int leaves, size_t lo, size_t n, size_t c,
                        mt_repro_acc *acc)
{
    mt_repro_acc_reset(acc, n * c);
    for (int i = 0; i < leaves; i++) {
        table_leaf(mt_repro_acc_slot(acc), h, ids, dy, rows, r, i, lo, n, c);
        mt_repro_acc_push(acc);
    }
    memcpy(g, mt_repro_acc_result(acc), n * c * sizeof(float));
}

/* One (batch leaf, position leaf) of the table's gradient: the head's dy^T . x as one chain per
 * element (from 0) over examples [e0, e0 + ne), each example's rows [off, off + hl) of its
 * hrows, then the embedding's rows of those examples added in the same order. */
static void table_leaf_h(float *slot, const mt_repro_head *h, const float *ids, const float *dy,
                         size_t e0, size_t ne, size_t hrows, size_t off, size_t hl, size_t lo,
                         size_t n, size_t c)
{
    memset(slot, 0, n * c * sizeof(float));
    for (size_t e = e0; h != NULL && e < e0 + ne; e++) {
        size_t row = e * hrows + off;
        mt_repro_gemm_more(slot, c, h->dy + row * n, 1, n, h->x + row * c, c, n, c, hl);
    }
    for (size_t e = e0; e < e0 + ne; e++)
        add_rows(slot, ids, dy, e * hrows + off, hl, lo, n, c);
}

mt_code mt_repro_tied_grad_h(float *g, const mt_repro_head *h, const float *ids, const float *dy,
                             size_t rows, size_t r, int leaves, size_t lo, size_t n, size_t c,
                             const mt_repro_bands *hb, mt_repro_acc *acc)
{
    size_t hl = hb->hrows / (size_t)hb->lh;
    mt_code rc = MT_OK;

    if (hb->lh == 1 && hb->reduce == NULL) { /* one position leaf: the rows in order */
        mt_repro_tied_grad(g, h, ids, dy, rows, r, leaves, lo, n, c, acc);
        return MT_OK;
    }
    mt_repro_acc_reset(acc, n * c);
    for (int i = 0; i < leaves && rc == MT_OK; i++) {
        size_t a, len;
        leaf_rows(rows, r, i, &a, &len);
        mt_repro_acc_reset(hb->acc, n * c);
        for (int j = 0; j < hb->lh; j++) {
            table_leaf_h(mt_repro_acc_slot(hb->acc), h, ids, dy, a / hb->hrows, len / hb->hrows,
                         hb->hrows, hleaf_row(hb, hl, j), hl, lo, n, c);
            mt_repro_acc_push(hb->acc);
        }
        rc = hleaf_done(hb, n * c);
        memcpy(mt_repro_acc_slot(acc), mt_repro_acc_result(hb->acc), n * c * sizeof(float));
        mt_repro_acc_push(acc);
    }
    if (rc == MT_OK)
        memcpy(g, mt_repro_acc_result(acc), n * c * sizeof(float));
    return rc;
}

/* ------------------------------------------------------------------ conv2d */

/* Rows of the im2col matrix (examples x output pixels) and its width (KH x KW x C). */
static void conv_rows(const mt_conv2d_geom *g, size_t *rows, size_t *k)
{
    *rows = g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g);
    *k = g->kh * g->kw * g->c;
}

/*
 * A band's col2im (mt_repro_conv2d_col2im_band): dcols' rows rw->heo output rows per example from
 * rw->go back into the input rows [rw->y0, rw->y0 + rw->hb) of dx, each pixel's entries summed in
 * row, then tap order from 0, as mt_conv2d_col2im sums the whole image (rw: the whole image).
 */
static void col2im_rows(float *dx, const float *dcols, const mt_conv2d_geom *g,
                        const mt_repro_rows *rw)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g), k = g->kh * g->kw * g->c;
    long pt = (long)mt_conv2d_pad_top(g), pl = (long)mt_conv2d_pad_left(g);
    long sh = (long)(g->sh ? g->sh : 1), sw = (long)(g->sw ? g->sw : 1);
    size_t oy1 = rw->go + rw->heo < oh ? rw->go + rw->heo : oh;
    long y0 = (long)rw->y0, y1 = y0 + (long)rw->hb;

    memset(dx, 0, g->batch * rw->hb * g->w * g->c * sizeof(float));
    for (size_t b = 0; b < g->batch; b++)
        for (size_t oy = rw->go; oy < oy1; oy++)
            for (size_t ox = 0; ox < ow; ox++) {
                const float *r = dcols + ((b * rw->heo + oy - rw->go) * ow + ox) * k;
                for (size_t ky = 0; ky < g->kh; ky++) {
                    long iy = (long)oy * sh + (long)ky - pt;
                    if (iy < y0 || iy >= y1)
                        continue;
                    for (size_t kx = 0; kx < g->kw; kx++) {
                        long ix = (long)ox * sw + (long)kx - pl;
                        const float *src = r + (ky * g->kw + kx) * g->c;
                        float *dst;
                        if (ix < 0 || ix >= (long)g->w)
                            continue;
                        dst = dx + ((b * rw->hb + (size_t)(iy - y0)) * g->w + (size_t)ix) * g->c;
                        for (size_t ci = 0; ci < g->c; ci++)
                            dst[ci] += src[ci];
                    }
                }
            }
}

/* The im2col columns and the kernel's rows stay in their own order (tap, channel): K-leaf t's
 * chain reads its cl channels at every tap, tap-major (mt_repro_gemm_runs), so no permuted copy of
 * either is made, and dcols, dw and db (a chain per element over the filters or the rows) come
 * out in that order too. */
void mt_repro_conv2d_forward(float *y, float *cols, float *wp, const float *x, const float *w,
                             const float *b, const mt_conv2d_geom *g, int lc)
{
    size_t rows, k, cl = g->c / (size_t)lc;
    mt_repro_runs rs = {cl, g->kh * g->kw, g->c, cl};

    (void)wp; /* no permuted kernel since the chains read the runs of their channels in place */
    conv_rows(g, &rows, &k);
    if (rows == 0 || g->f == 0)
        return;
    mt_conv2d_im2col(cols, x, g);
    if (lc == 1)
        mt_repro_dense_forward(y, cols, w, b, rows, k, g->f, 1);
    else
        mt_repro_gemm_runs(y, g->f, cols, k, 1, w, g->f, b, rows, g->f, &rs, lc);
}

void mt_repro_conv2d_dcols(float *dcols, float *scr, const float *dy, const float *w,
                           const mt_conv2d_geom *g, int lc, size_t rows, int jl)
{
    size_t k = g->kh * g->kw * g->c, f = g->f;

    (void)lc; /* dcols' columns in im2col's order whatever the K-leaves */
    if (rows == 0)
        return;
    for (size_t q = 0; q < k; q++) /* w^T */
        for (size_t j = 0; j < f; j++)
            scr[j * k + q] = w[q * f + j];
    mt_repro_gemm(dcols, k, dy, f, 1, scr, k, NULL, rows, k, f, jl);
}

/* dw and db of one batch leaf (examples [e0, e0 + ne)) with height leaves: hb->lh leaves of hr
 * rows of every example, each one chain over the examples, then the rows; folded in hb->acc and
 * the bands' allreduce ([dw | db] in its result). */
static mt_code conv_leaf_h(bool dw, bool db, const float *dy, const float *cols, size_t k, size_t f,
                           size_t ohw, size_t e0, size_t ne, const mt_repro_bands *hb)
{
    size_t hr = ohw / (size_t)hb->lh, nw = dw ? k * f : 0, n = nw + (db ? f : 0);

    mt_repro_acc_reset(hb->acc, n);
    for (int j = 0; j < hb->lh; j++) {
        float *slot = mt_repro_acc_slot(hb->acc);
        memset(slot, 0, n * sizeof(float));
        for (size_t e = e0; e < e0 + ne; e++) {
            size_t row = e * ohw + hleaf_row(hb, hr, j);
            if (dw)
                mt_repro_gemm_more(slot, f, cols + row * k, 1, k, dy + row * f, f, k, f, hr);
            if (db)
                col_more(slot + nw, dy + row * f, hr, f);
        }
        mt_repro_acc_push(hb->acc);
    }
    return hleaf_done(hb, n);
}

mt_code mt_repro_conv2d_wgrad(float *dw, float *db, float *scr, const float *dy, const float *cols,
                              const mt_conv2d_geom *g, int lc, size_t r, int leaves,
                              const mt_repro_bands *hb, mt_repro_acc *acc_w, mt_repro_acc *acc_b)
{
    size_t rows, k, f = g->f, ohw = mt_conv2d_out_h(g) * mt_conv2d_out_w(g);
    mt_code rc = MT_OK;

    (void)scr, (void)lc; /* dw's rows in im2col's order: the kernel's own */
    conv_rows(g, &rows, &k);
    if (hb == NULL || (hb->lh == 1 && hb->reduce == NULL)) {
        mt_repro_dense_backward(NULL, dw, db, NULL, dy, cols, NULL, rows, r * ohw, leaves, k, f, 1,
                                acc_w, acc_b);
    } else {
        wb_reset(dw, db, acc_w, acc_b, k * f, f);
        for (int i = 0; i < leaves && rc == MT_OK; i++) {
            size_t e0, ne;
            const float *res = mt_repro_acc_result(hb->acc);
            leaf_rows(g->batch, r, i, &e0, &ne);
            /* [dw | db] of the leaf in the height accumulator, then into the batch leaves' */
            rc = conv_leaf_h(dw != NULL, db != NULL, dy, cols, k, f, ohw, e0, ne, hb);
            if (dw != NULL)
                memcpy(mt_repro_acc_slot(acc_w), res, k * f * sizeof(float));
            if (db != NULL)
                memcpy(mt_repro_acc_slot(acc_b), res + (dw != NULL ? k * f : 0), f * sizeof(float));
            wb_push(dw, db, acc_w, acc_b);
        }
        if (rc != MT_OK)
            return rc;
        wb_result(dw, db, acc_w, acc_b, k * f, f);
    }
    return MT_OK;
}

void mt_repro_conv2d_backward(float *dcols, float *dw, float *db, float *scr, const float *dy,
                              const float *cols, const float *w, const mt_conv2d_geom *g, int lc,
                              size_t r, int leaves, int jl, mt_repro_acc *acc_w,
                              mt_repro_acc *acc_b)
{
    size_t rows, k;

    conv_rows(g, &rows, &k);
    if (dcols != NULL)
        mt_repro_conv2d_dcols(dcols, scr, dy, w, g, lc, rows, jl);
    (void)mt_repro_conv2d_wgrad(dw, db, scr, dy, cols, g, lc, r, leaves, NULL, acc_w, acc_b);
}

void mt_repro_conv2d_col2im(float *dx, const float *dcols, const mt_conv2d_geom *g, int lc)
{
    (void)lc;
    mt_conv2d_col2im(dx, dcols, g);
}

void mt_repro_conv2d_col2im_band(float *dx, const float *dcols, const mt_conv2d_geom *g, int lc,
                                 const mt_repro_rows *rw)
{
    (void)lc;
    col2im_rows(dx, dcols, g, rw);
}

/* ------------------------------------------------------------------ exact sum of squares */

#define SQ_CHUNK 12 /* bits per packed float */
#define SQ_WIDE  (MT_REPRO_SUMSQ_LIMBS + 1)

/* limb[0..n) += v * 2^p (v < 2^64; the carry stops inside the array by construction). */
static void add_shifted(uint64_t *limb, size_t n, uint64_t v, unsigned p)
{
    size_t q = p / 64;
    unsigned sh = p % 64;
    uint64_t lo = v << sh, hi = sh != 0 ? v >> (64 - sh) : 0, c;

    limb[q] += lo;
    c = limb[q] < lo;
    for (size_t k = q + 1; k < n && (hi != 0 || c != 0); k++) {
        uint64_t add = hi + c; /* hi < 2^63: no overflow */
        limb[k] += add;
        c = limb[k] < add;
        hi = 0;
    }
}

void mt_repro_sumsq_init(mt_repro_sumsq *s)
{
    memset(s, 0, sizeof(*s));
}

void mt_repro_sumsq_add(mt_repro_sumsq *s, const float *x, size_t n)
{
    /* bins by the float's biased exponent e: the squared significands (< 2^48) of the values
     * with that exponent, each worth 2^(2e - 2) in units of 2^-298; 65535 of them fit a bin */
    uint64_t bin[256];

    for (size_t done = 0; done < n;) {
        size_t m = n - done < 65535 ? n - done : 65535;
        memset(bin, 0, sizeof(bin));
        for (size_t i = 0; i < m; i++) {
            uint32_t u, e;
            uint64_t f;
            memcpy(&u, x + done + i, sizeof(u));
            e = (u >> 23) & 0xffu;
            f = u & 0x7fffffu;
            if (e == 255u) {
                s->nan += f != 0;
                s->inf += f == 0;
                continue;
            }
            f = e != 0 ? f | 0x800000u : f; /* subnormals: exponent 1, no hidden bit */
            bin[e != 0 ? e : 1] += f * f;
        }
        for (unsigned e = 1; e < 255; e++)
            if (bin[e] != 0)
                add_shifted(s->limb, MT_REPRO_SUMSQ_LIMBS, bin[e], 2 * e - 2);
        done += m;
    }
}

void mt_repro_sumsq_pack(const mt_repro_sumsq *s, float out[MT_REPRO_SUMSQ_FLOATS])
{
    for (unsigned i = 0; i < MT_REPRO_SUMSQ_FLOATS - 2; i++) {
        unsigned p = i * SQ_CHUNK, q = p / 64, sh = p % 64;
        uint64_t v = q < MT_REPRO_SUMSQ_LIMBS ? s->limb[q] >> sh : 0;
        if (sh > 64 - SQ_CHUNK && q + 1 < MT_REPRO_SUMSQ_LIMBS)
            v |= s->limb[q + 1] << (64 - sh);
        out[i] = (float)(v & ((1u << SQ_CHUNK) - 1));
    }
    out[MT_REPRO_SUMSQ_FLOATS - 2] = s->nan != 0 ? 1.0f : 0.0f;
    out[MT_REPRO_SUMSQ_FLOATS - 1] = s->inf != 0 ? 1.0f : 0.0f;
}

double mt_repro_sumsq_unpack(const float in[MT_REPRO_SUMSQ_FLOATS])
{
    uint64_t w[SQ_WIDE] = {0}, top;
    int k = SQ_WIDE - 1, bit;

    if (in[MT_REPRO_SUMSQ_FLOATS - 2] != 0.0f)
        return NAN;
    if (in[MT_REPRO_SUMSQ_FLOATS - 1] != 0.0f)
        return INFINITY;
    for (unsigned i = 0; i < MT_REPRO_SUMSQ_FLOATS - 2; i++)
        add_shifted(w, SQ_WIDE, (uint64_t)in[i], i * SQ_CHUNK);
    while (k > 0 && w[k] == 0)
        k--;
    if (w[k] == 0)
        return 0.0;
    /* the top 64 bits from the highest set bit (the rest truncated), scaled back */
    bit = 63 - __builtin_clzll(w[k]);
    top = bit == 63 ? w[k] : w[k] << (63 - bit);
    if (bit < 63 && k > 0)
        top |= w[k - 1] >> (bit + 1);
    return ldexp((double)top, k * 64 + bit - 63 - 298);
}
