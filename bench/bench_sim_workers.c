/* SPDX-License-Identifier: MIT */
/*
 * bench_sim_workers.c — load on a real coordinator (bench/sim-workers runs it): registers N
 * simulated workers that heartbeat every second (spread over the second) and acknowledge their
 * task assignments, submits J jobs, and streams metric reports from M threads. Prints metric
 * points ingested and persisted per second, the heartbeat round trip (p50/p99) with the
 * coordinator idle (baseline, same run) and under the metric load, and the coordinator's RSS.
 * Targets (issue #7): >= 50,000 points/s, p99 < 50 ms with 1,000 workers, RSS <= 64 MiB with
 * 1,000 workers and 100 jobs.
 *
 *   bench_sim_workers [--workers N] [--jobs J] [--seconds S] [--metric-threads M]
 *                     [--points P] [--rate POINTS_PER_S] [--fsync full|normal]
 *                     [--coordinator PATH]
 * --rate paces the metric threads (0 = as fast as they can: the ingest ceiling); the heartbeat
 * target is stated at a given ingest rate, so measure p99 with --rate 50000 too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock/mt_clock.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

#define SVC        (&meshtrain__coordinator__descriptor)
#define HB_THREADS 8

extern char **environ;

typedef struct bench {
    char url[256];
    int workers, jobs, seconds, mthreads, points;
    long rate; /* total points/s the metric threads aim at; 0 = as fast as possible */
    char job_ids[1000][32];
    atomic_int stop;
    atomic_int loaded; /* metric load running: heartbeat samples go to the loaded set */
    atomic_llong points_acked;
    atomic_llong reports_failed;
} bench;

typedef struct hb_thread {
    bench *b;
    int first, count;
    double *idle, *load; /* RTT samples in ms */
    size_t n_idle, n_load, cap;
    char (*acks)[40]; /* per worker: "job-xxxxxx/attempt" it runs, "" none */
} hb_thread;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static mt_rpc_client *client(const char *url)
{
    mt_rpc_client_opts o = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_rpc_client *c = NULL;
    mt_err err = MT_ERR_INIT;

    o.url = url;
    if (mt_rpc_client_open(&o, &c, &err) != MT_OK) {
        fprintf(stderr, "connect %s: %s\n", url, err.msg);
        exit(1);
    }
    return c;
}

