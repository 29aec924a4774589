/* SPDX-License-Identifier: MIT */
/*
 * test_tensor.c — unit tests for core/tensor (mt_tensor.h): tensor views and slices; every fast
 * kernel against its plain reference on random data and awkward shapes (1, odd, primes, empty
 * batch); backward kernels against central finite differences on tiny shapes.
 */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/mt_tensor.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static float *rand_buf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static float *zero_buf(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* |got - ref| <= atol + rtol |ref| everywhere; prints the first mismatches. */
static bool close_enough(const char *what, const float *got, const float *ref, size_t n, float atol,
                         float rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(got[i] - ref[i]) <= atol + rtol * fabsf(ref[i]))) {
            if (bad < 5)
                fprintf(stderr, "%s: mismatch at %zu: got %.7g ref %.7g\n", what, i, got[i],
                        ref[i]);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "%s: %d of %zu mismatches\n", what, bad, n);
    return bad == 0;
}

/* Scalar objective for finite differences: f(ctx) evaluated after perturbing one float. */
typedef double (*objective_fn)(void *ctx);

/* Compare analytic gradient g (n) of f with respect to p (n) with central differences. */
static bool fd_check(const char *what, objective_fn f, void *ctx, float *p, const float *g,
                     size_t n)
{
    const float h = 1e-2f;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = p[i];
        p[i] = keep + h;
        double fp = f(ctx);
        p[i] = keep - h;
        double fm = f(ctx);
        p[i] = keep;
        double num = (fp - fm) / (2.0 * h);
        if (!(fabs(num - g[i]) <= 2e-3 + 2e-2 * fabs(num))) {
            if (bad < 5)
                fprintf(stderr, "%s: fd mismatch at %zu: analytic %.7g numeric %.7g\n", what, i,
                        g[i], num);
            bad++;
        }
    }
    return bad == 0;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* ------------------------------------------------------------------ tensors */

static void test_tensor_init_view_slice(void **state)
{
    size_t shape[3] = {4, 3, 2};
    mt_tensor t, s, r, c;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_tensor_init(&t, 3, shape, &err), MT_OK);
    assert_int_equal(mt_tensor_numel(&t), 24);
    assert_true(mt_tensor_is_contiguous(&t));
    for (size_t i = 0; i < 24; i++)
        t.data[i] = (float)i;
    assert_int_equal(mt_tensor_slice(&t, 1, 1, 2, &s, &err), MT_OK);
    assert_false(mt_tensor_is_contiguous(&s));
    size_t idx[3] = {2, 1, 1};
    assert_true(*mt_tensor_at(&s, idx) == 2 * 6 + 2 * 2 + 1);
    assert_int_equal(mt_tensor_reshape(&s, 1, shape, &r, &err), MT_INVALID_ARGUMENT);
    size_t cs[3] = {4, 2, 2};
    assert_int_equal(mt_tensor_init(&c, 3, cs, &err), MT_OK);
    assert_int_equal(mt_tensor_copy(&c, &s, &err), MT_OK);
    assert_true(c.data[15] == 23.0f);
    assert_int_equal(mt_tensor_copy(&t, &s, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_flatten(&t, &r, &err), MT_OK);
    assert_int_equal(r.shape[1], 6);
    assert_ptr_equal(r.data, t.data);
    assert_int_equal(mt_tensor_slice(&t, 0, 3, 2, &s, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_tensor_slice(&t, 3, 0, 1, &s, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_tensor_init(&r, 5, shape, &err), MT_INVALID_ARGUMENT);
    mt_tensor_fini(&c);
    mt_tensor_fini(&t);
    mt_tensor_fini(&t);
    mt_tensor_fini(NULL);
}

/* ------------------------------------------------------------------ gemm and dense */

static void test_tensor_gemm_every_transpose(void **state)
{
    const size_t dims[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 1, 17}, {33, 31, 2}, {0, 4, 4}, {4, 4, 0}};
    (void)state;
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        size_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                float *a = rand_buf(m * k), *b = rand_buf(k * n), *c = rand_buf(m * n);
                float *r = malloc((m * n + 1) * sizeof(float));
                memcpy(r, c, m * n * sizeof(float));
                size_t lda = ta ? m : k, ldb = tb ? k : n;
                if (lda == 0)
                    lda = 1;
                if (ldb == 0)
                    ldb = 1;
                mt_gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.25f, c, n ? n : 1);
                mt_gemm_ref(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.25f, r, n ? n : 1);
                assert_true(close_enough("gemm", c, r, m * n, 1e-5f, 1e-4f));
                free(a);
                free(b);
                free(c);
                free(r);
            }
    }
}

