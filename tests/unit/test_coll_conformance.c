/* SPDX-License-Identifier: MIT */
/*
 * test_coll_conformance.c — one conformance suite for core/coll run against every transport:
 * in-process (one world of 8 device threads), the direct transport over tcp and over Unix
 * sockets (shared memory off), shared memory chosen by itself (tcp:// addresses) and by
 * shm:// addresses, nng over tcp, and nng over TLS (tls+tcp://, certificates made by
 * tests/integration/tls_certs.sh); and against the backend interface (mt_coll_backend.h): a
 * world of another backend whose operations forward to an in-process built-in world, so every
 * collective, cancel and the state's release go through the operations table. (The MPI
 * backend runs under mpirun: tests/integration/test_coll_mpi.sh.) Each transport holds 8
 * ranks on two endpoints of this process, interleaved (even ranks on one, odd on the other),
 * so every group of 2 or more crosses the transport. The suite:
 *   - allreduce for every group size 1..8 at sizes 0, 1, 3, 4099, 65537 and 262147 floats
 *     (odd sizes, one segment to many), bit-identical to the documented order;
 *   - reduce-scatter, allgather, broadcast and barrier on groups of 3 and 8;
 *   - a 64 MiB allreduce between 2 members;
 *   - a member with another step (mismatched tag) and one with another size: INVALID_ARGUMENT
 *     on every member; a member that comes too late: DEADLINE_EXCEEDED naming it, within the
 *     deadline + 1 s; a cancelled world: CANCELLED; a fresh tag works after the size mismatch
 *     and the deadline;
 *   - the link between the endpoints is the transport under test (mt_coll_world_link).
 * The shared-memory suite runs once more on 8 endpoints of one rank each (shm_window): every
 * group of 3 or more then takes its large allreduces through a host window (coll_engine.h
 * coll__win_open; counted from the log line its set-up writes), the size mismatch fails at a
 * window's tag check and the late member waits at its barrier; no segment is left in /dev/shm
 * (the other collectives and the 64 MiB pair take no window: left to shm_chosen).
 * Tests for the guarantees of one transport only stay in test_coll.c.
 */
#include "mt_test.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/mt_coll.h"
#include "coll/mt_coll_backend.h"
#include "coll_test_jobs.h"
#include "log/mt_log.h"
#include "tls/mt_tls.h"

#define NR 8

typedef struct transport {
    const char *scheme; /* "tcp://": on 127.0.0.1, "ipc://" or "shm://": a path; NULL in-process */
    mt_coll_shm_mode shm;
    const char *link; /* what mt_coll_world_link must say */
    int forward;      /* in-process only: through a backend forwarding to the built-in world */
    int ends;         /* endpoints: 0 = 2 (ranks interleaved), NR: one rank each (host windows) */
    size_t fault_n;   /* floats of the late, cancelled and mismatched-step calls (0: 1009) */
} transport;

static mt_tls *g_tls;         /* tls+tcp://: listens and dials (server certificate, the test CA) */
static _Atomic int g_windows; /* host windows set up (their log line, counted by log_sink) */

static void log_sink(void *ctx, const char *tag, mt_log_level level, int64_t time_ms,
                     const char *text)
{
    (void)ctx;
    (void)tag;
    (void)level;
    (void)time_ms;
    if (strstr(text, "run on a host window") != NULL)
        atomic_fetch_add(&g_windows, 1);
}

