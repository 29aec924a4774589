/* SPDX-License-Identifier: MIT */
/*
 * bench_http.c — latency of GET /api/v1/jobs/{id}/metrics on a job with
 * 100,000 metric points (issue #9 target: p99 <= 50 ms), against a baseline
 * measured in the same run: the old-style scan, every row of the job read
 * with plain SQLite (SELECT over job_id, all names, no JSON, no HTTP) on its
 * own connection. Also shown: the store's array query (mt_store_metrics_query,
 * the RPC path) for the same parameters.
 *
 * Runs a real coordinator (mt_coord_open + mt_coord_run on a thread) over a
 * temporary state dir filled through the store API (20,000 steps x 5 names),
 * and a keep-alive nng HTTP client on 127.0.0.1. Five cases: the whole
 * history, one name (names=loss: 20,000 points), two names, the history cut to 2,000 points
 * per series (max_points=2000, the dashboard's first load), and the dashboard's per-second
 * poll (since_step = last step - 10).
 * Three phases in one run, so the ratios hold on a loaded machine: (1) the coordinator with
 * --metrics-cache-mb 0 (every request reads the store: the table of earlier versions of this
 * benchmark); (2) cold: RESTARTS fresh coordinators with the cache on and RESTARTS with it off,
 * alternately, the first whole-history request of each (with the cache on it loads the job into
 * the cache; one GET of the job before it opens the read connection); (3) warm: the cached
 * coordinator, every case again, each answer compared byte for byte with phase 1's. Ratio = cached
 * / uncached. Usage: bench_http [ITERATIONS]   (default 40; about 15 s on the CI machine) Never run
 * by ctest.
 */
#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/coord.h"
#include "storage/mt_store.h"

#define STEPS    20000
#define NAMES    5
#define RESTARTS 5 /* cold samples */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* CPU ms of the whole process (client + the coordinator's HTTP threads): less disturbed than
 * wall time when other processes compete for the 2 cores. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[(int)(p * (n - 1) + 0.5)];
}

static int seed(const char *dir, char *job_id, size_t cap)
{
    static const char *const names[NAMES] = {"loss", "accuracy", "examples_per_sec", "test_loss",
                                             "test_accuracy"};
    mt_store_options o = MT_STORE_OPTIONS_DEFAULTS;
    mt_store_job j = {0};
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    mt_store_metric *pts = calloc((size_t)STEPS * NAMES, sizeof(*pts));
    char db[600];
    size_t n = 0;
    int rc = 1;

    snprintf(db, sizeof(db), "%s/meshtrain.db", dir);
    o.sync_full = 0;
    if (pts == NULL || mt_store_open_opts(db, &o, &s, &err) != MT_OK)
        goto out;
    snprintf(j.name, sizeof(j.name), "bench");
    j.spec_json = "{}";
    j.total_steps = STEPS;
    if (mt_store_job_insert(s, &j, 1, &err) != MT_OK)
        goto out;
    for (int st = 1; st <= STEPS; st++) {
        for (int k = 0; k < NAMES; k++) {
            pts[n].step = (uint64_t)st;
            snprintf(pts[n].name, sizeof(pts[n].name), "%s", names[k]);
            pts[n].value = 1.0 / (double)(st + k);
            pts[n++].time_ms = st;
        }
    }
    if (mt_store_metrics_insert(s, j.job_id, pts, n, &err) != MT_OK)
        goto out;
    snprintf(job_id, cap, "%s", j.job_id);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_http: seed: %s\n", err.msg);
    mt_store_close(s);
    free(pts);
    return rc;
}

/* The baseline: every row of the job through plain SQLite, what the store read before schema v5
 * for any names= filter. Returns the rows read. */
