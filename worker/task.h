/* SPDX-License-Identifier: MIT */
/*
 * task.h — the worker's tasks as the control plane sees them: what the coordinator assigned,
 * what the worker reports back with each heartbeat.
 *
 * How it fits: worker.c's heartbeat (a pool thread, one RPC at a time) sends
 * worker_tasks_snapshot() as HeartbeatRequest.tasks, then hands each assignment and cancellation
 * of the reply to worker_on_assignment / worker_on_cancel, and calls worker_tasks_reported() so
 * final statuses the coordinator has now seen are dropped. An assignment is repeated by the
 * coordinator until the worker reports a status for that (job, attempt): the same assignment
 * again is ignored.
 * THIS BUILD has no task runner: worker_on_assignment logs and reports the task FAILED with
 * "task runner not available in this build"; the end-to-end issue (#8) replaces task.c with
 * the real runner behind the same functions.
 * Threading: every function is thread-safe (one internal mutex).
 * Tests: tests/integration/test_jobs.sh (a real worker gets an assignment, the job fails with
 * that text).
 */
#ifndef MT_WORKER_TASK_H
#define MT_WORKER_TASK_H

#include <stddef.h>

#include "proto/coordinator.pb-c.h"
#include "status/mt_status.h"

typedef struct worker_tasks worker_tasks;

/* A new, empty task table (returns owned: worker_tasks_free). RESOURCE_EXHAUSTED. */
mt_code worker_tasks_new(worker_tasks **out, mt_err *err);

/* Free the table; NULL is a no-op. */
void worker_tasks_free(worker_tasks *t);

/* Start the task `a` describes (borrowed for the call). Ignores a (job, attempt) it knows. */
void worker_on_assignment(worker_tasks *t, const Meshtrain__TaskAssignment *a);

/* Stop the task of (x->job_id, x->attempt) (borrowed), if it runs. */
void worker_on_cancel(worker_tasks *t, const Meshtrain__TaskCancel *x);

/* A copy of every task's status for a heartbeat: *out (returns owned, with *n entries; free
 * with worker_tasks_snapshot_free). *out NULL and *n 0 when there are none or memory ran out. */
void worker_tasks_snapshot(worker_tasks *t, Meshtrain__TaskStatus ***out, size_t *n);
void worker_tasks_snapshot_free(Meshtrain__TaskStatus **s, size_t n);

/* The statuses in snapshot s reached the coordinator: drop the tasks that were final in it. */
void worker_tasks_reported(worker_tasks *t, Meshtrain__TaskStatus *const *s, size_t n);

#endif
