/* SPDX-License-Identifier: MIT */
/*
 * test_mcache.c — the coordinator's metric series cache (coordinator/mcache.h): loading on a
 * miss, hits, appends that extend, replace and insert points, points committed while a load
 * runs, invalidation, the memory cap (LRU eviction, a job too big to keep), idle eviction,
 * errors and allocation failures; and, end to end through the JSON API (coord_http__api),
 * that cached answers equal uncached ones byte for byte for random queries while random
 * points (new steps, replaced steps, filled gaps, new names, NaN) are stored, across a
 * "restart" that empties the cache.
 */
#include "mt_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/http_int.h"
#include "coordinator/mcache.h"
#include "storage/mt_store.h"
#include "store_test_util.h"

/* ------------------------------------------------------------ a fake store for the module */

typedef struct fake_pt {
    const char *name;
    uint64_t step;
    double value;
} fake_pt;

typedef struct fake_load {
    const fake_pt *pts; /* series by series in name order, each by step */
    size_t n;
    int calls;
    mt_code fail; /* returned instead of loading when not OK */
    /* called once in the middle of the load (a commit racing with it) */
    void (*during)(struct fake_load *f);
    coord_mcache *m;
} fake_load;

static mt_code fake_load_fn(void *arg, mt_store_metric_fn add, void *add_arg, mt_err *err)
{
    fake_load *f = arg;

    f->calls++;
    if (f->fail != MT_OK)
        return mt_err_set(err, f->fail, "fake load failed");
    for (size_t i = 0; i < f->n; i++) {
        mt_store_metric_ref r = {f->pts[i].step, 0, f->pts[i].name, f->pts[i].value, 0};
        mt_code rc = add(add_arg, &r);
        if (rc != MT_OK)
            return rc;
        if (i == f->n / 2 && f->during != NULL)
            f->during(f);
    }
    return MT_OK;
}

static const fake_pt three[] = {
    {"acc", 1, 0.5}, {"acc", 2, 0.75}, {"loss", 1, 2.5}, {"loss", 2, 1.25}, {"loss", 3, 1},
};

/* The answer for q, as a string the test frees; rc gets the code. */
static char *ask(coord_mcache *m, fake_load *f, const coord_mcache_query *q, mt_code *rc, int *hit)
{
    coord_buf b = {0};
    mt_err err = MT_ERR_INIT;

    *rc = coord_mcache_answer(m, "job-000001", q, fake_load_fn, f, &b, hit, &err);
    if (b.data == NULL)
        return mt_strdup("");
    return b.data;
}

static void append1(coord_mcache *m, const char *name, uint64_t step, double v)
{
    mt_store_metric_ref r = {step, 0, name, v, 0};
    coord_mcache_append(m, "job-000001", &r, 1);
}

static void test_mcache_new_rejects_zero_cap(void **state)
{
    coord_mcache *m = (coord_mcache *)1;
    mt_err err = MT_ERR_INIT;
    (void)state;

    assert_int_equal(coord_mcache_new(0, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(coord_mcache_new(1024, 0, NULL, &err), MT_INVALID_ARGUMENT);
    coord_mcache_free(NULL);
    coord_mcache_append(NULL, "job", NULL, 0); /* no cache: nothing happens */
    coord_mcache_invalidate(NULL, "job");
}

static void test_mcache_miss_loads_then_hits(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, NULL, NULL};
    coord_mcache_query q = {0};
    coord_mcache_stats st;
    mt_code rc;
    int hit = -1;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    char *a = ask(m, &f, &q, &rc, &hit);
    assert_int_equal(rc, MT_OK);
    assert_int_equal(hit, 0);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":0,\"count\":5,\"last_step\":3,"
                        "\"series\":{\"acc\":{\"step\":[1,2],\"value\":[0.5,0.75]},"
                        "\"loss\":{\"step\":[1,2,3],\"value\":[2.5,1.25,1]}}}\n");
    char *b = ask(m, &f, &q, &rc, &hit);
    assert_int_equal(rc, MT_OK);
    assert_int_equal(hit, 1);
    assert_string_equal(a, b);
    assert_int_equal(f.calls, 1); /* the second answer came from the cache */
    coord_mcache_get_stats(m, &st);
    assert_true(st.hits == 1 && st.misses == 1 && st.jobs == 1 && st.bytes > 0);
    mt_free(a);
    mt_free(b);
    coord_mcache_free(m);
}

