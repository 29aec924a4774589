/* SPDX-License-Identifier: MIT */
/*
 * test_coll_progress.c — the per-device progress records of core/coll (mt_coll_progress.h):
 * construction errors, attachment, what entry/wait/segments/exit and the SPMD activity write,
 * "ticks" standing still while a device only waits, and the test-only stall hook.
 */
#include "mt_test.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/mt_coll.h"
#include "coll/mt_coll_progress.h"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct member {
    mt_coll_comm *comm;
    uint64_t step;
    int delay_ms; /* before the allreduce */
    const char *activity;
    float buf[64];
    mt_code rc;
} member;

static void *run_member(void *arg)
{
    member *m = arg;
    int rank = mt_coll_comm_rank(m->comm);
    const int ranks[2] = {0, 1};
    mt_coll_group g = {ranks, 2};

    mt_coll_comm_set_step(m->comm, m->step);
    mt_coll_comm_activity(m->comm, m->activity);
    if (m->delay_ms > 0)
        usleep((useconds_t)m->delay_ms * 1000);
    for (int i = 0; i < 64; i++)
        m->buf[i] = (float)(rank + i);
    mt_coll_comm_axis(m->comm, "batch");
    m->rc = mt_coll_allreduce_sum(m->comm, &g, m->buf, 64, NULL, NULL);
    return NULL;
}

static void start_both(member m[2], pthread_t th[2])
{
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, run_member, &m[i]), 0);
}

static void join_both(member m[2], pthread_t th[2])
{
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(m[0].rc, MT_OK);
    assert_int_equal(m[1].rc, MT_OK);
}

/* A local world of 2 with 16-byte segments and no direct path: 2 segments per ring step. */
static mt_coll_world *world2(void)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w = NULL;

    o.segment_bytes = 64;
    o.direct_bytes = 0;
    o.default_deadline_ms = 5000;
    assert_int_equal(mt_coll_world_new_local(2, &o, &w, NULL), MT_OK);
    return w;
}

