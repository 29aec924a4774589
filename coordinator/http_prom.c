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
 * Per-job series carry job_id and job_name; a job's final values stay exported as
 * meshtrain_job_final_* (with its state) for an hour after it ends. process_* are the
 * families Prometheus' client libraries export, read from /proc/self.
 *
 * Threading: the HTTP server's handler threads. Tests: tests/integration/test_http_api.sh
 * (promtool check metrics).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "clock/mt_clock.h"
#include "coordinator/http_int.h"
#include "coordinator/mcache.h"
#include "prom/mt_prom.h"
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

/*
 * The latest value of each training metric, by the store's metric name: Keras's vocabulary
 * (core/loss, docs/job-spec.md "Loss and metrics") for the training figures, the validation set
 * (val_) and the test split (test_), and the throughput. A family is written only when some job
 * of the group has that metric.
 */
static const struct {
    const char *suffix, *name, *help;
} job_fams[] = {
    {"loss", "loss", "training loss (running mean of the epoch)"},
    {"accuracy", "accuracy", "training accuracy (running mean of the epoch)"},
    {"binary_accuracy", "binary_accuracy", "training binary accuracy"},
    {"mae", "mae", "training mean absolute error"},
    {"mse", "mse", "training mean squared error"},
    {"perplexity", "perplexity", "training perplexity"},
    {"token_accuracy", "token_accuracy", "training token accuracy"},
    {"val_loss", "val_loss", "validation loss"},
    {"val_accuracy", "val_accuracy", "validation accuracy"},
    {"val_binary_accuracy", "val_binary_accuracy", "validation binary accuracy"},
    {"val_mae", "val_mae", "validation mean absolute error"},
    {"val_mse", "val_mse", "validation mean squared error"},
    {"val_auc", "val_auc", "validation ROC AUC"},
    {"val_perplexity", "val_perplexity", "validation perplexity"},
    {"val_token_accuracy", "val_token_accuracy", "validation token accuracy"},
    {"test_loss", "test_loss", "test loss"},
    {"test_accuracy", "test_accuracy", "test accuracy"},
    {"test_binary_accuracy", "test_binary_accuracy", "test binary accuracy"},
    {"test_mae", "test_mae", "test mean absolute error"},
    {"test_mse", "test_mse", "test mean squared error"},
    {"test_auc", "test_auc", "test ROC AUC"},
    {"test_perplexity", "test_perplexity", "test perplexity"},
    {"test_token_accuracy", "test_token_accuracy", "test token accuracy"},
    {"best_step", "best_step", "step of the best checkpoint (validation.best)"},
    {"examples_per_second", "examples_per_sec", "training throughput, examples per second"},
};
#define JOB_FAMS   (sizeof(job_fams) / sizeof(job_fams[0]))
#define JOBS_MAX   64            /* jobs per group in one scrape; a coordinator runs few */
#define FINAL_KEEP (3600 * 1000) /* finished jobs stay exported this long after they end */

/* "NAME{job_id="..",job_name=".."[,state=".."]} " for job j. */
static void job_series(coord_buf *b, const char *name, const mt_store_job *j, bool state)
{
    coord_buf_printf(b, "%s{job_id=\"", name);
    label(b, j->job_id);
    coord_buf_puts(b, "\",job_name=\"");
    label(b, j->name);
    if (state) {
        coord_buf_puts(b, "\",state=\"");
        label(b, j->state);
    }
    coord_buf_puts(b, "\"} ");
}

/*
 * Per-job families of jobs[0..n): running jobs (prefix "meshtrain_job_", labels job_id and
 * job_name) or finished ones (prefix "meshtrain_job_final_", also state). Each family: step,
 * the latest value of each metric, and for running jobs total steps and restarts.
 */
