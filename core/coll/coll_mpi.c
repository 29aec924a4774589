/* SPDX-License-Identifier: MIT */
/*
 * coll_mpi.c — the MPI collectives backend (mt_coll_mpi.h): an mt_coll_backend whose operations
 * call Open MPI's nonblocking collectives on a communicator per job and group.
 *
 * State of a world (mpi_state): the job's communicator (MPI_Comm_create_group over the members'
 * MPI_COMM_WORLD ranks in job-rank order, so a job rank is its rank there) and a cache of one
 * communicator per other group (MPI_Comm_create_group of the job's communicator over the group's
 * job ranks in group order, made at the group's first collective: every member reaches it in the
 * same order, SPMD). A collective: validate the group (mt_coll_group_position), check the tag
 * (optional: one MPI_Iallreduce of MPI_MAX over (v, -v) for v = op, size, root, step, seq tells
 * every member whether all agree), post the MPI collective, poll MPI_Test until done, the
 * deadline, or cancel. A request that did not finish is left to MPI (a collective request
 * cannot be cancelled) and the world is marked abandoned: every later collective fails with
 * ABORTED, and its communicators are not freed (freeing one with a request pending is erroneous).
 * Without MT_HAVE_MPI (a build without libopenmpi-dev) every function says so.
 */
#include "coll/mt_coll_mpi.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_coll_mpi_parse_addr(const char *addr, char *world, int *rank)
{
    const char *p;
    char *end;
    long v;

    if (addr == NULL || strncmp(addr, "mpi://", 6) != 0)
        return 0;
    p = addr + 6;
    for (int i = 0; i < MT_COLL_MPI_WORLD_ID; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    if (p[MT_COLL_MPI_WORLD_ID] != '/' || p[MT_COLL_MPI_WORLD_ID + 1] < '0' ||
        p[MT_COLL_MPI_WORLD_ID + 1] > '9')
        return 0;
    v = strtol(p + MT_COLL_MPI_WORLD_ID + 1, &end, 10);
    if (*end != '\0' || v < 0 || v > 0x7fffffff)
        return 0;
    memcpy(world, p, MT_COLL_MPI_WORLD_ID);
    world[MT_COLL_MPI_WORLD_ID] = '\0';
    *rank = (int)v;
    return 1;
}

void mt_coll_mpi_addr(const mt_coll_mpi_info *me, char *out, size_t cap)
{
    snprintf(out, cap, "mpi://%s/%d", me->world_id, me->rank);
}

#ifndef MT_HAVE_MPI

#define NO_MPI "this build has no MPI (configure with libopenmpi-dev installed and -DMT_MPI=ON)"

int mt_coll_mpi_built(void)
{
    return 0;
}

mt_code mt_coll_mpi_init(mt_coll_mpi_info *out, mt_err *err)
{
    memset(out, 0, sizeof(*out));
    return mt_err_set(err, MT_UNIMPLEMENTED, "%s", NO_MPI);
}

void mt_coll_mpi_finalize(void)
{
}

mt_code mt_coll_world_new_mpi(int size, const int *mpi_rank, const mt_coll_world_opts *opts,
                              const mt_coll_mpi_opts *mo, mt_coll_world **out, mt_err *err)
{
    (void)size, (void)mpi_rank, (void)opts, (void)mo;
    *out = NULL;
    return mt_err_set(err, MT_UNIMPLEMENTED, "%s", NO_MPI);
}

#else /* MT_HAVE_MPI */

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "coll/mt_coll_backend.h"

static int g_inited; /* mt_coll_mpi_init succeeded (main thread, before any world) */

#define RDV_MAIL 8 /* job ids kept per sender */

/* Rendezvous messages of other job ids, per sending MPI rank: a member may reach the next
 * world's rendezvous while this process still waits in an earlier one that will give up. */
typedef struct rdv_mail {
    uint64_t id[RDV_MAIL];
    unsigned char used[RDV_MAIL];
    unsigned next;
} rdv_mail;
static rdv_mail *g_mail; /* [MPI world size], made by mt_coll_mpi_init */
static pthread_mutex_t g_mail_mu = PTHREAD_MUTEX_INITIALIZER;

static void mail_put(int from, uint64_t id)
{
    pthread_mutex_lock(&g_mail_mu);
    rdv_mail *b = &g_mail[from];
    b->id[b->next] = id; /* the oldest goes */
    b->used[b->next] = 1;
    b->next = (b->next + 1) % RDV_MAIL;
    pthread_mutex_unlock(&g_mail_mu);
}

static int mail_take(int from, uint64_t id)
{
    int found = 0;
    pthread_mutex_lock(&g_mail_mu);
    for (int i = 0; i < RDV_MAIL && !found; i++)
        if (g_mail[from].used[i] && g_mail[from].id[i] == id) {
            g_mail[from].used[i] = 0;
            found = 1;
        }
    pthread_mutex_unlock(&g_mail_mu);
    return found;
}

typedef struct group_comm {
    int *ranks; /* job ranks, group order */
    int size;
    MPI_Comm comm;
} group_comm;

typedef struct mpi_state {
    MPI_Comm job;    /* job rank r is rank r here */
    int size;        /* job ranks */
    int *mpi_rank;   /* [size]: MPI_COMM_WORLD rank of each job rank */
    int me;          /* this process's job rank */
    uint64_t job_id; /* tags of MPI_Comm_create_group */
    int64_t deadline_ms;
    int check_tags;
    int own_buffers; /* collectives run on bounce (mt_coll_mpi_opts.own_buffers) */
    int blocking;    /* MPI's blocking collectives (mt_coll_mpi_opts.blocking) */
    float *bounce;   /* device thread only; MPI may still write here after an abandoned call */
    size_t bounce_cap;
    int64_t *tagbuf; /* [20]: the tag check's send and receive halves (same reason) */
    void (*observe)(void *, const char *, uint64_t, int64_t, mt_code);
    void *observe_arg;
    _Atomic int cancelled; /* mt_coll_world_cancel */
    _Atomic int abandoned; /* a request was left unfinished: no more collectives */
    pthread_mutex_t mu;    /* guards groups */
    group_comm *groups;
    int ngroups;
} mpi_state;

enum { OP_ALLREDUCE = 1, OP_RS, OP_AG, OP_BCAST, OP_BARRIER };
static const char *const op_names[] = {"",          "allreduce", "reduce_scatter",
                                       "allgather", "broadcast", "barrier"};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static mt_code mpi_fail(mt_err *err, int mrc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof(s), "MPI error %d", mrc);
    return mt_err_set(err, MT_UNAVAILABLE, "%s: %s", what, s);
}