static void test_coll_progress_new_errors(void **state)
{
    mt_coll_progress *p = (mt_coll_progress *)&p;
    mt_err err = MT_ERR_INIT;
    (void)state;

    assert_int_equal(mt_coll_progress_new(0, &p, &err), MT_INVALID_ARGUMENT);
    assert_null(p);
    assert_non_null(strstr(err.msg, "0 slots"));
    assert_int_equal(mt_coll_progress_new(5000, &p, NULL), MT_INVALID_ARGUMENT);
    mt_coll_progress_free(NULL);
    assert_int_equal(mt_coll_progress_new(3, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_progress_slots(p), 3);
    mt_coll_progress_free(p);
}

static void test_coll_progress_read_empty_and_out_of_range(void **state)
{
    mt_coll_progress *p = NULL;
    mt_coll_progress_rec r;
    (void)state;

    assert_int_equal(mt_coll_progress_new(1, &p, NULL), MT_OK);
    mt_coll_progress_read(p, 0, &r);
    assert_int_equal(r.rank, -1);
    assert_int_equal(r.state, MT_COLL_PSTATE_NONE);
    assert_string_equal(r.op, "");
    assert_int_equal(r.activity_age_ms, -1);
    assert_int_equal(r.ticks, 0);
    mt_coll_progress_read(p, 7, &r);
    assert_int_equal(r.rank, -1);
    mt_coll_progress_read(NULL, 0, &r);
    assert_int_equal(r.rank, -1);
    mt_coll_progress_free(p);
}

static void test_coll_progress_attach_needs_enough_slots(void **state)
{
    mt_coll_world *w = world2();
    mt_coll_progress *p = NULL;
    mt_coll_progress_rec r;
    mt_err err = MT_ERR_INIT;
    (void)state;

    assert_int_equal(mt_coll_progress_new(1, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_world_set_progress(w, p, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "1 slots for 2 local devices"));
    mt_coll_progress_free(p);
    assert_int_equal(mt_coll_progress_new(2, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_world_set_progress(w, p, NULL), MT_OK);
    mt_coll_progress_read(p, 1, &r);
    assert_int_equal(r.rank, 1);
    /* detach: activity on the comm no longer reaches the table */
    assert_int_equal(mt_coll_world_set_progress(w, NULL, NULL), MT_OK);
    mt_coll_comm_activity(mt_coll_world_comm(w, 0), "computing");
    mt_coll_progress_read(p, 0, &r);
    assert_string_equal(r.activity, "");
    mt_coll_comm_activity(NULL, "computing"); /* no-op */
    mt_coll_comm_axis(NULL, "batch");
    mt_coll_world_free(w);
    mt_coll_progress_free(p);
}

static void test_coll_progress_records_a_collective(void **state)
{
    mt_coll_world *w = world2();
    mt_coll_progress *p = NULL;
    mt_coll_progress_rec r;
    member m[2];
    pthread_t th[2];
    (void)state;

    assert_int_equal(mt_coll_progress_new(2, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_world_set_progress(w, p, NULL), MT_OK);
    for (int i = 0; i < 2; i++)
        m[i] = (member){.comm = mt_coll_world_comm(w, i), .step = 41, .activity = "computing"};
    start_both(m, th);
    join_both(m, th);
    for (int i = 0; i < 2; i++) {
        mt_coll_progress_read(p, i, &r);
        assert_int_equal(r.rank, i);
        assert_int_equal(r.step, 41);
        assert_int_equal(r.seq, 0);
        assert_string_equal(r.op, "allreduce");
        assert_string_equal(r.axis, "batch");
        assert_int_equal(r.state, MT_COLL_PSTATE_DONE);
        assert_string_equal(mt_coll_pstate_name(r.state), "done");
        /* 64 floats over 2 members: chunks of 32 floats, 16-float segments: 2 per ring step */
        assert_int_equal(r.chunks, 2);
        assert_int_equal(r.chunk, 2);
        assert_string_equal(r.activity, "computing");
        assert_true(r.activity_age_ms >= 0);
        /* activity + entry + 2 segments per phase x 2 phases + exit */
        assert_int_equal(r.ticks, 1 + 1 + 4 + 1);
    }
    mt_coll_world_free(w);
    mt_coll_progress_free(p);
}

static void test_coll_progress_waiting_does_not_tick(void **state)
{
    mt_coll_world *w = world2();
    mt_coll_progress *p = NULL;
    mt_coll_progress_rec r0, r1, again;
    member m[2];
    pthread_t th[2];
    int64_t t0 = mono_ms();
    (void)state;

    assert_int_equal(mt_coll_progress_new(2, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_world_set_progress(w, p, NULL), MT_OK);
    m[0] = (member){.comm = mt_coll_world_comm(w, 0), .step = 7, .activity = "computing"};
    m[1] = (member){
        .comm = mt_coll_world_comm(w, 1), .step = 7, .delay_ms = 600, .activity = "reading input"};
    start_both(m, th);
    /* rank 0 ends up waiting in allreduce #0 of step 7; rank 1 has not entered */
    do {
        usleep(10 * 1000);
        mt_coll_progress_read(p, 0, &r0);
    } while (r0.state != MT_COLL_PSTATE_WAITING && mono_ms() - t0 < 3000);
    assert_int_equal(r0.state, MT_COLL_PSTATE_WAITING);
    assert_int_equal(r0.step, 7);
    assert_string_equal(r0.axis, "batch");
    usleep(150 * 1000);
    mt_coll_progress_read(p, 0, &again);
    mt_coll_progress_read(p, 1, &r1);
    if (mono_ms() - t0 < 550) { /* rank 1 is still asleep: nothing moved */
        assert_int_equal(again.ticks, r0.ticks);
        assert_true(again.state_age_ms >= 100);
        assert_int_equal(r1.state, MT_COLL_PSTATE_NONE);
        assert_string_equal(r1.activity, "reading input");
    }
    join_both(m, th);
    mt_coll_progress_read(p, 0, &again);
    assert_true(again.ticks > r0.ticks);
    assert_int_equal(again.state, MT_COLL_PSTATE_DONE);
    mt_coll_world_free(w);
    mt_coll_progress_free(p);
}

static void test_coll_progress_test_stall_hook(void **state)
{
    mt_coll_world *w = world2();
    mt_coll_progress *p = NULL;
    mt_coll_progress_rec r;
    member m[2];
    pthread_t th[2];
    mt_err err = MT_ERR_INIT;
    int64_t t0;
    int seen = 0;
    (void)state;

    assert_int_equal(mt_coll_progress_new(2, &p, NULL), MT_OK);
    assert_int_equal(mt_coll_progress_test_stall(p, 2, 3, 100, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_progress_test_stall(p, 1, 3, -1, NULL), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_progress_test_stall(p, 1, 3, 400, NULL), MT_OK);
    assert_int_equal(mt_coll_world_set_progress(w, p, NULL), MT_OK);
    for (uint64_t step = 2; step <= 4; step++) {
        t0 = mono_ms();
        for (int i = 0; i < 2; i++)
            m[i] = (member){.comm = mt_coll_world_comm(w, i), .step = step, .activity = "x"};
        start_both(m, th);
        if (step == 3) {
            while (!seen && mono_ms() - t0 < 300) {
                mt_coll_progress_read(p, 1, &r);
                seen = strstr(r.activity, "test stall hook") != NULL &&
                       r.state != MT_COLL_PSTATE_ENTERED;
                usleep(5 * 1000);
            }
        }
        join_both(m, th);
        /* only step 3 sleeps, once */
        if (step == 3)
            assert_true(mono_ms() - t0 >= 390);
        else
            assert_true(mono_ms() - t0 < 390);
    }
    assert_true(seen);
    mt_coll_world_free(w);
    mt_coll_progress_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coll_progress_new_errors),
        cmocka_unit_test(test_coll_progress_read_empty_and_out_of_range),
        cmocka_unit_test(test_coll_progress_attach_needs_enough_slots),
        cmocka_unit_test(test_coll_progress_records_a_collective),
        cmocka_unit_test(test_coll_progress_waiting_does_not_tick),
        cmocka_unit_test(test_coll_progress_test_stall_hook),
    };
    return MT_RUN_TESTS(tests);
}
