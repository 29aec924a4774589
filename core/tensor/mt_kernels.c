/* SPDX-License-Identifier: MIT */
/*
 * mt_kernels.c — the fast kernels of mt_tensor.h: OpenBLAS sgemm for dense and conv2d
 * (im2col + one sgemm over the whole batch; a direct AVX-512 kernel when C = 1), tight loops for
 * the element-wise ones.
 * Each has a plain reference in mt_kernels_ref.c. Threading: reentrant.
 * Tests: tests/unit/test_tensor.c. Benchmarks: bench/bench_kernels.c.
 */
/*
 * The element-wise loops below must vectorise, and the project builds at -O2, where gcc 12 only
 * vectorises loops whose trip count is a known multiple of the vector width. ReLU and max-pool
 * were scalar loops with unpredictable branches and took 29% of the samples of a CNN run (perf);
 * this file alone builds at O3 and those loops are written as branch-free selects.
 */
#if defined(__GNUC__) && !defined(__clang__) /* clang has no such pragma (fuzz builds) */
#pragma GCC optimize("O3")
/* the GELU loops' clamps are selects only without trapping-math (nothing here reads FP flags) */
#define MT_NO_TRAPPING_MATH __attribute__((optimize("no-trapping-math")))
#else
#define MT_NO_TRAPPING_MATH
#endif

#include "tensor/mt_tensor.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

void mt_gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
             size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
}

/* out[j] = Σ_i a[i, j] for a (rows, cols). */
static void col_sums(float *out, const float *a, size_t rows, size_t cols)
{
    memset(out, 0, cols * sizeof(float));
    for (size_t i = 0; i < rows; i++) {
        const float *r = a + i * cols;
        for (size_t j = 0; j < cols; j++)
            out[j] += r[j];
    }
}

void mt_dense_forward(float *y, const float *x, const float *w, const float *b, size_t batch,
                      size_t in, size_t out)
{
    if (batch == 0 || out == 0)
        return;
    if (b == NULL) {
        mt_gemm(false, false, batch, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
        return;
    }
    /* y prefilled with the bias and beta = 1: OpenBLAS skips its beta pass over y (beta = 0
     * zeroes y first), so the bias costs one write of y instead of a zeroing and a
     * read-modify-write */
    for (size_t i = 0; i < batch; i++)
        memcpy(y + i * out, b, out * sizeof(float));
    mt_gemm(false, false, batch, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
}

void mt_dense_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, size_t batch, size_t in, size_t out)
{
    if (dx != NULL)
        mt_gemm(false, true, batch, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
    if (dw != NULL)
        mt_gemm(true, false, in, out, batch, 1.0f, x, in, dy, out, 0.0f, dw, out);
    if (db != NULL)
        col_sums(db, dy, batch, out);
}

/* ------------------------------------------------------------------ attention */

void mt_softmax_row(float *s, size_t n, size_t t)
{
    float m = s[0], sum = 0.0f;
    for (size_t j = 1; j < n; j++)
        m = s[j] > m ? s[j] : m;
    for (size_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    for (size_t j = 0; j < n; j++)
        s[j] /= sum;
    for (size_t j = n; j < t; j++)
        s[j] = 0.0f;
}

/*
 * Causal attention in row blocks: the queries of rows [r0, r1) meet only the keys [0, r1), so the
 * products above the diagonal's block are never computed (about half the flops of the full T×T
 * product at T = 128). A block of CAUSAL_ROWS rows keeps each product a real sgemm.
 */
#define CAUSAL_ROWS 32

void mt_attention_forward(float *out, float *probs, const float *qkv, size_t batch, size_t t,
                          size_t heads, size_t hd, bool causal)
{
    size_t cin = heads * 3 * hd, cout = heads * hd, rb = causal ? CAUSAL_ROWS : t;
    float scale = 1.0f / sqrtf((float)hd);

    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++) {
            const float *q = qkv + b * t * cin + h * 3 * hd, *k = q + hd, *v = q + 2 * hd;
            float *p = probs + (b * heads + h) * t * t, *o = out + b * t * cout + h * hd;
            for (size_t r0 = 0; r0 < t; r0 += rb) {
                size_t r1 = r0 + rb < t ? r0 + rb : t, nk = causal ? r1 : t;
                mt_gemm(false, true, r1 - r0, nk, hd, scale, q + r0 * cin, cin, k, cin, 0.0f,
                        p + r0 * t, t);
                for (size_t i = r0; i < r1; i++)
                    mt_softmax_row(p + i * t, causal ? i + 1 : t, t);
                mt_gemm(false, false, r1 - r0, hd, nk, 1.0f, p + r0 * t, t, v, cin, 0.0f,
                        o + r0 * cout, cout);
            }
        }
}

/*
 * Causal: p is zero above the diagonal, so dv's rows [c0, c1) and dk's take the rows [c0, t)
 * of p and ds only, and ds's row block [r0, r1) the columns [0, r1) only (the rest is zero).
 */
void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *probs, size_t batch, size_t t, size_t heads, size_t hd,
                           bool causal)
{
    size_t cin = heads * 3 * hd, cout = heads * hd, rb = causal ? CAUSAL_ROWS : t;
    float scale = 1.0f / sqrtf((float)hd);

    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++) {
            const float *q = qkv + b * t * cin + h * 3 * hd, *k = q + hd, *v = q + 2 * hd;
            const float *p = probs + (b * heads + h) * t * t, *dy = dout + b * t * cout + h * hd;
            float *dq = dqkv + b * t * cin + h * 3 * hd, *dk = dq + hd, *dv = dq + 2 * hd;
            float *ds = scratch;
            /* dv = pᵀ·dy; dp = dy·vᵀ; ds = p ⊙ (dp − Σ_j p·dp); dq = ds·k·scale; dk = dsᵀ·q·scale
             */
            for (size_t c0 = 0; c0 < t; c0 += rb) {
                size_t c1 = c0 + rb < t ? c0 + rb : t, i0 = causal ? c0 : 0;
                mt_gemm(true, false, c1 - c0, hd, t - i0, 1.0f, p + i0 * t + c0, t, dy + i0 * cout,
                        cout, 0.0f, dv + c0 * cin, cin);
            }
            for (size_t r0 = 0; r0 < t; r0 += rb) {
                size_t r1 = r0 + rb < t ? r0 + rb : t, nk = causal ? r1 : t;
                mt_gemm(false, true, r1 - r0, nk, hd, 1.0f, dy + r0 * cout, cout, v, cin, 0.0f,
                        ds + r0 * t, t);
                for (size_t i = r0; i < r1; i++) {
                    size_t n = causal ? i + 1 : t;
                    float dot = 0.0f, *row = ds + i * t;
                    const float *pr = p + i * t;
                    for (size_t j = 0; j < n; j++)
                        dot += pr[j] * row[j];
                    for (size_t j = 0; j < n; j++)
                        row[j] = pr[j] * (row[j] - dot);
                    for (size_t j = n; j < t; j++)
                        row[j] = 0.0f;
                }
                mt_gemm(false, false, r1 - r0, hd, nk, scale, ds + r0 * t, t, k, cin, 0.0f,
                        dq + r0 * cin, cin);
            }
            for (size_t c0 = 0; c0 < t; c0 += rb) {
                size_t c1 = c0 + rb < t ? c0 + rb : t, i0 = causal ? c0 : 0;
                mt_gemm(true, false, c1 - c0, hd, t - i0, scale, ds + i0 * t + c0, t, q + i0 * cin,
                        cin, 0.0f, dk + c0 * cin, cin);
            }
        }
}

