/* SPDX-License-Identifier: MIT */
/*
 * test_repro.c — unit tests for core/repro (mt_repro.h): the leaf count of a batch, which
 * data-parallel sizes keep the bits, leaf ranges of full and short batches, the canonical tree,
 * and the claim the mesh_invariant design rests on: a device folding its own L/P consecutive
 * leaves and core/coll's allreduce over P = 1, 2, 4, 8 devices (the real collective, tree and
 * one-hop paths) give the canonical tree over all L = 8 leaves bit for bit — and an interleaved
 * assignment of leaves to devices does not; and that an sgemm of a fixed shape gives the same
 * bits wherever its operands lie.
 */
#include "mt_test.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/mt_coll.h"
#include "coll_test_util.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

#define L 8

static void test_repro_leaves_of_a_batch(void **state)
{
    static const struct {
        size_t batch;
        int leaves;
    } t[] = {{1, 1},  {2, 2},  {3, 1},  {4, 4},  {6, 2},   {8, 8},
             {12, 4}, {16, 8}, {32, 8}, {40, 8}, {100, 4}, {1024, 8}};
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (mt_repro_leaves(t[i].batch) != t[i].leaves)
            fail_msg("batch %zu: %d leaves, want %d", t[i].batch, mt_repro_leaves(t[i].batch),
                     t[i].leaves);
}

static void test_repro_sizes_that_keep_the_bits(void **state)
{
    mt_err err = {0};
    (void)state;
    for (int p = 1; p <= 16; p++) {
        bool want = p == 1 || p == 2 || p == 4 || p == 8;
        assert_int_equal(mt_repro_keeps_bits(32, p), want);
        assert_int_equal(mt_repro_keeps_bits(12, p), p == 1 || p == 2 || p == 4);
        assert_int_equal(mt_repro_keeps_bits(1, p), p == 1);
    }
    assert_false(mt_repro_keeps_bits(32, 0));
    assert_int_equal(mt_repro_check_mesh(32, 4, &err), MT_OK);
    assert_int_equal(mt_repro_check_mesh(32, 3, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg,
                        "reproducibility: \"mesh_invariant\" needs the batch dimension's size (3) "
                        "to be a power of two dividing the 8 leaves of batch_size 32 (sizes that "
                        "keep the bits: 1, 2, 4, 8; a batch_size that is a multiple of 8 allows "
                        "1, 2, 4, 8)");
    assert_int_equal(mt_repro_check_mesh(6, 4, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "size (4) to be a power of two dividing the 2 leaves of "
                                    "batch_size 6 (sizes that keep the bits: 1, 2;"));
}

/* An elastic range is valid iff every replica count in it that divides the batch keeps the bits. */
static void test_repro_elastic_sizes(void **state)
{
    mt_err err = {0};
    (void)state;
    assert_int_equal(mt_repro_check_elastic(64, 2, 4, &err), MT_OK);
    assert_int_equal(mt_repro_check_elastic(64, 1, 8, &err), MT_OK); /* 3, 5, 6, 7 never used */
    assert_int_equal(mt_repro_check_elastic(64, 2, 65536, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg,
                        "elastic: reproducibility: \"mesh_invariant\" needs every replica count "
                        "the job may resume on (those in [2, 65536] dividing batch_size 64) to "
                        "keep the bits; 16, 32, 64 do not (sizes that keep the bits: 1, 2, 4, 8): "
                        "narrow min_batch and max_batch to them");
    assert_int_equal(mt_repro_check_elastic(48, 2, 6, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "; 3, 6 do not (sizes that keep the bits: 1, 2, 4, 8)"));
    assert_int_equal(mt_repro_check_elastic(12, 3, 3, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "; 3 does not (sizes that keep the bits: 1, 2, 4)"));
}

static void test_repro_leaf_ranges(void **state)
{
    /* batch 32: 8 leaves of 4; a short last batch of 10 keeps R = 4 (4, 4, 2, then empty);
     * batch 6: 2 leaves of 3 */
    static const struct {
        size_t batch, n;
        int leaf;
        size_t start, len;
    } t[] = {{32, 32, 0, 0, 4}, {32, 32, 5, 20, 4}, {32, 32, 7, 28, 4}, {32, 10, 1, 4, 4},
             {32, 10, 2, 8, 2}, {32, 10, 5, 10, 0}, {32, 10, 7, 10, 0}, {6, 6, 1, 3, 3},
             {6, 4, 1, 3, 1},   {1, 1, 0, 0, 1}};
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t s, n;
        mt_repro_leaf_range(t[i].batch, t[i].n, t[i].leaf, &s, &n);
        if (s != t[i].start || n != t[i].len)
            fail_msg("batch %zu n %zu leaf %d: [%zu, +%zu), want [%zu, +%zu)", t[i].batch, t[i].n,
                     t[i].leaf, s, n, t[i].start, t[i].len);
    }
}

/* The tree written out by hand, on values whose sum shows the association. */
static void test_repro_tree_is_the_documented_order(void **state)
{
    float v[L] = {1e8f, 1.0f, -1e8f, 3.0f, 0.5f, 7.0f, -0.25f, 1e-3f}, w[L];
    float *p[L];
    (void)state;
    for (int count = 1; count <= L; count *= 2) {
        float want;
        memcpy(w, v, sizeof(v));
        for (int i = 0; i < L; i++)
            p[i] = &w[i];
        mt_repro_tree_fold(p, count, 1);
        if (count == 1)
            want = v[0];
        else if (count == 2)
            want = v[0] + v[1];
        else if (count == 4)
            want = (v[0] + v[1]) + (v[2] + v[3]);
        else
            want = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        if (memcmp(&w[0], &want, sizeof(float)) != 0)
            fail_msg("count %d: %.9g, documented tree %.9g", count, (double)w[0], (double)want);
    }
    /* the association shows: a left-to-right sum of the 8 values differs */
    float seq = 0.0f;
    for (int i = 0; i < L; i++)
        seq += v[i];
    memcpy(w, v, sizeof(v));
    mt_repro_tree_fold(p, L, 1);
    assert_true(memcmp(&seq, &w[0], sizeof(float)) != 0);
}

/*
 * What the per-leaf kernel calls rely on: an sgemm of one shape gives the same bits wherever its
 * operands lie (a leaf's rows sit at another offset on another mesh). Forward (y = x.W, M = the
 * leaf's rows) and weight gradient (dW = x^T.dy, K = the leaf's rows), operands moved by 1..15
 * floats. (A different M or N does change rows or columns on OpenBLAS 0.3.21: that is why the
 * calls are made per leaf; docs/reproducibility.md.)
 */
static void test_repro_gemm_same_shape_any_offset(void **state)
{
    static const size_t shapes[][3] = {{8, 48, 1200}, {1, 48, 1200}, {4, 2, 48}, {16, 128, 784}};
    (void)state;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        size_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], pad = 16;
        float *x = calloc(m * k + pad, sizeof(float)), *w = calloc(k * n + pad, sizeof(float));
        float *dy = calloc(m * n + pad, sizeof(float)), *y0 = calloc(m * n, sizeof(float));
        float *dw0 = calloc(k * n, sizeof(float)), *y = calloc(m * n + pad, sizeof(float));
        float *dw = calloc(k * n + pad, sizeof(float));
        for (size_t i = 0; i < m * k; i++)
            x[i] = ct_val(1, i, si);
        for (size_t i = 0; i < k * n; i++)
            w[i] = ct_val(2, i, si);
        for (size_t i = 0; i < m * n; i++)
            dy[i] = ct_val(3, i, si);
        mt_gemm(false, false, m, n, k, 1.0f, x, k, w, n, 0.0f, y0, n);
        mt_gemm(true, false, k, n, m, 1.0f, x, k, dy, n, 0.0f, dw0, n);
        for (size_t off = 1; off < pad; off += 2) {
            memmove(x + off, x + off - (off > 1 ? 2 : 1), m * k * sizeof(float));
            memmove(dy + off, dy + off - (off > 1 ? 2 : 1), m * n * sizeof(float));
            mt_gemm(false, false, m, n, k, 1.0f, x + off, k, w, n, 0.0f, y + off / 2, n);
            mt_gemm(true, false, k, n, m, 1.0f, x + off, k, dy + off, n, 0.0f, dw + off / 2, n);
            if (memcmp(y + off / 2, y0, m * n * sizeof(float)) != 0 ||
                memcmp(dw + off / 2, dw0, k * n * sizeof(float)) != 0)
                fail_msg("m=%zu n=%zu k=%zu: other bits with the operands moved by %zu floats", m,
                         n, k, off);
        }
        free(x);
        free(w);
        free(dy);
        free(y0);
        free(dw0);
        free(y);
        free(dw);
    }
}

/* ---------------------------------------------------------------- device subtrees + allreduce */

typedef struct dev_job {
    mt_coll_world *w;
    int rank, p;
    const int *group;
    float *buf;
    size_t n;
    mt_code rc;
    mt_err err;
} dev_job;

static void *dev_main(void *arg)
{
    dev_job *j = arg;
    mt_coll_group g = {j->group, j->p};
    j->rc =
        mt_coll_allreduce_sum(mt_coll_world_comm(j->w, j->rank), &g, j->buf, j->n, NULL, &j->err);
    return NULL;
}

