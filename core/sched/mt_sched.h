/* SPDX-License-Identifier: MIT */
/*
 * mt_sched.h — gang placement of a job's mesh on free devices: a pure function, no I/O, no state.
 *
 * How it fits: the scheduler (coordinator/jobs.c) and `meshtrain plan` (client/cmd_plan.c) lists
 * each alive worker's free devices, asks mt_sched_place for a slot per global rank, and either
 * starts the job on all of them or on none (gang scheduling). Ranks are the mesh positions in
 * row-major order, so the innermost mesh dimension's groups are runs of `inner` consecutive ranks;
 * the placement keeps such a group on one worker whenever some worker has room for it (its
 * collectives then stay in shared memory), preferring the worker the previous group went to, then
 * the worker with the least room that still fits (best fit, which leaves big workers for big
 * groups). Only when no worker can take a whole group is it split, over the workers with the most
 * free devices first. Deterministic: the same input gives the same placement. Threading: pure; any
 * thread. Tests: tests/unit/test_sched.c.
 */
#ifndef MT_SCHED_H
#define MT_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

/* One worker's free devices (borrowed). */
typedef struct mt_sched_worker {
    const uint32_t *free; /* local indexes of its free, healthy devices, ascending */
    size_t n_free;
} mt_sched_worker;

/* Where one global rank goes. */
typedef struct mt_sched_slot {
    size_t worker;        /* index into the workers array */
    uint32_t local_index; /* device index inside that worker */
} mt_sched_slot;

/*
 * Place n_devices ranks (the mesh's device count; a multiple of inner >= 1) on workers[0..nw):
 * on MT_OK out[rank] (caller array of n_devices) says where each rank runs, every device used
 * at most once. Codes: RESOURCE_EXHAUSTED when the workers have fewer free devices than
 * n_devices (out is then unspecified), INVALID_ARGUMENT (inner < 1, n_devices not a multiple
 * of inner, NULL arrays).
 */
mt_code mt_sched_place(const mt_sched_worker *workers, size_t nw, size_t n_devices, size_t inner,
                       mt_sched_slot *out);

/*
 * The batch-axis size of an elastic data-parallel job (mesh {"batch": b}, spec section
 * "elastic") when `devices` devices are available: the largest b in [min_batch, max_batch] with
 * b <= devices that divides global_batch (each replica then gets global_batch / b examples, and
 * the steps, their order and the checkpoints stay those of the job). 0 when none fits.
 */
uint32_t mt_sched_elastic_batch(uint32_t min_batch, uint32_t max_batch, uint64_t global_batch,
                                size_t devices);

#endif