/* ------------------------------------------------------------------ conv2d */

/* Output extent of one axis: input n, kernel k, stride s (0 is 1). */
static size_t conv_out(size_t n, size_t k, size_t s, bool same)
{
    s = s == 0 ? 1 : s;
    if (same)
        return (n + s - 1) / s;
    return n >= k ? (n - k) / s + 1 : 0;
}

/* Padding before an axis under "same": half the total, the smaller half first (TensorFlow). */
static size_t conv_pad(size_t n, size_t k, size_t s, bool same)
{
    size_t o = conv_out(n, k, s, same), need;
    s = s == 0 ? 1 : s;
    if (!same || o == 0)
        return 0;
    need = (o - 1) * s + k;
    return need > n ? (need - n) / 2 : 0;
}

size_t mt_conv2d_out_h(const mt_conv2d_geom *g)
{
    return conv_out(g->h, g->kh, g->sh, g->same);
}

size_t mt_conv2d_out_w(const mt_conv2d_geom *g)
{
    return conv_out(g->w, g->kw, g->sw, g->same);
}

size_t mt_conv2d_pad_top(const mt_conv2d_geom *g)
{
    return conv_pad(g->h, g->kh, g->sh, g->same);
}

size_t mt_conv2d_pad_left(const mt_conv2d_geom *g)
{
    return conv_pad(g->w, g->kw, g->sw, g->same);
}

static size_t stride_h(const mt_conv2d_geom *g)
{
    return g->sh == 0 ? 1 : g->sh;
}

static size_t stride_w(const mt_conv2d_geom *g)
{
    return g->sw == 0 ? 1 : g->sw;
}

size_t mt_conv2d_cols_size(const mt_conv2d_geom *g)
{
    return g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g) * g->kh * g->kw * g->c;
}

/* cols row (b, oy, ox), column (ky, kx, ci) = x[b, oy+ky-pt, ox+kx-pl, ci] or 0 outside. */
void mt_conv2d_im2col(float *cols, const float *x, const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g);
    long pt = (long)mt_conv2d_pad_top(g), pl = (long)mt_conv2d_pad_left(g);
    long sh = (long)stride_h(g), sw = (long)stride_w(g);
    size_t rowlen = g->kh * g->kw * g->c, seg = g->kw * g->c;

    for (size_t b = 0; b < g->batch; b++) {
        const float *xb = x + b * g->h * g->w * g->c;
        for (size_t oy = 0; oy < oh; oy++) {
            for (size_t ox = 0; ox < ow; ox++) {
                float *r = cols + ((b * oh + oy) * ow + ox) * rowlen;
                long ix0 = (long)ox * sw - pl;
                for (size_t ky = 0; ky < g->kh; ky++) {
                    long iy = (long)oy * sh + (long)ky - pt;
                    float *dst = r + ky * seg;
                    if (iy < 0 || iy >= (long)g->h) {
                        memset(dst, 0, seg * sizeof(float));
                        continue;
                    }
                    if (ix0 >= 0 && ix0 + (long)g->kw <= (long)g->w) {
                        /* interior: the kw taps of this kernel row are contiguous in x */
                        const float *src = xb + ((size_t)iy * g->w + (size_t)ix0) * g->c;
                        if (seg >= 16)
                            memcpy(dst, src, seg * sizeof(float));
                        else
                            for (size_t j = 0; j < seg; j++)
                                dst[j] = src[j];
                        continue;
                    }
                    for (size_t kx = 0; kx < g->kw; kx++) {
                        long ix = ix0 + (long)kx;
                        bool pad = ix < 0 || ix >= (long)g->w;
                        const float *src = xb + ((size_t)iy * g->w + (pad ? 0 : (size_t)ix)) * g->c;
                        for (size_t ci = 0; ci < g->c; ci++)
                            dst[kx * g->c + ci] = pad ? 0.0f : src[ci];
                    }
                }
            }
        }
    }
}