static void test_mcache_query_filters(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, NULL, NULL};
    const char *names[] = {"loss", "nope", "loss"};
    coord_mcache_query q = {2, names, 3, 0, 0, NULL, 0};
    mt_code rc;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    char *a = ask(m, &f, &q, &rc, NULL);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":2,\"count\":2,\"last_step\":3,"
                        "\"series\":{\"loss\":{\"step\":[2,3],\"value\":[1.25,1]}}}\n");
    mt_free(a);
    coord_mcache_query lim = {0, NULL, 0, 3, 0, NULL, 0}; /* (1,acc) (1,loss) (2,acc) */
    a = ask(m, &f, &lim, &rc, NULL);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":0,\"count\":3,\"last_step\":2,"
                        "\"series\":{\"acc\":{\"step\":[1,2],\"value\":[0.5,0.75]},"
                        "\"loss\":{\"step\":[1],\"value\":[2.5]}}}\n");
    mt_free(a);
    coord_mcache_query mp = {0, names, 1, 0, 2, NULL, 0}; /* first and last */
    a = ask(m, &f, &mp, &rc, NULL);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":0,\"count\":2,\"last_step\":3,"
                        "\"series\":{\"loss\":{\"step\":[1,3],\"value\":[2.5,1]}}}\n");
    mt_free(a);
    coord_mcache_query none = {4, NULL, 0, 0, 0, NULL, 0};
    a = ask(m, &f, &none, &rc, NULL);
    assert_string_equal(a, "{\"job_id\":\"job-000001\",\"since_step\":4,\"count\":0,"
                           "\"last_step\":null,\"series\":{}}\n");
    mt_free(a);
    coord_mcache_free(m);
}

static void test_mcache_append_extends_replaces_inserts(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, NULL, NULL};
    coord_mcache_query q = {0};
    mt_code rc;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    append1(m, "loss", 9, 9); /* not cached yet: ignored */
    mt_free(ask(m, &f, &q, &rc, NULL));
    append1(m, "loss", 5, 0.125); /* new last step */
    append1(m, "loss", 2, 7);     /* redone step: replaces */
    append1(m, "loss", 4, 0.25);  /* a gap filled: inserted in order */
    append1(m, "acc", 1, NAN);    /* NaN as null */
    append1(m, "eval", 3, 1e-7);  /* a new series, printf's range */
    char *a = ask(m, &f, &q, &rc, NULL);
    assert_int_equal(rc, MT_OK);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":0,\"count\":8,\"last_step\":5,"
                        "\"series\":{\"acc\":{\"step\":[1,2],\"value\":[null,0.75]},"
                        "\"eval\":{\"step\":[3],\"value\":[1e-07]},"
                        "\"loss\":{\"step\":[1,2,3,4,5],\"value\":[2.5,7,1,0.25,0.125]}}}\n");
    assert_int_equal(f.calls, 1);
    mt_free(a);
    coord_mcache_free(m);
}

static void commit_during_load(fake_load *f)
{
    append1(f->m, "loss", 3, 42); /* already in the snapshot: replayed, replaces */
    append1(f->m, "loss", 4, 4);  /* committed after the snapshot: must appear */
}

static void test_mcache_points_committed_during_load(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, commit_during_load, NULL};
    coord_mcache_query q = {0};
    mt_code rc;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    f.m = m;
    char *a = ask(m, &f, &q, &rc, NULL);
    assert_int_equal(rc, MT_OK);
    assert_string_equal(a,
                        "{\"job_id\":\"job-000001\",\"since_step\":0,\"count\":6,\"last_step\":4,"
                        "\"series\":{\"acc\":{\"step\":[1,2],\"value\":[0.5,0.75]},"
                        "\"loss\":{\"step\":[1,2,3,4],\"value\":[2.5,1.25,42,4]}}}\n");
    mt_free(a);
    coord_mcache_free(m);
}

