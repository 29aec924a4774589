/* SPDX-License-Identifier: MIT */
/*
 * test_store_jobs.c — unit tests for the jobs part of storage/mt_store.h: insert,
 * get, list order and filters, transitions with their events, progress and
 * reason, placement. Each test on its own temporary database.
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_jobstate.h"
#include "storage/mt_store.h"
#include "store_test_util.h"

typedef store_tctx tctx;

/* Insert a job; returns its id in a static-free way through j. */
static void add_job(mt_store *s, mt_store_job *j, const char *name, int prio, int64_t now)
{
    mt_err err = MT_ERR_INIT;
    memset(j, 0, sizeof(*j));
    snprintf(j->name, sizeof(j->name), "%s", name);
    j->spec_json = (char *)"{\"model\":\"mlp\"}";
    j->priority = prio;
    j->total_steps = 100;
    if (mt_store_job_insert(s, j, now, &err) != MT_OK)
        fail_msg("insert %s: %s", name, err.msg);
}

static void test_store_job_insert_assigns_ids_and_event(void **state)
{
    tctx *t = *state;
    mt_store_job a, b, got;
    mt_store_job_event *ev = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &a, "first", 0, 1000);
    add_job(t->s, &b, "second", 0, 1001);
    assert_string_equal(a.job_id, "job-000001");
    assert_string_equal(b.job_id, "job-000002");
    assert_string_equal(a.state, "QUEUED");
    assert_int_equal(a.submitted_at_ms, 1000);
    assert_int_equal(mt_store_job_get(t->s, "job-000002", &got, &err), MT_OK);
    assert_string_equal(got.name, "second");
    assert_string_equal(got.state, "QUEUED");
    assert_string_equal(got.spec_json, "{\"model\":\"mlp\"}");
    assert_int_equal(got.total_steps, 100);
    assert_int_equal(got.submitted_at_ms, 1001);
    assert_int_equal(got.updated_at_ms, 1001);
    assert_int_equal(got.step, 0);
    assert_int_equal(got.restarts, 0);
    mt_store_job_fini(&got);
    assert_null(got.spec_json);
    mt_store_job_fini(NULL);
    assert_int_equal(mt_store_job_events(t->s, "job-000001", &ev, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ev[0].state, "QUEUED");
    assert_string_equal(ev[0].reason, "submitted");
    assert_int_equal(ev[0].time_ms, 1000);
    mt_store_job_events_free(ev);
}

static void test_store_job_insert_ids_survive_reopen(void **state)
{
    tctx *t = *state;
    mt_store_job a;
    add_job(t->s, &a, "one", 0, 1);
    mt_store_close(t->s);
    assert_int_equal(mt_store_open(t->f.path, &t->s, NULL), MT_OK);
    add_job(t->s, &a, "two", 0, 2);
    assert_string_equal(a.job_id, "job-000002");
}

/* A request id is unique: a second insert with it is ALREADY_EXISTS and stores nothing; the
 * job is found by it, also after a reopen; jobs without one never collide. */
