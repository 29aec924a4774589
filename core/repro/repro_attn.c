/* SPDX-License-Identifier: MIT */
/*
 * repro_attn.c — attention under mesh_invariant (mt_repro.h, mt_repro_attn_forward / _backward):
 * a device's query rows computed so that their bits depend neither on how the rows are grouped
 * into calls nor on the seq split. Every product is core/repro's canonical product (an fma chain
 * per element, mt_repro_gemm), never OpenBLAS, whose bits follow the call's shape.
 *
 * Row-local values (scores, softmax, out, the score gradients, dq) are chains over a row's own
 * operands. A causal row's chains over keys run over exactly its keys: a group of rows is
 * computed in one call up to its first row's keys, then a staircase of calls continues the later
 * rows' chains (mt_repro_gemm_more), so no row's chain holds the zero terms of another row's
 * keys (fma(+0, v, s) is s for finite v unless s is -0.0f, so they would change a bit now and
 * then). The key and value gradients sum over query rows: per position leaf, a chain over the
 * leaf's rows; the leaves of a device fold in the canonical tree (zig order: mt_repro_bands), and
 * the layer's reduce-scatter over seq is the top of the tree. Tests: tests/unit/test_repro_attn.c.
 */
#include "repro/mt_repro.h"

#include <math.h>
#include <string.h>

#include "tensor/mt_tensor.h"

/* Query rows per call of the row-local products (any count gives the same bits). */
#define CHUNK 32
/* Rows of a staircase step (the canonical product's tiles are 6 rows). */
#define STEP 6

size_t mt_repro_attn_scratch(const mt_repro_attn *a)
{
    size_t lh = a->lh > 0 ? (size_t)a->lh : 1;
    return a->hd * a->t + a->rl * a->t + lh * a->t * 2 * a->hd;
}

/* The keys of a row at position pos. */
static size_t row_keys(const mt_repro_attn *a, size_t pos)
{
    return a->causal ? pos + 1 : a->t;
}

/* The position of the device's local row r. */
static size_t row_pos(const mt_repro_attn *a, size_t r)
{
    size_t len = a->rl / a->nb;
    return a->start[r / len] + r % len;
}

/* The first local row of the device's position leaf j of hl rows (mt_repro_bands.zig's order:
 * j even, leaf j/2 of the first block; odd, leaf lh/2-1-j/2 of the second; else local order). */
static size_t leaf_row(const mt_repro_attn *a, size_t hl, int j)
{
    size_t u = (size_t)j / 2;
    if (!a->zig || a->lh == 1)
        return (size_t)j * hl;
    return j % 2 == 0 ? u * hl : a->rl / 2 + ((size_t)a->lh / 2 - 1 - u) * hl;
}

/* The device's rows in calls of at most CHUNK rows within each block: local row *lo, position
 * *r0, *n rows of call i; false past the last. */
static bool chunk(const mt_repro_attn *a, size_t i, size_t *lo, size_t *r0, size_t *n)
{
    size_t len = a->rl / a->nb, per = (len + CHUNK - 1) / CHUNK, k = i / per, j = i % per;
    if (k >= a->nb)
        return false;
    *lo = k * len + j * CHUNK;
    *r0 = a->start[k] + j * CHUNK;
    *n = len - j * CHUNK < CHUNK ? len - j * CHUNK : CHUNK;
    return true;
}

/* dst (hd x t) = the t rows of src (stride w, hd features) transposed. */
static void transpose(float *dst, const float *src, size_t t, size_t w, size_t hd)
{
    for (size_t j = 0; j < t; j++)
        for (size_t d = 0; d < hd; d++)
            dst[d * t + j] = src[j * w + d];
}

/*
 * c row i (n rows, ldc apart; ncols columns) = the fma chain from 0 over exactly the keys
 * [0, nk_i) of a(i, key) b(key, :), nk_i = r0 + i + 1 (causal) or t: rows [g, n) take the keys
 * of row g in one call, then rows g+1.. of the step one more key each, step by step.
 */
static void key_chains(const mt_repro_attn *a, float *c, size_t ldc, const float *x, size_t ars,
                       const float *b, size_t ldb, size_t n, size_t ncols, size_t r0)
{
    size_t done = 0; /* keys in the chains of rows g.. */

    if (!a->causal) {
        mt_repro_gemm(c, ldc, x, ars, 1, b, ldb, NULL, n, ncols, a->t, 1);
        return;
    }
    for (size_t i = 0; i < n; i++)
        memset(c + i * ldc, 0, ncols * sizeof(float));
    for (size_t g = 0; g < n; g += STEP) {
        size_t need = r0 + g + 1, ge = g + STEP < n ? g + STEP : n;
        mt_repro_gemm_more(c + g * ldc, ldc, x + g * ars + done, ars, 1, b + done * ldb, ldb, n - g,
                           ncols, need - done);
        done = need;
        for (size_t u = 1; g + u < ge; u++) /* key done+u-1 for rows g+u .. ge-1 */
            mt_repro_gemm_more(c + (g + u) * ldc, ldc, x + (g + u) * ars + done + u - 1, ars, 1,
                               b + (done + u - 1) * ldb, ldb, ge - g - u, ncols, 1);
    }
}

