/* SPDX-License-Identifier: MIT */
/*
 * report.c — a task's metric reporter (contract in report.h).
 *
 * DESIGN. Two rings (points, digests) under one mutex, each numbered: seq0 is the number of the
 * oldest queued entry, so "everything queued before now left the queue" is seq0 reaching the
 * mark taken then, whether the entries were delivered, refused or dropped by a full ring. The
 * thread copies the whole queue into its own batch arrays under the mutex, sends without it,
 * and on success (or a refusal for good) drops the entries up to the batch's end mark: entries
 * queued meanwhile stay, and a ring that overflowed meanwhile already dropped them. Pacing: a
 * send when something is pending and period_s passed since the last one, retry_s after a
 * transient failure; a kick (and every wait) sends at once, but not within URGENT_GAP_S of a
 * failure, so a coordinator that refuses at once is not spun on. Nothing pending: the thread
 * still wakes every period_s to ask `more` (log lines arrive without telling it).
 * Threading: the reporter thread owns the batch arrays; everything else is under mu.
 * Tests: tests/unit/test_worker_report.c.
 */
#include "worker/report.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "digest/mt_digest.h"
#include "log/mt_log.h"

#define URGENT_GAP_S 0.2 /* kicked sends after a failure: at most this often */
#define WAIT_SLICE_S 0.2 /* waits look at their deadline and give_up this often */

typedef struct ring {
    size_t head, n, cap;
    uint64_t seq0; /* the number of the entry at head (entries are numbered from 0) */
} ring;

typedef struct digest_entry {
    uint64_t step;
    int64_t time_ms;
    char hex[MT_DIGEST_HEX];
} digest_entry;

struct worker_report {
    worker_report_opts o;
    char tag[64];
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work for the thread; a send ended (waiters) */
    pthread_t th;
    /* mu: the queue */
    Meshtrain__MetricPoint *pts;
    ring pr;
    digest_entry *digs;
    ring dr;
    size_t batch;     /* points per report (o.batch_points, at most the queue's capacity) */
    bool urgent;      /* send now (kick, drain, flush) */
    bool stop;        /* the thread leaves */
    bool busy;        /* a send is in flight */
    uint64_t sends;   /* sends ended */
    double last_send; /* when the last send started */
    double retry_at;  /* no paced send before this (the last send failed transiently) */
    double urgent_at; /* no kicked send before this */
    /* reporter thread only: the batch */
    Meshtrain__MetricPoint *out_pts, **out_pptrs;
    Meshtrain__StepDigest *out_digs, **out_dptrs;
    char (*out_hex)[MT_DIGEST_HEX];
};

static double now_s(void)
{
    return (double)mt_clock_mono_us() * 1e-6;
}