/* leaves[i][e] for L leaves of n floats (varied magnitudes and signs). */
static float **make_leaves(size_t n)
{
    float **lv = calloc(L, sizeof(float *));
    for (int i = 0; i < L; i++) {
        lv[i] = calloc(n + 1, sizeof(float));
        for (size_t e = 0; e < n; e++)
            lv[i][e] = ct_val(i, e, 18);
    }
    return lv;
}

static void free_leaves(float **lv)
{
    for (int i = 0; i < L; i++)
        free(lv[i]);
    free(lv);
}

/*
 * Device r of p folds leaves own(r, 0..L/p-1) with mt_repro_tree_fold into sub[r]; sub[] are
 * then summed across the p devices by the real allreduce (direct_bytes: 0 = the halving tree,
 * large = the one-hop path) and by mt_coll_reference_allreduce. Both results are written to
 * out_real / out_ref. interleaved: device r owns leaves r, r+p, r+2p, ... instead of the block.
 */
static void device_sums(float **lv, size_t n, int p, bool interleaved, size_t direct_bytes,
                        float *out_real, float *out_ref)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w;
    dev_job jobs[L];
    pthread_t th[L];
    int group[L];
    float *sub[L] = {0};
    int per = L / p;

    for (int r = 0; r < p; r++) {
        float *mine[L];
        group[r] = r;
        for (int k = 0; k < per; k++) {
            int leaf = interleaved ? r + k * p : r * per + k;
            mine[k] = calloc(n + 1, sizeof(float));
            memcpy(mine[k], lv[leaf], n * sizeof(float));
        }
        mt_repro_tree_fold(mine, per, n);
        sub[r] = mine[0];
        for (int k = 1; k < per; k++)
            free(mine[k]);
    }
    mt_coll_reference_allreduce((const float *const *)sub, p, n, out_ref);
    o.direct_bytes = direct_bytes;
    assert_int_equal(mt_coll_world_new_local(p, &o, &w, NULL), MT_OK);
    for (int r = 0; r < p; r++) {
        jobs[r] = (dev_job){.w = w, .rank = r, .p = p, .group = group, .buf = sub[r], .n = n};
        assert_int_equal(pthread_create(&th[r], NULL, dev_main, &jobs[r]), 0);
    }
    for (int r = 0; r < p; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < p; r++) {
        if (jobs[r].rc != MT_OK)
            fail_msg("p=%d rank %d: %s", p, r, jobs[r].err.msg);
        if (n > 0 && memcmp(sub[r], sub[0], n * sizeof(float)) != 0)
            fail_msg("p=%d: rank %d ends with other bits than rank 0", p, r);
    }
    memcpy(out_real, sub[0], n * sizeof(float));
    for (int r = 0; r < p; r++)
        free(sub[r]);
    mt_coll_world_free(w);
}

static void test_repro_device_subtrees_and_allreduce_are_the_tree(void **state)
{
    static const size_t sizes[] = {1, 7, 97, 4099, 65537};
    (void)state;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        float **lv = make_leaves(n), **cp = make_leaves(n);
        float *want = calloc(n, sizeof(float)), *real = calloc(n, sizeof(float)),
              *ref = calloc(n, sizeof(float));
        mt_repro_tree_fold(cp, L, n); /* the serial canonical tree over the 8 leaves */
        memcpy(want, cp[0], n * sizeof(float));
        for (int p = 1; p <= L; p *= 2)
            for (int direct = 0; direct < 2; direct++) {
                device_sums(lv, n, p, false, direct ? (size_t)1 << 20 : 0, real, ref);
                if (memcmp(ref, want, n * sizeof(float)) != 0)
                    fail_msg("n=%zu p=%d: reference allreduce of the subtrees is not the tree", n,
                             p);
                if (memcmp(real, want, n * sizeof(float)) != 0)
                    fail_msg("n=%zu p=%d %s: allreduce of the subtrees is not the tree", n, p,
                             direct ? "one-hop" : "halving");
            }
        free_leaves(lv);
        free_leaves(cp);
        free(want);
        free(real);
        free(ref);
    }
}

/* The condition matters: devices holding interleaved leaves give other bits (p = 2, 4). */
static void test_repro_interleaved_leaves_are_not_the_tree(void **state)
{
    size_t n = 4099;
    float **lv = make_leaves(n), **cp = make_leaves(n);
    float *real = calloc(n, sizeof(float)), *ref = calloc(n, sizeof(float));
    (void)state;
    mt_repro_tree_fold(cp, L, n);
    for (int p = 2; p <= 4; p *= 2) {
        device_sums(lv, n, p, true, 0, real, ref);
        assert_memory_equal(real, ref, n * sizeof(float));
        if (memcmp(real, cp[0], n * sizeof(float)) == 0)
            fail_msg("p=%d: interleaved leaves gave the canonical bits on all %zu elements", p, n);
    }
    free_leaves(lv);
    free_leaves(cp);
    free(real);
    free(ref);
}

/* A device's first row and row count (in examples) of its block of leaves of a step of n. */
static void device_block(size_t batch, size_t n, int p, int d, size_t *s0, size_t *rows)
{
    int own = mt_repro_leaves(batch) / p;
    size_t a, len, b, blen;
    mt_repro_leaf_range(batch, n, d * own, &a, &len);
    mt_repro_leaf_range(batch, n, d * own + own - 1, &b, &blen);
    *s0 = a;
    *rows = b + blen - a;
}

/* Sum the p device subtrees sub[0..p) of m floats in the allreduce's order into out; free them. */
static void allreduce_free(float **sub, int p, size_t m, float *out)
{
    mt_coll_reference_allreduce((const float *const *)sub, p, m, out);
    for (int d = 0; d < p; d++)
        free(sub[d]);
}

/* One dense layer's step on P devices of a batch of `batch` examples (n present): y and dx
 * gathered in example order, dw and db the device subtrees summed by the allreduce's order. */
typedef struct dense_step {
    float *y, *dx, *dw, *db;
} dense_step;

static dense_step dense_on_mesh(size_t batch, size_t n, int p, const float *x, const float *w,
                                const float *b, const float *dy, size_t in, size_t out)
{
    int leaves = mt_repro_leaves(batch), own = leaves / p;
    size_t r = batch / (size_t)leaves;
    dense_step st = {calloc(n * out + 1, sizeof(float)), calloc(n * in + 1, sizeof(float)),
                     calloc(in * out, sizeof(float)), calloc(out, sizeof(float))};
    float *subw[L] = {0}, *subb[L] = {0}, *wt = calloc(in * out, sizeof(float));
    mt_repro_acc aw, ab;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_repro_acc_init(&aw, own, in * out, &err), MT_OK);
    assert_int_equal(mt_repro_acc_init(&ab, own, out, &err), MT_OK);
    for (int d = 0; d < p; d++) {
        size_t s0, rows;
        device_block(batch, n, p, d, &s0, &rows);
        subw[d] = calloc(in * out, sizeof(float));
        subb[d] = calloc(out, sizeof(float));
        mt_repro_dense_forward(st.y + s0 * out, x + s0 * in, w, b, rows, in, out,
                               mt_repro_leaves(in));
        mt_repro_dense_backward(st.dx + s0 * in, subw[d], subb[d], wt, dy + s0 * out, x + s0 * in,
                                w, rows, r, own, in, out, mt_repro_leaves(out), &aw, &ab);
    }
    free(wt);
    allreduce_free(subw, p, in * out, st.dw);
    allreduce_free(subb, p, out, st.db);
    mt_repro_acc_free(&aw);
    mt_repro_acc_free(&ab);
    return st;
}

static void dense_step_free(dense_step *st)
{
    free(st->y);
    free(st->dx);
    free(st->dw);
    free(st->db);
}

/*
 * The dense layer's leaf kernels give the same bits on P = 1, 2, 4, 8 devices (batch 32: 8
 * leaves of 4; a short batch of 10 examples: leaves 4, 4, 2 and five empty ones; batch 8: 8
 * leaves of one example) for y, dx, dw and db, and the streaming tree is the canonical fold.
 */
static void test_repro_dense_same_bits_on_every_mesh(void **state)
{
    static const size_t cases[][2] = {{32, 32}, {32, 10}, {8, 8}};
    const size_t in = 1200, out = 48;
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        size_t batch = cases[ci][0], n = cases[ci][1];
        float *x = calloc(n * in, sizeof(float)), *w = calloc(in * out, sizeof(float));
        float *b = calloc(out, sizeof(float)), *dy = calloc(n * out, sizeof(float));
        for (size_t i = 0; i < n * in; i++)
            x[i] = ct_val(4, i, ci);
        for (size_t i = 0; i < in * out; i++)
            w[i] = ct_val(5, i, ci);
        for (size_t i = 0; i < out; i++)
            b[i] = ct_val(6, i, ci);
        for (size_t i = 0; i < n * out; i++)
            dy[i] = ct_val(7, i, ci);
        dense_step one = dense_on_mesh(batch, n, 1, x, w, b, dy, in, out);
        for (int p = 2; p <= L; p *= 2) {
            dense_step m = dense_on_mesh(batch, n, p, x, w, b, dy, in, out);
            if (memcmp(m.y, one.y, n * out * sizeof(float)) != 0 ||
                memcmp(m.dx, one.dx, n * in * sizeof(float)) != 0 ||
                memcmp(m.dw, one.dw, in * out * sizeof(float)) != 0 ||
                memcmp(m.db, one.db, out * sizeof(float)) != 0)
                fail_msg("batch %zu (%zu present), %d devices: other bits than one device", batch,
                         n, p);
            dense_step_free(&m);
        }
        dense_step_free(&one);
        free(x);
        free(w);
        free(b);
        free(dy);
    }
}