/* dx = col2im(dcols): the adjoint of im2col (sums every column entry back into its pixel). */
void mt_conv2d_col2im(float *dx, const float *dcols, const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g);
    long pt = (long)mt_conv2d_pad_top(g), pl = (long)mt_conv2d_pad_left(g);
    long sh = (long)stride_h(g), sw = (long)stride_w(g);
    size_t rowlen = g->kh * g->kw * g->c;

    memset(dx, 0, g->batch * g->h * g->w * g->c * sizeof(float));
    for (size_t b = 0; b < g->batch; b++) {
        float *xb = dx + b * g->h * g->w * g->c;
        for (size_t oy = 0; oy < oh; oy++) {
            for (size_t ox = 0; ox < ow; ox++) {
                const float *r = dcols + ((b * oh + oy) * ow + ox) * rowlen;
                for (size_t ky = 0; ky < g->kh; ky++) {
                    long iy = (long)oy * sh + (long)ky - pt;
                    if (iy < 0 || iy >= (long)g->h)
                        continue;
                    for (size_t kx = 0; kx < g->kw; kx++) {
                        long ix = (long)ox * sw + (long)kx - pl;
                        const float *src = r + (ky * g->kw + kx) * g->c;
                        float *dst;
                        if (ix < 0 || ix >= (long)g->w)
                            continue;
                        dst = xb + ((size_t)iy * g->w + (size_t)ix) * g->c;
                        for (size_t ci = 0; ci < g->c; ci++)
                            dst[ci] += src[ci];
                    }
                }
            }
        }
    }
}

/*
 * Direct conv2d for one input channel (the first layer of an image model). With C = 1 the
 * im2col GEMM has K = KH*KW (9): OpenBLAS packs a 9-deep panel per 32 outputs, writes y with a
 * separate beta pass and adds the bias in a third, so it reaches ~10 GFLOP/s, and the dW GEMM
 * plus the db column sums read dy twice. Here one pass writes y (bias in the accumulator
 * start) and one pass over dy yields dW and db, with AVX-512 vectors over 16 output channels and
 * the input taps broadcast from a zero-padded copy of x that the forward leaves in `cols` (the
 * backward reads it instead of an im2col matrix). Chosen at run time: CPUs without AVX-512 take
 * the im2col path.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define MT_DIRECT1          1
#define MT_AVX512           __attribute__((target("avx512f,fma")))
#define MT_AVX512_INLINE    __attribute__((target("avx512f,fma"), always_inline)) static inline
#define MT_DIRECT1_MAX_TAPS 25

static bool direct1_ok(const mt_conv2d_geom *g)
{
    return g->c == 1 && g->kh * g->kw <= MT_DIRECT1_MAX_TAPS && stride_h(g) == 1 &&
           stride_w(g) == 1 && __builtin_cpu_supports("avx512f");
}

/* Zero-padded x: (B, OH+KH-1, OW+KW-1); fits in cols_size (padded H <= OH*KH, same for W). */
static void pad_input(float *xp, const float *x, const mt_conv2d_geom *g)
{
    size_t ph = mt_conv2d_out_h(g) + g->kh - 1, pw = mt_conv2d_out_w(g) + g->kw - 1;
    size_t pt = g->same ? (g->kh - 1) / 2 : 0, pl = g->same ? (g->kw - 1) / 2 : 0;

    if (!g->same) {
        memcpy(xp, x, g->batch * g->h * g->w * sizeof(float));
        return;
    }
    memset(xp, 0, g->batch * ph * pw * sizeof(float));
    for (size_t b = 0; b < g->batch; b++)
        for (size_t iy = 0; iy < g->h; iy++)
            memcpy(xp + (b * ph + iy + pt) * pw + pl, x + (b * g->h + iy) * g->w,
                   g->w * sizeof(float));
}

