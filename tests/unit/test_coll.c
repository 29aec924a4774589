/* SPDX-License-Identifier: MIT */
/*
 * test_coll.c — unit tests for core/coll (mt_coll.h): every collective with
 * 1..8 device threads, awkward sizes, groups along one dimension of a 2-D
 * layout, bit-exact against the documented serial order and within tolerance
 * of a double-precision sum; error codes; deadlines; the data-plane transports
 * between two endpoints of this process (direct tcp and ipc, nng tcp);
 * HMAC-SHA-256 against RFC 4231; data-plane authentication (wrong token).
 */
#include "mt_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll_int.h"
#include "coll/mt_coll.h"
#include "coll/mt_coll_backend.h"
#include "coll_test_jobs.h"
#include "coll_test_util.h"

static const size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 97, 1000, 4099, 65537};

/* Allreduce over the whole world of p threads, every size, bit-exact vs reference. */
static void allreduce_world_opts(int p, const mt_coll_world_opts *opts)
{
    mt_coll_world_opts o = *opts;
    mt_coll_world *w;
    int group[MAXR];
    assert_int_equal(mt_coll_world_new_local(p, &o, &w, NULL), MT_OK);
    for (int i = 0; i < p; i++)
        group[i] = i;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        job jobs[MAXR];
        memset(jobs, 0, sizeof(jobs));
        for (int i = 0; i < p; i++)
            jobs[i] = mkjob(w, i, group, p, OP_ALLREDUCE, n, si + 1);
        run_jobs(jobs, p);
        float *ref = calloc(n + 1, sizeof(float));
        double *dref = calloc(n + 1, sizeof(double));
        reference(group, p, n, si + 1, ref, dref);
        for (int i = 0; i < p; i++) {
            if (jobs[i].rc != MT_OK)
                fail_msg("p=%d n=%zu rank %d: %s", p, n, i, jobs[i].err.msg);
            if (n > 0 && memcmp(jobs[i].buf, ref, n * sizeof(float)) != 0)
                fail_msg("p=%d n=%zu rank %d: not bit-identical to the documented order", p, n, i);
            check_close(jobs[i].buf, dref, n);
        }
        free(ref);
        free(dref);
        free_jobs(jobs, p);
    }
    mt_coll_world_free(w);
}

static void allreduce_world(int p, size_t seg_bytes, size_t direct_bytes)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    o.segment_bytes = seg_bytes;
    o.direct_bytes = direct_bytes;
    allreduce_world_opts(p, &o);
}

static void test_coll_chunk_range_partitions(void **state)
{
    (void)state;
    for (size_t n = 0; n < 40; n++) {
        for (int p = 1; p <= 9; p++) {
            size_t next = 0;
            for (int c = 0; c < p; c++) {
                size_t off, len;
                mt_coll_chunk_range(n, p, c, &off, &len);
                assert_int_equal(off, next);
                assert_true(len == n / (size_t)p || len == n / (size_t)p + 1);
                next = off + len;
            }
            assert_int_equal(next, n);
        }
    }
}

/*
 * The documented order, written out by hand: each group member contributes a value
 * whose sum depends on the association (1e8 cancels, 1 and 3 are lost or kept).
 */
/* coll__add8 (the vector additions every layer uses) gives the scalar loop's bits in either
 * operand order at every length around its 8-lane blocks and at an unaligned source; a NaN
 * stays a NaN (which payload survives two NaNs is not promised: C lets the compiler swap the
 * operands of a float addition). */
static void test_coll_add8_matches_scalar_order(void **state)
{
    (void)state;
    float s[41], d0[40], d[40];
    uint32_t x = 12345;
    for (int i = 0; i < 41; i++) {
        x = x * 1103515245u + 12345u;
        s[i] = (float)(int32_t)x * 1e-7f;
    }
    for (int i = 0; i < 40; i++)
        d0[i] = (float)(i % 7) - 3.25f + (float)i * 1e-3f;
    s[9] = NAN;
    d0[21] = NAN;
    for (size_t n = 0; n <= 40; n++) {
        for (int first = 0; first < 2; first++) {
            for (int off = 0; off < 2; off++) {
                memcpy(d, d0, sizeof(d));
                coll__add8(d, s + off, n, first);
                for (size_t i = 0; i < 40; i++) {
                    float want = i >= n ? d0[i] : first ? s[off + i] + d0[i] : d0[i] + s[off + i];
                    if (isnan(want))
                        assert_true(isnan(d[i]));
                    else
                        assert_memory_equal(&d[i], &want, sizeof(float));
                }
            }
        }
    }
}

static void test_coll_reference_is_the_halving_tree(void **state)
{
    static const float v[6] = {1e8f, -1e8f, 1.0f, 3.0f, 0.5f, 7.0f};
    const float *in[6] = {&v[0], &v[1], &v[2], &v[3], &v[4], &v[5]};
    float x0 = v[0], x1 = v[1], x2 = v[2], x3 = v[3], x4 = v[4], x5 = v[5];
    float want[7], got;
    (void)state;
    want[1] = x0;
    want[2] = x0 + x1;
    want[3] = (x0 + x1) + x2;                      /* q=2: position 1 folds into 0 */
    want[4] = (x0 + x1) + (x2 + x3);               /* the balanced tree */
    want[5] = ((x0 + x1) + x2) + (x3 + x4);        /* leaves x0+x1, x2, x3, x4 */
    want[6] = ((x0 + x1) + (x2 + x3)) + (x4 + x5); /* leaves x0+x1, x2+x3, x4, x5 */
    for (int p = 1; p <= 6; p++) {
        mt_coll_reference_allreduce(in, p, 1, &got);
        if (memcmp(&got, &want[p], sizeof(float)) != 0)
            fail_msg("p=%d: reference %.9g, documented tree %.9g", p, (double)got, (double)want[p]);
    }
    /* the association is visible: the ring fold of chunk 0 gives 0, the tree 4 */
    float ring4 = ((x1 + x2) + x3) + x0;
    assert_true(want[4] == 4.0f);
    assert_true(memcmp(&ring4, &want[4], sizeof(float)) != 0);
}

static void test_coll_allreduce_bit_exact_1_to_8(void **state)
{
    (void)state;
    for (int p = 1; p <= MAXR; p++) {
        allreduce_world(p, 256 * 1024, 0);         /* ring for every size */
        allreduce_world(p, 256 * 1024, 64 * 1024); /* direct exchange up to 64 KiB */
    }
}

/*
 * A device thread waiting for another device of its process polls for opts.local_spin_us before
 * it sleeps, and the poll ends at the partner's wake-up: with a one-second poll every size of
 * every group size still gives the same bits, and the whole run takes well under a second per
 * size (a wake-up the poll missed would cost its full second, each time). Without polls (0) the
 * same bits.
 */
static double now_s(void);

static void test_coll_local_polls_end_at_the_wake_up(void **state)
{
    (void)state;
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    o.local_spin_us = 1000000;
    double t0 = now_s();
    for (int p = 2; p <= 3; p++)
        allreduce_world_opts(p, &o);
    double took = now_s() - t0;
    if (took > 8.0)
        fail_msg("allreduces with 1 s polls took %.1f s: a poll did not end at its wake-up", took);
    o.local_spin_us = 0;
    allreduce_world_opts(2, &o);
    o.local_spin_us = -1; /* 0 .. 1e6 us */
    mt_coll_world *w = NULL;
    mt_err err = MT_ERR_INIT;
    assert_int_equal(mt_coll_world_new_local(2, &o, &w, &err), MT_INVALID_ARGUMENT);
    assert_null(w);
    assert_non_null(strstr(err.msg, "local_spin_us -1"));
}

static void test_coll_allreduce_small_segments_same_bits(void **state)
{
    (void)state;
    /* many segments per chunk: the order (and so the bits) must not change */
    allreduce_world(3, 16, 0);
    allreduce_world(4, 100, 0);
}

/* 8 ranks as a 4x2 layout: groups along the first dimension, run concurrently. */
static void test_coll_groups_along_one_dimension(void **state)
{
    static const int g0[] = {0, 2, 4, 6}, g1[] = {1, 3, 5, 7};
    static const int r0[] = {0, 1}, r1[] = {2, 3}, r2[] = {4, 5}, r3[] = {6, 7};
    const int *rows[] = {r0, r1, r2, r3};
    mt_coll_world *w;
    (void)state;
    assert_int_equal(mt_coll_world_new_local(8, NULL, &w, NULL), MT_OK);
    for (int dim = 0; dim < 2; dim++) {
        size_t n = 1009;
        job jobs[8];
        for (int r = 0; r < 8; r++) {
            const int *g = dim == 0 ? (r % 2 == 0 ? g0 : g1) : rows[r / 2];
            jobs[r] = mkjob(w, r, g, dim == 0 ? 4 : 2, OP_ALLREDUCE, n, 42);
        }
        run_jobs(jobs, 8);
        for (int r = 0; r < 8; r++) {
            float ref[1009];
            double dref[1009];
            assert_int_equal(jobs[r].rc, MT_OK);
            reference(jobs[r].group, jobs[r].gsize, n, 42, ref, dref);
            assert_memory_equal(jobs[r].buf, ref, n * sizeof(float));
            check_close(jobs[r].buf, dref, n);
        }
        free_jobs(jobs, 8);
    }
    mt_coll_world_free(w);
}

/* A group given in a non-sorted order: the order is the group's, not the ranks'. */
static void test_coll_group_order_defines_reduction(void **state)
{
    static const int g[] = {3, 0, 2};
    mt_coll_world *w;
    job jobs[3];
    size_t n = 101;
    float ref[101];
    double dref[101];
    (void)state;
    assert_int_equal(mt_coll_world_new_local(4, NULL, &w, NULL), MT_OK);
    for (int i = 0; i < 3; i++)
        jobs[i] = mkjob(w, g[i], g, 3, OP_ALLREDUCE, n, 5);
    run_jobs(jobs, 3);
    reference(g, 3, n, 5, ref, dref);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(jobs[i].rc, MT_OK);
        assert_memory_equal(jobs[i].buf, ref, n * sizeof(float));
    }
    free_jobs(jobs, 3);
    mt_coll_world_free(w);
}

