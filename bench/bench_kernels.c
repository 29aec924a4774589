/* SPDX-License-Identifier: MIT */
/*
 * bench_kernels.c — dense, conv2d and attention forward+backward throughput as a fraction of
 * plain cblas_sgemm GFLOP/s measured in the same run at the same (M, N, K) shapes.
 * Targets (issue #3): dense >= 70%, conv2d >= 50%. The baseline is the forward GEMM of the
 * im2col formulation, (B*OH*OW) x F x (KH*KW*C) for conv2d and B x OUT x IN for dense, with
 * alpha 1, beta 0; the kernel is credited the flops of its fwd + dW (+ dx) GEMMs, whatever it
 * actually runs. Attention (per head and example: q·kᵀ and p·v forward, four products backward)
 * is credited the flops of the full T×T products, causal or not, against the sgemm (T, T, hd):
 * a causal row above the full one is the work the causal kernel skips. Then mesh_invariant's
 * canonical product (mt_repro_gemm, core/repro/repro_gemm.c) against the sgemm of the same
 * product on the Fashion-MNIST MLP's shapes (784 -> 128 -> 10) for a device's batch of 128 (one
 * device, 8 leaves) and 64 (two devices, 4 leaves each): both layers' x . W, the weight gradients
 * x^T . dy in the batch's leaves (a read transposed) and the second layer's dx = dy . W^T.
 * `bench_kernels repro` runs only those. Run with OPENBLAS_CORETYPE set or through a program that
 * calls mt_blas_boot (this one does). One BLAS thread.
 */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas/mt_blas.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

/* Thread CPU time: the machine is shared, and time spent descheduled is not the kernel's. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *buf(size_t n)
{
    float *p = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

typedef void (*run_fn)(void *ctx);

/* Seconds per call of fn: the mean over calls filling at least 0.05 s. */
static double time_once(run_fn fn, void *ctx)
{
    int n = 0;
    double t0 = now_s(), t;
    do {
        fn(ctx);
        n++;
        t = now_s() - t0;
    } while (t < 0.05);
    return t / n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define ROUNDS 11

/*
 * The machine is shared and its load moves within seconds, so the kernel and its sgemm baseline
 * are timed alternately, ROUNDS times; each round gives one ratio and the medians are printed
 * (min and max of the ratio show the spread).
 */
static void compare(const char *name, run_fn fn, void *ctx, double flops, run_fn base_fn,
                    void *base_ctx, double base_flops)
{
    double gf[ROUNDS], bf[ROUNDS], ratio[ROUNDS], lo = 1e30, hi = 0;
    fn(ctx), base_fn(base_ctx); /* warm caches and OpenBLAS buffers */
    for (int r = 0; r < ROUNDS; r++) {
        gf[r] = flops / time_once(fn, ctx) * 1e-9;
        bf[r] = base_flops / time_once(base_fn, base_ctx) * 1e-9;
        ratio[r] = gf[r] / bf[r];
        lo = ratio[r] < lo ? ratio[r] : lo;
        hi = ratio[r] > hi ? ratio[r] : hi;
    }
    printf("%-34s %10.1f %10.1f %7.0f%% %5.0f%%-%.0f%%\n", name, median(gf, ROUNDS),
           median(bf, ROUNDS), 100 * median(ratio, ROUNDS), 100 * lo, 100 * hi);
}

typedef struct gemm_ctx {
    size_t m, n, k;
    float *a, *b, *c;
} gemm_ctx;

static void run_gemm(void *p)
{
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->m, (int)g->n, (int)g->k, 1.0f,
                g->a, (int)g->k, g->b, (int)g->n, 0.0f, g->c, (int)g->n);
}

typedef struct dense_ctx {
    size_t b, in, out;
    float *x, *w, *bias, *y, *dy, *dx, *dw, *db;
} dense_ctx;

static void run_dense(void *p)
{
    dense_ctx *d = p;
    mt_dense_forward(d->y, d->x, d->w, d->bias, d->b, d->in, d->out);
    mt_dense_backward(d->dx, d->dw, d->db, d->dy, d->x, d->w, d->b, d->in, d->out);
}

typedef struct conv_ctx {
    mt_conv2d_geom g;
    bool first; /* first layer: no input gradient */
    float *x, *w, *bias, *y, *dy, *dx, *dw, *db, *cols, *dcols;
} conv_ctx;