static void ask_while_loading(fake_load *f)
{
    coord_mcache_query q = {0};
    coord_buf b = {0};
    mt_err err = MT_ERR_INIT;

    assert_int_equal(coord_mcache_answer(f->m, "job-000001", &q, fake_load_fn, f, &b, NULL, &err),
                     MT_UNAVAILABLE);
    assert_null(b.data);                         /* out untouched */
    coord_mcache_invalidate(f->m, "job-000001"); /* the load in progress must be thrown away */
}

static void test_mcache_loading_unavailable_and_invalidated(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, ask_while_loading, NULL};
    coord_mcache_query q = {0};
    coord_mcache_stats st;
    mt_code rc;
    int hit;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    f.m = m;
    char *a = ask(m, &f, &q, &rc, NULL);
    assert_int_equal(rc, MT_UNAVAILABLE);
    assert_string_equal(a, "");
    mt_free(a);
    coord_mcache_get_stats(m, &st);
    assert_int_equal(st.jobs, 0);
    f.during = NULL;
    mt_free(ask(m, &f, &q, &rc, &hit));
    assert_true(rc == MT_OK && hit == 0);
    coord_mcache_invalidate(m, "job-000001");
    mt_free(ask(m, &f, &q, &rc, &hit));
    assert_true(rc == MT_OK && hit == 0 && f.calls == 3); /* loaded again */
    coord_mcache_get_stats(m, &st);
    assert_int_equal(st.invalidations, 1);
    coord_mcache_free(m);
}

static void test_mcache_load_error_returned(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_INTERNAL, NULL, NULL};
    coord_mcache_query q = {0};
    coord_mcache_stats st;
    mt_code rc;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 0, &m, NULL), MT_OK);
    mt_free(ask(m, &f, &q, &rc, NULL));
    assert_int_equal(rc, MT_INTERNAL);
    coord_mcache_get_stats(m, &st);
    assert_true(st.jobs == 0 && st.bytes == 0);
    coord_mcache_free(m);
}

static void test_mcache_cap_evicts_lru_and_big_jobs(void **state)
{
    coord_mcache *m = NULL;
    fake_pt big[2000];
    fake_load f = {big, 2000, 0, MT_OK, NULL, NULL};
    coord_mcache_query q = {0};
    coord_mcache_stats st;
    coord_buf b = {0};
    mt_err err = MT_ERR_INIT;
    size_t one;
    (void)state;

    for (size_t i = 0; i < 2000; i++)
        big[i] = (fake_pt){"loss", i + 1, 1.0 / (double)(i + 1)};
    assert_int_equal(coord_mcache_new(64u << 20, 0, &m, NULL), MT_OK);
    assert_int_equal(coord_mcache_answer(m, "job-a", &q, fake_load_fn, &f, &b, NULL, &err), MT_OK);
    coord_mcache_get_stats(m, &st);
    one = st.bytes;
    coord_mcache_free(m);

    /* room for one job and a half: the least recently read goes */
    assert_int_equal(coord_mcache_new(one + one / 2, 0, &m, NULL), MT_OK);
    const char *ids[] = {"job-a", "job-b", "job-a", "job-c"};
    for (size_t i = 0; i < 4; i++) {
        coord_buf_fini(&b);
        assert_int_equal(coord_mcache_answer(m, ids[i], &q, fake_load_fn, &f, &b, NULL, &err),
                         MT_OK);
        coord_mcache_get_stats(m, &st);
        assert_true(st.jobs == 1 && st.bytes <= one + one / 2);
    }
    assert_int_equal(f.calls, 5); /* job-a was evicted by job-b, then loaded again */
    coord_mcache_free(m);

    /* a job bigger than the cap is answered but not kept */
    assert_int_equal(coord_mcache_new(one / 2, 0, &m, NULL), MT_OK);
    coord_buf_fini(&b);
    assert_int_equal(coord_mcache_answer(m, "job-a", &q, fake_load_fn, &f, &b, NULL, &err), MT_OK);
    assert_non_null(strstr(b.data, "\"count\":2000"));
    coord_mcache_get_stats(m, &st);
    assert_true(st.jobs == 0 && st.bytes == 0 && st.evictions == 1);
    /* appends that grow a cached job over the cap drop it */
    coord_mcache_free(m);
    assert_int_equal(coord_mcache_new(one + 4096, 0, &m, NULL), MT_OK);
    f.n = 1000;
    coord_buf_fini(&b);
    assert_int_equal(coord_mcache_answer(m, "job-000001", &q, fake_load_fn, &f, &b, NULL, &err),
                     MT_OK);
    for (uint64_t s = 1001; s <= 5000; s++)
        append1(m, "loss", s, 0.5);
    coord_mcache_get_stats(m, &st);
    assert_true(st.jobs == 0 && st.bytes == 0);
    coord_buf_fini(&b);
    coord_mcache_free(m);
}