/* Segments this process left in /dev/shm ("mtcoll-<job>-<pid>-<n>"). */
static int shm_left(void)
{
    char cmd[96], line[64] = "0";
    snprintf(cmd, sizeof(cmd), "ls /dev/shm | grep -c -- '^mtcoll-.*-%d-'", (int)getpid());
    FILE *f = popen(cmd, "r");
    if (f != NULL && fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    if (f != NULL)
        pclose(f);
    return atoi(line);
}

/* ---- a backend whose operations forward to a built-in world (in its state) */

enum { FWD_ALLREDUCE, FWD_RS, FWD_AG, FWD_BCAST, FWD_BARRIER, FWD_CANCEL, FWD_NOPS };
typedef struct fwd_state {
    mt_coll_world *in;
    _Atomic int calls[FWD_NOPS]; /* operations that reached the backend */
    int *freed;                  /* set by fwd_free */
} fwd_state;

static mt_coll_comm *inner_op(mt_coll_comm *c, int op)
{
    fwd_state *f = mt_coll_world_backend_state(mt_coll_comm_world(c));
    atomic_fetch_add(&f->calls[op], 1);
    return mt_coll_world_comm(f->in, mt_coll_comm_rank(c));
}

static mt_code fwd_allreduce(mt_coll_comm *c, const mt_coll_group *g, float *buf, size_t n,
                             const mt_coll_call *call, mt_err *err)
{
    return mt_coll_allreduce_sum(inner_op(c, FWD_ALLREDUCE), g, buf, n, call, err);
}

static mt_code fwd_reduce_scatter(mt_coll_comm *c, const mt_coll_group *g, const float *in,
                                  float *out, size_t n, const mt_coll_call *call, mt_err *err)
{
    return mt_coll_reduce_scatter(inner_op(c, FWD_RS), g, in, out, n, call, err);
}

static mt_code fwd_allgather(mt_coll_comm *c, const mt_coll_group *g, const float *in, float *out,
                             size_t count, const mt_coll_call *call, mt_err *err)
{
    return mt_coll_allgather(inner_op(c, FWD_AG), g, in, out, count, call, err);
}

static mt_code fwd_broadcast(mt_coll_comm *c, const mt_coll_group *g, float *buf, size_t n,
                             int root, const mt_coll_call *call, mt_err *err)
{
    return mt_coll_broadcast(inner_op(c, FWD_BCAST), g, buf, n, root, call, err);
}

static mt_code fwd_barrier(mt_coll_comm *c, const mt_coll_group *g, const mt_coll_call *call,
                           mt_err *err)
{
    int pos;
    mt_code rc = mt_coll_group_position(c, g, &pos, err);
    return rc != MT_OK ? rc : mt_coll_barrier(inner_op(c, FWD_BARRIER), g, call, err);
}

static void fwd_cancel(mt_coll_world *w)
{
    fwd_state *f = mt_coll_world_backend_state(w);
    atomic_fetch_add(&f->calls[FWD_CANCEL], 1);
    mt_coll_world_cancel(f->in);
}

static void fwd_free(void *state)
{
    fwd_state *f = state;
    mt_coll_world_free(f->in);
    *f->freed = 1;
    free(f);
}

static const mt_coll_backend forward_backend = {
    .name = "forward",
    .allreduce_sum = fwd_allreduce,
    .reduce_scatter = fwd_reduce_scatter,
    .allgather = fwd_allgather,
    .broadcast = fwd_broadcast,
    .barrier = fwd_barrier,
    .cancel = fwd_cancel,
    .state_free = fwd_free,
};

typedef struct suite {
    mt_coll_net *nets[NR];
    mt_coll_world *ws[NR]; /* ws[1] NULL in-process (ws[0] holds every rank) */
    int ends;              /* endpoints (worlds) in use */
    uint32_t seq;          /* next tag */
    fwd_state *fwd;        /* the forwarding backend's state, NULL: built-in world */
    int fwd_freed;
} suite;

static mt_coll_world *world_of(const suite *s, int rank)
{
    return s->ws[1] == NULL ? s->ws[0] : s->ws[rank % s->ends];
}

static void suite_open(suite *s, const transport *t)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net_opts no = MT_COLL_NET_DEFAULTS;
    mt_coll_rank_addr table[NR];
    char url[NR][160];
    mt_err err = MT_ERR_INIT;
    memset(s, 0, sizeof(*s));
    s->ends = t->ends > 0 ? t->ends : 2;
    o.job_id = 31;
    o.segment_bytes = 64 * 1024; /* several segments per exchange from 65537 floats on */
    if (t->scheme == NULL) {
        assert_int_equal(mt_coll_world_new_local(NR, &o, &s->ws[0], &err), MT_OK);
        if (t->forward) {
            static const int all[NR] = {0, 1, 2, 3, 4, 5, 6, 7};
            fwd_state *f = calloc(1, sizeof(*f));
            assert_non_null(f);
            f->in = s->ws[0];
            f->freed = &s->fwd_freed;
            assert_string_equal(mt_coll_world_backend_name(f->in), "builtin");
            assert_null(mt_coll_world_backend_state(f->in));
            assert_int_equal(
                mt_coll_world_new_backend(&forward_backend, f, NR, all, NR, &o, &s->ws[0], &err),
                MT_OK);
            assert_string_equal(mt_coll_world_backend_name(s->ws[0]), "forward");
            s->fwd = f;
        }
        return;
    }
    no.shm = t->shm;
    no.tls = strncmp(t->scheme, "tls+", 4) == 0 ? g_tls : NULL;
    for (int k = 0; k < s->ends; k++) {
        if (strstr(t->scheme, "tcp://") != NULL)
            snprintf(url[k], sizeof(url[k]), "%s127.0.0.1:0", t->scheme);
        else
            snprintf(url[k], sizeof(url[k]), "%s/tmp/mt_coll_conf_%d_%d.%.3s", t->scheme,
                     (int)getpid(), k, t->scheme);
        if (mt_coll_net_new_opts(url[k], &no, &s->nets[k], &err) != MT_OK)
            fail_msg("endpoint %s: %s", url[k], err.msg);
    }
    for (int r = 0; r < NR; r++)
        table[r] = (mt_coll_rank_addr){mt_coll_net_addr(s->nets[r % s->ends]), r / s->ends};
    for (int k = 0; k < s->ends; k++) {
        if (mt_coll_world_new_net(s->nets[k], NR, table, &o, &s->ws[k], &err) != MT_OK)
            fail_msg("world %d: %s", k, err.msg);
    }
}

