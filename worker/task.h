/* SPDX-License-Identifier: MIT */
/*
 * task.h — the worker's task runner: what the coordinator assigned, running it, and what the
 * worker reports back.
 *
 * How it fits: worker.c opens the data-plane listener (mt_coll_net) at start and passes it here
 * with the coordinator address (worker_task_env). Its heartbeat (a pool thread, one RPC at a
 * time) sends worker_tasks_snapshot() as HeartbeatRequest.tasks, then hands each assignment and
 * cancellation of the reply to worker_on_assignment / worker_on_cancel, and calls
 * worker_tasks_reported() so final statuses the coordinator has now seen are dropped. An
 * assignment is repeated by the coordinator until the worker reports a status for that
 * (job, attempt): the same assignment again is ignored.
 *
 * A task runs on its own thread (never on the loop): it parses the spec, loads the dataset, builds
 * the network collective world from the rank table, the SPMD trainer for its local devices (one
 * thread per device, core/spmd), downloads the resume checkpoint (GetCheckpointChunk), and runs the
 * training loop. The worker holding global rank 0 reports metrics (ReportMetrics, batched: at most
 * every 100 ms, on the task's own RPC client, from a reporter thread: report.h), writes the
 * checkpoints the spec asks for and uploads them (PutCheckpointChunk). A coordinator that is
 * restarting or frozen costs the training nothing: unreported points stay queued (up to 8192)
 * and go out with the next report, and checkpoint uploads and the resume download start again
 * from offset 0 for up to 20 s. State changes go out at once with UpdateTask and again with every
 * heartbeat. Cancel stops the task after the current step;
 * worker_tasks_stop (SIGTERM) stops every task, writing a checkpoint first when its job has
 * checkpointing. Threading: every function is thread-safe (one internal mutex). Tests:
 * tests/integration/test_e2e.sh, tests/integration/test_jobs.sh.
 */
#ifndef MT_WORKER_TASK_H
#define MT_WORKER_TASK_H

#include <stddef.h>

#include "coll/mt_coll.h"
#include "proto/coordinator.pb-c.h"
#include "status/mt_status.h"

typedef struct worker_tasks worker_tasks;

/* What tasks need from the worker (strings copied; net borrowed, must outlive the table). */
typedef struct worker_task_env {
    const char *coordinator; /* control-plane URL */
    const char *token;       /* credential, NULL = none */
    mt_coll_net *net;        /* data-plane endpoint; NULL: every assignment fails */
    int rpc_timeout_ms;
    const struct mt_pathsafe *roots; /* data roots job files must lie under (borrowed, must
                                        outlive the table); NULL = no confinement */
    const struct mt_tls *tls; /* for a tls+tcp:// coordinator (borrowed, must outlive the table) */
    struct worker_metrics *metrics; /* steps, collectives, checkpoints go here (borrowed, must
                                       outlive the table); NULL = none (worker/metrics.h) */
    const char *mpi_addr; /* an MPI worker's "mpi://WORLD/RANK" (copied): its jobs run on the MPI
                             backend, every member must be of the same MPI world; NULL: net */
    int mpi_blocking;     /* MPI's blocking collectives (mt_coll_mpi_opts.blocking) */
} worker_task_env;

/* A new, empty task table (returns owned: worker_tasks_free). RESOURCE_EXHAUSTED. */
mt_code worker_tasks_new(const worker_task_env *env, worker_tasks **out, mt_err *err);

/* Free the table after worker_tasks_stop; NULL is a no-op. */
void worker_tasks_free(worker_tasks *t);

/* The worker's identity at the coordinator (after each registration); strings copied. */
void worker_tasks_set_identity(worker_tasks *t, const char *worker_id, const char *instance_id);

/* Start the task `a` describes (borrowed for the call). Ignores a (job, attempt) it knows. */
void worker_on_assignment(worker_tasks *t, const Meshtrain__TaskAssignment *a);

/* Stop the task of (x->job_id, x->attempt) (borrowed), if it runs. */
void worker_on_cancel(worker_tasks *t, const Meshtrain__TaskCancel *x);

/*
 * Stop every running task (checkpointing first when its job has checkpointing) and wait until
 * their threads ended (bounded by the collectives' deadlines). Blocks; not on the loop thread's
 * hot path (called once at shutdown).
 */
void worker_tasks_stop(worker_tasks *t);

/* A copy of every task's status for a heartbeat: *out (returns owned, with *n entries; free
 * with worker_tasks_snapshot_free). *out NULL and *n 0 when there are none or memory ran out. */
void worker_tasks_snapshot(worker_tasks *t, Meshtrain__TaskStatus ***out, size_t *n);
void worker_tasks_snapshot_free(Meshtrain__TaskStatus **s, size_t n);

/* The statuses in snapshot s reached the coordinator: drop the tasks that were final in it. */
void worker_tasks_reported(worker_tasks *t, Meshtrain__TaskStatus *const *s, size_t n);

#endif
