/* SPDX-License-Identifier: MIT */
/*
 * mt_coll_mpi.h — the MPI collectives backend (Open MPI), core/coll/coll_mpi.c.
 *
 * How it fits: workers started as one MPI world (`mpirun ... meshtrain-worker --data-plane mpi`,
 * `srun --mpi=pmix`) call mt_coll_mpi_init once and register the data-plane address
 * "mpi://WORLD/RANK" (mt_coll_mpi_addr: WORLD is an id every process of one MPI world shares,
 * RANK its rank in MPI_COMM_WORLD). A job whose every rank lives in one such world gets a world
 * of this backend (mt_coll_world_new_mpi): its own communicator, made with
 * MPI_Comm_create_group over its members only (idle workers of the MPI world take no part),
 * and one more per other group its collectives use (made at the group's first collective,
 * after its members meet within that collective's deadline; cached, freed with the world). The
 * collectives of mt_coll.h then call MPI's nonblocking ones (MPI_Iallreduce,
 * MPI_Ireduce_scatter, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) and poll them.
 *
 * What it keeps of mt_coll.h: the arguments, layouts (reduce-scatter's chunks, allgather's
 * order) and codes; a tag check (unless opts turn it off: one small MPI_Iallreduce before each
 * collective compares operation, size, root, step and sequence number, so a mismatch is
 * INVALID_ARGUMENT on every member, as with the built-in stack); deadlines and cancel as far as
 * MPI allows (below).
 * What it gives up:
 *   - the REDUCTION ORDER: MPI picks its own (it may depend on size and process placement);
 *     results agree with the built-in backend within float rounding (the integration test
 *     holds a job's weights to 1e-5), not bit for bit;
 *   - deadlines and cancel cannot stop an MPI collective: the caller gets DEADLINE_EXCEEDED (MPI
 *     cannot tell which rank is missing) or CANCELLED within about 1 ms, the request is left
 *     behind, and the world is unusable from then on (every later collective fails with
 *     ABORTED): the attempt ends, as it does with the built-in stack. MPI may still
 *     complete the request later (when the late member arrives): it then writes into the
 *     world's own buffers, which an abandoned world leaves allocated (own_buffers below);
 *   - making the job's communicator (mt_coll_world_new_mpi) waits for every member up to the
 *     world's default deadline (point-to-point messages first, since MPI_Comm_create_group has
 *     none), and a task's cancel does not shorten that wait;
 *   - surviving a dead peer: a rank that dies ends the whole MPI world (mpirun stops every
 *     process); the launcher restarts the workers (Slurm --requeue, a systemd restart) and the
 *     job resumes from its checkpoint (docs/collectives.md, "The MPI backend").
 * One device per process: a world puts at most one job rank in each MPI process.
 *
 * Threading: MPI runs with MPI_THREAD_MULTIPLE (the worker's task thread makes and frees
 * worlds, its device thread runs the collectives, and two jobs' threads may overlap);
 * mt_coll_mpi_init fails when the library offers less. A comm is used by one thread at a time.
 *
 * A build without MPI (no libopenmpi-dev, or -DMT_MPI=OFF) has every function: they fail with
 * UNIMPLEMENTED "this build has no MPI". Tests: tests/tools/mt_coll_mpi_check.c under mpirun
 * (tests/integration/test_coll_mpi.sh), tests/integration/test_mpi_job.sh. Docs:
 * docs/collectives.md.
 */
#ifndef MT_COLL_MPI_H
#define MT_COLL_MPI_H

#include "coll/mt_coll.h"

#define MT_COLL_MPI_WORLD_ID 16 /* hex digits of an MPI world's id */

/* This process in its MPI world (mt_coll_mpi_init). */
typedef struct mt_coll_mpi_info {
    int rank;                                /* in MPI_COMM_WORLD */
    int size;                                /* of MPI_COMM_WORLD */
    char world_id[MT_COLL_MPI_WORLD_ID + 1]; /* rank 0's random id, the same in every process */
    char library[96];                        /* MPI_Get_library_version's first line */
} mt_coll_mpi_info;