static void suite_close(suite *s, const transport *t)
{
    for (int k = 0; k < 2 && s->ws[1] != NULL; k++) {
        const char *via = mt_coll_world_link(s->ws[k], mt_coll_net_addr(s->nets[1 - k]));
        if (strcmp(via, t->link) != 0)
            fail_msg("endpoint %d reached the other by %s, want %s", k, via, t->link);
    }
    if (s->fwd != NULL) { /* the world released its backend's state */
        mt_coll_world_free(s->ws[0]);
        s->ws[0] = NULL;
        assert_true(s->fwd_freed);
    }
    for (int k = 0; k < s->ends; k++) {
        mt_coll_world_free(s->ws[k]);
        mt_coll_net_free(s->nets[k]);
    }
}

/*
 * Run op over the first gsize ranks (the others stay out), each member with its own tag and
 * size adjustments (step_of / n_of: NULL = the common ones); results in jobs[0..gsize).
 * Rank late (-1: none) comes late_ms late; late_ms < 0: never (the world is cancelled).
 */
static void run_group(suite *s, int gsize, op_t op, size_t n, const uint64_t *step_of,
                      const size_t *n_of, int64_t deadline_ms, int late, int late_ms, job *jobs)
{
    static const int group[NR] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint32_t seq = s->seq++;
    for (int r = 0; r < gsize; r++) {
        jobs[r] = with_call(mkjob(world_of(s, r), r, group, gsize, op, n_of ? n_of[r] : n, seq),
                            step_of ? step_of[r] : 0, seq, deadline_ms);
        jobs[r] = with_root(jobs[r], gsize - 1);
        if (r == late && late_ms < 0)
            jobs[r].op = OP_IDLE;
        else if (r == late)
            jobs[r] = with_delay(jobs[r], late_ms);
    }
    run_jobs(jobs, gsize);
}

/* The documented result of an allreduce of the first p ranks' data (seed), n floats. The
 * largest one is kept for the next transport (the same tags give the same data). */
static const float *expected(int p, size_t n, uint64_t seed)
{
    static const int group[NR] = {0, 1, 2, 3, 4, 5, 6, 7};
    static float *ref;
    static size_t ref_n;
    static uint64_t ref_seed;
    static int ref_p;
    if (ref != NULL && ref_n == n && ref_seed == seed && ref_p == p)
        return ref;
    free(ref);
    ref = calloc(n + 1, sizeof(float));
    double *dref = calloc(n + 1, sizeof(double));
    assert_non_null(ref);
    assert_non_null(dref);
    reference(group, p, n, seed, ref, dref);
    free(dref);
    ref_n = n;
    ref_seed = seed;
    ref_p = p;
    return ref;
}

/* Every member of jobs[0..gsize) succeeded with the documented bits of op. */
static void expect_exact(const job *jobs, int gsize, op_t op, size_t n)
{
    const float *ref = op == OP_ALLREDUCE || op == OP_RS ? expected(gsize, n, jobs[0].seed) : NULL;
    for (int r = 0; r < gsize; r++) {
        const job *j = &jobs[r];
        size_t off = 0, len = n;
        if (j->rc != MT_OK)
            fail_msg("op %d p=%d n=%zu rank %d: %s: %s", op, gsize, n, r, mt_code_name(j->rc),
                     j->err.msg);
        if (op == OP_RS)
            mt_coll_chunk_range(n, gsize, r, &off, &len);
        for (size_t e = 0; op == OP_ALLREDUCE || op == OP_RS ? e < len : 0; e++) {
            if (memcmp(&j->buf[e], &ref[off + e], sizeof(float)) != 0)
                fail_msg("op %d p=%d n=%zu rank %d element %zu: %.9g, the order gives %.9g", op,
                         gsize, n, r, off + e, (double)j->buf[e], (double)ref[off + e]);
        }
        for (int m = 0; op == OP_AG && m < gsize; m++) {
            for (size_t e = 0; e < n; e++) {
                if (j->buf[(size_t)m * n + e] != ct_val(m, e, j->seed))
                    fail_msg("allgather p=%d n=%zu rank %d: block %d element %zu", gsize, n, r, m,
                             e);
            }
        }
        for (size_t e = 0; op == OP_BCAST && e < n; e++) {
            if (j->buf[e] != ct_val(gsize - 1, e, j->seed))
                fail_msg("broadcast p=%d n=%zu rank %d element %zu", gsize, n, r, e);
        }
    }
}