/* Lanes of output-channel block j (16 channels each) that exist. */
static inline __mmask16 block_mask(size_t f, size_t j)
{
    size_t left = f - 16 * j;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* One output row y (OW, F) from the KH padded input rows at xr (row stride pw). */
MT_AVX512_INLINE void fwd_row(float *y, const float *xr, size_t pw, const float *w,
                              const float *bias, size_t ow, size_t f, size_t kh, size_t kw)
{
    size_t taps = kh * kw;
    for (size_t j = 0; j * 16 < f; j++) {
        __mmask16 m = block_mask(f, j);
        __m512 wv[MT_DIRECT1_MAX_TAPS];
        __m512 b0 = bias != NULL ? _mm512_maskz_loadu_ps(m, bias + 16 * j) : _mm512_setzero_ps();
        for (size_t t = 0; t < taps; t++)
            wv[t] = _mm512_maskz_loadu_ps(m, w + t * f + 16 * j);
        for (size_t ox = 0; ox < ow; ox++) {
            __m512 acc = b0;
            for (size_t ky = 0; ky < kh; ky++)
                for (size_t kx = 0; kx < kw; kx++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(xr[ky * pw + ox + kx]), wv[ky * kw + kx],
                                          acc);
            _mm512_mask_storeu_ps(y + ox * f + 16 * j, m, acc);
        }
    }
}

/* dw (KH*KW, F) and db (F) += the contributions of one output row of dy (OW, F). */
MT_AVX512_INLINE void bwd_row(float *dw, float *db, const float *dy, const float *xr, size_t pw,
                              size_t ow, size_t f, size_t kh, size_t kw)
{
    size_t taps = kh * kw;
    for (size_t j = 0; j * 16 < f; j++) {
        __mmask16 m = block_mask(f, j);
        __m512 acc[MT_DIRECT1_MAX_TAPS];
        __m512 bacc = db != NULL ? _mm512_maskz_loadu_ps(m, db + 16 * j) : _mm512_setzero_ps();
        for (size_t t = 0; t < taps; t++)
            acc[t] = _mm512_maskz_loadu_ps(m, dw + t * f + 16 * j);
        for (size_t ox = 0; ox < ow; ox++) {
            __m512 d = _mm512_maskz_loadu_ps(m, dy + ox * f + 16 * j);
            bacc = _mm512_add_ps(bacc, d); /* dead (and dropped) when db is NULL */
            for (size_t ky = 0; ky < kh; ky++)
                for (size_t kx = 0; kx < kw; kx++)
                    acc[ky * kw + kx] = _mm512_fmadd_ps(_mm512_set1_ps(xr[ky * pw + ox + kx]), d,
                                                        acc[ky * kw + kx]);
        }
        if (db != NULL)
            _mm512_mask_storeu_ps(db + 16 * j, m, bacc);
        for (size_t t = 0; t < taps; t++)
            _mm512_mask_storeu_ps(dw + t * f + 16 * j, m, acc[t]);
    }
}

/* y = conv(x) + b for C = 1; leaves the padded x in xp for direct1_backward. */
MT_AVX512 static void direct1_forward(float *y, float *xp, const float *x, const float *w,
                                      const float *b, const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g), f = g->f;
    size_t ph = oh + g->kh - 1, pw = ow + g->kw - 1;

    pad_input(xp, x, g);
    for (size_t bi = 0; bi < g->batch; bi++) {
        for (size_t oy = 0; oy < oh; oy++) {
            float *yr = y + (bi * oh + oy) * ow * f;
            const float *xr = xp + (bi * ph + oy) * pw;
            if (g->kh == 3 && g->kw == 3) /* constant taps: weights and sums stay in registers */
                fwd_row(yr, xr, pw, w, b, ow, f, 3, 3);
            else
                fwd_row(yr, xr, pw, w, b, ow, f, g->kh, g->kw);
        }
    }
}

/* dw, db (either may be NULL) from dy and the padded x left by direct1_forward. */
MT_AVX512 static void direct1_backward(float *dw, float *db, const float *dy, const float *xp,
                                       const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g), f = g->f;
    size_t ph = oh + g->kh - 1, pw = ow + g->kw - 1, taps = g->kh * g->kw;

    if (dw == NULL) {
        if (db != NULL)
            col_sums(db, dy, g->batch * oh * ow, f);
        return;
    }
    memset(dw, 0, taps * f * sizeof(float));
    if (db != NULL)
        memset(db, 0, f * sizeof(float));
    for (size_t bi = 0; bi < g->batch; bi++) {
        for (size_t oy = 0; oy < oh; oy++) {
            const float *dr = dy + (bi * oh + oy) * ow * f;
            const float *xr = xp + (bi * ph + oy) * pw;
            if (g->kh == 3 && g->kw == 3)
                bwd_row(dw, db, dr, xr, pw, ow, f, 3, 3);
            else
                bwd_row(dw, db, dr, xr, pw, ow, f, g->kh, g->kw);
        }
    }
}
#endif

void mt_conv2d_forward(float *y, float *cols, const float *x, const float *w, const float *b,
                       const mt_conv2d_geom *g)
{
    size_t rows = g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g);
    size_t k = g->kh * g->kw * g->c;

    if (rows == 0 || g->f == 0)
        return;
#ifdef MT_DIRECT1
    if (direct1_ok(g)) {
        direct1_forward(y, cols, x, w, b, g);
        return;
    }
#endif
    mt_conv2d_im2col(cols, x, g);
    mt_dense_forward(y, cols, w, b, rows, k, g->f);
}