static void test_coll_reduce_scatter_matches_allreduce_chunk(void **state)
{
    (void)state;
    /* pass 0: the one-hop path for small sizes; pass 1: the halving + scatter for every size */
    for (int pass = 0; pass < 2; pass++) {
        for (int p = 1; p <= MAXR; p++) {
            mt_coll_world *w;
            mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
            int group[MAXR];
            for (int i = 0; i < p; i++)
                group[i] = i;
            o.direct_bytes = pass == 0 ? o.direct_bytes : 0;
            o.segment_bytes = pass == 0 ? o.segment_bytes : 4096; /* several segments per part */
            assert_int_equal(mt_coll_world_new_local(p, &o, &w, NULL), MT_OK);
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
                size_t n = sizes[si];
                job jobs[MAXR];
                for (int i = 0; i < p; i++)
                    jobs[i] = mkjob(w, i, group, p, OP_RS, n, 9);
                run_jobs(jobs, p);
                float *ref = calloc(n + 1, sizeof(float));
                double *dref = calloc(n + 1, sizeof(double));
                reference(group, p, n, 9, ref, dref);
                for (int i = 0; i < p; i++) {
                    size_t off, len;
                    if (jobs[i].rc != MT_OK)
                        fail_msg("pass %d p=%d n=%zu rank %d: %s", pass, p, n, i, jobs[i].err.msg);
                    mt_coll_chunk_range(n, p, i, &off, &len);
                    if (len > 0 && memcmp(jobs[i].buf, ref + off, len * sizeof(float)) != 0)
                        fail_msg("pass %d p=%d n=%zu rank %d: chunk differs from the allreduce's",
                                 pass, p, n, i);
                }
                free(ref);
                free(dref);
                free_jobs(jobs, p);
            }
            mt_coll_world_free(w);
        }
    }
}

static void test_coll_allgather_concatenates_in_group_order(void **state)
{
    static const int g[] = {2, 0, 1};
    mt_coll_world *w;
    (void)state;
    assert_int_equal(mt_coll_world_new_local(3, NULL, &w, NULL), MT_OK);
    for (size_t si = 0; si < 9; si++) {
        size_t n = sizes[si];
        job jobs[3];
        for (int i = 0; i < 3; i++)
            jobs[i] = mkjob(w, g[i], g, 3, OP_AG, n, 3);
        run_jobs(jobs, 3);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(jobs[i].rc, MT_OK);
            for (int m = 0; m < 3; m++) {
                for (size_t e = 0; e < n; e++)
                    assert_true(jobs[i].buf[(size_t)m * n + e] == ct_val(g[m], e, 3));
            }
        }
        free_jobs(jobs, 3);
    }
    mt_coll_world_free(w);
}

static void test_coll_broadcast_from_any_root(void **state)
{
    static const int g[] = {0, 1, 2, 3, 4};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w;
    (void)state;
    o.segment_bytes = 64; /* several segments: exercises the pipelined chain */
    assert_int_equal(mt_coll_world_new_local(5, &o, &w, NULL), MT_OK);
    for (int root = 0; root < 5; root++) {
        size_t n = root == 0 ? 0 : 97 * (size_t)root;
        job jobs[5];
        for (int i = 0; i < 5; i++)
            jobs[i] = with_root(mkjob(w, i, g, 5, OP_BCAST, n, 11), root);
        run_jobs(jobs, 5);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(jobs[i].rc, MT_OK);
            for (size_t e = 0; e < n; e++)
                assert_true(jobs[i].buf[e] == ct_val(root, e, 11));
        }
        free_jobs(jobs, 5);
    }
    mt_coll_world_free(w);
}

/* The barrier holds everyone until the last member arrives. */
typedef struct late_arg {
    mt_coll_world *w;
    int rank, p;
    int delay_ms;
    double left_at;
    mt_code rc;
} late_arg;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *barrier_main(void *arg)
{
    late_arg *a = arg;
    int g[MAXR];
    for (int i = 0; i < a->p; i++)
        g[i] = i;
    mt_coll_group grp = {g, a->p};
    if (a->delay_ms > 0)
        usleep((useconds_t)a->delay_ms * 1000u);
    a->rc = mt_coll_barrier(mt_coll_world_comm(a->w, a->rank), &grp, NULL, NULL);
    a->left_at = now_s();
    return NULL;
}

static void test_coll_barrier_waits_for_last(void **state)
{
    mt_coll_world *w;
    late_arg a[4];
    pthread_t t[4];
    (void)state;
    assert_int_equal(mt_coll_world_new_local(4, NULL, &w, NULL), MT_OK);
    double t0 = now_s();
    for (int i = 0; i < 4; i++) {
        a[i] = (late_arg){.w = w, .rank = i, .p = 4, .delay_ms = i == 2 ? 200 : 0};
        pthread_create(&t[i], NULL, barrier_main, &a[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i].rc, MT_OK);
        assert_true(a[i].left_at - t0 >= 0.19);
    }
    mt_coll_world_free(w);
}

