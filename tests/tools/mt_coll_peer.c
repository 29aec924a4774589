/* SPDX-License-Identifier: MIT */
/*
 * mt_coll_peer.c — one worker process of a collective test or benchmark.
 *
 * Spawned by tests/integration/test_coll_procs.sh and bench/coll.sh. It opens
 * a data-plane endpoint, writes its bound address to --addr-file, waits for the
 * job's rank table (--table-file: lines "RANK ADDRESS LOCAL_INDEX"), runs one
 * thread per local device and:
 *   --mode check  runs allreduce / reduce-scatter / allgather / broadcast /
 *                 barrier on deterministic data for every --sizes entry, over
 *                 the groups given by --mesh RxC --dim D (default: all ranks),
 *                 checks each result bit-exactly against the documented serial
 *                 order and against a double sum, and prints per rank
 *                 "RESULT rank=R ok checksum=H" (H: FNV-1a of every result);
 *   --mode repeat runs --iters consecutive allreduces of every --sizes entry on fresh data,
 *                 each checked bit-exactly against the serial order; with --skew-us U
 *                 the member at position k mod p sleeps U us before allreduce k, so every
 *                 member is sometimes late and its peers' frames arrive before it posts;
 *                 a barrier follows every odd iteration (prints RESULT lines like check);
 *   --mode loop   repeats an allreduce of --sizes[0] floats --iters times,
 *                 printing "STARTED" once (for kill / stop tests);
 *   --mode bench  times allreduce for every size (best of 3 trials) and prints
 *                 "BENCH ..." lines (lat_us: the best trial's mean; med_us, min_us: the
 *                 median and the fastest single call over the trials).
 * On a failure it prints "ERROR rank=R code=NAME elapsed_ms=T msg=..." and
 * exits with the mt_code number. --alarm S (default 60) bounds its lifetime.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../unit/coll_test_util.h"
#include "coll/mt_coll.h"

#define MAX_RANKS 64
#define MAX_SIZES 32

typedef struct peer_cfg {
    const char *listen, *addr_file, *table_file, *mode;
    uint64_t job, step_base, seed;
    size_t sizes[MAX_SIZES];
    int nsizes;
    long size_add; /* added to every size (mismatch tests) */
    int rows, cols, dim;
    long iters;
    long skew_us; /* --mode repeat: the late member's sleep */
    int64_t deadline_ms;
    size_t segment_bytes;
    long direct_bytes; /* -1: world default */
    int world;
    char *addrs[MAX_RANKS];
    int local_index[MAX_RANKS];
} peer_cfg;

typedef struct dev {
    const peer_cfg *cfg;
    mt_coll_world *w;
    int rank;
    mt_code rc;
    mt_err err;
    uint64_t checksum;
    double t_fail;
} dev;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* The group of `rank` along cfg->dim of a rows x cols row-major layout (or all ranks). */
static int group_of(const peer_cfg *cfg, int rank, int *g)
{
    int n = 0;
    if (cfg->rows <= 0) {
        for (int r = 0; r < cfg->world; r++)
            g[n++] = r;
        return n;
    }
    int row = rank / cfg->cols, col = rank % cfg->cols;
    if (cfg->dim == 0) {
        for (int r = 0; r < cfg->rows; r++)
            g[n++] = r * cfg->cols + col;
    } else {
        for (int c = 0; c < cfg->cols; c++)
            g[n++] = row * cfg->cols + c;
    }
    return n;
}

static int fail(dev *d, mt_code rc, double t0)
{
    d->rc = rc;
    d->t_fail = now_s() - t0;
    return -1;
}

/* Free the p input rows of check_size / repeat_size and their result buffers. */
static void free_inputs(float **in, int p, float *ref, float *buf)
{
    for (int i = 0; i < p; i++)
        free(in[i]);
    free(in);
    free(ref);
    free(buf);
}

