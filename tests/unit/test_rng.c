/* SPDX-License-Identifier: MIT */
/* test_rng.c — unit tests for core/rng (mt_rng.h): Philox known answers, the shard (slice)
 * property of Glorot init, Keras fan computation, batch-split-independent dropout masks and the
 * shuffle permutation. */
#include "mt_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng/mt_rng.h"

static void test_rng_philox_known_answers(void **state)
{
    /* Random123 kat_vectors, philox4x32_10 */
    uint32_t c0[4] = {0, 0, 0, 0}, out[4];
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    (void)state;
    mt_rng_philox(out, c0, 0);
    assert_int_equal(out[0], 0x6627e8d5u);
    assert_int_equal(out[1], 0xe169c58du);
    assert_int_equal(out[2], 0xbc57ac4cu);
    assert_int_equal(out[3], 0x9b00dbd8u);
    mt_rng_philox(out, c1, 0xffffffffffffffffull);
    assert_int_equal(out[0], 0x408f276du);
    assert_int_equal(out[1], 0x41c83b0eu);
    assert_int_equal(out[2], 0xa20bc7c6u);
    assert_int_equal(out[3], 0x6d5451fdu);
}

static void test_rng_uniform_range_and_mean(void **state)
{
    double s = 0.0;
    (void)state;
    for (uint64_t i = 0; i < 100000; i++) {
        float u = mt_rng_uniform(42, 7, i);
        assert_true(u >= 0.0f && u < 1.0f);
        s += u;
    }
    assert_true(fabs(s / 100000 - 0.5) < 0.005);
    assert_true(mt_rng_uniform(42, 7, 3) != mt_rng_uniform(43, 7, 3));
    assert_true(mt_rng_uniform(42, 7, 3) != mt_rng_uniform(42, 8, 3));
    assert_int_equal(mt_rng_name_id("dense_1.kernel"), mt_rng_name_id("dense_1.kernel"));
    assert_int_not_equal(mt_rng_name_id("dense_1.kernel"), mt_rng_name_id("dense_2.kernel"));
}

static void test_rng_glorot_limits_as_keras(void **state)
{
    size_t d[2] = {784, 128}, c[4] = {3, 3, 32, 64}, v[1] = {10};
    (void)state;
    assert_float_equal(mt_rng_glorot_limit(2, d), sqrt(6.0 / (784 + 128)), 1e-7);
    assert_float_equal(mt_rng_glorot_limit(4, c), sqrt(6.0 / (9 * 32 + 9 * 64)), 1e-7);
    assert_float_equal(mt_rng_glorot_limit(1, v), sqrt(6.0 / 20), 1e-7);
}

static void test_rng_glorot_shard_equals_slice(void **state)
{
    size_t g[4] = {3, 3, 5, 6}, zero[4] = {0, 0, 0, 0};
    size_t n = 3 * 3 * 5 * 6;
    float *full = malloc(n * sizeof(float));
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_rng_glorot_fill(full, 9, 77, 4, g, zero, g, &err), MT_OK);
    float lim = mt_rng_glorot_limit(4, g);
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(full[i]) <= lim);
    /* shard: axes 2 and 3 sliced ([1,4) x [2,5)) */
    size_t off[4] = {0, 1, 1, 2}, loc[4] = {3, 2, 3, 3};
    float shard[3 * 2 * 3 * 3];
    assert_int_equal(mt_rng_glorot_fill(shard, 9, 77, 4, g, off, loc, &err), MT_OK);
    size_t e = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 3; c++)
                for (size_t d = 0; d < 3; d++) {
                    size_t gi = ((a * 3 + b + 1) * 5 + c + 1) * 6 + d + 2;
                    assert_memory_equal(&shard[e], &full[gi], sizeof(float)); /* bit-identical */
                    e++;
                }
    size_t bad[4] = {3, 3, 3, 5};
    assert_int_equal(mt_rng_glorot_fill(shard, 9, 77, 4, g, off, bad, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_rng_glorot_fill(shard, 9, 77, 5, g, off, loc, &err), MT_INVALID_ARGUMENT);
    free(full);
}

static void test_rng_dropout_mask_independent_of_split(void **state)
{
    uint8_t whole[8 * 37], part[8 * 37];
    size_t kept = 0;
    (void)state;
    mt_rng_dropout_mask(whole, 5, 11, 2, 100, 8, 37, 0.3f);
    mt_rng_dropout_mask(part, 5, 11, 2, 100, 3, 37, 0.3f);
    mt_rng_dropout_mask(part + 3 * 37, 5, 11, 2, 103, 5, 37, 0.3f);
    assert_memory_equal(whole, part, sizeof(whole));
    mt_rng_dropout_mask(part, 5, 12, 2, 100, 8, 37, 0.3f);
    assert_memory_not_equal(whole, part, sizeof(whole));
    mt_rng_dropout_mask(part, 5, 11, 3, 100, 8, 37, 0.3f);
    assert_memory_not_equal(whole, part, sizeof(whole));
    uint8_t big[20000];
    mt_rng_dropout_mask(big, 1, 1, 1, 0, 100, 200, 0.25f);
    for (size_t i = 0; i < sizeof(big); i++)
        kept += big[i];
    assert_true(fabs((double)kept / 20000 - 0.75) < 0.02);
    mt_rng_dropout_mask(big, 1, 1, 1, 0, 1, 50, 0.0f);
    for (size_t i = 0; i < 50; i++)
        assert_int_equal(big[i], 1);
}

static void test_rng_permutation(void **state)
{
    uint32_t p[1000], q[1000], seen[1000] = {0};
    (void)state;
    mt_rng_permutation(p, 1000, 3, 0);
    mt_rng_permutation(q, 1000, 3, 0);
    assert_memory_equal(p, q, sizeof(p));
    for (size_t i = 0; i < 1000; i++)
        seen[p[i]]++;
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    mt_rng_permutation(q, 1000, 3, 1);
    assert_memory_not_equal(p, q, sizeof(p));
    mt_rng_permutation(q, 0, 3, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_philox_known_answers),
        cmocka_unit_test(test_rng_uniform_range_and_mean),
        cmocka_unit_test(test_rng_glorot_limits_as_keras),
        cmocka_unit_test(test_rng_glorot_shard_equals_slice),
        cmocka_unit_test(test_rng_dropout_mask_independent_of_split),
        cmocka_unit_test(test_rng_permutation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