static float *vals(size_t n, int rank, uint64_t seed)
{
    float *v = calloc(n + 1, sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = ct_val(rank, i, seed);
    return v;
}

/*
 * The canonical product (mt_repro_gemm): the AVX2 path and the portable one give the same bits;
 * any block of rows and columns computed alone, at another offset and stride, gives the same
 * bits as inside the whole product (what lets a model dimension split a dense layer's output
 * columns, and a data-parallel device compute its rows in one call); and a contraction split
 * over f = 2, 4, 8 devices, each folding its chains / f chains, summed by core/coll's allreduce
 * order, gives the whole contraction's bits (the bias added after, as the dense layer does).
 */
static void test_repro_gemm_canonical_any_block_any_split(void **state)
{
    const size_t m = 37, n = 53, k = 96;
    float *a = vals(m * k, 1, 3), *b = vals(k * n, 2, 3), *bias = vals(n, 3, 3);
    float *c = calloc(m * n, sizeof(float)), *r = calloc(m * n, sizeof(float));
    float *blk = calloc(m * n + 16, sizeof(float)), *cb = calloc(m * n, sizeof(float));
    (void)state;
    for (int chains = 1; chains <= L; chains *= 2) {
        mt_repro_gemm(c, n, a, k, 1, b, n, bias, m, n, k, chains);
        mt_repro_gemm_ref(r, n, a, k, 1, b, n, bias, m, n, k, chains);
        assert_memory_equal(c, r, m * n * sizeof(float));
        /* blocks: rows [i0, i1) x columns [j0, j1), written packed at an odd offset */
        static const size_t cuts[][4] = {
            {0, 1, 0, 1}, {5, 9, 3, 20}, {0, 37, 16, 32}, {30, 37, 0, 53}};
        for (size_t ci = 0; ci < sizeof(cuts) / sizeof(cuts[0]); ci++) {
            size_t i0 = cuts[ci][0], i1 = cuts[ci][1], j0 = cuts[ci][2], j1 = cuts[ci][3];
            size_t w = j1 - j0;
            float *o = blk + 1 + ci;
            mt_repro_gemm(o, w, a + i0 * k, k, 1, b + j0, n, bias + j0, i1 - i0, w, k, chains);
            for (size_t i = i0; i < i1; i++)
                if (memcmp(o + (i - i0) * w, c + i * n + j0, w * sizeof(float)) != 0)
                    fail_msg("chains %d: block %zu row %zu differs from the whole product", chains,
                             ci, i);
        }
        /* the contraction split over f devices, each its k/f columns of a and rows of b */
        for (int f = 2; f <= chains; f *= 2) {
            float *sub[L] = {0};
            size_t kf = k / (size_t)f;
            mt_repro_gemm(cb, n, a, k, 1, b, n, NULL, m, n, k, chains);
            for (int d = 0; d < f; d++) {
                sub[d] = calloc(m * n, sizeof(float));
                mt_repro_gemm(sub[d], n, a + (size_t)d * kf, k, 1, b + (size_t)d * kf * n, n, NULL,
                              m, n, kf, chains / f);
            }
            allreduce_free(sub, f, m * n, r);
            if (memcmp(r, cb, m * n * sizeof(float)) != 0)
                fail_msg("chains %d: the contraction split over %d devices differs", chains, f);
            for (size_t e = 0; e < m * n; e++)
                r[e] = r[e] + bias[e % n];
            assert_memory_equal(r, c, m * n * sizeof(float));
        }
    }
    /* the tree is not a single chain: 8 chains differ from 1 somewhere */
    mt_repro_gemm(c, n, a, k, 1, b, n, NULL, m, n, k, 1);
    mt_repro_gemm(r, n, a, k, 1, b, n, NULL, m, n, k, L);
    assert_true(memcmp(c, r, m * n * sizeof(float)) != 0);
    free(a);
    free(b);
    free(bias);
    free(c);
    free(r);
    free(blk);
    free(cb);
}

/*
 * A long single chain (a weight gradient over a leaf's rows: conv2d's dW reads its im2col rows
 * transposed, a column stride of 37 here) runs in K-blocks, each continuing every element's chain
 * from c: the same bits as the portable chain, for lengths around the block boundaries, with a
 * bias, partial tiles and a block of rows and columns computed alone.
 */
static void test_repro_gemm_long_chain_in_blocks(void **state)
{
    const size_t m = 37, n = 21, kmax = 1000;
    static const size_t ks[] = {255, 256, 257, 383, 384, 385, 1000};
    float *a = vals(kmax * m, 1, 7), *b = vals(kmax * n, 2, 7), *bias = vals(n, 3, 7);
    float *c = calloc(m * n, sizeof(float)), *r = calloc(m * n, sizeof(float));
    (void)state;
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        size_t k = ks[ki];
        for (int wb = 0; wb < 2; wb++) { /* a(i, q) = a[q * m + i]: unit row stride */
            mt_repro_gemm(c, n, a, 1, m, b, n, wb ? bias : NULL, m, n, k, 1);
            mt_repro_gemm_ref(r, n, a, 1, m, b, n, wb ? bias : NULL, m, n, k, 1);
            if (memcmp(c, r, m * n * sizeof(float)) != 0)
                fail_msg("k %zu%s: the blocked chain differs from the portable one", k,
                         wb ? " with a bias" : "");
        }
        mt_repro_gemm(r, 5, a + 30, 1, m, b + 16, n, NULL, 7, 5, k, 1); /* rows 30..36 x 16..20 */
        for (size_t i = 0; i < 7; i++) {
            float *row = c + (30 + i) * n + 16;
            mt_repro_gemm(row, n, a + 30 + i, 1, m, b + 16, n, NULL, 1, 5, k, 1);
            if (memcmp(row, r + i * 5, 5 * sizeof(float)) != 0)
                fail_msg("k %zu: row %zu of the block differs", k, 30 + i);
        }
    }
    free(a);
    free(b);
    free(bias);
    free(c);
    free(r);
}

/*
 * The AVX2 path packs b's 16-column blocks (repro_gemm.c, tiles()): per column block with the
 * column blocks outside (m <= n), all of b at once with the row panels outside (m > n), and runs
 * unpacked when the packed b would not fit or only one row tile reads it. Every case gives the
 * portable product's bits: the MLP's products (a row-major x . W with a bias; a weight gradient's
 * x^T, column stride m, in 1..8 chains), edge columns (n % 16 != 0), edge rows (m % 6 != 0), a
 * large ldb, and the shapes on both sides of each limit.
 */
static void test_repro_gemm_packed_shapes(void **state)
{
    static const size_t shapes[][3] = {
        /* m, n, k */
        {128, 128, 784}, {128, 10, 128}, {784, 128, 128}, {128, 10, 64},   {7, 33, 64},
        {6, 40, 16},     {13, 16, 8},    {100, 133, 64},  {200, 150, 128}, {129, 128, 128},
        {40, 50, 1024},  {40, 50, 2048}, {50, 40, 256},   {300, 17, 1000},
    };
    (void)state;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        size_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], ldb = n + 37;
        float *a = vals(m * k, 1, 11 + si), *b = vals(k * ldb, 2, 11 + si);
        float *bias = vals(n, 3, 11 + si);
        float *c = calloc(m * n, sizeof(float)), *r = calloc(m * n, sizeof(float));
        for (int chains = 1; chains <= L; chains *= 2) {
            if (k % (size_t)chains != 0)
                continue;
            for (int at = 0; at < 2; at++) { /* at: a read transposed (column stride m) */
                size_t ars = at ? 1 : k, acs = at ? m : 1;
                const float *bi = at ? NULL : bias;
                mt_repro_gemm(c, n, a, ars, acs, b, ldb, bi, m, n, k, chains);
                mt_repro_gemm_ref(r, n, a, ars, acs, b, ldb, bi, m, n, k, chains);
                if (memcmp(c, r, m * n * sizeof(float)) != 0)
                    fail_msg("%zu x %zu x %zu, %d chains%s: the AVX2 product differs from the "
                             "portable one",
                             m, n, k, chains, at ? ", a transposed" : "");
            }
        }
        free(a);
        free(b);
        free(bias);
        free(c);
        free(r);
    }
}

/*
 * A dense layer (batch 16: 8 leaves of 2; in 1200, out 48) split over a model dimension of f = 2
 * and 4 devices, on its output columns and on its contraction, gives one device's bits: y, dx
 * (a split output: the partial input gradients summed by the allreduce), dw and db.
 */
