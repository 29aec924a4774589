/* SPDX-License-Identifier: MIT */
/*
 * taskdir.h — a task attempt's private directory under $TMPDIR (its checkpoints and the
 * checkpoint it resumes from), and the sweep of those that dead workers left behind.
 *
 * How it fits: worker/task.c creates one per task attempt and removes it when the attempt
 * ends; worker.c sweeps at start. A worker killed with kill -9 (or by the OOM killer, or a
 * power cut) cannot remove its directory; without the sweep they pile up (a test machine
 * had 477, each with a checkpoint).
 *
 * Liveness: the directory holds ".lock", on which the creating process keeps an exclusive
 * flock(2) for the attempt's lifetime. The kernel drops the lock when the process dies, in
 * any PID namespace, so a lock that can be taken means the owner is gone. Directories made
 * before locks existed (no ".lock") count as dead when the PID in their name is not a
 * running process. Either way a directory whose named PID is alive is kept (this also covers
 * a directory whose creator has not taken its lock yet).
 *
 * Safety: only directories named meshtrain-worker-* directly in the given parent, owned by
 * this user, are looked at; symbolic links are never followed; only the directory's own
 * entries are unlinked (a subdirectory stops the removal: the directory stays).
 * Threading: any thread; no shared state. Tests: tests/unit/test_taskdir.c.
 */
#ifndef MT_WORKER_TASKDIR_H
#define MT_WORKER_TASKDIR_H

#include "status/mt_status.h"

typedef struct worker_taskdir {
    char path[512]; /* "" when none */
    int lock_fd;    /* holds the flock; -1 when none */
} worker_taskdir;

/*
 * Create parent/meshtrain-worker-PID-JOB-ATTEMPT-XXXXXX (mkdtemp, mode 0700; parent NULL:
 * /tmp) and lock its ".lock". MT_INTERNAL with the path and errno text on failure (*d then
 * holds no directory).
 */
mt_code worker_taskdir_create(worker_taskdir *d, const char *parent, const char *job,
                              unsigned attempt, mt_err *err);

/* Unlink the directory's files and the directory, then release the lock. No-op when none. */
void worker_taskdir_remove(worker_taskdir *d);

/* Remove parent's (NULL: /tmp) task directories whose owner is gone (see Liveness); the count. */
int worker_taskdir_sweep(const char *parent);

#endif
