/* SPDX-License-Identifier: MIT */
/*
 * stall.c — hang diagnosis on the coordinator (stall.h), an adapter: per-rank progress records
 * from heartbeats, and on the sweep timer the silent-worker note and what the stall rule of the
 * scheduling core (coord_sched_stall, sched.c) decides, applied through the domain core
 * (state.c). Loop thread only.
 *
 * DESIGN. Each active job keeps j->devs[n_place] (one record per rank, freed with the placement).
 * A heartbeat's TaskStatus.devices update the ranks that run on that worker for the job's current
 * attempt; ages become coordinator times (now - age), so worker clocks never matter. The rule
 * hashes every rank's (ticks, step, seq) and the job's step into a signature: when it changes the
 * job made progress. A RUNNING job whose signature has not changed for opts.stall_timeout_ms, all
 * of whose ranks have reported and all of whose workers heartbeated within the freshness window
 * (3 heartbeat intervals + 1 s), becomes STALLED with the diagnosis as its reason; a worker that
 * went silent is left to the lost-worker path, so a dead worker is never reported as STALLED.
 * A STALLED job returns to RUNNING when the signature moves (or a task reports something new,
 * jobs.c); while STALLED its reason is refreshed every 5 s (the ages grow). A job STALLED for
 * opts.stall_restart_ms more while some rank waits inside a collective (a blocked group, not
 * long host work such as a checkpoint upload) is restarted like one that lost a worker
 * (coord_job_restart: RESTARTING, or FAILED past restart.max_restarts).
 */
#include "coordinator/stall.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/coord_rpc.h"
#include "log/mt_log.h"

#define REFRESH_MS 5000

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

/* ------------------------------------------------------------------ detection (sweep) */

/* Every worker of j is alive and heartbeated within the freshness window. */
static bool workers_fresh(mt_coord *c, const coord_job *j, int64_t now)
{
    int64_t fresh = COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms);

    for (size_t t = 0; t < j->n_tasks; t++) {
        coord_worker *w = coord_worker_find(c, j->tasks[t].worker_id);
        if (w == NULL || w->state != COORD_WORKER_ALIVE || now - w->last_seen_mono_ms > fresh)
            return false;
    }
    return true;
}

/*
 * A worker of j stopped heartbeating (frozen, SIGSTOPped, cut off): name it in the job's reason
 * at once — within a few heartbeat intervals, well before the collective deadline or the
 * heartbeat timeout end the attempt — once per silence (one store write). Returns 1 then
 * (the stall rules do not apply: the lost-worker path decides). Issue 19, fault 8.
 */
static int note_silent(mt_coord *c, coord_job *j, int64_t now)
{
    coord_worker *w = coord_job_silent_worker(c, j, NULL, now);
    char note[512], diag[400];

    if (w == NULL) {
        if (j->silent_note_mono_ms != 0)
            coord_job_note_diagnose(c, j, "every worker heartbeats again",
                                    j->state == MT_JOBSTATE_RUNNING ? "" : j->diagnosis);
        j->silent_note_mono_ms = 0;
        return 0;
    }
    if (j->silent_note_mono_ms != 0)
        return 1; /* named once per silence: no store write per sweep */
    snprintf(note, sizeof(note),
             "worker %.63s (%.63s) silent for %lld s: no heartbeat; it is declared lost and the "
             "job restarts %lld s after its last one",
             w->rec.worker_id, w->rec.host, (long long)((now - w->last_seen_mono_ms) / 1000),
             (long long)(c->opts.heartbeat_timeout_ms / 1000));
    snprintf(diag, sizeof(diag),
             "device stuck: worker %.63s (%.63s) silent for %lld s: no heartbeat (a frozen "
             "process or machine); the others wait for it until the collective deadline",
             w->rec.worker_id, w->rec.host, (long long)((now - w->last_seen_mono_ms) / 1000));
    mt_log_warn("job %s: %s", j->job_id, note);
    coord_job_note_diagnose(c, j, note, diag);
    j->silent_note_mono_ms = now;
    return 1;
}

void coord_stall_sweep(mt_coord *c)
{
    int64_t now = mt_clock_mono_ms();

    for (size_t i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        coord_sched_stall_in in;
        coord_sched_stall_out out;
        if (j->state != MT_JOBSTATE_RUNNING && j->state != MT_JOBSTATE_STALLED)
            continue;
        if (note_silent(c, j, now)) /* a silent worker is named whether or not stalls are */
            continue;
        in = (coord_sched_stall_in){j->state,
                                    j->devs,
                                    j->n_place,
                                    j->step,
                                    j->prog_sig,
                                    j->prog_mono_ms,
                                    j->stall_note_mono_ms,
                                    workers_fresh(c, j, now),
                                    c->opts.stall_timeout_ms,
                                    c->opts.stall_restart_ms};
        coord_sched_stall(&in, now, REFRESH_MS, &out);
        j->prog_sig = out.prog_sig;
        j->prog_mono_ms = out.prog_ms;
        switch (out.verdict) {
        case COORD_SCHED_STALL_NONE:
            break;
        case COORD_SCHED_STALL_RESUMED:
            coord_job_move(c, j, MT_JOBSTATE_RUNNING, out.reason);
            break;
        case COORD_SCHED_STALL_STALLED:
            mt_log_warn("job %s: no progress for %lld ms while its workers heartbeat: %s",
                        j->job_id, (long long)(now - j->prog_mono_ms), out.reason);
            if (coord_job_move(c, j, MT_JOBSTATE_STALLED, out.reason) == MT_OK) {
                j->stall_note_mono_ms = now;
                coord_job_diagnose(c, j, out.diagnosis);
            }
            break;
        case COORD_SCHED_STALL_RESTART:
            mt_log_warn("job %s: restarting from its checkpoint: %s", j->job_id, out.reason);
            coord_job_restart(c, j, out.reason);
            break;
        case COORD_SCHED_STALL_REFRESH:
            coord_job_note_diagnose(c, j, out.reason, out.diagnosis);
            j->stall_note_mono_ms = now;
            break;
        }
    }
}