/* A chain continued over several calls (mt_repro_gemm_more: conv2d's dW per example of a height
 * leaf) has the bits of one call over all of its terms, on both paths. */
static void test_repro_gemm_more_continues_the_chain(void **state)
{
    const size_t m = 37, n = 21, kmax = 700;
    static const size_t cuts[][3] = {{0, 3, 5}, {98, 196, 294}, {1, 300, 600}, {128, 256, 700}};
    float *a = vals(kmax * m, 1, 9), *b = vals(kmax * n, 2, 9);
    float *c = calloc(m * n, sizeof(float)), *r = calloc(m * n, sizeof(float));
    (void)state;
    for (size_t t = 0; t < sizeof(cuts) / sizeof(cuts[0]); t++) {
        size_t k = cuts[t][2];
        mt_repro_gemm_ref(r, n, a, 1, m, b, n, NULL, m, n, k, 1);
        memset(c, 0, m * n * sizeof(float));
        for (size_t s0 = 0, p = 0; p < 3; s0 = cuts[t][p], p++)
            mt_repro_gemm_more(c, n, a + s0 * m, 1, m, b + s0 * n, n, m, n, cuts[t][p] - s0);
        if (memcmp(c, r, m * n * sizeof(float)) != 0)
            fail_msg("cuts %zu/%zu/%zu: the continued chain differs from one chain", cuts[t][0],
                     cuts[t][1], k);
    }
    free(a);
    free(b);
    free(c);
    free(r);
}

/*
 * Chains over runs of columns (mt_repro_gemm_runs: conv2d's K-leaves read in the im2col order,
 * 9 taps of 16 channels in 1, 2, 4, 8 leaves of 16 / lc channels each) give the bits of the
 * canonical product over the columns copied into K-leaf order (leaf t's channels at every tap,
 * then the next leaf's: what conv2d computed before), on the AVX2 path against the portable
 * one, with a bias, partial tiles and any block of rows and columns computed alone.
 */
static void test_repro_gemm_runs_as_permuted_columns(void **state)
{
    const size_t m = 37, n = 21, taps = 9, ch = 16, k = taps * ch;
    float *a = vals(m * k, 1, 13), *b = vals(k * n, 2, 13), *bias = vals(n, 3, 13);
    float *ap = calloc(m * k, sizeof(float)), *bp = calloc(k * n, sizeof(float));
    float *c = calloc(m * n, sizeof(float)), *r = calloc(m * n, sizeof(float));
    (void)state;
    for (int lc = 1; lc <= L; lc *= 2) {
        size_t cl = ch / (size_t)lc;
        mt_repro_runs rs = {cl, taps, ch, cl};
        for (size_t q = 0; q < k; q++) { /* K-leaf column q = (t, tap, ci) */
            size_t t = q / (taps * cl), tap = q % (taps * cl) / cl,
                   col = tap * ch + t * cl + q % cl;
            for (size_t i = 0; i < m; i++)
                ap[i * k + q] = a[i * k + col];
            memcpy(bp + q * n, b + col * n, n * sizeof(float));
        }
        for (int wb = 0; wb < 2; wb++) {
            mt_repro_gemm_ref(r, n, ap, k, 1, bp, n, wb ? bias : NULL, m, n, k, lc);
            mt_repro_gemm_runs(c, n, a, k, 1, b, n, wb ? bias : NULL, m, n, &rs, lc);
            if (memcmp(c, r, m * n * sizeof(float)) != 0)
                fail_msg("%d K-leaves%s: the runs differ from the permuted columns", lc,
                         wb ? " with a bias" : "");
        }
        mt_repro_gemm_runs(r, 5, a + 30 * k, k, 1, b + 16, n, bias + 16, 7, 5, &rs, lc);
        for (size_t i = 0; i < 7; i++)
            if (memcmp(c + (30 + i) * n + 16, r + i * 5, 5 * sizeof(float)) != 0)
                fail_msg("%d K-leaves: row %zu of the block differs", lc, 30 + i);
    }
    free(a);
    free(b);
    free(bias);
    free(ap);
    free(bp);
    free(c);
    free(r);
}

/* A band's col2im over the output rows that read its pixels (mt_repro_conv2d_col2im_band, the
 * rows gathered from its neighbours) gives the bits of the whole image's col2im on its rows, for
 * one and several K-leaves, stride 1 and 2, "same" and "valid". */
static void test_repro_conv2d_col2im_band(void **state)
{
    (void)state;
    for (int v = 0; v < 4; v++) {
        mt_conv2d_geom g = {2, 8, 5, 4, 3, 3, 4, v % 2 == 0, v < 2 ? 1 : 2, 1};
        size_t oh = mt_conv2d_out_h(&g), ow = mt_conv2d_out_w(&g), k = 3 * 3 * 4;
        float *dcols = vals(mt_conv2d_cols_size(&g), 1, 11 + (uint64_t)v);
        float *dx = calloc(2 * 8 * 5 * 4, sizeof(float)), *band = calloc(2 * 4 * 5 * 4, 4);
        float *win = calloc(mt_conv2d_cols_size(&g), sizeof(float));
        for (int lc = 1; lc <= 4; lc *= 4) {
            mt_repro_conv2d_col2im(dx, dcols, &g, lc);
            for (size_t bk = 0; bk < 2; bk++) {
                /* output rows [lo, lo + he): the windows reading rows [4 bk, 4 bk + 4) */
                long pt = (long)mt_conv2d_pad_top(&g), lo = -1, hi = 0;
                for (long oy = 0; oy < (long)oh; oy++) {
                    long top = oy * (long)g.sh - pt;
                    if (top + 2 >= 4 * (long)bk && top <= 4 * (long)bk + 3) {
                        lo = lo < 0 ? oy : lo;
                        hi = oy + 1;
                    }
                }
                size_t he = (size_t)(hi - lo);
                mt_repro_rows rw = {(size_t)lo, he, 4 * bk, 4};
                for (size_t b = 0; b < 2; b++)
                    memcpy(win + b * he * ow * k, dcols + (b * oh + (size_t)lo) * ow * k,
                           he * ow * k * sizeof(float));
                mt_repro_conv2d_col2im_band(band, win, &g, lc, &rw);
                for (size_t b = 0; b < 2; b++)
                    if (memcmp(band + b * 4 * 5 * 4, dx + (b * 8 + 4 * bk) * 5 * 4,
                               4 * 5 * 4 * sizeof(float)) != 0)
                        fail_msg("case %d, %d K-leaves: band %zu of example %zu differs", v, lc, bk,
                                 b);
            }
        }
        free(dcols);
        free(dx);
        free(band);
        free(win);
    }
}

static void test_repro_dense_model_split_same_bits(void **state)
{
    const size_t n = 16, in = 1200, out = 48, r = 2;
    float *x = vals(n * in, 4, 9), *w = vals(in * out, 5, 9), *b = vals(out, 6, 9);
    float *dy = vals(n * out, 7, 9);
    dense_step one = dense_on_mesh(n, n, 1, x, w, b, dy, in, out);
    float *wt = calloc(in * out, sizeof(float)), *y = calloc(n * out, sizeof(float));
    float *dx = calloc(n * in, sizeof(float)), *dw = calloc(in * out, sizeof(float));
    float *db = calloc(out, sizeof(float));
    mt_repro_acc aw, ab;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_repro_acc_init(&aw, L, in * out, &err), MT_OK);
    assert_int_equal(mt_repro_acc_init(&ab, L, out, &err), MT_OK);
    for (int f = 2; f <= 4; f *= 2) {
        size_t ol = out / (size_t)f, il = in / (size_t)f;
        float *sub[L] = {0};
        /* output columns over f: device d holds w[:, d*ol..), b[d*ol..) and dy's columns */
        for (int d = 0; d < f; d++) {
            float *wd = calloc(in * ol, sizeof(float)), *dyd = calloc(n * ol, sizeof(float));
            for (size_t i = 0; i < in; i++)
                memcpy(wd + i * ol, w + i * out + (size_t)d * ol, ol * sizeof(float));
            for (size_t i = 0; i < n; i++)
                memcpy(dyd + i * ol, dy + i * out + (size_t)d * ol, ol * sizeof(float));
            mt_repro_dense_forward(y, x, wd, b + (size_t)d * ol, n, in, ol, mt_repro_leaves(in));
            sub[d] = calloc(n * in, sizeof(float));
            mt_repro_dense_backward(sub[d], dw, db, wt, dyd, x, wd, n, r, L, in, ol,
                                    mt_repro_leaves(out) / f, &aw, &ab);
            for (size_t i = 0; i < n; i++)
                if (memcmp(y + i * ol, one.y + i * out + (size_t)d * ol, ol * sizeof(float)) != 0)
                    fail_msg("columns over %d: device %d's y differs", f, d);
            for (size_t i = 0; i < in; i++)
                if (memcmp(dw + i * ol, one.dw + i * out + (size_t)d * ol, ol * sizeof(float)))
                    fail_msg("columns over %d: device %d's dw differs", f, d);
            if (memcmp(db, one.db + (size_t)d * ol, ol * sizeof(float)) != 0)
                fail_msg("columns over %d: device %d's db differs", f, d);
            free(wd);
            free(dyd);
        }
        allreduce_free(sub, f, n * in, dx);
        if (memcmp(dx, one.dx, n * in * sizeof(float)) != 0)
            fail_msg("columns over %d: dx (allreduced) differs", f);
        /* the contraction over f: device d holds x[:, d*il..) and w's rows d*il.. */
        for (int d = 0; d < f; d++) {
            float *xd = calloc(n * il, sizeof(float));
            const float *wd = w + (size_t)d * il * out;
            for (size_t i = 0; i < n; i++)
                memcpy(xd + i * il, x + i * in + (size_t)d * il, il * sizeof(float));
            sub[d] = calloc(n * out, sizeof(float));
            mt_repro_dense_forward(sub[d], xd, wd, NULL, n, il, out, mt_repro_leaves(in) / f);
            mt_repro_dense_backward(dx, dw, db, wt, dy, xd, wd, n, r, L, il, out,
                                    mt_repro_leaves(out), &aw, &ab);
            for (size_t i = 0; i < n; i++)
                if (memcmp(dx + i * il, one.dx + i * in + (size_t)d * il, il * sizeof(float)))
                    fail_msg("contraction over %d: device %d's dx differs", f, d);
            if (memcmp(dw, one.dw + (size_t)d * il * out, il * out * sizeof(float)) != 0)
                fail_msg("contraction over %d: device %d's dw differs", f, d);
            free(xd);
        }
        allreduce_free(sub, f, n * out, y);
        for (size_t e = 0; e < n * out; e++)
            y[e] = y[e] + b[e % out];
        if (memcmp(y, one.y, n * out * sizeof(float)) != 0)
            fail_msg("contraction over %d: y (allreduced, bias after) differs", f);
    }
    mt_repro_acc_free(&aw);
    mt_repro_acc_free(&ab);
    dense_step_free(&one);
    free(x);
    free(w);
    free(b);
    free(dy);
    free(wt);
    free(y);
    free(dx);
    free(dw);
    free(db);
}

