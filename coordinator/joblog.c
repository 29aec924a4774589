/* SPDX-License-Identifier: MIT */
/*
 * joblog.c — what a job's workers reported besides metric points, read back (stored by
 * ReportMetrics, metrics.c): GetJobLog, the lines they logged, a page at a time, oldest first,
 * for `meshtrain logs`; GetJobDigests, the state digests by step (pages of 10000 at most, or
 * the latest), for `meshtrain status` and `diverge JOB_A JOB_B`. The reads run off the loop thread
 * on a read-only store (bulk.c); the HTTP API serves the same rows (http_api.c, GET .../log and
 * .../digests).
 */
#include "coordinator/coord_rpc.h"

#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_jobstate.h"

#define JOBLOG_DEFAULT_LIMIT 1000
#define JOBLOG_MAX_LIMIT     10000

static void get_job_log_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__GetJobLogRequest *r =
        (const Meshtrain__GetJobLogRequest *)mt_rpc_call_request(call);
    Meshtrain__GetJobLogReply rep = MESHTRAIN__GET_JOB_LOG_REPLY__INIT;
    Meshtrain__JobLogLine *l = NULL, **pl = NULL;
    mt_store_log_line *ls = NULL;
    mt_store_job rec;
    mt_jobstate st = MT_JOBSTATE_QUEUED;
    size_t n = 0, limit = r->limit ? r->limit : JOBLOG_DEFAULT_LIMIT;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    (void)c;
    if (limit > JOBLOG_MAX_LIMIT)
        limit = JOBLOG_MAX_LIMIT;
    if (r->after > (1ull << 62)) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT, "after: expected a line id below 2^62", NULL);
        return;
    }
    memset(&rec, 0, sizeof(rec));
    /* the state is read BEFORE the lines: finished = true then means no line can follow */
    rc = mt_store_job_get(ro, r->job_id, &rec, &err);
    if (rc == MT_OK)
        rc = mt_store_job_log_page(ro, r->job_id, (int64_t)r->after, limit, &ls, &n, &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        goto out;
    }
    l = mt_calloc(n + 1, sizeof(*l));
    pl = mt_calloc(n + 1, sizeof(*pl));
    if (l == NULL || pl == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        meshtrain__job_log_line__init(&l[i]);
        l[i].id = (uint64_t)ls[i].id;
        l[i].worker_id = ls[i].worker_id;
        l[i].attempt = ls[i].attempt;
        l[i].seq = ls[i].seq;
        l[i].time_ms = ls[i].time_ms;
        l[i].level = ls[i].level;
        l[i].text = ls[i].text;
        pl[i] = &l[i];
    }
    mt_jobstate_parse(rec.state, &st, NULL);
    rep.lines = pl;
    rep.n_lines = n;
    rep.next = n > 0 ? (uint64_t)ls[n - 1].id : r->after;
    rep.state = rec.state;
    rep.finished = mt_jobstate_is_final(st);
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(l);
    mt_free(pl);
    mt_store_job_log_free(ls);
    mt_store_job_fini(&rec);
}

void coord_handle_get_job_log(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, get_job_log_ro);
}

static void get_job_digests_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__GetJobDigestsRequest *r =
        (const Meshtrain__GetJobDigestsRequest *)mt_rpc_call_request(call);
    Meshtrain__GetJobDigestsReply rep = MESHTRAIN__GET_JOB_DIGESTS_REPLY__INIT;
    Meshtrain__StepDigest *v = NULL, **pv = NULL;
    mt_store_digest *ds = NULL;
    mt_store_job rec;
    mt_jobstate st = MT_JOBSTATE_QUEUED;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    (void)c;
    memset(&rec, 0, sizeof(rec));
    rc = mt_store_job_get(ro, r->job_id, &rec, &err);
    if (rc == MT_OK && r->latest) {
        bool found = false;
        if ((ds = mt_calloc(1, sizeof(*ds))) == NULL)
            rc = mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
        else
            rc = mt_store_job_digest_latest(ro, r->job_id, ds, &found, &err);
        n = found ? 1 : 0;
    } else if (rc == MT_OK) {
        rc = mt_store_job_digests(ro, r->job_id, r->since_step,
                                  r->limit && r->limit < 10000 ? r->limit : 10000, &ds, &n, &err);
    }
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        goto out;
    }
    v = mt_calloc(n + 1, sizeof(*v));
    pv = mt_calloc(n + 1, sizeof(*pv));
    if (v == NULL || pv == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        meshtrain__step_digest__init(&v[i]);
        v[i].step = ds[i].step;
        v[i].digest = ds[i].digest;
        v[i].time_ms = ds[i].time_ms;
        pv[i] = &v[i];
    }
    mt_jobstate_parse(rec.state, &st, NULL);
    rep.digests = pv;
    rep.n_digests = n;
    rep.state = rec.state;
    rep.finished = mt_jobstate_is_final(st);
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(v);
    mt_free(pv);
    mt_free(ds);
    mt_store_job_fini(&rec);
}

void coord_handle_get_job_digests(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, get_job_digests_ro);
}
