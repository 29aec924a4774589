/* SPDX-License-Identifier: MIT */
/*
 * http_api.c — the JSON API under /api/v1/ (docs/api.md): workers, jobs (with their latest
 * metrics on request), one job in detail, a job's metric history, a checkpoint's file, and the
 * device mesh; and the routes of the actions (POST, http_act.c).
 *
 * How it fits: http.c authenticates and hands GET /api/v1/... here, where one table
 * (api_routes: a pattern per endpoint, "*" for a job id) picks the handler, as coord.c's table
 * picks an RPC's. Every
 * endpoint reads SQLite through the HTTP side's read-only connection while
 * holding its mutex (coord_http__store_lock), builds JSON with cJSON (the
 * metric history, which can hold 100,000 points, is streamed from
 * mt_store_metrics_scan into per-series columns and written straight into a
 * buffer instead, bench/bench_http.c), and returns. Errors are JSON: {"error": {"code",
 * "http_status", "message"}}; unknown paths 404, bad query values 400, a database that cannot be
 * read 503.
 *
 * The metric history is answered from the per-job cache of encoded series
 * (mcache.h) when it is on (--metrics-cache-mb > 0): the store is read once per job
 * (a miss) and the endpoint falls back to the uncached path when the cache
 * cannot answer; both write the same bytes.
 *
 * Threading: the HTTP server's handler threads; no loop state is touched (the cache has its own
 * lock). Tests: tests/integration/test_http_api.sh, test_jobs.sh; tests/unit/test_mcache.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "coordinator/http_int.h"
#include "coordinator/mcache.h"
#include "storage/mt_jobstate.h"
#include "watch/mt_watch.h"

#define MAX_NAMES  32  /* names= filter entries */
#define MAX_SERIES 200 /* distinct metric names in one answer */

/* ------------------------------------------------------------ query strings */

static int hexv(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Find key in query (a=b&c=d), percent-decode its value into out.
 * 1 found, 0 absent, -1 malformed or too long. */
static int query_get(const char *query, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    const char *p = query;

    while (p != NULL && *p) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= kl && strncmp(p, key, kl) == 0 && (len == kl || p[kl] == '=')) {
            size_t o = 0;
            for (size_t i = kl + (len > kl); i < len; i++) {
                int ch = p[i];
                if (ch == '+') {
                    ch = ' ';
                } else if (ch == '%') {
                    if (i + 2 >= len || hexv(p[i + 1]) < 0 || hexv(p[i + 2]) < 0)
                        return -1;
                    ch = hexv(p[i + 1]) * 16 + hexv(p[i + 2]);
                    i += 2;
                }
                if (o + 1 >= cap || ch == 0)
                    return -1;
                out[o++] = (char)ch;
            }
            out[o] = '\0';
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* Strict unsigned decimal in [0, max]. 0 on success. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

static void bad_param(coord_http_reply *r, const char *name, const char *value, const char *want)
{
    char msg[400];

    snprintf(msg, sizeof(msg), "query parameter %s=%.120s: %s", name, value, want);
    coord_http__error(r, 400, MT_INVALID_ARGUMENT, msg);
}

/* ------------------------------------------------------------ JSON helpers */

static void reply_json(coord_http_reply *r, cJSON *root)
{
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;

    cJSON_Delete(root);
    if (text == NULL) {
        coord_http__error(r, 503, MT_RESOURCE_EXHAUSTED, "out of memory building the reply");
        return;
    }
    r->status = 200;
    r->content_type = "application/json; charset=utf-8";
    coord_buf_puts(&r->body, text);
    coord_buf_add(&r->body, "\n", 1);
    cJSON_free(text);
}

static void store_error(coord_http_reply *r, const mt_err *err)
{
    coord_http__error(r, coord_http__status_of(err->code), err->code, err->msg);
}

/* JSON number, or null when not finite (JSON has no NaN). */
static cJSON *num(double v)
{
    return (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
               ? cJSON_CreateNull()
               : cJSON_CreateNumber(v);
}

static cJSON *worker_json(const mt_store_worker *w)
{
    cJSON *o = cJSON_CreateObject(), *devs;

    cJSON_AddStringToObject(o, "worker_id", w->worker_id);
    cJSON_AddStringToObject(o, "name", w->name);
    cJSON_AddStringToObject(o, "state", w->state);
    cJSON_AddStringToObject(o, "host", w->host);
    cJSON_AddNumberToObject(o, "pid", w->pid);
    cJSON_AddStringToObject(o, "data_address", w->data_address);
    cJSON_AddStringToObject(o, "version", w->version);
    cJSON_AddNumberToObject(o, "registered_at_ms", (double)w->registered_at_ms);
    cJSON_AddNumberToObject(o, "last_heartbeat_ms", (double)w->last_heartbeat_ms);
    devs = cJSON_AddArrayToObject(o, "devices"); /* same shape as `meshtrain workers --json` */
    for (size_t d = 0; d < w->n_devices; d++) {
        cJSON *dv = cJSON_CreateObject();
        cJSON_AddStringToObject(dv, "kind", w->devices[d].kind);
        cJSON_AddNumberToObject(dv, "index", w->devices[d].index);
        cJSON_AddNumberToObject(dv, "cores", w->devices[d].cores);
        cJSON_AddNumberToObject(dv, "memory_bytes", (double)w->devices[d].memory_bytes);
        cJSON_AddStringToObject(dv, "health", w->devices[d].health);
        cJSON_AddItemToArray(devs, dv);
    }
    return o;
}

static cJSON *job_json(const mt_store_job *j)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "job_id", j->job_id);
    cJSON_AddStringToObject(o, "name", j->name);
    cJSON_AddStringToObject(o, "state", j->state);
    cJSON_AddNumberToObject(o, "priority", j->priority);
    cJSON_AddNumberToObject(o, "submitted_at_ms", (double)j->submitted_at_ms);
    cJSON_AddNumberToObject(o, "updated_at_ms", (double)j->updated_at_ms);
    cJSON_AddNumberToObject(o, "step", (double)j->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)j->total_steps);
    cJSON_AddStringToObject(o, "mesh", j->mesh);
    cJSON_AddNumberToObject(o, "devices", j->devices);
    if (j->total_steps > 0)
        cJSON_AddNumberToObject(
            o, "progress",
            j->step >= j->total_steps ? 1.0 : (double)j->step / (double)j->total_steps);
    else
        cJSON_AddNullToObject(o, "progress");
    cJSON_AddStringToObject(o, "reason", j->reason);
    /* what is wrong now (docs/jobs.md#diagnosis): a silent worker, a stuck device, a link */
    if (j->diagnosis[0])
        cJSON_AddStringToObject(o, "diagnosis", j->diagnosis);
    else
        cJSON_AddNullToObject(o, "diagnosis");
    cJSON_AddStringToObject(o, "error", j->error);
    cJSON_AddNumberToObject(o, "restarts", j->restarts);
    return o;
}