/* Options of an MPI world: public struct with defaults (MT_COLL_MPI_DEFAULTS). */
typedef struct mt_coll_mpi_opts {
    int check_tags;  /* 1: compare each collective's tag and size first (one small allreduce);
                        0: trust SPMD (MPI's own latency, a mismatch is undefined behaviour) */
    int own_buffers; /* 1: MPI works on a buffer the world owns (a copy in and out), so a
                        collective abandoned at its deadline or cancel never writes into the
                        caller's memory later (MPI completes it when the late member arrives);
                        0: on the caller's buffers (MPI's own speed; safe only when the process
                        exits after an abandoned collective) */
    int blocking;    /* 1: MPI's blocking collectives (MPI_Allreduce & co: Open MPI's tuned
                        algorithms, faster here than its nonblocking ones, docs/collectives.md);
                        no deadline and no cancel: a collective waits for the last member, and
                        a dead one ends the MPI world. 0: nonblocking ones polled to the
                        deadline */
} mt_coll_mpi_opts;

#define MT_COLL_MPI_DEFAULTS                                                                       \
    {                                                                                              \
        .check_tags = 1, .own_buffers = 1, .blocking = 0                                           \
    }

/* 1 when this build has the MPI backend, else 0. */
int mt_coll_mpi_built(void);

/*
 * MPI_Init_thread (MPI_THREAD_MULTIPLE), MPI_COMM_WORLD's errors returned rather than fatal, and
 * the world id (made by rank 0, broadcast: collective over MPI_COMM_WORLD). Once per process,
 * from its main thread, before any other function here. Codes: UNIMPLEMENTED (no MPI in this
 * build), FAILED_PRECONDITION (already initialised; the library offers less than
 * MPI_THREAD_MULTIPLE), UNAVAILABLE (MPI_Init_thread failed: not started by mpirun / srun?).
 */
mt_code mt_coll_mpi_init(mt_coll_mpi_info *out, mt_err *err);

/* MPI_Finalize if mt_coll_mpi_init succeeded (collective: waits for every process of the MPI
 * world to finalize too). Free every MPI world first. */
void mt_coll_mpi_finalize(void);

/* "mpi://WORLD/RANK" into out (cap >= 64). */
void mt_coll_mpi_addr(const mt_coll_mpi_info *me, char *out, size_t cap);

/*
 * Parse a data-plane address: 1 and *world (MT_COLL_MPI_WORLD_ID + 1 bytes), *rank for
 * "mpi://WORLD/RANK" (WORLD hex of MT_COLL_MPI_WORLD_ID digits, RANK a decimal int >= 0), 0 for
 * any other text. Any build, any thread.
 */
int mt_coll_mpi_parse_addr(const char *addr, char *world, int *rank);

/*
 * A world of size job ranks on the MPI world: mpi_rank[r] is the MPI_COMM_WORLD rank of job rank
 * r (borrowed; distinct: one job rank per process). This process's job rank is the one whose
 * mpi_rank is its own (there must be one). Makes the job's communicator: waits until every
 * member process calls this with the same table and opts.job_id (collective over the members),
 * at most opts.default_deadline_ms (then DEADLINE_EXCEEDED naming a member that did not come).
 * opts: world options (job_id, default deadline, observe; the built-in stack's options are
 * ignored), mo: NULL for MT_COLL_MPI_DEFAULTS. *out owned by the caller (mt_coll_world_free, which
 * frees the communicators). Codes: UNIMPLEMENTED (no MPI), FAILED_PRECONDITION (mt_coll_mpi_init
 * not called), INVALID_ARGUMENT (a rank outside the MPI world or twice, this process not a member),
 * UNAVAILABLE (MPI failed), RESOURCE_EXHAUSTED.
 */
mt_code mt_coll_world_new_mpi(int size, const int *mpi_rank, const mt_coll_world_opts *opts,
                              const mt_coll_mpi_opts *mo, mt_coll_world **out, mt_err *err);

#endif