int mt_coll_mpi_built(void)
{
    return 1;
}

mt_code mt_coll_mpi_init(mt_coll_mpi_info *out, mt_err *err)
{
    int provided = 0, mrc, len = 0, flag = 0;
    unsigned char id[MT_COLL_MPI_WORLD_ID / 2];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];

    memset(out, 0, sizeof(*out));
    if (g_inited || (MPI_Initialized(&flag) == MPI_SUCCESS && flag))
        return mt_err_set(err, MT_FAILED_PRECONDITION, "MPI is already initialised");
    if ((mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS)
        return mt_err_set(err, MT_UNAVAILABLE,
                          "MPI_Init_thread failed (%d): start the workers with mpirun or srun "
                          "--mpi=pmix",
                          mrc);
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "the MPI library offers thread level %d, the MPI backend needs "
                          "MPI_THREAD_MULTIPLE (%d)",
                          provided, MPI_THREAD_MULTIPLE);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &out->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &out->size);
    if ((g_mail = mt_calloc((size_t)out->size, sizeof(*g_mail))) == NULL) {
        MPI_Finalize();
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI: out of memory");
    }
    if (out->rank == 0 && getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        uint64_t t = (uint64_t)now_ns();
        memcpy(id, &t, sizeof(id));
    }
    if ((mrc = MPI_Bcast(id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD)) != MPI_SUCCESS) {
        MPI_Finalize();
        return mpi_fail(err, mrc, "MPI world id");
    }
    for (size_t i = 0; i < sizeof(id); i++)
        snprintf(out->world_id + 2 * i, 3, "%02x", id[i]);
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n,")] = '\0';
    lib[sizeof(out->library) - 1] = '\0';
    memcpy(out->library, lib, sizeof(out->library));
    g_inited = 1;
    return MT_OK;
}

void mt_coll_mpi_finalize(void)
{
    if (g_inited)
        MPI_Finalize();
    g_inited = 0;
    mt_free(g_mail);
    g_mail = NULL;
}

/* MPI_Comm_create_group's tag for job_id (and a group's salt): a tag MPI accepts (>= 32767) */
static int create_tag(uint64_t job_id, uint64_t salt)
{
    return (int)((job_id * 1099511628211ULL + salt) % 32749u);
}

