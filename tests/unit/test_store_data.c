/* SPDX-License-Identifier: MIT */
/*
 * test_store_data.c — unit tests for the metrics and checkpoints parts of
 * storage/mt_store.h. Each test on its own temporary database.
 */
#include "mt_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_store.h"
#include "store_test_util.h"

typedef store_tctx tctx;

/* Insert a job and return its id in id[32]. */
static void add_job(mt_store *s, char id[32])
{
    store_test_add_job(s, id);
}

static mt_store_metric pt(uint64_t step, const char *name, double v)
{
    mt_store_metric m;
    memset(&m, 0, sizeof(m));
    m.step = step;
    m.epoch = (uint32_t)(step / 10);
    snprintf(m.name, sizeof(m.name), "%s", name);
    m.value = v;
    m.time_ms = 1000 + (int64_t)step;
    return m;
}

/* ------------------------------------------------------------------ metrics */

static void test_store_metrics_insert_query_order(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[6], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    /* out of order on purpose */
    in[0] = pt(2, "loss", 0.5);
    in[1] = pt(1, "loss", 0.9);
    in[2] = pt(1, "accuracy", 0.1);
    in[3] = pt(3, "loss", 0.4);
    in[4] = pt(2, "accuracy", 0.2);
    in[5] = pt(12, "loss", 0.3);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 6, &err), MT_OK);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 6);
    const uint64_t steps[] = {1, 1, 2, 2, 3, 12};
    const char *names[] = {"accuracy", "loss", "accuracy", "loss", "loss", "loss"};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].step, steps[i]);
        assert_string_equal(out[i].name, names[i]);
    }
    assert_int_equal(out[5].epoch, 1);
    assert_int_equal(out[5].time_ms, 1012);
    assert_true(out[1].value == 0.9);
    mt_store_metrics_free(out);

    /* since_step is inclusive */
    assert_int_equal(mt_store_metrics_query(t->s, job, 2, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    assert_int_equal(out[0].step, 2);
    mt_store_metrics_free(out);
    /* name filter and limit */
    const char *want[] = {"loss"};
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, want, 1, 2, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].step, 1);
    assert_int_equal(out[1].step, 2);
    assert_string_equal(out[1].name, "loss");
    mt_store_metrics_free(out);
    const char *two[] = {"accuracy", "nope"};
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, two, 2, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    mt_store_metrics_free(out);
    /* past the end, unknown job: empty */
    assert_int_equal(mt_store_metrics_query(t->s, job, 13, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(out);
    assert_int_equal(mt_store_metrics_query(t->s, "job-000404", 0, NULL, 0, 0, &out, &n, &err),
                     MT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 3, 0, &out, &n, &err),
                     MT_INVALID_ARGUMENT);
}

static void test_store_metrics_redone_steps_replace(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[3], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0, deleted = 0;

    add_job(t->s, job);
    for (uint64_t s = 1; s <= 10; s++) {
        in[0] = pt(s, "loss", 1.0 / (double)s);
        assert_int_equal(mt_store_metrics_insert(t->s, job, in, 1, &err), MT_OK);
    }
    /* restart from the checkpoint at step 5: drop 6.., redo 6..7 with other values */
    assert_int_equal(mt_store_metrics_truncate(t->s, job, 5, &deleted, &err), MT_OK);
    assert_int_equal(deleted, 5);
    in[0] = pt(5, "loss", 42.0); /* a redone step that survived truncation is replaced */
    in[1] = pt(6, "loss", 43.0);
    in[2] = pt(7, "loss", 44.0);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 3, &err), MT_OK);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 7);
    assert_true(out[4].value == 42.0);
    assert_true(out[6].value == 44.0);
    mt_store_metrics_free(out);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM metrics"), 7);
    assert_int_equal(mt_store_metrics_truncate(t->s, "job-000404", 0, NULL, &err), MT_OK);
}

static void test_store_metrics_nan_and_inf_kept(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[2], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    in[0] = pt(1, "loss", NAN);
    in[1] = pt(2, "loss", INFINITY);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_OK);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_true(isnan(out[0].value));
    assert_true(isinf(out[1].value) && out[1].value > 0);
    mt_store_metrics_free(out);
}

static void test_store_metrics_insert_errors_all_or_nothing(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[3];
    mt_err err = MT_ERR_INIT;

    add_job(t->s, job);
    in[0] = pt(1, "loss", 1);
    assert_int_equal(mt_store_metrics_insert(t->s, "job-000404", in, 1, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "job-000404"));
    in[1] = pt(2, "", 1);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_INVALID_ARGUMENT);
    in[1] = pt(2, "loss", 1);
    memset(in[1].name, 'n', sizeof(in[1].name));
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_INVALID_ARGUMENT);
    in[1] = pt((uint64_t)INT64_MAX + 1, "loss", 1);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_metrics_insert(t->s, job, NULL, 2, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_metrics_insert(t->s, NULL, in, 1, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_metrics_insert(t->s, job, NULL, 0, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM metrics"), 0);
}

static void test_store_metrics_latest_per_name(void **state)
{
    tctx *t = *state;
    char job[32], other[32];
    mt_store_metric in[5], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    add_job(t->s, other);
    in[0] = pt(1, "loss", 1.0);
    in[1] = pt(5, "loss", 0.5);
    in[2] = pt(3, "loss", 0.7);
    in[3] = pt(2, "eval_loss", 0.8);
    in[4] = pt(4, "accuracy", 0.6);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 5, &err), MT_OK);
    in[0] = pt(100, "loss", 9.0);
    assert_int_equal(mt_store_metrics_insert(t->s, other, in, 1, &err), MT_OK);
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(out[0].name, "accuracy");
    assert_int_equal(out[0].step, 4);
    assert_string_equal(out[1].name, "eval_loss");
    assert_int_equal(out[1].step, 2);
    assert_string_equal(out[2].name, "loss");
    assert_int_equal(out[2].step, 5);
    assert_true(out[2].value == 0.5);
    mt_store_metrics_free(out);
    assert_int_equal(mt_store_metrics_latest(t->s, "job-000404", &out, &n, &err), MT_OK);
    assert_int_equal(n, 0);
}