/* Check mode for one size: every collective, results against the serial order. */
static int check_size(dev *d, mt_coll_comm *c, const mt_coll_group *grp, size_t n, uint64_t seed,
                      double t0)
{
    int p = grp->size, pos = 0;
    size_t nn = n + (size_t)d->cfg->size_add;
    float *buf = calloc(nn * (size_t)p + 1, sizeof(float));
    float *ref = calloc(n + 1, sizeof(float));
    float **in = calloc((size_t)p, sizeof(float *));
    int bad = 0;
    for (int i = 0; i < p; i++) {
        in[i] = calloc(n + 1, sizeof(float));
        for (size_t e = 0; e < n; e++)
            in[i][e] = ct_val(grp->ranks[i], e, seed);
        if (grp->ranks[i] == d->rank)
            pos = i;
    }
    mt_coll_reference_allreduce((const float *const *)in, p, n, ref);
    memcpy(buf, in[pos], n * sizeof(float));
    mt_code rc = mt_coll_allreduce_sum(c, grp, buf, nn, NULL, &d->err);
    if (rc != MT_OK) {
        bad = fail(d, rc, t0);
        goto out;
    }
    for (size_t e = 0; e < n && !bad; e++) {
        double s = 0;
        for (int i = 0; i < p; i++)
            s += in[i][e];
        if (memcmp(&buf[e], &ref[e], sizeof(float)) != 0 ||
            fabs((double)buf[e] - s) > 1e-5 * fabs(s) + 1e-4) {
            mt_err_set(&d->err, MT_INTERNAL, "allreduce n=%zu element %zu: %.9g, serial %.9g", n, e,
                       (double)buf[e], (double)ref[e]);
            bad = fail(d, MT_INTERNAL, t0);
        }
    }
    d->checksum = fnv(d->checksum, buf, n * sizeof(float));
    /* reduce-scatter: this member's chunk of the same result */
    size_t off, len;
    mt_coll_chunk_range(n, p, pos, &off, &len);
    if (!bad && (rc = mt_coll_reduce_scatter(c, grp, in[pos], buf, nn, NULL, &d->err)) != MT_OK)
        bad = fail(d, rc, t0);
    if (!bad && len > 0 && memcmp(buf, ref + off, len * sizeof(float)) != 0) {
        mt_err_set(&d->err, MT_INTERNAL, "reduce_scatter n=%zu differs from the serial order", n);
        bad = fail(d, MT_INTERNAL, t0);
    }
    /* allgather of every member's input */
    if (!bad && (rc = mt_coll_allgather(c, grp, in[pos], buf, nn, NULL, &d->err)) != MT_OK)
        bad = fail(d, rc, t0);
    for (int i = 0; i < p && !bad; i++) {
        if (n > 0 && memcmp(buf + (size_t)i * n, in[i], n * sizeof(float)) != 0) {
            mt_err_set(&d->err, MT_INTERNAL, "allgather n=%zu block %d differs", n, i);
            bad = fail(d, MT_INTERNAL, t0);
        }
    }
    /* broadcast from the last member */
    int root = grp->ranks[p - 1];
    memcpy(buf, in[pos], n * sizeof(float));
    if (!bad && (rc = mt_coll_broadcast(c, grp, buf, nn, root, NULL, &d->err)) != MT_OK)
        bad = fail(d, rc, t0);
    if (!bad && n > 0 && memcmp(buf, in[p - 1], n * sizeof(float)) != 0) {
        mt_err_set(&d->err, MT_INTERNAL, "broadcast n=%zu differs from the root's data", n);
        bad = fail(d, MT_INTERNAL, t0);
    }
    if (!bad && (rc = mt_coll_barrier(c, grp, NULL, &d->err)) != MT_OK)
        bad = fail(d, rc, t0);
out:
    free_inputs(in, p, ref, buf);
    return bad;
}