/* The streaming accumulator is mt_repro_tree_fold, bit for bit, for 1..8 leaves. */
static void test_repro_acc_is_the_tree(void **state)
{
    const size_t n = 1000;
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (int count = 1; count <= L; count *= 2) {
        float **lv = make_leaves(n);
        mt_repro_acc a;
        assert_int_equal(mt_repro_acc_init(&a, count, n, &err), MT_OK);
        for (int i = 0; i < count; i++) {
            memcpy(mt_repro_acc_slot(&a), lv[i], n * sizeof(float));
            mt_repro_acc_push(&a);
        }
        mt_repro_tree_fold(lv, count, n);
        assert_memory_equal(mt_repro_acc_result(&a), lv[0], n * sizeof(float));
        mt_repro_acc_free(&a);
        free_leaves(lv);
    }
}

/* Batch norm's three sums (c features, 3 rows per example) on p devices: 4c floats. */
static float *bn_on_mesh(size_t batch, size_t n, int p, const float *x, const float *dy,
                         const float *xhat, const float *mean, size_t c)
{
    const size_t rpe = 3; /* rows per example (a sequence or an image) */
    int own = mt_repro_leaves(batch) / p;
    size_t r = batch / (size_t)mt_repro_leaves(batch) * rpe;
    float *out = calloc(4 * c, sizeof(float)), *sub[3][L] = {{0}};
    mt_repro_acc a1, a2;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_repro_acc_init(&a1, own, c, &err), MT_OK);
    assert_int_equal(mt_repro_acc_init(&a2, own, 2 * c, &err), MT_OK);
    for (int d = 0; d < p; d++) {
        size_t s0, rows;
        device_block(batch, n, p, d, &s0, &rows);
        s0 *= rpe;
        rows *= rpe;
        for (int k = 0; k < 3; k++)
            sub[k][d] = calloc(2 * c, sizeof(float));
        mt_repro_bn_sum(sub[0][d], x + s0 * c, rows, r, own, c, &a1);
        mt_repro_bn_sqdev(sub[1][d], x + s0 * c, mean, rows, r, own, c, &a1);
        mt_repro_bn_grad_sums(sub[2][d], sub[2][d] + c, dy + s0 * c, xhat + s0 * c, rows, r, own, c,
                              &a2);
    }
    allreduce_free(sub[0], p, c, out);
    allreduce_free(sub[1], p, c, out + c);
    allreduce_free(sub[2], p, 2 * c, out + 2 * c);
    mt_repro_acc_free(&a1);
    mt_repro_acc_free(&a2);
    return out;
}

/* Batch norm's sums give the same bits on 1, 2, 4, 8 devices (full and short batches). */
static void test_repro_bn_same_bits_on_every_mesh(void **state)
{
    static const size_t cases[][2] = {{32, 32}, {32, 10}, {8, 8}};
    const size_t c = 48;
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        size_t batch = cases[ci][0], n = cases[ci][1], m = n * 3 * c;
        float *x = calloc(m, sizeof(float)), *dy = calloc(m, sizeof(float));
        float *xh = calloc(m, sizeof(float)), *mean = calloc(c, sizeof(float));
        for (size_t i = 0; i < m; i++) {
            x[i] = ct_val(8, i, ci);
            dy[i] = ct_val(9, i, ci);
            xh[i] = ct_val(10, i, ci);
        }
        for (size_t i = 0; i < c; i++)
            mean[i] = ct_val(11, i, ci);
        float *one = bn_on_mesh(batch, n, 1, x, dy, xh, mean, c);
        for (int p = 2; p <= L; p *= 2) {
            float *got = bn_on_mesh(batch, n, p, x, dy, xh, mean, c);
            if (memcmp(got, one, 4 * c * sizeof(float)) != 0)
                fail_msg("batch %zu (%zu present), %d devices: other bits than one device", batch,
                         n, p);
            free(got);
        }
        free(one);
        free(x);
        free(dy);
        free(xh);
        free(mean);
    }
}

/*
 * conv2d 8x8x4 -> 3x3 same -> 8 filters on p batch devices x fo devices splitting the filters x fi
 * devices splitting the input channels: y, dx, dw, db concatenated. Device (d, j, q) holds batch
 * block d, filters [j*8/fo, (j+1)*8/fo) and channels [q*4/fi, (q+1)*4/fi) of x and the kernel. The
 * fi partial outputs are summed in the allreduce's order and the bias added after; the fo partial
 * dcols of a (batch, channel) block are summed before col2im; the p dw / db subtrees of a
 * (filter, channel) block are summed likewise.
 */
