/* SPDX-License-Identifier: MIT */
/*
 * mt_coll_mpi_check.c — the collective conformance suite against the MPI backend
 * (core/coll/mt_coll_mpi.h), one process per rank, run under mpirun -np 2..8 by
 * tests/integration/test_coll_mpi.sh; with --bench BYTES... it times allreduce instead
 * (bench/coll.sh, same "BENCH ..." lines as bench/mpi_allreduce.c), --bench-raw with the tag
 * check and the world's own buffers off (mt_coll_mpi_opts), --bench-blocking also on MPI's
 * blocking collectives.
 *
 * The job's ranks are the MPI ranks reversed (job rank r lives in MPI rank N-1-r), so the
 * mapping is exercised. The suite (the MPI backend keeps layouts and codes, not the built-in
 * reduction order: sums are held to the serial documented order within 1e-5 relative to the
 * sum of magnitudes; for 2 members the bits must match, a + b having one order):
 *   - allreduce for every group size 1..N (the first k job ranks) and the whole job reversed,
 *     at sizes 0, 1, 3, 4099, 65537 and 262147 floats;
 *   - reduce-scatter, allgather, broadcast and barrier on the whole job and on N-1 members;
 *   - a 64 MiB allreduce between 2 members;
 *   - a member with another step, and one with another size: INVALID_ARGUMENT on every member,
 *     then a fresh tag works;
 *   - a member that comes 1.5 s late to a 300 ms deadline: DEADLINE_EXCEEDED on the others
 *     within the deadline + 1 s; the world is then ABORTED; a new world works;
 *   - a cancelled world: CANCELLED (before a collective, and while one waits);
 *   - a member that never makes the world: the others' mt_coll_world_new_mpi fails with
 *     DEADLINE_EXCEEDED naming it (its message, sent later, is kept for the next world); one that
 *     never comes to a group's first collective: DEADLINE_EXCEEDED naming it there.
 * Then the collectives, layouts and mismatches again with mt_coll_mpi_opts.blocking (MPI's
 * blocking collectives: no deadline or cancel to test there).
 * Prints "PASS name" per case (rank 0) and "MPI CHECK PASSED ranks=N" at the end; on a failure
 * "FAIL rank=R ..." and exit 1 (mpirun then stops the others). A build without MPI prints
 * "MPI CHECK SKIPPED" and exits 77.
 */
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
#include "coll/mt_coll_mpi.h"

static mt_coll_mpi_info g_me;
static int g_n, g_job_rank;
static uint32_t g_seq;
static uint64_t g_job_id = 1000;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "FAIL rank=%d line %d: ", g_job_rank, __LINE__);                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static mt_coll_mpi_opts g_mo = MT_COLL_MPI_DEFAULTS;

static mt_coll_world *open_world(int64_t deadline_ms)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    int map[64];
    mt_coll_world *w = NULL;
    mt_err err = MT_ERR_INIT;

    for (int r = 0; r < g_n; r++)
        map[r] = g_n - 1 - r;
    o.job_id = g_job_id++;
    o.default_deadline_ms = deadline_ms;
    if (mt_coll_world_new_mpi(g_n, map, &o, &g_mo, &w, &err) != MT_OK)
        FAIL("world: %s", err.msg);
    return w;
}

static void pass(const char *name)
{
    if (g_job_rank == 0) {
        printf("PASS %s\n", name);
        fflush(stdout);
    }
}

/* The whole job in job-rank order, in g[0, N). */
static mt_coll_group whole(int *g)
{
    mt_coll_group grp = {g, g_n};
    for (int i = 0; i < g_n; i++)
        g[i] = i;
    return grp;
}

static int member(const int *g, int k)
{
    for (int i = 0; i < k; i++)
        if (g[i] == g_job_rank)
            return i;
    return -1;
}

static mt_coll_call tag(int64_t deadline_ms)
{
    mt_coll_call c = {.step = 1, .seq = g_seq++, .deadline_ms = deadline_ms};
    return c;
}