static void test_store_job_request_id_unique_and_found(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_err err = MT_ERR_INIT;
    size_t counts[8];

    memset(&j, 0, sizeof(j));
    snprintf(j.name, sizeof(j.name), "keyed");
    j.spec_json = "{\"a\":1}";
    snprintf(j.request_id, sizeof(j.request_id), "req-1");
    assert_int_equal(mt_store_job_insert(t->s, &j, 10, &err), MT_OK);
    assert_string_equal(j.job_id, "job-000001");
    assert_int_equal(mt_store_job_insert(t->s, &j, 11, &err), MT_ALREADY_EXISTS);
    assert_string_equal(j.job_id, "");
    j.request_id[0] = '\0';
    assert_int_equal(mt_store_job_insert(t->s, &j, 12, &err), MT_OK);
    assert_int_equal(mt_store_job_insert(t->s, &j, 13, &err), MT_OK);
    assert_string_equal(j.job_id, "job-000003");
    mt_store_close(t->s);
    assert_int_equal(mt_store_open(t->f.path, &t->s, NULL), MT_OK);
    assert_int_equal(mt_store_job_by_request(t->s, "req-1", &got, &err), MT_OK);
    assert_string_equal(got.job_id, "job-000001");
    assert_string_equal(got.spec_json, "{\"a\":1}");
    mt_store_job_fini(&got);
    assert_int_equal(mt_store_job_by_request(t->s, "req-2", &got, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "req-2"));
    assert_int_equal(mt_store_job_by_request(t->s, "", &got, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_by_request(t->s, NULL, &got, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_counts(t->s, counts, &err), MT_OK);
    assert_int_equal(counts[MT_JOBSTATE_QUEUED], 3);
}

/* Pages follow the list's order (priority DESC, submission), resume after a cursor, filter by
 * state; cursors round-trip through text; bad input is INVALID_ARGUMENT. */
static void test_store_job_page_follows_list_order(void **state)
{
    tctx *t = *state;
    static const int prio[7] = {0, 2, 1, 2, 0, 1, 2};
    mt_store_job j, *all = NULL, *pg = NULL;
    mt_store_job_cursor cur, back;
    size_t n_all = 0, n = 0, seen = 0;
    mt_err err = MT_ERR_INIT;
    char text[32];
    unsigned mask;

    for (int i = 0; i < 7; i++)
        add_job(t->s, &j, "j", prio[i], 10 + i);
    assert_int_equal(
        mt_store_job_transition(t->s, "job-000004", "QUEUED", "CANCELLED", "x", 20, &err), MT_OK);
    assert_int_equal(mt_store_job_list(t->s, NULL, &all, &n_all, &err), MT_OK);
    assert_int_equal(n_all, 7);
    for (const mt_store_job_cursor *after = NULL; seen < n_all; after = &cur) {
        assert_int_equal(mt_store_job_page(t->s, NULL, after, 3, &pg, &n, &err), MT_OK);
        assert_true(n >= 1 && n <= 3);
        for (size_t i = 0; i < n; i++)
            assert_string_equal(pg[i].job_id, all[seen + i].job_id);
        seen += n;
        cur = mt_store_job_cursor_of(&pg[n - 1]);
        mt_store_job_cursor_format(&cur, text, sizeof(text));
        assert_int_equal(mt_store_job_cursor_parse(text, &back, &err), MT_OK);
        assert_int_equal(back.priority, cur.priority);
        assert_int_equal(back.seq, cur.seq);
        mt_store_job_list_free(pg, n);
    }
    assert_int_equal(mt_store_job_page(t->s, NULL, &cur, 3, &pg, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(mt_store_job_page(t->s, "CANCELLED", NULL, 5, &pg, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(pg[0].job_id, "job-000004");
    mt_store_job_list_free(pg, n);
    mt_store_job_list_free(all, n_all);
    assert_int_equal(mt_store_job_page(t->s, "BOGUS", NULL, 5, &pg, &n, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_page(t->s, NULL, NULL, 0, &pg, &n, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_cursor_parse("x", &back, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_cursor_parse("1.", &back, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_cursor_parse("-3.17", &back, &err), MT_OK);
    assert_int_equal(back.priority, -3);
    assert_int_equal(mt_jobstate_parse_list("QUEUED,CANCELLED", &mask, &err), MT_OK);
    assert_int_equal(mask, (1u << MT_JOBSTATE_QUEUED) | (1u << MT_JOBSTATE_CANCELLED));
    assert_int_equal(mt_jobstate_parse_list("", &mask, &err), MT_OK);
    assert_int_equal(mask, (1u << MT_JOBSTATE_COUNT) - 1);
    assert_int_equal(mt_jobstate_parse_list("QUEUED,NOPE", &mask, &err), MT_INVALID_ARGUMENT);
}

static void test_store_job_insert_rejects_bad_input(void **state)
{
    tctx *t = *state;
    mt_store_job j;
    mt_err err = MT_ERR_INIT;

    memset(&j, 0, sizeof(j));
    assert_int_equal(mt_store_job_insert(t->s, &j, 1, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "spec_json"));
    assert_int_equal(mt_store_job_insert(t->s, NULL, 1, &err), MT_INVALID_ARGUMENT);
    j.spec_json = (char *)"{}";
    memset(j.name, 'x', sizeof(j.name));
    assert_int_equal(mt_store_job_insert(t->s, &j, 1, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM jobs"), 0);
}

static void test_store_job_get_not_found(void **state)
{
    tctx *t = *state;
    mt_store_job got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_job_get(t->s, "job-999999", &got, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "job-999999"));
    assert_null(got.spec_json);
    assert_int_equal(mt_store_job_get(t->s, NULL, &got, &err), MT_INVALID_ARGUMENT);
}

static void test_store_job_list_priority_then_submission(void **state)
{
    tctx *t = *state;
    mt_store_job j, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &j, "low-1", 0, 1);  /* job-000001 */
    add_job(t->s, &j, "high-1", 5, 2); /* job-000002 */
    add_job(t->s, &j, "low-2", 0, 3);  /* job-000003 */
    add_job(t->s, &j, "high-2", 5, 4); /* job-000004 */
    add_job(t->s, &j, "urgent", 9, 5); /* job-000005 */
    assert_int_equal(mt_store_job_list(t->s, NULL, &list, &n, &err), MT_OK);
    assert_int_equal(n, 5);
    const char *want[] = {"urgent", "high-1", "high-2", "low-1", "low-2"};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(list[i].name, want[i]);
        assert_null(list[i].spec_json);
    }
    mt_store_job_list_free(list, n);
    mt_store_job_list_free(NULL, 0);

    assert_int_equal(
        mt_store_job_transition(t->s, "job-000002", "QUEUED", "SCHEDULED", "placed", 10, &err),
        MT_OK);
    assert_int_equal(
        mt_store_job_transition(t->s, "job-000003", NULL, "CANCELLED", "user", 11, &err), MT_OK);
    assert_int_equal(mt_store_job_list(t->s, "QUEUED", &list, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(list[0].name, "urgent");
    assert_string_equal(list[1].name, "high-2");
    assert_string_equal(list[2].name, "low-1");
    mt_store_job_list_free(list, n);
    assert_int_equal(mt_store_job_list(t->s, "SCHEDULED,CANCELLED", &list, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "high-1");
    assert_string_equal(list[1].name, "low-2");
    mt_store_job_list_free(list, n);
    assert_int_equal(mt_store_job_list(t->s, "RUNNING", &list, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(list);
    assert_int_equal(mt_store_job_list(t->s, "QUEUED,BOGUS", &list, &n, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "BOGUS"));
    assert_null(list);
}

static void test_store_job_list_alloc_failure(void **state)
{
    tctx *t = *state;
    mt_store_job j, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    mt_code rc;
    long k;

    for (int i = 0; i < 40; i++)
        add_job(t->s, &j, "j", i % 3, i);
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_job_list(t->s, NULL, &list, &n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(list);
        assert_int_equal(n, 0);
    }
    assert_true(k > 0);
    assert_int_equal(n, 40);
    mt_store_job_list_free(list, n);
}

static void test_store_job_transition_updates_row_and_events(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_store_job_event *ev = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &j, "life", 0, 100);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, "QUEUED", "SCHEDULED",
                                             "placed on 2 "
                                             "workers",
                                             110, &err),
                     MT_OK);
    assert_int_equal(
        mt_store_job_transition(t->s, j.job_id, "SCHEDULED", "RUNNING", NULL, 120, &err), MT_OK);
    assert_int_equal(mt_store_job_set_step(t->s, j.job_id, 412, 125, &err), MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, "RUNNING", "RESTARTING",
                                             "worker w-2 lost", 130, &err),
                     MT_OK);
    assert_int_equal(
        mt_store_job_transition(t->s, j.job_id, NULL, "SCHEDULED", "re-placed", 140, &err), MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "RUNNING", "", 150, &err),
                     MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "FAILED",
                                             "diverged: loss is "
                                             "NaN",
                                             160, &err),
                     MT_OK);
    assert_int_equal(mt_store_job_get(t->s, j.job_id, &got, &err), MT_OK);
    assert_string_equal(got.state, "FAILED");
    assert_string_equal(got.reason, "diverged: loss is NaN");
    assert_string_equal(got.error, "diverged: loss is NaN");
    assert_int_equal(got.restarts, 1);
    assert_int_equal(got.updated_at_ms, 160);
    assert_int_equal(got.submitted_at_ms, 100);
    mt_store_job_fini(&got);

    assert_int_equal(mt_store_job_events(t->s, j.job_id, &ev, &n, &err), MT_OK);
    const char *states[] = {"QUEUED",    "SCHEDULED", "RUNNING", "RESTARTING",
                            "SCHEDULED", "RUNNING",   "FAILED"};
    assert_int_equal(n, 7);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(ev[i].state, states[i]);
    assert_string_equal(ev[3].reason, "worker w-2 lost");
    assert_int_equal(ev[3].step, 412);
    assert_int_equal(ev[2].step, 0);
    assert_string_equal(ev[2].reason, "");
    assert_int_equal(ev[6].time_ms, 160);
    mt_store_job_events_free(ev);
}

static void test_store_job_transition_refusals(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_err err = MT_ERR_INIT;

    add_job(t->s, &j, "x", 0, 1);
    /* expected state mismatch */
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, "RUNNING", "SUCCEEDED", "", 2, &err),
                     MT_FAILED_PRECONDITION);
    assert_string_equal(err.msg, "job job-000001 is QUEUED, expected RUNNING");
    /* not allowed by the table */
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "SUCCEEDED", "", 2, &err),
                     MT_FAILED_PRECONDITION);
    assert_string_equal(err.msg, "job job-000001: QUEUED -> SUCCEEDED is not allowed");
    /* unknown names */
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "DONE", "", 2, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, "queued", "RUNNING", "", 2, &err),
                     MT_INVALID_ARGUMENT);
    /* unknown job */
    assert_int_equal(mt_store_job_transition(t->s, "job-424242", NULL, "CANCELLED", "", 2, &err),
                     MT_NOT_FOUND);
    assert_int_equal(mt_store_job_transition(t->s, NULL, NULL, "CANCELLED", "", 2, &err),
                     MT_INVALID_ARGUMENT);
    /* final states are final; CANCELLED twice is refused (the caller makes cancel idempotent) */
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "CANCELLED", "user", 3, &err),
                     MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "CANCELLED", "again", 4, &err),
                     MT_FAILED_PRECONDITION);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "QUEUED", "", 4, &err),
                     MT_FAILED_PRECONDITION);
    /* nothing changed by the refusals */
    assert_int_equal(mt_store_job_get(t->s, j.job_id, &got, &err), MT_OK);
    assert_string_equal(got.state, "CANCELLED");
    assert_string_equal(got.reason, "user");
    assert_string_equal(got.error, "");
    assert_int_equal(got.updated_at_ms, 3);
    mt_store_job_fini(&got);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM job_events"), 2);
}