static void test_mcache_idle_entries_swept(void **state)
{
    coord_mcache *m = NULL;
    fake_load f = {three, 5, 0, MT_OK, NULL, NULL};
    coord_mcache_query q = {0};
    coord_mcache_stats st;
    mt_code rc;
    (void)state;

    assert_int_equal(coord_mcache_new(1 << 20, 60000, &m, NULL), MT_OK);
    mt_free(ask(m, &f, &q, &rc, NULL));
    coord_mcache_sweep(m, mt_clock_mono_ms() + 30000); /* not idle long enough */
    coord_mcache_get_stats(m, &st);
    assert_int_equal(st.jobs, 1);
    coord_mcache_sweep(m, mt_clock_mono_ms() + 61000);
    coord_mcache_get_stats(m, &st);
    assert_true(st.jobs == 0 && st.bytes == 0 && st.evictions == 1);
    coord_mcache_free(m);
}

static void test_mcache_alloc_failures(void **state)
{
    fake_load f = {three, 5, 0, MT_OK, NULL, NULL};
    coord_mcache_query q = {0};
    (void)state;

    for (long n = 0;; n++) {
        coord_mcache *m = NULL;
        coord_buf b = {0};
        mt_err err = MT_ERR_INIT;
        mt_code rc;
        mt_alloc_fail_after(n);
        rc = coord_mcache_new(1 << 20, 0, &m, &err);
        if (rc == MT_OK) {
            rc = coord_mcache_answer(m, "job-000001", &q, fake_load_fn, &f, &b, NULL, &err);
            append1(m, "loss", 7, 1);
            append1(m, "new", 1, 1);
        }
        long failures = mt_alloc_failures();
        mt_alloc_fail_reset();
        if (rc != MT_OK)
            assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        coord_buf_fini(&b);
        coord_mcache_free(m);
        if (failures == 0) {
            assert_int_equal(rc, MT_OK);
            break;
        }
    }
}

/* ------------------------------------------------------------ cached == uncached, end to end */

typedef struct e2e {
    store_fixture fx;
    mt_store *rw;
    char job[32];
    coord_mcache *mc;
    coord_http_ctx cached, plain;
    unsigned seed;
} e2e;

static unsigned rnd(e2e *e)
{
    e->seed = e->seed * 1103515245u + 12345u;
    return (e->seed >> 8) & 0xffffff;
}

static void ctx_init(coord_http_ctx *c, const char *db, coord_mcache *mc)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->db_path, sizeof(c->db_path), "%.1000s", db);
    c->mcache = mc;
}

static void ctx_fini(coord_http_ctx *c)
{
    mt_store_close(c->ro);
    pthread_mutex_destroy(&c->mu);
}

static void get(coord_http_ctx *c, const char *path, const char *query, coord_http_reply *r)
{
    coord_http_call call = {"GET", path, query ? query : "", "", 0, NULL};

    memset(r, 0, sizeof(*r));
    coord_http__api(c, &call, r);
}

