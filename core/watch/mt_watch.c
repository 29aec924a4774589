/* SPDX-License-Identifier: MIT */
/* mt_watch.c — history-then-live metrics of a job without gap or duplicate (mt_watch.h). */
#include "watch/mt_watch.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "proto/coordinator.pb-c.h"
#include "tls/mt_tls.h"

#define PAGE       5000
#define SUB_BUFFER 8192

typedef enum { PH_HISTORY, PH_LIVE, PH_DONE } phase;

struct mt_watch {
    mt_rpc_client *cli;
    char job_id[32];
    int rpc_timeout_ms;
    nng_socket sub;
    phase ph;
    uint64_t cursor;        /* next history query starts here */
    uint64_t seam;          /* highest step delivered from history */
    char (*seam_names)[64]; /* names delivered at step `seam` */
    size_t n_seam, cap_seam;
    bool any_history;
    mt_watch_point *buf; /* the current event's points */
    size_t cap_buf;
    mt_watch_digest *dbuf; /* the current event's digests */
    size_t cap_dbuf;
    uint64_t since; /* the caller's since_step */
    uint64_t dseam; /* highest digest step delivered from history (any_dhistory) */
    bool any_dhistory;
};

static mt_code ensure_dbuf(mt_watch *w, size_t n, mt_err *err)
{
    if (n <= w->cap_dbuf)
        return MT_OK;
    mt_watch_digest *b = mt_realloc(w->dbuf, n * sizeof(*b));
    if (b == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "watch: out of memory");
    w->dbuf = b;
    w->cap_dbuf = n;
    return MT_OK;
}

/* Append d to the event's digests (the buffer has room). */
static void add_digest(mt_watch *w, size_t *k, const Meshtrain__StepDigest *d)
{
    w->dbuf[*k].step = d->step;
    snprintf(w->dbuf[*k].digest, sizeof(w->dbuf[*k].digest), "%s", d->digest);
    (*k)++;
}

/* Every stored digest from the cursor (GetJobDigests pages) into the event: the end of history. */
static mt_code history_digests(mt_watch *w, mt_watch_event *ev, mt_err *err)
{
    Meshtrain__GetJobDigestsRequest req = MESHTRAIN__GET_JOB_DIGESTS_REQUEST__INIT;
    size_t k = 0, got;
    mt_code rc;

    req.job_id = w->job_id;
    req.since_step = w->since;
    req.limit = PAGE;
    do {
        Meshtrain__GetJobDigestsReply *rep = NULL;
        rc = mt_rpc_client_call(w->cli, &meshtrain__coordinator__descriptor, "GetJobDigests",
                                &req.base, (ProtobufCMessage **)&rep, w->rpc_timeout_ms, err);
        if (rc == MT_UNIMPLEMENTED) { /* a coordinator from before digests: none to show */
            mt_err_clear(err);
            return MT_OK;
        }
        if (rc != MT_OK)
            return rc;
        got = rep->n_digests;
        rc = ensure_dbuf(w, k + got + 1, err);
        for (size_t i = 0; rc == MT_OK && i < got; i++)
            add_digest(w, &k, rep->digests[i]);
        if (got > 0) {
            req.since_step = rep->digests[got - 1]->step + 1;
            w->dseam = rep->digests[got - 1]->step;
            w->any_dhistory = true;
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } while (rc == MT_OK && got == PAGE);
    ev->digests = w->dbuf;
    ev->n_digests = k;
    return rc;
}

static mt_code ensure_buf(mt_watch *w, size_t n, mt_err *err)
{
    if (n <= w->cap_buf)
        return MT_OK;
    mt_watch_point *b = mt_realloc(w->buf, n * sizeof(*b));
    if (b == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "watch: out of memory");
    w->buf = b;
    w->cap_buf = n;
    return MT_OK;
}

static bool seen_at_seam(const mt_watch *w, const char *name)
{
    for (size_t i = 0; i < w->n_seam; i++)
        if (strcmp(w->seam_names[i], name) == 0)
            return true;
    return false;
}

/* Record a delivered history point for the seam; returns false when it was delivered before. */
static bool note_history(mt_watch *w, const mt_watch_point *p)
{
    if (w->any_history && p->step < w->seam)
        return true;
    if (!w->any_history || p->step > w->seam) {
        w->seam = p->step;
        w->n_seam = 0;
        w->any_history = true;
    } else if (seen_at_seam(w, p->name)) {
        return false;
    }
    if (w->n_seam == w->cap_seam) {
        size_t cap = w->cap_seam ? w->cap_seam * 2 : 16;
        char(*nn)[64] = mt_realloc(w->seam_names, cap * sizeof(*nn));
        if (nn == NULL)
            return true; /* worst case a duplicate at the seam, never a gap */
        w->seam_names = nn;
        w->cap_seam = cap;
    }
    memcpy(w->seam_names[w->n_seam++], p->name, 64);
    return true;
}

static void copy_point(mt_watch_point *d, const Meshtrain__MetricPoint *s)
{
    d->step = s->step;
    d->epoch = s->epoch;
    snprintf(d->name, sizeof(d->name), "%s", s->name);
    d->value = s->value;
    d->time_ms = s->time_ms;
}

mt_code mt_watch_open(mt_rpc_client *cli, const char *job_id, uint64_t since_step, int timeout_ms,
                      mt_watch **out, mt_err *err)
{
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;
    mt_watch *w;
    char topic[40];
    size_t tlen;
    mt_code rc;
    int rv;

    *out = NULL;
    if (cli == NULL || job_id == NULL || strlen(job_id) >= sizeof(w->job_id))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "watch: a client and a job id are required");
    req.job_id = (char *)job_id;
    rc = mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, "GetJob", &req.base,
                            (ProtobufCMessage **)&rep, timeout_ms, err);
    if (rc != MT_OK)
        return rc;
    w = mt_calloc(1, sizeof(*w));
    if (w == NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "watch: out of memory");
    }
    w->cli = cli;
    w->rpc_timeout_ms = timeout_ms;
    w->cursor = w->since = since_step;
    snprintf(w->job_id, sizeof(w->job_id), "%s", job_id);
    if ((rv = nng_sub0_open(&w->sub)) != 0) {
        rc = mt_err_set(err, MT_INTERNAL, "watch: %s", nng_strerror(rv));
        goto fail_nosock;
    }
    tlen = strlen(job_id) + 1; /* the topic is the id and its NUL: exact match */
    memcpy(topic, job_id, tlen);
    nng_socket_set_int(w->sub, NNG_OPT_RECVBUF, SUB_BUFFER);
    if ((rv = nng_socket_set(w->sub, NNG_OPT_SUB_SUBSCRIBE, topic, tlen)) != 0) {
        rc = mt_err_set(err, MT_INTERNAL, "watch: subscribe: %s", nng_strerror(rv));
        goto fail;
    }
    if (rep->metrics_address[0] == '\0') {
        rc = mt_err_set(err, MT_UNAVAILABLE, "watch %s: the coordinator has no metrics stream",
                        job_id);
        goto fail;
    }
    if ((rc = mt_tls_dial(w->sub, rep->metrics_address, mt_rpc_client_tls(cli), 0, err)) !=
        MT_OK) /* the coordinator's TLS settings verify its metrics stream too */
        goto fail;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    w->ph = PH_HISTORY;
    *out = w;
    return MT_OK;