static void run_conv(void *p)
{
    conv_ctx *c = p;
    mt_conv2d_forward(c->y, c->cols, c->x, c->w, c->bias, &c->g);
    mt_conv2d_backward(c->first ? NULL : c->dx, c->dw, c->db, c->dcols, c->dy, c->cols, c->w,
                       &c->g);
}

typedef struct attn_ctx {
    size_t b, t, h, hd;
    bool causal;
    float *qkv, *out, *probs, *dout, *dqkv, *scr;
} attn_ctx;

static void run_attn(void *p)
{
    attn_ctx *a = p;
    mt_attention_forward(a->out, a->probs, a->qkv, a->b, a->t, a->h, a->hd, a->causal);
    mt_attention_backward(a->dqkv, a->scr, a->dout, a->qkv, a->probs, a->b, a->t, a->h, a->hd,
                          a->causal);
}

/* c (m x n) = a . b over k, in `chains` chains for the canonical product; ta: a read transposed
 * (a(i, q) at a[q * m + i], a weight gradient's x^T), else row-major with the bias (a forward). */
typedef struct repro_ctx {
    size_t m, n, k;
    int chains, ta;
    float *a, *b, *c, *bias;
} repro_ctx;

static void run_repro(void *p)
{
    repro_ctx *r = p;
    mt_repro_gemm(r->c, r->n, r->a, r->ta ? 1 : r->k, r->ta ? r->m : 1, r->b, r->n,
                  r->ta ? NULL : r->bias, r->m, r->n, r->k, r->chains);
}

static void run_repro_sgemm(void *p)
{
    repro_ctx *r = p;
    cblas_sgemm(CblasRowMajor, r->ta ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)r->m,
                (int)r->n, (int)r->k, 1.0f, r->a, r->ta ? (int)r->m : (int)r->k, r->b, (int)r->n,
                0.0f, r->c, (int)r->n);
}

/* The MLP's products for a device's batch bsz (leaves: its leaves of the batch of 128). */
static void repro_mlp(size_t bsz, int leaves)
{
    float *x = buf(bsz * 784), *w1 = buf(784 * 128), *b1 = buf(128), *h = buf(bsz * 128);
    float *w2 = buf(128 * 10), *b2 = buf(10), *dy1 = buf(bsz * 128), *dy2 = buf(bsz * 10);
    float *w2t = buf(10 * 128), *c = buf(784 * 128);
    repro_ctx ps[] = {
        {bsz, 128, 784, 1, 0, x, w1, c, b1},         {bsz, 10, 128, 1, 0, h, w2, c, b2},
        {784, 128, bsz, leaves, 1, x, dy1, c, NULL}, {128, 10, bsz, leaves, 1, h, dy2, c, NULL},
        {bsz, 128, 10, 1, 0, dy2, w2t, c, NULL},
    };
    static const char *what[] = {"x.W1", "h.W2", "x^T.dy1", "h^T.dy2", "dy2.W2^T"};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        char name[64];
        double fl = 2.0 * (double)ps[i].m * (double)ps[i].n * (double)ps[i].k;
        snprintf(name, sizeof(name), "repro %s %zux%zux%zu c%d", what[i], ps[i].m, ps[i].n, ps[i].k,
                 ps[i].chains);
        compare(name, run_repro, &ps[i], fl, run_repro_sgemm, &ps[i], fl);
    }
    free(x), free(w1), free(b1), free(h), free(w2), free(b2), free(dy1), free(dy2), free(w2t);
    free(c);
}

static gemm_ctx gemm_new(size_t m, size_t n, size_t k)
{
    return (gemm_ctx){m, n, k, buf(m * k), buf(k * n), buf(m * n)};
}

static void gemm_free(gemm_ctx *g)
{
    free(g->a), free(g->b), free(g->c);
}