/* |got - serial documented order| <= 1e-5 * sum of magnitudes (bits for p <= 2) */
static void check_sum(const char *what, const float *got, const int *g, int p, size_t n,
                      uint64_t seed)
{
    float **in = calloc((size_t)p, sizeof(float *)), *ref = malloc((n + 1) * sizeof(float));
    for (int i = 0; i < p; i++) {
        in[i] = malloc((n + 1) * sizeof(float));
        for (size_t e = 0; e < n; e++)
            in[i][e] = ct_val(g[i], e, seed);
    }
    mt_coll_reference_allreduce((const float *const *)in, p, n, ref);
    for (size_t e = 0; e < n; e++) {
        double mag = 0;
        for (int i = 0; i < p; i++)
            mag += fabs(in[i][e]);
        if (p <= 2 ? memcmp(&got[e], &ref[e], 4) != 0 : fabs(got[e] - ref[e]) > 1e-5 * mag)
            FAIL("%s p=%d n=%zu: element %zu is %.9g, want %.9g", what, p, n, e, got[e], ref[e]);
    }
    for (int i = 0; i < p; i++)
        free(in[i]);
    free(in);
    free(ref);
}

static void fill(float *b, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = ct_val(g_job_rank, i, seed);
}

static void expect(mt_code rc, mt_code want, const mt_err *err, const char *what)
{
    if (rc != want)
        FAIL("%s: %s (%s), want %s", what, mt_code_name(rc), err->msg, mt_code_name(want));
}

static void case_allreduce(mt_coll_world *w)
{
    static const size_t sizes[] = {0, 1, 3, 4099, 65537, 262147};
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    int g[64];
    mt_err err = MT_ERR_INIT;

    for (int k = 1; k <= g_n + 1; k++) {
        int p = k <= g_n ? k : g_n; /* k = N + 1: the whole job reversed */
        for (int i = 0; i < p; i++)
            g[i] = k <= g_n ? i : g_n - 1 - i;
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t n = sizes[s];
            mt_coll_call call = tag(0); /* every process's tags advance together */
            if (member(g, p) < 0)
                continue;
            float *b = malloc((n + 1) * sizeof(float));
            mt_coll_group grp = {g, p};
            fill(b, n, 7 + s);
            expect(mt_coll_allreduce_sum(c, &grp, b, n, &call, &err), MT_OK, &err, "allreduce");
            check_sum("allreduce", b, g, p, n, 7 + s);
            free(b);
        }
    }
    pass("allreduce: every group size, reversed order, sizes 0..262147");
}

static void case_others(mt_coll_world *w)
{
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    mt_err err = MT_ERR_INIT;
    int g[64];

    for (int p = g_n; p >= (g_n > 2 ? g_n - 1 : g_n); p--) {
        size_t n = 4099, off, len;
        int pos;
        for (int i = 0; i < p; i++)
            g[i] = i;
        pos = member(g, p);
        if (pos < 0) {
            g_seq += 4; /* the members' four collectives: every process's tags advance together */
            continue;
        }
        mt_coll_group grp = {g, p};
        float *in = malloc(n * sizeof(float)), *out = malloc(n * (size_t)p * sizeof(float));
        mt_coll_call call = tag(0);
        fill(in, n, 21);
        expect(mt_coll_reduce_scatter(c, &grp, in, out, n, &call, &err), MT_OK, &err, "rs");
        float *full = malloc(n * sizeof(float));
        memset(full, 0, n * sizeof(float));
        mt_coll_chunk_range(n, p, pos, &off, &len);
        memcpy(full + off, out, len * sizeof(float));
        /* only this member's chunk is compared: the others come from the reference */
        {
            float **ins = calloc((size_t)p, sizeof(float *)), *ref = malloc(n * sizeof(float));
            for (int i = 0; i < p; i++) {
                ins[i] = malloc(n * sizeof(float));
                for (size_t e = 0; e < n; e++)
                    ins[i][e] = ct_val(g[i], e, 21);
            }
            mt_coll_reference_allreduce((const float *const *)ins, p, n, ref);
            for (size_t e = off; e < off + len; e++)
                if (fabsf(full[e] - ref[e]) > 1e-5f * (fabsf(ref[e]) + 64.0f))
                    FAIL("reduce-scatter p=%d element %zu: %.9g want %.9g", p, e, full[e], ref[e]);
            for (int i = 0; i < p; i++)
                free(ins[i]);
            free(ins);
            free(ref);
        }
        call = tag(0);
        expect(mt_coll_allgather(c, &grp, in, out, n, &call, &err), MT_OK, &err, "allgather");
        for (int i = 0; i < p; i++)
            for (size_t e = 0; e < n; e++)
                if (out[(size_t)i * n + e] != ct_val(g[i], e, 21))
                    FAIL("allgather p=%d member %d element %zu", p, i, e);
        call = tag(0);
        if (g_job_rank != g[p - 1])
            memset(in, 0, n * sizeof(float));
        expect(mt_coll_broadcast(c, &grp, in, n, g[p - 1], &call, &err), MT_OK, &err, "broadcast");
        for (size_t e = 0; e < n; e++)
            if (in[e] != ct_val(g[p - 1], e, 21))
                FAIL("broadcast p=%d element %zu", p, e);
        call = tag(0);
        expect(mt_coll_barrier(c, &grp, &call, &err), MT_OK, &err, "barrier");
        free(in);
        free(out);
        free(full);
    }
    pass("reduce-scatter, allgather, broadcast, barrier on N and N-1 members");
}