static void state_free(void *p)
{
    mpi_state *s = p;
    int keep = atomic_load(&s->abandoned); /* a request still refers to a communicator */

    if (!keep) { /* else MPI may still write into them: left allocated on purpose */
        mt_free(s->bounce);
        mt_free(s->tagbuf);
    }
    for (int i = 0; i < s->ngroups; i++) {
        if (!keep && s->groups[i].comm != MPI_COMM_NULL)
            MPI_Comm_free(&s->groups[i].comm);
        mt_free(s->groups[i].ranks);
    }
    mt_free(s->groups);
    if (!keep && s->job != MPI_COMM_NULL)
        MPI_Comm_free(&s->job);
    pthread_mutex_destroy(&s->mu);
    mt_free(s->mpi_rank);
    mt_free(s);
}

/* A rendezvous of size members (this one: me): their MPI ranks, their names in messages
 * (job_rank; NULL: their index), the id they must agree on and how long to wait. */
typedef struct mpi_rdv {
    const int *mpi_rank;
    const int *job_rank;
    int size, me;
    uint64_t job_id;
    int64_t deadline_ms;
} mpi_rdv;
static mt_code rendezvous(const mpi_rdv *q, mt_err *err);

/* The communicator of group g (job ranks in group order; this member at when->me): the job's, or a
 * cached one, made at its first use (collective over g's members, after a rendezvous of theirs
 * bounded by when->deadline_ms). */
static mt_code group_comm_of(mpi_state *s, const mt_coll_group *g, const mpi_rdv *when,
                             MPI_Comm *out, mt_err *err)
{
    int whole = g->size == s->size, mrc;
    uint64_t salt = 0;
    MPI_Group jg, sub;
    MPI_Comm c = MPI_COMM_NULL;
    group_comm *grown;

    for (int i = 0; i < g->size && whole; i++)
        whole = g->ranks[i] == i;
    if (whole) {
        *out = s->job;
        return MT_OK;
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ngroups; i++)
        if (s->groups[i].size == g->size &&
            memcmp(s->groups[i].ranks, g->ranks, (size_t)g->size * sizeof(int)) == 0) {
            *out = s->groups[i].comm;
            pthread_mutex_unlock(&s->mu);
            return MT_OK;
        }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < g->size; i++)
        salt = salt * 31 + (uint64_t)g->ranks[i] + 1;
    {
        int *mr = mt_calloc((size_t)g->size, sizeof(int));
        mt_code rc;
        if (mr == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI group: out of memory");
        for (int i = 0; i < g->size; i++)
            mr[i] = s->mpi_rank[g->ranks[i]];
        mpi_rdv q = {.mpi_rank = mr,
                     .job_rank = g->ranks,
                     .size = g->size,
                     .me = when->me,
                     .job_id = s->job_id ^ (salt * 0x9e3779b97f4a7c15ULL),
                     .deadline_ms = when->deadline_ms};
        rc = rendezvous(&q, err);
        mt_free(mr);
        if (rc != MT_OK)
            return rc;
    }
    MPI_Comm_group(s->job, &jg);
    MPI_Group_incl(jg, g->size, g->ranks, &sub);
    mrc = MPI_Comm_create_group(s->job, sub, create_tag(s->job_id, salt), &c);
    MPI_Group_free(&sub);
    MPI_Group_free(&jg);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, mrc, "MPI_Comm_create_group for a group of the job");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    pthread_mutex_lock(&s->mu);
    grown = mt_realloc(s->groups, (size_t)(s->ngroups + 1) * sizeof(*grown));
    if (grown != NULL)
        s->groups = grown;
    if (grown == NULL ||
        (grown[s->ngroups].ranks = mt_calloc((size_t)g->size, sizeof(int))) == NULL) {
        pthread_mutex_unlock(&s->mu);
        MPI_Comm_free(&c);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI group: out of memory");
    }
    memcpy(grown[s->ngroups].ranks, g->ranks, (size_t)g->size * sizeof(int));
    grown[s->ngroups].size = g->size;
    grown[s->ngroups].comm = c;
    s->ngroups++;
    pthread_mutex_unlock(&s->mu);
    *out = c;
    return MT_OK;
}

/* One collective in flight: what the operations share. */
typedef struct mpi_call {
    mpi_state *s;
    mt_coll_comm *comm;
    MPI_Comm mc;
    int op, pos, p;
    uint64_t step;
    uint32_t seq;
    uint64_t bytes;
    int64_t t0, deadline_ns;
    int entered; /* recorded in the progress table (mt_coll_comm_progress_enter) */
    int waiting; /* ... and marked waiting */
} mpi_call;

