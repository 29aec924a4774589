/* SPDX-License-Identifier: MIT */
/*
 * coll_test_jobs.h — device threads for the cmocka tests of core/coll (test_coll.c,
 * test_coll_conformance.c): a job is one device thread running one collective on the
 * deterministic data of coll_test_util.h; run_jobs starts and joins them; reference() is the
 * documented order, serially. Header-only (static inline): each test is its own binary.
 * Include after mt_test.h (cmocka).
 */
#ifndef MT_COLL_TEST_JOBS_H
#define MT_COLL_TEST_JOBS_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/mt_coll.h"
#include "coll_test_util.h"

#define MAXR 8

static inline void fill(float *b, int rank, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = ct_val(rank, i, seed);
}

typedef enum { OP_ALLREDUCE, OP_RS, OP_AG, OP_BCAST, OP_BARRIER, OP_IDLE } op_t;

typedef struct job {
    mt_coll_world *w;
    int rank;
    const int *group; /* ranks of this thread's group */
    int gsize;
    op_t op;
    size_t n;
    uint64_t seed;
    float *buf; /* result */
    float *in;
    int root;
    mt_coll_call call;
    int use_call;
    int delay_ms; /* start late */
    mt_code rc;
    mt_err err;
    double secs;
} job;

/* A job for one device thread (the collective, its group and its data). */
static inline job mkjob(mt_coll_world *w, int rank, const int *group, int gsize, op_t op, size_t n,
                        uint64_t seed)
{
    return (job){
        .w = w, .rank = rank, .group = group, .gsize = gsize, .op = op, .n = n, .seed = seed};
}

/* The same job with an explicit tag and deadline. */
static inline job with_call(job j, uint64_t step, uint32_t seq, int64_t deadline_ms)
{
    j.use_call = 1;
    j.call = (mt_coll_call){.step = step, .seq = seq, .deadline_ms = deadline_ms};
    return j;
}

static inline job with_root(job j, int root)
{
    j.root = root;
    return j;
}

static inline job with_delay(job j, int delay_ms)
{
    j.delay_ms = delay_ms;
    return j;
}

static inline void *job_main(void *arg)
{
    job *j = arg;
    mt_coll_comm *c = mt_coll_world_comm(j->w, j->rank);
    mt_coll_group g = {j->group, j->gsize};
    const mt_coll_call *call = j->use_call ? &j->call : NULL;
    struct timespec t0, t1;
    size_t n = j->n;
    if (j->delay_ms > 0)
        usleep((useconds_t)j->delay_ms * 1000u);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    j->in = calloc(n + 1, sizeof(float));
    j->buf = calloc(n * (size_t)j->gsize + 1, sizeof(float));
    fill(j->in, j->rank, n, j->seed);
    switch (j->op) {
    case OP_ALLREDUCE:
        memcpy(j->buf, j->in, n * sizeof(float));
        j->rc = mt_coll_allreduce_sum(c, &g, j->buf, n, call, &j->err);
        break;
    case OP_RS:
        j->rc = mt_coll_reduce_scatter(c, &g, j->in, j->buf, n, call, &j->err);
        break;
    case OP_AG:
        j->rc = mt_coll_allgather(c, &g, j->in, j->buf, n, call, &j->err);
        break;
    case OP_BCAST:
        memcpy(j->buf, j->in, n * sizeof(float));
        j->rc = mt_coll_broadcast(c, &g, j->buf, n, j->root, call, &j->err);
        break;
    case OP_BARRIER:
        j->rc = mt_coll_barrier(c, &g, call, &j->err);
        break;
    case OP_IDLE:
        break;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return NULL;
}

static inline void run_jobs(job *jobs, int n)
{
    pthread_t t[MAXR];
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, job_main, &jobs[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static inline void free_jobs(job *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        free(jobs[i].buf);
        free(jobs[i].in);
    }
}

/* Reference allreduce of a group's inputs (group order), and the double sum. */
static inline void reference(const int *group, int p, size_t n, uint64_t seed, float *ref,
                             double *dref)
{
    float *in[MAXR] = {0};
    for (int i = 0; i < p; i++) {
        in[i] = calloc(n + 1, sizeof(float));
        fill(in[i], group[i], n, seed);
    }
    mt_coll_reference_allreduce((const float *const *)in, p, n, ref);
    for (size_t e = 0; e < n; e++) {
        double s = 0;
        for (int i = 0; i < p; i++)
            s += in[i][e];
        dref[e] = s;
    }
    for (int i = 0; i < p; i++)
        free(in[i]);
}

static inline void check_close(const float *got, const double *dref, size_t n)
{
    for (size_t e = 0; e < n; e++) {
        double tol = 1e-5 * fabs(dref[e]) + 1e-4;
        if (fabs((double)got[e] - dref[e]) > tol)
            fail_msg("element %zu: got %.9g, double sum %.9g", e, (double)got[e], dref[e]);
    }
}

#endif