/* Ask both sides the same query; fail with the query and the first difference. */
static void compare(e2e *e, const char *job, const char *query)
{
    char path[128];
    coord_http_reply a, b;

    snprintf(path, sizeof(path), "/api/v1/jobs/%s/metrics", job);
    get(&e->cached, path, query, &a);
    get(&e->plain, path, query, &b);
    if (a.status != b.status || a.body.len != b.body.len ||
        memcmp(a.body.data, b.body.data, a.body.len) != 0) {
        size_t i = 0;
        while (i < a.body.len && i < b.body.len && a.body.data[i] == b.body.data[i])
            i++;
        fail_msg("?%s: cached %d (%zu bytes) vs uncached %d (%zu bytes), first difference at %zu: "
                 "'%.60s' vs '%.60s'",
                 query, a.status, a.body.len, b.status, b.body.len, i,
                 a.body.data ? a.body.data + (i > 20 ? i - 20 : 0) : "",
                 b.body.data ? b.body.data + (i > 20 ? i - 20 : 0) : "");
    }
    coord_buf_fini(&a.body);
    coord_buf_fini(&b.body);
}

static const char *const pool[] = {"loss", "accuracy", "eval_loss", "z", "lr", "nope"};

static void random_query(e2e *e, char *q, size_t cap, uint64_t max_step)
{
    size_t o = 0;

    q[0] = '\0';
    if (rnd(e) % 2)
        o += (size_t)snprintf(q + o, cap - o, "since_step=%u&", rnd(e) % (unsigned)(max_step + 3));
    if (rnd(e) % 2) {
        unsigned k = 1 + rnd(e) % 3;
        o += (size_t)snprintf(q + o, cap - o, "names=");
        for (unsigned i = 0; i < k; i++)
            o += (size_t)snprintf(q + o, cap - o, "%s%s", i ? "," : "", pool[rnd(e) % 6]);
        o += (size_t)snprintf(q + o, cap - o, "&");
    }
    if (rnd(e) % 4 == 0)
        o += (size_t)snprintf(q + o, cap - o, "limit=%u&", rnd(e) % 60);
    if (rnd(e) % 3 == 0)
        o += (size_t)snprintf(q + o, cap - o, "max_points=%u&", 2 + rnd(e) % 40);
    if (o > 0 && q[o - 1] == '&')
        q[o - 1] = '\0';
}

/* Store pts and feed them to the cache, as coord_metrics_flush does after its commit (or not:
 * another process writing to the database). */
static void store_as(e2e *e, const char *job, const mt_store_metric *pts, size_t n, int feed)
{
    mt_store_metric_ref refs[64];
    mt_err err = MT_ERR_INIT;

    assert_true(n <= 64);
    if (mt_store_metrics_insert(e->rw, job, pts, n, &err) != MT_OK)
        fail_msg("insert: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        refs[i] = (mt_store_metric_ref){pts[i].step, pts[i].epoch, pts[i].name, pts[i].value,
                                        pts[i].time_ms};
    if (feed)
        coord_mcache_append(e->mc, job, refs, n);
}

static void store(e2e *e, const char *job, const mt_store_metric *pts, size_t n)
{
    store_as(e, job, pts, n, 1);
}