int main(int argc, char **argv)
{
    static const size_t dense_shapes[][3] = {{128, 784, 128}, {128, 128, 10}, {64, 1600, 64}};
    static const mt_conv2d_geom conv_shapes[] = {
        {64, 28, 28, 1, 3, 3, 32, false, 1, 1},
        {64, 13, 13, 32, 3, 3, 64, false, 1, 1},
        {64, 14, 14, 32, 3, 3, 32, true, 1, 1},
    };
    mt_blas_boot(argc, argv);
    bool only_repro = argc > 1 && strcmp(argv[1], "repro") == 0;
    printf("OpenBLAS core %s, 1 thread\n", mt_blas_corename());
    printf("%-34s %10s %10s %8s %11s\n", "kernel (fwd+bwd)", "GFLOP/s", "sgemm", "ratio",
           "min-max");
    for (size_t i = 0; !only_repro && i < sizeof(dense_shapes) / sizeof(dense_shapes[0]); i++) {
        dense_ctx d = {
            .b = dense_shapes[i][0], .in = dense_shapes[i][1], .out = dense_shapes[i][2]};
        size_t b = d.b, in = d.in, out = d.out;
        d.x = buf(b * in), d.w = buf(in * out), d.bias = buf(out), d.y = buf(b * out);
        d.dy = buf(b * out), d.dx = buf(b * in), d.dw = buf(in * out), d.db = buf(out);
        gemm_ctx base = gemm_new(b, out, in);
        double fl = 2.0 * (double)b * in * out;
        char name[64];
        snprintf(name, sizeof(name), "dense B=%zu %zu->%zu", b, in, out);
        compare(name, run_dense, &d, 3 * fl, run_gemm, &base, fl);
        gemm_free(&base);
        free(d.x), free(d.w), free(d.bias), free(d.y), free(d.dy), free(d.dx), free(d.dw);
        free(d.db);
    }
    for (size_t i = 0; !only_repro && i < sizeof(conv_shapes) / sizeof(conv_shapes[0]); i++) {
        conv_ctx c = {.g = conv_shapes[i], .first = i == 0};
        mt_conv2d_geom *g = &c.g;
        size_t nx = g->batch * g->h * g->w * g->c, nw = g->kh * g->kw * g->c * g->f;
        size_t m = g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g), k = g->kh * g->kw * g->c;
        size_t ny = m * g->f, nc = mt_conv2d_cols_size(g);
        c.x = buf(nx), c.w = buf(nw), c.bias = buf(g->f), c.y = buf(ny), c.dy = buf(ny);
        c.dx = buf(nx), c.dw = buf(nw), c.db = buf(g->f), c.cols = buf(nc), c.dcols = buf(nc);
        gemm_ctx base = gemm_new(m, g->f, k); /* the forward GEMM of the im2col formulation */
        double fl = 2.0 * (double)m * g->f * k;
        char name[64];
        snprintf(name, sizeof(name), "conv2d %zux%zux%zu->%zu k%zu %s%s", g->h, g->w, g->c, g->f,
                 g->kh, g->same ? "same" : "valid", c.first ? " (no dx)" : "");
        compare(name, run_conv, &c, (c.first ? 2 : 3) * fl, run_gemm, &base, fl);
        gemm_free(&base);
        free(c.x), free(c.w), free(c.bias), free(c.y), free(c.dy), free(c.dx), free(c.dw);
        free(c.db), free(c.cols), free(c.dcols);
    }
    /* the char_lm example's shape, batch 8 */
    for (int causal = 0; !only_repro && causal < 2; causal++) {
        attn_ctx a = {.b = 8, .t = 128, .h = 4, .hd = 32, .causal = causal};
        size_t nin = a.b * a.t * a.h * 3 * a.hd, nout = a.b * a.t * a.h * a.hd;
        a.qkv = buf(nin), a.dqkv = buf(nin), a.out = buf(nout), a.dout = buf(nout);
        a.probs = buf(a.b * a.h * a.t * a.t), a.scr = buf(a.t * a.t);
        gemm_ctx base = gemm_new(a.t, a.t, a.hd);
        double fl = 2.0 * (double)a.t * a.t * a.hd;
        char name[64];
        snprintf(name, sizeof(name), "attention T=%zu hd=%zu%s", a.t, a.hd,
                 causal ? " causal" : "");
        compare(name, run_attn, &a, 6 * fl * (double)(a.b * a.h), run_gemm, &base, fl);
        gemm_free(&base);
        free(a.qkv), free(a.dqkv), free(a.out), free(a.dout), free(a.probs), free(a.scr);
    }
    repro_mlp(128, mt_repro_leaves(128));
    repro_mlp(64, mt_repro_leaves(128) / 2);
    return 0;
}