/* Latest values follow redone steps, truncation and batches with many names. */
static void test_store_metrics_latest_after_redo_truncate_many_names(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[40], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0, deleted = 0;

    add_job(t->s, job);
    for (uint64_t s = 1; s <= 10; s++) {
        in[0] = pt(s, "loss", (double)s);
        in[1] = pt(s, "acc", (double)s / 100);
        assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_OK);
    }
    in[0] = pt(12, "eval_loss", 0.5); /* only at step 12 */
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 1, &err), MT_OK);
    /* re-sending an old step does not move "latest" back */
    in[0] = pt(5, "loss", 555.0);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 1, &err), MT_OK);
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(out[2].name, "loss");
    assert_int_equal(out[2].step, 10);
    mt_store_metrics_free(out);
    /* restart from step 6: latest falls back to step 6, eval_loss has nothing left */
    assert_int_equal(mt_store_metrics_truncate(t->s, job, 6, &deleted, &err), MT_OK);
    assert_int_equal(deleted, 9); /* 7..10 x 2 names + eval_loss@12 */
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "acc");
    assert_int_equal(out[0].step, 6);
    assert_string_equal(out[1].name, "loss");
    assert_int_equal(out[1].step, 6);
    assert_true(out[1].value == 6.0);
    mt_store_metrics_free(out);
    /* the same step twice in one batch: the later point wins in both tables */
    in[0] = pt(7, "loss", 1.0);
    in[1] = pt(7, "loss", 2.0);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 2, &err), MT_OK);
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_true(out[1].value == 2.0);
    mt_store_metrics_free(out);
    /* more distinct names in one batch than tracked per batch */
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%02d", i);
        in[i] = pt((uint64_t)(100 + i % 3), name, i);
    }
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 40, &err), MT_OK);
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_int_equal(n, 42);
    assert_string_equal(out[41].name, "m39");
    assert_int_equal(out[41].step, 100);
    assert_true(out[41].value == 39.0);
    mt_store_metrics_free(out);
}

/* A version-2 database (latest values from an index) is migrated with its data. */
static void test_store_metrics_migrate_v2_keeps_latest(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[3], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    in[0] = pt(3, "loss", 0.3);
    in[1] = pt(9, "loss", 0.9);
    in[2] = pt(4, "acc", 0.4);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 3, &err), MT_OK);
    mt_store_close(t->s);
    t->s = NULL;
    /* turn it back into what version 2 looked like */
    assert_int_equal(store_raw_exec(t->f.path, "DROP TABLE metrics_latest;"
                                               "DROP TABLE schema_migrations;"
                                               "DROP INDEX jobs_by_request;"
                                               "ALTER TABLE jobs DROP COLUMN request_id;"
                                               "ALTER TABLE jobs DROP COLUMN mesh;"
                                               "ALTER TABLE jobs DROP COLUMN devices;"
                                               "ALTER TABLE jobs DROP COLUMN diagnosis;"
                                               "DROP TABLE job_logs;"
                                               "DROP TABLE job_digests;"
                                               "ALTER TABLE placements DROP COLUMN task_state;"
                                               "CREATE INDEX metrics_by_name ON metrics(job_id, "
                                               "name, step); PRAGMA user_version = 2;"),
                     SQLITE_OK);
    assert_int_equal(mt_store_open(t->f.path, &t->s, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM sqlite_schema WHERE "
                                              "name='metrics_by_name'"),
                     0);
    assert_int_equal(mt_store_metrics_latest(t->s, job, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "acc");
    assert_int_equal(out[0].step, 4);
    assert_int_equal(out[1].step, 9);
    assert_true(out[1].value == 0.9);
    mt_store_metrics_free(out);
}

/* What a scan callback saw. */
typedef struct scan_log {
    size_t n;
    char names[16][64];
    uint64_t steps[16];
    double values[16];
    size_t stop_after; /* return stop_code once n reaches it (0 = never) */
    mt_code stop_code;
} scan_log;

static mt_code log_point(void *arg, const mt_store_metric_ref *p)
{
    scan_log *l = arg;
    if (l->n < 16) {
        snprintf(l->names[l->n], sizeof(l->names[0]), "%s", p->name);
        l->steps[l->n] = p->step;
        l->values[l->n] = p->value;
    }
    l->n++;
    return l->stop_after != 0 && l->n >= l->stop_after ? l->stop_code : MT_OK;
}