fail:
    nng_close(w->sub);
fail_nosock:
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    mt_free(w);
    return rc;
}

static mt_code next_history(mt_watch *w, mt_watch_event *ev, mt_err *err)
{
    Meshtrain__GetMetricsRequest req = MESHTRAIN__GET_METRICS_REQUEST__INIT;
    Meshtrain__GetMetricsReply *rep = NULL;
    mt_code rc;
    size_t k = 0;

    req.job_id = w->job_id;
    req.since_step = w->cursor;
    req.limit = PAGE;
    rc = mt_rpc_client_call(w->cli, &meshtrain__coordinator__descriptor, "GetMetrics", &req.base,
                            (ProtobufCMessage **)&rep, w->rpc_timeout_ms, err);
    if (rc != MT_OK)
        return rc;
    if ((rc = ensure_buf(w, rep->n_points + 1, err)) != MT_OK) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        return rc;
    }
    for (size_t i = 0; i < rep->n_points; i++) {
        copy_point(&w->buf[k], rep->points[i]);
        if (note_history(w, &w->buf[k]))
            k++;
    }
    ev->points = w->buf;
    ev->n_points = k;
    if (rep->n_points < PAGE) {
        /* history exhausted: its digests, then a job that had already ended ends the stream */
        if ((rc = history_digests(w, ev, err)) != MT_OK) {
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            return rc;
        }
        if (rep->finished) {
            ev->final = true;
            snprintf(ev->state, sizeof(ev->state), "%s", rep->state);
            w->ph = PH_DONE;
        } else {
            w->ph = PH_LIVE;
        }
    } else {
        w->cursor = w->seam; /* the last step may continue on the next page */
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return MT_OK;
}