#define CF 8
#define CC 4
static float *conv_on_mesh(size_t batch, size_t n, int p, int fo, int fi, const float *x,
                           const float *w, const float *b, const float *dy)
{
    const size_t px = 8 * 8, xs = px * CC, fl = CF / (size_t)fo, cq = CC / (size_t)fi;
    const size_t k = 3 * 3 * cq, ys = px * CF, nw = 3 * 3 * CC * CF;
    const mt_conv2d_geom g0 = {
        .batch = 1, .h = 8, .w = 8, .c = cq, .kh = 3, .kw = 3, .f = fl, .same = true};
    const size_t cs = mt_conv2d_cols_size(&g0);
    int own = mt_repro_leaves(batch) / p, lc = mt_repro_leaves(CC) / fi;
    size_t r = batch / (size_t)mt_repro_leaves(batch);
    float *out = calloc(n * ys + n * xs + nw + CF, sizeof(float)), *y = out, *dx = out + n * ys;
    float *dw = dx + n * xs, *db = dw + nw;
    float *wj = calloc(k * fl, sizeof(float)), *scr = calloc(k * fl, sizeof(float));
    float *subw[L][L][L] = {{{0}}}, *subb[L][L] = {{0}}; /* [filters][channels][batch] */
    mt_repro_acc aw, ab;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_repro_acc_init(&aw, own, k * fl, &err), MT_OK);
    assert_int_equal(mt_repro_acc_init(&ab, own, fl, &err), MT_OK);
    for (int d = 0; d < p; d++) {
        size_t s0, rows, m;
        mt_conv2d_geom g = g0;
        device_block(batch, n, p, d, &s0, &rows);
        g.batch = rows;
        m = rows * px;
        float *cols = calloc(rows * cs + 1, sizeof(float)), *xq = calloc(m * cq + 1, sizeof(float));
        float *yj = calloc(m * fl + 1, sizeof(float)), *dyj = calloc(m * fl + 1, sizeof(float));
        float *ysub[L] = {0}, *dsub[L][L] = {{0}};
        float *sum = calloc(m * CF + rows * cs + 1, sizeof(float));
        for (int q = 0; q < fi; q++) {
            for (size_t i = 0; i < m; i++)
                memcpy(xq + i * cq, x + (s0 * px + i) * CC + (size_t)q * cq, cq * sizeof(float));
            for (int j = 0; j < fo; j++) {
                for (size_t t = 0; t < 9; t++)
                    for (size_t ci = 0; ci < cq; ci++)
                        memcpy(wj + (t * cq + ci) * fl, w + (t * CC + q * cq + ci) * CF + j * fl,
                               fl * sizeof(float));
                for (size_t i = 0; i < m; i++)
                    memcpy(dyj + i * fl, dy + (s0 * px + i) * CF + (size_t)j * fl,
                           fl * sizeof(float));
                dsub[q][j] = calloc(rows * cs + 1, sizeof(float));
                subw[j][q][d] = calloc(k * fl, sizeof(float));
                subb[j][d] = subb[j][d] != NULL ? subb[j][d] : calloc(fl, sizeof(float));
                mt_repro_conv2d_forward(yj, cols, scr, xq, wj, fi == 1 ? b + j * fl : NULL, &g, lc);
                mt_repro_conv2d_backward(dsub[q][j], subw[j][q][d], q == 0 ? subb[j][d] : NULL, scr,
                                         dyj, cols, wj, &g, lc, r, own, mt_repro_leaves(CF) / fo,
                                         &aw, &ab);
                if (fi > 1) { /* the channel split's partial y: summed over q below */
                    if (ysub[q] == NULL)
                        ysub[q] = calloc(m * CF + 1, sizeof(float));
                    memcpy(ysub[q] + (size_t)j * m * fl, yj, m * fl * sizeof(float));
                }
                for (size_t i = 0; fi == 1 && i < m; i++)
                    memcpy(y + (s0 * px + i) * CF + (size_t)j * fl, yj + i * fl,
                           fl * sizeof(float));
            }
            allreduce_free(dsub[q], fo, rows * cs, sum); /* the filter split's dcols, summed */
            mt_repro_conv2d_col2im(xq, sum, &g, lc);
            for (size_t i = 0; i < m; i++)
                memcpy(dx + (s0 * px + i) * CC + (size_t)q * cq, xq + i * cq, cq * sizeof(float));
        }
        if (fi > 1) {
            allreduce_free(ysub, fi, (size_t)fo * m * fl, sum);
            for (int j = 0; j < fo; j++)
                for (size_t i = 0; i < m; i++)
                    for (size_t e = 0; e < fl; e++)
                        y[(s0 * px + i) * CF + (size_t)j * fl + e] =
                            sum[((size_t)j * m + i) * fl + e] + b[(size_t)j * fl + e];
        }
        free(cols);
        free(xq);
        free(yj);
        free(dyj);
        free(sum);
    }
    for (int j = 0; j < fo; j++) {
        float *ws = calloc(k * fl, sizeof(float)), *bs = calloc(fl, sizeof(float));
        for (int q = 0; q < fi; q++) {
            allreduce_free(subw[j][q], p, k * fl, ws);
            for (size_t t = 0; t < 9; t++)
                for (size_t ci = 0; ci < cq; ci++)
                    memcpy(dw + (t * CC + q * cq + ci) * CF + j * fl, ws + (t * cq + ci) * fl,
                           fl * sizeof(float));
        }
        allreduce_free(subb[j], p, fl, bs);
        memcpy(db + (size_t)j * fl, bs, fl * sizeof(float));
        free(ws);
        free(bs);
    }
    free(wj);
    free(scr);
    mt_repro_acc_free(&aw);
    mt_repro_acc_free(&ab);
    return out;
}

/* conv2d's leaf kernels give the same bits on 1, 2, 4, 8 batch devices times 1, 2, 4, 8 devices
 * splitting the filters, or times 2, 4 devices splitting the input channels (with 1, 2 splitting
 * the filters), for full and short batches. */
static void test_repro_conv2d_same_bits_on_every_mesh(void **state)
{
    static const size_t cases[][2] = {{16, 16}, {16, 5}, {8, 8}};
    static const int splits[][2] = {{2, 1}, {4, 1}, {8, 1}, {1, 2}, {1, 4}, {2, 2}, {2, 4}};
    const size_t xs = 8 * 8 * CC, ys = 8 * 8 * CF, nw = 3 * 3 * CC * CF;
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        size_t batch = cases[ci][0], n = cases[ci][1], total = n * ys + n * xs + nw + CF;
        float *x = calloc(n * xs, sizeof(float)), *w = calloc(nw, sizeof(float));
        float *b = calloc(CF, sizeof(float)), *dy = calloc(n * ys, sizeof(float));
        for (size_t i = 0; i < n * xs; i++)
            x[i] = ct_val(12, i, ci);
        for (size_t i = 0; i < nw; i++)
            w[i] = ct_val(13, i, ci);
        for (size_t i = 0; i < CF; i++)
            b[i] = ct_val(14, i, ci);
        for (size_t i = 0; i < n * ys; i++)
            dy[i] = ct_val(15, i, ci);
        float *one = conv_on_mesh(batch, n, 1, 1, 1, x, w, b, dy);
        for (int p = 1; p <= L; p *= 2)
            for (size_t si = 0; si <= sizeof(splits) / sizeof(splits[0]); si++) {
                int fo = si == 0 ? 1 : splits[si - 1][0], fi = si == 0 ? 1 : splits[si - 1][1];
                float *got;
                if (p == 1 && si == 0)
                    continue;
                got = conv_on_mesh(batch, n, p, fo, fi, x, w, b, dy);
                if (memcmp(got, one, total * sizeof(float)) != 0)
                    fail_msg("batch %zu (%zu present), %d x %d filters x %d channels devices: "
                             "other bits than one device",
                             batch, n, p, fo, fi);
                free(got);
            }
        free(one);
        free(x);
        free(w);
        free(b);
        free(dy);
    }
}

/* float bits, for values a literal cannot spell */
static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* The exact sum of squares of a vector's pieces on p devices, packed, allreduced, unpacked. */
static double sumsq_on(const float *x, size_t n, int p, bool interleaved)
{
    float *sub[L] = {0}, out[MT_REPRO_SUMSQ_FLOATS];
    for (int d = 0; d < p; d++) {
        mt_repro_sumsq sq;
        mt_repro_sumsq_init(&sq);
        if (interleaved) /* every p-th element, one at a time, backwards */
            for (size_t i = n; i-- > 0;) {
                if (i % (size_t)p == (size_t)d)
                    mt_repro_sumsq_add(&sq, x + i, 1);
            }
        else
            mt_repro_sumsq_add(&sq, x + n * (size_t)d / (size_t)p,
                               n * (size_t)(d + 1) / (size_t)p - n * (size_t)d / (size_t)p);
        sub[d] = calloc(MT_REPRO_SUMSQ_FLOATS, sizeof(float));
        mt_repro_sumsq_pack(&sq, sub[d]);
    }
    allreduce_free(sub, p, MT_REPRO_SUMSQ_FLOATS, out);
    return mt_repro_sumsq_unpack(out);
}

/*
 * global_clipnorm's sum of squares is exact, so it is the same double on any split and order of
 * the elements (1, 2, 4, 8 devices; blocks and interleaved elements), also over 65535-element
 * bins; known values: 3^2 + 4^2, the smallest subnormal, FLT_MAX, NaN and infinity.
 */
static void test_repro_sumsq_exact_any_split(void **state)
{
    const size_t n = 200003;
    float *x = calloc(n, sizeof(float)), one;
    long double ref = 0.0L;
    double want;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        x[i] = ct_val(16, i, 3) * ldexpf(1.0f, (int)(i % 61) - 30);
        if (i % 1001 == 0)
            x[i] = fbits((uint32_t)(i % 5000) + 1u); /* subnormals */
        ref += (long double)x[i] * x[i];
    }
    want = sumsq_on(x, n, 1, false);
    if (fabsl((long double)want - ref) > 1e-13L * ref)
        fail_msg("sum of squares %.17g, long double %.17Lg", want, ref);
    for (int p = 1; p <= L; p *= 2)
        for (int il = 0; il < 2; il++)
            if (sumsq_on(x, n, p, il != 0) != want)
                fail_msg("%d devices (%s): %.17g, one device %.17g", p,
                         il ? "interleaved" : "blocks", sumsq_on(x, n, p, il != 0), want);
    x[0] = 3.0f;
    x[1] = -4.0f;
    assert_true(sumsq_on(x, 2, 1, false) == 25.0);
    x[0] = fbits(1u);
    assert_true(sumsq_on(x, 1, 1, false) == ldexp(1.0, -298));
    x[0] = FLT_MAX;
    assert_true(sumsq_on(x, 1, 1, false) == (double)FLT_MAX * (double)FLT_MAX);
    x[1] = INFINITY;
    assert_true(isinf(sumsq_on(x, 2, 2, false)));
    x[0] = NAN;
    assert_true(isnan(sumsq_on(x, 2, 2, true)));
    one = 0.0f;
    assert_true(sumsq_on(&one, 1, 1, false) == 0.0);
    free(x);
}

/* embedding's and position_embedding's table gradients (T = 5 positions, 6 features, a
 * vocabulary of 7) on p devices: the device subtrees summed in the allreduce's order. */