static void *hb_main(void *arg)
{
    hb_thread *t = arg;
    bench *b = t->b;
    mt_rpc_client *c = client(b->url);
    char name[32], inst[32];
    int64_t start = mt_clock_mono_ms();

    for (int i = 0; i < t->count; i++) { /* register */
        Meshtrain__RegisterWorkerRequest req = MESHTRAIN__REGISTER_WORKER_REQUEST__INIT;
        Meshtrain__RegisterWorkerReply *rep = NULL;
        Meshtrain__Device d = MESHTRAIN__DEVICE__INIT, *dp = &d;
        mt_err err = MT_ERR_INIT;
        d.kind = "cpu";
        d.health = "ok";
        d.cores = 1;
        snprintf(name, sizeof(name), "sim-%05d", t->first + i);
        snprintf(inst, sizeof(inst), "i%05d", t->first + i);
        req.name = name;
        req.instance_id = inst;
        req.host = "sim";
        req.devices = &dp;
        req.n_devices = 1;
        req.data_address = "tcp://127.0.0.1:1";
        if (mt_rpc_client_call(c, SVC, "RegisterWorker", &req.base, (ProtobufCMessage **)&rep, 5000,
                               &err) != MT_OK) {
            fprintf(stderr, "register %s: %s\n", name, err.msg);
            exit(1);
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    for (int64_t round = 0; !atomic_load(&b->stop); round++) {
        for (int i = 0; i < t->count && !atomic_load(&b->stop); i++) {
            /* worker i of this thread beats at start + round*1000 + i*1000/count */
            int64_t due = start + round * 1000 + (int64_t)i * 1000 / t->count;
            int64_t now = mt_clock_mono_ms();
            Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
            Meshtrain__HeartbeatReply *rep = NULL;
            Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT, *sp = &st;
            char job[32] = "";
            unsigned attempt = 0;
            mt_err err = MT_ERR_INIT;
            int64_t t0;
            if (due > now)
                sleep_ms((int)(due - now));
            snprintf(name, sizeof(name), "sim-%05d", t->first + i);
            snprintf(inst, sizeof(inst), "i%05d", t->first + i);
            req.worker_id = name;
            req.instance_id = inst;
            if (t->acks[i][0] && sscanf(t->acks[i], "%31[^/]/%u", job, &attempt) == 2) {
                st.job_id = job;
                st.attempt = attempt;
                st.state = "running";
                req.tasks = &sp;
                req.n_tasks = 1;
            }
            t0 = mt_clock_mono_us();
            if (mt_rpc_client_call(c, SVC, "Heartbeat", &req.base, (ProtobufCMessage **)&rep, 5000,
                                   &err) != MT_OK) {
                fprintf(stderr, "heartbeat %s: %s\n", name, err.msg);
                continue;
            }
            double ms = (double)(mt_clock_mono_us() - t0) / 1000.0;
            if (rep->n_assignments > 0)
                snprintf(t->acks[i], sizeof(t->acks[i]), "%s/%u", rep->assignments[0]->job_id,
                         rep->assignments[0]->attempt);
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            if (t->n_idle < t->cap && !atomic_load(&b->loaded) && round >= 1)
                t->idle[t->n_idle++] = ms;
            else if (t->n_load < t->cap && atomic_load(&b->loaded))
                t->load[t->n_load++] = ms;
        }
    }
    mt_rpc_client_close(c);
    return NULL;
}

static void *metrics_main(void *arg)
{
    bench *b = arg;
    static atomic_int next_id;
    int id = atomic_fetch_add(&next_id, 1);
    mt_rpc_client *c = client(b->url);
    Meshtrain__MetricPoint *pts = calloc((size_t)b->points, sizeof(*pts));
    Meshtrain__MetricPoint **pp = calloc((size_t)b->points, sizeof(*pp));
    static const char *const names[] = {"loss", "accuracy", "examples_per_sec", "step_ms"};
    uint64_t step = 1;
    int64_t t0 = mt_clock_mono_us();

    for (int64_t k = 0; !atomic_load(&b->stop); k++) {
        if (b->rate > 0) { /* pace: report k of this thread is due at k * points / (rate/M) */
            int64_t due =
                t0 + (int64_t)((double)k * b->points * b->mthreads / (double)b->rate * 1e6);
            int64_t now = mt_clock_mono_us();
            if (due > now)
                sleep_ms((int)((due - now) / 1000));
        }
        Meshtrain__ReportMetricsRequest req = MESHTRAIN__REPORT_METRICS_REQUEST__INIT;
        Meshtrain__ReportMetricsReply *rep = NULL;
        int j = (int)((k * b->mthreads + id) % b->jobs);
        for (int i = 0; i < b->points; i++) {
            meshtrain__metric_point__init(&pts[i]);
            pts[i].step = step + (uint64_t)(i / 4);
            pts[i].name = (char *)names[i % 4];
            pts[i].value = 1.0 / (double)(pts[i].step + 1);
            pts[i].time_ms = mt_clock_wall_ms();
            pp[i] = &pts[i];
        }
        if (j == b->jobs - 1)
            step += (uint64_t)(b->points / 4) + 1;
        req.worker_id = "sim-00000";
        req.job_id = b->job_ids[j];
        req.points = pp;
        req.n_points = (size_t)b->points;
        if (mt_rpc_client_call(c, SVC, "ReportMetrics", &req.base, (ProtobufCMessage **)&rep, 10000,
                               NULL) == MT_OK) {
            atomic_fetch_add(&b->points_acked, (long long)rep->stored);
            protobuf_c_message_free_unpacked(&rep->base, NULL);
        } else {
            atomic_fetch_add(&b->reports_failed, 1);
        }
    }
    free(pts);
    free(pp);
    mt_rpc_client_close(c);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_d);
    return v[(size_t)(p * (double)(n - 1))];
}

static long rss_kib(pid_t pid, const char *key)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0)
            v = strtol(line + strlen(key) + 1, NULL, 10);
    fclose(f);
    return v;
}

