/* SPDX-License-Identifier: MIT */
/*
 * coll_backend.c — the public collectives, dispatched to the world's backend.
 *
 * mt_coll.h's allreduce, reduce-scatter, allgather, broadcast, barrier and cancel call the
 * operation of the comm's world's backend (mt_coll_backend.h): the built-in stack
 * (mt_coll_backend_builtin: coll_algo.c over the engine coll_world.c) or another one given to
 * mt_coll_world_new_backend. The constructors choose the world's backend here, so that the
 * engine never names the built-in one. Nothing here blocks or keeps state; the backend's
 * operation does the work on the caller's thread. Tests: tests/unit/test_coll.c
 * (test_coll_backend_*), test_coll_conformance.c.
 */
#include <stdatomic.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_int.h"
#include "coll/mt_coll_backend.h"

mt_code mt_coll_world_new_local(int size, const mt_coll_world_opts *opts, mt_coll_world **out,
                                mt_err *err)
{
    coll_world_spec s = {.b = &mt_coll_backend_builtin, .size = size, .opts = opts};
    return coll__world_new_local(&s, out, err);
}

mt_code mt_coll_world_new_net(mt_coll_net *net, int size, const mt_coll_rank_addr *table,
                              const mt_coll_world_opts *opts, mt_coll_world **out, mt_err *err)
{
    coll_world_spec s = {
        .b = &mt_coll_backend_builtin, .size = size, .opts = opts, .net = net, .table = table};
    return coll__world_new_net(&s, out, err);
}

mt_code mt_coll_world_new_backend(const mt_coll_backend *b, void *state, int size, const int *local,
                                  int nlocal, const mt_coll_world_opts *opts, mt_coll_world **out,
                                  mt_err *err)
{
    /* the built-in backend's worlds need a data plane: refused as no backend is */
    coll_world_spec s = {.b = b != &mt_coll_backend_builtin ? b : NULL,
                         .size = size,
                         .opts = opts,
                         .state = state,
                         .local = local,
                         .nlocal = nlocal};
    return coll__world_new_backend(&s, out, err);
}

mt_code mt_coll_allreduce_sum(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                              const mt_coll_call *call, mt_err *err)
{
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "allreduce: NULL communicator");
    return comm->w->backend->allreduce_sum(comm, group, buf, n, call, err);
}

mt_code mt_coll_reduce_scatter(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                               float *out, size_t n, const mt_coll_call *call, mt_err *err)
{
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reduce-scatter: NULL communicator");
    return comm->w->backend->reduce_scatter(comm, group, in, out, n, call, err);
}

mt_code mt_coll_reduce_scatter_inplace(mt_coll_comm *comm, const mt_coll_group *group, float *buf,
                                       size_t n, const mt_coll_call *call, mt_err *err)
{
    const mt_coll_backend *b;
    float *out = NULL;
    size_t off = 0, len = 0;
    int pos = -1;
    mt_code rc;

    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reduce-scatter: NULL communicator");
    b = comm->w->backend;
    if (b->reduce_scatter_inplace != NULL)
        return b->reduce_scatter_inplace(comm, group, buf, n, call, err);
    for (int i = 0; group != NULL && i < group->size; i++) /* else the backend says what is off */
        if (group->ranks[i] == mt_coll_comm_rank(comm))
            pos = i;
    if (pos >= 0)
        mt_coll_chunk_range(n, group->size, pos, &off, &len);
    if (len > 0 && (out = mt_malloc(len * sizeof(float))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "reduce-scatter: out of memory for %zu floats", len);
    rc = b->reduce_scatter(comm, group, buf, out != NULL ? out : buf, n, call, err);
    if (rc == MT_OK && len > 0)
        memcpy(buf + off, out, len * sizeof(float));
    mt_free(out);
    return rc;
}

mt_code mt_coll_allgather(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                          float *out, size_t count, const mt_coll_call *call, mt_err *err)
{
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "allgather: NULL communicator");
    return comm->w->backend->allgather(comm, group, in, out, count, call, err);
}

mt_code mt_coll_broadcast(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                          int root, const mt_coll_call *call, mt_err *err)
{
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "broadcast: NULL communicator");
    return comm->w->backend->broadcast(comm, group, buf, n, root, call, err);
}

mt_code mt_coll_barrier(mt_coll_comm *comm, const mt_coll_group *group, const mt_coll_call *call,
                        mt_err *err)
{
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "barrier: NULL communicator");
    return comm->w->backend->barrier(comm, group, call, err);
}

void mt_coll_world_cancel(mt_coll_world *w)
{
    if (w == NULL)
        return;
    atomic_store(&w->cancelled, 1); /* mt_coll_group_position fails from now on */
    if (w->backend->cancel != NULL)
        w->backend->cancel(w);
}

void *mt_coll_world_backend_state(const mt_coll_world *w)
{
    return w->backend_state;
}

const char *mt_coll_world_backend_name(const mt_coll_world *w)
{
    return w->backend->name;
}

void mt_coll_comm_next_tag(mt_coll_comm *comm, const mt_coll_call *call, uint64_t *step,
                           uint32_t *seq)
{
    if (call != NULL) {
        comm->auto_step = call->step;
        comm->auto_seq = call->seq;
    }
    *step = comm->auto_step;
    *seq = comm->auto_seq++;
}

void mt_coll_comm_progress_enter(mt_coll_comm *comm, const char *op, uint64_t step, uint32_t seq)
{
    coll__progress_enter(comm, op, step, seq);
}

void mt_coll_comm_progress_wait(mt_coll_comm *comm)
{
    coll__progress_wait(comm);
}

void mt_coll_comm_progress_exit(mt_coll_comm *comm, mt_code rc)
{
    coll__progress_exit(comm, rc);
}

mt_coll_world *mt_coll_comm_world(const mt_coll_comm *c)
{
    return c->w;
}

mt_code mt_coll_group_position(const mt_coll_comm *comm, const mt_coll_group *group, int *pos,
                               mt_err *err)
{
    coll_group_pos gp;
    *pos = -1;
    if (comm == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "NULL communicator");
    if (coll__group_problem(comm->w, comm->rank, group, &gp) != NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "rank %d: %s", comm->rank, gp.why);
    *pos = gp.pos;
    if (atomic_load(&comm->w->cancelled))
        return mt_err_set(err, MT_CANCELLED, "rank %d: the world was cancelled", comm->rank);
    return MT_OK;
}