static float *emb_on_mesh(size_t batch, size_t n, int p, const float *ids, const float *dy)
{
    const size_t t = 5, c = 6, v = 7;
    int own = mt_repro_leaves(batch) / p;
    size_t r = batch / (size_t)mt_repro_leaves(batch);
    float *out = calloc(v * c + t * c, sizeof(float)), *sube[L] = {0}, *subp[L] = {0};
    mt_repro_acc a;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_repro_acc_init(&a, own, v * c, &err), MT_OK);
    for (int d = 0; d < p; d++) {
        size_t s0, rows;
        device_block(batch, n, p, d, &s0, &rows);
        sube[d] = calloc(v * c, sizeof(float));
        subp[d] = calloc(t * c, sizeof(float));
        mt_repro_embedding_grad(sube[d], ids + s0 * t, dy + s0 * t * c, rows * t, r * t, own, 0, v,
                                c, &a);
        mt_repro_bn_sum(subp[d], dy + s0 * t * c, rows, r, own, t * c, &a);
    }
    allreduce_free(sube, p, v * c, out);
    allreduce_free(subp, p, t * c, out + v * c);
    mt_repro_acc_free(&a);
    return out;
}

/* The embedding and position embedding gradients give the same bits on 1, 2, 4, 8 devices (full
 * and short batches), and a device holding table rows [3, 7) gets those rows' bits. */
static void test_repro_embedding_same_bits_on_every_mesh(void **state)
{
    static const size_t cases[][2] = {{16, 16}, {16, 5}, {8, 8}};
    const size_t t = 5, c = 6, v = 7;
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        size_t batch = cases[ci][0], n = cases[ci][1], total = v * c + t * c;
        float *ids = calloc(n * t, sizeof(float)), *dy = calloc(n * t * c, sizeof(float));
        float *part = calloc(4 * c, sizeof(float)), *one;
        mt_repro_acc a;
        mt_err err = MT_ERR_INIT;
        for (size_t i = 0; i < n * t; i++)
            ids[i] = (float)((i * 5 + ci) % v);
        for (size_t i = 0; i < n * t * c; i++)
            dy[i] = ct_val(17, i, ci);
        one = emb_on_mesh(batch, n, 1, ids, dy);
        for (int p = 2; p <= L; p *= 2) {
            float *got = emb_on_mesh(batch, n, p, ids, dy);
            if (memcmp(got, one, total * sizeof(float)) != 0)
                fail_msg("batch %zu (%zu present), %d devices: other bits than one device", batch,
                         n, p);
            free(got);
        }
        assert_int_equal(mt_repro_acc_init(&a, L, 4 * c, &err), MT_OK);
        mt_repro_embedding_grad(part, ids, dy, n * t, batch / L * t, L, 3, 4, c, &a);
        assert_memory_equal(part, one + 3 * c, 4 * c * sizeof(float));
        mt_repro_acc_free(&a);
        free(one);
        free(part);
        free(ids);
        free(dy);
    }
}

/* A dense head tied to the embedding: each leaf's table gradient is the head's dy^T . x (one fma
 * chain per element over the leaf's rows, from 0) and then the embedding's rows added in row
 * order, the leaves folded in the canonical tree: bit for bit that serial order (a short batch's
 * empty leaves included), and on 2, 4, 8 devices' subtrees summed as the allreduce does. */
static void test_repro_tied_grad_order(void **state)
{
    const size_t t = 3, c = 4, v = 5, batch = 16, n = 11, r = batch / L;
    float *ids = calloc(n * t, sizeof(float)), *dy = calloc(n * t * c, sizeof(float));
    float *hdy = calloc(n * t * v, sizeof(float)), *x = calloc(n * t * c, sizeof(float));
    float *want = calloc(L * v * c, sizeof(float)), *got = calloc(v * c, sizeof(float));
    float *lv[L];
    mt_repro_acc a;
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (size_t i = 0; i < n * t; i++)
        ids[i] = (float)((i * 3 + 1) % v);
    for (size_t i = 0; i < n * t * c; i++) {
        dy[i] = ct_val(22, i, 1);
        x[i] = ct_val(23, i, 1);
    }
    for (size_t i = 0; i < n * t * v; i++)
        hdy[i] = ct_val(24, i, 1);
    for (int i = 0; i < L; i++) {
        size_t a0 = (size_t)i * r * t, a1 = a0 + r * t < n * t ? a0 + r * t : n * t;
        lv[i] = want + (size_t)i * v * c;
        for (size_t j = 0; j < v; j++)
            for (size_t k = 0; k < c; k++)
                for (size_t row = a0; row < a1; row++)
                    lv[i][j * c + k] = fmaf(hdy[row * v + j], x[row * c + k], lv[i][j * c + k]);
        for (size_t row = a0; row < a1; row++)
            for (size_t k = 0; k < c; k++)
                lv[i][(size_t)ids[row] * c + k] += dy[row * c + k];
    }
    mt_repro_tree_fold(lv, L, v * c);
    assert_int_equal(mt_repro_acc_init(&a, L, v * c, &err), MT_OK);
    for (int p = 1; p <= L; p *= 2) {
        float *sub[L];
        for (int d = 0; d < p; d++) {
            size_t s0 = (size_t)d * (L / (size_t)p) * r, rows = s0 < n ? n - s0 : 0;
            mt_repro_head h = {hdy + s0 * t * v, x + s0 * t * c, 0, r * t};
            rows = rows < (L / (size_t)p) * r ? rows : (L / (size_t)p) * r;
            h.rows = rows * t;
            sub[d] = calloc(v * c, sizeof(float));
            mt_repro_tied_grad(sub[d], &h, ids + s0 * t, dy + s0 * t * c, rows * t, r * t, L / p, 0,
                               v, c, &a);
        }
        mt_repro_tree_fold(sub, p, v * c);
        memcpy(got, sub[0], v * c * sizeof(float));
        for (int d = 0; d < p; d++)
            free(sub[d]);
        if (memcmp(got, want, v * c * sizeof(float)) != 0)
            fail_msg("%d devices: other bits than the serial order", p);
    }
    mt_repro_acc_free(&a);
    free(ids);
    free(dy);
    free(hdy);
    free(x);
    free(want);
    free(got);
}

/* layer_norm's row sums (rows of 48 features: 8 K-leaves of 6) on f = 1, 2, 4, 8 devices each
 * holding a block of the features, summed in the allreduce's order: the same bits, for the sum,
 * the squared deviations and the backward's pair of sums. */
static void test_repro_row_sums_any_feature_split(void **state)
{
    const size_t rows = 7, c = 48;
    float *x = calloc(rows * c, sizeof(float)), *h = calloc(rows * c, sizeof(float));
    float *w = calloc(c, sizeof(float)), mean[7], want[4][7], got[4][7];
    (void)state;
    for (size_t i = 0; i < rows * c; i++) {
        x[i] = ct_val(18, i, 1);
        h[i] = ct_val(19, i, 1);
    }
    for (size_t i = 0; i < c; i++)
        w[i] = ct_val(20, i, 1);
    for (size_t r = 0; r < rows; r++)
        mean[r] = ct_val(21, r, 1);
    for (int f = 1; f <= L; f *= 2) {
        size_t cf = c / (size_t)f;
        float *sub[4][L] = {{0}};
        for (int d = 0; d < f; d++) {
            float *xd = calloc(rows * cf, sizeof(float)), *hd = calloc(rows * cf, sizeof(float));
            for (size_t r = 0; r < rows; r++) {
                memcpy(xd + r * cf, x + r * c + (size_t)d * cf, cf * sizeof(float));
                memcpy(hd + r * cf, h + r * c + (size_t)d * cf, cf * sizeof(float));
            }
            for (int m = 0; m < 4; m++)
                sub[m][d] = calloc(rows, sizeof(float));
            mt_repro_row_sums(sub[0][d], NULL, xd, NULL, NULL, NULL, rows, cf, L / f);
            mt_repro_row_sums(sub[1][d], NULL, xd, mean, NULL, NULL, rows, cf, L / f);
            mt_repro_row_sums(sub[2][d], sub[3][d], xd, NULL, w + (size_t)d * cf, hd, rows, cf,
                              L / f);
            free(xd);
            free(hd);
        }
        for (int m = 0; m < 4; m++)
            allreduce_free(sub[m], f, rows, f == 1 ? want[m] : got[m]);
        if (f > 1 && memcmp(got, want, sizeof(want)) != 0)
            fail_msg("features over %d devices: other row sums than one device", f);
    }
    free(x);
    free(h);
    free(w);
}

/* ---------------------------------------------------------------- position leaves (seq) */

#define PT 16 /* positions: 8 position leaves of 2 */
#define PB 16 /* examples: 8 batch leaves of 2 */
#define PI 4  /* features in */
#define PF 3  /* units out */

/* One seq device of s: its zig-zag rows of x (PI wide) and dy (PF wide), the real allreduce over
 * the s devices as the top of the position leaves' tree. */
typedef struct seq_job {
    mt_coll_world *w;
    int k, s;
    const int *group;
    bool zig;
    const float *x, *dy, *ids;
    float *out; /* dw | db | sum_x | sum_x_dy | a tied table's gradient (PF x PI) */
    mt_code rc;
    mt_err err;
} seq_job;

static mt_code seq_reduce(void *ctx, float *buf, size_t n)
{
    seq_job *j = ctx;
    mt_coll_group g = {j->group, j->s};
    return mt_coll_allreduce_sum(mt_coll_world_comm(j->w, j->k), &g, buf, n, NULL, &j->err);
}