static void test_store_job_counts_by_state(void **state)
{
    tctx *t = *state;
    mt_store_job a, b, c;
    mt_err err = MT_ERR_INIT;
    size_t counts[MT_JOBSTATE_COUNT];

    assert_int_equal(mt_store_job_counts(t->s, counts, &err), MT_OK);
    for (int i = 0; i < MT_JOBSTATE_COUNT; i++)
        assert_int_equal(counts[i], 0);
    add_job(t->s, &a, "a", 0, 1);
    add_job(t->s, &b, "b", 0, 1);
    add_job(t->s, &c, "c", 0, 1);
    assert_int_equal(mt_store_job_transition(t->s, c.job_id, NULL, "CANCELLED", "", 2, &err),
                     MT_OK);
    assert_int_equal(mt_store_job_counts(t->s, counts, &err), MT_OK);
    assert_int_equal(counts[MT_JOBSTATE_QUEUED], 2);
    assert_int_equal(counts[MT_JOBSTATE_CANCELLED], 1);
    assert_int_equal(counts[MT_JOBSTATE_RUNNING], 0);
    assert_int_equal(mt_store_job_counts(t->s, NULL, &err), MT_INVALID_ARGUMENT);
}

static void test_store_job_set_step_and_reason(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_err err = MT_ERR_INIT;

    add_job(t->s, &j, "x", 0, 1);
    assert_int_equal(mt_store_job_set_step(t->s, j.job_id, 42, 50, &err), MT_OK);
    assert_int_equal(
        mt_store_job_set_reason(t->s, j.job_id, "needs 8 devices, 4 registered", 60, &err), MT_OK);
    assert_int_equal(mt_store_job_get(t->s, j.job_id, &got, &err), MT_OK);
    assert_int_equal(got.step, 42);
    assert_string_equal(got.reason, "needs 8 devices, 4 registered");
    assert_int_equal(got.updated_at_ms, 60);
    assert_string_equal(got.state, "QUEUED");
    mt_store_job_fini(&got);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM job_events"), 1);
    assert_int_equal(mt_store_job_set_step(t->s, "job-777777", 1, 1, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_job_set_reason(t->s, "job-777777", "r", 1, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_job_set_reason(t->s, NULL, "r", 1, &err), MT_INVALID_ARGUMENT);
}

/* The summary of one spec for mt_store_job_summarise_old: counts its calls; "{}" is a spec
 * without a mesh (devices 0 leaves the row alone). */
static void fake_summarise(void *arg, const char *spec_json, char *mesh, size_t cap,
                           uint32_t *devices)
{
    (*(int *)arg)++;
    if (strcmp(spec_json, "{}") == 0)
        return;
    snprintf(mesh, cap, "batch=%d", (int)strlen(spec_json));
    *devices = (uint32_t)strlen(spec_json);
}

/* A database written by schema 7 (no mesh, devices or diagnosis columns) migrates; its jobs keep
 * their rows and get their mesh summary once; jobs inserted now carry theirs from the insert. */
static void test_store_job_schema7_migrates_and_summarises_once(void **state)
{
    tctx *t = *state;
    mt_store_job a, b, got;
    mt_err err = MT_ERR_INIT;
    size_t n = 9;
    int calls = 0;

    add_job(t->s, &a, "old", 0, 1);
    mt_store_close(t->s);
    t->s = NULL;
    /* what the schema-7 release wrote */
    assert_int_equal(store_raw_exec(t->f.path, "ALTER TABLE jobs DROP COLUMN mesh;"
                                               "ALTER TABLE jobs DROP COLUMN devices;"
                                               "ALTER TABLE jobs DROP COLUMN diagnosis;"
                                               "DROP TABLE job_logs; DROP TABLE job_digests;"
                                               "ALTER TABLE placements DROP COLUMN task_state;"
                                               "DELETE FROM schema_migrations WHERE version >= 8;"
                                               "PRAGMA user_version = 7;"),
                     SQLITE_OK);
    assert_int_equal(mt_store_open(t->f.path, &t->s, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "PRAGMA user_version"), MT_STORE_SCHEMA_VERSION);
    assert_int_equal(mt_store_job_get(t->s, a.job_id, &got, &err), MT_OK);
    assert_string_equal(got.name, "old");
    assert_string_equal(got.mesh, "");
    assert_int_equal(got.devices, 0);
    assert_string_equal(got.diagnosis, "");
    mt_store_job_fini(&got);
    /* a new job carries its summary from the insert */
    memset(&b, 0, sizeof(b));
    snprintf(b.name, sizeof(b.name), "new");
    snprintf(b.mesh, sizeof(b.mesh), "batch=2,model=2");
    b.devices = 4;
    b.spec_json = (char *)"{}";
    assert_int_equal(mt_store_job_insert(t->s, &b, 2, &err), MT_OK);
    /* the old row is summarised (one call), the new one is not looked at */
    assert_int_equal(mt_store_job_summarise_old(t->s, fake_summarise, &calls, &n, &err), MT_OK);
    assert_int_equal(calls, 1);
    assert_int_equal(n, 1);
    assert_int_equal(mt_store_job_get(t->s, a.job_id, &got, &err), MT_OK);
    assert_string_equal(got.mesh, "batch=15");
    assert_int_equal(got.devices, 15);
    mt_store_job_fini(&got);
    assert_int_equal(mt_store_job_get(t->s, b.job_id, &got, &err), MT_OK);
    assert_string_equal(got.mesh, "batch=2,model=2");
    assert_int_equal(got.devices, 4);
    mt_store_job_fini(&got);
    /* the next open parses nothing */
    assert_int_equal(mt_store_job_summarise_old(t->s, fake_summarise, &calls, &n, &err), MT_OK);
    assert_int_equal(calls, 1);
    assert_int_equal(n, 0);
}

/* The diagnosis is set and cleared by its setter; transitions to STALLED, RESTARTING and
 * SCHEDULED keep it, others clear it. */
static void test_store_job_diagnosis_kept_and_cleared(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_err err = MT_ERR_INIT;
    static const struct {
        const char *to;
        int kept;
    } steps[] = {{"SCHEDULED", 1}, {"RUNNING", 0}, {"STALLED", 1},  {"RESTARTING", 1},
                 {"SCHEDULED", 1}, {"RUNNING", 0}, {"SUCCEEDED", 0}};

    add_job(t->s, &j, "d", 0, 1);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        assert_int_equal(mt_store_job_set_diagnosis(t->s, j.job_id, "link w1<->w2: x", 5, &err),
                         MT_OK);
        assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, steps[i].to, "r", 6, &err),
                         MT_OK);
        assert_int_equal(mt_store_job_get(t->s, j.job_id, &got, &err), MT_OK);
        assert_string_equal(got.diagnosis, steps[i].kept ? "link w1<->w2: x" : "");
        mt_store_job_fini(&got);
    }
    assert_int_equal(mt_store_job_set_diagnosis(t->s, "job-777777", "x", 1, &err), MT_NOT_FOUND);
}