/* Wait on w->cv until the monotonic time `until` at the latest (mu held). */
static void wait_until(worker_report *w, double until)
{
    struct timespec ts;
    double now = now_s(), d = until - now;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (d <= 0)
        return;
    if (d > 3600)
        d = 3600;
    ts.tv_sec += (time_t)d;
    ts.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* The index of a new entry at the ring's end; a full ring first drops its oldest half
 * (*dropped += how many). */
static size_t ring_push(ring *r, size_t *dropped)
{
    if (r->n == r->cap) {
        size_t k = r->cap / 2;
        r->head = (r->head + k) % r->cap;
        r->n -= k;
        r->seq0 += k;
        *dropped += k;
    }
    return (r->head + r->n++) % r->cap;
}

/* Forget the entries numbered below end. */
static void ring_drop_to(ring *r, uint64_t end)
{
    size_t k = end > r->seq0 ? (size_t)(end - r->seq0) : 0;

    if (k > r->n)
        k = r->n;
    r->head = (r->head + k) % r->cap;
    r->n -= k;
    r->seq0 += k;
}

static bool transient(mt_code rc)
{
    return rc == MT_UNAVAILABLE || rc == MT_DEADLINE_EXCEEDED;
}

/* Copy the queue into the batch arrays (mu held); the end marks of what was copied. */
static void take_batch(worker_report *w, worker_report_batch *b, uint64_t *pend, uint64_t *dend)
{
    size_t np = w->pr.n < w->batch ? w->pr.n : w->batch;

    for (size_t i = 0; i < np; i++) {
        w->out_pts[i] = w->pts[(w->pr.head + i) % w->pr.cap];
        w->out_pptrs[i] = &w->out_pts[i];
    }
    for (size_t i = 0; i < w->dr.n; i++) {
        const digest_entry *e = &w->digs[(w->dr.head + i) % w->dr.cap];
        Meshtrain__StepDigest *m = &w->out_digs[i];
        meshtrain__step_digest__init(m);
        memcpy(w->out_hex[i], e->hex, MT_DIGEST_HEX);
        m->step = e->step;
        m->time_ms = e->time_ms;
        m->digest = w->out_hex[i];
        w->out_dptrs[i] = m;
    }
    *b = (worker_report_batch){w->out_pptrs, np, w->out_dptrs, w->dr.n};
    *pend = w->pr.seq0 + np;
    *dend = w->dr.seq0 + w->dr.n;
}

/* Something to send (mu held; asks `more`, which takes the caller's own lock). */
static bool pending(worker_report *w)
{
    return w->pr.n > 0 || w->dr.n > 0 || (w->o.more != NULL && w->o.more(w->o.ctx));
}

static void *report_main(void *arg)
{
    worker_report *w = arg;

    if (w->tag[0] != '\0')
        mt_log_set_thread_tag(w->tag);
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        worker_report_batch b;
        uint64_t pend, dend;
        double now = now_s(), due;
        mt_code rc;

        if (!pending(w)) {
            w->urgent = false;
            wait_until(w, now + w->o.period_s);
            continue;
        }
        due = w->last_send + w->o.period_s;
        if (due < w->retry_at)
            due = w->retry_at;
        if (w->urgent)
            due = w->urgent_at;
        if (now < due) {
            wait_until(w, due);
            continue;
        }
        take_batch(w, &b, &pend, &dend);
        w->urgent = false;
        w->busy = true;
        w->last_send = now;
        pthread_mutex_unlock(&w->mu);
        rc = w->o.send(w->o.ctx, &b);
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        w->sends++;
        if (transient(rc)) {
            now = now_s();
            w->retry_at = now + w->o.retry_s;
            w->urgent_at = now + URGENT_GAP_S;
        } else {
            ring_drop_to(&w->pr, pend);
            ring_drop_to(&w->dr, dend);
            w->retry_at = 0;
            w->urgent_at = 0;
            if (w->pr.n >= w->batch) /* a backlog (the coordinator was away): the next at once */
                w->urgent = true;
        }
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    mt_log_set_thread_tag(NULL);
    return NULL;
}

/* Free w and its arrays (no thread, no mutex left). */
static void release(worker_report *w)
{
    mt_free(w->pts);
    mt_free(w->out_pts);
    mt_free(w->out_pptrs);
    mt_free(w->digs);
    mt_free(w->out_digs);
    mt_free(w->out_dptrs);
    mt_free(w->out_hex);
    mt_free(w);
}

mt_code worker_report_new(const worker_report_opts *o, worker_report **out, mt_err *err)
{
    worker_report *w;
    pthread_condattr_t ca;

    *out = NULL;
    if (o == NULL || o->send == NULL || o->max_points < 2 || o->max_digests < 2)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "metric reporter: no send function, or a capacity below 2");
    w = mt_calloc(1, sizeof(*w));
    if (w == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metric reporter: out of memory");
    w->o = *o;
    snprintf(w->tag, sizeof(w->tag), "%s", o->tag != NULL ? o->tag : "");
    w->pr.cap = o->max_points;
    w->dr.cap = o->max_digests;
    w->batch =
        o->batch_points > 0 && o->batch_points < o->max_points ? o->batch_points : o->max_points;
    w->pts = mt_calloc(o->max_points, sizeof(*w->pts));
    w->out_pts = mt_calloc(w->batch, sizeof(*w->out_pts));
    w->out_pptrs = mt_calloc(w->batch, sizeof(*w->out_pptrs));
    w->digs = mt_calloc(o->max_digests, sizeof(*w->digs));
    w->out_digs = mt_calloc(o->max_digests, sizeof(*w->out_digs));
    w->out_dptrs = mt_calloc(o->max_digests, sizeof(*w->out_dptrs));
    w->out_hex = mt_calloc(o->max_digests, sizeof(*w->out_hex));
    if (w->pts == NULL || w->out_pts == NULL || w->out_pptrs == NULL || w->digs == NULL ||
        w->out_digs == NULL || w->out_dptrs == NULL || w->out_hex == NULL)
        goto fail_mem;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->th, NULL, report_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        goto fail_mem;
    }
    *out = w;
    return MT_OK;
fail_mem:
    release(w);
    return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metric reporter: out of memory or threads");
}