/* Every present member failed with code (message containing what, when not NULL) in time. */
static void expect_fail(const job *jobs, int gsize, int absent, mt_code code, const char *what,
                        double max_secs)
{
    for (int r = 0; r < gsize; r++) {
        if (r == absent)
            continue;
        if (jobs[r].rc != code)
            fail_msg("rank %d: %s (%s), want %s", r, mt_code_name(jobs[r].rc), jobs[r].err.msg,
                     mt_code_name(code));
        if (what != NULL && strstr(jobs[r].err.msg, what) == NULL)
            fail_msg("rank %d: '%s' not in: %s", r, what, jobs[r].err.msg);
        if (jobs[r].secs > max_secs)
            fail_msg("rank %d failed after %.2f s (at most %.2f)", r, jobs[r].secs, max_secs);
    }
}

/* After a failure: the same group works again under a fresh tag. */
static void expect_recovers(suite *s, int gsize)
{
    job jobs[NR];
    run_group(s, gsize, OP_ALLREDUCE, 4099, NULL, NULL, 5000, -1, 0, jobs);
    expect_exact(jobs, gsize, OP_ALLREDUCE, 4099);
    free_jobs(jobs, gsize);
}

typedef struct cancel_arg {
    suite *s;
} cancel_arg;

static void *cancel_later(void *arg)
{
    cancel_arg *a = arg;
    usleep(200 * 1000);
    for (int k = 0; k < a->s->ends; k++)
        mt_coll_world_cancel(a->s->ws[k]);
    return NULL;
}

static void conformance(const transport *t)
{
    static const size_t sizes[] = {0, 1, 3, 4099, 65537, 262147};
    static const op_t ops[] = {OP_RS, OP_AG, OP_BCAST, OP_BARRIER};
    suite s;
    job jobs[NR];
    size_t fn = t->fault_n > 0 ? t->fault_n : 1009;
    suite_open(&s, t);
    for (int p = 1; p <= NR; p++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            run_group(&s, p, OP_ALLREDUCE, sizes[i], NULL, NULL, 20000, -1, 0, jobs);
            expect_exact(jobs, p, OP_ALLREDUCE, sizes[i]);
            free_jobs(jobs, p);
        }
    }
    /* (the other collectives and the 64 MiB pair take no window: shm_chosen covers them) */
    for (int p = 3; p <= NR && t->ends != NR; p += NR - 3) {
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
            for (size_t n = 1; n <= 65537; n += 65536) {
                run_group(&s, p, ops[k], n, NULL, NULL, 20000, -1, 0, jobs);
                expect_exact(jobs, p, ops[k], n);
                free_jobs(jobs, p);
            }
        }
    }
    if (t->ends == NR) /* every group of 3 or more ran its large allreduces on a window */
        assert_int_equal(atomic_load(&g_windows), NR - 2);
    for (int op = 0; op < FWD_CANCEL && s.fwd != NULL; op++)
        assert_true(s.fwd->calls[op] > 0); /* every collective went through the table */
    size_t big = (64u << 20) / sizeof(float);
    if (t->ends != NR) {
        run_group(&s, 2, OP_ALLREDUCE, big, NULL, NULL, 60000, -1, 0, jobs);
        expect_exact(jobs, 2, OP_ALLREDUCE, big);
        free_jobs(jobs, 2);
    }

    size_t ns[NR] = {70000, 70000, 70001, 70000};
    run_group(&s, 4, OP_ALLREDUCE, 0, NULL, ns, 5000, -1, 0, jobs); /* mismatched size */
    expect_fail(jobs, 4, -1, MT_INVALID_ARGUMENT, "size", 5.0);
    free_jobs(jobs, 4);
    expect_recovers(&s, 4);
    run_group(&s, 3, OP_ALLREDUCE, fn, NULL, NULL, 400, 2, 800, jobs); /* rank 2 too late */
    expect_fail(jobs, 3, 2, MT_DEADLINE_EXCEEDED, "rank 2", 0.4 + 1.0);
    free_jobs(jobs, 3);
    expect_recovers(&s, 3);

    pthread_t th;
    cancel_arg ca = {&s};
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &ca), 0);
    run_group(&s, 3, OP_ALLREDUCE, fn, NULL, NULL, 20000, 2, -1, jobs); /* cancelled, waiting */
    pthread_join(th, NULL);
    if (s.fwd != NULL)
        assert_int_equal(s.fwd->calls[FWD_CANCEL], 1);
    expect_fail(jobs, 3, 2, MT_CANCELLED, NULL, 0.2 + 1.0);
    free_jobs(jobs, 3);
    suite_close(&s, t);

    /* a member with another step: its leftovers would confuse later collectives (a job is
     * restarted after such a failure), so on fresh worlds */
    uint64_t steps[NR] = {0, 5, 0};
    suite_open(&s, t);
    run_group(&s, 3, OP_ALLREDUCE, fn, steps, NULL, 5000, -1, 0, jobs);
    expect_fail(jobs, 3, -1, MT_INVALID_ARGUMENT, "step", 5.0);
    free_jobs(jobs, 3);
    suite_close(&s, t);
    assert_int_equal(shm_left(), 0); /* rings and windows are unlinked once mapped */
}