static void test_store_job_events_not_found(void **state)
{
    tctx *t = *state;
    mt_store_job_event *ev = (mt_store_job_event *)0x1;
    mt_err err = MT_ERR_INIT;
    size_t n = 3;

    assert_int_equal(mt_store_job_events(t->s, "job-000404", &ev, &n, &err), MT_NOT_FOUND);
    assert_null(ev);
    assert_int_equal(n, 0);
}

static void test_store_job_events_alloc_failure(void **state)
{
    tctx *t = *state;
    mt_store_job j;
    mt_store_job_event *ev = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    mt_code rc;
    long k;

    add_job(t->s, &j, "x", 0, 1);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "SCHEDULED", "", i, &err),
                         MT_OK);
        assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "QUEUED", "", i, &err),
                         MT_OK);
    }
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_job_events(t->s, j.job_id, &ev, &n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(ev);
    }
    assert_int_equal(n, 41);
    mt_store_job_events_free(ev);
}

static mt_store_placement place(uint32_t device, const char *worker, uint32_t local, uint32_t c0,
                                uint32_t c1)
{
    mt_store_placement p;
    memset(&p, 0, sizeof(p));
    p.device = device;
    snprintf(p.worker_id, sizeof(p.worker_id), "%s", worker);
    p.local_index = local;
    p.coords[0] = c0;
    p.coords[1] = c1;
    p.n_coords = 2;
    return p;
}