static cJSON *metric_json(const mt_store_metric *m)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddNumberToObject(o, "step", (double)m->step);
    cJSON_AddNumberToObject(o, "epoch", m->epoch);
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddItemToObject(o, "value", num(m->value));
    cJSON_AddNumberToObject(o, "time_ms", (double)m->time_ms);
    return o;
}

/* ------------------------------------------------------------ endpoints */

static void api_workers(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                        const char *id, coord_http_reply *r)
{
    const char *query = call->query;
    (void)ctx, (void)id;
    mt_store_worker *list = NULL;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    char state[32] = "";
    int q = query_get(query, "state", state, sizeof(state));

    if (q < 0 || (q > 0 && state[0] && strcmp(state, "alive") != 0 && strcmp(state, "lost") != 0)) {
        bad_param(r, "state", state, "expected alive or lost");
        return;
    }
    if (mt_store_worker_list(s, state, &list, &n, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "workers");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, worker_json(&list[i]));
    mt_store_worker_list_free(list, n);
    reply_json(r, root);
}

#define LIST_DEFAULT 100
#define LIST_MAX     1000

/* The rendered answer to query at generation gen, copied into r; false when not cached. */
static bool page_cached(const coord_http_ctx *ctx, uint64_t gen, const char *query,
                        coord_http_reply *r)
{
    for (size_t i = 0; i < sizeof(ctx->pages) / sizeof(ctx->pages[0]); i++) {
        const struct coord_http_page *p = &ctx->pages[i];
        if (p->body != NULL && p->gen == gen && strcmp(p->query, query) == 0) {
            r->status = 200;
            r->content_type = "application/json; charset=utf-8";
            coord_buf_add(&r->body, p->body, p->len);
            return true;
        }
    }
    return false;
}

/* Keep r's body as the answer to query at generation gen (round robin over the slots). */
static void page_keep(coord_http_ctx *ctx, uint64_t gen, const char *query,
                      const coord_http_reply *r)
{
    struct coord_http_page *p = &ctx->pages[ctx->next_page];
    char *copy;

    if (r->status != 200 || r->body.oom || strlen(query) >= sizeof(p->query) ||
        (copy = mt_malloc(r->body.len + 1)) == NULL)
        return;
    memcpy(copy, r->body.data, r->body.len + 1);
    mt_free(p->body);
    p->body = copy;
    p->len = r->body.len;
    p->gen = gen;
    snprintf(p->query, sizeof(p->query), "%s", query);
    ctx->next_page = (ctx->next_page + 1) % (sizeof(ctx->pages) / sizeof(ctx->pages[0]));
}

void coord_http__pages_free(coord_http_ctx *ctx)
{
    for (size_t i = 0; i < sizeof(ctx->pages) / sizeof(ctx->pages[0]); i++) {
        mt_free(ctx->pages[i].body);
        ctx->pages[i].body = NULL;
    }
}

/* Add "latest_metrics": {name: value, ...} (each name's value at its highest step) to o. */
static mt_code latest_values(mt_store *s, const char *job_id, cJSON *o, mt_err *err)
{
    mt_store_metric *lm = NULL;
    size_t nlm = 0;
    cJSON *lo;

    if (mt_store_metrics_latest(s, job_id, &lm, &nlm, err) != MT_OK)
        return err->code;
    lo = cJSON_AddObjectToObject(o, "latest_metrics");
    for (size_t i = 0; i < nlm; i++)
        cJSON_AddItemToObject(lo, lm[i].name, num(lm[i].value));
    mt_store_metrics_free(lm);
    return MT_OK;
}

static void api_jobs_render(const coord_http_ctx *ctx, mt_store *s, const char *query,
                            coord_http_reply *r);

/* One page of jobs (limit, cursor as ListJobs); the total from the loop's per-state counts.
 * 200 clients asking at once cost one query and one rendering: answers are kept per query
 * until a job row changes (coord_stats_jobs_gen, read before the query). */
static void api_jobs(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
                     coord_http_reply *r)
{
    const char *query = call->query;
    (void)id;
    uint64_t gen;

    if (ctx->stats == NULL) {
        api_jobs_render(ctx, s, query, r);
        return;
    }
    gen = coord_stats_jobs_gen(ctx->stats);
    if (page_cached(ctx, gen, query, r))
        return;
    api_jobs_render(ctx, s, query, r);
    page_keep(ctx, gen, query, r);
}