static void case_big(mt_coll_world *w)
{
    size_t n = 16u << 20; /* 64 MiB */
    int g[2] = {0, 1};
    mt_coll_group grp = {g, 2};
    mt_err err = MT_ERR_INIT;
    mt_coll_call call = tag(60000);
    if (g_n >= 2 && member(g, 2) >= 0) {
        float *b = malloc(n * sizeof(float));
        fill(b, n, 5);
        expect(mt_coll_allreduce_sum(mt_coll_world_comm(w, g_job_rank), &grp, b, n, &call, &err),
               MT_OK, &err, "64 MiB allreduce");
        check_sum("64 MiB allreduce", b, g, 2, n, 5);
        free(b);
    }
    pass("64 MiB allreduce between 2 members");
}

static void case_mismatch(mt_coll_world *w)
{
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    int g[64];
    float b[64];
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    mt_coll_group grp = whole(g);
    /* line up first, without a deadline: members 0 and 1 may still be in case_big's 64 MiB
     * allreduce, which takes longer than the 5 s below on 2 oversubscribed cores under ASan */
    mt_coll_call call = tag(0);
    expect(mt_coll_barrier(c, &grp, &call, &err), MT_OK, &err, "barrier before the mismatch");
    call = tag(5000);
    if (g_job_rank == 0)
        call.step = 2;
    fill(b, 64, 3);
    rc = mt_coll_allreduce_sum(c, &grp, b, 64, &call, &err);
    expect(rc, MT_INVALID_ARGUMENT, &err, "mismatched step");
    if (strstr(err.msg, "step") == NULL)
        FAIL("mismatched step: message does not say step: %s", err.msg);
    call = tag(5000);
    rc = mt_coll_allreduce_sum(c, &grp, b, g_job_rank == 0 ? 63 : 64, &call, &err);
    expect(rc, MT_INVALID_ARGUMENT, &err, "mismatched size");
    /* the automatic tag (call NULL): the comm's step, set differently on job rank 0 */
    mt_coll_comm_set_step(c, g_job_rank == 0 ? 7 : 8);
    rc = mt_coll_allreduce_sum(c, &grp, b, 64, NULL, &err);
    expect(rc, MT_INVALID_ARGUMENT, &err, "mismatched automatic step");
    if (strstr(err.msg, "step") == NULL)
        FAIL("mismatched automatic step: message does not say step: %s", err.msg);
    call = tag(5000);
    fill(b, 64, 3);
    expect(mt_coll_allreduce_sum(c, &grp, b, 64, &call, &err), MT_OK, &err, "after mismatch");
    check_sum("after mismatch", b, g, g_n, 64, 3);
    pass("mismatched step, size and automatic step: INVALID_ARGUMENT on every member; a fresh "
         "tag works");
}

static void case_deadline(void)
{
    mt_coll_world *w = open_world(300);
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    int g[64];
    float b[16] = {0};
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    double t;

    mt_coll_group grp = whole(g);
    mt_coll_call call = tag(300);
    if (g_job_rank == g_n - 1)
        usleep(1500 * 1000);
    t = now_s();
    rc = mt_coll_allreduce_sum(c, &grp, b, 16, &call, &err);
    if (g_job_rank != g_n - 1) {
        expect(rc, MT_DEADLINE_EXCEEDED, &err, "late member");
        if (now_s() - t > 1.3)
            FAIL("deadline: returned after %.2f s", now_s() - t);
    } else if (rc == MT_OK) {
        FAIL("the late member's allreduce succeeded");
    }
    call = tag(300);
    expect(mt_coll_barrier(c, &grp, &call, &err), MT_ABORTED, &err, "after the deadline");
    mt_coll_world_free(w);
    pass("a late member: DEADLINE_EXCEEDED within the deadline + 1 s, then ABORTED");
}