static long raw_scan(sqlite3 *db, const char *job)
{
    sqlite3_stmt *st = NULL;
    long rows = 0;
    double sum = 0;

    if (sqlite3_prepare_v2(db, "SELECT step, name, value FROM metrics WHERE job_id=?1", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
        sum += sqlite3_column_double(st, 2) + (double)sqlite3_column_int64(st, 0);
        rows += sqlite3_column_text(st, 1) != NULL;
    }
    sqlite3_finalize(st);
    return sum >= 0 ? rows : -1;
}

static void *run_loop(void *arg)
{
    mt_coord_run(arg, NULL);
    return NULL;
}

/* GET path over the kept-alive connection; returns the body size or -1. *copy (may be NULL) gets
 * a malloc'ed copy of the body. */
static long http_get(nng_http_conn *conn, const char *base, const char *path, char **copy)
{
    char full[512];
    nng_url *url = NULL;
    nng_http_req *req = NULL;
    nng_http_res *res = NULL;
    nng_aio *aio = NULL;
    void *body = NULL;
    size_t len = 0;
    long out = -1;

    snprintf(full, sizeof(full), "%s%s", base, path);
    if (nng_url_parse(&url, full) != 0 || nng_http_req_alloc(&req, url) != 0 ||
        nng_http_res_alloc(&res) != 0 || nng_aio_alloc(&aio, NULL, NULL) != 0)
        goto done;
    nng_http_conn_transact(conn, req, res, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) == 0 && nng_http_res_get_status(res) == 200) {
        nng_http_res_get_data(res, &body, &len);
        out = (long)len;
        if (copy != NULL && (*copy = malloc(len + 1)) != NULL) {
            memcpy(*copy, body, len);
            (*copy)[len] = '\0';
        }
    }
done:
    nng_aio_free(aio);
    nng_http_res_free(res);
    nng_http_req_free(req);
    nng_url_free(url);
    return out;
}

/* A coordinator on dir (cache_mb 0 = no cache) running on its own thread, and a client
 * connected to its HTTP side. */
typedef struct server {
    mt_coord *c;
    pthread_t th;
    char base[300];
    nng_url *url;
    nng_http_client *cli;
    nng_aio *aio;
    nng_http_conn *conn;
} server;