static int submit_jobs(bench *b)
{
    mt_rpc_client *c = client(b->url);
    const char *spec = "{\"steps\": 1000000, \"model\": {\"input_shape\": [28, 28, 1], "
                       "\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": "
                       "10}]}}";

    for (int i = 0; i < b->jobs; i++) {
        Meshtrain__SubmitJobRequest req = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
        Meshtrain__SubmitJobReply *rep = NULL;
        mt_err err = MT_ERR_INIT;
        req.spec_json = (char *)spec;
        req.name = "sim";
        if (mt_rpc_client_call(c, SVC, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, 10000,
                               &err) != MT_OK) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return -1;
        }
        snprintf(b->job_ids[i], sizeof(b->job_ids[i]), "%s", rep->job_id);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    mt_rpc_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    static bench b;
    char dir[] = "/tmp/mt-simworkers.XXXXXX", coord[1024], ep[1200], log[1200];
    const char *coord_bin = NULL, *fsync_mode = "full";
    pthread_t hb[HB_THREADS], *mt;
    hb_thread ht[HB_THREADS];
    pid_t pid;
    FILE *f;
    int per;

    b.workers = 1000;
    b.jobs = 100;
    b.seconds = 10;
    b.mthreads = 2;
    b.points = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--workers") == 0)
            b.workers = (int)v;
        else if (strcmp(argv[i], "--jobs") == 0)
            b.jobs = (int)(v < 1 ? 1 : v > 1000 ? 1000 : v);
        else if (strcmp(argv[i], "--seconds") == 0)
            b.seconds = (int)v;
        else if (strcmp(argv[i], "--metric-threads") == 0)
            b.mthreads = (int)v;
        else if (strcmp(argv[i], "--points") == 0)
            b.points = (int)(v < 4 ? 4 : v > 10000 ? 10000 : v);
        else if (strcmp(argv[i], "--rate") == 0)
            b.rate = v;
        else if (strcmp(argv[i], "--fsync") == 0)
            fsync_mode = argv[i + 1];
        else if (strcmp(argv[i], "--coordinator") == 0)
            coord_bin = argv[i + 1];
    }
    if (coord_bin == NULL) {
        const char *slash = strrchr(argv[0], '/');
        snprintf(coord, sizeof(coord), "%.*smeshtrain-coordinator",
                 slash ? (int)(slash - argv[0] + 1) : 0, argv[0]);
        coord_bin = coord;
    }
    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(log, sizeof(log), "%s/coordinator.log", dir);
    {
        char *cargv[] = {
            (char *)coord_bin, "--state-dir", dir,           "--listen", "tcp://127.0.0.1:0",
            "--http",          "off",         "--log-level", "warn",     NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (posix_spawn(&pid, coord_bin, &fa, NULL, cargv, environ) != 0) {
            fprintf(stderr, "cannot start %s\n", coord_bin);
            return 1;
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    snprintf(ep, sizeof(ep), "%s/endpoints.json", dir);
    for (int i = 0; i < 200 && (f = fopen(ep, "r")) == NULL; i++)
        sleep_ms(50);
    if (f == NULL || fscanf(f, "{\"rpc\": \"%255[^\"]\"", b.url) != 1) {
        fprintf(stderr, "coordinator did not start (see %s)\n", log);
        kill(pid, SIGKILL);
        return 1;
    }
    fclose(f);

    printf("coordinator %s (--fsync %s), %d simulated workers, %d jobs, metric rate %s\n", b.url,
           fsync_mode, b.workers, b.jobs, b.rate ? "paced" : "unpaced (as fast as possible)");
    per = (b.workers + HB_THREADS - 1) / HB_THREADS;
    for (int i = 0; i < HB_THREADS; i++) {
        memset(&ht[i], 0, sizeof(ht[i]));
        ht[i].b = &b;
        ht[i].first = i * per;
        ht[i].count = i * per + per <= b.workers ? per : b.workers - i * per;
        if (ht[i].count < 0)
            ht[i].count = 0;
        ht[i].cap = (size_t)(per * (b.seconds + 10) + 16);
        ht[i].idle = calloc(ht[i].cap, sizeof(double));
        ht[i].load = calloc(ht[i].cap, sizeof(double));
        ht[i].acks = calloc((size_t)per + 1, sizeof(*ht[i].acks));
        pthread_create(&hb[i], NULL, hb_main, &ht[i]);
    }
    sleep_ms(500);
    if (submit_jobs(&b) != 0) {
        kill(pid, SIGKILL);
        return 1;
    }
    sleep_ms(4000); /* idle baseline: heartbeats only */
    atomic_store(&b.loaded, 1);
    mt = calloc((size_t)b.mthreads, sizeof(*mt));
    int64_t t0 = mt_clock_mono_us();
    for (int i = 0; i < b.mthreads; i++)
        pthread_create(&mt[i], NULL, metrics_main, &b);
    sleep_ms(b.seconds * 1000);
    long rss = rss_kib(pid, "VmRSS:"), hwm = rss_kib(pid, "VmHWM:");
    atomic_store(&b.stop, 1);
    for (int i = 0; i < b.mthreads; i++)
        pthread_join(mt[i], NULL);
    double secs = (double)(mt_clock_mono_us() - t0) / 1e6;
    for (int i = 0; i < HB_THREADS; i++)
        pthread_join(hb[i], NULL);

    size_t ni = 0, nl = 0;
    double *idle = calloc((size_t)b.workers * (size_t)(b.seconds + 10) + 16, sizeof(double));
    double *load = calloc((size_t)b.workers * (size_t)(b.seconds + 10) + 16, sizeof(double));
    for (int i = 0; i < HB_THREADS; i++) {
        memcpy(idle + ni, ht[i].idle, ht[i].n_idle * sizeof(double));
        memcpy(load + nl, ht[i].load, ht[i].n_load * sizeof(double));
        ni += ht[i].n_idle;
        nl += ht[i].n_load;
        free(ht[i].idle);
        free(ht[i].load);
        free(ht[i].acks);
    }
    double pps = (double)atomic_load(&b.points_acked) / secs;
    double p99i = pct(idle, ni, 0.99), p99l = pct(load, nl, 0.99);
    printf("metric points ingested and persisted: %.0f /s (%lld points in %.1f s, %d threads x "
           "%d points per report, %lld reports failed)   target >= 50000\n",
           pps, (long long)atomic_load(&b.points_acked), secs, b.mthreads, b.points,
           (long long)atomic_load(&b.reports_failed));
    printf("heartbeat round trip, idle (baseline): p50 %.2f ms, p99 %.2f ms (%zu beats)\n",
           pct(idle, ni, 0.5), p99i, ni);
    printf("heartbeat round trip, under metric load: p50 %.2f ms, p99 %.2f ms (%zu beats), "
           "p99 ratio to baseline %.1fx   target p99 < 50 ms\n",
           pct(load, nl, 0.5), p99l, nl, p99i > 0 ? p99l / p99i : 0.0);
    printf("coordinator RSS with %d workers and %d jobs: %.1f MiB (peak %.1f MiB)   target <= 64 "
           "MiB\n",
           b.workers, b.jobs, (double)rss / 1024.0, (double)hwm / 1024.0);
    free(idle);
    free(load);
    free(mt);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    printf("state and log in %s\n", dir);
    return 0;
}