/* A member that never makes the world (its task failed first): the others' world creation fails
 * with DEADLINE_EXCEEDED naming it instead of waiting for ever. */
static void case_absent(void)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    int map[64];
    char want[64];
    mt_coll_world *w = NULL;
    mt_err err = MT_ERR_INIT;
    double t = now_s();

    for (int r = 0; r < g_n; r++)
        map[r] = g_n - 1 - r;
    o.job_id = g_job_id++; /* every process's job ids advance together */
    o.default_deadline_ms = 300;
    if (g_job_rank != g_n - 1) {
        expect(mt_coll_world_new_mpi(g_n, map, &o, NULL, &w, &err), MT_DEADLINE_EXCEEDED, &err,
               "a member never comes");
        snprintf(want, sizeof(want), "job rank %d", g_n - 1);
        if (strstr(err.msg, want) == NULL)
            FAIL("absent member: the message does not name %s: %s", want, err.msg);
        if (now_s() - t > 1.3)
            FAIL("absent member: returned after %.2f s", now_s() - t);
    }
    pass("a member that never makes the world: DEADLINE_EXCEEDED naming it");
}

/* A member that never comes to a group's first collective (the group's communicator is made
 * then): the others fail with DEADLINE_EXCEEDED naming it instead of waiting for ever. */
static void case_group_absent(void)
{
    mt_coll_world *w = open_world(5000); /* members come from case_absent at different times */
    int g[64];
    float b[4] = {0};
    char want[64];
    mt_err err = MT_ERR_INIT;
    double t = now_s();

    for (int i = 0; i < g_n; i++)
        g[i] = g_n - 1 - i; /* reversed: not the job's own communicator */
    mt_coll_group grp = {g, g_n};
    mt_coll_call call = tag(300);
    if (g_job_rank != 0) {
        expect(mt_coll_allreduce_sum(mt_coll_world_comm(w, g_job_rank), &grp, b, 4, &call, &err),
               MT_DEADLINE_EXCEEDED, &err, "a member never comes to the group");
        snprintf(want, sizeof(want), "job rank 0");
        if (strstr(err.msg, want) == NULL)
            FAIL("group absent member: the message does not name %s: %s", want, err.msg);
        if (now_s() - t > 1.3)
            FAIL("group absent member: returned after %.2f s", now_s() - t);
    }
    mt_coll_world_free(w);
    pass("a member that never comes to a group's first collective: DEADLINE_EXCEEDED naming it");
}

static void *cancel_later(void *arg)
{
    usleep(200 * 1000);
    mt_coll_world_cancel(arg);
    return NULL;
}

static void case_cancel(void)
{
    mt_coll_world *w = open_world(5000);
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    int g[64];
    float b[16] = {0};
    mt_err err = MT_ERR_INIT;
    pthread_t th;

    mt_coll_group grp = whole(g);
    mt_coll_call call = tag(5000);
    /* job rank 0 waits alone (the others never call) and is cancelled while waiting */
    if (g_job_rank == 0) {
        double t = now_s();
        pthread_create(&th, NULL, cancel_later, w);
        expect(mt_coll_allreduce_sum(c, &grp, b, 16, &call, &err), MT_CANCELLED, &err,
               "cancel while waiting");
        pthread_join(th, NULL);
        if (now_s() - t > 1.5)
            FAIL("cancel: returned after %.2f s", now_s() - t);
    } else {
        mt_coll_world_cancel(w);
        expect(mt_coll_allreduce_sum(c, &grp, b, 16, &call, &err), MT_CANCELLED, &err,
               "cancelled world");
    }
    mt_coll_world_free(w);
    pass("cancel: CANCELLED while waiting and on a cancelled world");
}

