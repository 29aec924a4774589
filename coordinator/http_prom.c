/* SPDX-License-Identifier: MIT */
/*
 * http_prom.c — GET /metrics: the coordinator's state and process metrics in
 * the Prometheus text exposition format 0.0.4 (docs/api.md lists every metric).
 *
 * How it fits: http.c routes /metrics here after authentication. Cluster
 * state (workers, devices, jobs, per-job progress) is read from SQLite through
 * the HTTP side's read-only connection under its mutex; process metrics (RPCs,
 * latencies, store writes) come from the atomic coord_stats (stats.c).
 * Every metric family is printed once with HELP and TYPE lines, label values
 * are escaped, non-finite values print as NaN/+Inf/-Inf as the format allows.
 *
 * Threading: the HTTP server's handler threads. Tests: tests/integration/test_http_api.sh
 * (promtool check metrics).
 */
#include <stdio.h>
#include <string.h>

#include "coordinator/http_int.h"
#include "coordinator/mcache.h"
#include "storage/mt_jobstate.h"

/* Label value escaping: backslash, double quote and newline. */
static void label(coord_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            coord_buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            coord_buf_puts(b, "\\n");
        else
            coord_buf_add(b, s, 1);
    }
}

static void value(coord_buf *b, double v)
{
    if (v != v)
        coord_buf_puts(b, "NaN");
    else if (v > 1.7976931348623157e308)
        coord_buf_puts(b, "+Inf");
    else if (v < -1.7976931348623157e308)
        coord_buf_puts(b, "-Inf");
    else
        coord_buf_printf(b, "%.17g", v);
}