void mt_conv2d_backward(float *dx, float *dw, float *db, float *dcols, const float *dy,
                        const float *cols, const float *w, const mt_conv2d_geom *g)
{
    size_t rows = g->batch * mt_conv2d_out_h(g) * mt_conv2d_out_w(g);
    size_t k = g->kh * g->kw * g->c;

#ifdef MT_DIRECT1
    if (rows > 0 && g->f > 0 && direct1_ok(g)) {
        /* cols holds the padded x; dx (rarely wanted for a first layer) goes through dcols */
        direct1_backward(dw, db, dy, cols, g);
        if (dx != NULL)
            mt_gemm(false, true, rows, k, g->f, 1.0f, dy, g->f, w, g->f, 0.0f, dcols, k);
    } else
#endif
        mt_dense_backward(dx != NULL ? dcols : NULL, dw, db, dy, cols, w, rows, k, g->f);
    if (dx != NULL)
        mt_conv2d_col2im(dx, dcols, g);
}

/* ------------------------------------------------------------------ max pool */

void mt_maxpool2_forward(float *y, int32_t *argmax, const float *x, size_t batch, size_t h,
                         size_t w, size_t c)
{
    size_t oh = h / 2, ow = w / 2;

    for (size_t b = 0; b < batch; b++) {
        for (size_t oy = 0; oy < oh; oy++) {
            for (size_t ox = 0; ox < ow; ox++) {
                size_t i00 = ((b * h + 2 * oy) * w + 2 * ox) * c;
                size_t i01 = i00 + c, i10 = i00 + w * c, i11 = i10 + c;
                float *yo = y + ((b * oh + oy) * ow + ox) * c;
                int32_t *ao = argmax + ((b * oh + oy) * ow + ox) * c;
                for (size_t ci = 0; ci < c; ci++) {
                    /* branch-free (selects, not jumps): random data defeats branch prediction */
                    float a = x[i00 + ci], b2 = x[i01 + ci], c2 = x[i10 + ci], d = x[i11 + ci];
                    int32_t ia = (int32_t)(i00 + ci), ib = (int32_t)(i01 + ci);
                    int32_t ic = (int32_t)(i10 + ci), id = (int32_t)(i11 + ci);
                    ia = b2 > a ? ib : ia;
                    a = b2 > a ? b2 : a;
                    ic = d > c2 ? id : ic;
                    c2 = d > c2 ? d : c2;
                    ia = c2 > a ? ic : ia;
                    a = c2 > a ? c2 : a;
                    yo[ci] = a;
                    ao[ci] = ia;
                }
            }
        }
    }
}

void mt_maxpool2_backward(float *dx, const float *dy, const int32_t *argmax, size_t n_in,
                          size_t n_out)
{
    memset(dx, 0, n_in * sizeof(float));
    for (size_t i = 0; i < n_out; i++)
        dx[argmax[i]] += dy[i];
}

/* ------------------------------------------------------------------ relu */