static void test_tensor_dense_fast_vs_ref(void **state)
{
    const size_t dims[][3] = {{1, 1, 1}, {0, 5, 3}, {7, 13, 11}, {128, 784, 128}, {31, 2, 97}};
    (void)state;
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        size_t bt = dims[d][0], in = dims[d][1], out = dims[d][2];
        float *x = rand_buf(bt * in), *w = rand_buf(in * out), *b = rand_buf(out);
        float *dy = rand_buf(bt * out);
        float *y = zero_buf(bt * out), *yr = zero_buf(bt * out);
        float *dx = zero_buf(bt * in), *dxr = zero_buf(bt * in);
        float *dw = zero_buf(in * out), *dwr = zero_buf(in * out);
        float *db = zero_buf(out), *dbr = zero_buf(out);
        mt_dense_forward(y, x, w, b, bt, in, out);
        mt_dense_forward_ref(yr, x, w, b, bt, in, out);
        assert_true(close_enough("dense fwd", y, yr, bt * out, 1e-4f, 1e-4f));
        mt_dense_forward(y, x, w, NULL, bt, in, out);
        mt_dense_forward_ref(yr, x, w, NULL, bt, in, out);
        assert_true(close_enough("dense fwd nobias", y, yr, bt * out, 1e-4f, 1e-4f));
        mt_dense_backward(dx, dw, db, dy, x, w, bt, in, out);
        mt_dense_backward_ref(dxr, dwr, dbr, dy, x, w, bt, in, out);
        assert_true(close_enough("dense dx", dx, dxr, bt * in, 1e-4f, 1e-4f));
        assert_true(close_enough("dense dw", dw, dwr, in * out, 1e-4f, 1e-4f));
        assert_true(close_enough("dense db", db, dbr, out, 1e-4f, 1e-4f));
        free(x), free(w), free(b), free(dy), free(y), free(yr), free(dx), free(dxr);
        free(dw), free(dwr), free(db), free(dbr);
    }
}

typedef struct dense_ctx {
    float *x, *w, *b, *r, *y;
    size_t bt, in, out;
} dense_ctx;

static double dense_obj(void *p)
{
    dense_ctx *c = p;
    mt_dense_forward(c->y, c->x, c->w, c->b, c->bt, c->in, c->out);
    return dot(c->y, c->r, c->bt * c->out);
}

static void test_tensor_dense_finite_differences(void **state)
{
    dense_ctx c = {.bt = 3, .in = 4, .out = 5};
    (void)state;
    c.x = rand_buf(12), c.w = rand_buf(20), c.b = rand_buf(5), c.r = rand_buf(15);
    c.y = zero_buf(15);
    float dx[12], dw[20], db[5];
    mt_dense_backward(dx, dw, db, c.r, c.x, c.w, 3, 4, 5);
    assert_true(fd_check("dense dx", dense_obj, &c, c.x, dx, 12));
    assert_true(fd_check("dense dw", dense_obj, &c, c.w, dw, 20));
    assert_true(fd_check("dense db", dense_obj, &c, c.b, db, 5));
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y);
}

/* ------------------------------------------------------------------ conv2d */

static void conv_compare(const mt_conv2d_geom *g)
{
    size_t nx = g->batch * g->h * g->w * g->c, nw = g->kh * g->kw * g->c * g->f;
    size_t ny = g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g) * g->f;
    size_t ncols = mt_conv2d_cols_size(g);
    float *x = rand_buf(nx), *w = rand_buf(nw), *b = rand_buf(g->f), *dy = rand_buf(ny);
    float *y = zero_buf(ny), *yr = zero_buf(ny), *cols = zero_buf(ncols), *dcols = zero_buf(ncols);
    float *dx = zero_buf(nx), *dxr = zero_buf(nx), *dw = zero_buf(nw), *dwr = zero_buf(nw);
    float *db = zero_buf(g->f), *dbr = zero_buf(g->f);

    mt_conv2d_forward(y, cols, x, w, b, g);
    mt_conv2d_forward_ref(yr, x, w, b, g);
    assert_true(close_enough("conv fwd", y, yr, ny, 1e-4f, 1e-4f));
    mt_conv2d_backward(dx, dw, db, dcols, dy, cols, w, g);
    mt_conv2d_backward_ref(dxr, dwr, dbr, dy, x, w, g);
    assert_true(close_enough("conv dx", dx, dxr, nx, 1e-4f, 1e-4f));
    assert_true(close_enough("conv dw", dw, dwr, nw, 1e-4f, 1e-4f));
    assert_true(close_enough("conv db", db, dbr, g->f, 1e-4f, 1e-4f));
    free(x), free(w), free(b), free(dy), free(y), free(yr), free(cols), free(dcols);
    free(dx), free(dxr), free(dw), free(dwr), free(db), free(dbr);
}

