/* SPDX-License-Identifier: MIT */
/*
 * stall.c — the per-rank progress records of hang diagnosis (stall.h), an RPC adapter: the
 * Heartbeat handler (workers.c) hands it each task status, and it updates the records of the
 * ranks that run on that worker. The sweep (sweep.c) reads them and applies the stall rule of
 * the scheduling core (coord_sched_stall, sched.c); this file decides nothing. Loop thread only.
 *
 * DESIGN. Each active job keeps j->devs[n_place] (one record per rank, freed with the placement).
 * A heartbeat's TaskStatus.devices update the ranks that run on that worker for the job's current
 * attempt; ages become coordinator times (now - age), so worker clocks never matter. The stall
 * rule hashes every rank's (ticks, step, seq) and the job's step into a signature: when it
 * changes the job made progress (sched.h, docs/jobs.md).
 */
#include "coordinator/stall.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/coord_rpc.h"

/* ------------------------------------------------------------------ records from heartbeats */

static void copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

void coord_stall_apply(mt_coord *c, const char *worker_id, const Meshtrain__TaskStatus *t)
{
    coord_job *j = coord_job_find(c, t->job_id);
    int64_t now = mt_clock_mono_ms();

    if (j == NULL || t->n_devices == 0 || t->attempt != j->attempt || j->n_place == 0 ||
        (j->state != MT_JOBSTATE_RUNNING && j->state != MT_JOBSTATE_STALLED &&
         j->state != MT_JOBSTATE_SCHEDULED))
        return;
    if (j->devs == NULL && (j->devs = mt_calloc(j->n_place, sizeof(*j->devs))) == NULL)
        return;
    for (size_t i = 0; i < t->n_devices; i++) {
        const Meshtrain__DeviceProgress *p = t->devices[i];
        coord_stall_dev *d;
        if (p->rank >= j->n_place || strcmp(j->place[p->rank].worker_id, worker_id) != 0)
            continue; /* not this worker's rank: ignore */
        d = &j->devs[p->rank];
        d->known = 1;
        copy(d->worker_id, sizeof(d->worker_id), worker_id);
        d->local_index = j->place[p->rank].local_index;
        d->step = p->step;
        d->seq = p->seq;
        copy(d->op, sizeof(d->op), p->op);
        copy(d->axis, sizeof(d->axis), p->axis);
        copy(d->state, sizeof(d->state), p->state);
        d->chunk = p->chunk;
        d->chunks = p->chunks;
        d->state_since_ms = now - (p->state_age_ms > 0 ? p->state_age_ms : 0);
        copy(d->activity, sizeof(d->activity), p->activity);
        d->activity_since_ms = p->activity_age_ms < 0 ? -1 : now - p->activity_age_ms;
        d->ticks = p->ticks;
    }
}