/* Four names at interleaved steps, inserted out of order. */
static void add_series(mt_store *s, const char *job)
{
    mt_store_metric in[9];
    mt_err err = MT_ERR_INIT;

    in[0] = pt(5, "loss", 0.5);
    in[1] = pt(1, "loss", 0.1);
    in[2] = pt(3, "loss", 0.3);
    in[3] = pt(2, "accuracy", 0.2);
    in[4] = pt(4, "accuracy", 0.4);
    in[5] = pt(1, "eval_loss", 1.1);
    in[6] = pt(5, "eval_loss", 1.5);
    in[7] = pt(6, "zeta", NAN);
    in[8] = pt(2, "loss", 0.2);
    if (mt_store_metrics_insert(s, job, in, 9, &err) != MT_OK)
        fail_msg("insert: %s", err.msg);
}

static void test_store_metrics_scan_series_by_name_then_step(void **state)
{
    tctx *t = *state;
    char job[32];
    scan_log l;
    mt_err err = MT_ERR_INIT;

    add_job(t->s, job);
    add_series(t->s, job);
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, NULL, 0, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 9);
    const char *names[] = {"accuracy", "accuracy", "eval_loss", "eval_loss", "loss",
                           "loss",     "loss",     "loss",      "zeta"};
    const uint64_t steps[] = {2, 4, 1, 5, 1, 2, 3, 5, 6};
    for (size_t i = 0; i < 9; i++) {
        assert_string_equal(l.names[i], names[i]);
        assert_int_equal(l.steps[i], steps[i]);
    }
    assert_true(l.values[6] == 0.3);
    assert_true(isnan(l.values[8])); /* NaN comes back as NaN */
}

static void test_store_metrics_scan_filters_names_and_since_step(void **state)
{
    tctx *t = *state;
    char job[32];
    scan_log l;
    mt_err err = MT_ERR_INIT;
    /* unsorted, a duplicate, a NULL entry and an unknown name */
    const char *want[] = {"loss", "nope", NULL, "accuracy", "loss"};

    add_job(t->s, job);
    add_series(t->s, job);
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 3, want, 5, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.names[0], "accuracy");
    assert_int_equal(l.steps[0], 4);
    assert_string_equal(l.names[1], "loss");
    assert_int_equal(l.steps[1], 3);
    assert_int_equal(l.steps[2], 5);
    /* since_step is inclusive; past the end gives nothing */
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 6, NULL, 0, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.names[0], "zeta");
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 7, NULL, 0, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 0);
    /* at most `limit` per series, the lowest steps */
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, NULL, 0, 1, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.names[2], "loss");
    assert_int_equal(l.steps[2], 1);
}

static void test_store_metrics_scan_empty_unknown_stop_and_errors(void **state)
{
    tctx *t = *state;
    char job[32], other[32];
    scan_log l;
    mt_err err = MT_ERR_INIT;
    const char *want[] = {"loss"};

    add_job(t->s, job);
    add_job(t->s, other);
    add_series(t->s, job);
    memset(&l, 0, sizeof(l));
    /* a job without points and an unknown job: OK, no calls */
    assert_int_equal(mt_store_metrics_scan(t->s, other, 0, NULL, 0, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(mt_store_metrics_scan(t->s, "job-000404", 0, want, 1, 0, log_point, &l, &err),
                     MT_OK);
    assert_int_equal(l.n, 0);
    /* the callback's code stops the scan and comes back */
    l.stop_after = 2;
    l.stop_code = MT_CANCELLED;
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, NULL, 0, 0, log_point, &l, &err),
                     MT_CANCELLED);
    assert_int_equal(l.n, 2);
    /* the store is usable after the stop (statements were reset) */
    memset(&l, 0, sizeof(l));
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, want, 1, 0, log_point, &l, &err), MT_OK);
    assert_int_equal(l.n, 4);
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, NULL, 2, 0, log_point, &l, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_metrics_scan(t->s, job, 0, NULL, 0, 0, NULL, &l, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_metrics_scan(t->s, NULL, 0, NULL, 0, 0, log_point, &l, &err),
                     MT_INVALID_ARGUMENT);
}