/* Poll req until done, the deadline or cancel. */
static mt_code wait_req(mpi_call *x, MPI_Request *req, const char *what, mt_err *err)
{
    int done = 0, mrc;
    MPI_Status st;

    for (long spins = 0;; spins++) {
        if ((mrc = MPI_Test(req, &done, &st)) != MPI_SUCCESS)
            return mpi_fail(err, mrc, what);
        if (done)
            return MT_OK;
        if (!x->waiting) {
            x->waiting = 1;
            mt_coll_comm_progress_wait(x->comm);
        }
        if (atomic_load(&x->s->cancelled) || now_ns() > x->deadline_ns) {
            int cancelled = atomic_load(&x->s->cancelled);
            atomic_store(&x->s->abandoned, 1); /* req stays with MPI */
            if (cancelled)
                return mt_err_set(err, MT_CANCELLED, "rank %d: MPI %s: the world was cancelled",
                                  x->s->me, what);
            return mt_err_set(err, MT_DEADLINE_EXCEEDED,
                              "rank %d: MPI %s over %d members (step %" PRIu64 " seq %" PRIu32
                              ") did not complete within %lld ms (MPI does not say which member "
                              "is missing)",
                              x->s->me, what, x->p, x->step, x->seq,
                              (long long)((x->deadline_ns - x->t0) / 1000000));
        }
        if (spins > 2000) { /* a while without progress: stop taking the core from a partner */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else if (spins > 200) {
            sched_yield();
        }
    }
}

/* Compare op, size, root, step and seq over the group: INVALID_ARGUMENT on every member when
 * any differs. */
static mt_code check_tags(mpi_call *x, int64_t n, int64_t root, mt_err *err)
{
    int64_t *v = x->s->tagbuf, *mx = x->s->tagbuf + 10;
    int64_t mine[5] = {x->op, n, root, (int64_t)x->step, (int64_t)x->seq};
    static const char *const names[5] = {"operation", "size", "root", "step", "sequence number"};
    MPI_Request req;
    int mrc;
    mt_code rc;

    for (int i = 0; i < 5; i++) {
        v[2 * i] = mine[i];
        v[2 * i + 1] = -mine[i];
    }
    if (x->s->blocking) {
        if ((mrc = MPI_Allreduce(v, mx, 10, MPI_INT64_T, MPI_MAX, x->mc)) != MPI_SUCCESS)
            return mpi_fail(err, mrc, "MPI tag check");
    } else {
        if ((mrc = MPI_Iallreduce(v, mx, 10, MPI_INT64_T, MPI_MAX, x->mc, &req)) != MPI_SUCCESS)
            return mpi_fail(err, mrc, "MPI tag check");
        if ((rc = wait_req(x, &req, "tag check", err)) != MT_OK)
            return rc;
    }
    for (int i = 0; i < 5; i++)
        if (mx[2 * i] != -mx[2 * i + 1])
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "rank %d: %s: the members disagree on the %s (this member: %" PRId64
                              ", the others range over %" PRId64 "..%" PRId64 ")",
                              x->s->me, op_names[x->op], names[i], mine[i], -mx[2 * i + 1],
                              mx[2 * i]);
    return MT_OK;
}

/* What a collective asks call_begin for: who, over which group, which operation, its size. */
typedef struct mpi_req {
    mt_coll_comm *comm;
    const mt_coll_group *g;
    int op;
    uint64_t bytes; /* per member (the observer's figure) */
    int64_t n;      /* elements: checked against MPI's int counts and the other members' */
    int64_t root;   /* broadcast's root rank, else -1 */
    const mt_coll_call *call;
} mpi_req;