/* In-place and out-of-place loops are separate so each vectorises without an aliasing check. */
static void relu_inplace(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

void mt_relu_forward(float *y, const float *x, size_t n)
{
    if (y == x) {
        relu_inplace(y, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void mt_relu_backward(float *dx, const float *dy, const float *y, size_t n)
{
    if (dx == dy) {
        for (size_t i = 0; i < n; i++)
            dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
        return;
    }
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* ------------------------------------------------------------------ pooling, any window */

size_t mt_pool2d_out_h(const mt_pool2d_geom *g)
{
    return g->h >= g->ph && g->sh > 0 ? (g->h - g->ph) / g->sh + 1 : 0;
}

size_t mt_pool2d_out_w(const mt_pool2d_geom *g)
{
    return g->w >= g->pw && g->sw > 0 ? (g->w - g->pw) / g->sw + 1 : 0;
}

void mt_maxpool_forward(float *y, int32_t *argmax, const float *x, const mt_pool2d_geom *g)
{
    size_t oh = mt_pool2d_out_h(g), ow = mt_pool2d_out_w(g), c = g->c;
    for (size_t b = 0; b < g->batch; b++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t j = 0; j < c; j++) {
                    size_t best = ((b * g->h + oy * g->sh) * g->w + ox * g->sw) * c + j;
                    for (size_t ky = 0; ky < g->ph; ky++)
                        for (size_t kx = 0; kx < g->pw; kx++) {
                            size_t i =
                                ((b * g->h + oy * g->sh + ky) * g->w + ox * g->sw + kx) * c + j;
                            if (x[i] > x[best])
                                best = i;
                        }
                    y[((b * oh + oy) * ow + ox) * c + j] = x[best];
                    argmax[((b * oh + oy) * ow + ox) * c + j] = (int32_t)best;
                }
}

void mt_maxpool_backward(float *dx, const float *dy, const int32_t *argmax, const mt_pool2d_geom *g)
{
    size_t n = g->batch * mt_pool2d_out_h(g) * mt_pool2d_out_w(g) * g->c;
    memset(dx, 0, g->batch * g->h * g->w * g->c * sizeof(float));
    for (size_t i = 0; i < n; i++)
        dx[argmax[i]] += dy[i];
}

void mt_avgpool_forward(float *y, const float *x, const mt_pool2d_geom *g)
{
    size_t oh = mt_pool2d_out_h(g), ow = mt_pool2d_out_w(g), c = g->c;
    double inv = 1.0 / (double)(g->ph * g->pw);
    for (size_t b = 0; b < g->batch; b++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t j = 0; j < c; j++) {
                    double s = 0.0;
                    for (size_t ky = 0; ky < g->ph; ky++)
                        for (size_t kx = 0; kx < g->pw; kx++)
                            s += x[((b * g->h + oy * g->sh + ky) * g->w + ox * g->sw + kx) * c + j];
                    y[((b * oh + oy) * ow + ox) * c + j] = (float)(s * inv);
                }
}

void mt_avgpool_backward(float *dx, const float *dy, const mt_pool2d_geom *g)
{
    size_t oh = mt_pool2d_out_h(g), ow = mt_pool2d_out_w(g), c = g->c;
    float inv = 1.0f / (float)(g->ph * g->pw);
    memset(dx, 0, g->batch * g->h * g->w * g->c * sizeof(float));
    for (size_t b = 0; b < g->batch; b++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t j = 0; j < c; j++) {
                    float d = dy[((b * oh + oy) * ow + ox) * c + j] * inv;
                    for (size_t ky = 0; ky < g->ph; ky++)
                        for (size_t kx = 0; kx < g->pw; kx++)
                            dx[((b * g->h + oy * g->sh + ky) * g->w + ox * g->sw + kx) * c + j] +=
                                d;
                }
}

/* ------------------------------------------------------------------ other activations */

/*
 * erf in float as a rational function of x (odd degree-13 numerator over an even degree-8
 * denominator, inputs clamped to [-4, 4] where erf is ±1 in float): the approximation Eigen and
 * TensorFlow use for float erf, within 6.5e-8 of erf in exact arithmetic. Branch-free, so the
 * GELU loops vectorise; libm's erf (double, scalar) took 23% of a transformer's step time.
 */
MT_NO_TRAPPING_MATH static inline float erf_fast(float x)
{
    float z = x > 4.0f ? 4.0f : x; /* two selects, not nested: gcc if-converts these */
    z = z < -4.0f ? -4.0f : z;
    float z2 = z * z;
    float p = -2.72614225801306e-10f;
    p = p * z2 + 2.77068142495902e-08f;
    p = p * z2 - 2.10102402082508e-06f;
    p = p * z2 - 5.69250639462346e-05f;
    p = p * z2 - 7.34990630326855e-04f;
    p = p * z2 - 2.95459980854025e-03f;
    p = p * z2 - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * z2 - 2.13374055278905e-04f;
    q = q * z2 - 1.68282697438203e-03f;
    q = q * z2 - 7.37332916720468e-03f;
    q = q * z2 - 1.42647390514189e-02f;
    return z * p / q;
}

MT_NO_TRAPPING_MATH void mt_gelu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 0.5f * x[i] * (1.0f + erf_fast(x[i] * (float)M_SQRT1_2));
}

void mt_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float d =
            0.5f * (1.0f + erf_fast(v * (float)M_SQRT1_2)) + v * inv_sqrt_2pi * expf(-0.5f * v * v);
        dx[i] = dy[i] * d;
    }
}

void mt_tanh_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = tanhf(x[i]);
}

void mt_tanh_backward(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void mt_sigmoid_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) /* both branches stay finite for any x */
        y[i] = x[i] >= 0.0f ? 1.0f / (1.0f + expf(-x[i])) : expf(x[i]) / (1.0f + expf(x[i]));
}

void mt_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

void mt_leaky_relu_forward(float *y, const float *x, float alpha, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
}

void mt_leaky_relu_backward(float *dx, const float *dy, const float *y, float alpha, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : alpha * dy[i];
}

/* ------------------------------------------------------------------ softmax cross-entropy */

mt_code mt_softmax_xent(float *dlogits, double *loss_sum, size_t *correct, const float *logits,
                        const int32_t *labels, size_t batch, size_t k, float grad_scale,
                        mt_err *err)
{
    double loss = 0.0;
    size_t ok = 0;

    for (size_t i = 0; i < batch; i++) {
        if (labels[i] < 0 || (size_t)labels[i] >= k)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "label %d of example %zu not in [0, %zu)",
                              (int)labels[i], i, k);
    }
    for (size_t i = 0; i < batch; i++) {
        const float *z = logits + i * k;
        float m = z[0];
        size_t am = 0;
        float s = 0.0f;
        for (size_t j = 1; j < k; j++) {
            if (z[j] > m) {
                m = z[j];
                am = j;
            }
        }
        if (dlogits != NULL) {
            float *d = dlogits + i * k;
            for (size_t j = 0; j < k; j++) {
                d[j] = expf(z[j] - m);
                s += d[j];
            }
            float inv = grad_scale / s;
            for (size_t j = 0; j < k; j++)
                d[j] *= inv;
            d[labels[i]] -= grad_scale;
        } else {
            for (size_t j = 0; j < k; j++)
                s += expf(z[j] - m);
        }
        loss += (double)logf(s) - (double)(z[labels[i]] - m);
        ok += am == (size_t)labels[i];
    }
    *loss_sum += loss;
    *correct += ok;
    return MT_OK;
}

/* ------------------------------------------------------------------ batch norm */

/*
 * Batch-norm statistics are sums over up to batch x H x W rows: accumulated in double, in column
 * blocks of BN_COLS so the accumulators live on the stack, then rounded once to float. A float
 * accumulator loses about log2(rows) bits (1e-4 relative over 43k rows).
 */
#define BN_COLS 256