static void test_coll_conformance(void **state)
{
    conformance(*state);
}

static transport in_process = {NULL, MT_COLL_SHM_AUTO, "local", 0, 0, 0};
static transport tcp = {"tcp://", MT_COLL_SHM_OFF, "tcp", 0, 0, 0};
static transport ipc = {"ipc://", MT_COLL_SHM_OFF, "ipc", 0, 0, 0};
static transport shm_chosen = {"tcp://", MT_COLL_SHM_AUTO, "shm", 0, 0, 0};
static transport shm_url = {"shm://", MT_COLL_SHM_AUTO, "shm", 0, 0, 0};
static transport nng_tcp = {"nng+tcp://", MT_COLL_SHM_AUTO, "nng", 0, 0, 0};
static transport tls = {"tls+tcp://", MT_COLL_SHM_AUTO, "tls", 0, 0, 0};
static transport backend_forward = {NULL, MT_COLL_SHM_AUTO, "local", 1, 0, 0};
/* 8 endpoints of one rank each: allreduces of 3 or more above direct_bytes on host windows
 * (coll_engine.h coll__win_open), the late, cancelled and mismatched calls too (70000 floats) */
static transport shm_window = {"tcp://", MT_COLL_SHM_AUTO, "shm", 0, NR, 70000};

static char g_dir[64]; /* the certificates (tls_certs.sh) */

static int certs_make(void **state)
{
    const char *src = getenv("MT_SOURCE_DIR");
    char cmd[512], file[3][128];
    mt_tls_opts o = MT_TLS_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/mt_coll_conf_tls_XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    snprintf(cmd, sizeof(cmd), "bash %s/tests/integration/tls_certs.sh %s >/dev/null",
             src ? src : "..", g_dir);
    if (system(cmd) != 0)
        return -1;
    snprintf(file[0], sizeof(file[0]), "%s/server.pem", g_dir);
    snprintf(file[1], sizeof(file[1]), "%s/server.key", g_dir);
    snprintf(file[2], sizeof(file[2]), "%s/ca.pem", g_dir);
    o.cert_file = file[0];
    o.key_file = file[1];
    o.ca_file = file[2];
    o.server_name = "localhost"; /* the certificate's DNS name: nng does not match IP SANs */
    return mt_tls_new(&o, &g_tls, &err) == MT_OK ? 0 : -1;
}

static int certs_remove(void **state)
{
    char cmd[128];
    (void)state;
    mt_tls_free(g_tls);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

#define CONFORMANCE(t)                                                                             \
    {                                                                                              \
        "test_coll_conformance_" #t, test_coll_conformance, NULL, NULL, &t                         \
    }

int main(void)
{
    const struct CMUnitTest tests[] = {
        CONFORMANCE(in_process), CONFORMANCE(tcp),
        CONFORMANCE(ipc),        CONFORMANCE(shm_chosen),
        CONFORMANCE(shm_url),    CONFORMANCE(nng_tcp),
        CONFORMANCE(tls),        CONFORMANCE(backend_forward),
        CONFORMANCE(shm_window),
    };
    mt_log_set_sink(log_sink, NULL);
    return cmocka_run_group_tests(tests, certs_make, certs_remove);
}
