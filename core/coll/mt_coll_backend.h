/* SPDX-License-Identifier: MIT */
/*
 * mt_coll_backend.h — the collectives' backend interface.
 *
 * mt_coll.h's five collectives and mt_coll_world_cancel reach a world's backend through one
 * table of operations (mt_coll_backend). The built-in stack (core/coll's engine, algorithms
 * and transports; the REDUCTION ORDER of mt_coll.h, tags, deadlines, aborts) is one backend,
 * mt_coll_backend_builtin, and every world made by mt_coll_world_new_local or
 * mt_coll_world_new_net uses it. Another backend (MPI: core/coll/coll_mpi.c when the build
 * has Open MPI) makes its worlds with mt_coll_world_new_backend and keeps its own state;
 * callers (core/spmd, the worker) do not change: they call mt_coll_allreduce_sum & co on a
 * comm of whichever world they were given.
 *
 * Contract of every operation: the arguments and codes of the mt_coll.h function of the same
 * name (comm borrowed, used by its device thread; group borrowed; blocks until done). A
 * backend validates the group with mt_coll_group_position. What a backend does not promise
 * (an MPI backend: the fixed reduction order, deadlines, surviving a dead peer) its own header
 * says. Tests: tests/unit/test_coll.c (test_coll_backend_*), test_coll_conformance.c.
 */
#ifndef MT_COLL_BACKEND_H
#define MT_COLL_BACKEND_H

#include "coll/mt_coll.h"

typedef struct mt_coll_backend {
    const char *name; /* "builtin", "mpi": mt_coll_world_backend_name */
    mt_code (*allreduce_sum)(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                             const mt_coll_call *call, mt_err *err);
    mt_code (*reduce_scatter)(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                              float *out, size_t n, const mt_coll_call *call, mt_err *err);
    /* mt_coll_reduce_scatter_inplace; may be NULL (reduce_scatter into a copy serves it) */
    mt_code (*reduce_scatter_inplace)(mt_coll_comm *comm, const mt_coll_group *group, float *buf,
                                      size_t n, const mt_coll_call *call, mt_err *err);
    mt_code (*allgather)(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                         float *out, size_t count, const mt_coll_call *call, mt_err *err);
    mt_code (*broadcast)(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                         int root, const mt_coll_call *call, mt_err *err);
    mt_code (*barrier)(mt_coll_comm *comm, const mt_coll_group *group, const mt_coll_call *call,
                       mt_err *err);
    /* mt_coll_world_cancel (after marking the world cancelled): collectives in progress fail
     * with CANCELLED. Any thread; must not block. May be NULL. */
    void (*cancel)(mt_coll_world *w);
    /* releases the state given to mt_coll_world_new_backend (mt_coll_world_free); may be NULL */
    void (*state_free)(void *state);
} mt_coll_backend;

/* The built-in stack (static const table). */
extern const mt_coll_backend mt_coll_backend_builtin;

/*
 * A world of size ranks whose collectives run on backend b (borrowed: outlives the world) with
 * state (taken on success: b->state_free releases it at mt_coll_world_free). local[0, nlocal)
 * are the global ranks of this process (mt_coll_world_comm returns a comm for each, NULL for
 * the others). opts: NULL for the defaults; the built-in options that do not apply to b are
 * ignored. *out owned by the caller. Codes: INVALID_ARGUMENT (no backend, the built-in one
 * (its worlds need a data plane: mt_coll_world_new_local / _new_net), a collective missing from
 * b, size < 1, a local rank out of range or twice), RESOURCE_EXHAUSTED.
 */
mt_code mt_coll_world_new_backend(const mt_coll_backend *b, void *state, int size, const int *local,
                                  int nlocal, const mt_coll_world_opts *opts, mt_coll_world **out,
                                  mt_err *err);

/* The state given to mt_coll_world_new_backend (borrowed), NULL for the built-in stack. */
void *mt_coll_world_backend_state(const mt_coll_world *w);

/* The world's backend name ("builtin", ...); static. */
const char *mt_coll_world_backend_name(const mt_coll_world *w);

/*
 * The tag of comm's next collective, as the built-in stack makes it: call's (step, seq), which
 * also moves the automatic sequence number past it, or with call NULL the comm's step
 * (mt_coll_comm_set_step) and next automatic sequence number. Device thread only.
 */
void mt_coll_comm_next_tag(mt_coll_comm *comm, const mt_coll_call *call, uint64_t *step,
                           uint32_t *seq);

/*
 * A backend's collective in the world's progress table (mt_coll_progress.h, the heartbeats' hang
 * diagnosis), as the built-in stack records its own: enter when it starts (after the group was
 * validated), wait while it waits for other members, exit when it ends. Device thread of comm;
 * no-ops when the world has no progress table.
 */
void mt_coll_comm_progress_enter(mt_coll_comm *comm, const char *op, uint64_t step, uint32_t seq);
void mt_coll_comm_progress_wait(mt_coll_comm *comm);
void mt_coll_comm_progress_exit(mt_coll_comm *comm, mt_code rc);

/* The world a comm belongs to (borrowed). */
mt_coll_world *mt_coll_comm_world(const mt_coll_comm *c);

/*
 * Validate group for comm (ranks in [0, world size), none twice, comm's rank a member, not
 * cancelled) and put comm's position in it into *pos. Codes: INVALID_ARGUMENT, CANCELLED.
 */
mt_code mt_coll_group_position(const mt_coll_comm *comm, const mt_coll_group *group, int *pos,
                               mt_err *err);

#endif