static mt_code call_begin(mpi_call *x, const mpi_req *q, mt_err *err)
{
    mt_code rc;
    int64_t dl, n = q->n;
    mt_coll_comm *comm = q->comm;
    const mt_coll_group *g = q->g;
    const mt_coll_call *call = q->call;
    int op = q->op;

    memset(x, 0, sizeof(*x));
    x->t0 = now_ns();
    x->op = op;
    x->bytes = q->bytes;
    x->comm = comm;
    if ((rc = mt_coll_group_position(comm, g, &x->pos, err)) != MT_OK)
        return rc;
    x->s = mt_coll_world_backend_state(mt_coll_comm_world(comm));
    x->p = g->size;
    if (atomic_load(&x->s->abandoned))
        return mt_err_set(err, MT_ABORTED,
                          "rank %d: %s: an earlier MPI collective of this world did not finish "
                          "(deadline or cancel); the world cannot be used any more",
                          x->s->me, op_names[op]);
    mt_coll_comm_next_tag(comm, call, &x->step, &x->seq); /* NULL: the comm's automatic tag */
    mt_coll_comm_progress_enter(comm, op_names[op], x->step, x->seq);
    x->entered = 1;
    dl = call != NULL && call->deadline_ms > 0 ? call->deadline_ms : x->s->deadline_ms;
    x->deadline_ns = x->t0 + dl * 1000000;
    if (n > 0x7fffffff)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "rank %d: %s of %" PRId64 " floats: more than MPI's int counts hold",
                          x->s->me, op_names[op], n);
    mpi_rdv when = {.me = x->pos, .deadline_ms = (x->deadline_ns - now_ns()) / 1000000};
    if ((rc = group_comm_of(x->s, g, &when, &x->mc, err)) != MT_OK)
        return rc;
    if (x->s->check_tags && (rc = check_tags(x, n, q->root, err)) != MT_OK)
        return rc;
    return MT_OK;
}

static mt_code call_end(mpi_call *x, mt_code rc)
{
    if (x->entered)
        mt_coll_comm_progress_exit(x->comm, rc);
    if (x->s != NULL && x->s->observe != NULL)
        x->s->observe(x->s->observe_arg, op_names[x->op], x->bytes, now_ns() - x->t0, rc);
    return rc;
}

/* With own_buffers: room for n floats in the world's bounce buffer (NULL: out of memory),
 * else NULL without an error (the caller's buffers are used). */
static float *bounce(mpi_call *x, size_t n, mt_code *rc, mt_err *err)
{
    mpi_state *s = x->s;
    *rc = MT_OK;
    if (!s->own_buffers)
        return NULL;
    if (s->bounce_cap < n) {
        float *b = mt_realloc(s->bounce, n * sizeof(float));
        if (b == NULL) {
            *rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", op_names[x->op]);
            return NULL;
        }
        s->bounce = b;
        s->bounce_cap = n;
    }
    return s->bounce;
}

/* Post (mrc, req) and wait for it. */
static mt_code run_req(mpi_call *x, int mrc, MPI_Request *req, mt_err *err)
{
    if (mrc != MPI_SUCCESS)
        return mpi_fail(err, mrc, op_names[x->op]);
    return wait_req(x, req, op_names[x->op], err);
}

/* A blocking MPI call's result (mt_coll_mpi_opts.blocking). */
static mt_code finish(const mpi_call *x, int mrc, mt_err *err)
{
    return mrc == MPI_SUCCESS ? MT_OK : mpi_fail(err, mrc, op_names[x->op]);
}

static mt_code mpi_allreduce(mt_coll_comm *comm, const mt_coll_group *g, float *buf, size_t n,
                             const mt_coll_call *call, mt_err *err)
{
    mpi_call x;
    MPI_Request req;
    mt_code rc;

    if (buf == NULL && n > 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "allreduce: NULL buffer");
    mpi_req q = {comm, g, OP_ALLREDUCE, n * 4, (int64_t)n, -1, call};
    if ((rc = call_begin(&x, &q, err)) != MT_OK || n == 0)
        return call_end(&x, rc);
    float *b = bounce(&x, n, &rc, err), *on = b != NULL ? b : buf;
    if (rc != MT_OK)
        return call_end(&x, rc);
    if (b != NULL)
        memcpy(b, buf, n * sizeof(float));
    rc = x.s->blocking
             ? finish(&x, MPI_Allreduce(MPI_IN_PLACE, on, (int)n, MPI_FLOAT, MPI_SUM, x.mc), err)
             : run_req(&x, MPI_Iallreduce(MPI_IN_PLACE, on, (int)n, MPI_FLOAT, MPI_SUM, x.mc, &req),
                       &req, err);
    if (rc == MT_OK && b != NULL)
        memcpy(buf, b, n * sizeof(float));
    return call_end(&x, rc);
}