static void test_coll_invalid_arguments(void **state)
{
    static const int g[] = {0, 1}, dup[] = {0, 0}, out[] = {0, 9}, other[] = {1, 2};
    mt_coll_world *w;
    mt_err err = MT_ERR_INIT;
    float b[4] = {0};
    (void)state;
    assert_int_equal(mt_coll_world_new_local(0, NULL, &w, &err), MT_INVALID_ARGUMENT);
    assert_null(w);
    mt_coll_world_opts bad = MT_COLL_WORLD_DEFAULTS;
    bad.segment_bytes = 0;
    assert_int_equal(mt_coll_world_new_local(2, &bad, &w, &err), MT_INVALID_ARGUMENT);
    bad = (mt_coll_world_opts)MT_COLL_WORLD_DEFAULTS;
    bad.drive_spin_us = -1; /* the driving thread's polls: 0 .. 1e6 us */
    assert_int_equal(mt_coll_world_new_local(2, &bad, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "drive_spin_us -1"));
    assert_int_equal(mt_coll_world_new_local(3, NULL, &w, &err), MT_OK);
    mt_coll_comm *c0 = mt_coll_world_comm(w, 0);
    assert_null(mt_coll_world_comm(w, 3));
    assert_null(mt_coll_world_comm(w, -1));
    assert_int_equal(mt_coll_comm_rank(c0), 0);
    assert_int_equal(mt_coll_world_size(w), 3);
    mt_coll_group gn = {other, 2};
    assert_int_equal(mt_coll_allreduce_sum(c0, &gn, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not a member"));
    mt_coll_group gd = {dup, 2}, go = {out, 2}, ge = {g, 0}, gg = {g, 2};
    assert_int_equal(mt_coll_allreduce_sum(c0, &gd, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "twice"));
    assert_int_equal(mt_coll_allreduce_sum(c0, &go, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_allreduce_sum(c0, &ge, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_allreduce_sum(c0, NULL, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_allreduce_sum(c0, &gg, NULL, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_reduce_scatter(c0, &gg, NULL, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_allgather(c0, &gg, b, NULL, 2, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_broadcast(c0, &gg, b, 4, 2, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "root"));
    assert_int_equal(mt_coll_barrier(c0, &gn, NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_allreduce_sum(NULL, &gg, b, 4, NULL, &err), MT_INVALID_ARGUMENT);
    mt_coll_world_free(w);
    mt_coll_world_free(NULL);
}

/* A member that arrives after the deadline: the others fail in time and name it;
 * the late one fails too (the collective is over), and the next one works. */
static void test_coll_deadline_names_missing_rank(void **state)
{
    static const int g[] = {0, 1, 2, 3};
    mt_coll_world *w;
    job jobs[4];
    (void)state;
    assert_int_equal(mt_coll_world_new_local(4, NULL, &w, NULL), MT_OK);
    for (int i = 0; i < 4; i++)
        jobs[i] = with_delay(with_call(mkjob(w, i, g, 4, OP_ALLREDUCE, 100, 1), 1, 0, 300),
                             i == 3 ? 700 : 0);
    run_jobs(jobs, 4);
    assert_int_not_equal(jobs[3].rc, MT_OK);
    for (int i = 0; i < 3; i++) {
        assert_true(jobs[i].rc == MT_DEADLINE_EXCEEDED || jobs[i].rc == MT_UNAVAILABLE);
        assert_non_null(strstr(jobs[i].err.msg, "rank 3"));
        assert_true(jobs[i].secs < 0.3 + 1.0);
        assert_true(jobs[i].secs >= 0.25 || jobs[i].rc != MT_DEADLINE_EXCEEDED);
    }
    free_jobs(jobs, 4);
    /* the world is usable again afterwards, with a new tag */
    for (int i = 0; i < 4; i++)
        jobs[i] = with_call(mkjob(w, i, g, 4, OP_ALLREDUCE, 50, 2), 2, 0, 0);
    run_jobs(jobs, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(jobs[i].rc, MT_OK);
    free_jobs(jobs, 4);
    mt_coll_world_free(w);
}

/* Disagreements between members are INVALID_ARGUMENT on every participant. */
static void mismatch_case(int kind, int late)
{
    static const int g[] = {0, 1, 2};
    mt_coll_world *w;
    job jobs[3];
    assert_int_equal(mt_coll_world_new_local(3, NULL, &w, NULL), MT_OK);
    for (int i = 0; i < 3; i++) {
        jobs[i] = with_call(mkjob(w, i, g, 3, OP_ALLREDUCE, 64, 1), 7, 1, 2000);
    }
    if (kind == 0)
        jobs[1].n = 65; /* wrong size */
    else if (kind == 1)
        jobs[2].call.step = 6; /* stale step */
    else if (kind == 2)
        jobs[0].op = OP_BCAST; /* different collective */
    else
        jobs[1].call.seq = 2; /* out of sequence */
    if (late < 3)
        jobs[late].delay_ms = 50; /* vary who starts last */
    run_jobs(jobs, 3);
    for (int i = 0; i < 3; i++) {
        if (jobs[i].rc != MT_INVALID_ARGUMENT)
            fail_msg("case %d late %d rank %d: %s: %s", kind, late, i, mt_code_name(jobs[i].rc),
                     jobs[i].err.msg);
        assert_true(jobs[i].secs < 1.5);
    }
    free_jobs(jobs, 3);
    mt_coll_world_free(w);
}

static void test_coll_mismatch_is_invalid_everywhere(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        for (int late = 0; late < 4; late++)
            mismatch_case(k, late);
    }
}

typedef struct bucket_arg {
    mt_coll_bucket *b;
    mt_coll_comm *c;
    const mt_coll_group *g;
    mt_code rc;
} bucket_arg;

static void *bucket_main(void *arg)
{
    bucket_arg *a = arg;
    a->rc = mt_coll_bucket_allreduce(a->b, a->c, a->g, NULL, NULL);
    return NULL;
}

/* Three tensors and an empty one over 3 members, each tensor in its own row (packed) and back to
 * back in one array (in place): every element's sum, exact. */
static void test_coll_bucket_fuses_tensors(void **state)
{
    static const int g[] = {0, 1, 2};
    static const size_t lens[3] = {1, 20, 7}, at[3] = {0, 1, 21};
    mt_coll_group grp = {g, 3};
    mt_err err = MT_ERR_INIT;
    float rows[3][3][20], flat[3][28];
    (void)state;
    for (int gap = 0; gap < 2; gap++) {
        mt_coll_world *w;
        mt_coll_bucket *b[3];
        float *t[3][3];
        bucket_arg a[3];
        pthread_t th[3];
        assert_int_equal(mt_coll_world_new_local(3, NULL, &w, NULL), MT_OK);
        for (int r = 0; r < 3; r++) {
            assert_int_equal(mt_coll_bucket_new(&b[r], NULL), MT_OK);
            for (int k = 0; k < 3; k++) {
                t[r][k] = gap ? rows[r][k] : flat[r] + at[k];
                for (size_t e = 0; e < lens[k]; e++)
                    t[r][k][e] = (float)(r * 100 + k * 10) + (float)e * 0.5f;
                assert_int_equal(mt_coll_bucket_add(b[r], t[r][k], lens[k], NULL), MT_OK);
            }
            assert_int_equal(mt_coll_bucket_add(b[r], NULL, 0, NULL), MT_OK);
            assert_int_equal(mt_coll_bucket_size(b[r]), 28);
        }
        assert_int_equal(mt_coll_bucket_add(b[0], NULL, 3, &err), MT_INVALID_ARGUMENT);
        for (int r = 0; r < 3; r++) {
            a[r] = (bucket_arg){b[r], mt_coll_world_comm(w, r), &grp, MT_UNKNOWN};
            pthread_create(&th[r], NULL, bucket_main, &a[r]);
        }
        for (int r = 0; r < 3; r++)
            pthread_join(th[r], NULL);
        for (int r = 0; r < 3; r++) {
            assert_int_equal(a[r].rc, MT_OK);
            for (int k = 0; k < 3; k++) {
                for (size_t e = 0; e < lens[k]; e++) /* exact: small integers and halves */
                    assert_true(t[r][k][e] == (float)(300 + k * 30) + (float)e * 1.5f);
            }
            mt_coll_bucket_free(b[r]);
        }
        mt_coll_world_free(w);
    }
    mt_coll_bucket_free(NULL);
}

typedef struct shard_arg {
    mt_coll_bucket *g, *v; /* gradients (reduce-scattered), values (allgathered) */
    mt_coll_comm *c;
    const mt_coll_group *grp;
    float *chunk; /* the reduce-scatter's chunk, copied out */
    float *at;    /* where the bucket returned it */
    size_t off, len;
    mt_code rc;
} shard_arg;

static void *shard_main(void *arg)
{
    shard_arg *a = arg;
    float *ch = NULL;
    a->rc = mt_coll_bucket_reduce_scatter(a->g, a->c, a->grp, NULL, &ch, &a->off, &a->len, NULL);
    a->at = ch;
    if (a->rc == MT_OK && a->len > 0)
        memcpy(a->chunk, ch, a->len * sizeof(float));
    if (a->rc == MT_OK)
        a->rc = mt_coll_bucket_allgather(a->v, a->c, a->grp, NULL, NULL);
    return NULL;
}

/* Fused element e of a bucket of two tensors cut at cut laid in base: back to back, or (gap) with
 * one float between them. */
static float *fused_at(float *base, size_t cut, int gap, size_t e)
{
    return base + e + (gap && e >= cut ? 1 : 0);
}

/*
 * The sharded pair on 2 and 3 members, small (one hop) and large (the tree) buckets of two
 * tensors, back to back (in place) and with a gap between them (packed): each member's
 * reduce-scatter chunk is its mt_coll_chunk_range of the fused elements with the bits of
 * mt_coll_reference_allreduce, returned inside the tensors when they are back to back (the
 * tensors left as they were otherwise); after the allgather every member's value tensors hold, in
 * each chunk, the chunk owner's values (sizes that divide by the members: straight into them).
 */
static void test_coll_bucket_sharded_pair(void **state)
{
    static const int ranks[] = {0, 1, 2};
    static const size_t lens[] = {7, 12, 40001, 40002};
    (void)state;
    for (int p = 2; p <= 3; p++)
        for (int z = 0; z < 4; z++)
            for (int gap = 0; gap < 2; gap++) {
                size_t n = lens[z], cut = n / 3;
                mt_coll_group grp = {ranks, p};
                mt_coll_world *w;
                float *gin[3], *fin[3], *vals[3], *ref = calloc(n, sizeof(float));
                const float *ins[3];
                shard_arg a[3];
                pthread_t th[3];
                assert_int_equal(mt_coll_world_new_local(p, NULL, &w, NULL), MT_OK);
                for (int r = 0; r < p; r++) {
                    gin[r] = calloc(n + 1, sizeof(float));
                    fin[r] = calloc(n, sizeof(float));
                    vals[r] = calloc(n + 1, sizeof(float));
                    ins[r] = fin[r];
                    for (size_t e = 0; e < n; e++) { /* sums that round: the order shows */
                        fin[r][e] = 1.0f / (float)(e % 97 + 1) + (float)r * 0.3f + 1e-7f * (float)e;
                        *fused_at(gin[r], cut, gap, e) = fin[r][e];
                        *fused_at(vals[r], cut, gap, e) = (float)(r * 1000000) + (float)e;
                    }
                    a[r] = (shard_arg){.c = mt_coll_world_comm(w, r),
                                       .grp = &grp,
                                       .chunk = calloc(n, sizeof(float)),
                                       .rc = MT_UNKNOWN};
                    assert_int_equal(mt_coll_bucket_new(&a[r].g, NULL), MT_OK);
                    assert_int_equal(mt_coll_bucket_new(&a[r].v, NULL), MT_OK);
                    assert_int_equal(mt_coll_bucket_add(a[r].g, gin[r], cut, NULL), MT_OK);
                    assert_int_equal(
                        mt_coll_bucket_add(a[r].g, fused_at(gin[r], cut, gap, cut), n - cut, NULL),
                        MT_OK);
                    assert_int_equal(mt_coll_bucket_add(a[r].v, vals[r], cut, NULL), MT_OK);
                    assert_int_equal(
                        mt_coll_bucket_add(a[r].v, fused_at(vals[r], cut, gap, cut), n - cut, NULL),
                        MT_OK);
                }
                mt_coll_reference_allreduce(ins, p, n, ref);
                for (int r = 0; r < p; r++)
                    assert_int_equal(pthread_create(&th[r], NULL, shard_main, &a[r]), 0);
                for (int r = 0; r < p; r++)
                    assert_int_equal(pthread_join(th[r], NULL), 0);
                for (int r = 0; r < p; r++) {
                    size_t off, len;
                    assert_int_equal(a[r].rc, MT_OK);
                    mt_coll_chunk_range(n, p, r, &off, &len);
                    assert_int_equal(a[r].off, off);
                    assert_int_equal(a[r].len, len);
                    assert_memory_equal(a[r].chunk, ref + off, len * sizeof(float));
                    if (!gap) /* in place: the chunk is the tensors' */
                        assert_ptr_equal(a[r].at, gin[r] + off);
                    for (size_t e = 0; gap && e < n; e++) /* packed: left as they were */
                        assert_true(*fused_at(gin[r], cut, gap, e) == fin[r][e]);
                    for (int c = 0; c < p; c++) {
                        mt_coll_chunk_range(n, p, c, &off, &len);
                        for (size_t e = off; e < off + len; e++)
                            assert_true(*fused_at(vals[r], cut, gap, e) ==
                                        (float)(c * 1000000) + (float)e);
                    }
                }
                for (int r = 0; r < p; r++) {
                    mt_coll_bucket_free(a[r].g);
                    mt_coll_bucket_free(a[r].v);
                    free(a[r].chunk);
                    free(gin[r]);
                    free(fin[r]);
                    free(vals[r]);
                }
                free(ref);
                mt_coll_world_free(w);
            }
}

/* The member must be in the group: both halves refuse a group without its rank. */
static void test_coll_bucket_sharded_not_member(void **state)
{
    static const int other[] = {1};
    mt_coll_group grp = {other, 1};
    mt_coll_world *w;
    mt_coll_bucket *b;
    float t[4] = {1, 2, 3, 4}, *ch = NULL;
    size_t off = 9, len = 9;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_coll_world_new_local(2, NULL, &w, NULL), MT_OK);
    assert_int_equal(mt_coll_bucket_new(&b, NULL), MT_OK);
    assert_int_equal(mt_coll_bucket_add(b, t, 4, NULL), MT_OK);
    assert_int_equal(mt_coll_bucket_reduce_scatter(b, mt_coll_world_comm(w, 0), &grp, NULL, &ch,
                                                   &off, &len, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "coll bucket: rank 0 is not in the group"));
    assert_null(ch);
    mt_err_clear(&err);
    assert_int_equal(mt_coll_bucket_allgather(b, mt_coll_world_comm(w, 0), &grp, NULL, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not in the group"));
    mt_coll_bucket_free(b);
    mt_coll_world_free(w);
}

/* Shared memory for the endpoints net_pair opens (both processes of one host). */
static mt_coll_shm_mode pair_shm = MT_COLL_SHM_AUTO;

/* Two data-plane endpoints in this process stand for two worker processes. */
static void net_pair(const char *url0, const char *url1, int per_proc, mt_coll_net **nets,
                     mt_coll_world **ws, const mt_coll_world_opts *o)
{
    mt_coll_rank_addr table[MAXR];
    mt_err err = MT_ERR_INIT;
    mt_coll_net_opts no = MT_COLL_NET_DEFAULTS;
    no.shm = pair_shm;
    assert_int_equal(mt_coll_net_new_opts(url0, &no, &nets[0], &err), MT_OK);
    assert_int_equal(mt_coll_net_new_opts(url1, &no, &nets[1], &err), MT_OK);
    assert_true(strncmp(mt_coll_net_addr(nets[0]), url0, 6) == 0);
    assert_true(strncmp(mt_coll_net_addr(nets[1]), url1, 6) == 0);
    for (int r = 0; r < 2 * per_proc; r++)
        table[r] = (mt_coll_rank_addr){mt_coll_net_addr(nets[r / per_proc]), r % per_proc};
    for (int k = 0; k < 2; k++) {
        if (mt_coll_world_new_net(nets[k], 2 * per_proc, table, o, &ws[k], &err) != MT_OK)
            fail_msg("world %d: %s", k, err.msg);
    }
}

/* Allreduce n floats over group g (4 ranks, 2 per world of ws); bit-exact to the reference. */
static void pair_allreduce_exact(mt_coll_world **ws, const int *g, size_t n, uint64_t seed)
{
    job jobs[4];
    for (int r = 0; r < 4; r++)
        jobs[r] = mkjob(ws[r / 2], r, g, 4, OP_ALLREDUCE, n, seed);
    run_jobs(jobs, 4);
    float *ref = calloc(n + 1, sizeof(float));
    double *dref = calloc(n + 1, sizeof(double));
    reference(g, 4, n, seed, ref, dref);
    for (int r = 0; r < 4; r++) {
        if (jobs[r].rc != MT_OK)
            fail_msg("n=%zu rank %d: %s", n, r, jobs[r].err.msg);
        if (n > 0 && memcmp(jobs[r].buf, ref, n * sizeof(float)) != 0)
            fail_msg("n=%zu rank %d: not bit-identical to the documented order", n, r);
    }
    free(ref);
    free(dref);
    free_jobs(jobs, 4);
}

/* As below, and the frames between the endpoints went by link ("shm", "tcp", ...). */
static void net_allreduce_matches_local_via(const char *url0, const char *url1,
                                            mt_coll_shm_mode shm, const char *link);

static void net_allreduce_matches_local(const char *url0, const char *url1)
{
    net_allreduce_matches_local_via(url0, url1, MT_COLL_SHM_AUTO, NULL);
}

static void net_allreduce_matches_local_via(const char *url0, const char *url1,
                                            mt_coll_shm_mode shm, const char *link)
{
    static const int g[] = {0, 1, 2, 3}, ga[] = {0, 2}, gb[] = {1, 3};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    o.job_id = 77;
    o.segment_bytes = 4096;
    pair_shm = shm;
    net_pair(url0, url1, 2, nets, ws, &o);
    pair_shm = MT_COLL_SHM_AUTO;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        pair_allreduce_exact(ws, g, sizes[si], 100 + si);
    /* groups along the other dimension: every hop crosses the endpoints */
    job jobs[4];
    for (int r = 0; r < 4; r++)
        jobs[r] = with_root(mkjob(ws[r / 2], r, r % 2 ? gb : ga, 2,
                                  r == 3 ? OP_BCAST : (r == 1 ? OP_BCAST : OP_AG), 333, 4),
                            3);
    run_jobs(jobs, 4);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(jobs[r].rc, MT_OK);
        for (size_t e = 0; e < 333; e++) {
            if (r % 2)
                assert_true(jobs[r].buf[e] == ct_val(3, e, 4));
            else
                assert_true(jobs[r].buf[e] == ct_val(0, e, 4) &&
                            jobs[r].buf[333 + e] == ct_val(2, e, 4));
        }
    }
    free_jobs(jobs, 4);
    for (int k = 0; link != NULL && k < 2; k++) {
        const char *via = mt_coll_world_link(ws[k], mt_coll_net_addr(nets[1 - k]));
        if (strcmp(via, link) != 0)
            fail_msg("endpoint %d reached the other by %s, want %s", k, via, link);
    }
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/*
 * Hierarchical reduction: 2 processes x 2 devices, each process holding consecutive group
 * positions, exchange only at tree distance 2 across processes, so each process sends n floats
 * to the other per allreduce (its two devices: a quarter of the buffer each, in each phase) -
 * where a flat ring over the 4 ranks would send 1.5 n. Interleaving the processes in the
 * group ({0,2,1,3}) makes the distance-1 exchanges cross instead: 2 n, and the same bits.
 */
static void test_coll_net_hierarchical_traffic(void **state)
{
    static const int seq[] = {0, 1, 2, 3}, mixed[] = {0, 2, 1, 3};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    (void)state;
    o.job_id = 78;
    o.direct_bytes = 0; /* the tree at every size */
    o.segment_bytes = 4096;
    net_pair("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 2, nets, ws, &o);
    for (int order = 0; order < 2; order++) {
        const int *g = order == 0 ? seq : mixed;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            size_t n = sizes[si];
            uint64_t before[2] = {coll__world_remote_floats(ws[0]),
                                  coll__world_remote_floats(ws[1])};
            pair_allreduce_exact(ws, g, n, 300 + si);
            for (int k = 0; k < 2; k++) {
                uint64_t sent = coll__world_remote_floats(ws[k]) - before[k];
                if (sent != (order == 0 ? n : 2 * n))
                    fail_msg("order %d n=%zu: process %d sent %llu floats to the other, want %zu",
                             order, n, k, (unsigned long long)sent, order == 0 ? n : 2 * n);
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

static void test_coll_net_tcp_bit_identical_to_local(void **state)
{
    (void)state;
    net_allreduce_matches_local_via("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", MT_COLL_SHM_OFF,
                                    "tcp");
}

/* Two endpoints of one host move their tcp:// connections to shared memory by themselves. */
static void test_coll_net_shm_chosen_on_one_host(void **state)
{
    (void)state;
    net_allreduce_matches_local_via("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", MT_COLL_SHM_AUTO,
                                    "shm");
}

/* shm:// listeners (a Unix socket for the handshake) always use shared memory. */
static void test_coll_net_shm_url_bit_identical_to_local(void **state)
{
    char a[128], b[128];
    (void)state;
    snprintf(a, sizeof(a), "shm:///tmp/mt_coll_test_%d_a.shm", (int)getpid());
    snprintf(b, sizeof(b), "shm:///tmp/mt_coll_test_%d_b.shm", (int)getpid());
    net_allreduce_matches_local_via(a, b, MT_COLL_SHM_AUTO, "shm");
}

/* One allreduce of n floats between the single ranks of ws[0] and ws[1], which succeeds. */
static void pair_round_ok(mt_coll_world **ws, size_t n)
{
    static const int g[] = {0, 1};
    job jobs[2];
    for (int r = 0; r < 2; r++)
        jobs[r] = mkjob(ws[r], r, g, 2, OP_ALLREDUCE, n, 1);
    run_jobs(jobs, 2);
    assert_int_equal(jobs[0].rc, MT_OK);
    assert_int_equal(jobs[1].rc, MT_OK);
    free_jobs(jobs, 2);
}

/* Names of data-plane rings in /dev/shm created by process pid (-1: any). */
static int count_rings(long pid)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;
    char tail[32];
    snprintf(tail, sizeof(tail), "-%ld-", pid);
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "mtcoll-", 7) == 0 && (pid < 0 || strstr(e->d_name, tail) != NULL);
    if (d != NULL)
        closedir(d);
    return n;
}

/*
 * A ring left by a process that died between creating and handing it over is removed when an
 * endpoint opens; a running job leaves no ring in /dev/shm (they are unlinked once mapped).
 */
static pid_t make_stale_ring(void)
{
    char name[64];
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0); /* a pid that no longer runs */
    snprintf(name, sizeof(name), "/mtcoll-%016x-%ld-0", 42u, (long)child);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    return child;
}

static void test_coll_shm_rings_swept_and_unlinked(void **state)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    pid_t dead = make_stale_ring();
    (void)state;
    assert_int_equal(count_rings(dead), 1);
    o.job_id = 6;
    net_pair("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 1, nets, ws, &o);
    assert_int_equal(count_rings(dead), 0);
    pair_round_ok(ws, 100000);
    assert_string_equal(mt_coll_world_link(ws[0], mt_coll_net_addr(nets[1])), "shm");
    assert_int_equal(count_rings(getpid()), 0);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/* A reader that takes n bytes of the ring after a pause. */
typedef struct {
    coll_shm *rd;
    size_t n;
} ring_drain;

static void *drain_later(void *arg)
{
    ring_drain *d = arg;
    unsigned char buf[256];
    size_t left = d->n, got = 0;
    usleep(30000);
    while (left > 0)
        if (coll__shm_get_some(d->rd, buf, left < sizeof(buf) ? left : sizeof(buf), &got) ==
            COLL_IO_DONE)
            left -= got;
    return NULL;
}

/*
 * A writer waiting for room waits for the bytes it needs (a whole BYE header, say), not for the
 * first free byte: with 40 bytes free a wait for 72 times out, a wait for 40 returns at once, and
 * a reader that frees 100 bytes ends the wait for 72.
 */
static void test_coll_shm_wait_room_for_n_bytes(void **state)
{
    coll_shm_spec q = {.job = 77, .cap = 4096, .spin_ns = 1000};
    coll_shm *wr = NULL, *rd = NULL;
    char name[COLL_SHM_NAME];
    static unsigned char fill[4096];
    ring_drain d;
    pthread_t th;
    mt_err err = MT_ERR_INIT;
    int64_t t0;
    (void)state;
    assert_int_equal(coll__shm_create(&q, &wr, name, &err), MT_OK);
    assert_int_equal(coll__shm_attach(name, 1000, &rd, &err), MT_OK);
    coll__shm_unlink(name);
    assert_int_equal(coll__shm_write_now(wr, fill, sizeof(fill) - 40), 1);
    assert_int_equal(coll__shm_write_now(wr, fill, 72), 0);
    t0 = coll__now_ns();
    assert_int_equal(coll__shm_wait_room(wr, -1, 72, 50), COLL_IO_AGAIN);
    assert_true(coll__now_ns() - t0 >= 45 * 1000000LL); /* it waited, it did not return early */
    assert_int_equal(coll__shm_wait_room(wr, -1, 40, 50), COLL_IO_DONE);
    d = (ring_drain){rd, 100};
    assert_int_equal(pthread_create(&th, NULL, drain_later, &d), 0);
    assert_int_equal(coll__shm_wait_room(wr, -1, 72, 5000), COLL_IO_DONE);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(coll__shm_write_now(wr, fill, 72), 1);
    coll__shm_close(rd, 0);
    assert_int_equal(coll__shm_wait_room(wr, -1, 4096, 50), COLL_IO_ENDED);
    coll__shm_free(rd);
    coll__shm_free(wr);
}

/*
 * A reader adds floats straight from the ring (coll__shm_add_some): bit for bit what
 * coll__add_into gives, a float that straddles the ring's end put together, only whole floats
 * taken (half a float waits for its other half), and a writer gone in the middle of a float
 * ends the read.
 */
static void test_coll_shm_add_some_whole_floats(void **state)
{
    coll_shm_spec q = {.job = 78, .cap = 4096, .spin_ns = 1000};
    coll_shm *wr = NULL, *rd = NULL;
    char name[COLL_SHM_NAME];
    static float a[1024], d[1024], want[1024];
    unsigned char skip[3] = {1, 2, 3}, tmp[3];
    size_t got = 0, done = 0;
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (int i = 0; i < 1024; i++) {
        a[i] = (float)(i % 97) * 0.37f - 11.0f;
        d[i] = (float)(i % 13) * 1.7f + 0.25f;
        want[i] = d[i];
    }
    coll__add_into(want, (const unsigned char *)a, 1024);
    assert_int_equal(coll__shm_create(&q, &wr, name, &err), MT_OK);
    assert_int_equal(coll__shm_attach(name, 1000, &rd, &err), MT_OK);
    coll__shm_unlink(name);
    /* 3 bytes in and out: the floats then start 3 bytes into the ring and one straddles its end */
    assert_int_equal(coll__shm_write_now(wr, skip, 3), 1);
    assert_int_equal(coll__shm_get_some(rd, tmp, 3, &got), COLL_IO_DONE);
    assert_int_equal(got, 3);
    assert_int_equal(coll__shm_add_some(rd, d, 8, &got), COLL_IO_AGAIN);
    assert_int_equal(coll__shm_write_now(wr, a, sizeof(a)), 1);
    assert_int_equal(coll__shm_add_some(rd, d, 8, &got), COLL_IO_DONE); /* no more than asked */
    assert_int_equal(got, 8);
    for (done = 8; done < sizeof(a); done += got) {
        assert_int_equal(coll__shm_add_some(rd, d + done / 4, sizeof(a) - done, &got),
                         COLL_IO_DONE);
        assert_int_equal(got % 4, 0);
    }
    assert_memory_equal(d, want, sizeof(d));
    /* six bytes: one float now, the second once its last two bytes are in */
    assert_int_equal(coll__shm_write_now(wr, a, 6), 1);
    assert_int_equal(coll__shm_add_some(rd, d, 8, &got), COLL_IO_DONE);
    assert_int_equal(got, 4);
    assert_int_equal(coll__shm_add_some(rd, d + 1, 4, &got), COLL_IO_AGAIN);
    assert_int_equal(coll__shm_write_now(wr, (const unsigned char *)a + 6, 2), 1);
    assert_int_equal(coll__shm_add_some(rd, d + 1, 4, &got), COLL_IO_DONE);
    assert_int_equal(got, 4);
    /* the writer gone after half a float: the read ends */
    assert_int_equal(coll__shm_write_now(wr, a, 2), 1);
    coll__shm_close(wr, 1);
    assert_int_equal(coll__shm_add_some(rd, d, 4, &got), COLL_IO_ENDED);
    coll__shm_free(rd);
    coll__shm_free(wr);
}

/* World option mesh: checked against the world size, and errors name the axes a group runs
 * along (ranks row-major: on x=2,y=2 group {0,1} runs along y, {0,2} along x). */
static void test_coll_mesh_axes_named_in_errors(void **state)
{
    static const int gy[] = {0, 1}, gx[] = {0, 2}, gall[] = {0, 1, 2, 3};
    static const char *bad[] = {"x=3", "x=2,y=3", "x", "=2", "x=2;y=2", "x=0,y=4"};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.mesh = bad[i];
        if (mt_coll_world_new_local(4, &o, &w, &err) != MT_INVALID_ARGUMENT || w != NULL)
            fail_msg("mesh %s accepted for 4 devices", bad[i]);
    }
    o.mesh = " x = 2 , y=2";
    assert_int_equal(mt_coll_world_new_local(4, &o, &w, &err), MT_OK);
    const int *groups[] = {gy, gx, gall};
    const char *want[] = {"allreduce over y (", "allreduce over x (", "allreduce over x,y ("};
    for (int k = 0; k < 3; k++) {
        job j = with_call(mkjob(w, 0, groups[k], k == 2 ? 4 : 2, OP_ALLREDUCE, 10, 1), 1,
                          (uint32_t)k, 100);
        run_jobs(&j, 1); /* the others never come */
        assert_int_equal(j.rc, MT_DEADLINE_EXCEEDED);
        if (strstr(j.err.msg, want[k]) == NULL)
            fail_msg("want '%s' in: %s", want[k], j.err.msg);
        free_jobs(&j, 1);
    }
    mt_coll_world_free(w);
}

static void test_coll_net_opts_checked(void **state)
{
    mt_coll_net_opts no = MT_COLL_NET_DEFAULTS;
    mt_coll_net *net = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    no.shm_ring_bytes = 5000;
    assert_int_equal(mt_coll_net_new_opts("tcp://127.0.0.1:0", &no, &net, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "shm_ring_bytes"));
    assert_null(net);
    no = (mt_coll_net_opts)MT_COLL_NET_DEFAULTS;
    no.shm = MT_COLL_SHM_OFF;
    assert_int_equal(mt_coll_net_new_opts("shm:///tmp/x.shm", &no, &net, &err),
                     MT_INVALID_ARGUMENT);
    no = (mt_coll_net_opts)MT_COLL_NET_DEFAULTS;
    no.max_handshakes = 0;
    assert_int_equal(mt_coll_net_new_opts("tcp://127.0.0.1:0", &no, &net, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_net_new_opts("nng+shm:///tmp/x.shm", NULL, &net, &err),
                     MT_INVALID_ARGUMENT);
}

static void test_coll_net_nng_tcp_bit_identical_to_local(void **state)
{
    (void)state;
    net_allreduce_matches_local("nng+tcp://127.0.0.1:0", "nng+tcp://127.0.0.1:0");
}

static void test_coll_hmac_sha256_rfc4231(void **state)
{
    unsigned char key1[20], out[32], key2[131];
    static const unsigned char want1[32] = {0xb0, 0x34, 0x4c, 0x61, 0xd8, 0xdb, 0x38, 0x53, 0x5c,
                                            0xa8, 0xaf, 0xce, 0xaf, 0x0b, 0xf1, 0x2b, 0x88, 0x1d,
                                            0xc2, 0x00, 0xc9, 0x83, 0x3d, 0xa7, 0x26, 0xe9, 0x37,
                                            0x6c, 0x2e, 0x32, 0xcf, 0xf7}; /* test case 1 */
    static const unsigned char want2[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a,
                                            0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00,
                                            0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58,
                                            0xb9, 0x64, 0xec, 0x38, 0x43}; /* test case 2 */
    static const unsigned char want6[32] = {0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f, 0x0d,
                                            0x8a, 0x26, 0xaa, 0xcb, 0xf5, 0xb7, 0x7f, 0x8e, 0x0b,
                                            0xc6, 0x21, 0x37, 0x28, 0xc5, 0x14, 0x05, 0x46, 0x04,
                                            0x0f, 0x0e, 0xe3, 0x7f, 0x54}; /* test case 6 */
    static const char msg6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    (void)state;
    memset(key1, 0x0b, sizeof(key1));
    assert_int_equal(coll__hmac_sha256(key1, sizeof(key1), "Hi There", 8, out), MT_OK);
    assert_memory_equal(out, want1, 32);
    assert_int_equal(coll__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, out), MT_OK);
    assert_memory_equal(out, want2, 32);
    memset(key2, 0xaa, sizeof(key2));
    assert_int_equal(coll__hmac_sha256(key2, sizeof(key2), msg6, strlen(msg6), out), MT_OK);
    assert_memory_equal(out, want6, 32);
}

/*
 * Key lengths at the block-size edges (0, 64 and 65 bytes: the last one is hashed first) and a
 * message of several blocks: the values of Python's hmac module, which the hand-written
 * implementation this replaced also gave, so the handshake's MACs stay bit-identical.
 */
static void test_coll_hmac_sha256_edges(void **state)
{
    static const char fox[] = "The quick brown fox jumps over the lazy dog";
    unsigned char key[65], msg[1000], out[32];
    const struct {
        const void *key, *msg;
        size_t klen, mlen;
        const char *want; /* hex */
    } v[] = {
        {"", "abc", 0, 3, "fd7adb152c05ef80dccf50a1fa4c05d5a3ec6da95575fc312ae7c5d091836351"},
        {key, fox, 64, sizeof(fox) - 1,
         "4903b1fc9f41bc1abe3ff7119c4e523b91288b11c03dab1e975816150df38144"},
        {key, "", 65, 0, "93ff3114f20ef700222fc1c0334737a51a88740dc0dd2ce0ab3151f0a4a0e85a"},
        {"token-123", msg, 9, sizeof(msg),
         "28ee8e4a7458ff94f23b8c8f7e6ecdc7a5520f73d3e6a500aa5d323abbc4b51e"},
    };
    (void)state;
    for (int i = 0; i < 65; i++)
        key[i] = (unsigned char)i;
    for (int i = 0; i < 1000; i++)
        msg[i] = (unsigned char)(i * 7);
    for (size_t t = 0; t < sizeof(v) / sizeof(v[0]); t++) {
        char hex[65];
        assert_int_equal(coll__hmac_sha256(v[t].key, v[t].klen, v[t].msg, v[t].mlen, out), MT_OK);
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", out[i]);
        assert_string_equal(hex, v[t].want);
    }
}

/* Two endpoints with tokens t0, t1; a 2-rank allreduce; returns both codes and messages. */
static void auth_round(const char *t0, const char *t1, mt_code rc[2], char msg[2][MT_ERR_MSG_SIZE],
                       char addr[2][256])
{
    static const int g[] = {0, 1};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    mt_coll_rank_addr table[2];
    o.job_id = 11;
    assert_int_equal(mt_coll_net_new_auth("tcp://127.0.0.1:0", t0, &nets[0], NULL), MT_OK);
    assert_int_equal(mt_coll_net_new_auth("tcp://127.0.0.1:0", t1, &nets[1], NULL), MT_OK);
    for (int k = 0; k < 2; k++) {
        table[k] = (mt_coll_rank_addr){mt_coll_net_addr(nets[k]), 0};
        snprintf(addr[k], 256, "%s", mt_coll_net_addr(nets[k]));
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(mt_coll_world_new_net(nets[k], 2, table, &o, &ws[k], NULL), MT_OK);
    job jobs[2];
    for (int r = 0; r < 2; r++)
        jobs[r] = with_call(mkjob(ws[r], r, g, 2, OP_ALLREDUCE, 1000, 3), 1, 0, 2000);
    run_jobs(jobs, 2);
    for (int r = 0; r < 2; r++) {
        rc[r] = jobs[r].rc;
        snprintf(msg[r], MT_ERR_MSG_SIZE, "%s", jobs[r].err.msg);
        assert_true(jobs[r].secs < 2.0 + 1.0);
    }
    free_jobs(jobs, 2);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/* Same token: works. Another token, or none against a token: UNAUTHENTICATED on both sides. */
static void test_coll_net_wrong_token_is_unauthenticated(void **state)
{
    mt_code rc[2];
    char msg[2][MT_ERR_MSG_SIZE], addr[2][256];
    (void)state;
    auth_round("s3cret", "s3cret", rc, msg, addr);
    assert_int_equal(rc[0], MT_OK);
    assert_int_equal(rc[1], MT_OK);
    const char *pairs[2][2] = {{"s3cret", "other"}, {"s3cret", NULL}};
    for (int t = 0; t < 2; t++) {
        auth_round(pairs[t][0], pairs[t][1], rc, msg, addr);
        for (int r = 0; r < 2; r++) {
            if (rc[r] != MT_UNAUTHENTICATED || strstr(msg[r], "UNAUTHENTICATED") == NULL ||
                strstr(msg[r], addr[1 - r]) == NULL)
                fail_msg("case %d rank %d: %s: %s", t, r, mt_code_name(rc[r]), msg[r]);
        }
    }
}

/* A raw TCP client of a direct listener at tcp://127.0.0.1:PORT (5 s receive timeout). */
static int raw_client(const char *addr)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    const char *colon = strrchr(addr, ':');
    struct timeval tv = {.tv_sec = 5};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0 && colon != NULL);
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* 1 when the listener closed the connection (EOF or reset) within the receive timeout. */
static int closed_by_peer(int fd)
{
    char b[64];
    ssize_t n;
    while ((n = recv(fd, b, sizeof(b), 0)) > 0)
        ;
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * Bad input on the direct transport: bytes that are not a hello, and after a valid
 * hello (no token set: any MAC) a frame with a bad magic or an oversized length.
 * Each connection is closed by the listener at once (not only when reaped).
 */
static void test_coll_net_direct_rejects_bad_frames(void **state)
{
    mt_coll_net *net;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &net, &err), MT_OK);
    const char *addr = mt_coll_net_addr(net);
    for (int t = 0; t < 3; t++) {
        int fd = raw_client(addr);
        unsigned char chal[20], hello[46] = {0}, frame[72] = {0};
        uint32_t magic = 0x4844544du, code = 99, cmagic = 0x4c43544du;
        uint64_t job_id = 1, len = t == 1 ? 1 : ((uint64_t)1 << 40);
        assert_int_equal(recv(fd, chal, sizeof(chal), MSG_WAITALL), (ssize_t)sizeof(chal));
        if (t == 0) { /* garbage instead of the hello */
            memset(hello, 0x41, sizeof(hello));
            assert_int_equal(send(fd, hello, sizeof(hello), 0), (ssize_t)sizeof(hello));
            assert_true(closed_by_peer(fd));
            close(fd);
            continue;
        }
        memcpy(hello, &magic, 4);
        memcpy(hello + 4, &job_id, 8);
        assert_int_equal(send(fd, hello, sizeof(hello), 0), (ssize_t)sizeof(hello));
        assert_int_equal(recv(fd, &code, 4, MSG_WAITALL), 4);
        assert_int_equal(code, 0);
        /* t == 1: bad magic; t == 2: a DATA frame claiming 2^40 floats */
        memcpy(frame, t == 1 ? &magic : &cmagic, 4);
        frame[4] = 1;
        memcpy(frame + 64, &len, 8);
        assert_int_equal(send(fd, frame, sizeof(frame), 0), (ssize_t)sizeof(frame));
        assert_true(closed_by_peer(fd));
        close(fd);
    }
    mt_coll_net_free(net);
}

static void test_coll_net_ipc_bit_identical_to_local(void **state)
{
    char a[128], b[128];
    (void)state;
    snprintf(a, sizeof(a), "ipc:///tmp/mt_coll_test_%d_a.ipc", (int)getpid());
    snprintf(b, sizeof(b), "ipc:///tmp/mt_coll_test_%d_b.ipc", (int)getpid());
    net_allreduce_matches_local(a, b);
}

/* The peer endpoint goes away: the survivor reports UNAVAILABLE (or the deadline) naming it. */
static void test_coll_net_lost_peer_is_named(void **state)
{
    static const int g[] = {0, 1};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    char peer[256];
    (void)state;
    o.job_id = 5;
    net_pair("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 1, nets, ws, &o);
    snprintf(peer, sizeof(peer), "%s", mt_coll_net_addr(nets[1]));
    pair_round_ok(ws, 10); /* so that the connections exist */
    job jobs[2];
    mt_coll_world_free(ws[1]);
    mt_coll_net_free(nets[1]);
    jobs[0] = with_call(mkjob(ws[0], 0, g, 2, OP_ALLREDUCE, 10, 1), 1, 0, 1500);
    run_jobs(jobs, 1);
    /* the direct transport saw the connection end: UNAVAILABLE, not the deadline */
    if (jobs[0].rc != MT_UNAVAILABLE)
        fail_msg("want UNAVAILABLE: %s: %s", mt_code_name(jobs[0].rc), jobs[0].err.msg);
    if (strstr(jobs[0].err.msg, peer) == NULL)
        fail_msg("message does not name %s: %s", peer, jobs[0].err.msg);
    assert_true(jobs[0].secs < 1.5 + 1.0);
    free_jobs(jobs, 1);
    mt_coll_world_free(ws[0]);
    mt_coll_net_free(nets[0]);
}

/* A member in another process that never enters (hung): named after the PING round. */
static void test_coll_net_deadline_names_silent_member(void **state)
{
    static const int g[] = {0, 1, 2};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    mt_coll_rank_addr table[3];
    (void)state;
    o.job_id = 8;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[0], NULL), MT_OK);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[1], NULL), MT_OK);
    /* ranks 0 and 2 in endpoint 0, rank 1 alone in endpoint 1 */
    table[0] = (mt_coll_rank_addr){mt_coll_net_addr(nets[0]), 0};
    table[1] = (mt_coll_rank_addr){mt_coll_net_addr(nets[1]), 0};
    table[2] = (mt_coll_rank_addr){mt_coll_net_addr(nets[0]), 1};
    for (int k = 0; k < 2; k++)
        assert_int_equal(mt_coll_world_new_net(nets[k], 3, table, &o, &ws[k], NULL), MT_OK);
    job jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = with_call(mkjob(ws[0], i * 2, g, 3, OP_ALLREDUCE, 1000, 1), 3, 0, 400);
    run_jobs(jobs, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(jobs[i].rc, MT_DEADLINE_EXCEEDED);
        if (strstr(jobs[i].err.msg, mt_coll_net_addr(nets[1])) == NULL ||
            strstr(jobs[i].err.msg, "no answer") == NULL)
            fail_msg("rank %d does not name the silent member: %s", i * 2, jobs[i].err.msg);
        assert_true(jobs[i].secs < 0.4 + 1.0);
    }
    free_jobs(jobs, 2);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/* mt_coll_world_host_ranks: this process's ranks plus those whose address names its host (the
 * input pipeline's automatic prefetch counts a job's device threads on a host with it). */
static void test_coll_world_host_ranks(void **state)
{
    mt_coll_net *net;
    mt_coll_world *w;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &net, &err), MT_OK);
    const char *me = mt_coll_net_addr(net);
    /* ranks 0 and 3 here, 1 in another process of this host, 2 on another host, 4 on a host
     * whose name starts like this one's, 5 by a name that is not tcp:// */
    mt_coll_rank_addr t[6] = {{me, 0}, {"tcp://127.0.0.1:1", 0},  {"tcp://192.0.2.7:9", 0},
                              {me, 1}, {"tcp://127.0.0.10:1", 0}, {"ipc:///tmp/x", 0}};
    assert_int_equal(mt_coll_world_new_net(net, 6, t, NULL, &w, &err), MT_OK);
    assert_int_equal(mt_coll_world_host_ranks(w), 3);
    mt_coll_world_free(w);
    mt_coll_rank_addr one[1] = {{me, 0}};
    assert_int_equal(mt_coll_world_new_net(net, 1, one, NULL, &w, &err), MT_OK);
    assert_int_equal(mt_coll_world_host_ranks(w), 1);
    mt_coll_world_free(w);
    mt_coll_net_free(net);
}

static void test_coll_net_invalid_arguments(void **state)
{
    mt_coll_net *net, *n2;
    mt_coll_world *w, *w2;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_coll_net_new("udp://x", &net, &err), MT_INVALID_ARGUMENT);
    assert_null(net);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &net, &err), MT_OK);
    /* the same port twice cannot be listened on */
    assert_int_equal(mt_coll_net_new(mt_coll_net_addr(net), &n2, &err), MT_UNAVAILABLE);
    mt_coll_rank_addr other[2] = {{"tcp://127.0.0.1:1", 0}, {"tcp://127.0.0.1:2", 0}};
    assert_int_equal(mt_coll_world_new_net(net, 2, other, NULL, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "no rank"));
    mt_coll_rank_addr dup[2] = {{mt_coll_net_addr(net), 0}, {mt_coll_net_addr(net), 0}};
    assert_int_equal(mt_coll_world_new_net(net, 2, dup, NULL, &w, &err), MT_INVALID_ARGUMENT);
    mt_coll_rank_addr ok[2] = {{mt_coll_net_addr(net), 0}, {"tcp://127.0.0.1:1", 0}};
    assert_int_equal(mt_coll_world_new_net(net, 2, ok, NULL, &w, &err), MT_OK);
    assert_non_null(mt_coll_world_comm(w, 0));
    assert_null(mt_coll_world_comm(w, 1));
    assert_int_equal(mt_coll_world_new_net(net, 2, ok, NULL, &w2, &err), MT_FAILED_PRECONDITION);
    /* unreachable peer: the deadline, naming it */
    static const int g[] = {0, 1};
    mt_coll_group grp = {g, 2};
    mt_coll_call call = {.step = 0, .seq = 0, .deadline_ms = 300};
    float b[3] = {1, 2, 3};
    mt_code rc = mt_coll_allreduce_sum(mt_coll_world_comm(w, 0), &grp, b, 3, &call, &err);
    assert_true(rc == MT_DEADLINE_EXCEEDED || rc == MT_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "tcp://127.0.0.1:1"));
    mt_coll_world_free(w);
    mt_coll_net_free(net);
    mt_coll_net_free(NULL);
}

/* A backend whose collectives only validate the group (mt_coll_group_position). */
static mt_code idle_allreduce(mt_coll_comm *c, const mt_coll_group *g, float *buf, size_t n,
                              const mt_coll_call *call, mt_err *err)
{
    int pos;
    (void)buf;
    (void)n;
    (void)call;
    return mt_coll_group_position(c, g, &pos, err);
}

static mt_code idle_reduce_scatter(mt_coll_comm *c, const mt_coll_group *g, const float *in,
                                   float *out, size_t n, const mt_coll_call *call, mt_err *err)
{
    (void)in;
    return idle_allreduce(c, g, out, n, call, err);
}

static mt_code idle_broadcast(mt_coll_comm *c, const mt_coll_group *g, float *buf, size_t n,
                              int root, const mt_coll_call *call, mt_err *err)
{
    (void)root;
    return idle_allreduce(c, g, buf, n, call, err);
}

static mt_code idle_barrier(mt_coll_comm *c, const mt_coll_group *g, const mt_coll_call *call,
                            mt_err *err)
{
    return idle_allreduce(c, g, NULL, 0, call, err);
}

static const mt_coll_backend idle_backend = {.name = "idle",
                                             .allreduce_sum = idle_allreduce,
                                             .reduce_scatter = idle_reduce_scatter,
                                             .allgather = idle_reduce_scatter,
                                             .broadcast = idle_broadcast,
                                             .barrier = idle_barrier};

/* mt_coll_world_new_backend's codes; a backend world's comms; dispatch; group validation. */
static void test_coll_backend_world_arguments(void **state)
{
    static const int two[] = {1, 3}, twice[] = {2, 2}, out[] = {4};
    mt_coll_backend partial = idle_backend;
    mt_coll_world *w = (mt_coll_world *)&w; /* reset to NULL on failure */
    mt_err err = MT_ERR_INIT;
    int pos = 7;
    (void)state;
    partial.barrier = NULL;
    assert_int_equal(mt_coll_world_new_backend(NULL, NULL, 4, two, 2, NULL, &w, &err),
                     MT_INVALID_ARGUMENT);
    assert_null(w);
    assert_int_equal(
        mt_coll_world_new_backend(&mt_coll_backend_builtin, NULL, 4, two, 2, NULL, &w, &err),
        MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_world_new_backend(&partial, NULL, 4, two, 2, NULL, &w, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_world_new_backend(&idle_backend, NULL, 0, two, 2, NULL, &w, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_world_new_backend(&idle_backend, NULL, 4, twice, 2, NULL, &w, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "twice"));
    assert_int_equal(mt_coll_world_new_backend(&idle_backend, NULL, 4, out, 1, NULL, &w, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_world_new_backend(&idle_backend, &pos, 4, two, 2, NULL, &w, &err),
                     MT_OK);
    assert_string_equal(mt_coll_world_backend_name(w), "idle");
    assert_ptr_equal(mt_coll_world_backend_state(w), &pos);
    assert_null(mt_coll_world_comm(w, 0));
    mt_coll_comm *c = mt_coll_world_comm(w, 3);
    assert_non_null(c);
    assert_ptr_equal(mt_coll_comm_world(c), w);
    mt_coll_group g = {two, 2}, bad = {twice, 2}, other = {out, 1};
    assert_int_equal(mt_coll_group_position(c, &g, &pos, &err), MT_OK);
    assert_int_equal(pos, 1);
    /* the public calls reach the backend's operations */
    assert_int_equal(mt_coll_barrier(c, &bad, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "twice"));
    assert_int_equal(mt_coll_allreduce_sum(c, &other, NULL, 0, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "outside"));
    assert_int_equal(mt_coll_allreduce_sum(NULL, &g, NULL, 0, NULL, &err), MT_INVALID_ARGUMENT);
    mt_coll_world_cancel(w);
    assert_int_equal(mt_coll_broadcast(c, &g, NULL, 0, 1, NULL, &err), MT_CANCELLED);
    mt_coll_world_free(w); /* no state_free: the state stays the caller's */
}

/* A wildcard listener advertised as a dialable address: peers reach it, and its ranks are local. */
static void test_coll_net_set_addr_advertises_wildcard_listener(void **state)
{
    static const int g[] = {0, 1};
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    mt_err err = MT_ERR_INIT;
    char adv[64];
    const char *port;
    (void)state;
    assert_int_equal(mt_coll_net_new("tcp://0.0.0.0:0", &nets[0], &err), MT_OK);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[1], &err), MT_OK);
    port = strrchr(mt_coll_net_addr(nets[0]), ':');
    assert_non_null(port);
    assert_int_equal(strncmp(mt_coll_net_addr(nets[0]), "tcp://0.0.0.0:", 14), 0);
    snprintf(adv, sizeof(adv), "tcp://127.0.0.1%s", port);
    assert_int_equal(mt_coll_net_set_addr(nets[0], "udp://127.0.0.1:1", &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_net_set_addr(nets[0], NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_net_set_addr(nets[0], adv, &err), MT_OK);
    assert_string_equal(mt_coll_net_addr(nets[0]), adv);
    mt_coll_rank_addr table[2] = {{adv, 0}, {mt_coll_net_addr(nets[1]), 0}};
    for (int k = 0; k < 2; k++)
        if (mt_coll_world_new_net(nets[k], 2, table, NULL, &ws[k], &err) != MT_OK)
            fail_msg("world %d: %s", k, err.msg);
    assert_non_null(mt_coll_world_comm(ws[0], 0));
    assert_null(mt_coll_world_comm(ws[0], 1));
    job jobs[2];
    for (int r = 0; r < 2; r++)
        jobs[r] = mkjob(ws[r], r, g, 2, OP_ALLREDUCE, 1000, 9);
    run_jobs(jobs, 2);
    float ref[1000];
    double dref[1000];
    reference(g, 2, 1000, 9, ref, dref);
    for (int r = 0; r < 2; r++) {
        if (jobs[r].rc != MT_OK)
            fail_msg("rank %d: %s", r, jobs[r].err.msg);
        assert_memory_equal(jobs[r].buf, ref, sizeof(ref));
    }
    free_jobs(jobs, 2);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/* Both ranks' jobs of a 2-member allreduce of n floats (seed) ended OK with the reference
 * bits; frees the jobs. */
static void expect_pair_allreduce(job *jobs, const int *g, size_t n, uint64_t seed)
{
    float *ref = calloc(n, sizeof(float));
    double *dref = calloc(n, sizeof(double));
    reference(g, 2, n, seed, ref, dref);
    for (int r = 0; r < 2; r++) {
        if (jobs[r].rc != MT_OK)
            fail_msg("rank %d: %s", r, jobs[r].err.msg);
        assert_memory_equal(jobs[r].buf, ref, n * sizeof(float));
    }
    free(ref);
    free(dref);
    free_jobs(jobs, 2);
}

/*
 * A restarted job: the peer's new world (job 2) sends while this process still holds its old,
 * cancelled world (job 1); the messages wait for the new world instead of being lost in the
 * old one.
 */
static void test_coll_net_keeps_messages_of_the_next_job(void **state)
{
    static const int g[] = {0, 1};
    mt_coll_world_opts o1 = MT_COLL_WORLD_DEFAULTS, o2 = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *old, *ws[2];
    mt_err err = MT_ERR_INIT;
    pthread_t th;
    enum { N = 100000 };
    (void)state;
    o1.job_id = 1;
    o2.job_id = 2;
    o2.segment_bytes = 4096;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[0], &err), MT_OK);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[1], &err), MT_OK);
    mt_coll_rank_addr table[2] = {{mt_coll_net_addr(nets[0]), 0}, {mt_coll_net_addr(nets[1]), 0}};
    assert_int_equal(mt_coll_world_new_net(nets[0], 2, table, &o1, &old, &err), MT_OK);
    assert_int_equal(mt_coll_world_new_net(nets[1], 2, table, &o2, &ws[1], &err), MT_OK);
    mt_coll_world_cancel(old); /* what the worker does when the coordinator cancels attempt 1 */
    job jobs[2];
    jobs[1] = with_call(mkjob(ws[1], 1, g, 2, OP_ALLREDUCE, N, 3), 0, 0, 5000);
    assert_int_equal(pthread_create(&th, NULL, job_main, &jobs[1]), 0);
    usleep(300 * 1000); /* rank 1's first messages reach nets[0] while the old world holds it */
    mt_coll_world_free(old);
    assert_int_equal(mt_coll_world_new_net(nets[0], 2, table, &o2, &ws[0], &err), MT_OK);
    jobs[0] = with_call(mkjob(ws[0], 0, g, 2, OP_ALLREDUCE, N, 3), 0, 0, 5000);
    job_main(&jobs[0]);
    pthread_join(th, NULL);
    expect_pair_allreduce(jobs, g, N, 3);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/*
 * nets[1] first runs an allreduce of a world of job o1 that gives up after 300 ms (its part has
 * reached nets[0], whose live world w0 is job o2's), then joins w0's job; their allreduce must
 * complete with the right sums. Frees both worlds and nets.
 */
static void late_frames_then_pair(mt_coll_net **nets, const mt_coll_rank_addr *table,
                                  const mt_coll_world_opts *o1, const mt_coll_world_opts *o2,
                                  mt_coll_world *w0)
{
    static const int g[] = {0, 1};
    mt_coll_world *old, *ws[2] = {w0, NULL};
    mt_err err = MT_ERR_INIT;
    job jobs[2], late;
    pthread_t th;
    enum { N = 1000 };
    assert_int_equal(mt_coll_world_new_net(nets[1], 2, table, o1, &old, &err), MT_OK);
    late = with_call(mkjob(old, 1, g, 2, OP_ALLREDUCE, N, 3), 0, 0, 300);
    job_main(&late); /* sends its part of a step, then gives up waiting for rank 0's */
    assert_int_not_equal(late.rc, MT_OK);
    free_jobs(&late, 1);
    mt_coll_world_free(old);
    assert_int_equal(mt_coll_world_new_net(nets[1], 2, table, o2, &ws[1], &err), MT_OK);
    jobs[1] = with_call(mkjob(ws[1], 1, g, 2, OP_ALLREDUCE, N, 3), 0, 0, 5000);
    assert_int_equal(pthread_create(&th, NULL, job_main, &jobs[1]), 0);
    jobs[0] = with_call(mkjob(ws[0], 0, g, 2, OP_ALLREDUCE, N, 3), 0, 0, 5000);
    job_main(&jobs[0]);
    pthread_join(th, NULL);
    expect_pair_allreduce(jobs, g, N, 3);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

/*
 * A healed partition: the cut attempt's frames (job 1) reach a peer whose next attempt's world
 * (job 2) is already live. That world drops them (a job id just below its own is an earlier
 * attempt, mt_coll.h) and its collective then completes with the new attempt's peer.
 */
static void test_coll_net_drops_frames_of_an_earlier_attempt(void **state)
{
    mt_coll_world_opts o1 = MT_COLL_WORLD_DEFAULTS, o2 = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *w0;
    mt_err err = MT_ERR_INIT;
    (void)state;
    o1.job_id = 41;
    o2.job_id = 42;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[0], &err), MT_OK);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[1], &err), MT_OK);
    mt_coll_rank_addr table[2] = {{mt_coll_net_addr(nets[0]), 0}, {mt_coll_net_addr(nets[1]), 0}};
    assert_int_equal(mt_coll_world_new_net(nets[0], 2, table, &o2, &w0, &err), MT_OK);
    late_frames_then_pair(nets, table, &o1, &o2, w0);
}

/*
 * A cancelled job's last frames: this process served job 5000's world and left it (the
 * coordinator cancelled the job) and now serves job 42's, while the peer still finishes job
 * 5000's collective and sends its part. The live world drops those frames (a world its net
 * served before, mt_coll.h) instead of failing job 42 with a job-id mismatch; job 42's
 * collective then completes.
 */
static void test_coll_net_drops_frames_of_a_job_it_left(void **state)
{
    mt_coll_world_opts o1 = MT_COLL_WORLD_DEFAULTS, o2 = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *left, *w0;
    mt_err err = MT_ERR_INIT;
    (void)state;
    o1.job_id = 5000; /* not an earlier attempt of job 42 */
    o2.job_id = 42;
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[0], &err), MT_OK);
    assert_int_equal(mt_coll_net_new("tcp://127.0.0.1:0", &nets[1], &err), MT_OK);
    mt_coll_rank_addr table[2] = {{mt_coll_net_addr(nets[0]), 0}, {mt_coll_net_addr(nets[1]), 0}};
    assert_int_equal(mt_coll_world_new_net(nets[0], 2, table, &o1, &left, &err), MT_OK);
    mt_coll_world_cancel(left);
    mt_coll_world_free(left);
    assert_int_equal(mt_coll_world_new_net(nets[0], 2, table, &o2, &w0, &err), MT_OK);
    late_frames_then_pair(nets, table, &o1, &o2, w0);
}