static void job_metrics(coord_buf *b, mt_store *s, const mt_store_job *jobs, size_t nj, bool final)
{
    const char *pre = final ? "meshtrain_job_final_" : "meshtrain_job_";
    const char *of =
        final ? "at the end of the finished job (kept for an hour)" : "of the running job";
    mt_store_metric *latest[JOBS_MAX] = {0};
    size_t nl[JOBS_MAX] = {0};
    size_t n = nj < JOBS_MAX ? nj : JOBS_MAX;
    char name[96], help[160];

    for (size_t j = 0; j < n; j++)
        if (mt_store_metrics_latest(s, jobs[j].job_id, &latest[j], &nl[j], NULL) != MT_OK)
            nl[j] = 0;
    snprintf(name, sizeof(name), "%sstep", pre);
    snprintf(help, sizeof(help), "Last step reported %s.", of);
    family(b, name, "gauge", help);
    for (size_t j = 0; j < n; j++) {
        job_series(b, name, &jobs[j], final);
        coord_buf_printf(b, "%llu\n", (unsigned long long)jobs[j].step);
    }
    if (!final) {
        family(b, "meshtrain_job_total_steps", "gauge",
               "Steps the running job will take (0 = unknown).");
        for (size_t j = 0; j < n; j++) {
            job_series(b, "meshtrain_job_total_steps", &jobs[j], false);
            coord_buf_printf(b, "%llu\n", (unsigned long long)jobs[j].total_steps);
        }
        family(b, "meshtrain_job_restarts_total", "counter",
               "Restarts of the running job (transitions to RESTARTING).");
        for (size_t j = 0; j < n; j++) {
            job_series(b, "meshtrain_job_restarts_total", &jobs[j], false);
            coord_buf_printf(b, "%u\n", jobs[j].restarts);
        }
    } else {
        family(b, "meshtrain_job_final_duration_seconds", "gauge",
               "Time from submission to the end of the finished job (kept for an hour).");
        for (size_t j = 0; j < n; j++) {
            job_series(b, "meshtrain_job_final_duration_seconds", &jobs[j], true);
            value(b, (double)(jobs[j].updated_at_ms - jobs[j].submitted_at_ms) / 1e3);
            coord_buf_add(b, "\n", 1);
        }
    }
    for (size_t f = 0; f < JOB_FAMS; f++) {
        bool any = false;
        for (size_t j = 0; j < n && !any; j++)
            for (size_t k = 0; k < nl[j] && !any; k++)
                any = strcmp(latest[j][k].name, job_fams[f].name) == 0;
        if (!any && f > 1 && f + 1 < JOB_FAMS)
            continue; /* loss, accuracy and the throughput always have their family */
        snprintf(name, sizeof(name), "%s%s", pre, job_fams[f].suffix);
        snprintf(help, sizeof(help), "Latest %s %s.", job_fams[f].help, of);
        family(b, name, "gauge", help);
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < nl[j]; k++)
                if (strcmp(latest[j][k].name, job_fams[f].name) == 0) {
                    job_series(b, name, &jobs[j], final);
                    value(b, latest[j][k].value);
                    coord_buf_add(b, "\n", 1);
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
    size_t nf;
    mt_store_job ended[JOBS_MAX];
    int64_t now = mt_clock_wall_ms();
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
    /* the jobs that ended within FINAL_KEEP, most recent first (the list is in submission
     * order within a priority), then the RUNNING ones compacted in place (freed whole) */
    nf = 0;
    for (size_t j = nj; j-- > 0 && nf < JOBS_MAX;) {
        mt_jobstate st;
        if (mt_jobstate_parse(jobs[j].state, &st, NULL) == MT_OK && mt_jobstate_is_final(st) &&
            jobs[j].updated_at_ms >= now - FINAL_KEEP)
            ended[nf++] = jobs[j];
    }
    running = jobs;
    nr = 0;
    for (size_t j = 0; j < nj; j++)
        if (strcmp(jobs[j].state, "RUNNING") == 0)
            running[nr++] = jobs[j];
    job_metrics(b, s, running, nr, false);
    job_metrics(b, s, ended, nf, true);
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

/* The process_* families and meshtrain_build_info (core/prom). */
static void process_metrics(coord_buf *b)
{
    char text[4096];
    size_t need = mt_prom_process(text, sizeof(text), "meshtrain-coordinator");

    coord_buf_add(b, text, need < sizeof(text) ? need : strlen(text));
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
    process_metrics(&r->body);
    r->status = 200;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