static mt_code mpi_reduce_scatter(mt_coll_comm *comm, const mt_coll_group *g, const float *in,
                                  float *out, size_t n, const mt_coll_call *call, mt_err *err)
{
    mpi_call x;
    MPI_Request req;
    int *counts = NULL;
    size_t off, len;
    mt_code rc;

    if ((in == NULL || out == NULL) && n > 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reduce-scatter: NULL buffer");
    mpi_req q = {comm, g, OP_RS, n * 4, (int64_t)n, -1, call};
    if ((rc = call_begin(&x, &q, err)) != MT_OK || n == 0)
        return call_end(&x, rc);
    if ((counts = mt_calloc((size_t)x.p, sizeof(int))) == NULL)
        return call_end(&x, mt_err_set(err, MT_RESOURCE_EXHAUSTED, "reduce-scatter: no memory"));
    for (int c = 0; c < x.p; c++) {
        mt_coll_chunk_range(n, x.p, c, &off, &len);
        counts[c] = (int)len;
    }
    mt_coll_chunk_range(n, x.p, x.pos, &off, &len);
    float *b = bounce(&x, n + len, &rc, err);
    if (rc == MT_OK && b != NULL)
        memcpy(b, in, n * sizeof(float));
    if (rc == MT_OK)
        rc = x.s->blocking
                 ? finish(&x,
                          MPI_Reduce_scatter(b != NULL ? b : in, b != NULL ? b + n : out, counts,
                                             MPI_FLOAT, MPI_SUM, x.mc),
                          err)
                 : run_req(&x,
                           MPI_Ireduce_scatter(b != NULL ? b : in, b != NULL ? b + n : out, counts,
                                               MPI_FLOAT, MPI_SUM, x.mc, &req),
                           &req, err);
    if (rc == MT_OK && b != NULL)
        memcpy(out, b + n, len * sizeof(float));
    mt_free(counts);
    return call_end(&x, rc);
}

static mt_code mpi_allgather(mt_coll_comm *comm, const mt_coll_group *g, const float *in,
                             float *out, size_t count, const mt_coll_call *call, mt_err *err)
{
    mpi_call x;
    MPI_Request req;
    mt_code rc;

    if ((in == NULL || out == NULL) && count > 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "allgather: NULL buffer");
    /* the size checked is the gathered one, so it must fit MPI's counts too */
    mpi_req q = {comm, g, OP_AG, count * 4, (int64_t)count * (g != NULL ? g->size : 1), -1, call};
    if ((rc = call_begin(&x, &q, err)) != MT_OK || count == 0)
        return call_end(&x, rc);
    size_t all = count * (size_t)x.p;
    float *b = bounce(&x, count + all, &rc, err);
    if (rc != MT_OK)
        return call_end(&x, rc);
    if (b != NULL)
        memcpy(b, in, count * sizeof(float));
    rc = x.s->blocking
             ? finish(&x,
                      MPI_Allgather(b != NULL ? b : in, (int)count, MPI_FLOAT,
                                    b != NULL ? b + count : out, (int)count, MPI_FLOAT, x.mc),
                      err)
             : run_req(&x,
                       MPI_Iallgather(b != NULL ? b : in, (int)count, MPI_FLOAT,
                                      b != NULL ? b + count : out, (int)count, MPI_FLOAT, x.mc,
                                      &req),
                       &req, err);
    if (rc == MT_OK && b != NULL)
        memcpy(out, b + count, all * sizeof(float));
    return call_end(&x, rc);
}

static mt_code mpi_broadcast(mt_coll_comm *comm, const mt_coll_group *g, float *buf, size_t n,
                             int root, const mt_coll_call *call, mt_err *err)
{
    mpi_call x;
    MPI_Request req;
    int rpos = -1;
    mt_code rc;

    if (buf == NULL && n > 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "broadcast: NULL buffer");
    for (int i = 0; g != NULL && g->ranks != NULL && i < g->size; i++)
        if (g->ranks[i] == root)
            rpos = i;
    mpi_req q = {comm, g, OP_BCAST, n * 4, (int64_t)n, root, call};
    if ((rc = call_begin(&x, &q, err)) != MT_OK)
        return call_end(&x, rc);
    if (rpos < 0)
        return call_end(&x, mt_err_set(err, MT_INVALID_ARGUMENT,
                                       "rank %d: broadcast: root %d is not in the group", x.s->me,
                                       root));
    if (n == 0)
        return call_end(&x, rc);
    float *b = bounce(&x, n, &rc, err);
    if (rc != MT_OK)
        return call_end(&x, rc);
    if (b != NULL)
        memcpy(b, buf, n * sizeof(float));
    rc = x.s->blocking
             ? finish(&x, MPI_Bcast(b != NULL ? b : buf, (int)n, MPI_FLOAT, rpos, x.mc), err)
             : run_req(&x, MPI_Ibcast(b != NULL ? b : buf, (int)n, MPI_FLOAT, rpos, x.mc, &req),
                       &req, err);
    if (rc == MT_OK && b != NULL)
        memcpy(buf, b, n * sizeof(float));
    return call_end(&x, rc);
}

static mt_code mpi_barrier(mt_coll_comm *comm, const mt_coll_group *g, const mt_coll_call *call,
                           mt_err *err)
{
    mpi_call x;
    MPI_Request req;
    mt_code rc;

    mpi_req q = {comm, g, OP_BARRIER, 0, 0, -1, call};
    if ((rc = call_begin(&x, &q, err)) == MT_OK)
        rc = x.s->blocking ? finish(&x, MPI_Barrier(x.mc), err)
                           : run_req(&x, MPI_Ibarrier(x.mc, &req), &req, err);
    return call_end(&x, rc);
}

static void mpi_cancel(mt_coll_world *w)
{
    mpi_state *s = mt_coll_world_backend_state(w);
    if (s != NULL)
        atomic_store(&s->cancelled, 1);
}

static const mt_coll_backend mpi_backend = {
    .name = "mpi",
    .allreduce_sum = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .cancel = mpi_cancel,
    .state_free = state_free,
};

#define RDV_TAG 32760 /* the rendezvous' messages (create_tag stays below 32749) */

/*
 * Before MPI_Comm_create_group, which has no deadline: every member sends every other one the
 * job id (MPI_COMM_WORLD, RDV_TAG) and waits for theirs until deadline_ms, so a member that never
 * comes (its task failed before making the world) fails the others with DEADLINE_EXCEEDED naming
 * it rather than blocking them for ever. A message of another id (an earlier attempt's that gave
 * up, or a later world's or group's that a member reached first) is kept for it (g_mail). job_rank:
 * the names of the members in messages (NULL: their index). On failure the receives are cancelled
 * and the sends left to MPI (their buffer stays allocated).
 */
static mt_code rendezvous(const mpi_rdv *q, mt_err *err)
{
    const int *mpi_rank = q->mpi_rank, *job_rank = q->job_rank;
    int size = q->size, me = q->me;
    uint64_t job_id = q->job_id;
    int64_t deadline_ms = q->deadline_ms;
    uint64_t *buf = mt_calloc((size_t)size + 1, sizeof(uint64_t));      /* [size]: mine */
    MPI_Request *rq = mt_calloc(2 * (size_t)size, sizeof(MPI_Request)); /* receives, sends */
    int64_t until = now_ns() + deadline_ms * 1000000;
    int pending = 0, missing = -1;
    mt_code rc = MT_OK;

    if (buf == NULL || rq == NULL) {
        mt_free(buf);
        mt_free(rq);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI world: out of memory");
    }
    buf[size] = job_id;
    for (int m = 0; m < size; m++) {
        rq[m] = rq[size + m] = MPI_REQUEST_NULL;
        if (m == me)
            continue;
        MPI_Isend(&buf[size], 1, MPI_UINT64_T, mpi_rank[m], RDV_TAG, MPI_COMM_WORLD, &rq[size + m]);
        if (mail_take(mpi_rank[m], job_id)) /* it came during another world's rendezvous */
            continue;
        MPI_Irecv(&buf[m], 1, MPI_UINT64_T, mpi_rank[m], RDV_TAG, MPI_COMM_WORLD, &rq[m]);
        pending++;
    }
    for (long spins = 0; pending > 0; spins++) {
        for (int m = 0; m < size; m++) {
            int done = 0;
            if (rq[m] == MPI_REQUEST_NULL)
                continue;
            MPI_Test(&rq[m], &done, MPI_STATUS_IGNORE);
            if (!done)
                continue;
            if (buf[m] == job_id)
                pending--;
            else { /* another world's (an earlier attempt's, or a later one's): kept for it */
                mail_put(mpi_rank[m], buf[m]);
                MPI_Irecv(&buf[m], 1, MPI_UINT64_T, mpi_rank[m], RDV_TAG, MPI_COMM_WORLD, &rq[m]);
            }
        }
        if (pending > 0 && now_ns() > until)
            break;
        if (spins > 200) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    for (int m = 0; m < size && pending > 0; m++)
        if (rq[m] != MPI_REQUEST_NULL) {
            if (missing < 0)
                missing = m;
            MPI_Cancel(&rq[m]);
            MPI_Wait(&rq[m], MPI_STATUS_IGNORE);
        }
    if (pending > 0) {
        for (int m = 0; m < size; m++)
            if (rq[size + m] != MPI_REQUEST_NULL)
                MPI_Request_free(&rq[size + m]);
        rc = mt_err_set(err, MT_DEADLINE_EXCEEDED,
                        "MPI world: %d member(s) did not come within %lld ms, among them job rank "
                        "%d (MPI rank %d)",
                        pending, (long long)deadline_ms,
                        job_rank != NULL ? job_rank[missing] : missing, mpi_rank[missing]);
        buf = NULL; /* the sends may still read it: left allocated */
    } else {
        MPI_Waitall(2 * size, rq, MPI_STATUSES_IGNORE); /* the sends: every member received */
    }
    mt_free(buf);
    mt_free(rq);
    return rc;
}

mt_code mt_coll_world_new_mpi(int size, const int *mpi_rank, const mt_coll_world_opts *opts,
                              const mt_coll_mpi_opts *mo, mt_coll_world **out, mt_err *err)
{
    mt_coll_world_opts def = MT_COLL_WORLD_DEFAULTS;
    mt_coll_mpi_opts mdef = MT_COLL_MPI_DEFAULTS;
    int wsize = 0, wrank = -1, mrc;
    mpi_state *s;
    MPI_Group wg, jg;
    mt_code rc;

    *out = NULL;
    if (opts == NULL)
        opts = &def;
    if (mo == NULL)
        mo = &mdef;
    if (!g_inited)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "MPI world: MPI is not initialised (mt_coll_mpi_init)");
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (size < 1 || mpi_rank == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "MPI world: size %d", size);
    int me = -1;
    for (int r = 0; r < size; r++) {
        if (mpi_rank[r] < 0 || mpi_rank[r] >= wsize)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "MPI world: job rank %d is MPI rank %d, outside the MPI world "
                              "[0, %d)",
                              r, mpi_rank[r], wsize);
        for (int q = 0; q < r; q++)
            if (mpi_rank[q] == mpi_rank[r])
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "MPI world: job ranks %d and %d both live in MPI process %d "
                                  "(the MPI backend runs one device per worker)",
                                  q, r, mpi_rank[r]);
        if (mpi_rank[r] == wrank)
            me = r;
    }
    if (me < 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "MPI world: this process (MPI rank %d) holds no rank of the job", wrank);
    if ((s = mt_calloc(1, sizeof(*s))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI world: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->job = MPI_COMM_NULL; /* not 0 in Open MPI: state_free tells it apart */
    if ((s->tagbuf = mt_calloc(20, sizeof(int64_t))) == NULL ||
        (s->mpi_rank = mt_calloc((size_t)size, sizeof(int))) == NULL) {
        state_free(s);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "MPI world: out of memory");
    }
    s->size = size;
    memcpy(s->mpi_rank, mpi_rank, (size_t)size * sizeof(int));
    s->me = me;
    s->job_id = opts->job_id;
    s->deadline_ms = opts->default_deadline_ms > 0 ? opts->default_deadline_ms : 10000;
    s->check_tags = mo->check_tags;
    s->own_buffers = mo->own_buffers;
    s->blocking = mo->blocking;
    s->observe = opts->observe;
    s->observe_arg = opts->observe_arg;
    mpi_rdv q = {.mpi_rank = mpi_rank,
                 .size = size,
                 .me = me,
                 .job_id = s->job_id,
                 .deadline_ms = s->deadline_ms};
    if ((rc = rendezvous(&q, err)) != MT_OK) {
        state_free(s);
        return rc;
    }
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, size, mpi_rank, &jg);
    mrc = MPI_Comm_create_group(MPI_COMM_WORLD, jg, create_tag(s->job_id, 0), &s->job);
    MPI_Group_free(&jg);
    MPI_Group_free(&wg);
    if (mrc != MPI_SUCCESS) {
        state_free(s);
        return mpi_fail(err, mrc, "MPI_Comm_create_group for the job");
    }
    MPI_Comm_set_errhandler(s->job, MPI_ERRORS_RETURN);
    if ((rc = mt_coll_world_new_backend(&mpi_backend, s, size, &me, 1, opts, out, err)) != MT_OK)
        state_free(s);
    return rc;
}

#endif /* MT_HAVE_MPI */
