/* SPDX-License-Identifier: MIT */
/*
 * bench_list.c — ListJobs under concurrency without the cost of starting processes: N client
 * threads, each with its own connection (mt_rpc_client), released together, each makes one
 * ListJobs call per round (LIMIT jobs per page; --all pages follow the cursor); prints p50, p99
 * and max of the call latencies. bench/list_jobs.sh runs it against a coordinator seeded with
 * 1,201 jobs (issue 19, fault 10).
 * usage: bench_list RPC_URL [--clients N] [--rounds R] [--limit L] [--all]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock/mt_clock.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

typedef struct client {
    pthread_t th;
    mt_rpc_client *cli;
    double *ms; /* [rounds] */
    int failed;
} client;

static const char *g_url;
static int g_rounds = 3, g_limit = 0, g_all = 0;
static pthread_barrier_t g_gate;

static int list_once(mt_rpc_client *cli)
{
    Meshtrain__ListJobsRequest req = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *rep = NULL;
    char cursor[64] = "";
    mt_err err = MT_ERR_INIT;

    req.limit = (uint32_t)g_limit;
    do {
        req.cursor = cursor;
        if (mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, "ListJobs", &req.base,
                               (ProtobufCMessage **)&rep, 30000, &err) != MT_OK) {
            fprintf(stderr, "bench_list: %s\n", err.msg);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", rep->next_cursor);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } while (g_all && cursor[0] != '\0');
    return 0;
}

static void *run(void *arg)
{
    client *c = arg;

    for (int r = 0; r < g_rounds; r++) {
        int64_t t0;
        pthread_barrier_wait(&g_gate);
        t0 = mt_clock_mono_us();
        if (list_once(c->cli) != 0)
            c->failed = 1;
        c->ms[r] = (double)(mt_clock_mono_us() - t0) / 1000.0;
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = 200;
    client *cs;
    double *all;
    size_t k = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: bench_list RPC_URL [--clients N] [--rounds R] [--limit L] "
                        "[--all]\n");
        return 2;
    }
    g_url = argv[1];
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
            n = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            g_rounds = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            g_limit = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--all") == 0)
            g_all = 1;
    }
    if (n < 1 || g_rounds < 1)
        return 2;
    cs = calloc((size_t)n, sizeof(*cs));
    all = calloc((size_t)n * (size_t)g_rounds, sizeof(*all));
    if (cs == NULL || all == NULL)
        return 1;
    pthread_barrier_init(&g_gate, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        mt_rpc_client_opts o = {0};
        mt_err err = MT_ERR_INIT;
        o.url = g_url;
        o.connect_timeout_ms = 10000;
        cs[i].ms = calloc((size_t)g_rounds, sizeof(double));
        if (cs[i].ms == NULL || mt_rpc_client_open(&o, &cs[i].cli, &err) != MT_OK) {
            fprintf(stderr, "bench_list: %s\n", err.msg);
            return 1;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_create(&cs[i].th, NULL, run, &cs[i]);
    for (int i = 0; i < n; i++) {
        pthread_join(cs[i].th, NULL);
        if (cs[i].failed)
            return 1;
        for (int r = 0; r < g_rounds; r++)
            all[k++] = cs[i].ms[r];
        mt_rpc_client_close(cs[i].cli);
        free(cs[i].ms);
    }
    qsort(all, k, sizeof(*all), cmp);
    printf("p50 %4.0f ms  p99 %4.0f ms  max %4.0f ms  (n=%zu)\n", all[k / 2],
           all[(size_t)((double)k * 0.99)], all[k - 1], k);
    free(all);
    free(cs);
    return 0;
}
