/* SPDX-License-Identifier: MIT */
/* test_sched.c — mt_sched_place: gang placement keeping innermost mesh groups on one worker;
 * mt_sched_elastic_batch: the batch size of an elastic job. */
#include "mt_test.h"

#include <string.h>

#include "sched/mt_sched.h"

static const uint32_t f4[] = {0, 1, 2, 3}, f2[] = {0, 1}, f3[] = {0, 2, 3}, f1[] = {3};

static void test_sched_keeps_inner_groups_on_one_worker(void **state)
{
    /* mesh batch=2,model=2 on two workers of 2 free devices: each model pair on one worker */
    mt_sched_worker w[] = {{f2, 2}, {f2, 2}};
    mt_sched_slot out[4];
    (void)state;

    assert_int_equal(mt_sched_place(w, 2, 4, 2, out), MT_OK);
    assert_int_equal(out[0].worker, out[1].worker);
    assert_int_equal(out[2].worker, out[3].worker);
    assert_int_not_equal(out[0].worker, out[2].worker);
    assert_int_not_equal(out[0].local_index, out[1].local_index);
}

static void test_sched_best_fit_leaves_big_worker(void **state)
{
    /* one group of 2: the worker with 2 free is the best fit, the 4-device one stays whole */
    mt_sched_worker w[] = {{f4, 4}, {f2, 2}};
    mt_sched_slot out[2];
    (void)state;

    assert_int_equal(mt_sched_place(w, 2, 2, 2, out), MT_OK);
    assert_int_equal(out[0].worker, 1);
    assert_int_equal(out[1].worker, 1);
}

static void test_sched_splits_when_no_worker_fits_a_group(void **state)
{
    /* inner 4 over workers with 3 and 1 free devices: split, roomiest first, every device once */
    mt_sched_worker w[] = {{f1, 1}, {f3, 3}};
    mt_sched_slot out[4];
    int seen[2][4];
    (void)state;

    memset(seen, 0, sizeof(seen));
    assert_int_equal(mt_sched_place(w, 2, 4, 4, out), MT_OK);
    assert_int_equal(out[0].worker, 1);
    assert_int_equal(out[1].worker, 1);
    assert_int_equal(out[2].worker, 1);
    assert_int_equal(out[3].worker, 0);
    assert_int_equal(out[3].local_index, 3);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(seen[out[r].worker][out[r].local_index], 0);
        seen[out[r].worker][out[r].local_index] = 1;
    }
}

static void test_sched_not_enough_devices(void **state)
{
    mt_sched_worker w[] = {{f2, 2}, {f1, 1}};
    mt_sched_slot out[8];
    (void)state;

    assert_int_equal(mt_sched_place(w, 2, 4, 1, out), MT_RESOURCE_EXHAUSTED);
    assert_int_equal(mt_sched_place(NULL, 0, 1, 1, out), MT_RESOURCE_EXHAUSTED);
    assert_int_equal(mt_sched_place(w, 2, 3, 1, out), MT_OK);
}

static void test_sched_invalid_arguments(void **state)
{
    mt_sched_worker w[] = {{f4, 4}};
    mt_sched_slot out[4];
    (void)state;

    assert_int_equal(mt_sched_place(w, 1, 4, 0, out), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_sched_place(w, 1, 3, 2, out), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_sched_place(NULL, 1, 4, 1, out), MT_INVALID_ARGUMENT);
}

static void test_sched_deterministic_and_prefers_previous_worker(void **state)
{
    /* 8 ranks, inner 2, workers 4+4: groups 0,1 on one worker, groups 2,3 on the other */
    mt_sched_worker w[] = {{f4, 4}, {f4, 4}};
    mt_sched_slot a[8], b[8];
    (void)state;

    assert_int_equal(mt_sched_place(w, 2, 8, 2, a), MT_OK);
    assert_int_equal(mt_sched_place(w, 2, 8, 2, b), MT_OK);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(a[r].worker, b[r].worker);
        assert_int_equal(a[r].local_index, b[r].local_index);
    }
    assert_int_equal(a[0].worker, a[3].worker);
    assert_int_equal(a[4].worker, a[7].worker);
    assert_int_not_equal(a[0].worker, a[4].worker);
}

static void test_sched_elastic_batch(void **state)
{
    (void)state;
    /* the largest size the devices allow, within the bounds */
    assert_int_equal(mt_sched_elastic_batch(1, 2, 64, 1), 1);
    assert_int_equal(mt_sched_elastic_batch(1, 2, 64, 2), 2);
    assert_int_equal(mt_sched_elastic_batch(1, 2, 64, 8), 2);
    assert_int_equal(mt_sched_elastic_batch(1, 8, 64, 6), 4); /* 6 and 5 do not divide 64 */
    assert_int_equal(mt_sched_elastic_batch(2, 8, 96, 7), 6);
    /* nothing fits: fewer devices than min_batch, or no size in the bounds divides the batch */
    assert_int_equal(mt_sched_elastic_batch(2, 4, 64, 1), 0);
    assert_int_equal(mt_sched_elastic_batch(3, 3, 64, 8), 0);
    assert_int_equal(mt_sched_elastic_batch(1, 4, 64, 0), 0);
    assert_int_equal(mt_sched_elastic_batch(0, 4, 64, 3), 2); /* min 0 counts as 1 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sched_keeps_inner_groups_on_one_worker),
        cmocka_unit_test(test_sched_best_fit_leaves_big_worker),
        cmocka_unit_test(test_sched_splits_when_no_worker_fits_a_group),
        cmocka_unit_test(test_sched_not_enough_devices),
        cmocka_unit_test(test_sched_invalid_arguments),
        cmocka_unit_test(test_sched_deterministic_and_prefers_previous_worker),
        cmocka_unit_test(test_sched_elastic_batch),
    };
    return MT_RUN_TESTS(tests);
}