/* Repeat mode for one size: iters consecutive allreduces, each checked (see the header). */
static int repeat_size(dev *d, mt_coll_comm *c, const mt_coll_group *grp, size_t n, uint64_t seed,
                       double t0)
{
    int p = grp->size, pos = 0, bad = 0;
    float *buf = calloc(n + 1, sizeof(float)), *ref = calloc(n + 1, sizeof(float));
    float **in = calloc((size_t)p, sizeof(float *));
    for (int i = 0; i < p; i++) {
        in[i] = calloc(n + 1, sizeof(float));
        if (grp->ranks[i] == d->rank)
            pos = i;
    }
    for (long k = 0; k < d->cfg->iters && !bad; k++) {
        for (int i = 0; i < p; i++) {
            for (size_t e = 0; e < n; e++)
                in[i][e] = ct_val(grp->ranks[i], e, seed + (uint64_t)k);
        }
        mt_coll_reference_allreduce((const float *const *)in, p, n, ref);
        memcpy(buf, in[pos], n * sizeof(float));
        if (d->cfg->skew_us > 0 && k % p == pos)
            usleep((useconds_t)d->cfg->skew_us);
        mt_code rc = mt_coll_allreduce_sum(c, grp, buf, n, NULL, &d->err);
        if (rc != MT_OK) {
            bad = fail(d, rc, t0);
        } else if (n > 0 && memcmp(buf, ref, n * sizeof(float)) != 0) {
            mt_err_set(&d->err, MT_INTERNAL, "allreduce %ld of n=%zu differs from the serial order",
                       k, n);
            bad = fail(d, MT_INTERNAL, t0);
        }
        d->checksum = fnv(d->checksum, buf, n * sizeof(float));
        /* after odd iterations a barrier: the next allreduce starts without driven sockets */
        if (!bad && (k & 1) && (rc = mt_coll_barrier(c, grp, NULL, &d->err)) != MT_OK)
            bad = fail(d, rc, t0);
    }
    free_inputs(in, p, ref, buf);
    return bad;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_bench(dev *d, mt_coll_comm *c, const mt_coll_group *grp, double t0)
{
    for (int si = 0; si < d->cfg->nsizes; si++) {
        size_t n = d->cfg->sizes[si];
        float *buf = calloc(n + 1, sizeof(float));
        float it = 0;
        mt_code rc = MT_OK;
        for (size_t e = 0; e < n; e++)
            buf[e] = ct_val(d->rank, e, 1) * 1e-3f;
        /* warm up (the first call dials and maps the rings: untimed, or the count below
         * would be a few calls and the trials' means their first call's), then rank 0 picks
         * an iteration count for ~0.25 s that everyone uses, as bench/mpi_allreduce.c does */
        rc = mt_coll_allreduce_sum(c, grp, buf, n, NULL, &d->err);
        double a = now_s();
        for (int k = 0; k < 3 && rc == MT_OK; k++)
            rc = mt_coll_allreduce_sum(c, grp, buf, n, NULL, &d->err);
        double per = (now_s() - a) / 3;
        if (d->cfg->iters > 0)
            it = (float)d->cfg->iters;
        else
            it = (float)(per > 0 ? 0.25 / per : 1000);
        it = it < 5 ? 5 : (it > 2000 ? 2000 : (float)floor(it));
        if (rc == MT_OK)
            rc = mt_coll_broadcast(c, grp, &it, 1, grp->ranks[0], NULL, &d->err);
        /* best of 3 timed trials: the machine is shared, the minimum is the least disturbed;
         * each call is timed too (its median and minimum over the trials: what a call costs
         * when both sides run, which a loaded machine's mean hides) */
        double secs = 1e30, *each = calloc(3 * (size_t)it, sizeof(double));
        size_t ne = 0;
        for (int trial = 0; trial < 3 && rc == MT_OK; trial++) {
            rc = mt_coll_barrier(c, grp, NULL, &d->err);
            a = now_s();
            double b = a;
            for (long k = 0; k < (long)it && rc == MT_OK; k++) {
                rc = mt_coll_allreduce_sum(c, grp, buf, n, NULL, &d->err);
                double e = now_s();
                if (each != NULL)
                    each[ne++] = e - b;
                b = e;
            }
            double t = (now_s() - a) / it;
            secs = t < secs ? t : secs;
        }
        double med = 0, least = 0;
        if (each != NULL && ne > 0) {
            qsort(each, ne, sizeof(double), cmp_double);
            med = each[ne / 2];
            least = each[0];
        }
        free(each);
        free(buf);
        if (rc != MT_OK) {
            fail(d, rc, t0);
            return;
        }
        if (d->rank == grp->ranks[0]) {
            double bytes = (double)n * sizeof(float), p = grp->size;
            double algbw = bytes / secs / 1e9;
            printf("BENCH bytes=%.0f ranks=%d iters=%.0f lat_us=%.1f algbw_GBps=%.3f "
                   "busbw_GBps=%.3f med_us=%.1f min_us=%.1f\n",
                   bytes, grp->size, (double)it, secs * 1e6, algbw, algbw * 2 * (p - 1) / p,
                   med * 1e6, least * 1e6);
            fflush(stdout);
        }
    }
}

static void *dev_main(void *arg)
{
    dev *d = arg;
    const peer_cfg *cfg = d->cfg;
    mt_coll_comm *c = mt_coll_world_comm(d->w, d->rank);
    int g[MAX_RANKS];
    mt_coll_group grp = {g, group_of(cfg, d->rank, g)};
    double t0 = now_s();
    d->checksum = 0xcbf29ce484222325ULL;
    mt_coll_comm_set_step(c, cfg->step_base);
    if (strcmp(cfg->mode, "check") == 0) {
        for (int si = 0; si < cfg->nsizes; si++) {
            mt_coll_comm_set_step(c, cfg->step_base + (uint64_t)si);
            if (check_size(d, c, &grp, cfg->sizes[si], cfg->seed + (uint64_t)si, t0) != 0)
                return NULL;
        }
    } else if (strcmp(cfg->mode, "repeat") == 0) {
        for (int si = 0; si < cfg->nsizes; si++) {
            if (repeat_size(d, c, &grp, cfg->sizes[si], cfg->seed + 1000 * (uint64_t)si, t0) != 0)
                return NULL;
        }
    } else if (strcmp(cfg->mode, "loop") == 0) {
        size_t n = cfg->sizes[0];
        float *buf = calloc(n + 1, sizeof(float));
        for (long k = 0; k < cfg->iters; k++) {
            mt_coll_comm_set_step(c, cfg->step_base + (uint64_t)k);
            for (size_t e = 0; e < n; e++)
                buf[e] = ct_val(d->rank, e, (uint64_t)k);
            t0 = now_s();
            mt_code rc = mt_coll_allreduce_sum(c, &grp, buf, n, NULL, &d->err);
            if (rc != MT_OK) {
                fail(d, rc, t0);
                break;
            }
            if (k == 0 && d->rank == mt_coll_comm_rank(c)) {
                printf("STARTED rank=%d\n", d->rank);
                fflush(stdout);
            }
        }
        free(buf);
    } else {
        run_bench(d, c, &grp, t0);
    }
    return NULL;
}

static int parse_sizes(peer_cfg *cfg, const char *s)
{
    char *end;
    cfg->nsizes = 0;
    while (*s != '\0' && cfg->nsizes < MAX_SIZES) {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || errno != 0)
            return -1;
        cfg->sizes[cfg->nsizes++] = (size_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return cfg->nsizes > 0 ? 0 : -1;
}

/* Wait (up to 30 s) for the table file, then read "rank addr local_index" lines. */
static int read_table(peer_cfg *cfg)
{
    FILE *f = NULL;
    for (int i = 0; i < 3000 && f == NULL; i++) {
        f = fopen(cfg->table_file, "r");
        if (f == NULL)
            usleep(10000);
    }
    if (f == NULL)
        return -1;
    char line[512], addr[300];
    int rank, li;
    cfg->world = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%d %299s %d", &rank, addr, &li) != 3 || rank < 0 || rank >= MAX_RANKS)
            continue;
        cfg->addrs[rank] = strdup(addr);
        cfg->local_index[rank] = li;
        if (rank + 1 > cfg->world)
            cfg->world = rank + 1;
    }
    fclose(f);
    for (int r = 0; r < cfg->world; r++) {
        if (cfg->addrs[r] == NULL)
            return -1;
    }
    return cfg->world > 0 ? 0 : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: mt_coll_peer --listen URL --addr-file F --table-file T [--mode "
                    "check|repeat|loop|bench] [--sizes a,b,..] [--seed S] [--job J] [--step S] "
                    "[--size-add K] [--mesh RxC --dim D] [--iters K] [--skew-us U] [--deadline MS] "
                    "[--segment BYTES] [--direct BYTES] [--shm auto|off] [--axes NAME=N,..] "
                    "[--token T] [--drive 0|1] [--window 0|1] "
                    "[--yields N] [--spin-us U] "
                    "[--alarm SECONDS]\n");
}

int main(int argc, char **argv)
{
    peer_cfg cfg = {.mode = "check",
                    .seed = 1,
                    .deadline_ms = 5000,
                    .iters = 0,
                    .segment_bytes = 256 * 1024,
                    .direct_bytes = -1};
    unsigned alarm_s = 60;            /* hard limit: SIGALRM ends a test process that hangs */
    int shm_off = 0;                  /* --shm off: connections stay on their sockets */
    const char *token = NULL;         /* --token: the data-plane token */
    const char *axes = NULL;          /* --axes: the mesh named in errors (world option mesh) */
    int drive_off = 0, yields = 1000; /* --drive 0, --yields N: world options drive* */
    int spin_us = -1;                 /* --spin-us U: drive_spin_us (-1: the default) */
    int window_off = 0;               /* --window 0: no host window (world option window) */
    cfg.sizes[0] = 1;
    cfg.nsizes = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--listen") == 0)
            cfg.listen = v;
        else if (strcmp(a, "--addr-file") == 0)
            cfg.addr_file = v;
        else if (strcmp(a, "--table-file") == 0)
            cfg.table_file = v;
        else if (strcmp(a, "--mode") == 0)
            cfg.mode = v;
        else if (strcmp(a, "--sizes") == 0) {
            if (parse_sizes(&cfg, v) != 0) {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--seed") == 0)
            cfg.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--job") == 0)
            cfg.job = strtoull(v, NULL, 10);
        else if (strcmp(a, "--step") == 0)
            cfg.step_base = strtoull(v, NULL, 10);
        else if (strcmp(a, "--size-add") == 0)
            cfg.size_add = strtol(v, NULL, 10);
        else if (strcmp(a, "--mesh") == 0) {
            if (sscanf(v, "%dx%d", &cfg.rows, &cfg.cols) != 2) {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--dim") == 0)
            cfg.dim = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--iters") == 0)
            cfg.iters = strtol(v, NULL, 10);
        else if (strcmp(a, "--skew-us") == 0)
            cfg.skew_us = strtol(v, NULL, 10);
        else if (strcmp(a, "--deadline") == 0)
            cfg.deadline_ms = strtoll(v, NULL, 10);
        else if (strcmp(a, "--alarm") == 0)
            alarm_s = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--direct") == 0)
            cfg.direct_bytes = strtol(v, NULL, 10);
        else if (strcmp(a, "--drive") == 0)
            drive_off = strcmp(v, "0") == 0;
        else if (strcmp(a, "--window") == 0)
            window_off = strcmp(v, "0") == 0;
        else if (strcmp(a, "--yields") == 0)
            yields = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--spin-us") == 0)
            spin_us = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--axes") == 0)
            axes = v;
        else if (strcmp(a, "--token") == 0)
            token = v;
        else if (strcmp(a, "--shm") == 0)
            shm_off = v != NULL && strcmp(v, "off") == 0;
        else if (strcmp(a, "--segment") == 0)
            cfg.segment_bytes = strtoull(v, NULL, 10);
        else {
            usage();
            return 2;
        }
    }
    if (cfg.listen == NULL || cfg.addr_file == NULL || cfg.table_file == NULL) {
        usage();
        return 2;
    }
    alarm(alarm_s);
    setvbuf(stdout, NULL, _IOLBF, 0);
    mt_err err = MT_ERR_INIT;
    mt_coll_net *net = NULL;
    mt_coll_net_opts no = MT_COLL_NET_DEFAULTS;
    no.shm = shm_off ? MT_COLL_SHM_OFF : MT_COLL_SHM_AUTO;
    no.token = token;
    mt_code rc = mt_coll_net_new_opts(cfg.listen, &no, &net, &err);
    if (rc != MT_OK) {
        printf("ERROR rank=-1 code=%s elapsed_ms=0 msg=%s\n", mt_code_name(rc), err.msg);
        return (int)rc;
    }
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cfg.addr_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%s\n", mt_coll_net_addr(net)) < 0 || fclose(f) != 0 ||
        rename(tmp, cfg.addr_file) != 0) {
        fprintf(stderr, "mt_coll_peer: cannot write %s\n", cfg.addr_file);
        mt_coll_net_free(net);
        return 2;
    }
    if (read_table(&cfg) != 0) {
        fprintf(stderr, "mt_coll_peer: no usable rank table at %s\n", cfg.table_file);
        mt_coll_net_free(net);
        return 2;
    }
    mt_coll_rank_addr table[MAX_RANKS];
    for (int r = 0; r < cfg.world; r++)
        table[r] = (mt_coll_rank_addr){cfg.addrs[r], cfg.local_index[r]};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    o.job_id = cfg.job;
    o.default_deadline_ms = cfg.deadline_ms;
    o.segment_bytes = cfg.segment_bytes;
    o.mesh = axes;
    o.drive = drive_off ? MT_COLL_DRIVE_OFF : MT_COLL_DRIVE_AUTO;
    o.window = window_off ? MT_COLL_WINDOW_OFF : MT_COLL_WINDOW_AUTO;
    o.drive_yields = yields;
    if (spin_us >= 0)
        o.drive_spin_us = spin_us;
    if (cfg.direct_bytes >= 0)
        o.direct_bytes = (size_t)cfg.direct_bytes;
    mt_coll_world *w = NULL;
    if ((rc = mt_coll_world_new_net(net, cfg.world, table, &o, &w, &err)) != MT_OK) {
        printf("ERROR rank=-1 code=%s elapsed_ms=0 msg=%s\n", mt_code_name(rc), err.msg);
        mt_coll_net_free(net);
        return (int)rc;
    }
    dev devs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    int nd = 0;
    for (int r = 0; r < cfg.world; r++) {
        if (mt_coll_world_comm(w, r) == NULL)
            continue;
        devs[nd] = (dev){.cfg = &cfg, .w = w, .rank = r, .rc = MT_OK};
        pthread_create(&th[nd], NULL, dev_main, &devs[nd]);
        nd++;
    }
    int code = 0;
    for (int i = 0; i < nd; i++) {
        pthread_join(th[i], NULL);
        if (devs[i].rc != MT_OK) {
            printf("ERROR rank=%d code=%s elapsed_ms=%.0f msg=%s\n", devs[i].rank,
                   mt_code_name(devs[i].rc), devs[i].t_fail * 1e3, devs[i].err.msg);
            if (code == 0)
                code = (int)devs[i].rc;
        } else if (strcmp(cfg.mode, "check") == 0 || strcmp(cfg.mode, "repeat") == 0) {
            printf("RESULT rank=%d ok checksum=%016" PRIx64 "\n", devs[i].rank, devs[i].checksum);
        }
    }
    for (int r = 0; r < cfg.world; r++) { /* how frames went to each other process */
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = strcmp(cfg.addrs[q], cfg.addrs[r]) != 0;
        if (first && strcmp(cfg.addrs[r], mt_coll_net_addr(net)) != 0)
            printf("LINK peer=%s via=%s\n", cfg.addrs[r], mt_coll_world_link(w, cfg.addrs[r]));
    }
    double tc = now_s();
    mt_coll_world_free(w);
    mt_coll_net_free(net);
    fprintf(stderr, "mt_coll_peer: closed in %.0f ms\n", (now_s() - tc) * 1e3);
    for (int r = 0; r < cfg.world; r++)
        free(cfg.addrs[r]);
    return code;
}
