/* SPDX-License-Identifier: MIT */
/*
 * metrics.c — ReportMetrics, GetMetrics and the live metrics stream. Loop thread only.
 *
 * DESIGN. ReportMetrics calls are validated when dispatched and queued; after each drain of the
 * call queue coord_metrics_flush stores every queued report in ONE transaction (one fsync for
 * all of them: this is what makes 1,000 workers' reports cheap), and only after the commit
 * replies to each caller and publishes the points. So an acknowledged point is on disk, and a
 * published point is stored before any watcher can see it: a watcher that subscribes first and
 * then reads history from the store misses nothing (core/watch/mt_watch.h).
 *
 * The stream is an nng PUB socket on the RPC listener's host (port chosen by the system; its
 * address is in endpoints.json as "metrics" and in GetJob's metrics_address). Each message is
 * the topic — the job id and one NUL byte, so subscribers filter exactly — followed by a
 * protobuf WatchEvent: a batch of points, or final = true with the job's final state.
 * PUB never blocks: a subscriber that cannot keep up loses live messages (nng drops them),
 * never the coordinator's time.
 */
#include "coordinator/coord_rpc.h"

#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/mcache.h"
#include "log/mt_log.h"
#include "tls/mt_tls.h"

#define MAX_POINTS_PER_REPORT 10000
#define MAX_LINES_PER_REPORT  1000
#define MAX_NAME_BYTES        63
#define DEFAULT_QUERY_LIMIT   10000
#define MAX_QUERY_LIMIT       100000

