/* SPDX-License-Identifier: MIT */
/*
 * repro_gemm.c — the canonical product of the mesh_invariant mode (mt_repro.h, mt_repro_gemm):
 * every output element is its own fma chain over the contraction, so its bits depend neither on
 * how many rows or columns a call computes nor on where its operands lie. OpenBLAS's do (its
 * blocking, edge kernels and small-matrix paths follow M, N and K: docs/reproducibility.md), so
 * under mesh_invariant the dense layer computes with this product instead, and a model
 * dimension may split a dense kernel's output columns (each column the same arithmetic) or its
 * contraction (the K-leaves: the tree of the chains is the canonical one, whose top is the
 * allreduce over the splitting dimension).
 *
 * Two paths, the same bits: AVX2 + FMA tiles of 6 rows x 16 columns (chosen by CPUID; a lane is
 * one element, masked loads for the last columns; the plain product reads b from a packed copy of
 * its 16-column blocks, tiles()) and a portable loop (mt_repro_gemm_ref, fmaf: correctly rounded
 * also where the CPU has no FMA). Tests: tests/unit/test_repro.c; speed against sgemm on the
 * Fashion-MNIST MLP's shapes: `bench_kernels repro`.
 */
#include "repro/mt_repro.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MT_REPRO_AVX2 1
#endif

#define TM     6     /* rows of a tile (ROW_FMA(0..5) below) */
#define TN     16    /* columns of a tile: two 8-float vectors */
#define LEVELS 3     /* held subtrees of the chains' tree: log2(MT_REPRO_MAX_LEAVES) */
#define KB     128   /* contraction rows of a K-block of one long chain */
#define PACK_B 16384 /* floats of packed b (tiles(): 64 KiB on the stack) */

/* The canonical tree over the chains' partial sums of one element (count a power of two). */
static float fold(float *part, int count)
{
    for (int d = 1; d < count; d *= 2)
        for (int v = 0; v + d < count; v += 2 * d)
            part[v] = part[v] + part[v + d];
    return part[0];
}

/* The portable product with chain t's terms in runs (mt_repro_gemm_runs; NULL: plain). */
static void gemm_ref_runs(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                          const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                          const mt_repro_runs *rs, int chains)
{
    float part[MT_REPRO_MAX_LEAVES];

    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            for (int t = 0; t < chains; t++) {
                float s = 0.0f;
                for (size_t u = 0; u < rs->nrun; u++)
                    for (size_t q = (size_t)t * rs->tstep + u * rs->rstep, e = q + rs->len; q < e;
                         q++)
                        s = fmaf(a[i * ars + q * acs], b[q * ldb + j], s);
                part[t] = s;
            }
            c[i * ldc + j] = bias != NULL ? fold(part, chains) + bias[j] : fold(part, chains);
        }
}

void mt_repro_gemm_ref(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
                       size_t ldb, const float *bias, size_t m, size_t n, size_t k, int chains)
{
    size_t kc = k / (size_t)chains;
    mt_repro_runs plain = {kc, 1, 0, kc};
    gemm_ref_runs(c, ldc, a, ars, acs, b, ldb, bias, m, n, &plain, chains);
}

#ifdef MT_REPRO_AVX2
/* Lanes [0, w) of a mask (w <= 8). */
#define AVX2_FN __attribute__((target("avx2,fma")))
AVX2_FN static inline __m256i lanes(size_t w)
{
    static const int32_t tbl[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(tbl + 8 - w));
}

/* One element chain step for tile row i: c<i>0, c<i>1 += a(i, q) (a<i> + qa, qa = q * acs) * the
 * two vectors of b's row q (Q_TERM). */
#define ROW_FMA(i)                                                                                 \
    do {                                                                                           \
        __m256 av = _mm256_broadcast_ss(a##i + qa);                                                \
        c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);                                                \
        c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);                                                \
    } while (0)
/* A chain's start: 0, or (a K-block after the first) the partial chain left in c. */
#define ROW_START(i)                                                                               \
    do {                                                                                           \
        if (!load) {                                                                               \
            c##i##0 = _mm256_setzero_ps();                                                         \
            c##i##1 = c##i##0;                                                                     \
        } else if (full) {                                                                         \
            c##i##0 = _mm256_loadu_ps(r##i);                                                       \
            c##i##1 = _mm256_loadu_ps(r##i + 8);                                                   \
        } else {                                                                                   \
            c##i##0 = _mm256_maskload_ps(r##i, m0);                                                \
            c##i##1 = _mm256_maskload_ps(r##i + 8, m1);                                            \
        }                                                                                          \
    } while (0)