static void bench(int argc, char **argv, int first)
{
    mt_coll_world *w = open_world(60000);
    mt_coll_comm *c = mt_coll_world_comm(w, g_job_rank);
    int g[64];
    mt_err err = MT_ERR_INIT;

    mt_coll_group grp = whole(g);
    for (int a = first; a < argc; a++) {
        size_t n = strtoull(argv[a], NULL, 10) / sizeof(float);
        float *buf = calloc(n + 1, sizeof(float)), per_it, it;
        int iters;
        double t = now_s(), secs = 1e30;
        for (int k = 0; k < 3; k++)
            if (mt_coll_allreduce_sum(c, &grp, buf, n, NULL, &err) != MT_OK)
                FAIL("bench: %s", err.msg);
        per_it = (float)((now_s() - t) / 3);
        /* every member needs the same count: rank 0's, through a broadcast */
        it = per_it > 0 ? 0.25f / per_it : 1000;
        it = it < 5 ? 5 : (it > 2000 ? 2000 : it);
        if (mt_coll_broadcast(c, &grp, &it, 1, g_n - 1, NULL, &err) != MT_OK)
            FAIL("bench: %s", err.msg);
        iters = (int)it;
        for (int trial = 0; trial < 3; trial++) {
            if (mt_coll_barrier(c, &grp, NULL, &err) != MT_OK)
                FAIL("bench: %s", err.msg);
            t = now_s();
            for (int k = 0; k < iters; k++)
                if (mt_coll_allreduce_sum(c, &grp, buf, n, NULL, &err) != MT_OK)
                    FAIL("bench: %s", err.msg);
            double s = (now_s() - t) / iters;
            secs = s < secs ? s : secs;
        }
        if (g_job_rank == 0) {
            double bytes = (double)n * sizeof(float), algbw = bytes / secs / 1e9;
            printf("BENCH bytes=%.0f ranks=%d iters=%d lat_us=%.1f algbw_GBps=%.3f "
                   "busbw_GBps=%.3f\n",
                   bytes, g_n, iters, secs * 1e6, algbw, algbw * 2 * (g_n - 1) / g_n);
            fflush(stdout);
        }
        free(buf);
    }
    mt_coll_world_free(w);
}

int main(int argc, char **argv)
{
    mt_err err = MT_ERR_INIT;
    mt_coll_world *w;

    if (!mt_coll_mpi_built()) {
        printf("MPI CHECK SKIPPED: %s\n", "this build has no MPI");
        return 77;
    }
    if (mt_coll_mpi_init(&g_me, &err) != MT_OK) {
        fprintf(stderr, "FAIL init: %s\n", err.msg);
        return 1;
    }
    g_n = g_me.size;
    g_job_rank = g_n - 1 - g_me.rank;
    if (g_n > 64)
        FAIL("at most 64 ranks");
    alarm(120);
    if (argc > 1 && strcmp(argv[1], "--bench-raw") == 0) {
        g_mo.check_tags = 0; /* MPI's own speed: no tag check, the caller's buffers */
        g_mo.own_buffers = 0;
        bench(argc, argv, 2);
    } else if (argc > 1 && strcmp(argv[1], "--bench-blocking") == 0) {
        g_mo.check_tags = 0; /* raw, on MPI's blocking collectives */
        g_mo.own_buffers = 0;
        g_mo.blocking = 1;
        bench(argc, argv, 2);
    } else if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench(argc, argv, 2);
    } else {
        if (g_me.rank == 0)
            printf("MPI: %s, %d ranks, world %s\n", g_me.library, g_n, g_me.world_id);
        w = open_world(20000);
        case_allreduce(w);
        case_others(w);
        case_big(w);
        if (g_n >= 2) /* the cases below need someone to disagree with or wait for */
            case_mismatch(w);
        mt_coll_world_free(w);
        if (g_n >= 2) {
            case_deadline();
            case_cancel();
            case_absent();
            case_group_absent();
            w = open_world(20000); /* a new world works after the abandoned ones */
            case_mismatch(w);
            mt_coll_world_free(w);
        }
        g_mo.blocking = 1; /* the same cases on MPI's blocking collectives */
        w = open_world(20000);
        case_allreduce(w);
        case_others(w);
        if (g_n >= 2)
            case_mismatch(w);
        mt_coll_world_free(w);
        g_mo.blocking = 0;
        if (g_job_rank == 0)
            printf("MPI CHECK PASSED ranks=%d\n", g_n);
    }
    fflush(stdout);
    mt_coll_mpi_finalize();
    return 0;
}
