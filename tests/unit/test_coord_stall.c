/* SPDX-License-Identifier: MIT */
/*
 * test_coord_stall.c — the coordinator's hang diagnosis (coordinator/stall.h): the line it writes
 * for a group that stopped advancing, from the per-rank progress records alone.
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "coordinator/stall.h"

#define NOW 1000000

static coord_stall_dev dev(const char *worker, uint32_t local, uint64_t step, uint32_t seq,
                           const char *state, const char *activity, int64_t act_age_ms)
{
    coord_stall_dev d;

    memset(&d, 0, sizeof(d));
    d.known = 1;
    snprintf(d.worker_id, sizeof(d.worker_id), "%s", worker);
    d.local_index = local;
    d.step = step;
    d.seq = seq;
    snprintf(d.op, sizeof(d.op), "allreduce");
    snprintf(d.axis, sizeof(d.axis), "batch");
    snprintf(d.state, sizeof(d.state), "%s", state);
    d.state_since_ms = NOW - 12000;
    snprintf(d.activity, sizeof(d.activity), "%s", activity);
    d.activity_since_ms = act_age_ms < 0 ? -1 : NOW - act_age_ms;
    return d;
}

static void test_coord_stall_names_the_device_that_never_entered(void **state)
{
    coord_stall_dev d[4] = {
        dev("worker-a", 0, 412, 57, "waiting", "computing", 12000),
        dev("worker-a", 1, 412, 57, "chunk", "computing", 12000),
        dev("worker-b", 0, 412, 57, "waiting", "computing", 13000),
        dev("worker-b", 1, 412, 56, "done", "reading input", 31400),
    };
    char out[256];
    (void)state;

    coord_stall_diagnose(d, 4, NOW, out, sizeof(out));
    assert_string_equal(out, "step 412 allreduce #57 on axis batch: worker-b cpu:1 never entered; "
                             "its last activity: reading input 31 s ago");
}

static void test_coord_stall_the_latest_collective_wins(void **state)
{
    /* rank 1 finished step 411 and is in step 412 #0; rank 0 is still in step 411 #3 */
    coord_stall_dev d[2] = {
        dev("w1", 0, 411, 3, "waiting", "computing", 5000),
        dev("w2", 0, 412, 0, "waiting", "computing", 1000),
    };
    char out[256];
    (void)state;

    snprintf(d[0].axis, sizeof(d[0].axis), "model");
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 412 allreduce #0 on axis batch: w1 cpu:0 is still in step 411 "
                             "allreduce #3 on axis model (waiting for 12 s)");
}

static void test_coord_stall_several_missing_devices(void **state)
{
    coord_stall_dev d[3] = {
        dev("a", 0, 9, 2, "waiting", "computing", 2000),
        dev("b", 0, 9, 1, "done", "computing", 20000),
        dev("c", 3, 0, 0, "none", "", -1),
    };
    char out[300];
    (void)state;

    coord_stall_diagnose(d, 3, NOW, out, sizeof(out));
    assert_string_equal(out, "step 9 allreduce #2 on axis batch: 2 devices never entered it: b "
                             "cpu:0 never entered; its last activity: computing 20 s ago; c cpu:3 "
                             "never entered; its last activity: none reported");
}

static void test_coord_stall_everyone_entered(void **state)
{
    coord_stall_dev d[2] = {
        dev("a", 0, 5, 1, "waiting", "computing", 2000),
        dev("b", 0, 5, 1, "chunk", "computing", 2000),
    };
    char out[256];
    (void)state;

    d[1].state_since_ms = NOW - 7000; /* the latest state change of the group: 7 s ago */
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 5 allreduce #1 on axis batch: all 2 devices entered; no data "
                             "moved for 7 s");
}

static void test_coord_stall_no_collective_in_progress(void **state)
{
    coord_stall_dev d[3] = {
        dev("a", 0, 5, 1, "done", "reading input", 40000),
        dev("b", 1, 5, 1, "done", "computing", 3000),
    };
    char out[256];
    (void)state;

    memset(&d[2], 0, sizeof(d[2])); /* rank 2 never reported */
    coord_stall_diagnose(d, 3, NOW, out, sizeof(out));
    assert_string_equal(out, "no device is inside a collective; a cpu:0 last activity: reading "
                             "input 40 s ago, b cpu:1 last activity: computing 3 s ago, rank 2: "
                             "no progress reported");
}

static void test_coord_stall_unknown_axis_and_truncation(void **state)
{
    coord_stall_dev d[2] = {
        dev("worker-a", 0, 1, 0, "entered", "computing", 0),
        dev("worker-b", 0, 0, 0, "none", "loading", 1000),
    };
    char small[24], out[256];
    (void)state;

    d[0].axis[0] = '\0';
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 1 allreduce #0 on axis (unknown): worker-b cpu:0 never entered; "
                             "its last activity: loading 1 s ago");
    memset(small, 'x', sizeof(small));
    coord_stall_diagnose(d, 2, NOW, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, out, sizeof(small) - 1);
    coord_stall_diagnose(d, 2, NOW, small, 0); /* cap 0: nothing written */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coord_stall_names_the_device_that_never_entered),
        cmocka_unit_test(test_coord_stall_the_latest_collective_wins),
        cmocka_unit_test(test_coord_stall_several_missing_devices),
        cmocka_unit_test(test_coord_stall_everyone_entered),
        cmocka_unit_test(test_coord_stall_no_collective_in_progress),
        cmocka_unit_test(test_coord_stall_unknown_axis_and_truncation),
    };
    return MT_RUN_TESTS(tests);
}
