/* SPDX-License-Identifier: MIT */
/*
 * bench_tls.c — what TLS costs the data plane: two data-plane endpoints in this process (standing
 * for two workers, one device each) run allreduces over tcp:// (the baseline) and then over
 * tls+tcp:// (mutual TLS, EC P-256 certificates), same sizes, same run. Prints the median time
 * per allreduce, the algorithm bandwidth and the TLS / plain ratio, and the time of the first
 * allreduce (connection set-up, including the TLS handshakes).
 * Run: bash tests/integration/tls_certs.sh /tmp/certs && build/bench_tls /tmp/certs [MB]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/mt_coll.h"
#include "tls/mt_tls.h"

#define REPS 9

typedef struct dev {
    mt_coll_comm *comm;
    float *buf;
    size_t n;
    double secs[REPS + 1]; /* [0] is the first (set-up) call */
    mt_code rc;
    mt_err err;
} dev;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *dev_main(void *p)
{
    static const int members[] = {0, 1};
    const mt_coll_group g = {members, 2};
    dev *d = p;
    for (int r = 0; r <= REPS && d->rc == MT_OK; r++) {
        mt_coll_call call = {(uint64_t)r, 0, 60000};
        double t0 = now_s();
        d->rc = mt_coll_allreduce_sum(d->comm, &g, d->buf, d->n, &call, &d->err);
        d->secs[r] = now_s() - t0;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds per allreduce of n floats over url (tls may be NULL); *setup: the first call. */
static double run(const char *url, const mt_tls *tls, size_t n, double *setup)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    mt_coll_rank_addr table[2];
    pthread_t th[2];
    dev d[2];
    mt_err err = MT_ERR_INIT;

    o.job_id = 1;
    memset(d, 0, sizeof(d));
    for (int k = 0; k < 2; k++) {
        if (mt_coll_net_new_tls(url, tls, &nets[k], &err) != MT_OK) {
            fprintf(stderr, "bench_tls: %s\n", err.msg);
            exit(1);
        }
        table[k] = (mt_coll_rank_addr){mt_coll_net_addr(nets[k]), 0};
    }
    for (int k = 0; k < 2; k++) {
        if (mt_coll_world_new_net(nets[k], 2, table, &o, &ws[k], &err) != MT_OK) {
            fprintf(stderr, "bench_tls: %s\n", err.msg);
            exit(1);
        }
        d[k].comm = mt_coll_world_comm(ws[k], k);
        d[k].n = n;
        d[k].buf = calloc(n, sizeof(float));
        pthread_create(&th[k], NULL, dev_main, &d[k]);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        if (d[k].rc != MT_OK) {
            fprintf(stderr, "bench_tls: %s: %s\n", url, d[k].err.msg);
            exit(1);
        }
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
        free(d[k].buf);
    }
    *setup = d[0].secs[0];
    qsort(d[0].secs + 1, REPS, sizeof(double), cmp_double);
    return d[0].secs[1 + REPS / 2];
}

int main(int argc, char **argv)
{
    char cert[512], key[512], ca[512];
    mt_tls_opts to = MT_TLS_OPTS_DEFAULTS;
    mt_tls *tls = NULL;
    mt_err err = MT_ERR_INIT;
    double mb = argc > 2 ? atof(argv[2]) : 16.0;

    if (argc < 2 || mb <= 0) {
        fprintf(stderr, "usage: bench_tls CERT_DIR [MB]  (CERT_DIR from tls_certs.sh)\n");
        return 2;
    }
    snprintf(cert, sizeof(cert), "%s/server.pem", argv[1]);
    snprintf(key, sizeof(key), "%s/server.key", argv[1]);
    snprintf(ca, sizeof(ca), "%s/ca.pem", argv[1]);
    to.cert_file = cert;
    to.key_file = key;
    to.ca_file = ca;
    to.server_name = "localhost";
    if (mt_tls_new(&to, &tls, &err) != MT_OK) {
        fprintf(stderr, "bench_tls: %s\n", err.msg);
        return 1;
    }
    printf("allreduce of %.1f MB between 2 endpoints (loopback), median of %d\n", mb, REPS);
    printf("%-10s %12s %12s %14s\n", "transport", "ms/allreduce", "MB/s (algo)", "first call ms");
    for (double size = mb / 16; size <= mb * 1.0001; size *= 4) {
        size_t n = (size_t)(size * 1e6 / sizeof(float));
        double s_plain, s_tls, setup_plain, setup_tls;
        s_plain = run("tcp://127.0.0.1:0", NULL, n, &setup_plain);
        s_tls = run("tls+tcp://127.0.0.1:0", tls, n, &setup_tls);
        printf("%-10s %12.2f %12.1f %14.2f   (%.2f MB)\n", "tcp", s_plain * 1e3, size / s_plain,
               setup_plain * 1e3, size);
        printf("%-10s %12.2f %12.1f %14.2f   tls/tcp time ratio %.2f\n", "tls+tcp", s_tls * 1e3,
               size / s_tls, setup_tls * 1e3, s_tls / s_plain);
    }
    mt_tls_free(tls);
    return 0;
}
