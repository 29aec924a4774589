/* SPDX-License-Identifier: MIT */
/*
 * text_sample.c — next-token sampling, the autoregressive loop, and the next-token sequence
 * cutter (contract in mt_text.h).
 *
 * Called by client/cmd_generate.c (sampling, loop) and core/data/data_tokens.c (cutter); calls
 * core/rng for the draws: draw `index` under `seed` is mt_rng_uniform(seed,
 * mt_rng_name_id("generate"), index), a pure function, so a seed replays the same text whatever
 * the machine. Threading: pure functions. Tests: tests/unit/test_text.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "rng/mt_rng.h"
#include "text/mt_text.h"

/* Whether id i is among the top_k largest logits (ties to lower ids): value above the k-th
 * largest, or equal to it and among the first `ties` ids with that value. */
typedef struct keep_rule {
    float thr;   /* the k-th largest logit (-inf: keep all) */
    size_t ties; /* how many ids equal to thr are kept */
} keep_rule;

static int float_desc(const void *pa, const void *pb)
{
    float a = *(const float *)pa, b = *(const float *)pb;

    return a > b ? -1 : a < b ? 1 : 0;
}

static mt_code keep_rule_of(const float *l, size_t v, size_t k, keep_rule *r, mt_err *err)
{
    float *s;
    size_t above = 0;

    r->thr = -INFINITY;
    r->ties = v;
    if (k == 0 || k >= v)
        return MT_OK;
    if ((s = mt_malloc(v * sizeof(float))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "sample: out of memory");
    memcpy(s, l, v * sizeof(float));
    qsort(s, v, sizeof(float), float_desc);
    r->thr = s[k - 1];
    for (size_t i = 0; i < v; i++)
        above += l[i] > r->thr;
    r->ties = k - above;
    mt_free(s);
    return MT_OK;
}

mt_code mt_text_sample(const float *logits, size_t v, const mt_text_sample_opts *o, uint64_t index,
                       uint32_t *out, mt_err *err)
{
    keep_rule keep;
    double mx = -INFINITY, sum = 0.0, target = 0.0, acc = 0.0;
    size_t ties = 0, best = 0, last = 0;
    mt_code rc;

    *out = 0;
    if (v == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "sample: no logits");
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "sample: temperature %g is not >= 0",
                          (double)o->temperature);
    for (size_t i = 0; i < v; i++)
        if (isnan(logits[i]))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "sample: logit %zu is NaN", i);
    for (size_t i = 1; i < v; i++)
        best = logits[i] > logits[best] ? i : best;
    if (o->temperature == 0.0f || isinf(logits[best])) { /* greedy; or no finite scale */
        *out = (uint32_t)best;
        return MT_OK;
    }
    if ((rc = keep_rule_of(logits, v, o->top_k, &keep, err)) != MT_OK)
        return rc;
    mx = logits[best];
    /* two passes over the kept ids in id order: the sum, then the cumulative walk */
    for (int pass = 0; pass < 2; pass++) {
        ties = 0;
        if (pass == 1)
            target = (double)mt_rng_uniform(o->seed, mt_rng_name_id("generate"), index) * sum;
        for (size_t i = 0; i < v; i++) {
            double p;
            if (logits[i] < keep.thr || (logits[i] == keep.thr && ties++ >= keep.ties))
                continue;
            p = exp(((double)logits[i] - mx) / (double)o->temperature);
            if (pass == 0) {
                sum += p;
                continue;
            }
            acc += p;
            last = i;
            if (acc > target) {
                *out = (uint32_t)i;
                return MT_OK;
            }
        }
    }
    *out = (uint32_t)last; /* rounding left u·sum at the very top: the last kept id */
    return MT_OK;
}

mt_code mt_text_generate(const uint32_t *prompt, size_t n_prompt, size_t n_new, size_t block_size,
                         size_t v, const mt_text_sample_opts *o, mt_text_logits_fn fn, void *ctx,
                         uint32_t **out, size_t *n_out, mt_err *err)
{
    uint32_t *seq;
    size_t n = n_prompt;
    mt_code rc = MT_OK;

    *out = NULL;
    *n_out = 0;
    if (n_prompt == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "generate: the prompt has no tokens");
    if (block_size == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "generate: block_size is 0");
    if ((seq = mt_malloc((n_prompt + n_new) * sizeof(uint32_t))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "generate: out of memory");
    memcpy(seq, prompt, n_prompt * sizeof(uint32_t));
    while (rc == MT_OK && n < n_prompt + n_new) {
        size_t ctx_n = n < block_size ? n : block_size;
        const float *logits = NULL;
        rc = fn(ctx, seq + n - ctx_n, ctx_n, &logits, err);
        if (rc == MT_OK)
            rc = mt_text_sample(logits, v, o, n, &seq[n], err);
        n++;
    }
    if (rc != MT_OK) {
        mt_free(seq);
        return rc;
    }
    *out = seq;
    *n_out = n;
    return MT_OK;
}

size_t mt_text_sequence_count(size_t n, size_t block_size)
{
    return n < 2 || block_size == 0 ? 0 : (n - 1) / block_size;
}

void mt_text_sequence_cut(const uint32_t *ids, size_t n, size_t block_size, float *x, int32_t *y)
{
    size_t count = mt_text_sequence_count(n, block_size);

    for (size_t e = 0; e < count; e++)
        for (size_t j = 0; j < block_size; j++) {
            if (x != NULL)
                x[e * block_size + j] = (float)ids[e * block_size + j];
            if (y != NULL)
                y[e * block_size + j] = (int32_t)ids[e * block_size + j + 1];
        }
}