static int server_start(server *sv, const char *dir, int cache_mb)
{
    mt_coord_opts o = MT_COORD_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    char ep[700], text[1024] = "";

    memset(sv, 0, sizeof(*sv));
    o.listen = "tcp://127.0.0.1:0";
    o.http = "127.0.0.1:0";
    o.state_dir = dir;
    o.metrics_cache_mb = cache_mb;
    if (mt_coord_open(&o, &sv->c, &err) != MT_OK) {
        fprintf(stderr, "bench_http: %s\n", err.msg);
        return -1;
    }
    pthread_create(&sv->th, NULL, run_loop, sv->c);
    snprintf(ep, sizeof(ep), "%s/endpoints.json", dir);
    FILE *f = fopen(ep, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    cJSON *h = cJSON_GetObjectItem(root, "http");
    if (cJSON_IsString(h))
        snprintf(sv->base, sizeof(sv->base), "%s", h->valuestring);
    cJSON_Delete(root);
    if (nng_url_parse(&sv->url, sv->base) != 0 || nng_http_client_alloc(&sv->cli, sv->url) != 0 ||
        nng_aio_alloc(&sv->aio, NULL, NULL) != 0)
        return -1;
    nng_http_client_connect(sv->cli, sv->aio);
    nng_aio_wait(sv->aio);
    if (nng_aio_result(sv->aio) != 0) {
        fprintf(stderr, "bench_http: connect %s failed\n", sv->base);
        return -1;
    }
    sv->conn = nng_aio_get_output(sv->aio, 0);
    return 0;
}

static void server_stop(server *sv)
{
    if (sv->conn != NULL)
        nng_http_conn_close(sv->conn);
    nng_aio_free(sv->aio);
    nng_http_client_free(sv->cli);
    nng_url_free(sv->url);
    if (sv->c != NULL) {
        mt_coord_stop(sv->c);
        pthread_join(sv->th, NULL);
        mt_coord_free(sv->c);
    }
    memset(sv, 0, sizeof(*sv));
}

static const struct {
    const char *label, *query;
    uint64_t since;
    const char *name;
} cases[] = {
    {"all 100,000 points", "", 0, NULL},
    {"names=loss (20,000)", "?names=loss", 0, "loss"},
    {"names=loss,test_loss", "?names=loss,test_loss", 0, NULL},
    {"max_points=2000", "?max_points=2000", 0, NULL},
    {"poll: last 10 steps", "?since_step=19991", 19991, NULL},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 40;
    char dir[] = "/tmp/mt-bench-http.XXXXXX", job[32], path[600], db[600];
    mt_err err = MT_ERR_INIT;
    server sv;
    double *t_http, *t_store, *c_http, *c_store;
    double u_p50[N_CASES], u_p99[N_CASES];
    char *ref[N_CASES] = {NULL};

    if (iters < 5)
        iters = 5;
    t_http = calloc((size_t)iters, sizeof(double));
    t_store = calloc((size_t)iters, sizeof(double));
    c_http = calloc((size_t)iters, sizeof(double));
    c_store = calloc((size_t)iters, sizeof(double));
    if (t_http == NULL || t_store == NULL || c_http == NULL || c_store == NULL ||
        mkdtemp(dir) == NULL || seed(dir, job, sizeof(job)))
        return 1;

    mt_store *ro = NULL;
    snprintf(db, sizeof(db), "%s/meshtrain.db", dir);
    if (mt_store_open_readonly(db, &ro, &err) != MT_OK)
        return 1;

    sqlite3 *raw = NULL;
    if (sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return 1;

    /* ---- phase 1: no cache (--metrics-cache-mb 0) */
    if (server_start(&sv, dir, 0) != 0)
        return 1;
    printf("bench_http: job %s with %d metric points, %d iterations per case\n", job, STEPS * NAMES,
           iters);
    printf("1) uncached (--metrics-cache-mb 0): wall ms p50/p99; CPU ms p50 of the whole process\n"
           "per request; baseline = every row of the job through plain SQLite (the pre-v5 scan);\n"
           "ratio = http / baseline (p50, p99)\n");
    printf("%-22s %17s %9s %17s %17s %13s %9s\n", "case", "http wall", "http cpu", "store query",
           "baseline scan", "ratio", "bytes");
    for (size_t k = 0; k < N_CASES; k++) {
        long bytes = 0;
        snprintf(path, sizeof(path), "/api/v1/jobs/%s/metrics%s", job, cases[k].query);
        http_get(sv.conn, sv.base, path, &ref[k]); /* warm up; the reference answer */
        for (int i = 0; i < iters; i++) {
            double t0 = now_ms(), c0 = cpu_ms();
            bytes = http_get(sv.conn, sv.base, path, NULL);
            t_http[i] = now_ms() - t0;
            c_http[i] = cpu_ms() - c0;
            if (bytes < 0 || ref[k] == NULL) {
                fprintf(stderr, "bench_http: GET %s failed\n", path);
                return 1;
            }
            mt_store_metric *pts = NULL;
            size_t n = 0;
            const char *nm[1] = {cases[k].name};
            t0 = now_ms();
            mt_store_metrics_query(ro, job, cases[k].since, nm, cases[k].name ? 1 : 0, 0, &pts, &n,
                                   &err);
            t_store[i] = now_ms() - t0;
            mt_store_metrics_free(pts);
            t0 = now_ms();
            if (raw_scan(raw, job) != STEPS * NAMES) {
                fprintf(stderr, "bench_http: baseline scan failed\n");
                return 1;
            }
            c_store[i] = now_ms() - t0; /* baseline wall */
        }
        double hp50 = pct(t_http, iters, 0.5), hp99 = pct(t_http, iters, 0.99);
        double sp50 = pct(t_store, iters, 0.5), sp99 = pct(t_store, iters, 0.99);
        double bp50 = pct(c_store, iters, 0.5), bp99 = pct(c_store, iters, 0.99);
        double hc = pct(c_http, iters, 0.5);
        u_p50[k] = hp50;
        u_p99[k] = hp99;
        printf("%-22s %7.2f/%8.2f %9.2f %7.2f/%8.2f %7.2f/%8.2f %5.2fx/%5.2fx %9ld\n",
               cases[k].label, hp50, hp99, hc, sp50, sp99, bp50, bp99,
               hp50 / (bp50 > 0 ? bp50 : 1e-9), hp99 / (bp99 > 0 ? bp99 : 1e-9), bytes);
    }
    server_stop(&sv);
    sqlite3_close(raw);
    mt_store_close(ro);

    /* ---- phase 2: cold, the first request after a start, cache on and off alternately */
    double cold[2][RESTARTS], cold_cpu[2][RESTARTS];
    for (int r = 0; r < 2 * RESTARTS; r++) {
        char *body = NULL;
        int on = r % 2 == 1; /* the cached coordinator of the last round stays for phase 3 */
        if (server_start(&sv, dir, on ? 64 : 0) != 0)
            return 1;
        snprintf(path, sizeof(path), "/api/v1/jobs/%s", job); /* opens the read connection */
        http_get(sv.conn, sv.base, path, NULL);
        snprintf(path, sizeof(path), "/api/v1/jobs/%s/metrics", job);
        double t0 = now_ms(), c0 = cpu_ms();
        long bytes = http_get(sv.conn, sv.base, path, &body);
        cold[on][r / 2] = now_ms() - t0;
        cold_cpu[on][r / 2] = cpu_ms() - c0;
        if (bytes < 0 || body == NULL || strcmp(body, ref[0]) != 0) {
            fprintf(stderr, "bench_http: cold answer differs from the uncached one\n");
            return 1;
        }
        free(body);
        if (r + 1 < 2 * RESTARTS)
            server_stop(&sv);
    }
    double cold_on = pct(cold[1], RESTARTS, 0.5), cold_off = pct(cold[0], RESTARTS, 0.5);
    printf("2) cold: the first whole-history request after a start (%d starts each), wall ms "
           "p50/max: cache on %.2f/%.2f, cache off %.2f/%.2f, ratio %.2fx\n",
           RESTARTS, cold_on, pct(cold[1], RESTARTS, 1.0), cold_off, pct(cold[0], RESTARTS, 1.0),
           cold_on / cold_off);
    printf("   CPU ms p50 (whole process): cache on %.2f, cache off %.2f, ratio %.2fx\n",
           pct(cold_cpu[1], RESTARTS, 0.5), pct(cold_cpu[0], RESTARTS, 0.5),
           pct(cold_cpu[1], RESTARTS, 0.5) / pct(cold_cpu[0], RESTARTS, 0.5));

    /* ---- phase 3: warm, the same coordinator */
    printf("3) warm (--metrics-cache-mb 64), answers identical to 1): wall ms p50/p99; ratio =\n"
           "cached / uncached of 1) (p50, p99)\n");
    printf("%-22s %17s %9s %17s %13s %9s\n", "case", "cached wall", "cpu", "uncached wall", "ratio",
           "bytes");
    for (size_t k = 0; k < N_CASES; k++) {
        long bytes = 0;
        char *body = NULL;
        snprintf(path, sizeof(path), "/api/v1/jobs/%s/metrics%s", job, cases[k].query);
        http_get(sv.conn, sv.base, path, &body);
        if (body == NULL || strcmp(body, ref[k]) != 0) {
            fprintf(stderr, "bench_http: cached answer to %s differs from the uncached one\n",
                    path);
            return 1;
        }
        free(body);
        for (int i = 0; i < iters; i++) {
            double t0 = now_ms(), c0 = cpu_ms();
            bytes = http_get(sv.conn, sv.base, path, NULL);
            t_http[i] = now_ms() - t0;
            c_http[i] = cpu_ms() - c0;
            if (bytes < 0) {
                fprintf(stderr, "bench_http: GET %s failed\n", path);
                return 1;
            }
        }
        double hp50 = pct(t_http, iters, 0.5), hp99 = pct(t_http, iters, 0.99);
        printf("%-22s %7.2f/%8.2f %9.2f %7.2f/%8.2f %5.2fx/%5.2fx %9ld\n", cases[k].label, hp50,
               hp99, pct(c_http, iters, 0.5), u_p50[k], u_p99[k], hp50 / u_p50[k], hp99 / u_p99[k],
               bytes);
    }
    char *prom = NULL;
    http_get(sv.conn, sv.base, "/metrics", &prom);
    const char *cb = prom ? strstr(prom, "\nmeshtrain_http_metrics_cache_bytes ") : NULL;
    if (cb != NULL)
        printf("cache memory for the job: %.1f MiB\n", strtod(cb + 36, NULL) / 1048576.0);
    free(prom);
    printf(
        "target: http p99 <= 50 ms for the whole history (load average matters: 2 shared cores)\n");
    server_stop(&sv);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_http: could not remove %s\n", dir);
    for (size_t k = 0; k < N_CASES; k++)
        free(ref[k]);
    free(t_http);
    free(t_store);
    free(c_http);
    free(c_store);
    return 0;
}