static mt_code next_live(mt_watch *w, int timeout_ms, mt_watch_event *ev, mt_err *err)
{
    Meshtrain__WatchEvent *we;
    size_t tlen = strlen(w->job_id) + 1, k = 0;
    nng_msg *msg = NULL;
    mt_code rc;
    int rv;

    nng_socket_set_ms(w->sub, NNG_OPT_RECVTIMEO,
                      timeout_ms < 0 ? NNG_DURATION_INFINITE : (nng_duration)timeout_ms);
    rv = nng_recvmsg(w->sub, &msg, 0);
    if (rv == NNG_ETIMEDOUT)
        return mt_err_set(err, MT_DEADLINE_EXCEEDED, "watch %s: no update within %d ms", w->job_id,
                          timeout_ms);
    if (rv != 0)
        return mt_err_set(err, MT_UNAVAILABLE, "watch %s: %s", w->job_id, nng_strerror(rv));
    if (nng_msg_len(msg) < tlen) {
        nng_msg_free(msg);
        return mt_err_set(err, MT_INTERNAL, "watch %s: short stream message", w->job_id);
    }
    we = meshtrain__watch_event__unpack(NULL, nng_msg_len(msg) - tlen,
                                        (const uint8_t *)nng_msg_body(msg) + tlen);
    nng_msg_free(msg);
    if (we == NULL)
        return mt_err_set(err, MT_INTERNAL, "watch %s: undecodable stream message", w->job_id);
    if ((rc = ensure_buf(w, we->n_points + 1, err)) != MT_OK ||
        (rc = ensure_dbuf(w, we->n_digests + 1, err)) != MT_OK) {
        meshtrain__watch_event__free_unpacked(we, NULL);
        return rc;
    }
    for (size_t i = 0; i < we->n_digests; i++) {
        const Meshtrain__StepDigest *d = we->digests[i];
        if ((w->any_dhistory && d->step <= w->dseam) || d->step < w->since)
            continue; /* delivered from history, or before what the caller asked for */
        add_digest(w, &ev->n_digests, d);
    }
    ev->digests = w->dbuf;
    for (size_t i = 0; i < we->n_points; i++) {
        const Meshtrain__MetricPoint *p = we->points[i];
        if (w->any_history &&
            (p->step < w->seam || (p->step == w->seam && seen_at_seam(w, p->name))))
            continue; /* already delivered from history */
        if (p->step < w->cursor)
            continue; /* before what the caller asked for */
        copy_point(&w->buf[k++], p);
    }
    ev->points = w->buf;
    ev->n_points = k;
    ev->live = true;
    if (we->final) {
        ev->final = true;
        snprintf(ev->state, sizeof(ev->state), "%s", we->state);
        snprintf(ev->error, sizeof(ev->error), "%s", we->error);
        w->ph = PH_DONE;
    } else if (we->state[0] != '\0' && we->n_points == 0) {
        /* a state change (restart): the next attempt redoes steps below the seam */
        snprintf(ev->state, sizeof(ev->state), "%s", we->state);
        snprintf(ev->error, sizeof(ev->error), "%s", we->error);
        w->any_history = false;
        w->n_seam = 0;
        w->any_dhistory = false;
    }
    meshtrain__watch_event__free_unpacked(we, NULL);
    return MT_OK;
}

mt_code mt_watch_next(mt_watch *w, int timeout_ms, mt_watch_event *ev, mt_err *err)
{
    memset(ev, 0, sizeof(*ev));
    switch (w->ph) {
    case PH_HISTORY:
        return next_history(w, ev, err);
    case PH_LIVE:
        return next_live(w, timeout_ms, ev, err);
    default:
        return mt_err_set(err, MT_OUT_OF_RANGE, "watch %s: the stream has ended", w->job_id);
    }
}

/* The socket being closed on its own thread and whether nng_close returned (mt_watch_close). */
typedef struct closer {
    nng_socket sock;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, abandoned;
} closer;

static void *close_main(void *arg)
{
    closer *c = arg;
    bool abandoned;
    nng_close(c->sock);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    abandoned = c->abandoned;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (abandoned) { /* the waiter has gone: the last one out frees */
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        mt_free(c);
    }
    return NULL;
}

/* nng_close(sock), waiting at most wait_ms for it (see mt_watch_close). */
static void close_bounded(nng_socket sock, int wait_ms)
{
    closer *c = mt_calloc(1, sizeof(*c));
    pthread_t th;
    struct timespec until;
    bool done;

    if (c == NULL) {
        nng_close(sock);
        return;
    }
    c->sock = sock;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&th, NULL, close_main, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        mt_free(c);
        nng_close(sock);
        return;
    }
    pthread_detach(th);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
        ;
    done = c->done;
    c->abandoned = !done;
    pthread_mutex_unlock(&c->mu);
    if (done) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        mt_free(c);
    }
}

void mt_watch_close(mt_watch *w)
{
    if (w == NULL)
        return;
    close_bounded(w->sub, 2000);
    mt_free(w->buf);
    mt_free(w->dbuf);
    mt_free(w->seam_names);
    mt_free(w);
}