/* The array query merges the series back: step then name; limit keeps the lowest steps. */
static void test_store_metrics_query_limit_merges_by_step(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    add_series(t->s, job);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 0, 5, &out, &n, &err), MT_OK);
    assert_int_equal(n, 5);
    const uint64_t steps[] = {1, 1, 2, 2, 3};
    const char *names[] = {"eval_loss", "loss", "accuracy", "loss", "loss"};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].step, steps[i]);
        assert_string_equal(out[i].name, names[i]);
    }
    mt_store_metrics_free(out);
    assert_int_equal(mt_store_metrics_query(t->s, job, 5, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(out[0].name, "eval_loss");
    assert_string_equal(out[1].name, "loss");
    assert_string_equal(out[2].name, "zeta");
    mt_store_metrics_free(out);
}

/* A version-4 database (metrics clustered by step) is rebuilt clustered by name on open,
 * keeping every point, its latest values and the foreign key; upserts still replace. */
static void test_store_metrics_migrate_v4_reclusters(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric *out = NULL, redo;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    char sql[1400];

    add_job(t->s, job);
    mt_store_close(t->s);
    t->s = NULL;
    /* the version-4 metrics table, as meshtrain shipped it, with points in it */
    snprintf(sql, sizeof(sql),
             "DROP TABLE metrics;"
             "CREATE TABLE metrics (job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
             " step INTEGER NOT NULL, name TEXT NOT NULL, epoch INTEGER NOT NULL DEFAULT 0,"
             " value REAL, time_ms INTEGER NOT NULL,"
             " PRIMARY KEY (job_id, step, name)) WITHOUT ROWID;"
             "INSERT INTO metrics VALUES ('%s', 1, 'loss', 0, 0.9, 11), ('%s', 1, 'acc', 0, 0.1,"
             " 11), ('%s', 2, 'loss', 0, 0.8, 12), ('%s', 3, 'acc', 1, NULL, 13);"
             "INSERT INTO metrics_latest VALUES ('%s', 'loss', 2, 0, 0.8, 12),"
             " ('%s', 'acc', 3, 1, NULL, 13);"
             "DROP INDEX jobs_by_request; ALTER TABLE jobs DROP COLUMN request_id;"
             "ALTER TABLE jobs DROP COLUMN mesh; ALTER TABLE jobs DROP COLUMN devices;"
             "ALTER TABLE jobs DROP COLUMN diagnosis;"
             "DROP TABLE job_logs; DROP TABLE job_digests;"
             "ALTER TABLE placements DROP COLUMN task_state;"
             "DELETE FROM schema_migrations WHERE version >= 5; PRAGMA user_version = 4;",
             job, job, job, job, job, job);
    assert_int_equal(store_raw_exec(t->f.path, sql), SQLITE_OK);
    assert_int_equal(mt_store_open(t->f.path, &t->s, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "PRAGMA user_version"), MT_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM schema_migrations"),
                     MT_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM sqlite_schema WHERE"
                                              " name='metrics' AND sql LIKE"
                                              " '%PRIMARY KEY (job_id, name, step)%'"),
                     1);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM sqlite_schema WHERE"
                                              " name='metrics_v5'"),
                     0);
    assert_int_equal(store_raw_int(t->f.path,
                                   "SELECT count(*) FROM pragma_foreign_key_list('metrics')"
                                   " WHERE \"table\"='jobs' AND on_delete='CASCADE'"),
                     1);
    assert_int_equal(mt_store_metrics_query(t->s, job, 0, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    assert_string_equal(out[0].name, "acc");
    assert_string_equal(out[1].name, "loss");
    assert_int_equal(out[3].step, 3);
    assert_true(isnan(out[3].value));
    assert_int_equal(out[3].epoch, 1);
    assert_int_equal(out[3].time_ms, 13);
    mt_store_metrics_free(out);
    /* a redone step replaces the migrated point */
    redo = pt(2, "loss", 0.7);
    assert_int_equal(mt_store_metrics_insert(t->s, job, &redo, 1, &err), MT_OK);
    assert_int_equal(mt_store_metrics_query(t->s, job, 2, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "loss");
    assert_true(out[0].value == 0.7);
    mt_store_metrics_free(out);
    /* reopening is a no-op */
    mt_store_close(t->s);
    t->s = NULL;
    assert_int_equal(mt_store_open(t->f.path, &t->s, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM metrics"), 4);
}

/* Run the query with allocation k failing for k = 0, 1, ... until it succeeds; every failure
 * must be RESOURCE_EXHAUSTED with nothing returned. Returns the allocations it needed. */
static long query_failing_allocs(mt_store *s, const char *job, uint64_t since,
                                 const char *const *names, size_t n_names, size_t limit,
                                 mt_store_metric **out, size_t *n)
{
    mt_err err = MT_ERR_INIT;
    long k;

    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        mt_code rc = mt_store_metrics_query(s, job, since, names, n_names, limit, out, n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            return k;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(*out);
        assert_int_equal(*n, 0);
    }
}

static void test_store_metrics_query_alloc_failure(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[100], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    mt_code rc;
    long k;

    add_job(t->s, job);
    for (int i = 0; i < 100; i++)
        in[i] = pt((uint64_t)i, i % 2 ? "loss" : "acc", i);
    assert_int_equal(mt_store_metrics_insert(t->s, job, in, 100, &err), MT_OK);
    k = query_failing_allocs(t->s, job, 0, NULL, 0, 0, &out, &n);
    assert_true(k > 1);
    assert_int_equal(n, 100);
    mt_store_metrics_free(out);
    /* with a names filter (its sorted copy is allocated too) and a limit (merge buffers) */
    const char *want[] = {"loss", "acc"};
    k = query_failing_allocs(t->s, job, 10, want, 2, 7, &out, &n);
    assert_true(k > 2);
    assert_int_equal(n, 7);
    assert_int_equal(out[0].step, 10);
    assert_int_equal(out[6].step, 16);
    mt_store_metrics_free(out);
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_metrics_latest(t->s, job, &out, &n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(out);
    }
    assert_int_equal(n, 2);
    mt_store_metrics_free(out);
}

typedef struct reader_arg {
    const char *path;
    const char *job;
    _Atomic int stop; /* set by the writer when done */
    size_t queries;   /* queries run */
    size_t last_n;    /* points seen by the last query */
    int monotonic;    /* every query saw at least as many points as the one before */
    mt_code failure;  /* first non-OK code */
    char msg[MT_ERR_MSG_SIZE];
} reader_arg;

/* A pool thread's bulk reads on its own read-only connection. */
static void *reader_main(void *p)
{
    reader_arg *a = p;
    mt_store *ro = NULL;
    mt_err err = MT_ERR_INIT;

    a->monotonic = 1;
    a->failure = mt_store_open_readonly(a->path, &ro, &err);
    while (a->failure == MT_OK && !atomic_load(&a->stop)) {
        mt_store_metric *out = NULL;
        size_t n = 0;
        a->failure = mt_store_metrics_query(ro, a->job, 0, NULL, 0, 0, &out, &n, &err);
        mt_store_metrics_free(out);
        if (n < a->last_n)
            a->monotonic = 0;
        a->last_n = n;
        a->queries++;
    }
    if (a->failure != MT_OK)
        snprintf(a->msg, sizeof(a->msg), "%s", err.msg);
    mt_store_close(ro);
    return NULL;
}

static void test_store_readonly_thread_reads_while_loop_writes(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_metric in[50];
    mt_err err = MT_ERR_INIT;
    reader_arg a;
    pthread_t th;

    add_job(t->s, job);
    memset(&a, 0, sizeof(a));
    a.path = t->f.path;
    a.job = job;
    assert_int_equal(pthread_create(&th, NULL, reader_main, &a), 0);
    for (int b = 0; b < 40; b++) {
        for (int i = 0; i < 50; i++)
            in[i] = pt((uint64_t)(b * 50 + i), "loss", i);
        assert_int_equal(mt_store_metrics_insert(t->s, job, in, 50, &err), MT_OK);
    }
    atomic_store(&a.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.failure != MT_OK)
        fail_msg("reader: %s", a.msg);
    assert_true(a.queries > 0);
    assert_true(a.monotonic);
    assert_true(a.last_n <= 2000);
}

/* ------------------------------------------------------------------ checkpoints */

static mt_store_checkpoint ck(uint64_t step)
{
    mt_store_checkpoint c;
    memset(&c, 0, sizeof(c));
    c.step = step;
    snprintf(c.location, sizeof(c.location), "/state/ckpt/step-%llu.mtc", (unsigned long long)step);
    snprintf(c.checksum, sizeof(c.checksum), "crc32:%08llx", (unsigned long long)step);
    c.size_bytes = 1000 + step;
    c.complete = true; /* ignored by insert */
    c.time_ms = (int64_t)step;
    return c;
}

static void test_store_checkpoint_lifecycle(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_checkpoint c = ck(100), got, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    assert_int_equal(mt_store_checkpoint_latest(t->s, job, &got, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_get(t->s, job, 100, &got, &err), MT_OK);
    assert_false(got.complete);
    assert_string_equal(got.location, "/state/ckpt/step-100.mtc");
    assert_int_equal(mt_store_checkpoint_latest(t->s, job, &got, &err), MT_NOT_FOUND);
    /* a retried upload replaces the incomplete record */
    c.size_bytes = 7;
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_OK);
    assert_int_equal(
        mt_store_checkpoint_complete(t->s, job, 100, 4096, "crc32:deadbeef", 555, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_latest(t->s, job, &got, &err), MT_OK);
    assert_int_equal(got.step, 100);
    assert_true(got.complete);
    assert_int_equal(got.size_bytes, 4096);
    assert_string_equal(got.checksum, "crc32:deadbeef");
    assert_int_equal(got.time_ms, 555);
    /* complete ones cannot be overwritten */
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_ALREADY_EXISTS);
    /* NULL checksum keeps the stored one */
    c = ck(200);
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_complete(t->s, job, 200, 1, NULL, 600, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_latest(t->s, job, &got, &err), MT_OK);
    assert_int_equal(got.step, 200);
    assert_string_equal(got.checksum, "crc32:000000c8");
    c = ck(300);
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_latest(t->s, job, &got, &err), MT_OK);
    assert_int_equal(got.step, 200); /* 300 is not complete */
    assert_int_equal(mt_store_checkpoint_list(t->s, job, &list, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_int_equal(list[0].step, 100);
    assert_true(list[1].complete);
    assert_false(list[2].complete);
    mt_store_checkpoints_free(list);
}

static void test_store_checkpoint_errors(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_checkpoint c = ck(1), got, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    assert_int_equal(mt_store_checkpoint_insert(t->s, "job-000404", &c, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_checkpoint_complete(t->s, job, 1, 1, NULL, 1, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_checkpoint_get(t->s, job, 1, &got, &err), MT_NOT_FOUND);
    c.location[0] = '\0';
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_INVALID_ARGUMENT);
    c = ck(1);
    memset(c.checksum, 'c', sizeof(c.checksum));
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_checkpoint_list(t->s, "job-000404", &list, &n, &err), MT_OK);
    assert_int_equal(n, 0);
}

/* Insert steps (complete unless listed in `incomplete`). */
static void add_ckpts(mt_store *s, const char *job, const uint64_t *steps, size_t n,
                      uint64_t incomplete)
{
    mt_err err = MT_ERR_INIT;
    for (size_t i = 0; i < n; i++) {
        mt_store_checkpoint c = ck(steps[i]);
        assert_int_equal(mt_store_checkpoint_insert(s, job, &c, &err), MT_OK);
        if (steps[i] != incomplete)
            assert_int_equal(mt_store_checkpoint_complete(s, job, steps[i], 1, NULL, 1, &err),
                             MT_OK);
    }
}

static void test_store_checkpoint_gc_keeps_newest(void **state)
{
    tctx *t = *state;
    char job[32], other[32];
    const uint64_t steps[] = {10, 20, 25, 30, 40, 50};
    char **locs = NULL;
    mt_store_checkpoint *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    add_job(t->s, other);
    add_ckpts(t->s, job, steps, 6, 25); /* 25 is an abandoned upload */
    add_ckpts(t->s, other, steps, 2, 0);
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 2, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    assert_string_equal(locs[0], "/state/ckpt/step-10.mtc");
    assert_string_equal(locs[1], "/state/ckpt/step-20.mtc");
    assert_string_equal(locs[2], "/state/ckpt/step-25.mtc");
    assert_string_equal(locs[3], "/state/ckpt/step-30.mtc");
    mt_store_strings_free(locs, n);
    assert_int_equal(mt_store_checkpoint_list(t->s, job, &list, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].step, 40);
    assert_int_equal(list[1].step, 50);
    mt_store_checkpoints_free(list);
    /* the other job is untouched */
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM checkpoints"), 4);
    /* nothing more to do */
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 2, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(locs);
    mt_store_strings_free(NULL, 0);
}

/* keep-N spares the best checkpoint: the step of the job's latest "best_step" point */
static void test_store_checkpoint_gc_keeps_best(void **state)
{
    tctx *t = *state;
    char job[32];
    const uint64_t steps[] = {10, 20, 30, 40, 50, 60};
    mt_store_metric best = {.step = 20, .name = "best_step", .value = 20.0, .time_ms = 1};
    mt_store_checkpoint *list = NULL;
    char **locs = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    add_ckpts(t->s, job, steps, 5, 0);
    assert_int_equal(mt_store_metrics_insert(t->s, job, &best, 1, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 1, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 3); /* 10, 30, 40: not the best 20 nor the newest 50 */
    assert_string_equal(locs[0], "/state/ckpt/step-10.mtc");
    assert_string_equal(locs[1], "/state/ckpt/step-30.mtc");
    assert_string_equal(locs[2], "/state/ckpt/step-40.mtc");
    mt_store_strings_free(locs, n);
    /* a later best: the old best goes, the new one stays however many come after it */
    best.step = 50, best.value = 50.0;
    assert_int_equal(mt_store_metrics_insert(t->s, job, &best, 1, &err), MT_OK);
    add_ckpts(t->s, job, steps + 5, 1, 0);
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 1, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(locs[0], "/state/ckpt/step-20.mtc");
    mt_store_strings_free(locs, n);
    assert_int_equal(mt_store_checkpoint_list(t->s, job, &list, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].step, 50);
    assert_int_equal(list[1].step, 60);
    mt_store_checkpoints_free(list);
    /* keep 0 (the job's deletion) takes the best one too */
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 0, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    mt_store_strings_free(locs, n);
}

static void test_store_checkpoint_gc_keeps_uploads_in_progress(void **state)
{
    tctx *t = *state;
    char job[32];
    const uint64_t steps[] = {10, 20};
    char **locs = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    /* only an incomplete one: keep >= 1 deletes nothing */
    add_ckpts(t->s, job, steps, 1, 10);
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 1, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    /* a newer incomplete than the newest complete one is kept */
    mt_store_checkpoint c = ck(30);
    add_ckpts(t->s, job, steps + 1, 1, 0);
    assert_int_equal(mt_store_checkpoint_insert(t->s, job, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 1, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 1); /* the incomplete 10, older than the kept complete 20 */
    assert_string_equal(locs[0], "/state/ckpt/step-10.mtc");
    mt_store_strings_free(locs, n);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM checkpoints"), 2);
    /* keep 0 deletes everything */
    assert_int_equal(mt_store_checkpoint_gc(t->s, job, 0, &locs, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    mt_store_strings_free(locs, n);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM checkpoints"), 0);
}

static void test_store_checkpoint_gc_alloc_failure_deletes_nothing(void **state)
{
    tctx *t = *state;
    char job[32];
    uint64_t steps[40];
    char **locs = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    mt_code rc;
    long k;

    add_job(t->s, job);
    for (int i = 0; i < 40; i++)
        steps[i] = (uint64_t)(i + 1) * 10;
    add_ckpts(t->s, job, steps, 40, 0);
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_checkpoint_gc(t->s, job, 3, &locs, &n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(locs);
        assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM checkpoints"), 40);
    }
    assert_true(k > 3);
    assert_int_equal(n, 37);
    mt_store_strings_free(locs, n);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM checkpoints"), 3);
}

static void test_store_checkpoint_list_alloc_failure(void **state)
{
    tctx *t = *state;
    char job[32];
    uint64_t steps[30];
    mt_store_checkpoint *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    for (int i = 0; i < 30; i++)
        steps[i] = (uint64_t)i;
    add_ckpts(t->s, job, steps, 30, 7);
    STORE_ALLOC_TORTURE(mt_store_checkpoint_list(t->s, job, &list, &n, &err), assert_null(list));
    assert_int_equal(n, 30);
    assert_false(list[7].complete);
    assert_true(list[8].complete);
    mt_store_checkpoints_free(list);
}

/* A size-capped database: writes past the cap are RESOURCE_EXHAUSTED, reads keep working,
 * and a transaction SQLite had to roll back is reported as ABORTED, not half-committed. */
static void test_store_full_database_is_resource_exhausted(void **state)
{
    tctx *t = *state;
    char path[PATH_MAX + 16], job[32];
    mt_store_options o = MT_STORE_OPTIONS_DEFAULTS;
    mt_store *s = NULL;
    mt_store_metric in[100], *out = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc = MT_OK;
    size_t n = 0;
    uint64_t step = 0;

    snprintf(path, sizeof(path), "%s/small.db", t->f.dir);
    o.max_size_bytes = 256 * 1024;
    assert_int_equal(mt_store_open_opts(path, &o, &s, &err), MT_OK);
    add_job(s, job);
    for (int b = 0; b < 1000 && rc == MT_OK; b++) {
        for (int i = 0; i < 100; i++)
            in[i] = pt(step++, "loss", i);
        rc = mt_store_metrics_insert(s, job, in, 100, &err);
    }
    assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "full"));
    /* the failed batch left nothing; earlier batches are intact and readable */
    assert_int_equal(mt_store_metrics_query(s, job, 0, NULL, 0, 0, &out, &n, &err), MT_OK);
    assert_true(n > 0 && n % 100 == 0);
    assert_int_equal(out[n - 1].step, n - 1);
    mt_store_metrics_free(out);

    /* inside an explicit transaction */
    assert_int_equal(mt_store_tx_begin(s, &err), MT_OK);
    rc = mt_store_metrics_insert(s, job, in, 100, &err);
    assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
    /* SQLite 3.40 rolls the whole transaction back on SQLITE_FULL: every later write of the
     * transaction is refused rather than committed on its own */
    assert_int_equal(mt_store_job_set_step(s, job, 5, 5, &err), MT_ABORTED);
    assert_non_null(strstr(err.msg, "rolled back"));
    assert_int_equal(mt_store_metrics_truncate(s, job, 0, NULL, &err), MT_ABORTED);
    assert_int_equal(mt_store_tx_commit(s, &err), MT_ABORTED);
    assert_int_equal(mt_store_tx_rollback(s, &err), MT_FAILED_PRECONDITION); /* tx is over */
    /* and the store works again afterwards (a write that fits) */
    assert_int_equal(mt_store_job_set_step(s, job, 6, 6, &err), MT_OK);
    mt_store_job got;
    assert_int_equal(mt_store_job_get(s, job, &got, &err), MT_OK);
    assert_int_equal(got.step, 6);
    mt_store_job_fini(&got);
    mt_store_close(s);
}

/* ------------------------------------------------------------------ worker log lines */

static mt_store_log_line logline(uint64_t seq, const char *level, const char *text)
{
    mt_store_log_line l;
    memset(&l, 0, sizeof(l));
    l.seq = seq;
    l.time_ms = 5000 + (int64_t)seq;
    snprintf(l.level, sizeof(l.level), "%s", level);
    snprintf(l.text, sizeof(l.text), "%s", text);
    return l;
}

static void test_store_job_log_order_dedupe_page(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_log_line in[3], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    in[0] = logline(1, "info", "w1 one");
    in[1] = logline(2, "warn", "w1 two");
    in[2] = logline(3, "error", "w1 three");
    assert_int_equal(mt_store_job_log_insert(t->s, job, "w1", 1, in, 2, &err), MT_OK);
    /* the same report again (its reply was lost) plus a new line: stored once each */
    assert_int_equal(mt_store_job_log_insert(t->s, job, "w1", 1, in, 3, &err), MT_OK);
    /* another worker's seq 1 and a later attempt's seq 1 are other lines */
    assert_int_equal(mt_store_job_log_insert(t->s, job, "w2", 1, in, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_log_insert(t->s, job, "w1", 2, in, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_log_page(t->s, job, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 5);
    assert_string_equal(out[0].text, "w1 one");
    assert_string_equal(out[1].level, "warn");
    assert_string_equal(out[2].text, "w1 three");
    assert_string_equal(out[3].worker_id, "w2");
    assert_int_equal(out[4].attempt, 2);
    assert_int_equal(out[4].seq, 1);
    assert_int_equal(out[2].time_ms, 5003);
    for (size_t i = 1; i < n; i++)
        assert_true(out[i].id > out[i - 1].id);
    int64_t after = out[1].id, last = out[4].id;
    mt_store_job_log_free(out);
    assert_int_equal(mt_store_job_log_page(t->s, job, after, 2, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].text, "w1 three");
    mt_store_job_log_free(out);
    assert_int_equal(mt_store_job_log_page(t->s, job, last, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(out);
    assert_int_equal(mt_store_job_log_page(t->s, "job-nope", 0, 0, &out, &n, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_job_log_insert(t->s, "job-nope", "w1", 1, in, 1, &err), MT_NOT_FOUND);
}

static void test_store_job_log_keeps_newest(void **state)
{
    tctx *t = *state;
    char job[32];
    enum { BATCH = 1000 };
    mt_store_log_line *in = mt_calloc(BATCH, sizeof(*in)), *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0, total = 0;

    assert_non_null(in);
    add_job(t->s, job);
    for (uint64_t b = 0; total < MT_STORE_JOB_LOG_KEEP + 1500; b++) {
        for (size_t i = 0; i < BATCH; i++) {
            char text[32];
            snprintf(text, sizeof(text), "line %zu", total + i + 1);
            in[i] = logline(total + i + 1, "info", text);
        }
        assert_int_equal(mt_store_job_log_insert(t->s, job, "w1", 1, in, BATCH, &err), MT_OK);
        total += BATCH;
    }
    assert_int_equal(mt_store_job_log_page(t->s, job, 0, 10000, &out, &n, &err), MT_OK);
    assert_int_equal(n, MT_STORE_JOB_LOG_KEEP);
    assert_int_equal(out[n - 1].seq, total); /* the newest kept, the oldest gone */
    assert_int_equal(out[0].seq, total - MT_STORE_JOB_LOG_KEEP + 1);
    mt_store_job_log_free(out);
    mt_free(in);
}

static mt_store_digest sdigest(uint64_t step, char hexdigit)
{
    mt_store_digest d = {.step = step, .time_ms = 7000 + (int64_t)step};
    memset(d.digest, hexdigit, 64);
    return d;
}

static void test_store_job_digests_replace_and_errors(void **state)
{
    tctx *t = *state;
    char job[32];
    mt_store_digest in[3], *out = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, job);
    assert_int_equal(mt_store_job_digests(t->s, job, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(out);
    mt_store_digest none;
    bool found0 = true;
    assert_int_equal(mt_store_job_digest_latest(t->s, job, &none, &found0, &err), MT_OK);
    assert_false(found0);
    assert_int_equal(mt_store_job_digest_latest(t->s, "job-nope", &none, &found0, &err),
                     MT_NOT_FOUND);
    in[0] = sdigest(10, 'a');
    in[1] = sdigest(5, 'b');
    assert_int_equal(mt_store_job_digests_put(t->s, job, in, 2, &err), MT_OK);
    /* step 10 redone after a restart: the newest digest replaces it */
    in[2] = sdigest(10, 'c');
    assert_int_equal(mt_store_job_digests_put(t->s, job, &in[2], 1, &err), MT_OK);
    assert_int_equal(mt_store_job_digests(t->s, job, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].step, 5);
    assert_int_equal(out[0].digest[0], 'b');
    assert_int_equal(out[0].time_ms, 7005);
    assert_int_equal(out[1].step, 10);
    assert_int_equal(out[1].digest[63], 'c');
    assert_int_equal(strlen(out[1].digest), 64);
    mt_free(out);
    /* a page from step 6, and the latest */
    assert_int_equal(mt_store_job_digests(t->s, job, 6, 1, &out, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].step, 10);
    mt_free(out);
    mt_store_digest last;
    bool found = false;
    assert_int_equal(mt_store_job_digest_latest(t->s, job, &last, &found, &err), MT_OK);
    assert_true(found);
    assert_int_equal(last.step, 10);
    assert_int_equal(last.digest[0], 'c');
    /* not 64 lower-case hex digits, a step out of range: refused, nothing stored */
    in[0] = sdigest(20, 'A');
    assert_int_equal(mt_store_job_digests_put(t->s, job, in, 1, &err), MT_INVALID_ARGUMENT);
    in[0] = sdigest(20, 'a');
    in[0].digest[63] = '\0';
    assert_int_equal(mt_store_job_digests_put(t->s, job, in, 1, &err), MT_INVALID_ARGUMENT);
    in[0] = sdigest(1ull << 63, 'a');
    assert_int_equal(mt_store_job_digests_put(t->s, job, in, 1, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_digests(t->s, job, 0, 0, &out, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    mt_free(out);
    assert_int_equal(mt_store_job_digests(t->s, "job-nope", 0, 0, &out, &n, &err), MT_NOT_FOUND);
    in[0] = sdigest(1, 'a');
    assert_int_equal(mt_store_job_digests_put(t->s, "job-nope", in, 1, &err), MT_NOT_FOUND);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, store_setup, store_teardown)
    const struct CMUnitTest tests[] = {
        T(test_store_metrics_insert_query_order),
        T(test_store_metrics_redone_steps_replace),
        T(test_store_metrics_nan_and_inf_kept),
        T(test_store_metrics_insert_errors_all_or_nothing),
        T(test_store_metrics_latest_per_name),
        T(test_store_metrics_latest_after_redo_truncate_many_names),
        T(test_store_metrics_migrate_v2_keeps_latest),
        T(test_store_metrics_scan_series_by_name_then_step),
        T(test_store_metrics_scan_filters_names_and_since_step),
        T(test_store_metrics_scan_empty_unknown_stop_and_errors),
        T(test_store_metrics_query_limit_merges_by_step),
        T(test_store_metrics_migrate_v4_reclusters),
        T(test_store_metrics_query_alloc_failure),
        T(test_store_readonly_thread_reads_while_loop_writes),
        T(test_store_checkpoint_lifecycle),
        T(test_store_checkpoint_errors),
        T(test_store_checkpoint_gc_keeps_newest),
        T(test_store_checkpoint_gc_keeps_best),
        T(test_store_checkpoint_gc_keeps_uploads_in_progress),
        T(test_store_checkpoint_gc_alloc_failure_deletes_nothing),
        T(test_store_checkpoint_list_alloc_failure),
        T(test_store_full_database_is_resource_exhausted),
        T(test_store_job_log_order_dedupe_page),
        T(test_store_job_log_keeps_newest),
        T(test_store_job_digests_replace_and_errors),
    };
#undef T
    return cmocka_run_group_tests_name("store_data", tests, NULL, NULL);
}