static void test_mcache_answers_equal_uncached(void **state)
{
    e2e e;
    mt_err err = MT_ERR_INIT;
    uint64_t next = 1, max_step = 0;
    char q[256];
    coord_mcache_stats st;
    (void)state;

    memset(&e, 0, sizeof(e));
    e.seed = 12345;
    assert_int_equal(store_fixture_init(&e.fx), 0);
    assert_int_equal(mt_store_open(e.fx.path, &e.rw, &err), MT_OK);
    store_test_add_job(e.rw, e.job);
    assert_int_equal(coord_mcache_new(64u << 20, 0, &e.mc, NULL), MT_OK);
    ctx_init(&e.cached, e.fx.path, e.mc);
    ctx_init(&e.plain, e.fx.path, NULL);

    compare(&e, e.job, "");        /* no points yet */
    compare(&e, "job-999999", ""); /* 404 on both */
    compare(&e, e.job, "limit=x"); /* 400 on both */
    for (int round = 0; round < 120; round++) {
        mt_store_metric pts[64];
        size_t n = 0, want = 1 + rnd(&e) % 40;
        while (n < want) {
            mt_store_metric *p = &pts[n++];
            unsigned kind = rnd(&e) % 10;
            memset(p, 0, sizeof(*p));
            snprintf(p->name, sizeof(p->name), "%s", pool[rnd(&e) % (round < 40 ? 2 : 5)]);
            if (kind < 6 || max_step == 0) { /* forward, sometimes leaving gaps */
                p->step = next;
                next += 1 + (rnd(&e) % 4 == 0 ? rnd(&e) % 3 : 0);
            } else { /* a redone step or a filled gap */
                p->step = 1 + rnd(&e) % max_step;
            }
            p->value = (double)(rnd(&e) % 100000) / (double)(1 + rnd(&e) % 1000);
            if (rnd(&e) % 50 == 0)
                p->value = NAN;
            else if (rnd(&e) % 50 == 0)
                p->value = -1e-9 * (double)(rnd(&e) % 1000);
            else if (rnd(&e) % 50 == 0)
                p->value = 3e12;
            if (p->step > max_step)
                max_step = p->step;
        }
        store(&e, e.job, pts, n);
        if (round % 10 == 9) { /* another writer adds a step: the cache notices it is behind */
            mt_store_metric ext[2];
            memset(ext, 0, sizeof(ext));
            for (int k = 0; k < 2; k++) {
                snprintf(ext[k].name, sizeof(ext[k].name), "%s", pool[k + (round > 50 ? 2 : 0)]);
                ext[k].step = next;
                ext[k].value = round + k;
            }
            max_step = next++;
            store_as(&e, e.job, ext, 2, 0);
        }
        for (int k = 0; k < 4; k++) {
            random_query(&e, q, sizeof(q), max_step);
            compare(&e, e.job, q);
        }
        compare(&e, e.job, "");
        if (round == 70) { /* a coordinator restart: the cache starts empty */
            coord_mcache_free(e.mc);
            assert_int_equal(coord_mcache_new(64u << 20, 0, &e.mc, NULL), MT_OK);
            e.cached.mcache = e.mc;
        }
    }
    coord_mcache_get_stats(e.mc, &st);
    assert_true(st.hits > 100 && st.misses == 6 && st.invalidations == 5);

    /* more than COORD_MCACHE_MAX_SERIES names: capped the same way; limit falls back */
    char job2[32];
    store_test_add_job(e.rw, job2);
    for (int k = 0; k < 205; k++) {
        mt_store_metric p[2];
        memset(p, 0, sizeof(p));
        snprintf(p[0].name, sizeof(p[0].name), "m%03d", k);
        snprintf(p[1].name, sizeof(p[1].name), "m%03d", k);
        p[0].step = (uint64_t)k + 1;
        p[1].step = (uint64_t)k + 2;
        p[0].value = k;
        p[1].value = -k;
        store(&e, job2, p, 2);
    }
    compare(&e, job2, "");
    compare(&e, job2, "since_step=3");
    compare(&e, job2, "limit=300");
    compare(&e, job2, "limit=10&max_points=3");
    compare(&e, job2, "names=m204,m000&max_points=2");

    ctx_fini(&e.cached);
    ctx_fini(&e.plain);
    coord_mcache_free(e.mc);
    mt_store_close(e.rw);
    store_fixture_fini(&e.fx);
}

/* ------------------------------------------------------------ commits racing with answers */

typedef struct race {
    e2e *e;
    _Atomic uint64_t writing; /* highest step whose commit has started (SQLite may show it) */
    _Atomic uint64_t acked;   /* highest step handed to the cache (the reply to the worker) */
    _Atomic int stop;
} race;

