/* SPDX-License-Identifier: MIT */
/*
 * mt_rng.c — Philox4x32-10 and the draws built on it (contract in mt_rng.h).
 * Philox constants from Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
 * Threading: pure functions. Tests: tests/unit/test_rng.c.
 */
#include "rng/mt_rng.h"

#include <math.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* stream tags keep the uses of one seed apart */
#define STREAM_DROPOUT 0x44524f50u
#define STREAM_SHUFFLE 0x53485546u

void mt_rng_philox(uint32_t out[4], const uint32_t ctr[4], uint64_t key)
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);

    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint32_t mt_rng_name_id(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

static float to_unit(uint32_t u)
{
    return (float)(u >> 8) * (1.0f / 16777216.0f);
}

float mt_rng_uniform(uint64_t seed, uint32_t stream, uint64_t index)
{
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, 0}, out[4];
    mt_rng_philox(out, ctr, seed);
    return to_unit(out[0]);
}

float mt_rng_glorot_limit(int rank, const size_t *s)
{
    double fan_in, fan_out;
    if (rank == 1) {
        fan_in = fan_out = (double)s[0];
    } else if (rank == 2) {
        fan_in = (double)s[0];
        fan_out = (double)s[1];
    } else {
        double rf = 1.0;
        for (int i = 0; i < rank - 2; i++)
            rf *= (double)s[i];
        fan_in = rf * (double)s[rank - 2];
        fan_out = rf * (double)s[rank - 1];
    }
    if (fan_in + fan_out <= 0.0)
        return 0.0f;
    return (float)sqrt(6.0 / (fan_in + fan_out));
}

mt_code mt_rng_glorot_fill(float *out, uint64_t seed, uint32_t stream, int rank,
                           const size_t *global_shape, const size_t *offsets,
                           const size_t *local_shape, mt_err *err)
{
    if (rank < 1 || rank > 4)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "glorot init of a rank-%d tensor", rank);
    return mt_rng_uniform_fill(out, seed, stream, mt_rng_glorot_limit(rank, global_shape), rank,
                               global_shape, offsets, local_shape, err);
}

mt_code mt_rng_uniform_fill(float *out, uint64_t seed, uint32_t stream, float limit, int rank,
                            const size_t *global_shape, const size_t *offsets,
                            const size_t *local_shape, mt_err *err)
{
    size_t idx[4] = {0, 0, 0, 0}, gstride[4], n = 1;

    if (rank < 1 || rank > 4)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "uniform init of a rank-%d tensor", rank);
    size_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (offsets[i] > global_shape[i] || local_shape[i] > global_shape[i] - offsets[i])
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "shard [%zu, %zu) of axis %d exceeds the global size %zu", offsets[i],
                              offsets[i] + local_shape[i], i, global_shape[i]);
        gstride[i] = s;
        s *= global_shape[i];
        n *= local_shape[i];
    }
    for (size_t e = 0; e < n; e++) {
        uint64_t g = 0;
        for (int a = 0; a < rank; a++)
            g += (uint64_t)(offsets[a] + idx[a]) * gstride[a];
        out[e] = limit * (2.0f * mt_rng_uniform(seed, stream, g) - 1.0f);
        for (int a = rank - 1; a >= 0; a--) {
            if (++idx[a] < local_shape[a])
                break;
            idx[a] = 0;
        }
    }
    return MT_OK;
}

void mt_rng_dropout_mask(uint8_t *mask, uint64_t seed, uint64_t step, uint32_t layer,
                         uint64_t first_example, size_t n_examples, size_t per_example, float rate)
{
    uint64_t key = seed ^ ((uint64_t)STREAM_DROPOUT << 32);
    uint32_t thresh;

    if (rate <= 0.0f) {
        memset(mask, 1, n_examples * per_example);
        return;
    }
    thresh = rate >= 1.0f ? 0xffffffffu : (uint32_t)((double)rate * 4294967296.0);
    for (size_t e = 0; e < n_examples; e++) {
        uint64_t ex = first_example + e;
        for (size_t j = 0; j < per_example; j += 4) {
            uint32_t ctr[4] = {(uint32_t)j, (uint32_t)ex, (uint32_t)(ex >> 32) ^ layer,
                               (uint32_t)step};
            uint32_t out[4];
            ctr[2] ^= (uint32_t)(step >> 32) * 0x9E3779B9u;
            ctr[3] ^= layer * 0x85EBCA6Bu;
            mt_rng_philox(out, ctr, key);
            for (size_t q = 0; q < 4 && j + q < per_example; q++)
                mask[e * per_example + j + q] = rate >= 1.0f ? 0 : (uint8_t)(out[q] >= thresh);
        }
    }
}

void mt_rng_permutation(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch)
{
    uint64_t key = seed ^ ((uint64_t)STREAM_SHUFFLE << 32);

    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), (uint32_t)epoch,
                           (uint32_t)(epoch >> 32)};
        uint32_t out[4];
        mt_rng_philox(out, ctr, key);
        uint64_t r = ((uint64_t)out[0] << 32) | out[1];
        size_t j = (size_t)(r % i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}