/* Row i of n rows of scores (t wide) scaled, then into its softmax over its keys. */
static void softmax_rows(const mt_repro_attn *a, float *p, size_t n, size_t r0, float scale)
{
    for (size_t i = 0; i < n; i++) {
        float *row = p + i * a->t;
        size_t nk = row_keys(a, r0 + i);
        for (size_t j = 0; j < nk; j++)
            row[j] *= scale;
        mt_softmax_row(row, nk, a->t);
    }
}

void mt_repro_attn_forward(const mt_repro_attn *a, float *out, float *probs, const float *qkv,
                           float *scr)
{
    size_t t = a->t, hd = a->hd, w = 3 * a->heads * hd, wo = a->heads * hd, lo, r0, n;
    float scale = 1.0f / sqrtf((float)hd), *kt = scr;

    for (size_t e = 0; e < a->batch; e++)
        for (size_t h = 0; h < a->heads; h++) {
            const float *qh = qkv + e * t * w + 3 * hd * h;
            const float *p0 = probs + (e * a->heads + h) * a->rl * t;
            transpose(kt, qh + hd, t, w, hd);
            for (size_t i = 0; chunk(a, i, &lo, &r0, &n); i++) {
                float *p = probs + ((e * a->heads + h) * a->rl + lo) * t;
                size_t kn = a->causal ? r0 + n : t;
                mt_repro_gemm(p, t, qh + r0 * w, w, 1, kt, t, NULL, n, kn, hd, 1);
                softmax_rows(a, p, n, r0, scale);
                key_chains(a, out + (e * a->rl + lo) * wo + hd * h, wo, p0 + lo * t, t, qh + 2 * hd,
                           w, n, hd, r0);
            }
        }
}

/* The row-local part of the backward for one example and head: ds (rl x t) and the rows' dq. */
static void rows_backward(const mt_repro_attn *a, float *dq, float *ds, float *vt, const float *dy,
                          const float *qh, const float *p, float scale)
{
    size_t t = a->t, hd = a->hd, w = 3 * a->heads * hd, wo = a->heads * hd, lo, r0, n;

    transpose(vt, qh + 2 * hd, t, w, hd);
    for (size_t c = 0; chunk(a, c, &lo, &r0, &n); c++) {
        size_t kn = a->causal ? r0 + n : t;
        float *d = ds + lo * t;
        mt_repro_gemm(d, t, dy + lo * wo, wo, 1, vt, t, NULL, n, kn, hd, 1); /* dp = dy . v^T */
        for (size_t i = 0; i < n; i++) { /* ds = p (dp - sum_j dp p) / sqrt(hd) */
            const float *pr = p + (lo + i) * t;
            float *dr = d + i * t, dot = 0.0f;
            size_t nk = row_keys(a, r0 + i);
            for (size_t j = 0; j < nk; j++)
                dot += dr[j] * pr[j];
            for (size_t j = 0; j < nk; j++)
                dr[j] = pr[j] * (dr[j] - dot) * scale;
            memset(dr + nk, 0, (t - nk) * sizeof(float));
        }
        key_chains(a, dq + r0 * w, w, d, t, qh + hd, w, n, hd, r0); /* dq = ds . k */
    }
}

void mt_repro_attn_backward(const mt_repro_attn *a, float *dqkv, const float *dout,
                            const float *qkv, const float *probs, float *scr)
{
    size_t t = a->t, hd = a->hd, w = 3 * a->heads * hd, wo = a->heads * hd;
    size_t lt = (size_t)a->lh * (t / a->rl), hl = t / lt, leaf = t * 2 * hd;
    float scale = 1.0f / sqrtf((float)hd), *vt = scr, *ds = scr + hd * t, *lv = ds + a->rl * t;
    float *leaves[MT_REPRO_MAX_LEAVES];

    for (int j = 0; j < a->lh; j++)
        leaves[j] = lv + (size_t)j * leaf;
    for (size_t e = 0; e < a->batch; e++)
        for (size_t h = 0; h < a->heads; h++) {
            const float *qh = qkv + e * t * w + 3 * hd * h;
            const float *p = probs + (e * a->heads + h) * a->rl * t;
            const float *dy = dout + e * a->rl * wo + hd * h;
            float *dq = dqkv + e * t * w + 3 * hd * h;
            for (size_t j = 0; j < t; j++) /* the other devices' queries: -0 adds nothing */
                for (size_t d = 0; d < hd; d++)
                    dq[j * w + d] = -0.0f;
            rows_backward(a, dq, ds, vt, dy, qh, p, scale);
            for (int j = 0; j < a->lh; j++) { /* leaf j: dk = ds^T . q, dv = p^T . dy */
                size_t r = leaf_row(a, hl, j), pos = row_pos(a, r);
                size_t kn = a->causal ? pos + hl : t;
                mt_repro_gemm(leaves[j], 2 * hd, ds + r * t, 1, t, qh + pos * w, w, NULL, kn, hd,
                              hl, 1);
                mt_repro_gemm(leaves[j] + hd, 2 * hd, p + r * t, 1, t, dy + r * wo, wo, NULL, kn,
                              hd, hl, 1);
                memset(leaves[j] + kn * 2 * hd, 0, (t - kn) * 2 * hd * sizeof(float));
            }
            mt_repro_tree_fold(leaves, a->lh, leaf);
            for (size_t j = 0; j < t; j++)
                memcpy(dq + j * w + hd, leaves[0] + j * 2 * hd, 2 * hd * sizeof(float));
        }
}
