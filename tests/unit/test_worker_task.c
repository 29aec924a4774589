/* SPDX-License-Identifier: MIT */
/*
 * test_worker_task.c — the worker's task table (worker/task.h) without a network: assignments
 * that cannot start are reported failed with their reason, repeated assignments are ignored,
 * statuses the coordinator saw are dropped, cancel and stop are safe on idle tables, a job mixing
 * MPI and other workers fails naming them, mpi:// addresses parse strictly. The runner
 * itself (threads, data plane, RPCs) is tested end to end in tests/integration/test_e2e.sh.
 */
#include "mt_test.h"

#include <string.h>

#include "coll/mt_coll.h"
#include "coll/mt_coll_mpi.h"
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

/* A table of a worker on the direct transport (mpi_addr NULL) or an MPI worker. */
static worker_tasks *new_table_mpi(const char *mpi_addr)
{
    worker_task_env env = {"tcp://127.0.0.1:1", NULL, NULL, 100, NULL, NULL, NULL, mpi_addr, 0};
    worker_tasks *t = NULL;
    assert_int_equal(worker_tasks_new(&env, &t, NULL), MT_OK);
    assert_non_null(t);
    return t;
}

static worker_tasks *new_table(void)
{
    return new_table_mpi(NULL);
}

/* The one task's status is failed with want in its error. */
static void expect_failed(worker_tasks *t, const char *want)
{
    Meshtrain__TaskStatus **s = NULL;
    size_t n = 0;
    worker_tasks_snapshot(t, &s, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s[0]->state, "failed");
    if (strstr(s[0]->error, want) == NULL)
        fail_msg("error '%s' does not say '%s'", s[0]->error, want);
    worker_tasks_snapshot_free(s, n);
}

/* An MPI worker given a job with a direct-transport member, or with a member of another MPI
 * world, and a direct-transport worker given an MPI member: the task fails naming the member. */
static void test_worker_task_mixed_data_planes(void **state)
{
    static const char *const other[] = {"tcp://127.0.0.1:2", "mpi://00000000000000ff/1"};
    fixture f;
    (void)state;
    for (int i = 0; i < 2; i++) {
        worker_tasks *t = new_table_mpi("mpi://0123456789abcdef/0");
        make_assignment(&f);
        f.ra[0].data_address = "mpi://0123456789abcdef/0";
        f.ra[1].data_address = (char *)other[i];
        f.ra[1].worker_id = "odd";
        worker_on_assignment(t, &f.a);
        expect_failed(t, "1 member(s) are not MPI workers of this worker's MPI world "
                         "0123456789abcdef: odd (rank 1)");
        worker_tasks_free(t);
    }
    worker_tasks *t = new_table();
    make_assignment(&f);
    f.ra[1].data_address = "mpi://0123456789abcdef/3";
    f.ra[1].worker_id = "m3";
    worker_on_assignment(t, &f.a);
    expect_failed(t, "are MPI workers (--data-plane mpi), this worker is not: m3 (rank 1)");
    worker_tasks_free(t);
}

/* mpi:// addresses: exactly 16 hex digits, a slash and a decimal rank. */
static void test_worker_task_mpi_addr_parse(void **state)
{
    char w[MT_COLL_MPI_WORLD_ID + 1];
    int r = -1;
    mt_coll_mpi_info me = {.rank = 12, .size = 16, .world_id = "0123456789abcdef"};
    char addr[64];
    (void)state;
    mt_coll_mpi_addr(&me, addr, sizeof(addr));
    assert_string_equal(addr, "mpi://0123456789abcdef/12");
    assert_int_equal(mt_coll_mpi_parse_addr(addr, w, &r), 1);
    assert_string_equal(w, "0123456789abcdef");
    assert_int_equal(r, 12);
    assert_int_equal(mt_coll_mpi_parse_addr("mpi://0123456789abcdef/0", w, &r), 1);
    assert_int_equal(r, 0);
    static const char *const bad[] = {"tcp://127.0.0.1:1",
                                      "mpi://0123456789abcde/1",
                                      "mpi://0123456789abcdeF/1",
                                      "mpi://0123456789abcdef1",
                                      "mpi://0123456789abcdef/",
                                      "mpi://0123456789abcdef/-1",
                                      "mpi://0123456789abcdef/1x",
                                      "mpi://0123456789abcdef/99999999999",
                                      "",
                                      NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(mt_coll_mpi_parse_addr(bad[i], w, &r), 0);
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
        cmocka_unit_test(test_worker_task_mixed_data_planes),
        cmocka_unit_test(test_worker_task_mpi_addr_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