static void family(coord_buf *b, const char *name, const char *type, const char *help)
{
    coord_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Per running job: step, and the latest value of each metric we export. */
static void job_metrics(coord_buf *b, mt_store *s, const mt_store_job *jobs, size_t nj)
{
    static const struct {
        const char *metric, *name, *help;
    } fams[] = {
        {"meshtrain_job_loss", "loss", "Latest training loss of the running job."},
        {"meshtrain_job_accuracy", "accuracy", "Latest training accuracy of the running job."},
        {"meshtrain_job_eval_loss", "eval_loss", "Latest evaluation loss of the running job."},
        {"meshtrain_job_eval_accuracy", "eval_accuracy",
         "Latest evaluation accuracy of the running job."},
        {"meshtrain_job_examples_per_second", "examples_per_sec",
         "Latest training throughput of the running job, examples per second."},
    };
    enum { NF = sizeof(fams) / sizeof(fams[0]) };
    mt_store_metric *latest[64] = {0};
    size_t nl[64] = {0};
    size_t n = nj < 64 ? nj : 64; /* a coordinator runs few jobs at once; cap the scrape */
    mt_err err = MT_ERR_INIT;

    for (size_t j = 0; j < n; j++)
        if (mt_store_metrics_latest(s, jobs[j].job_id, &latest[j], &nl[j], &err) != MT_OK)
            nl[j] = 0;
    family(b, "meshtrain_job_step", "gauge", "Last step reported by the running job.");
    for (size_t j = 0; j < n; j++) {
        coord_buf_puts(b, "meshtrain_job_step{job_id=\"");
        label(b, jobs[j].job_id);
        coord_buf_puts(b, "\",job_name=\"");
        label(b, jobs[j].name);
        coord_buf_printf(b, "\"} %llu\n", (unsigned long long)jobs[j].step);
    }
    family(b, "meshtrain_job_total_steps", "gauge",
           "Steps the running job will take (0 = unknown).");
    for (size_t j = 0; j < n; j++) {
        coord_buf_puts(b, "meshtrain_job_total_steps{job_id=\"");
        label(b, jobs[j].job_id);
        coord_buf_printf(b, "\"} %llu\n", (unsigned long long)jobs[j].total_steps);
    }
    for (size_t f = 0; f < NF; f++) {
        family(b, fams[f].metric, "gauge", fams[f].help);
        for (size_t j = 0; j < n; j++) {
            for (size_t k = 0; k < nl[j]; k++) {
                if (strcmp(latest[j][k].name, fams[f].name) != 0)
                    continue;
                coord_buf_printf(b, "%s{job_id=\"", fams[f].metric);
                label(b, jobs[j].job_id);
                coord_buf_puts(b, "\"} ");
                value(b, latest[j][k].value);
                coord_buf_add(b, "\n", 1);
            }
        }
    }
    for (size_t j = 0; j < n; j++)
        mt_store_metrics_free(latest[j]);
}

static mt_code cluster_metrics(coord_buf *b, mt_store *s, mt_err *err)
{
    mt_store_worker *ws = NULL;
    mt_store_job *jobs = NULL, *running = NULL;
    size_t nw = 0, nj = 0, nr = 0, alive = 0, lost = 0, dev_total = 0, dev_busy = 0;
    size_t by_state[MT_JOBSTATE_COUNT] = {0};
    mt_code rc;

    if ((rc = mt_store_worker_list(s, NULL, &ws, &nw, err)) != MT_OK)
        return rc;
    if ((rc = mt_store_job_list(s, NULL, &jobs, &nj, err)) != MT_OK) {
        mt_store_worker_list_free(ws, nw);
        return rc;
    }
    for (size_t i = 0; i < nw; i++) {
        if (strcmp(ws[i].state, "alive") == 0) {
            alive++;
            for (size_t d = 0; d < ws[i].n_devices; d++)
                dev_total += strcmp(ws[i].devices[d].health, "ok") == 0;
        } else {
            lost++;
        }
    }
    for (size_t j = 0; j < nj; j++) {
        mt_jobstate st;
        if (mt_jobstate_parse(jobs[j].state, &st, NULL) == MT_OK)
            by_state[st]++;
        if (strcmp(jobs[j].state, "SCHEDULED") == 0 || strcmp(jobs[j].state, "RUNNING") == 0 ||
            strcmp(jobs[j].state, "STALLED") == 0) {
            mt_store_placement *pl = NULL;
            size_t np = 0;
            if (mt_store_job_placement(s, jobs[j].job_id, &pl, &np, NULL) == MT_OK)
                dev_busy += np;
            mt_store_placement_free(pl);
        }
        if (strcmp(jobs[j].state, "RUNNING") == 0)
            nr++;
    }
    family(b, "meshtrain_workers", "gauge", "Registered workers by state.");
    coord_buf_printf(b, "meshtrain_workers{state=\"alive\"} %zu\n", alive);
    coord_buf_printf(b, "meshtrain_workers{state=\"lost\"} %zu\n", lost);
    family(b, "meshtrain_devices", "gauge",
           "Healthy devices of alive workers: busy (placed for a job) or free.");
    coord_buf_printf(b, "meshtrain_devices{state=\"busy\"} %zu\n", dev_busy);
    coord_buf_printf(b, "meshtrain_devices{state=\"free\"} %zu\n",
                     dev_total > dev_busy ? dev_total - dev_busy : 0);
    family(b, "meshtrain_jobs", "gauge", "Jobs by state.");
    for (int st = 0; st < MT_JOBSTATE_COUNT; st++)
        coord_buf_printf(b, "meshtrain_jobs{state=\"%s\"} %zu\n", mt_jobstate_name((mt_jobstate)st),
                         by_state[st]);
    /* running jobs first, the store lists by priority; keep only RUNNING ones */
    running = jobs;
    nr = 0;
    for (size_t j = 0; j < nj; j++)
        if (strcmp(jobs[j].state, "RUNNING") == 0)
            running[nr++] = jobs[j];
    job_metrics(b, s, running, nr);
    mt_store_worker_list_free(ws, nw);
    mt_store_job_list_free(jobs, nj);
    return MT_OK;
}

/* The status endpoint's metric series cache (coordinator/mcache.h), when it is on. */
static void mcache_metrics(coord_buf *b, coord_mcache *m)
{
    coord_mcache_stats st;

    coord_mcache_get_stats(m, &st);
    family(b, "meshtrain_http_metrics_cache_bytes", "gauge",
           "Memory held by the cache of jobs' metric series (--metrics-cache-mb caps it).");
    coord_buf_printf(b, "meshtrain_http_metrics_cache_bytes %zu\n", st.bytes);
    family(b, "meshtrain_http_metrics_cache_jobs", "gauge", "Jobs whose metric series are cached.");
    coord_buf_printf(b, "meshtrain_http_metrics_cache_jobs %zu\n", st.jobs);
    family(b, "meshtrain_http_metrics_cache_requests_total", "counter",
           "Metrics API requests by cache result: hit, or miss (the job's history was loaded).");
    coord_buf_printf(b, "meshtrain_http_metrics_cache_requests_total{result=\"hit\"} %llu\n",
                     (unsigned long long)st.hits);
    coord_buf_printf(b, "meshtrain_http_metrics_cache_requests_total{result=\"miss\"} %llu\n",
                     (unsigned long long)st.misses);
    family(b, "meshtrain_http_metrics_cache_evictions_total", "counter",
           "Jobs dropped from the cache: over the memory cap or idle (not read for 10 minutes).");
    coord_buf_printf(b, "meshtrain_http_metrics_cache_evictions_total %llu\n",
                     (unsigned long long)st.evictions);
}

void coord_http__prom(coord_http_ctx *ctx, coord_http_reply *r)
{
    mt_err err = MT_ERR_INIT;
    mt_store *s = coord_http__store_lock(ctx, &err);
    mt_code rc;

    if (s == NULL) {
        coord_http__error(r, coord_http__status_of(err.code), err.code, err.msg);
        return;
    }
    rc = cluster_metrics(&r->body, s, &err);
    pthread_mutex_unlock(&ctx->mu);
    if (rc != MT_OK) {
        coord_http__error(r, coord_http__status_of(rc), rc, err.msg);
        return;
    }
    if (ctx->stats != NULL)
        coord_stats_prom(ctx->stats, &r->body);
    if (ctx->mcache != NULL)
        mcache_metrics(&r->body, ctx->mcache);
    r->status = 200;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