static void test_tensor_conv2d_fast_vs_ref(void **state)
{
    const mt_conv2d_geom gs[] = {
        {1, 1, 1, 1, 1, 1, 1, false, 1, 1},
        {2, 5, 7, 3, 3, 3, 4, false, 1, 1},
        {2, 5, 7, 3, 3, 3, 4, true, 1, 1},
        {0, 6, 6, 2, 3, 3, 2, true, 1, 1},
        {3, 7, 5, 1, 2, 4, 5, true, 1, 1},
        {1, 4, 4, 2, 5, 5, 3, true, 1, 1},
        {2, 13, 11, 3, 3, 3, 7, false, 1, 1},
        {1, 2, 2, 1, 3, 3, 1, false, 1, 1},
        /* strides: odd and even sizes, "same" padding that is uneven, a 1-channel input */
        {2, 7, 8, 3, 3, 3, 4, true, 2, 2},
        {2, 8, 7, 2, 3, 2, 3, false, 2, 3},
        {1, 9, 9, 1, 3, 3, 5, true, 2, 2},
        {2, 6, 6, 4, 1, 1, 3, false, 2, 2},
        {1, 5, 4, 2, 2, 2, 2, true, 3, 1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
        conv_compare(&gs[i]);
}

/* C = 1 takes the direct kernel on AVX-512 CPUs: 3x3 and other taps, channel counts that are
 * and are not multiples of 16, odd sizes, batch 1 and 0, and more taps than it takes (fallback). */
static void test_tensor_conv2d_one_channel_fast_vs_ref(void **state)
{
    const mt_conv2d_geom gs[] = {
        {2, 28, 28, 1, 3, 3, 32, false, 1, 1}, {1, 9, 11, 1, 3, 3, 33, true, 1, 1},
        {0, 5, 5, 1, 3, 3, 16, false, 1, 1},   {1, 7, 9, 1, 5, 5, 17, false, 1, 1},
        {3, 5, 6, 1, 3, 3, 20, true, 1, 1},    {1, 3, 3, 1, 3, 3, 1, false, 1, 1},
        {2, 8, 8, 1, 6, 5, 3, true, 1, 1},     {1, 6, 7, 1, 1, 1, 48, false, 1, 1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
        conv_compare(&gs[i]);
}

/* dw without db, db without dw, and neither (first layer of a frozen model) match the ref. */
static void test_tensor_conv2d_one_channel_partial_grads(void **state)
{
    const mt_conv2d_geom g = {2, 10, 9, 1, 3, 3, 24, true, 1, 1};
    size_t nx = 2 * 10 * 9, nw = 9 * 24, ny = 2 * 10 * 9 * 24, nc = mt_conv2d_cols_size(&g);
    float *x = rand_buf(nx), *w = rand_buf(nw), *dy = rand_buf(ny);
    float *y = zero_buf(ny), *cols = zero_buf(nc), *dw = rand_buf(nw), *dwr = zero_buf(nw);
    float *db = rand_buf(24), *dbr = zero_buf(24);
    (void)state;

    mt_conv2d_forward(y, cols, x, w, NULL, &g);
    mt_conv2d_backward_ref(NULL, dwr, dbr, dy, x, w, &g);
    mt_conv2d_backward(NULL, dw, NULL, NULL, dy, cols, w, &g);
    assert_true(close_enough("conv dw only", dw, dwr, nw, 1e-4f, 1e-4f));
    mt_conv2d_backward(NULL, NULL, db, NULL, dy, cols, w, &g);
    assert_true(close_enough("conv db only", db, dbr, 24, 1e-4f, 1e-4f));
    mt_conv2d_backward(NULL, NULL, NULL, NULL, dy, cols, w, &g);
    mt_conv2d_forward_ref(dy, x, w, NULL, &g); /* no bias: forward is the plain convolution */
    assert_true(close_enough("conv fwd no bias", y, dy, ny, 1e-4f, 1e-4f));
    free(x), free(w), free(dy), free(y), free(cols), free(dw), free(dwr), free(db);
    free(dbr);
}

typedef struct conv_ctx {
    mt_conv2d_geom g;
    float *x, *w, *b, *r, *y, *cols;
    size_t ny;
} conv_ctx;

static double conv_obj(void *p)
{
    conv_ctx *c = p;
    mt_conv2d_forward(c->y, c->cols, c->x, c->w, c->b, &c->g);
    return dot(c->y, c->r, c->ny);
}

static void test_tensor_conv2d_finite_differences(void **state)
{
    /* C = 2 (im2col path) and C = 1 (direct kernel on AVX-512), each valid and same */
    const mt_conv2d_geom gs[] = {{2, 4, 5, 2, 3, 2, 3, false, 1, 1},
                                 {2, 4, 5, 2, 3, 2, 3, true, 1, 1},
                                 {2, 5, 6, 1, 3, 3, 3, false, 1, 1},
                                 {1, 5, 4, 1, 3, 3, 3, true, 1, 1},
                                 {2, 6, 5, 2, 3, 2, 3, true, 2, 2}};
    (void)state;
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
        conv_ctx c = {.g = gs[i]};
        size_t nx = c.g.batch * c.g.h * c.g.w * c.g.c, nw = c.g.kh * c.g.kw * c.g.c * 3;
        size_t nc = mt_conv2d_cols_size(&c.g);
        c.ny = c.g.batch * mt_conv2d_out_h(&c.g) * mt_conv2d_out_w(&c.g) * 3;
        c.x = rand_buf(nx), c.w = rand_buf(nw), c.b = rand_buf(3), c.r = rand_buf(c.ny);
        c.y = zero_buf(c.ny), c.cols = zero_buf(nc);
        float *dx = zero_buf(nx), *dw = zero_buf(nw), db[3], *dcols = zero_buf(nc);
        conv_obj(&c);
        mt_conv2d_backward(dx, dw, db, dcols, c.r, c.cols, c.w, &c.g);
        assert_true(fd_check("conv dx", conv_obj, &c, c.x, dx, nx));
        assert_true(fd_check("conv dw", conv_obj, &c, c.w, dw, nw));
        assert_true(fd_check("conv db", conv_obj, &c, c.b, db, 3));
        free(c.x), free(c.w), free(c.b), free(c.r), free(c.y), free(c.cols), free(dx), free(dw);
        free(dcols);
    }
}

/* ------------------------------------------------------------------ pool, relu, dropout */

static void test_tensor_maxpool_fast_vs_ref(void **state)
{
    const size_t dims[][4] = {
        {1, 2, 2, 1}, {2, 5, 7, 3}, {0, 4, 4, 2}, {3, 28, 28, 4}, {1, 1, 3, 2}};
    (void)state;
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        size_t b = dims[d][0], h = dims[d][1], w = dims[d][2], c = dims[d][3];
        size_t nin = b * h * w * c, nout = b * (h / 2) * (w / 2) * c;
        float *x = rand_buf(nin), *y = zero_buf(nout), *yr = zero_buf(nout);
        float *dy = rand_buf(nout), *dx = zero_buf(nin), *dxr = zero_buf(nin);
        int32_t *am = calloc(nout + 1, 4), *amr = calloc(nout + 1, 4);
        mt_maxpool2_forward(y, am, x, b, h, w, c);
        mt_maxpool2_forward_ref(yr, amr, x, b, h, w, c);
        assert_true(close_enough("pool fwd", y, yr, nout, 0, 0));
        assert_memory_equal(am, amr, nout * 4);
        mt_maxpool2_backward(dx, dy, am, nin, nout);
        mt_maxpool2_backward_ref(dxr, dy, amr, nin, nout);
        assert_true(close_enough("pool bwd", dx, dxr, nin, 0, 0));
        free(x), free(y), free(yr), free(dy), free(dx), free(dxr), free(am), free(amr);
    }
}

typedef struct pool_ctx {
    float *x, *y, *r;
    int32_t *am;
} pool_ctx;

static double pool_obj(void *p)
{
    pool_ctx *c = p;
    mt_maxpool2_forward(c->y, c->am, c->x, 1, 4, 4, 2);
    return dot(c->y, c->r, 8);
}

static void test_tensor_relu_pool_dropout(void **state)
{
    const size_t ns[] = {0, 1, 7, 1031};
    (void)state;
    for (size_t d = 0; d < 4; d++) {
        size_t n = ns[d];
        float *x = rand_buf(n), *y = zero_buf(n), *yr = zero_buf(n), *dy = rand_buf(n);
        float *dx = zero_buf(n), *dxr = zero_buf(n);
        uint8_t *mask = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            mask[i] = (uint8_t)(i % 3 != 0);
        mt_relu_forward(y, x, n);
        mt_relu_forward_ref(yr, x, n);
        assert_true(close_enough("relu fwd", y, yr, n, 0, 0));
        mt_relu_backward(dx, dy, y, n);
        mt_relu_backward_ref(dxr, dy, yr, n);
        assert_true(close_enough("relu bwd", dx, dxr, n, 0, 0));
        mt_dropout_forward(y, x, mask, 2.0f, n);
        mt_dropout_forward_ref(yr, x, mask, 2.0f, n);
        assert_true(close_enough("dropout fwd", y, yr, n, 0, 0));
        mt_dropout_backward(dx, dy, mask, 2.0f, n);
        for (size_t i = 0; i < n; i++)
            assert_true(dx[i] == (mask[i] ? 2.0f * dy[i] : 0.0f));
        free(x), free(y), free(yr), free(dy), free(dx), free(dxr), free(mask);
    }
    /* max pool: finite differences (random inputs have no ties) */
    pool_ctx c;
    c.x = rand_buf(32), c.y = zero_buf(8), c.r = rand_buf(8), c.am = calloc(8, 4);
    float dx[32];
    pool_obj(&c);
    mt_maxpool2_backward(dx, c.r, c.am, 32, 8);
    assert_true(fd_check("pool dx", pool_obj, &c, c.x, dx, 32));
    free(c.x), free(c.y), free(c.r), free(c.am);
}

/* ------------------------------------------------------------------ softmax cross-entropy */

typedef struct xent_ctx {
    float *z;
    int32_t *lab;
    size_t b, k;
} xent_ctx;

static double xent_obj(void *p)
{
    xent_ctx *c = p;
    double loss = 0.0;
    size_t ok = 0;
    mt_softmax_xent(NULL, &loss, &ok, c->z, c->lab, c->b, c->k, 1.0f, NULL);
    return loss / 4.0;
}

static void test_tensor_softmax_xent(void **state)
{
    const size_t dims[][2] = {{1, 1}, {0, 10}, {5, 10}, {33, 7}, {128, 10}};
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        size_t b = dims[d][0], k = dims[d][1];
        float *z = rand_buf(b * k), *g = zero_buf(b * k), *gr = zero_buf(b * k);
        int32_t *lab = malloc((b + 1) * 4);
        double l = 0, lr = 0;
        size_t ok = 0, okr = 0;
        for (size_t i = 0; i < b; i++) {
            lab[i] = (int32_t)(i % k);
            z[i * k] *= 20.0f; /* large logits: the stable path matters */
        }
        assert_int_equal(mt_softmax_xent(g, &l, &ok, z, lab, b, k, 0.25f, &err), MT_OK);
        assert_int_equal(mt_softmax_xent_ref(gr, &lr, &okr, z, lab, b, k, 0.25f, &err), MT_OK);
        assert_true(fabs(l - lr) <= 1e-4 * (1 + fabs(lr)));
        assert_int_equal(ok, okr);
        assert_true(close_enough("xent grad", g, gr, b * k, 1e-6f, 1e-4f));
        free(z), free(g), free(gr), free(lab);
    }
    /* extreme logits stay finite */
    float z[3] = {1000.0f, -1000.0f, 0.0f}, g[3];
    int32_t lab[1] = {1};
    double l = 0;
    size_t ok = 0;
    assert_int_equal(mt_softmax_xent(g, &l, &ok, z, lab, 1, 3, 1.0f, &err), MT_OK);
    assert_true(isfinite(l) && fabs(l - 2000.0) < 1e-3);
    lab[0] = 3;
    assert_int_equal(mt_softmax_xent(g, &l, &ok, z, lab, 1, 3, 1.0f, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "label 3"));
    lab[0] = -1;
    assert_int_equal(mt_softmax_xent_ref(g, &l, &ok, z, lab, 1, 3, 1.0f, &err),
                     MT_INVALID_ARGUMENT);
    /* finite differences with grad_scale 1/4 */
    xent_ctx c = {.b = 4, .k = 5};
    c.z = rand_buf(20), c.lab = malloc(16);
    for (int i = 0; i < 4; i++)
        c.lab[i] = i;
    float gz[20];
    l = 0;
    mt_softmax_xent(gz, &l, &ok, c.z, c.lab, 4, 5, 0.25f, &err);
    assert_true(fd_check("xent dz", xent_obj, &c, c.z, gz, 20));
    free(c.z), free(c.lab);
}

/* ------------------------------------------------------------------ batch norm */

typedef struct bn_ctx {
    float *x, *gamma, *beta, *r, *y, *xhat, *mean, *var;
    size_t n, c;
} bn_ctx;

/* Training-mode batch norm over all n rows (one replica: M = n). */
static void bn_train_forward(bn_ctx *c)
{
    mt_bn_sum(c->mean, c->x, c->n, c->c);
    for (size_t j = 0; j < c->c; j++)
        c->mean[j] /= (float)c->n;
    mt_bn_sqdev(c->var, c->x, c->mean, c->n, c->c);
    for (size_t j = 0; j < c->c; j++)
        c->var[j] /= (float)c->n;
    mt_bn_normalize(c->y, c->xhat, c->x, c->mean, c->var, 1e-3f, c->gamma, c->beta, c->n, c->c);
}

static double bn_obj(void *p)
{
    bn_ctx *c = p;
    bn_train_forward(c);
    return dot(c->y, c->r, c->n * c->c);
}

static void test_tensor_batchnorm(void **state)
{
    (void)state;
    for (int affine = 0; affine < 2; affine++) {
        bn_ctx c = {.n = 6, .c = 3};
        size_t nn = 18;
        c.x = rand_buf(nn), c.r = rand_buf(nn), c.y = zero_buf(nn), c.xhat = zero_buf(nn);
        c.mean = zero_buf(3), c.var = zero_buf(3);
        c.gamma = affine ? rand_buf(3) : NULL;
        c.beta = affine ? rand_buf(3) : NULL;
        float yr[18], xhr[18], dx[18], dxr[18], sdy[3], sdyh[3];
        bn_train_forward(&c);
        mt_bn_normalize_ref(yr, xhr, c.x, c.mean, c.var, 1e-3f, c.gamma, c.beta, 6, 3);
        assert_true(close_enough("bn fwd", c.y, yr, nn, 1e-5f, 1e-4f));
        assert_true(close_enough("bn xhat", c.xhat, xhr, nn, 1e-5f, 1e-4f));
        mt_bn_grad_sums(sdy, sdyh, c.r, c.xhat, 6, 3);
        mt_bn_backward_dx(dx, c.r, c.xhat, c.gamma, c.var, 1e-3f, sdy, sdyh, 6, 6, 3);
        mt_bn_backward_dx_ref(dxr, c.r, c.xhat, c.gamma, c.var, 1e-3f, sdy, sdyh, 6, 6, 3);
        assert_true(close_enough("bn dx", dx, dxr, nn, 1e-5f, 1e-4f));
        assert_true(fd_check("bn dx", bn_obj, &c, c.x, dx, nn));
        if (affine) {
            /* dgamma = Σ dy·xhat, dbeta = Σ dy */
            assert_true(fd_check("bn dgamma", bn_obj, &c, c.gamma, sdyh, 3));
            assert_true(fd_check("bn dbeta", bn_obj, &c, c.beta, sdy, 3));
        }
        /* moving statistics and inference mode */
        float mv[3] = {0, 0, 0};
        bn_train_forward(&c); /* the fd checks left statistics of a perturbed x */
        mt_bn_update_moving(mv, c.mean, 0.9f, 3);
        assert_float_equal(mv[1], 0.1f * c.mean[1], 1e-6);
        mt_bn_normalize(c.y, NULL, c.x, c.mean, c.var, 1e-3f, c.gamma, c.beta, 6, 3);
        assert_true(close_enough("bn infer", c.y, yr, nn, 1e-5f, 1e-4f));
        free(c.x), free(c.r), free(c.y), free(c.xhat), free(c.mean), free(c.var), free(c.gamma);
        free(c.beta);
    }
}

/* ------------------------------------------------------------------ optimizers */

static void test_tensor_optimizers(void **state)
{
    float w[2] = {1.0f, -1.0f}, v[2] = {0, 0}, m[2] = {0, 0}, g[2] = {0.5f, -2.0f};
    (void)state;
    mt_sgd_update(w, NULL, g, 0.1f, 0.0f, 2);
    assert_float_equal(w[0], 0.95f, 1e-6);
    mt_sgd_update(w, v, g, 0.1f, 0.9f, 2);
    mt_sgd_update(w, v, g, 0.1f, 0.9f, 2);
    /* v1 = -0.05, v2 = -0.045 - 0.05 = -0.095; w = 0.95 - 0.145 */
    assert_float_equal(w[0], 0.805f, 1e-6);
    w[0] = 1.0f, w[1] = -1.0f, v[0] = v[1] = 0;
    mt_adam_update(w, m, v, g, 1e-3f, 0.9f, 0.999f, 1e-7f, 1, 2);
    /* first Adam step moves each weight by lr * sign(g) (up to eps) */
    assert_float_equal(w[0], 1.0f - 1e-3f, 1e-6);
    assert_float_equal(w[1], -1.0f + 1e-3f, 1e-6);

    /* a shard updated alone (other SIMD alignment, scalar tail) is bit-identical to the same
     * elements of the whole tensor */
    float *wa = rand_buf(23), *ga = rand_buf(23), *ma = zero_buf(23), *va = zero_buf(23);
    float ws[20], gs[20], ms[20] = {0}, vs[20] = {0};
    memcpy(ws, wa + 3, sizeof(ws));
    memcpy(gs, ga + 3, sizeof(gs));
    for (int64_t t = 1; t <= 3; t++) {
        mt_adam_update(wa, ma, va, ga, 1e-2f, 0.9f, 0.999f, 1e-7f, t, 23);
        mt_adam_update(ws, ms, vs, gs, 1e-2f, 0.9f, 0.999f, 1e-7f, t, 20);
    }
    assert_memory_equal(ws, wa + 3, sizeof(ws));
    assert_memory_equal(vs, va + 3, sizeof(vs));
    free(wa), free(ga), free(ma), free(va);
}

/* Adam on 8 lanes (AVX where the CPU has it) and 4 (SSE): the scalar loop's bits for a shard at
 * every alignment 0..7 and of every length 0..40, over three steps. */
static void test_tensor_adam_lanes_match_scalar(void **state)
{
    enum { most = 48 };
    float *w0 = rand_buf(most), *g = rand_buf(most);
    (void)state;
    for (size_t at = 0; at < 8; at++)
        for (size_t n = 0; n <= 40; n++)
            for (int k = 0; k < 2; k++) {
                static const int lanes[2] = {8, 4};
                float w[2][most], m[2][most] = {{0}}, v[2][most] = {{0}};
                memcpy(w[0], w0, sizeof(w[0]));
                memcpy(w[1], w0, sizeof(w[1]));
                for (int64_t t = 1; t <= 3; t++) {
                    mt_adam_update_lanes(w[0] + at, m[0] + at, v[0] + at, g + at, 1e-2f, 0.9f,
                                         0.999f, 1e-7f, t, n, 1);
                    mt_adam_update_lanes(w[1] + at, m[1] + at, v[1] + at, g + at, 1e-2f, 0.9f,
                                         0.999f, 1e-7f, t, n, lanes[k]);
                }
                assert_memory_equal(w[1], w[0], sizeof(w[0]));
                assert_memory_equal(m[1], m[0], sizeof(m[0]));
                assert_memory_equal(v[1], v[0], sizeof(v[0]));
                if (n == 40) /* the weights moved */
                    assert_true(w[1][at] != w0[at]);
            }
    free(w0), free(g);
}

/* Batch-norm sums over 64 x 26 x 26 conv rows (the Fashion-MNIST CNN's first layer) stay within
 * 1e-6 relative of float64 (a float accumulator drifts by about 1e-4 here). */
static void test_tensor_batchnorm_sums_accurate(void **state)
{
    size_t n = 64 * 26 * 26, c = 300; /* c > one 256-column block */
    float *x = malloc(n * c * sizeof(float)), *dy = malloc(n * c * sizeof(float));
    float sum[300], mean[300], sq[300], sdy[300], sdyh[300];
    double worst = 0.0;
    unsigned r = 7;
    (void)state;
    assert_non_null(x);
    assert_non_null(dy);
    for (size_t i = 0; i < n * c; i++) {
        r = r * 1103515245u + 12345u;
        x[i] = 0.5f + (float)((r >> 8) & 0xffff) / 65536.0f; /* positive: the worst case */
        dy[i] = (float)((r >> 4) & 0xff) / 256.0f;
    }
    mt_bn_sum(sum, x, n, c);
    for (size_t j = 0; j < c; j++)
        mean[j] = sum[j] / (float)n;
    mt_bn_sqdev(sq, x, mean, n, c);
    mt_bn_grad_sums(sdy, sdyh, dy, x, n, c);
    for (size_t j = 0; j < c; j++) {
        double s = 0, q = 0, a = 0, b = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)x[i * c + j] - mean[j];
            s += x[i * c + j];
            q += d * d;
            a += dy[i * c + j];
            b += (double)dy[i * c + j] * x[i * c + j];
        }
        worst = fmax(worst, fabs(sum[j] - s) / fabs(s));
        worst = fmax(worst, fabs(sq[j] - q) / fabs(q));
        worst = fmax(worst, fabs(sdy[j] - a) / fabs(a));
        worst = fmax(worst, fabs(sdyh[j] - b) / fabs(b));
    }
    if (worst > 1e-6)
        print_error("batch-norm sums: worst relative error %g\n", worst);
    assert_true(worst <= 1e-6);
    free(x);
    free(dy);
}

