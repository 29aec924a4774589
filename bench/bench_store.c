/* SPDX-License-Identifier: MIT */
/*
 * bench_store.c — storage throughput and latency (storage/mt_store.h).
 *
 * Prints, on a fresh temporary database each:
 *   1. metric points/s through mt_store_metrics_insert for batch sizes 1, 100
 *      and 1000 (each batch one committed, fsynced transaction), and the ratio
 *      to a baseline measured in the same run: a raw prepared INSERT loop into a
 *      plain table with the same pragmas, committed every 1000 rows;
 *   2. since_step query latency p50/p99 on a job with 100,000 points (limit 1000,
 *      random since_step) and latest-per-name latency;
 *   3. mt_store_worker_heartbeats latency for a batch of 1,000 workers, and a whole
 *      coordinator tick (1,000 heartbeats + 5,000 metric points) in one transaction.
 * Usage: bench_store [--normal]   (--normal: synchronous=NORMAL instead of FULL)
 * Never run by ctest; keep it short (about 10-20 s on the 2-core CI machine).
 */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "storage/mt_store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of this process (user + system): less disturbed by other processes on a shared
 * machine than wall time; excludes time spent waiting for fsync. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(size_t)((double)(n - 1) * p)];
}

static const char *const names[] = {"loss", "accuracy", "examples_per_sec", "lr", "grad_norm"};
#define N_NAMES 5

static void fill_points(mt_store_metric *pts, size_t n, uint64_t first)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t k = first + i;
        memset(&pts[i], 0, sizeof(pts[i]));
        pts[i].step = k / N_NAMES;
        pts[i].epoch = (uint32_t)(pts[i].step / 1000);
        snprintf(pts[i].name, sizeof(pts[i].name), "%s", names[k % N_NAMES]);
        pts[i].value = 1.0 / (double)(k + 1);
        pts[i].time_ms = 1700000000000 + (int64_t)k;
    }
}

typedef struct bench_db {
    char dir[64];
    char path[96];
} bench_db;