static void test_store_job_placement_roundtrip_and_replace(void **state)
{
    tctx *t = *state;
    mt_store_job j;
    mt_store_placement p[4], *got = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &j, "x", 0, 1);
    assert_int_equal(mt_store_job_placement(t->s, j.job_id, &got, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(got);
    p[0] = place(3, "w-b", 1, 1, 1);
    p[1] = place(0, "w-a", 0, 0, 0);
    p[2] = place(1, "w-a", 1, 0, 1);
    p[3] = place(2, "w-b", 0, 1, 0);
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p, 4, &err), MT_OK);
    assert_int_equal(mt_store_job_placement(t->s, j.job_id, &got, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(got[i].device, i);
    assert_string_equal(got[3].worker_id, "w-b");
    assert_int_equal(got[3].local_index, 1);
    assert_int_equal(got[3].n_coords, 2);
    assert_int_equal(got[3].coords[0], 1);
    assert_int_equal(got[3].coords[1], 1);
    assert_int_equal(got[1].coords[1], 1);
    mt_store_placement_free(got);

    /* replace with fewer, then clear */
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p + 1, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_placement(t->s, j.job_id, &got, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(got[0].worker_id, "w-a");
    mt_store_placement_free(got);
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, NULL, 0, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM placements"), 0);
}

static void test_store_job_placement_rejects_bad_input(void **state)
{
    tctx *t = *state;
    mt_store_job j;
    mt_store_placement p[2], *got = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &j, "x", 0, 1);
    p[0] = place(0, "w-a", 0, 0, 0);
    p[1] = place(0, "w-b", 0, 0, 1);
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p, 2, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "device 0 appears twice"));
    p[1] = place(1, "", 0, 0, 1);
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p, 2, &err), MT_INVALID_ARGUMENT);
    p[1] = place(1, "w-b", 0, 0, 1);
    p[1].n_coords = MT_STORE_MAX_MESH_DIMS + 1;
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p, 2, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, NULL, 2, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_job_set_placement(t->s, "job-000404", p, 1, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_job_placement(t->s, "job-000404", &got, &n, &err), MT_NOT_FOUND);
}