/* out[j] = Σ_i (x[i, j] - mean[j])^2, or Σ_i x[i, j] when mean is NULL. */
static void bn_col_sums(float *out, const float *x, const float *mean, size_t n, size_t c)
{
    double acc[BN_COLS];
    for (size_t j0 = 0; j0 < c; j0 += BN_COLS) {
        size_t w = c - j0 < BN_COLS ? c - j0 : BN_COLS;
        memset(acc, 0, w * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const float *r = x + i * c + j0;
            if (mean == NULL) {
                for (size_t j = 0; j < w; j++)
                    acc[j] += r[j];
                continue;
            }
            for (size_t j = 0; j < w; j++) {
                double d = (double)r[j] - (double)mean[j0 + j];
                acc[j] += d * d;
            }
        }
        for (size_t j = 0; j < w; j++)
            out[j0 + j] = (float)acc[j];
    }
}

void mt_bn_sum(float *out, const float *x, size_t n, size_t c)
{
    bn_col_sums(out, x, NULL, n, c);
}

void mt_bn_sqdev(float *out, const float *x, const float *mean, size_t n, size_t c)
{
    bn_col_sums(out, x, mean, n, c);
}

/*
 * The per-feature factors of the two element-wise passes below are computed once per block of
 * BN_COLS features: 1/sqrtf per element kept the loops scalar (sqrtf sets errno, so gcc calls
 * libm unless the argument is known non-negative) and cost as much as a third of the GEMMs'
 * instructions in a ResNet step (callgrind). The factors are the same floats as before, so the
 * results keep their bits.
 */
void mt_bn_normalize(float *y, float *xhat, const float *x, const float *mean, const float *var,
                     float eps, const float *gamma, const float *beta, size_t n, size_t c)
{
    float is[BN_COLS], g[BN_COLS], b[BN_COLS];
    for (size_t j0 = 0; j0 < c; j0 += BN_COLS) {
        size_t w = c - j0 < BN_COLS ? c - j0 : BN_COLS;
        const float *mu = mean + j0;
        for (size_t j = 0; j < w; j++) {
            is[j] = 1.0f / sqrtf(var[j0 + j] + eps);
            g[j] = gamma != NULL ? gamma[j0 + j] : 1.0f;
            b[j] = beta != NULL ? beta[j0 + j] : 0.0f;
        }
        for (size_t i = 0; i < n; i++) {
            const float *r = x + i * c + j0;
            float *yo = y + i * c + j0;
            if (xhat != NULL) {
                float *xo = xhat + i * c + j0;
                for (size_t j = 0; j < w; j++) {
                    float h = (r[j] - mu[j]) * is[j];
                    xo[j] = h;
                    yo[j] = g[j] * h + b[j];
                }
            } else {
                for (size_t j = 0; j < w; j++)
                    yo[j] = g[j] * ((r[j] - mu[j]) * is[j]) + b[j];
            }
        }
    }
}

void mt_bn_grad_sums(float *sum_dy, float *sum_dy_xhat, const float *dy, const float *xhat,
                     size_t n, size_t c)
{
    double a[BN_COLS], b[BN_COLS];
    for (size_t j0 = 0; j0 < c; j0 += BN_COLS) {
        size_t w = c - j0 < BN_COLS ? c - j0 : BN_COLS;
        memset(a, 0, w * sizeof(double));
        memset(b, 0, w * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const float *d = dy + i * c + j0, *h = xhat + i * c + j0;
            for (size_t j = 0; j < w; j++) {
                a[j] += d[j];
                b[j] += (double)d[j] * h[j];
            }
        }
        for (size_t j = 0; j < w; j++) {
            sum_dy[j0 + j] = (float)a[j];
            sum_dy_xhat[j0 + j] = (float)b[j];
        }
    }
}

void mt_bn_backward_dx(float *dx, const float *dy, const float *xhat, const float *gamma,
                       const float *var, float eps, const float *sum_dy, const float *sum_dy_xhat,
                       size_t m_global, size_t n, size_t c)
{
    float inv_m = m_global ? 1.0f / (float)m_global : 0.0f;
    float k[BN_COLS], a[BN_COLS];
    for (size_t j0 = 0; j0 < c; j0 += BN_COLS) {
        size_t w = c - j0 < BN_COLS ? c - j0 : BN_COLS;
        const float *sh = sum_dy_xhat + j0;
        for (size_t j = 0; j < w; j++) {
            k[j] = (gamma != NULL ? gamma[j0 + j] : 1.0f) / sqrtf(var[j0 + j] + eps);
            a[j] = sum_dy[j0 + j] * inv_m;
        }
        for (size_t i = 0; i < n; i++) {
            const float *d = dy + i * c + j0, *h = xhat + i * c + j0;
            float *o = dx + i * c + j0;
            for (size_t j = 0; j < w; j++)
                o[j] = k[j] * (d[j] - a[j] - h[j] * sh[j] * inv_m);
        }
    }
}

void mt_bn_update_moving(float *moving, const float *batch, float momentum, size_t c)
{
    for (size_t j = 0; j < c; j++)
        moving[j] = momentum * moving[j] + (1.0f - momentum) * batch[j];
}

/* ------------------------------------------------------------------ dropout */

void mt_dropout_forward(float *y, const float *x, const uint8_t *mask, float scale, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = mask[i] ? x[i] * scale : 0.0f;
}

void mt_dropout_backward(float *dx, const float *dy, const uint8_t *mask, float scale, size_t n)
{
    mt_dropout_forward(dx, dy, mask, scale, n);
}

/* ------------------------------------------------------------------ optimizers */