mt_code coord_metrics_open(mt_coord *c, mt_err *err)
{
    nng_socket *s = mt_calloc(1, sizeof(*s));
    nng_listener l;
    char url[300];
    mt_err lerr = MT_ERR_INIT;
    const char *colon = strrchr(c->listen_url, ':');
    int prefix = colon ? (int)(colon - c->listen_url) : (int)strlen(c->listen_url);
    int rv, port = 0;

    if (s == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics socket: out of memory");
    if (c->opts.metrics_listen != NULL && c->opts.metrics_listen[0] != '\0') {
        /* a fixed address: watchers reconnect to it after a coordinator restart */
        snprintf(url, sizeof(url), "%.290s", c->opts.metrics_listen);
        colon = strrchr(url, ':');
        prefix = colon ? (int)(colon - url) : (int)strlen(url);
    } else if (strncmp(c->listen_url, "tcp://", 6) != 0 && !mt_tls_url_is_tls(c->listen_url)) {
        snprintf(url, sizeof(url), "%s.metrics", c->listen_url); /* ipc:// or inproc:// */
    } else {
        snprintf(url, sizeof(url), "%.*s:0", prefix, c->listen_url);
    }
    if ((rv = nng_pub0_open(s)) != 0) {
        mt_free(s);
        return mt_err_set(err, MT_INTERNAL, "metrics socket: %s", nng_strerror(rv));
    }
    if (mt_tls_listen(*s, url, c->opts.tls, 0, &l, &lerr) != MT_OK) {
        nng_close(*s);
        mt_free(s);
        return mt_err_set(err, lerr.code, "metrics socket: %s", lerr.msg);
    }
    if ((strncmp(url, "tcp://", 6) == 0 || mt_tls_url_is_tls(url)) &&
        nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        snprintf(c->metrics_url, sizeof(c->metrics_url), "%.*s:%d", prefix, url, port);
    else
        snprintf(c->metrics_url, sizeof(c->metrics_url), "%.200s", url);
    c->pub = s;
    return MT_OK;
}

void coord_metrics_close(mt_coord *c)
{
    nng_socket *s = c->pub;

    /* replies still queued belong to calls the RPC server already cancelled */
    for (size_t i = 0; i < c->n_mreports; i++)
        mt_rpc_call_reply(c->mreports[i], MT_UNAVAILABLE, "coordinator shutting down", NULL);
    mt_free(c->mreports);
    c->mreports = NULL;
    c->n_mreports = c->cap_mreports = 0;
    if (s == NULL)
        return;
    nng_close(*s);
    mt_free(s);
    c->pub = NULL;
}

/* Send ev (its job_id set) on the PUB socket; never blocks. */
static void send_event(mt_coord *c, const Meshtrain__WatchEvent *ev)
{
    const char *job_id = ev->job_id;
    size_t tlen = strlen(job_id) + 1, len;
    uint8_t *buf;
    int rv;

    len = meshtrain__watch_event__get_packed_size(ev);
    buf = nng_alloc(tlen + len);
    if (buf == NULL)
        return;
    memcpy(buf, job_id, tlen); /* topic: the id and its NUL */
    meshtrain__watch_event__pack(ev, buf + tlen);
    rv = nng_send(*(nng_socket *)c->pub, buf, tlen + len, NNG_FLAG_ALLOC | NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        nng_free(buf, tlen + len);
        mt_log_debug("publish %s: %s", job_id, nng_strerror(rv));
    }
}

void coord_metrics_publish(mt_coord *c, const char *job_id,
                           const Meshtrain__MetricPoint *const *pts, size_t n,
                           const char *final_state, const char *error)
{
    Meshtrain__WatchEvent ev = MESHTRAIN__WATCH_EVENT__INIT;

    if (c->pub == NULL)
        return;
    ev.job_id = (char *)job_id;
    ev.points = (Meshtrain__MetricPoint **)pts;
    ev.n_points = n;
    mt_jobstate st; /* a state that is not final is a state change (a restart; mt_watch.h) */
    ev.final = final_state != NULL &&
               (mt_jobstate_parse(final_state, &st, NULL) != MT_OK || mt_jobstate_is_final(st));
    ev.state = (char *)(final_state ? final_state : "");
    ev.error = (char *)(error ? error : "");
    send_event(c, &ev);
}

/* A stored report's points and state digests on the stream. */
static void publish_report(mt_coord *c, const Meshtrain__ReportMetricsRequest *r)
{
    Meshtrain__WatchEvent ev = MESHTRAIN__WATCH_EVENT__INIT;

    if (c->pub == NULL || (r->n_points == 0 && r->n_digests == 0))
        return;
    ev.job_id = r->job_id;
    ev.points = r->points;
    ev.n_points = r->n_points;
    ev.digests = r->digests;
    ev.n_digests = r->n_digests;
    send_event(c, &ev);
}

static mt_code validate_report(mt_coord *c, const Meshtrain__ReportMetricsRequest *r, char *msg,
                               size_t cap)
{
    coord_job *j = coord_job_find(c, r->job_id);

    if (r->n_points > MAX_POINTS_PER_REPORT) {
        snprintf(msg, cap, "points: %zu in one report; at most %d", r->n_points,
                 MAX_POINTS_PER_REPORT);
        return MT_RESOURCE_EXHAUSTED;
    }
    if (j == NULL) {
        snprintf(msg, cap, "job %.40s is not running (unknown or finished)", r->job_id);
        return MT_NOT_FOUND;
    }
    if (r->n_log_lines > MAX_LINES_PER_REPORT) {
        snprintf(msg, cap, "log_lines: %zu in one report; at most %d", r->n_log_lines,
                 MAX_LINES_PER_REPORT);
        return MT_RESOURCE_EXHAUSTED;
    }
    if (r->n_log_lines > 0 && (r->worker_id[0] == '\0' || strlen(r->worker_id) >= 64)) {
        snprintf(msg, cap, "worker_id: 1 to 63 bytes with log_lines");
        return MT_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < r->n_log_lines; i++) {
        const Meshtrain__LogLine *l = r->log_lines[i];
        mt_log_level lv;
        if (strlen(l->text) > MT_STORE_LOG_TEXT_MAX) {
            snprintf(msg, cap, "log_lines[%zu].text: at most %d bytes", i, MT_STORE_LOG_TEXT_MAX);
            return MT_INVALID_ARGUMENT;
        }
        if (mt_log_level_parse(l->level, &lv, NULL) != MT_OK || lv == MT_LOG_OFF) {
            snprintf(msg, cap, "log_lines[%zu].level: expected debug, info, warn or error", i);
            return MT_INVALID_ARGUMENT;
        }
    }
    if (r->n_digests > MAX_POINTS_PER_REPORT) {
        snprintf(msg, cap, "digests: %zu in one report; at most %d", r->n_digests,
                 MAX_POINTS_PER_REPORT);
        return MT_RESOURCE_EXHAUSTED;
    }
    for (size_t i = 0; i < r->n_digests; i++) {
        const Meshtrain__StepDigest *d = r->digests[i];
        size_t k = 0;
        while (k < 64 && ((d->digest[k] >= '0' && d->digest[k] <= '9') ||
                          (d->digest[k] >= 'a' && d->digest[k] <= 'f')))
            k++;
        if (k != 64 || d->digest[64] != '\0') {
            snprintf(msg, cap, "digests[%zu].digest: expected 64 lower-case hex digits", i);
            return MT_INVALID_ARGUMENT;
        }
        if (d->step >= (1ull << 63)) {
            snprintf(msg, cap, "digests[%zu].step: must be below 2^63", i);
            return MT_INVALID_ARGUMENT;
        }
    }
    for (size_t i = 0; i < r->n_points; i++) {
        const Meshtrain__MetricPoint *p = r->points[i];
        size_t nl = strlen(p->name);
        if (nl == 0 || nl > MAX_NAME_BYTES) {
            snprintf(msg, cap, "points[%zu].name: must have 1 to %d bytes", i, MAX_NAME_BYTES);
            return MT_INVALID_ARGUMENT;
        }
        if (!isfinite(p->value)) {
            snprintf(msg, cap, "points[%zu] (%s at step %llu): value is not finite", i, p->name,
                     (unsigned long long)p->step);
            return MT_INVALID_ARGUMENT;
        }
        if (p->step >= (1ull << 63)) {
            snprintf(msg, cap, "points[%zu].step: must be below 2^63", i);
            return MT_INVALID_ARGUMENT;
        }
    }
    return MT_OK;
}

void coord_handle_report_metrics(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__ReportMetricsRequest *r =
        (const Meshtrain__ReportMetricsRequest *)mt_rpc_call_request(call);
    char msg[256];
    mt_code rc = validate_report(c, r, msg, sizeof(msg));

    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, msg, NULL);
        return;
    }
    if (c->n_mreports == c->cap_mreports) {
        size_t cap = c->cap_mreports ? c->cap_mreports * 2 : 64;
        mt_rpc_call **q = mt_realloc(c->mreports, cap * sizeof(*q));
        if (q == NULL) {
            mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
            return;
        }
        c->mreports = q;
        c->cap_mreports = cap;
    }
    c->mreports[c->n_mreports++] = call;
}