static void bench_db_init(bench_db *b, const char *tag)
{
    snprintf(b->dir, sizeof(b->dir), "/tmp/mtbench-%s-XXXXXX", tag);
    if (mkdtemp(b->dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(b->path, sizeof(b->path), "%s/meshtrain.db", b->dir);
}

static void bench_db_fini(bench_db *b)
{
    char p[128];
    const char *suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s%s", b->path, suffix[i]);
        unlink(p);
    }
    rmdir(b->dir);
}

static mt_store *open_store(const char *path, int sync_full, char job[32])
{
    mt_store_options o = MT_STORE_OPTIONS_DEFAULTS;
    mt_store *s = NULL;
    mt_store_job j;
    mt_err err = MT_ERR_INIT;

    o.sync_full = sync_full;
    if (mt_store_open_opts(path, &o, &s, &err) != MT_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        exit(1);
    }
    memset(&j, 0, sizeof(j));
    j.spec_json = (char *)"{}";
    if (mt_store_job_insert(s, &j, 1, &err) != MT_OK) {
        fprintf(stderr, "job: %s\n", err.msg);
        exit(1);
    }
    memcpy(job, j.job_id, 32);
    return s;
}

/* Baseline: raw INSERTs into a plain table, same pragmas, one commit per 1000 rows.
 * *cpu_us gets the CPU microseconds per point. */
static double baseline_points_per_s(int sync_full, size_t total, double *cpu_us)
{
    double c0;
    bench_db b;
    sqlite3 *db;
    sqlite3_stmt *st;
    mt_store_metric pts[1000];
    double t0, dt;

    bench_db_init(&b, "raw");
    sqlite3_open(b.path, &db);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    sqlite3_exec(db, sync_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", NULL,
                 NULL, NULL);
    sqlite3_exec(db,
                 "CREATE TABLE m(job_id TEXT, step INTEGER, name TEXT, epoch INTEGER, value REAL,"
                 " time_ms INTEGER)",
                 NULL, NULL, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO m VALUES (?1,?2,?3,?4,?5,?6)", -1, &st, NULL);
    t0 = now_s();
    c0 = cpu_s();
    for (size_t done = 0; done < total; done += 1000) {
        fill_points(pts, 1000, done);
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        for (size_t i = 0; i < 1000; i++) {
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, "job-000001", -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, (sqlite3_int64)pts[i].step);
            sqlite3_bind_text(st, 3, pts[i].name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 4, pts[i].epoch);
            sqlite3_bind_double(st, 5, pts[i].value);
            sqlite3_bind_int64(st, 6, pts[i].time_ms);
            sqlite3_step(st);
        }
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    dt = now_s() - t0;
    *cpu_us = (cpu_s() - c0) / (double)total * 1e6;
    sqlite3_finalize(st);
    sqlite3_close(db);
    bench_db_fini(&b);
    return (double)total / dt;
}

/* Points/s through mt_store_metrics_insert with `batch` points per call; *cpu_us as above. */
static double store_points_per_s(int sync_full, size_t batch, size_t total, double *cpu_us)
{
    double c0;
    bench_db b;
    char job[32];
    mt_store *s;
    mt_store_metric *pts = calloc(batch, sizeof(*pts));
    mt_err err = MT_ERR_INIT;
    double t0, dt;

    bench_db_init(&b, "ingest");
    s = open_store(b.path, sync_full, job);
    t0 = now_s();
    c0 = cpu_s();
    for (size_t done = 0; done < total; done += batch) {
        fill_points(pts, batch, done);
        if (mt_store_metrics_insert(s, job, pts, batch, &err) != MT_OK) {
            fprintf(stderr, "insert: %s\n", err.msg);
            exit(1);
        }
    }
    dt = now_s() - t0;
    *cpu_us = (cpu_s() - c0) / (double)total * 1e6;
    mt_store_close(s);
    bench_db_fini(&b);
    free(pts);
    return (double)total / dt;
}

static void bench_queries(int sync_full)
{
    enum { TOTAL = 100000, QUERIES = 300, LIMIT = 1000 };
    bench_db b;
    char job[32];
    mt_store *s;
    mt_store_metric *pts = calloc(1000, sizeof(*pts)), *out = NULL;
    mt_err err = MT_ERR_INIT;
    double lat[QUERIES], lat2[QUERIES];
    size_t n = 0;

    bench_db_init(&b, "query");
    s = open_store(b.path, sync_full, job);
    for (size_t done = 0; done < TOTAL; done += 1000) {
        fill_points(pts, 1000, done);
        mt_store_metrics_insert(s, job, pts, 1000, &err);
    }
    srand(7);
    for (int q = 0; q < QUERIES; q++) {
        uint64_t since = (uint64_t)(rand() % (TOTAL / N_NAMES));
        double t0 = now_s();
        if (mt_store_metrics_query(s, job, since, NULL, 0, LIMIT, &out, &n, &err) != MT_OK) {
            fprintf(stderr, "query: %s\n", err.msg);
            exit(1);
        }
        lat[q] = (now_s() - t0) * 1e3;
        mt_store_metrics_free(out);
        t0 = now_s();
        mt_store_metrics_latest(s, job, &out, &n, &err);
        lat2[q] = (now_s() - t0) * 1e3;
        mt_store_metrics_free(out);
    }
    printf("since_step query (100,000 points, limit %d): p50 %.3f ms  p99 %.3f ms\n", LIMIT,
           pct(lat, QUERIES, 0.5), pct(lat, QUERIES, 0.99));
    printf("latest per name   (100,000 points, %d names): p50 %.3f ms  p99 %.3f ms\n", N_NAMES,
           pct(lat2, QUERIES, 0.5), pct(lat2, QUERIES, 0.99));
    mt_store_close(s);
    bench_db_fini(&b);
    free(pts);
}

static void bench_heartbeats(int sync_full)
{
    enum { WORKERS = 1000, ROUNDS = 50 };
    bench_db b;
    char job[32];
    mt_store *s;
    static char idbuf[WORKERS][64];
    const char *ids[WORKERS];
    int64_t times[WORKERS];
    double lat[ROUNDS];
    mt_store_device dev[2];
    mt_err err = MT_ERR_INIT;

    bench_db_init(&b, "hb");
    s = open_store(b.path, sync_full, job);
    memset(dev, 0, sizeof(dev));
    for (int d = 0; d < 2; d++) {
        snprintf(dev[d].kind, sizeof(dev[d].kind), "cpu");
        dev[d].index = (uint32_t)d;
        snprintf(dev[d].health, sizeof(dev[d].health), "ok");
    }
    mt_store_tx_begin(s, &err);
    for (int i = 0; i < WORKERS; i++) {
        mt_store_worker w;
        memset(&w, 0, sizeof(w));
        snprintf(idbuf[i], sizeof(idbuf[i]), "w-%04d", i);
        snprintf(w.worker_id, sizeof(w.worker_id), "%s", idbuf[i]);
        snprintf(w.name, sizeof(w.name), "sim-%04d", i);
        snprintf(w.state, sizeof(w.state), "alive");
        w.devices = dev;
        w.n_devices = 2;
        mt_store_worker_upsert(s, &w, &err);
        ids[i] = idbuf[i];
    }
    mt_store_tx_commit(s, &err);
    for (int r = 0; r < ROUNDS; r++) {
        size_t updated = 0;
        for (int i = 0; i < WORKERS; i++)
            times[i] = 1000 + r;
        double t0 = now_s();
        mt_store_worker_heartbeats(s, ids, times, WORKERS, &updated, &err);
        lat[r] = (now_s() - t0) * 1e3;
        if (updated != WORKERS) {
            fprintf(stderr, "heartbeats: %zu updated\n", updated);
            exit(1);
        }
    }
    printf("heartbeats batch of %d workers: p50 %.3f ms  p99 %.3f ms\n", WORKERS,
           pct(lat, ROUNDS, 0.5), pct(lat, ROUNDS, 0.99));

    /* one coordinator loop tick at the target load, grouped in one transaction: every worker's
     * heartbeat plus 50,000 points/s worth of metric reports for a 100 ms tick (10 reports of
     * 500 points) */
    {
        mt_store_metric *pts = calloc(500, sizeof(*pts));
        uint64_t next = 0;
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now_s();
            mt_store_tx_begin(s, &err);
            mt_store_worker_heartbeats(s, ids, times, WORKERS, NULL, &err);
            for (int k = 0; k < 10; k++) {
                fill_points(pts, 500, next);
                next += 500;
                if (mt_store_metrics_insert(s, job, pts, 500, &err) != MT_OK) {
                    fprintf(stderr, "tick insert: %s\n", err.msg);
                    exit(1);
                }
            }
            if (mt_store_tx_commit(s, &err) != MT_OK) {
                fprintf(stderr, "tick commit: %s\n", err.msg);
                exit(1);
            }
            lat[r] = (now_s() - t0) * 1e3;
        }
        printf("loop tick (1,000 heartbeats + 5,000 points, one commit): p50 %.3f ms  p99 %.3f ms"
               "  -> %.0f points/s if ticks ran back to back\n",
               pct(lat, ROUNDS, 0.5), pct(lat, ROUNDS, 0.99),
               5000.0 / (pct(lat, ROUNDS, 0.5) / 1e3));
        free(pts);
    }
    mt_store_close(s);
    bench_db_fini(&b);
}

int main(int argc, char **argv)
{
    enum { REPS = 3 };
    int sync_full = !(argc > 1 && strcmp(argv[1], "--normal") == 0);
    const size_t batches[] = {1, 100, 1000};
    const size_t totals[] = {300, 50000, 100000};
    double base = 0, best[3] = {0, 0, 0}, base_cpu = 1e9, cpu[3] = {1e9, 1e9, 1e9}, c;

    printf("bench_store: SQLite %s, synchronous=%s, every batch committed before the next;\n"
           "best of %d interleaved runs (the machine is shared: single runs vary a lot)\n",
           sqlite3_libversion(), sync_full ? "FULL" : "NORMAL", REPS);
    for (int r = 0; r < REPS; r++) {
        base = fmax(base, baseline_points_per_s(sync_full, 100000, &c));
        base_cpu = fmin(base_cpu, c);
        for (int i = 0; i < 3; i++) {
            best[i] = fmax(best[i], store_points_per_s(sync_full, batches[i], totals[i], &c));
            cpu[i] = fmin(cpu[i], c);
        }
    }
    printf("baseline raw INSERT loop (plain table, commit per 1000): %.0f points/s, %.2f us CPU "
           "per point\n",
           base, base_cpu);
    for (int i = 0; i < 3; i++)
        printf("mt_store_metrics_insert batch %4zu: %9.0f points/s  (%.2fx baseline), %.2f us CPU "
               "per point\n",
               batches[i], best[i], best[i] / base, cpu[i]);
    bench_queries(sync_full);
    bench_heartbeats(sync_full);
    return 0;
}