void worker_report_free(worker_report *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    release(w);
}

size_t worker_report_point(worker_report *w, const char *name, uint64_t step, uint32_t epoch,
                           double value, int64_t time_ms)
{
    Meshtrain__MetricPoint *p;
    size_t dropped = 0;

    pthread_mutex_lock(&w->mu);
    p = &w->pts[ring_push(&w->pr, &dropped)];
    meshtrain__metric_point__init(p);
    p->name = (char *)name;
    p->step = step;
    p->epoch = epoch;
    p->value = value;
    p->time_ms = time_ms;
    pthread_mutex_unlock(&w->mu);
    return dropped;
}

size_t worker_report_digest(worker_report *w, uint64_t step, const char *hex, int64_t time_ms)
{
    digest_entry *e;
    size_t dropped = 0;

    pthread_mutex_lock(&w->mu);
    e = &w->digs[ring_push(&w->dr, &dropped)];
    e->step = step;
    e->time_ms = time_ms;
    snprintf(e->hex, sizeof(e->hex), "%s", hex);
    pthread_mutex_unlock(&w->mu);
    return dropped;
}

void worker_report_kick(worker_report *w)
{
    pthread_mutex_lock(&w->mu);
    w->urgent = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

bool worker_report_drain(worker_report *w, double timeout_s)
{
    double until = now_s() + timeout_s;
    bool empty;

    pthread_mutex_lock(&w->mu);
    uint64_t pmark = w->pr.seq0 + w->pr.n, dmark = w->dr.seq0 + w->dr.n, sends = w->sends;
    while (!w->stop && (w->pr.seq0 < pmark || w->dr.seq0 < dmark)) {
        double now = now_s();
        if (now >= until)
            break;
        if (w->sends != sends && w->o.give_up != NULL && w->o.give_up(w->o.ctx))
            break;
        w->urgent = true;
        pthread_cond_broadcast(&w->cv);
        wait_until(w, now + WAIT_SLICE_S < until ? now + WAIT_SLICE_S : until);
    }
    empty = w->pr.seq0 >= pmark && w->dr.seq0 >= dmark;
    pthread_mutex_unlock(&w->mu);
    return empty;
}

void worker_report_flush(worker_report *w, double timeout_s)
{
    double until = now_s() + timeout_s;

    pthread_mutex_lock(&w->mu);
    uint64_t target = w->sends + (w->busy ? 2 : 1); /* the one in flight may predate the call */
    while (!w->stop && w->sends < target && pending(w)) {
        double now = now_s();
        if (now >= until)
            break;
        w->urgent = true;
        pthread_cond_broadcast(&w->cv);
        wait_until(w, now + WAIT_SLICE_S < until ? now + WAIT_SLICE_S : until);
    }
    pthread_mutex_unlock(&w->mu);
}