/* A cancelled world ends a collective that waits for a silent peer at once, and every later one. */
static void test_coll_world_cancel_interrupts_a_wait(void **state)
{
    static const int g[] = {0, 1};
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    pthread_t th;
    (void)state;
    o.job_id = 11;
    net_pair("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 1, nets, ws, &o);
    job j = with_call(mkjob(ws[0], 0, g, 2, OP_ALLREDUCE, 1000, 1), 0, 0, 20000);
    assert_int_equal(pthread_create(&th, NULL, job_main, &j), 0);
    usleep(200 * 1000); /* rank 0 waits for rank 1, which never enters */
    mt_coll_world_cancel(ws[0]);
    mt_coll_world_cancel(NULL);
    pthread_join(th, NULL);
    assert_int_equal(j.rc, MT_CANCELLED);
    assert_true(j.secs < 5.0);
    assert_non_null(strstr(j.err.msg, "cancelled"));
    free_jobs(&j, 1);
    j = with_call(mkjob(ws[0], 0, g, 2, OP_ALLREDUCE, 10, 1), 0, 1, 20000);
    job_main(&j);
    assert_int_equal(j.rc, MT_CANCELLED);
    free_jobs(&j, 1);
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coll_chunk_range_partitions),
        cmocka_unit_test(test_coll_add8_matches_scalar_order),
        cmocka_unit_test(test_coll_reference_is_the_halving_tree),
        cmocka_unit_test(test_coll_allreduce_bit_exact_1_to_8),
        cmocka_unit_test(test_coll_local_polls_end_at_the_wake_up),
        cmocka_unit_test(test_coll_allreduce_small_segments_same_bits),
        cmocka_unit_test(test_coll_groups_along_one_dimension),
        cmocka_unit_test(test_coll_group_order_defines_reduction),
        cmocka_unit_test(test_coll_reduce_scatter_matches_allreduce_chunk),
        cmocka_unit_test(test_coll_allgather_concatenates_in_group_order),
        cmocka_unit_test(test_coll_broadcast_from_any_root),
        cmocka_unit_test(test_coll_barrier_waits_for_last),
        cmocka_unit_test(test_coll_invalid_arguments),
        cmocka_unit_test(test_coll_deadline_names_missing_rank),
        cmocka_unit_test(test_coll_mismatch_is_invalid_everywhere),
        cmocka_unit_test(test_coll_bucket_fuses_tensors),
        cmocka_unit_test(test_coll_bucket_sharded_pair),
        cmocka_unit_test(test_coll_bucket_sharded_not_member),
        cmocka_unit_test(test_coll_net_tcp_bit_identical_to_local),
        cmocka_unit_test(test_coll_net_shm_chosen_on_one_host),
        cmocka_unit_test(test_coll_net_shm_url_bit_identical_to_local),
        cmocka_unit_test(test_coll_shm_rings_swept_and_unlinked),
        cmocka_unit_test(test_coll_shm_wait_room_for_n_bytes),
        cmocka_unit_test(test_coll_shm_add_some_whole_floats),
        cmocka_unit_test(test_coll_net_opts_checked),
        cmocka_unit_test(test_coll_mesh_axes_named_in_errors),
        cmocka_unit_test(test_coll_net_hierarchical_traffic),
        cmocka_unit_test(test_coll_net_ipc_bit_identical_to_local),
        cmocka_unit_test(test_coll_net_nng_tcp_bit_identical_to_local),
        cmocka_unit_test(test_coll_hmac_sha256_rfc4231),
        cmocka_unit_test(test_coll_hmac_sha256_edges),
        cmocka_unit_test(test_coll_net_wrong_token_is_unauthenticated),
        cmocka_unit_test(test_coll_net_direct_rejects_bad_frames),
        cmocka_unit_test(test_coll_net_lost_peer_is_named),
        cmocka_unit_test(test_coll_net_deadline_names_silent_member),
        cmocka_unit_test(test_coll_net_invalid_arguments),
        cmocka_unit_test(test_coll_backend_world_arguments),
        cmocka_unit_test(test_coll_net_set_addr_advertises_wildcard_listener),
        cmocka_unit_test(test_coll_net_keeps_messages_of_the_next_job),
        cmocka_unit_test(test_coll_net_drops_frames_of_an_earlier_attempt),
        cmocka_unit_test(test_coll_net_drops_frames_of_a_job_it_left),
        cmocka_unit_test(test_coll_world_cancel_interrupts_a_wait),
        cmocka_unit_test(test_coll_world_host_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