static void test_store_jobs_on_worker_skips_final(void **state)
{
    tctx *t = *state;
    mt_store_job a, b, c;
    mt_store_placement p[2];
    mt_store_job_id *ids = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    add_job(t->s, &a, "a", 0, 1);
    add_job(t->s, &b, "b", 0, 2);
    add_job(t->s, &c, "c", 0, 3);
    p[0] = place(0, "w-1", 0, 0, 0);
    p[1] = place(1, "w-2", 0, 0, 1);
    assert_int_equal(mt_store_job_set_placement(t->s, a.job_id, p, 2, &err), MT_OK);
    assert_int_equal(mt_store_job_set_placement(t->s, b.job_id, p + 1, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_set_placement(t->s, c.job_id, p, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, c.job_id, NULL, "CANCELLED", "", 4, &err),
                     MT_OK);
    assert_int_equal(mt_store_jobs_on_worker(t->s, "w-2", &ids, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0].id, a.job_id);
    assert_string_equal(ids[1].id, b.job_id);
    mt_store_job_ids_free(ids);
    assert_int_equal(mt_store_jobs_on_worker(t->s, "w-1", &ids, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0].id, a.job_id);
    mt_store_job_ids_free(ids);
    assert_int_equal(mt_store_jobs_on_worker(t->s, "w-none", &ids, &n, &err), MT_OK);
    assert_int_equal(n, 0);
    assert_null(ids);
}

static void test_store_job_get_placement_ids_alloc_failure(void **state)
{
    tctx *t = *state;
    mt_store_job j, got;
    mt_store_placement p[20], *pl = NULL;
    mt_store_job_id *ids = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;

    for (int i = 0; i < 20; i++) {
        add_job(t->s, &j, "x", 0, i);
        memset(&p[i], 0, sizeof(p[i]));
        p[i].device = (uint32_t)i;
        snprintf(p[i].worker_id, sizeof(p[i].worker_id), "w-1");
        assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, &p[i], 1, &err), MT_OK);
    }
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, p, 20, &err), MT_OK);
    STORE_ALLOC_TORTURE(mt_store_job_get(t->s, j.job_id, &got, &err), assert_null(got.spec_json));
    assert_string_equal(got.spec_json, "{\"model\":\"mlp\"}");
    mt_store_job_fini(&got);
    STORE_ALLOC_TORTURE(mt_store_job_placement(t->s, j.job_id, &pl, &n, &err), assert_null(pl));
    assert_int_equal(n, 20);
    mt_store_placement_free(pl);
    STORE_ALLOC_TORTURE(mt_store_jobs_on_worker(t->s, "w-1", &ids, &n, &err), assert_null(ids));
    assert_int_equal(n, 20);
    mt_store_job_ids_free(ids);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, store_setup, store_teardown)
    const struct CMUnitTest tests[] = {
        T(test_store_job_insert_assigns_ids_and_event),
        T(test_store_job_insert_ids_survive_reopen),
        T(test_store_job_insert_rejects_bad_input),
        T(test_store_job_request_id_unique_and_found),
        T(test_store_job_page_follows_list_order),
        T(test_store_job_get_not_found),
        T(test_store_job_list_priority_then_submission),
        T(test_store_job_list_alloc_failure),
        T(test_store_job_transition_updates_row_and_events),
        T(test_store_job_transition_refusals),
        T(test_store_job_counts_by_state),
        T(test_store_job_set_step_and_reason),
        T(test_store_job_events_not_found),
        T(test_store_job_schema7_migrates_and_summarises_once),
        T(test_store_job_diagnosis_kept_and_cleared),
        T(test_store_job_events_alloc_failure),
        T(test_store_job_placement_roundtrip_and_replace),
        T(test_store_job_placement_rejects_bad_input),
        T(test_store_jobs_on_worker_skips_final),
        T(test_store_job_get_placement_ids_alloc_failure),
    };
#undef T
    return cmocka_run_group_tests_name("store_jobs", tests, NULL, NULL);
}
