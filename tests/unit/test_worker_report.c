/* SPDX-License-Identifier: MIT */
/*
 * test_worker_report.c — the task's metric reporter (worker/report.h) with a fake send: queueing
 * never waits on a send that hangs (a frozen coordinator), points go out in order and exactly
 * once across transient failures, a refusal drops them, a full queue drops its oldest half,
 * drain and flush wait for what they promise and no longer than their deadline. End to end:
 * tests/integration/test_coord_frozen.sh.
 */
#include "mt_test.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "worker/report.h"

#define MAX_GOT 4096

/* The fake coordinator: answers with `answer` (after `fail_first` transient failures), or hangs
 * while `hang` is set (2 s at most); records the steps of the points it accepted, in order. */
typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hang;
    int fail_first;
    mt_code answer;
    int entered;      /* sends begun (before any hang) */
    int sends;        /* sends answered */
    bool more;        /* log lines to send */
    size_t max_batch; /* the most points one send carried */
    uint64_t got[MAX_GOT];
    size_t ngot;
    uint64_t got_dig[64];
    size_t ngot_dig;
} fake;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static mt_code fake_send(void *ctx, const worker_report_batch *b)
{
    fake *f = ctx;
    mt_code rc;

    pthread_mutex_lock(&f->mu);
    f->entered++;
    if (f->hang) { /* until released, 2 s at most (a queue that waited on it fails, not hangs) */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 2;
        while (f->hang && pthread_cond_timedwait(&f->cv, &f->mu, &until) == 0)
            ;
    }
    f->sends++;
    if (f->fail_first > 0) {
        f->fail_first--;
        rc = MT_DEADLINE_EXCEEDED;
    } else {
        rc = f->answer;
    }
    if (b->n_points > f->max_batch)
        f->max_batch = b->n_points;
    if (rc == MT_OK) {
        for (size_t i = 0; i < b->n_points && f->ngot < MAX_GOT; i++)
            f->got[f->ngot++] = b->points[i]->step;
        for (size_t i = 0; i < b->n_digests && f->ngot_dig < 64; i++)
            f->got_dig[f->ngot_dig++] = b->digests[i]->step;
        f->more = false;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static bool fake_more(void *ctx)
{
    fake *f = ctx;
    bool more;

    pthread_mutex_lock(&f->mu);
    more = f->more;
    pthread_mutex_unlock(&f->mu);
    return more;
}

static int fake_entered(fake *f)
{
    int n;

    pthread_mutex_lock(&f->mu);
    n = f->entered;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void fake_init(fake *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->answer = MT_OK;
}

static void fake_hang(fake *f, bool on)
{
    pthread_mutex_lock(&f->mu);
    f->hang = on;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static worker_report *new_reporter_batch(fake *f, size_t cap, size_t batch, double period_s)
{
    worker_report_opts o = WORKER_REPORT_OPTS_DEFAULTS;
    worker_report *w = NULL;

    o.period_s = period_s;
    o.batch_points = batch;
    o.retry_s = 0.05;
    o.max_points = cap;
    o.max_digests = 8;
    o.send = fake_send;
    o.more = fake_more;
    o.ctx = f;
    o.tag = "j-1";
    assert_int_equal(worker_report_new(&o, &w, NULL), MT_OK);
    assert_non_null(w);
    return w;
}

static worker_report *new_reporter(fake *f, size_t cap)
{
    return new_reporter_batch(f, cap, 0, 0.02);
}

/* got[0..n) is from, from + 1, ... (in order, none twice, none missing) */
static void expect_steps(const fake *f, uint64_t from, size_t n)
{
    if (f->ngot != n)
        fail_msg("%zu points delivered, expected %zu", f->ngot, n);
    for (size_t i = 0; i < n; i++)
        if (f->got[i] != from + i)
            fail_msg("point %zu is step %llu, expected %llu", i, (unsigned long long)f->got[i],
                     (unsigned long long)(from + i));
}

/* A send that hangs (SIGSTOPped coordinator) does not hold up queueing: 2000 points queue at
 * once; when it answers, all of them arrive, in order, once. */
static void test_worker_report_queue_never_waits_on_send(void **state)
{
    fake f;
    worker_report *w;
    double t0;

    (void)state;
    fake_init(&f);
    w = new_reporter(&f, 4096);
    fake_hang(&f, true);
    worker_report_point(w, "loss", 1, 0, 1.0, 0);
    worker_report_kick(w);
    for (int i = 0; i < 50 && fake_entered(&f) == 0; i++) { /* the send is under way, hanging */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(fake_entered(&f), 1);
    t0 = now_s();
    for (uint64_t s = 2; s <= 2000; s++)
        assert_int_equal(worker_report_point(w, "loss", s, 0, (double)s, 0), 0);
    assert_true(now_s() - t0 < 0.5); /* a blocking queue would wait forever here */
    fake_hang(&f, false);
    assert_true(worker_report_drain(w, 5.0));
    expect_steps(&f, 1, 2000);
    worker_report_free(w);
}

/* A backlog longer than one report (a coordinator that was away) goes out in several reports of
 * at most batch_points, back to back (not one per period: 5 s here), in order, once each. */
static void test_worker_report_backlog_in_several_reports(void **state)
{
    fake f;
    worker_report *w;
    double t0;

    (void)state;
    fake_init(&f);
    w = new_reporter_batch(&f, 4096, 100, 5.0);
    fake_hang(&f, true);
    worker_report_point(w, "loss", 1, 0, 1.0, 0);
    worker_report_kick(w);
    for (int i = 0; i < 50 && fake_entered(&f) == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(fake_entered(&f), 1);
    for (uint64_t s = 2; s <= 1000; s++)
        assert_int_equal(worker_report_point(w, "loss", s, 0, (double)s, 0), 0);
    fake_hang(&f, false);
    t0 = now_s();
    for (;;) { /* 9 full reports right after the hung one, without a drain or a kick */
        pthread_mutex_lock(&f.mu);
        size_t got = f.ngot;
        pthread_mutex_unlock(&f.mu);
        if (got >= 901)
            break;
        if (now_s() - t0 > 2.0)
            fail_msg("%zu points delivered 2 s after the coordinator came back", got);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(worker_report_drain(w, 5.0)); /* the last 99 */
    expect_steps(&f, 1, 1000);
    assert_int_equal(f.max_batch, 100);
    assert_true(f.sends >= 11);
    worker_report_free(w);
}

/* Transient failures keep the points; they go out once, in order, when the send succeeds. */
static void test_worker_report_transient_failures_keep_points(void **state)
{
    fake f;
    worker_report *w;

    (void)state;
    fake_init(&f);
    f.fail_first = 3;
    w = new_reporter(&f, 64);
    for (uint64_t s = 1; s <= 10; s++)
        worker_report_point(w, "loss", s, 0, 0.5, 0);
    worker_report_digest(w, 10, "00", 0);
    assert_true(worker_report_drain(w, 5.0));
    assert_true(f.sends >= 4);
    expect_steps(&f, 1, 10);
    assert_int_equal(f.ngot_dig, 1);
    assert_int_equal(f.got_dig[0], 10);
    worker_report_free(w);
}

/* A refusal for good (the job is no longer active) drops the batch: the drain ends. */
static void test_worker_report_refusal_drops(void **state)
{
    fake f;
    worker_report *w;

    (void)state;
    fake_init(&f);
    f.answer = MT_NOT_FOUND;
    w = new_reporter(&f, 64);
    worker_report_point(w, "loss", 1, 0, 0.5, 0);
    assert_true(worker_report_drain(w, 5.0));
    assert_int_equal(f.ngot, 0);
    f.answer = MT_OK;
    worker_report_point(w, "loss", 2, 0, 0.5, 0);
    assert_true(worker_report_drain(w, 5.0));
    expect_steps(&f, 2, 1);
    worker_report_free(w);
}

/* A full queue drops its oldest half and says how many; the newest points still arrive. */
static void test_worker_report_full_queue_drops_oldest_half(void **state)
{
    fake f;
    worker_report *w;
    size_t dropped = 0;

    (void)state;
    fake_init(&f);
    fake_hang(&f, true); /* nothing leaves the queue */
    w = new_reporter(&f, 8);
    for (uint64_t s = 1; s <= 9; s++)
        dropped += worker_report_point(w, "loss", s, 0, 0.5, 0);
    assert_int_equal(dropped, 4);
    fake_hang(&f, false);
    assert_true(worker_report_drain(w, 5.0));
    /* the send in flight may hold steps 1.. (it took its batch before the drop); what the queue
     * keeps is 5..9, so the last five delivered are those */
    assert_true(f.ngot >= 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(f.got[f.ngot - 5 + i], 5 + i);
    worker_report_free(w);
}

/* A coordinator that never answers: drain returns false at its deadline, not later. */
static void test_worker_report_drain_deadline(void **state)
{
    fake f;
    worker_report *w;
    double t0;

    (void)state;
    fake_init(&f);
    f.answer = MT_UNAVAILABLE;
    w = new_reporter(&f, 64);
    worker_report_point(w, "loss", 1, 0, 0.5, 0);
    t0 = now_s();
    assert_false(worker_report_drain(w, 0.3));
    assert_true(now_s() - t0 >= 0.29 && now_s() - t0 < 1.5);
    assert_true(f.sends >= 1);
    worker_report_free(w); /* unsent points are lost, nothing leaks */
}

/* flush waits for one send that starts after the call (the last log lines); none pending: at
 * once. */
static void test_worker_report_flush_sends_log_lines(void **state)
{
    fake f;
    worker_report *w;
    int before;

    (void)state;
    fake_init(&f);
    w = new_reporter(&f, 64);
    worker_report_flush(w, 2.0); /* nothing pending */
    pthread_mutex_lock(&f.mu);
    before = f.sends;
    f.more = true;
    pthread_mutex_unlock(&f.mu);
    worker_report_flush(w, 2.0);
    assert_true(f.sends > before);
    assert_false(f.more);
    worker_report_free(w);
}

static void test_worker_report_bad_options(void **state)
{
    worker_report_opts o = WORKER_REPORT_OPTS_DEFAULTS;
    worker_report *w = (worker_report *)&o;
    mt_err err = MT_ERR_INIT;

    (void)state;
    assert_int_equal(worker_report_new(&o, &w, &err), MT_INVALID_ARGUMENT); /* no send */
    assert_null(w);
    o.send = fake_send;
    o.max_points = 1;
    assert_int_equal(worker_report_new(&o, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "capacity"));
    worker_report_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_report_queue_never_waits_on_send),
        cmocka_unit_test(test_worker_report_backlog_in_several_reports),
        cmocka_unit_test(test_worker_report_transient_failures_keep_points),
        cmocka_unit_test(test_worker_report_refusal_drops),
        cmocka_unit_test(test_worker_report_full_queue_drops_oldest_half),
        cmocka_unit_test(test_worker_report_drain_deadline),
        cmocka_unit_test(test_worker_report_flush_sends_log_lines),
        cmocka_unit_test(test_worker_report_bad_options),
    };
    return MT_RUN_TESTS(tests);
}