/* The report's log lines (validated) inside the open transaction. */
static mt_code store_log_lines(mt_coord *c, const Meshtrain__ReportMetricsRequest *r, mt_err *err)
{
    mt_store_log_line *ls = mt_calloc(r->n_log_lines, sizeof(*ls));
    mt_code rc;

    if (ls == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    for (size_t i = 0; i < r->n_log_lines; i++) {
        const Meshtrain__LogLine *l = r->log_lines[i];
        ls[i].seq = l->seq;
        ls[i].time_ms = l->time_ms ? l->time_ms : mt_clock_wall_ms();
        snprintf(ls[i].level, sizeof(ls[i].level), "%s", l->level);
        snprintf(ls[i].text, sizeof(ls[i].text), "%s", l->text);
    }
    rc = mt_store_job_log_insert(c->store, r->job_id, r->worker_id, r->attempt, ls, r->n_log_lines,
                                 err);
    mt_free(ls);
    return rc;
}

/* The report's state digests (validated) inside the open transaction. */
static mt_code store_digests(mt_coord *c, const Meshtrain__ReportMetricsRequest *r, mt_err *err)
{
    mt_store_digest *d = mt_calloc(r->n_digests, sizeof(*d));
    mt_code rc;

    if (d == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    for (size_t i = 0; i < r->n_digests; i++) {
        d[i].step = r->digests[i]->step;
        snprintf(d[i].digest, sizeof(d[i].digest), "%s", r->digests[i]->digest);
        d[i].time_ms = r->digests[i]->time_ms ? r->digests[i]->time_ms : mt_clock_wall_ms();
    }
    rc = mt_store_job_digests_put(c->store, r->job_id, d, r->n_digests, err);
    mt_free(d);
    return rc;
}

/* Store one report inside the open transaction. *max_step gets its highest step. */
static mt_code store_report(mt_coord *c, const Meshtrain__ReportMetricsRequest *r,
                            uint64_t *max_step, mt_err *err)
{
    mt_store_metric *pts = mt_calloc(r->n_points + 1, sizeof(*pts));
    mt_code rc;

    *max_step = 0;
    if (pts == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    for (size_t i = 0; i < r->n_points; i++) {
        const Meshtrain__MetricPoint *p = r->points[i];
        pts[i].step = p->step;
        pts[i].epoch = p->epoch;
        memcpy(pts[i].name, p->name, strlen(p->name) + 1);
        pts[i].value = p->value;
        pts[i].time_ms = p->time_ms ? p->time_ms : mt_clock_wall_ms();
        if (p->step > *max_step)
            *max_step = p->step;
    }
    rc = mt_store_metrics_insert(c->store, r->job_id, pts, r->n_points, err);
    mt_free(pts);
    if (rc == MT_OK && r->n_log_lines > 0)
        rc = store_log_lines(c, r, err);
    if (rc == MT_OK && r->n_digests > 0)
        rc = store_digests(c, r, err);
    return rc;
}

/* Hand the points of the reports just committed (stored[i] != 0) to the HTTP metrics cache, in
 * commit order, so it holds only durable points (coordinator/mcache.h). */
static void cache_committed(mt_coord *c, const unsigned char *stored, size_t n)
{
    struct coord_mcache *mc = c->mcache;
    mt_store_metric_ref *refs = NULL;
    size_t cap = 0;

    for (size_t i = 0; mc != NULL && i < n; i++) {
        const Meshtrain__ReportMetricsRequest *r =
            (const Meshtrain__ReportMetricsRequest *)mt_rpc_call_request(c->mreports[i]);
        if (!stored[i] || r->n_points == 0)
            continue;
        if (r->n_points > cap) {
            mt_free(refs);
            cap = r->n_points;
            refs = mt_calloc(cap, sizeof(*refs));
        }
        if (refs == NULL) { /* the cache cannot follow: forget the job, it reloads on a read */
            coord_mcache_invalidate(mc, r->job_id);
            cap = 0;
            continue;
        }
        for (size_t k = 0; k < r->n_points; k++) {
            const Meshtrain__MetricPoint *p = r->points[k];
            refs[k] = (mt_store_metric_ref){p->step, p->epoch, p->name, p->value, p->time_ms};
        }
        coord_mcache_append(mc, r->job_id, refs, r->n_points);
    }
    mt_free(refs);
}

void coord_metrics_flush(mt_coord *c)
{
    size_t n = c->n_mreports;
    mt_code *codes;
    uint64_t *steps;
    char(*msgs)[MT_ERR_MSG_SIZE];
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    unsigned char *stored; /* report i's points are in the transaction */

    if (n == 0)
        return;
    stored = mt_calloc(n, 1);
    codes = mt_calloc(n, sizeof(*codes));
    steps = mt_calloc(n, sizeof(*steps));
    msgs = mt_calloc(n, sizeof(*msgs));
    if (stored == NULL || codes == NULL || steps == NULL || msgs == NULL) {
        rc = mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
        goto fail_all;
    }
    if ((rc = mt_store_tx_begin(c->store, &err)) != MT_OK)
        goto fail_all;
    for (size_t i = 0; i < n; i++) {
        const Meshtrain__ReportMetricsRequest *r =
            (const Meshtrain__ReportMetricsRequest *)mt_rpc_call_request(c->mreports[i]);
        mt_err e = MT_ERR_INIT;
        codes[i] = store_report(c, r, &steps[i], &e);
        stored[i] = codes[i] == MT_OK;
        if (codes[i] == MT_OK) {
            coord_job *j = coord_job_find(c, r->job_id);
            if (j != NULL && steps[i] > j->step)
                codes[i] =
                    mt_store_job_set_step(c->store, r->job_id, steps[i], mt_clock_wall_ms(), &e);
        }
        memcpy(msgs[i], e.msg, sizeof(msgs[i]));
    }
    if ((rc = mt_store_tx_commit(c->store, &err)) != MT_OK) {
        mt_store_tx_rollback(c->store, NULL);
        goto fail_all;
    }
    coord_stats_jobs_changed(c->stats); /* job steps may have moved (after the commit) */
    cache_committed(c, stored, n); /* before any reply: an acknowledged point is in the cache */
    for (size_t i = 0; i < n; i++) {
        mt_rpc_call *call = c->mreports[i];
        const Meshtrain__ReportMetricsRequest *r =
            (const Meshtrain__ReportMetricsRequest *)mt_rpc_call_request(call);
        Meshtrain__ReportMetricsReply rep = MESHTRAIN__REPORT_METRICS_REPLY__INIT;
        if (codes[i] != MT_OK) {
            mt_rpc_call_reply(call, codes[i], msgs[i], NULL);
            continue;
        }
        coord_job *j = coord_job_find(c, r->job_id);
        if (j != NULL && steps[i] > j->step)
            j->step = steps[i];
        publish_report(c, r);
        rep.stored = r->n_points;
        mt_rpc_call_reply(call, MT_OK, NULL, &rep.base); /* releases r */
    }
    goto out;
fail_all:
    mt_log_error("store metrics: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        mt_rpc_call_reply(c->mreports[i], rc, err.msg, NULL);
out:
    c->n_mreports = 0;
    mt_free(stored);
    mt_free(codes);
    mt_free(steps);
    mt_free(msgs);
}

static void get_metrics_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__GetMetricsRequest *r =
        (const Meshtrain__GetMetricsRequest *)mt_rpc_call_request(call);
    Meshtrain__GetMetricsReply rep = MESHTRAIN__GET_METRICS_REPLY__INIT;
    Meshtrain__MetricPoint *p = NULL, **pp = NULL;
    mt_store_metric *pts = NULL;
    mt_store_job rec;
    mt_jobstate st = MT_JOBSTATE_QUEUED;
    size_t n = 0, limit = r->limit ? r->limit : DEFAULT_QUERY_LIMIT;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    (void)c;
    if (limit > MAX_QUERY_LIMIT)
        limit = MAX_QUERY_LIMIT;
    memset(&rec, 0, sizeof(rec));
    /* the state is read BEFORE the points: finished = true then means no point can follow */
    rc = mt_store_job_get(ro, r->job_id, &rec, &err);
    if (rc == MT_OK)
        rc = mt_store_metrics_query(ro, r->job_id, r->since_step, (const char *const *)r->names,
                                    r->n_names, limit, &pts, &n, &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        goto out;
    }
    if (coord_metric_points(pts, n, &p, &pp) != MT_OK) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    mt_jobstate_parse(rec.state, &st, NULL);
    rep.points = pp;
    rep.n_points = n;
    rep.state = rec.state;
    rep.finished = mt_jobstate_is_final(st);
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(p);
    mt_free(pp);
    mt_store_metrics_free(pts);
    mt_store_job_fini(&rec);
}

void coord_handle_get_metrics(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, get_metrics_ro);
}