/* The canonical tree's addition of a held left subtree (level lv) and the chain's right one. */
#define ROW_FOLD(i)                                                                                \
    do {                                                                                           \
        c##i##0 = _mm256_add_ps(part[lv][i][0], c##i##0);                                          \
        c##i##1 = _mm256_add_ps(part[lv][i][1], c##i##1);                                          \
    } while (0)
#define ROW_KEEP(i)                                                                                \
    do {                                                                                           \
        part[lv][i][0] = c##i##0;                                                                  \
        part[lv][i][1] = c##i##1;                                                                  \
    } while (0)
#define ROW_BIAS(i)                                                                                \
    do {                                                                                           \
        c##i##0 = _mm256_add_ps(c##i##0, v0);                                                      \
        c##i##1 = _mm256_add_ps(c##i##1, v1);                                                      \
    } while (0)
#define ROW_STORE(i)                                                                               \
    do {                                                                                           \
        if (mr > i && full) {                                                                      \
            _mm256_storeu_ps(r##i, c##i##0);                                                       \
            _mm256_storeu_ps(r##i + 8, c##i##1);                                                   \
        } else if (mr > i) {                                                                       \
            _mm256_maskstore_ps(r##i, m0, c##i##0);                                                \
            _mm256_maskstore_ps(r##i + 8, m1, c##i##1);                                            \
        }                                                                                          \
    } while (0)
/* Chain term q for every tile row: b's row q times a(i, q). */
#define Q_TERM(q)                                                                                  \
    do {                                                                                           \
        size_t qa = (q)*acs;                                                                       \
        const float *br = b + (q)*ldb;                                                             \
        __m256 b0 = bfull ? _mm256_loadu_ps(br) : _mm256_maskload_ps(br, m0);                      \
        __m256 b1 = bfull ? _mm256_loadu_ps(br + 8) : _mm256_maskload_ps(br + 8, m1);              \
        ROWS(ROW_FMA);                                                                             \
    } while (0)
#define ROWS(op)                                                                                   \
    do {                                                                                           \
        op(0);                                                                                     \
        op(1);                                                                                     \
        op(2);                                                                                     \
        op(3);                                                                                     \
        op(4);                                                                                     \
        op(5);                                                                                     \
    } while (0)

/*
 * One tile: rows [0, mr) (mr <= TM; the missing rows reread row 0 and are not stored), columns
 * [0, nr) (nr <= TN; full: nr == TN, plain loads and stores of c; bfull: b's rows hold TN
 * floats, full or packed by pack_b, plain loads), contraction [0, chains * kc) (rs given: the
 * chains' terms in runs, mt_repro_gemm_runs; the plain loop stays for the others). Each lane is one
 * element's chain (the accumulators are named variables, so they stay in registers), so the
 * arithmetic is mt_repro_gemm_ref's whatever the tile. The chains fold as they end (a binary
 * counter of complete subtrees: chain t's sum is added to the held left subtrees of the levels
 * where t has a 1 bit, then held), which is the canonical tree's additions with the same operands,
 * left first. load (one chain only): each chain starts from the value in c, a K-block's
 * continuation of the same chain (storing a float and loading it back changes no bit).
 */
AVX2_FN __attribute__((always_inline)) static inline void
tile(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b, size_t ldb,
     const float *bias, size_t mr, size_t nr, size_t kc, const mt_repro_runs *rs, int chains,
     int full, int bfull, int load)
{
    __m256 part[LEVELS][TM][2];
    __m256i m0 = lanes(nr < 8 ? nr : 8), m1 = lanes(nr > 8 ? nr - 8 : 0);
    const float *a0 = a, *a1 = a + (mr > 1 ? 1 : 0) * ars, *a2 = a + (mr > 2 ? 2 : 0) * ars;
    const float *a3 = a + (mr > 3 ? 3 : 0) * ars, *a4 = a + (mr > 4 ? 4 : 0) * ars;
    const float *a5 = a + (mr > 5 ? 5 : 0) * ars;
    float *r0 = c, *r1 = c + (mr > 1 ? 1 : 0) * ldc, *r2 = c + (mr > 2 ? 2 : 0) * ldc;
    float *r3 = c + (mr > 3 ? 3 : 0) * ldc, *r4 = c + (mr > 4 ? 4 : 0) * ldc;
    float *r5 = c + (mr > 5 ? 5 : 0) * ldc;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;

    for (int t = 0; t < chains; t++) {
        int lv = 0;
        ROWS(ROW_START);
        if (rs == NULL)
            for (size_t q = (size_t)t * kc; q < (size_t)(t + 1) * kc; q++)
                Q_TERM(q);
        else
            for (size_t u = 0; u < rs->nrun; u++)
                for (size_t q = (size_t)t * rs->tstep + u * rs->rstep, e = q + rs->len; q < e; q++)
                    Q_TERM(q);
        for (; (t >> lv) & 1; lv++)
            ROWS(ROW_FOLD);
        if (t + 1 < chains)
            ROWS(ROW_KEEP);
    }
    if (bias != NULL) {
        __m256 v0 = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, m0);
        __m256 v1 = full ? _mm256_loadu_ps(bias + 8) : _mm256_maskload_ps(bias + 8, m1);
        ROWS(ROW_BIAS);
    }
    ROWS(ROW_STORE);
}

/* Every tile of one pass over the contraction [0, chains * kc) of a and b (see gemm_avx2), or
 * over the chains' runs (rs given). Inlined into tiles() and tiles_runs(), so the plain product's
 * code is not the runs' (one function holding both tiles ran its K-blocks a fifth slower). */
AVX2_FN __attribute__((always_inline)) static inline void
tiles_any(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b, size_t ldb,
          const float *bias, size_t m, size_t n, size_t kc, const mt_repro_runs *rs, int chains,
          int load)
{
    /* The larger operand is read once: with more rows than columns (a conv2d's im2col rows) the
     * row panels go outside (a panel of a stays in L1 across the column blocks, b in L2),
     * otherwise the column blocks (b's block stays in L1 across the row panels). The order
     * changes no bits: every element is its own chain. */
    bool rows_out = m > n;
    size_t outer = rows_out ? m : n, inner = rows_out ? n : m;
    for (size_t o = 0; o < outer; o += rows_out ? TM : TN)
        for (size_t p = 0; p < inner; p += rows_out ? TN : TM) {
            size_t i0 = rows_out ? o : p, j0 = rows_out ? p : o;
            size_t mr = m - i0 < TM ? m - i0 : TM, nr = n - j0 < TN ? n - j0 : TN;
            const float *bj = bias != NULL ? bias + j0 : NULL;
            if (nr == TN)
                tile(c + i0 * ldc + j0, ldc, a + i0 * ars, ars, acs, b + j0, ldb, bj, mr, nr, kc,
                     rs, chains, 1, 1, load);
            else
                tile(c + i0 * ldc + j0, ldc, a + i0 * ars, ars, acs, b + j0, ldb, bj, mr, nr, kc,
                     rs, chains, 0, 0, load);
        }
}

/* b's rows [0, kk), columns [0, nr) (nr <= TN) as kk rows of TN contiguous floats, the columns
 * past nr zero (their lanes compute what no store keeps). */
AVX2_FN static void pack_b(float *bp, const float *b, size_t ldb, size_t kk, size_t nr)
{
    __m256i m0 = lanes(nr < 8 ? nr : 8), m1 = lanes(nr > 8 ? nr - 8 : 0);
    for (size_t q = 0; q < kk; q++, bp += TN, b += ldb)
        if (nr == TN) {
            _mm256_store_ps(bp, _mm256_loadu_ps(b));
            _mm256_store_ps(bp + 8, _mm256_loadu_ps(b + 8));
        } else {
            _mm256_store_ps(bp, _mm256_maskload_ps(b, m0));
            _mm256_store_ps(bp + 8, _mm256_maskload_ps(b + 8, m1));
        }
}

/*
 * The plain product's tiles (one pass, see gemm_avx2) with b packed: its 16-column blocks copied
 * to contiguous rows of TN floats (plain aligned loads, no masks, and no cache-set conflicts of a
 * large ldb: 128 rows 512 bytes apart use 8 of L1's 64 sets), each block read by every row tile;
 * with the row panels outside (m > n), all of b is packed once. The tiles compute the same
 * chains in the same order: packing moves operands, no arithmetic. Packing a's row panels too
 * (a weight gradient's strided x^T) measured slower on the MLP's dW (bench_repro_gemm), so a is
 * read in place. A product too small to reuse a packed block (one row tile), or whose packed b
 * does not fit PACK_B, runs tiles_any's unpacked loop.
 */
AVX2_FN static void tiles(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                          const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                          size_t kc, int chains, int load)
{
    float pk[PACK_B] __attribute__((aligned(32)));
    size_t kk = kc * (size_t)chains, nb = (n + TN - 1) / TN;
    bool rows_out = m > n;

    if (m <= TM || kk == 0 || kk * TN * (rows_out ? nb : 1) > PACK_B) {
        tiles_any(c, ldc, a, ars, acs, b, ldb, bias, m, n, kc, NULL, chains, load);
        return;
    }
    if (rows_out)
        for (size_t j0 = 0; j0 < n; j0 += TN)
            pack_b(pk + j0 * kk, b + j0, ldb, kk, n - j0 < TN ? n - j0 : TN);
    size_t outer = rows_out ? m : n, inner = rows_out ? n : m;
    for (size_t o = 0; o < outer; o += rows_out ? TM : TN) {
        if (!rows_out)
            pack_b(pk, b + o, ldb, kk, n - o < TN ? n - o : TN);
        for (size_t p = 0; p < inner; p += rows_out ? TN : TM) {
            size_t i0 = rows_out ? o : p, j0 = rows_out ? p : o;
            size_t mr = m - i0 < TM ? m - i0 : TM, nr = n - j0 < TN ? n - j0 : TN;
            const float *bj = bias != NULL ? bias + j0 : NULL;
            const float *bp = rows_out ? pk + j0 * kk : pk;
            if (nr == TN)
                tile(c + i0 * ldc + j0, ldc, a + i0 * ars, ars, acs, bp, TN, bj, mr, nr, kc, NULL,
                     chains, 1, 1, load);
            else
                tile(c + i0 * ldc + j0, ldc, a + i0 * ars, ars, acs, bp, TN, bj, mr, nr, kc, NULL,
                     chains, 0, 1, load);
        }
    }
}

AVX2_FN static void tiles_runs(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                               const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                               const mt_repro_runs *rs, int chains)
{
    tiles_any(c, ldc, a, ars, acs, b, ldb, bias, m, n, 0, rs, chains, 0);
}

/* more: one chain continued from c (mt_repro_gemm_more). */
AVX2_FN static void gemm_avx2(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                              const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                              size_t k, int chains, int more)
{
    /* One long chain (a weight gradient's rows: conv2d's im2col rows of a leaf) runs in K-blocks
     * of KB, each pass continuing every element's chain from c, so a tile reads KB rows of a and
     * b that stay in cache instead of walking all k of them; the bias is added after the last. */
    if (chains == 1 && k > 2 * KB) {
        for (size_t q0 = 0; q0 < k; q0 += KB) {
            size_t kb = k - q0 < KB ? k - q0 : KB;
            tiles(c, ldc, a + q0 * acs, ars, acs, b + q0 * ldb, ldb, q0 + kb == k ? bias : NULL, m,
                  n, kb, 1, more || q0 > 0);
        }
        return;
    }
    tiles(c, ldc, a, ars, acs, b, ldb, bias, m, n, k / (size_t)chains, chains, more);
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* rs NULL: the plain product of k terms in chains (mt_repro_gemm), else mt_repro_gemm_runs. */
static void product(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
                    size_t ldb, const float *bias, size_t m, size_t n, size_t k,
                    const mt_repro_runs *rs, int chains)
{
    size_t kc = k / (size_t)chains;
    mt_repro_runs plain = {kc, 1, 0, kc};
#ifdef MT_REPRO_AVX2
    if (have_avx2()) {
        if (rs == NULL)
            gemm_avx2(c, ldc, a, ars, acs, b, ldb, bias, m, n, k, chains, 0);
        else
            tiles_runs(c, ldc, a, ars, acs, b, ldb, bias, m, n, rs, chains);
        return;
    }
#endif
    gemm_ref_runs(c, ldc, a, ars, acs, b, ldb, bias, m, n, rs != NULL ? rs : &plain, chains);
}

void mt_repro_gemm(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
                   size_t ldb, const float *bias, size_t m, size_t n, size_t k, int chains)
{
    product(c, ldc, a, ars, acs, b, ldb, bias, m, n, k, NULL, chains);
}

void mt_repro_gemm_runs(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                        const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                        const mt_repro_runs *rs, int chains)
{
    product(c, ldc, a, ars, acs, b, ldb, bias, m, n, 0, rs, chains);
}

void mt_repro_gemm_more(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                        const float *b, size_t ldb, size_t m, size_t n, size_t k)
{
    if (k == 0)
        return;
#ifdef MT_REPRO_AVX2
    if (have_avx2()) {
        gemm_avx2(c, ldc, a, ars, acs, b, ldb, NULL, m, n, k, 1, 1);
        return;
    }
#endif
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float s = c[i * ldc + j];
            for (size_t q = 0; q < k; q++)
                s = fmaf(a[i * ars + q * acs], b[q * ldb + j], s);
            c[i * ldc + j] = s;
        }
}