/* The fast attention (causal in row blocks of 32) against the double-precision reference, at
 * lengths below, at and across the block size (a partial last block), causal and not. */
static void test_tensor_attention_fast_vs_ref(void **state)
{
    const size_t lens[] = {5, 32, 70}, batch = 2, heads = 2, hd = 8;
    (void)state;
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
        for (int causal = 0; causal < 2; causal++) {
            size_t t = lens[li], nin = batch * t * heads * 3 * hd, nout = batch * t * heads * hd;
            size_t np = batch * heads * t * t;
            float *qkv = rand_buf(nin), *dy = rand_buf(nout), *o = zero_buf(nout);
            float * or = zero_buf(nout), *p = rand_buf(np), *pr = rand_buf(np);
            float *dx = rand_buf(nin), *dxr = rand_buf(nin), *scr = rand_buf(t * t);
            char what[64];
            mt_attention_forward(o, p, qkv, batch, t, heads, hd, causal);
            mt_attention_forward_ref(or, pr, qkv, batch, t, heads, hd, causal);
            snprintf(what, sizeof(what), "attention t=%zu causal=%d out", t, causal);
            assert_true(close_enough(what, o, or, nout, 1e-5f, 1e-4f));
            snprintf(what, sizeof(what), "attention t=%zu causal=%d probs", t, causal);
            assert_true(close_enough(what, p, pr, np, 1e-6f, 1e-4f));
            for (size_t i = 0; causal && i < batch * heads * t; i++) /* zero above the diagonal */
                for (size_t j = i % t + 1; j < t; j++)
                    assert_true(p[i * t + j] == 0.0f);
            mt_attention_backward(dx, scr, dy, qkv, pr, batch, t, heads, hd, causal);
            mt_attention_backward_ref(dxr, scr, dy, qkv, pr, batch, t, heads, hd, causal);
            snprintf(what, sizeof(what), "attention t=%zu causal=%d dqkv", t, causal);
            assert_true(close_enough(what, dx, dxr, nin, 1e-5f, 1e-4f));
            free(qkv), free(dy), free(o), free(or), free(p), free(pr), free(dx), free(dxr);
            free(scr);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_init_view_slice),
        cmocka_unit_test(test_tensor_gemm_every_transpose),
        cmocka_unit_test(test_tensor_dense_fast_vs_ref),
        cmocka_unit_test(test_tensor_dense_finite_differences),
        cmocka_unit_test(test_tensor_conv2d_fast_vs_ref),
        cmocka_unit_test(test_tensor_conv2d_one_channel_fast_vs_ref),
        cmocka_unit_test(test_tensor_conv2d_one_channel_partial_grads),
        cmocka_unit_test(test_tensor_conv2d_finite_differences),
        cmocka_unit_test(test_tensor_maxpool_fast_vs_ref),
        cmocka_unit_test(test_tensor_relu_pool_dropout),
        cmocka_unit_test(test_tensor_softmax_xent),
        cmocka_unit_test(test_tensor_batchnorm),
        cmocka_unit_test(test_tensor_batchnorm_sums_accurate),
        cmocka_unit_test(test_tensor_optimizers),
        cmocka_unit_test(test_tensor_adam_lanes_match_scalar),
        cmocka_unit_test(test_tensor_attention_fast_vs_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