static void *race_writer(void *arg)
{
    race *r = arg;
    mt_err err = MT_ERR_INIT;

    for (uint64_t st = 1; st <= 600 && !atomic_load(&r->stop); st++) {
        mt_store_metric p[2];
        mt_store_metric_ref refs[2];
        memset(p, 0, sizeof(p));
        for (int k = 0; k < 2; k++) {
            snprintf(p[k].name, sizeof(p[k].name), "%s", k ? "loss" : "accuracy");
            p[k].step = st;
            p[k].value = (double)st / 7.0;
            refs[k] = (mt_store_metric_ref){st, 0, p[k].name, p[k].value, 0};
        }
        atomic_store(&r->writing, st);
        if (mt_store_metrics_insert(r->e->rw, r->e->job, p, 2, &err) != MT_OK)
            break;
        coord_mcache_append(r->e->mc, r->e->job, refs, 2);
        atomic_store(&r->acked, st);
    }
    atomic_store(&r->stop, 1);
    return NULL;
}

/* Answers while a writer commits: each holds every step acknowledged before it was asked, no
 * step whose commit had not started when it returned, and no gap (count == 2 x last_step). Loads
 * race with the commits: the job is invalidated every few answers. */
static void test_mcache_commits_race_answers(void **state)
{
    e2e e;
    race r;
    pthread_t th;
    mt_err err = MT_ERR_INIT;
    char path[128];
    int answers = 0;
    (void)state;

    memset(&e, 0, sizeof(e));
    assert_int_equal(store_fixture_init(&e.fx), 0);
    assert_int_equal(mt_store_open(e.fx.path, &e.rw, &err), MT_OK);
    store_test_add_job(e.rw, e.job);
    assert_int_equal(coord_mcache_new(64u << 20, 0, &e.mc, NULL), MT_OK);
    ctx_init(&e.cached, e.fx.path, e.mc);
    memset(&r, 0, sizeof(r));
    r.e = &e;
    snprintf(path, sizeof(path), "/api/v1/jobs/%s/metrics", e.job);
    assert_int_equal(pthread_create(&th, NULL, race_writer, &r), 0);
    while (!atomic_load(&r.stop)) {
        coord_http_reply a;
        uint64_t before = atomic_load(&r.acked), after, last = 0, count = 0;
        if (answers % 5 == 0)
            coord_mcache_invalidate(e.mc, e.job);
        get(&e.cached, path, "", &a);
        after = atomic_load(&r.writing);
        assert_int_equal(a.status, 200);
        const char *lp = strstr(a.body.data, "\"last_step\":");
        const char *cp = strstr(a.body.data, "\"count\":");
        assert_non_null(lp);
        assert_non_null(cp);
        last = strtoull(lp + 12, NULL, 10);
        count = strtoull(cp + 8, NULL, 10);
        if (last < before || last > after || count != 2 * last)
            fail_msg("answer with last_step %llu count %llu; acked before %llu, written after "
                     "%llu",
                     (unsigned long long)last, (unsigned long long)count,
                     (unsigned long long)before, (unsigned long long)after);
        coord_buf_fini(&a.body);
        answers++;
    }
    pthread_join(th, NULL);
    assert_true(answers > 10);
    ctx_fini(&e.cached);
    coord_mcache_free(e.mc);
    mt_store_close(e.rw);
    store_fixture_fini(&e.fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mcache_new_rejects_zero_cap),
        cmocka_unit_test(test_mcache_miss_loads_then_hits),
        cmocka_unit_test(test_mcache_query_filters),
        cmocka_unit_test(test_mcache_append_extends_replaces_inserts),
        cmocka_unit_test(test_mcache_points_committed_during_load),
        cmocka_unit_test(test_mcache_loading_unavailable_and_invalidated),
        cmocka_unit_test(test_mcache_load_error_returned),
        cmocka_unit_test(test_mcache_cap_evicts_lru_and_big_jobs),
        cmocka_unit_test(test_mcache_idle_entries_swept),
        cmocka_unit_test(test_mcache_alloc_failures),
        cmocka_unit_test(test_mcache_answers_equal_uncached),
        cmocka_unit_test(test_mcache_commits_race_answers),
    };
    return MT_RUN_TESTS(tests);
}
