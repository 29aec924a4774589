/* SPDX-License-Identifier: MIT */
/*
 * test_worker_task.c — the worker's task table (worker/task.h) without a network: assignments
 * that cannot start are reported failed with their reason, repeated assignments are ignored,
 * statuses the coordinator saw are dropped, cancel and stop are safe on idle tables. The runner
 * itself (threads, data plane, RPCs) is tested end to end in tests/integration/test_e2e.sh.
 */
#include "mt_test.h"

#include <string.h>

#include "coll/mt_coll.h"
#include "worker/task.h"

typedef struct fixture {
    Meshtrain__TaskAssignment a;
    Meshtrain__MeshDim dim, *dims[1];
    Meshtrain__RankAddress ra[2], *ras[2];
} fixture;

/* A 2-rank assignment of job j-1; rank 1 has no data-plane address. */
static void make_assignment(fixture *f)
{
    meshtrain__task_assignment__init(&f->a);
    meshtrain__mesh_dim__init(&f->dim);
    f->dim.name = "batch";
    f->dim.size = 2;
    f->dims[0] = &f->dim;
    for (int i = 0; i < 2; i++) {
        meshtrain__rank_address__init(&f->ra[i]);
        f->ra[i].rank = (uint32_t)i;
        f->ra[i].worker_id = "w";
        f->ra[i].data_address = i == 0 ? "tcp://127.0.0.1:1" : "";
        f->ras[i] = &f->ra[i];
    }
    f->a.job_id = "j-1";
    f->a.attempt = 1;
    f->a.spec_json = "{}";
    f->a.mesh = f->dims;
    f->a.n_mesh = 1;
    f->a.ranks = f->ras;
    f->a.n_ranks = 2;
}

static worker_tasks *new_table(void)
{
    worker_task_env env = {"tcp://127.0.0.1:1", NULL, NULL, 100, NULL, NULL, NULL, NULL, 0};
    worker_tasks *t = NULL;
    assert_int_equal(worker_tasks_new(&env, &t, NULL), MT_OK);
    assert_non_null(t);
    return t;
}

static void test_worker_task_empty_snapshot(void **state)
{
    worker_tasks *t = new_table();
    Meshtrain__TaskStatus **s = NULL;
    size_t n = 99;
    (void)state;
    worker_tasks_snapshot(t, &s, &n);
    assert_null(s);
    assert_int_equal(n, 0);
    worker_tasks_stop(t); /* no task: returns at once */
    worker_tasks_free(t);
    worker_tasks_free(NULL);
}

static void test_worker_task_bad_rank_table_fails_with_reason(void **state)
{
    worker_tasks *t = new_table();
    Meshtrain__TaskStatus **s = NULL;
    size_t n = 0;
    fixture f;
    (void)state;
    make_assignment(&f);
    worker_on_assignment(t, &f.a);
    worker_on_assignment(t, &f.a); /* repeated until reported: ignored */
    worker_tasks_snapshot(t, &s, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s[0]->job_id, "j-1");
    assert_int_equal(s[0]->attempt, 1);
    assert_string_equal(s[0]->state, "failed");
    assert_non_null(strstr(s[0]->error, "rank 1: worker w has no data-plane address"));
    worker_tasks_reported(t, s, n); /* final and seen: dropped */
    worker_tasks_snapshot_free(s, n);
    worker_tasks_snapshot(t, &s, &n);
    assert_int_equal(n, 0);
    worker_tasks_free(t);
}

static void test_worker_task_rank_out_of_range(void **state)
{
    worker_tasks *t = new_table();
    Meshtrain__TaskStatus **s = NULL;
    size_t n = 0;
    fixture f;
    (void)state;
    make_assignment(&f);
    f.ra[1].rank = 7;
    f.ra[1].data_address = "tcp://127.0.0.1:2";
    worker_on_assignment(t, &f.a);
    worker_tasks_snapshot(t, &s, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s[0]->state, "failed");
    assert_non_null(strstr(s[0]->error, "rank table: rank 7"));
    worker_tasks_snapshot_free(s, n);
    worker_tasks_free(t);
}

static void test_worker_task_cancel_unknown_is_noop(void **state)
{
    worker_tasks *t = new_table();
    Meshtrain__TaskCancel x = MESHTRAIN__TASK_CANCEL__INIT;
    Meshtrain__TaskStatus **s = NULL;
    size_t n = 0;
    (void)state;
    x.job_id = "nope";
    x.attempt = 3;
    x.reason = "test";
    worker_on_cancel(t, &x);
    worker_tasks_snapshot(t, &s, &n);
    assert_int_equal(n, 0);
    worker_tasks_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_task_empty_snapshot),
        cmocka_unit_test(test_worker_task_bad_rank_table_fails_with_reason),
        cmocka_unit_test(test_worker_task_rank_out_of_range),
        cmocka_unit_test(test_worker_task_cancel_unknown_is_noop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