static void *seq_main(void *arg)
{
    seq_job *j = arg;
    size_t rl = PT / (size_t)j->s, half = rl / 2, nw = PI * PF + PF;
    int lt = mt_repro_leaves(PT), leaves = mt_repro_leaves(PB);
    float *x = calloc(PB * rl * PI, sizeof(float)), *dy = calloc(PB * rl * PF, sizeof(float));
    float *ids = calloc(PB * rl, sizeof(float)), scr[PI * PF];
    mt_conv2d_geom g = {.batch = PB, .h = rl, .w = 1, .c = PI, .kh = 1, .kw = 1, .f = PF};
    mt_repro_acc ah, aw, ab, as;
    mt_repro_bands hb = {.lh = lt / j->s, .hrows = rl, .zig = j->zig, .ctx = j, .acc = &ah};

    hb.reduce = j->s > 1 ? seq_reduce : NULL;
    for (size_t e = 0; e < PB; e++) /* rows k and 2S-1-k of T/2S positions (mt_layer_seq_blocks) */
        for (size_t i = 0; i < rl; i++) {
            size_t pos = i < half ? (size_t)j->k * half + i
                                  : (2 * (size_t)j->s - 1 - (size_t)j->k) * half + i - half;
            memcpy(x + (e * rl + i) * PI, j->x + (e * PT + pos) * PI, PI * sizeof(float));
            memcpy(dy + (e * rl + i) * PF, j->dy + (e * PT + pos) * PF, PF * sizeof(float));
            ids[e * rl + i] = j->ids[e * PT + pos];
        }
    assert_int_equal(mt_repro_acc_init(&ah, lt, nw, NULL), MT_OK);
    assert_int_equal(mt_repro_acc_init(&aw, leaves, PI * PF, NULL), MT_OK);
    assert_int_equal(mt_repro_acc_init(&ab, leaves, PF, NULL), MT_OK);
    assert_int_equal(mt_repro_acc_init(&as, leaves, PF * PI, NULL), MT_OK);
    /* a dense layer's dw, db over the positions (a 1x1 conv2d: the same chains) */
    j->rc = mt_repro_conv2d_wgrad(j->out, j->out + PI * PF, scr, dy, x, &g, 1, PB / leaves, leaves,
                                  &hb, &aw, &ab);
    /* layer_norm's gamma and beta gradients (the sums of dy * xhat and dy) */
    if (j->rc == MT_OK)
        j->rc = mt_repro_bn_sums_h(j->out + nw, j->out + nw + PI, x, x, NULL, PB * rl,
                                   PB / leaves * rl, leaves, PI, &hb, &as);
    /* a head (PI in, PF out) tied to a table of PF tokens x PI: the head's x and dy, the
     * embedding's dy = x */
    if (j->rc == MT_OK) {
        mt_repro_head h = {.dy = dy, .x = x, .rows = PB * rl, .r = PB / leaves * rl};
        j->rc = mt_repro_tied_grad_h(j->out + nw + 2 * PI, &h, ids, x, PB * rl, PB / leaves * rl,
                                     leaves, 0, PF, PI, &hb, &as);
    }
    mt_repro_acc_free(&ah);
    mt_repro_acc_free(&aw);
    mt_repro_acc_free(&ab);
    mt_repro_acc_free(&as);
    free(x);
    free(dy);
    free(ids);
    return NULL;
}

/* The weight gradients of PB examples of PT positions on s seq devices (zig: the position
 * leaves in the canonical order); every device must end with the same bits. */
static void seq_grads(int s, bool zig, const float *x, const float *dy, const float *ids,
                      float *out, size_t n)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w;
    seq_job jobs[L];
    pthread_t th[L];
    int group[L];

    assert_int_equal(mt_coll_world_new_local(s, &o, &w, NULL), MT_OK);
    for (int k = 0; k < s; k++) /* whole before any thread reads it */
        group[k] = k;
    for (int k = 0; k < s; k++) {
        jobs[k] = (seq_job){.w = w,
                            .k = k,
                            .s = s,
                            .group = group,
                            .zig = zig,
                            .x = x,
                            .dy = dy,
                            .ids = ids,
                            .out = calloc(n, sizeof(float))};
        assert_int_equal(pthread_create(&th[k], NULL, seq_main, &jobs[k]), 0);
    }
    for (int k = 0; k < s; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < s; k++) {
        if (jobs[k].rc != MT_OK)
            fail_msg("seq=%d device %d: %s", s, k, jobs[k].err.msg);
        if (memcmp(jobs[k].out, jobs[0].out, n * sizeof(float)) != 0)
            fail_msg("seq=%d: device %d ends with other bits than device 0", s, k);
    }
    memcpy(out, jobs[0].out, n * sizeof(float));
    for (int k = 0; k < s; k++)
        free(jobs[k].out);
    mt_coll_world_free(w);
}

/*
 * Position leaves: a dense layer's dw and db, layer_norm's gamma and beta sums and a tied
 * embedding table's gradient (the head's dy^T . x, then the embedding's rows) over PT
 * positions of PB examples, on seq = 1, 2, 4 devices holding zig-zag blocks, with the real
 * allreduce over seq once per batch leaf, have the bits of one device; the check names the seq
 * sizes that keep them. Taken in the height leaves' contiguous order instead (the device's rows
 * in local order), the position leaves give other bits on seq = 2 than on one device.
 */
static void test_repro_position_leaves_same_bits_on_seq(void **state)
{
    const size_t n = 2 * PI * PF + PF + 2 * PI;
    float *x = calloc(PB * PT * PI, sizeof(float)), *dy = calloc(PB * PT * PF, sizeof(float));
    float *ids = calloc(PB * PT, sizeof(float));
    float one[2 * PI * PF + PF + 2 * PI], got[2 * PI * PF + PF + 2 * PI];
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (size_t i = 0; i < PB * PT * PI; i++)
        x[i] = ct_val(19, i, 3);
    for (size_t i = 0; i < PB * PT * PF; i++)
        dy[i] = ct_val(20, i, 3);
    for (size_t i = 0; i < PB * PT; i++)
        ids[i] = (float)(i * 7 % 11 % PF);
    seq_grads(1, true, x, dy, ids, one, n);
    for (int s = 2; s <= 4; s *= 2) {
        seq_grads(s, true, x, dy, ids, got, n);
        if (memcmp(got, one, sizeof(one)) != 0)
            fail_msg("seq=%d: other bits than one device", s);
    }
    seq_grads(2, false, x, dy, ids, got, n);
    assert_true(memcmp(got, one, sizeof(one)) != 0);
    for (int s = 1; s <= 4; s *= 2)
        assert_int_equal(mt_repro_check_seq(PT, "seq", s, &err), MT_OK);
    assert_int_equal(mt_repro_check_seq(PT, "seq", 8, &err), MT_INVALID_ARGUMENT);
    assert_non_null(
        strstr(err.msg, "mesh dimension 'seq' (size 8), which splits the 16 positions"));
    assert_non_null(strstr(err.msg, "(sizes that keep the bits: 1, 2, 4)"));
    assert_int_equal(mt_repro_check_seq(PT, "seq", 3, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_repro_check_seq(6, "seq", 2, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "half their 2 position leaves (sizes that keep the bits: 1)"));
    assert_int_equal(mt_repro_check_seq(7, "seq", 1, &err), MT_OK);
    free(x);
    free(dy);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repro_leaves_of_a_batch),
        cmocka_unit_test(test_repro_sizes_that_keep_the_bits),
        cmocka_unit_test(test_repro_elastic_sizes),
        cmocka_unit_test(test_repro_sumsq_exact_any_split),
        cmocka_unit_test(test_repro_leaf_ranges),
        cmocka_unit_test(test_repro_tree_is_the_documented_order),
        cmocka_unit_test(test_repro_gemm_same_shape_any_offset),
        cmocka_unit_test(test_repro_device_subtrees_and_allreduce_are_the_tree),
        cmocka_unit_test(test_repro_interleaved_leaves_are_not_the_tree),
        cmocka_unit_test(test_repro_acc_is_the_tree),
        cmocka_unit_test(test_repro_dense_same_bits_on_every_mesh),
        cmocka_unit_test(test_repro_gemm_canonical_any_block_any_split),
        cmocka_unit_test(test_repro_gemm_long_chain_in_blocks),
        cmocka_unit_test(test_repro_gemm_packed_shapes),
        cmocka_unit_test(test_repro_gemm_more_continues_the_chain),
        cmocka_unit_test(test_repro_gemm_runs_as_permuted_columns),
        cmocka_unit_test(test_repro_conv2d_col2im_band),
        cmocka_unit_test(test_repro_dense_model_split_same_bits),
        cmocka_unit_test(test_repro_bn_same_bits_on_every_mesh),
        cmocka_unit_test(test_repro_conv2d_same_bits_on_every_mesh),
        cmocka_unit_test(test_repro_embedding_same_bits_on_every_mesh),
        cmocka_unit_test(test_repro_tied_grad_order),
        cmocka_unit_test(test_repro_row_sums_any_feature_split),
        cmocka_unit_test(test_repro_position_leaves_same_bits_on_seq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