void mt_sgd_update(float *w, float *v, const float *g, float lr, float momentum, size_t n)
{
    if (v == NULL || momentum == 0.0f) {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * g[i];
        return;
    }
    for (size_t i = 0; i < n; i++) {
        v[i] = momentum * v[i] - lr * g[i];
        w[i] += v[i];
    }
}

/*
 * Adam in SIMD lanes: sqrtf keeps errno semantics, so gcc will not vectorise the scalar loop, and
 * the update was a third of an MLP step (still 18 % of a 2 x 1 step with SSE). Each lane does the
 * scalar loop's IEEE operations in the same order (no FMA: the AVX target does not enable it), so
 * results are bit-identical whatever the lanes and a shard's alignment.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define ADAM_AVX 1
/* The first n / 8 * 8 elements in 8 lanes; returns how many. */
__attribute__((target("avx"))) static size_t adam_avx(float *restrict w, float *restrict m,
                                                      float *restrict v, const float *restrict g,
                                                      float a, float beta1, float beta2, float eps,
                                                      size_t n)
{
    __m256 vb1 = _mm256_set1_ps(beta1), vb2 = _mm256_set1_ps(beta2);
    __m256 vc1 = _mm256_set1_ps(1.0f - beta1), vc2 = _mm256_set1_ps(1.0f - beta2);
    __m256 va = _mm256_set1_ps(a), veps = _mm256_set1_ps(eps);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 mi =
            _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
        __m256 step = _mm256_div_ps(_mm256_mul_ps(va, mi), _mm256_add_ps(_mm256_sqrt_ps(vi), veps));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_loadu_ps(w + i), step));
    }
    return i;
}
#endif

void mt_adam_update_lanes(float *restrict w, float *restrict m, float *restrict v,
                          const float *restrict g, float lr, float beta1, float beta2, float eps,
                          int64_t t, size_t n, int lanes)
{
    double lr_t = (double)lr * sqrt(1.0 - pow(beta2, (double)t)) / (1.0 - pow(beta1, (double)t));
    float a = (float)lr_t, c1 = 1.0f - beta1, c2 = 1.0f - beta2;
    size_t i = 0;
#if !defined(ADAM_AVX) && !defined(__SSE2__)
    (void)lanes; /* the scalar loop only on this target */
#endif
#if defined(ADAM_AVX)
    if (lanes >= 8 && __builtin_cpu_supports("avx"))
        i = adam_avx(w, m, v, g, a, beta1, beta2, eps, n);
#endif
#if defined(__SSE2__)
    __m128 vb1 = _mm_set1_ps(beta1), vb2 = _mm_set1_ps(beta2), vc1 = _mm_set1_ps(c1);
    __m128 vc2 = _mm_set1_ps(c2), va = _mm_set1_ps(a), veps = _mm_set1_ps(eps);
    for (; lanes >= 4 && i + 4 <= n; i += 4) {
        __m128 gi = _mm_loadu_ps(g + i);
        __m128 mi = _mm_add_ps(_mm_mul_ps(vb1, _mm_loadu_ps(m + i)), _mm_mul_ps(vc1, gi));
        __m128 vi =
            _mm_add_ps(_mm_mul_ps(vb2, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(vc2, gi), gi));
        __m128 step = _mm_div_ps(_mm_mul_ps(va, mi), _mm_add_ps(_mm_sqrt_ps(vi), veps));
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
        _mm_storeu_ps(w + i, _mm_sub_ps(_mm_loadu_ps(w + i), step));
    }
#endif
    for (; i < n; i++) {
        m[i] = beta1 * m[i] + c1 * g[i];
        v[i] = beta2 * v[i] + c2 * g[i] * g[i];
        w[i] -= a * m[i] / (sqrtf(v[i]) + eps);
    }
}

void mt_adam_update(float *restrict w, float *restrict m, float *restrict v,
                    const float *restrict g, float lr, float beta1, float beta2, float eps,
                    int64_t t, size_t n)
{
    mt_adam_update_lanes(w, m, v, g, lr, beta1, beta2, eps, t, n, 8);
}

/* ------------------------------------------------------------------ graph joins */

void mt_add_forward(float *out, const float *const *ins, int k, size_t n)
{
    memcpy(out, ins[0], n * sizeof(float));
    for (int j = 1; j < k; j++)
        for (size_t i = 0; i < n; i++)
            out[i] += ins[j][i];
}

void mt_concat_forward(float *out, const float *const *ins, const size_t *widths, int k,
                       size_t rows)
{
    size_t c = 0;
    for (int j = 0; j < k; j++)
        c += widths[j];
    for (size_t r = 0; r < rows; r++) {
        float *o = out + r * c;
        for (int j = 0; j < k; j++) {
            memcpy(o, ins[j] + r * widths[j], widths[j] * sizeof(float));
            o += widths[j];
        }
    }
}

void mt_grad_accumulate(float *dst, const float *src, size_t rows, size_t w, size_t c, size_t off,
                        bool add)
{
    if (!add && w == c) {
        memcpy(dst, src, rows * w * sizeof(float));
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const float *s = src + r * c + off;
        float *d = dst + r * w;
        if (add)
            for (size_t j = 0; j < w; j++)
                d[j] += s[j];
        else
            memcpy(d, s, w * sizeof(float));
    }
}