static void api_jobs_render(const coord_http_ctx *ctx, mt_store *s, const char *query,
                            coord_http_reply *r)
{
    mt_store_job *list = NULL;
    mt_store_job_cursor after, next;
    size_t n = 0;
    uint64_t limit = LIST_DEFAULT;
    mt_err err = MT_ERR_INIT;
    char state[160] = "", lim[16] = "", cur[48] = "", cursor[32] = "", metrics[16] = "";
    unsigned mask;
    int has_cursor;
    bool with_metrics;

    if (query_get(query, "state", state, sizeof(state)) < 0) {
        bad_param(r, "state", "", "malformed or too long");
        return;
    }
    if (query_get(query, "limit", lim, sizeof(lim)) < 0 ||
        (lim[0] != '\0' && (parse_u64(lim, LIST_MAX, &limit) != 0 || limit == 0))) {
        bad_param(r, "limit", lim, "expected 1..1000");
        return;
    }
    if ((has_cursor = query_get(query, "cursor", cur, sizeof(cur))) < 0 ||
        (has_cursor > 0 && cur[0] != '\0' &&
         mt_store_job_cursor_parse(cur, &after, &err) != MT_OK)) {
        bad_param(r, "cursor", cur, "expected the next_cursor of a previous page");
        return;
    }
    if (mt_jobstate_parse_list(state, &mask, &err) != MT_OK) {
        bad_param(r, "state", state, err.msg);
        return;
    }
    if (query_get(query, "metrics", metrics, sizeof(metrics)) < 0 ||
        (metrics[0] != '\0' && strcmp(metrics, "latest") != 0)) {
        bad_param(r, "metrics", metrics, "expected latest");
        return;
    }
    with_metrics = metrics[0] != '\0';
    if (mt_store_job_page(s, state, has_cursor > 0 && cur[0] ? &after : NULL, (size_t)limit + 1,
                          &list, &n, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    if (n > limit) {
        next = mt_store_job_cursor_of(&list[limit - 1]);
        mt_store_job_cursor_format(&next, cursor, sizeof(cursor));
    }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "jobs");
    for (size_t i = 0; i < n && i < limit; i++) {
        cJSON *o = job_json(&list[i]);
        if (with_metrics && latest_values(s, list[i].job_id, o, &err) != MT_OK) {
            cJSON_Delete(o);
            cJSON_Delete(root);
            mt_store_job_list_free(list, n);
            store_error(r, &err);
            return;
        }
        cJSON_AddItemToArray(arr, o);
    }
    mt_store_job_list_free(list, n);
    if (cursor[0] != '\0')
        cJSON_AddStringToObject(root, "next_cursor", cursor);
    else
        cJSON_AddNullToObject(root, "next_cursor");
    if (ctx->stats != NULL)
        cJSON_AddNumberToObject(root, "total", (double)coord_stats_jobs_in(ctx->stats, mask));
    reply_json(r, root);
}

static void api_job(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
                    coord_http_reply *r)
{
    const char *query = call->query;
    (void)query;
    mt_store_job j;
    mt_store_job_event *ev = NULL;
    mt_store_placement *pl = NULL;
    mt_store_metric *lm = NULL;
    mt_store_checkpoint *ck = NULL;
    size_t nev = 0, npl = 0, nlm = 0, nck = 0;
    mt_err err = MT_ERR_INIT;

    if (mt_store_job_get(s, id, &j, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    if (mt_store_job_events(s, id, &ev, &nev, &err) != MT_OK ||
        mt_store_job_placement(s, id, &pl, &npl, &err) != MT_OK ||
        mt_store_metrics_latest(s, id, &lm, &nlm, &err) != MT_OK ||
        mt_store_checkpoint_list(s, id, &ck, &nck, &err) != MT_OK) {
        store_error(r, &err);
        goto done;
    }
    cJSON *root = job_json(&j);
    /* what the caller may do from the page (http_act.c): only with a token, which http.c has
     * already required of this request */
    cJSON *acts = cJSON_AddArrayToObject(root, "actions");
    mt_jobstate st;
    if (ctx->token[0] != '\0' && ctx->local_url[0] != '\0') {
        if (mt_jobstate_parse(j.state, &st, NULL) == MT_OK && !mt_jobstate_is_final(st))
            cJSON_AddItemToArray(acts, cJSON_CreateString("cancel"));
        cJSON_AddItemToArray(acts, cJSON_CreateString("resubmit"));
    }
    /* the stored spec text as it was submitted (validated JSON then), not parsed again */
    cJSON_AddItemToObject(root, "spec", cJSON_CreateRaw(j.spec_json ? j.spec_json : "null"));
    cJSON *a = cJSON_AddArrayToObject(root, "events");
    cJSON *ra = cJSON_CreateArray();
    mt_watch_restart_scan scan;
    mt_watch_restart_scan_init(&scan);
    for (size_t i = 0; i < nev; i++) {
        cJSON *o = cJSON_CreateObject();
        mt_watch_restart rs;
        cJSON_AddNumberToObject(o, "time_ms", (double)ev[i].time_ms);
        cJSON_AddStringToObject(o, "state", ev[i].state);
        cJSON_AddStringToObject(o, "reason", ev[i].reason);
        cJSON_AddNumberToObject(o, "step", (double)ev[i].step);
        if (mt_watch_restart_scan_event(&scan, ev[i].state, ev[i].reason, ev[i].time_ms, ev[i].step,
                                        &rs)) { /* a restart: where its marker goes */
            cJSON_AddNumberToObject(o, "restart", rs.number);
            cJSON_AddItemToObject(o, "resume_step",
                                  rs.resume_step < 0 ? cJSON_CreateNull()
                                                     : cJSON_CreateNumber((double)rs.resume_step));
            cJSON_AddItemToArray(ra, mt_watch_restart_json(&rs));
        }
        cJSON_AddItemToArray(a, o);
    }
    cJSON_AddItemToObject(root, "restart_markers", ra);
    a = cJSON_AddArrayToObject(root, "placement");
    for (size_t i = 0; i < npl; i++) {
        cJSON *o = cJSON_CreateObject(), *co = cJSON_CreateArray();
        cJSON_AddNumberToObject(o, "device", pl[i].device);
        cJSON_AddStringToObject(o, "worker_id", pl[i].worker_id);
        cJSON_AddNumberToObject(o, "local_index", pl[i].local_index);
        for (uint32_t k = 0; k < pl[i].n_coords && k < MT_STORE_MAX_MESH_DIMS; k++)
            cJSON_AddItemToArray(co, cJSON_CreateNumber(pl[i].coords[k]));
        cJSON_AddItemToObject(o, "coords", co);
        cJSON_AddItemToArray(a, o);
    }
    cJSON *lo = cJSON_AddObjectToObject(root, "latest_metrics");
    for (size_t i = 0; i < nlm; i++)
        cJSON_AddItemToObject(lo, lm[i].name, metric_json(&lm[i]));
    mt_store_digest dg;
    bool has_dg = false;
    if (mt_store_job_digest_latest(s, id, &dg, &has_dg, &err) == MT_OK && has_dg) {
        cJSON *o = cJSON_AddObjectToObject(root, "digest"); /* the latest state digest */
        cJSON_AddNumberToObject(o, "step", (double)dg.step);
        cJSON_AddStringToObject(o, "digest", dg.digest);
    } else {
        cJSON_AddNullToObject(root, "digest");
    }
    a = cJSON_AddArrayToObject(root, "checkpoints");
    for (size_t i = 0; i < nck; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", (double)ck[i].step);
        cJSON_AddStringToObject(o, "location", ck[i].location);
        cJSON_AddNumberToObject(o, "size_bytes", (double)ck[i].size_bytes);
        cJSON_AddStringToObject(o, "checksum", ck[i].checksum);
        cJSON_AddBoolToObject(o, "complete", ck[i].complete);
        cJSON_AddNumberToObject(o, "time_ms", (double)ck[i].time_ms);
        cJSON_AddItemToArray(a, o);
    }
    reply_json(r, root);
done:
    mt_store_job_fini(&j);
    mt_store_job_events_free(ev);
    mt_store_placement_free(pl);
    mt_store_metrics_free(lm);
    mt_store_checkpoints_free(ck);
}

/* One metric series being collected: steps and values as columns. */
typedef struct metric_series {
    char name[sizeof(((mt_store_metric *)0)->name)];
    uint64_t *step;
    double *value;
    size_t n, cap;
} metric_series;

/* The series of one answer, filled from the store's scan (series by series) or from a
 * limited query (points by step, names interleaved). */
typedef struct metric_cols {
    metric_series s[MAX_SERIES];
    size_t n_series;
    size_t last; /* series the previous point went to */
    int oom;
} metric_cols;

/* mt_store_metric_fn: append p to its series; stops with CANCELLED after MAX_SERIES names. */
static mt_code cols_add(void *arg, const mt_store_metric_ref *p)
{
    metric_cols *c = arg;
    metric_series *se;
    size_t k = c->last;

    if (k >= c->n_series || strcmp(c->s[k].name, p->name) != 0) {
        for (k = 0; k < c->n_series && strcmp(c->s[k].name, p->name) != 0; k++)
            ;
        if (k == c->n_series) {
            if (k == MAX_SERIES)
                return MT_CANCELLED; /* the answer is capped at MAX_SERIES series */
            size_t len = strnlen(p->name, sizeof(c->s[k].name) - 1);
            memcpy(c->s[k].name, p->name, len);
            c->s[k].name[len] = '\0';
            c->n_series++;
        }
        c->last = k;
    }
    se = &c->s[k];
    if (se->n == se->cap) {
        size_t cap = se->cap ? se->cap * 2 : 1024;
        uint64_t *st = mt_realloc(se->step, cap * sizeof(*st));
        if (st != NULL)
            se->step = st;
        double *v = st ? mt_realloc(se->value, cap * sizeof(*v)) : NULL;
        if (v == NULL) {
            c->oom = 1;
            return MT_RESOURCE_EXHAUSTED;
        }
        se->value = v;
        se->cap = cap;
    }
    se->step[se->n] = p->step;
    se->value[se->n++] = p->value;
    return MT_OK;
}

static void cols_free(metric_cols *c)
{
    if (c == NULL)
        return;
    for (size_t k = 0; k < c->n_series; k++) {
        mt_free(c->s[k].step);
        mt_free(c->s[k].value);
    }
    mt_free(c);
}

static int cmp_series(const void *a, const void *b)
{
    return strcmp(((const metric_series *)a)->name, ((const metric_series *)b)->name);
}

/*
 * Keep at most max_points points of series se (0 = all): an even stride that keeps the first
 * and the last point. Returns the stride (1 = every point).
 */
static size_t series_stride(const metric_series *se, size_t max_points)
{
    if (max_points == 0 || se->n <= max_points)
        return 1;
    return (se->n + max_points - 2) / (max_points - 1); /* incl. the last */
}

static int kept(size_t j, size_t n, size_t stride)
{
    return j % stride == 0 || j == n - 1;
}

/* Fill c with the points the query asks for. */
static mt_code metrics_collect(mt_store *s, const char *id, uint64_t since_step,
                               const char *const *names, size_t n_names, size_t limit,
                               metric_cols *c, mt_err *err)
{
    mt_store_metric *pts = NULL;
    size_t n = 0;
    mt_code rc;

    if (limit == 0) { /* the common case: stream the series straight from SQLite */
        rc = mt_store_metrics_scan(s, id, since_step, names, n_names, 0, cols_add, c, err);
        return rc == MT_CANCELLED ? MT_OK : rc;
    }
    /* "the lowest steps first" across names: the store merges the series by step */
    rc = mt_store_metrics_query(s, id, since_step, names, n_names, limit, &pts, &n, err);
    for (size_t i = 0; rc == MT_OK && i < n; i++) {
        mt_store_metric_ref p = {pts[i].step, pts[i].epoch, pts[i].name, pts[i].value,
                                 pts[i].time_ms};
        mt_code add = cols_add(c, &p);
        if (add == MT_RESOURCE_EXHAUSTED)
            rc = add;
    }
    mt_store_metrics_free(pts);
    return rc;
}

typedef struct metrics_load_arg {
    mt_store *s;
    const char *id;
} metrics_load_arg;

/* coord_mcache_load_fn: the job's whole history, series by series. */
static mt_code metrics_load(void *arg, mt_store_metric_fn add, void *add_arg, mt_err *err)
{
    const metrics_load_arg *a = arg;

    return mt_store_metrics_scan(a->s, a->id, 0, NULL, 0, 0, add, add_arg, err);
}

/*
 * The metric history as columns per name (series in name order):
 * {"job_id": ..., "since_step": N, "last_step": M|null, "count": n,
 *  "series": {"loss": {"step": [...], "value": [...]}, ...}}
 */
static void api_metrics(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                        const char *id, coord_http_reply *r)
{
    const char *query = call->query;
    coord_mcache *mc = ctx->mcache;
    char since[32] = "", names_s[1024] = "", limit_s[32] = "", maxp_s[32] = "";
    char *names[MAX_NAMES];
    size_t n_names = 0, n_out = 0;
    uint64_t since_step = 0, limit = 0, max_points = 0, last_step = 0;
    metric_cols *c = NULL;
    mt_store_job j;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    int q;

    if ((q = query_get(query, "since_step", since, sizeof(since))) < 0 ||
        (q > 0 && parse_u64(since, (1ull << 63) - 1, &since_step) != 0)) {
        bad_param(r, "since_step", since, "expected an integer step >= 0");
        return;
    }
    if ((q = query_get(query, "limit", limit_s, sizeof(limit_s))) < 0 ||
        (q > 0 && parse_u64(limit_s, 10000000, &limit) != 0)) {
        bad_param(r, "limit", limit_s, "expected an integer in 0..10000000 (0 = no limit)");
        return;
    }
    if ((q = query_get(query, "max_points", maxp_s, sizeof(maxp_s))) < 0 ||
        (q > 0 &&
         (parse_u64(maxp_s, 10000000, &max_points) != 0 || (max_points > 0 && max_points < 2)))) {
        bad_param(r, "max_points", maxp_s, "expected 0 (all) or an integer in 2..10000000");
        return;
    }
    if ((q = query_get(query, "names", names_s, sizeof(names_s))) < 0) {
        bad_param(r, "names", "", "malformed or longer than 1023 bytes");
        return;
    }
    for (char *p = names_s; q > 0 && *p;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        if (*p == '\0' || strlen(p) >= sizeof(c->s[0].name) || n_names == MAX_NAMES) {
            bad_param(r, "names", p, "expected up to 32 comma-separated names of 1..63 bytes");
            return;
        }
        names[n_names++] = p;
        p = comma ? comma + 1 : p + strlen(p);
    }
    if (mt_store_job_get(s, id, &j, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    mt_store_job_fini(&j);
    if (mc != NULL) { /* the cache answers unless it cannot (UNAVAILABLE: answer uncached) */
        mt_store_metric *latest = NULL;
        size_t n_latest = 0;
        if (mt_store_metrics_latest(s, id, &latest, &n_latest, &err) != MT_OK) {
            store_error(r, &err);
            return;
        }
        coord_mcache_query cq = {since_step,    (const char *const *)names, n_names,
                                 (size_t)limit, (size_t)max_points,         latest,
                                 n_latest};
        metrics_load_arg la = {s, id};
        rc = coord_mcache_answer(mc, id, &cq, metrics_load, &la, &r->body, NULL, &err);
        mt_store_metrics_free(latest);
        if (rc == MT_OK) {
            r->status = 200;
            r->content_type = "application/json; charset=utf-8";
            return;
        }
        if (rc != MT_UNAVAILABLE) {
            store_error(r, &err);
            return;
        }
        mt_err_clear(&err);
    }
    c = mt_calloc(1, sizeof(*c));
    if (c == NULL) {
        coord_http__error(r, 503, MT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    rc = metrics_collect(s, id, since_step, (const char *const *)names, n_names, (size_t)limit, c,
                         &err);
    if (rc != MT_OK || c->oom) {
        if (c->oom)
            coord_http__error(r, 503, MT_RESOURCE_EXHAUSTED, "out of memory");
        else
            store_error(r, &err);
        cols_free(c);
        return;
    }
    qsort(c->s, c->n_series, sizeof(c->s[0]), cmp_series);
    for (size_t k = 0; k < c->n_series; k++) {
        const metric_series *se = &c->s[k];
        size_t stride = series_stride(se, (size_t)max_points);
        for (size_t i = 0; i < se->n; i++)
            n_out += kept(i, se->n, stride) ? 1 : 0;
        if (se->n > 0 && se->step[se->n - 1] > last_step)
            last_step = se->step[se->n - 1];
    }
    coord_buf *b = &r->body;
    coord_mcache_write_head(b, id, since_step, n_out, last_step);
    for (size_t k = 0; k < c->n_series; k++) {
        const metric_series *se = &c->s[k];
        size_t stride = series_stride(se, (size_t)max_points);
        coord_buf_puts(b, k ? "," : "");
        coord_buf_json_str(b, se->name);
        coord_buf_puts(b, ":{\"step\":[");
        for (size_t i = 0; i < se->n; i++) {
            if (!kept(i, se->n, stride))
                continue;
            if (i > 0)
                coord_buf_add(b, ",", 1);
            coord_buf_u64(b, se->step[i]);
        }
        coord_buf_puts(b, "],\"value\":[");
        for (size_t i = 0; i < se->n; i++) {
            if (!kept(i, se->n, stride))
                continue;
            if (i > 0)
                coord_buf_add(b, ",", 1);
            coord_buf_json_num(b, se->value[i]);
        }
        coord_buf_puts(b, "]}");
    }
    cols_free(c);
    coord_buf_puts(b, "}}\n");
    r->status = 200;
    r->content_type = "application/json; charset=utf-8";
}

static void api_mesh(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
                     coord_http_reply *r)
{
    const char *query = call->query;
    (void)ctx, (void)id, (void)query;
    mt_store_worker *ws = NULL;
    mt_store_job *jobs = NULL;
    size_t nw = 0, nj = 0, busy = 0, free_n = 0, total = 0;
    mt_err err = MT_ERR_INIT;

    if (mt_store_worker_list(s, NULL, &ws, &nw, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    if (mt_store_job_list(s, "SCHEDULED,RUNNING,STALLED,RESTARTING", &jobs, &nj, &err) != MT_OK) {
        mt_store_worker_list_free(ws, nw);
        store_error(r, &err);
        return;
    }
    cJSON *root = cJSON_CreateObject(), *wa = cJSON_AddArrayToObject(root, "workers");
    cJSON **devs = NULL;
    size_t nd = 0;
    for (size_t i = 0; i < nw; i++)
        nd += ws[i].n_devices;
    devs = nd ? mt_calloc(nd, sizeof(*devs)) : NULL;
    for (size_t i = 0, d = 0; i < nw; i++) {
        cJSON *w = cJSON_CreateObject(), *da = cJSON_CreateArray();
        cJSON_AddStringToObject(w, "worker_id", ws[i].worker_id);
        cJSON_AddStringToObject(w, "name", ws[i].name);
        cJSON_AddStringToObject(w, "state", ws[i].state);
        for (size_t k = 0; k < ws[i].n_devices; k++, d++) {
            cJSON *dv = cJSON_CreateObject();
            cJSON_AddStringToObject(dv, "kind", ws[i].devices[k].kind);
            cJSON_AddNumberToObject(dv, "index", ws[i].devices[k].index);
            cJSON_AddStringToObject(dv, "health", ws[i].devices[k].health);
            cJSON_AddNullToObject(dv, "job_id");
            cJSON_AddItemToArray(da, dv);
            if (devs != NULL)
                devs[d] = dv;
        }
        cJSON_AddItemToObject(w, "devices", da);
        cJSON_AddItemToArray(wa, w);
    }
    cJSON *ja = cJSON_AddArrayToObject(root, "jobs");
    for (size_t j = 0; j < nj; j++) {
        mt_store_placement *pl = NULL;
        size_t np = 0;
        if (mt_store_job_placement(s, jobs[j].job_id, &pl, &np, &err) != MT_OK || np == 0) {
            mt_store_placement_free(pl);
            continue;
        }
        cJSON *jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "job_id", jobs[j].job_id);
        cJSON_AddStringToObject(jo, "state", jobs[j].state);
        cJSON_AddNumberToObject(jo, "devices", (double)np);
        cJSON_AddItemToArray(ja, jo);
        for (size_t p = 0; p < np && devs != NULL; p++) {
            for (size_t i = 0, d = 0; i < nw; i++) {
                for (size_t k = 0; k < ws[i].n_devices; k++, d++) {
                    if (strcmp(ws[i].worker_id, pl[p].worker_id) != 0 ||
                        ws[i].devices[k].index != pl[p].local_index)
                        continue;
                    cJSON *co = cJSON_CreateArray();
                    for (uint32_t c = 0; c < pl[p].n_coords && c < MT_STORE_MAX_MESH_DIMS; c++)
                        cJSON_AddItemToArray(co, cJSON_CreateNumber(pl[p].coords[c]));
                    cJSON_ReplaceItemInObject(devs[d], "job_id",
                                              cJSON_CreateString(jobs[j].job_id));
                    cJSON_AddNumberToObject(devs[d], "job_device", pl[p].device);
                    cJSON_AddItemToObject(devs[d], "coords", co);
                }
            }
        }
        mt_store_placement_free(pl);
    }
    for (size_t i = 0, d = 0; i < nw; i++) {
        for (size_t k = 0; k < ws[i].n_devices; k++, d++) {
            int held = devs != NULL && !cJSON_IsNull(cJSON_GetObjectItem(devs[d], "job_id"));
            total++;
            if (held)
                busy++;
            else if (strcmp(ws[i].state, "alive") == 0 &&
                     strcmp(ws[i].devices[k].health, "ok") == 0)
                free_n++;
        }
    }
    cJSON_AddNumberToObject(root, "devices_total", (double)total);
    cJSON_AddNumberToObject(root, "devices_busy", (double)busy);
    cJSON_AddNumberToObject(root, "devices_free", (double)free_n);
    mt_free(devs);
    mt_store_worker_list_free(ws, nw);
    mt_store_job_list_free(jobs, nj);
    reply_json(r, root);
}

/*
 * The stored file of job id's complete checkpoint at ?step=N (the newest without): its location
 * into loc and its step into *step, or false with the reply set (400, 404).
 */
static bool pick_checkpoint(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                            const char *id, coord_http_reply *r, char *loc, size_t cap,
                            uint64_t *step)
{
    mt_store_checkpoint *ck = NULL, *pick = NULL;
    size_t nck = 0, dl = strlen(ctx->state_dir);
    char step_s[32] = "";
    mt_store_job j;
    mt_err err = MT_ERR_INIT;
    bool ok = false;
    int q;

    *step = 0;
    if ((q = query_get(call->query, "step", step_s, sizeof(step_s))) < 0 ||
        (q > 0 && parse_u64(step_s, (1ull << 63) - 1, step) != 0)) {
        bad_param(r, "step", step_s, "expected the step of one of the job's checkpoints");
        return false;
    }
    if (mt_store_job_get(s, id, &j, &err) != MT_OK) {
        store_error(r, &err);
        return false;
    }
    mt_store_job_fini(&j);
    if (mt_store_checkpoint_list(s, id, &ck, &nck, &err) != MT_OK) {
        store_error(r, &err);
        return false;
    }
    for (size_t i = 0; i < nck; i++)
        if (ck[i].complete && (q > 0 ? ck[i].step == *step : true))
            pick = &ck[i]; /* ascending: the last match is the newest */
    if (pick == NULL) {
        char msg[160];
        if (q > 0)
            snprintf(msg, sizeof(msg), "job %s has no complete checkpoint at step %llu", id,
                     (unsigned long long)*step);
        else
            snprintf(msg, sizeof(msg), "job %s has no complete checkpoint yet", id);
        coord_http__error(r, 404, MT_NOT_FOUND, msg);
    } else if (dl == 0 || strncmp(pick->location, ctx->state_dir, dl) != 0 ||
               pick->location[dl] != '/' || strlen(pick->location) >= cap) {
        coord_http__error(r, 404, MT_NOT_FOUND,
                          "that checkpoint is not stored on the coordinator: use meshtrain "
                          "checkpoints / meshtrain export");
    } else {
        snprintf(loc, cap, "%s", pick->location);
        *step = pick->step;
        ok = true;
    }
    mt_store_checkpoints_free(ck);
    return ok;
}

/* GET /jobs/{id}/checkpoint[?step=N]: the file of a complete checkpoint (the newest without
 * a step), as stored. */
static void api_checkpoint(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                           const char *id, coord_http_reply *r)
{
    uint64_t step;

    if (!pick_checkpoint(ctx, s, call, id, r, r->file, sizeof(r->file), &step))
        return;
    r->status = 200;
    r->content_type = "application/octet-stream";
    snprintf(r->filename, sizeof(r->filename), "%.40s-step-%llu.ckpt", id,
             (unsigned long long)step);
}

/*
 * GET /jobs/{id}/model[?step=N]: that checkpoint's weights as safetensors, what `meshtrain
 * export JOB` writes (the Keras layout, the digest and the tokenizer metadata). Written once
 * beside the stored checkpoint as "<checkpoint>.safetensors" (temporary name, then renamed;
 * removed with the checkpoint) and served from there. 500 with the reader's message when the
 * checkpoint cannot be read or the file written.
 */
static void api_model(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
                      coord_http_reply *r)
{
    char loc[sizeof(r->file)];
    uint64_t step;
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;

    if (!pick_checkpoint(ctx, s, call, id, r, loc, sizeof(loc) - 16, &step))
        return;
    if (snprintf(r->file, sizeof(r->file), "%s.safetensors", loc) >= (int)sizeof(r->file)) {
        r->file[0] = '\0';
        coord_http__error(r, 500, MT_INTERNAL, "checkpoint path too long for its export");
        return;
    }
    if (access(r->file, R_OK) != 0 && (mt_ckpt_open(loc, &ck, &err) != MT_OK ||
                                       mt_ckpt_export_safetensors(ck, r->file, &err) != MT_OK)) {
        mt_ckpt_close(ck);
        r->file[0] = '\0';
        coord_http__error(r, 500, err.code, err.msg);
        return;
    }
    mt_ckpt_close(ck);
    r->status = 200;
    r->content_type = "application/octet-stream";
    snprintf(r->filename, sizeof(r->filename), "%.40s-step-%llu.safetensors", id,
             (unsigned long long)step);
}

/*
 * GET /api/v1/jobs/{id}/digests?since_step=S&limit=N — the state digests the job's rank-0 worker
 * reported, by step: {"job_id": ..., "digests": [{"step", "digest", "time_ms"}, ...]}
 * (docs/api.md).
 */
static void api_digests(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                        const char *id, coord_http_reply *r)
{
    char since_s[32] = "", limit_s[32] = "";
    uint64_t since = 0, limit = 10000;
    mt_store_digest *ds = NULL;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    int q;

    (void)ctx;
    if ((q = query_get(call->query, "since_step", since_s, sizeof(since_s))) < 0 ||
        (q > 0 && parse_u64(since_s, (1ull << 62), &since) != 0)) {
        bad_param(r, "since_step", since_s, "expected a step >= 0");
        return;
    }
    if ((q = query_get(call->query, "limit", limit_s, sizeof(limit_s))) < 0 ||
        (q > 0 && (parse_u64(limit_s, 10000, &limit) != 0 || limit == 0))) {
        bad_param(r, "limit", limit_s, "expected an integer in 1..10000");
        return;
    }
    if (mt_store_job_digests(s, id, since, (size_t)limit, &ds, &n, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "job_id", id);
    cJSON *a = cJSON_AddArrayToObject(root, "digests");
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", (double)ds[i].step);
        cJSON_AddStringToObject(o, "digest", ds[i].digest);
        cJSON_AddNumberToObject(o, "time_ms", (double)ds[i].time_ms);
        cJSON_AddItemToArray(a, o);
    }
    mt_free(ds);
    reply_json(r, root);
}

/*
 * GET /api/v1/jobs/{id}/log?after=ID&limit=N — the lines the job's workers logged, oldest first:
 * {"job_id": ..., "lines": [{"id", "worker_id", "attempt", "seq", "time_ms", "level",
 * "text"}, ...], "next": ID}; pass next as after to follow (docs/api.md).
 */
static void api_log(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
                    coord_http_reply *r)
{
    char after_s[32] = "", limit_s[32] = "";
    uint64_t after = 0, limit = 1000;
    mt_store_log_line *ls = NULL;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    int q;

    (void)ctx;
    if ((q = query_get(call->query, "after", after_s, sizeof(after_s))) < 0 ||
        (q > 0 && parse_u64(after_s, (1ull << 62), &after) != 0)) {
        bad_param(r, "after", after_s, "expected a line id >= 0 (the previous answer's next)");
        return;
    }
    if ((q = query_get(call->query, "limit", limit_s, sizeof(limit_s))) < 0 ||
        (q > 0 && (parse_u64(limit_s, 10000, &limit) != 0 || limit == 0))) {
        bad_param(r, "limit", limit_s, "expected an integer in 1..10000");
        return;
    }
    if (mt_store_job_log_page(s, id, (int64_t)after, (size_t)limit, &ls, &n, &err) != MT_OK) {
        store_error(r, &err);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "job_id", id);
    cJSON *a = cJSON_AddArrayToObject(root, "lines");
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", (double)ls[i].id);
        cJSON_AddStringToObject(o, "worker_id", ls[i].worker_id);
        cJSON_AddNumberToObject(o, "attempt", ls[i].attempt);
        cJSON_AddNumberToObject(o, "seq", (double)ls[i].seq);
        cJSON_AddNumberToObject(o, "time_ms", (double)ls[i].time_ms);
        cJSON_AddStringToObject(o, "level", ls[i].level);
        cJSON_AddStringToObject(o, "text", ls[i].text);
        cJSON_AddItemToArray(a, o);
    }
    cJSON_AddNumberToObject(root, "next", n > 0 ? (double)ls[n - 1].id : (double)after);
    mt_store_job_log_free(ls);
    reply_json(r, root);
}

/* ------------------------------------------------------------------ routes */

/* One API route: method, pattern segments after /api/v1 ("*" = a job id), and its handler.
 * Readers run holding the read-only store (s); actions (http_act.c) get s = NULL. */
typedef struct api_route {
    const char *method; /* "GET" (HEAD too) or "POST" */
    const char *pattern;
    void (*fn)(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call, const char *id,
               coord_http_reply *r);
} api_route;

static void act_cancel(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                       const char *id, coord_http_reply *r)
{
    (void)s;
    coord_http__act_cancel(ctx, call, id, r);
}

static void act_submit(coord_http_ctx *ctx, mt_store *s, const coord_http_call *call,
                       const char *id, coord_http_reply *r)
{
    (void)s, (void)id;
    coord_http__act_submit(ctx, call, r);
}

/* Every endpoint under /api/v1 (docs/api.md), as coord.c's RPC handler table lists the methods. */
static const api_route api_routes[] = {
    {"GET", "/workers", api_workers},
    {"GET", "/jobs", api_jobs},
    {"GET", "/mesh", api_mesh},
    {"GET", "/jobs/*", api_job},
    {"GET", "/jobs/*/metrics", api_metrics},
    {"GET", "/jobs/*/checkpoint", api_checkpoint},
    {"GET", "/jobs/*/model", api_model},
    {"GET", "/jobs/*/log", api_log},
    {"GET", "/jobs/*/digests", api_digests},
    {"POST", "/jobs", act_submit},
    {"POST", "/jobs/*/cancel", act_cancel},
};

/* Whether rest matches pattern segment by segment; "*" takes one segment of 1..cap-1 bytes into
 * id. */
static bool route_match(const char *pattern, const char *rest, char *id, size_t cap)
{
    while (*pattern != '\0' && *rest != '\0') {
        if (pattern[0] == '*') {
            size_t len = strcspn(rest, "/");
            if (len == 0 || len >= cap)
                return false;
            memcpy(id, rest, len);
            id[len] = '\0';
            pattern++;
            rest += len;
        } else if (*pattern++ != *rest++) {
            return false;
        }
    }
    return *pattern == '\0' && *rest == '\0';
}

void coord_http__api(coord_http_ctx *ctx, const coord_http_call *call, coord_http_reply *r)
{
    mt_err err = MT_ERR_INIT;
    const char *path = call->path;
    const char *rest = path + strlen("/api/v1");
    const char *method = strcmp(call->method, "HEAD") == 0 ? "GET" : call->method;
    char id[64] = "";
    const api_route *route = NULL;
    bool other_method = false;
    mt_store *s;

    for (size_t i = 0; route == NULL && i < sizeof(api_routes) / sizeof(api_routes[0]); i++)
        if (route_match(api_routes[i].pattern, rest, id, sizeof(id))) {
            if (strcmp(api_routes[i].method, method) == 0)
                route = &api_routes[i];
            else
                other_method = true;
        }
    if (route == NULL && other_method) {
        char msg[200];
        snprintf(msg, sizeof(msg), "%s is not a method of %.120s", call->method, path);
        coord_http__error(r, 405, MT_INVALID_ARGUMENT, msg);
        return;
    }
    if (route == NULL) {
        char msg[600];
        size_t len = strncmp(rest, "/jobs/", 6) == 0 ? strcspn(rest + 6, "/") : 0;
        if (strncmp(rest, "/jobs/", 6) == 0 && (len == 0 || len >= sizeof(id)))
            snprintf(msg, sizeof(msg), "no such job");
        else if (strncmp(rest, "/jobs/", 6) == 0)
            snprintf(msg, sizeof(msg), "no such resource");
        else
            snprintf(msg, sizeof(msg), "no such resource: %s", path);
        coord_http__error(r, 404, MT_NOT_FOUND, msg);
        return;
    }
    if (strcmp(route->method, "GET") != 0) {
        route->fn(ctx, NULL, call, id, r);
        return;
    }
    s = coord_http__store_lock(ctx, &err);
    if (s == NULL) {
        store_error(r, &err);
        return;
    }
    route->fn(ctx, s, call, id, r);
    pthread_mutex_unlock(&ctx->mu);
}
