/* SPDX-License-Identifier: MIT */
/*
 * stall.c — hang diagnosis on the coordinator (stall.h): per-rank progress records from
 * heartbeats, STALLED detection on the sweep timer, and the diagnosis text. Loop thread only,
 * except coord_stall_diagnose (pure).
 *
 * DESIGN. Each active job keeps j->devs[n_place] (one record per rank, freed with the placement).
 * A heartbeat's TaskStatus.devices update the ranks that run on that worker for the job's current
 * attempt; ages become coordinator times (now - age), so worker clocks never matter. The sweep
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

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/coord_rpc.h"
#include "log/mt_log.h"

#define REFRESH_MS 5000

/* ------------------------------------------------------------------ diagnosis (pure) */

static void add(char *out, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add(char *out, size_t cap, size_t *at, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*at >= cap)
        return;
    va_start(ap, fmt);
    n = vsnprintf(out + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = (size_t)n >= cap - *at ? cap - 1 : *at + (size_t)n;
}

static int inside(const coord_stall_dev *d)
{
    return d->known && (strcmp(d->state, "entered") == 0 || strcmp(d->state, "waiting") == 0 ||
                        strcmp(d->state, "chunk") == 0);
}

static int tag_less(const coord_stall_dev *a, const coord_stall_dev *b)
{
    return a->step < b->step || (a->step == b->step && a->seq < b->seq);
}

static long long secs(int64_t now_ms, int64_t since_ms)
{
    return since_ms > now_ms ? 0 : (long long)((now_ms - since_ms) / 1000);
}

static void add_activity(char *out, size_t cap, size_t *at, const coord_stall_dev *d,
                         int64_t now_ms)
{
    if (d->activity[0] == '\0' || d->activity_since_ms < 0)
        add(out, cap, at, "none reported");
    else
        add(out, cap, at, "%s %lld s ago", d->activity, secs(now_ms, d->activity_since_ms));
}

void coord_stall_diagnose(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap)
{
    const coord_stall_dev *f = NULL; /* a device in the latest collective */
    size_t at = 0, behind = 0, in_f = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (size_t r = 0; r < n; r++) {
        if (inside(&devs[r]) && (f == NULL || tag_less(f, &devs[r])))
            f = &devs[r];
    }
    if (f == NULL) {
        add(out, cap, &at, "no device is inside a collective");
        for (size_t r = 0; r < n; r++) {
            const coord_stall_dev *d = &devs[r];
            add(out, cap, &at, "%s ", r == 0 ? ";" : ",");
            if (!d->known) {
                add(out, cap, &at, "rank %zu: no progress reported", r);
                continue;
            }
            add(out, cap, &at, "%s cpu:%u last activity: ", d->worker_id, d->local_index);
            add_activity(out, cap, &at, d, now_ms);
        }
        return;
    }
    for (size_t r = 0; r < n; r++) {
        const coord_stall_dev *d = &devs[r];
        if (inside(d) && d->step == f->step && d->seq == f->seq)
            in_f++;
        else
            behind++;
    }
    add(out, cap, &at, "step %" PRIu64 " %s #%" PRIu32 " on axis %s:", f->step, f->op, f->seq,
        f->axis[0] ? f->axis : "(unknown)");
    if (behind == 0) {
        int64_t newest = f->state_since_ms;
        for (size_t r = 0; r < n; r++)
            if (devs[r].state_since_ms > newest)
                newest = devs[r].state_since_ms;
        add(out, cap, &at, " all %zu devices entered; no data moved for %lld s", in_f,
            secs(now_ms, newest));
        return;
    }
    if (behind > 1)
        add(out, cap, &at, " %zu devices never entered it:", behind);
    for (size_t r = 0, k = 0; r < n; r++) {
        const coord_stall_dev *d = &devs[r];
        if (inside(d) && d->step == f->step && d->seq == f->seq)
            continue;
        add(out, cap, &at, "%s ", k++ == 0 ? "" : ";");
        if (!d->known) {
            add(out, cap, &at, "rank %zu never entered; no progress reported", r);
            continue;
        }
        if (inside(d)) {
            add(out, cap, &at,
                "%s cpu:%u is still in step %" PRIu64 " %s #%" PRIu32 " on axis %s (%s for %lld s)",
                d->worker_id, d->local_index, d->step, d->op, d->seq,
                d->axis[0] ? d->axis : "(unknown)", d->state, secs(now_ms, d->state_since_ms));
            continue;
        }
        add(out, cap, &at, "%s cpu:%u never entered; its last activity: ", d->worker_id,
            d->local_index);
        add_activity(out, cap, &at, d, now_ms);
    }
}

void coord_stall_classify(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap)
{
    const char *w[3] = {NULL, NULL, NULL}; /* distinct workers of the group, at most 3 kept */
    size_t nw = 0, at = 0;
    char diag[256];
    int all_in = n > 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    coord_stall_diagnose(devs, n, now_ms, diag, sizeof(diag));
    for (size_t r = 0; r < n && all_in; r++) {
        const coord_stall_dev *d = &devs[r];
        size_t k = 0;
        if (!inside(d)) { /* computing, reading input, or never reported: not waiting on data */
            all_in = 0;
            break;
        }
        while (k < nw && k < 3 && strcmp(w[k], d->worker_id) != 0)
            k++;
        if (k == nw) {
            if (nw < 3)
                w[nw] = d->worker_id;
            nw++;
        }
    }
    if (!all_in || nw < 2) { /* a device outside every collective (or one worker alone) */
        add(out, cap, &at, "device stuck: %s", diag);
        return;
    }
    if (nw == 2)
        add(out, cap, &at, "link %s<->%s: ", w[0], w[1]);
    else
        add(out, cap, &at, "a link among %s, %s, %s%s: ", w[0], w[1], w[2],
            nw > 3 ? " and others" : "");
    add(out, cap, &at, "%s; every worker heartbeats (not a stuck device)", diag);
}

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

static uint64_t signature(const coord_job *j)
{
    uint64_t h = 1469598103934665603ULL ^ j->step;

    for (size_t r = 0; r < j->n_place; r++) {
        const coord_stall_dev *d = &j->devs[r];
        uint64_t v[4] = {(uint64_t)d->known, d->ticks, d->step, d->seq};
        for (int k = 0; k < 4; k++)
            h = (h ^ v[k]) * 1099511628211ULL;
    }
    return h;
}

/* Some rank waits inside a collective: a group is blocked (not merely slow host work). */
static int any_inside(const coord_job *j)
{
    for (size_t r = 0; r < j->n_place; r++)
        if (inside(&j->devs[r]))
            return 1;
    return 0;
}

/* Every rank reported, some rank entered a collective of this attempt (before that the workers
 * are opening their input pipelines or restoring a checkpoint, which may take a while), and every
 * worker of j heartbeated recently. */
static int all_alive_and_known(mt_coord *c, const coord_job *j, int64_t now)
{
    int64_t fresh = COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms);
    int started = 0;

    for (size_t r = 0; r < j->n_place; r++) {
        if (!j->devs[r].known)
            return 0;
        started |= j->devs[r].op[0] != '\0';
    }
    if (!started)
        return 0;
    for (size_t t = 0; t < j->n_tasks; t++) {
        coord_worker *w = coord_worker_find(c, j->tasks[t].worker_id);
        if (w == NULL || w->state != COORD_WORKER_ALIVE || now - w->last_seen_mono_ms > fresh)
            return 0;
    }
    return 1;
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
        char diag[256];
        uint64_t sig;
        if (j->state != MT_JOBSTATE_RUNNING && j->state != MT_JOBSTATE_STALLED)
            continue;
        if (note_silent(c, j, now)) /* a silent worker is named whether or not stalls are */
            continue;
        if (c->opts.stall_timeout_ms <= 0 || j->devs == NULL)
            continue;
        sig = signature(j);
        if (sig != j->prog_sig) {
            int64_t quiet = now - j->prog_mono_ms;
            int baseline = j->prog_sig == 0; /* first records of this attempt (or since a
                                                coordinator restart): nothing to compare yet */
            j->prog_sig = sig;
            j->prog_mono_ms = now;
            if (j->state == MT_JOBSTATE_STALLED && !baseline) {
                snprintf(diag, sizeof(diag), "progress resumed after %lld s without progress",
                         (long long)(quiet / 1000));
                coord_job_move(c, j, MT_JOBSTATE_RUNNING, diag);
            }
            continue;
        }
        if (!all_alive_and_known(c, j, now))
            continue;
        if (j->state == MT_JOBSTATE_RUNNING && now - j->prog_mono_ms >= c->opts.stall_timeout_ms) {
            coord_stall_diagnose(j->devs, j->n_place, now, diag, sizeof(diag));
            mt_log_warn("job %s: no progress for %lld ms while its workers heartbeat: %s",
                        j->job_id, (long long)(now - j->prog_mono_ms), diag);
            if (coord_job_move(c, j, MT_JOBSTATE_STALLED, diag) == MT_OK) {
                j->stall_note_mono_ms = now;
                coord_stall_classify(j->devs, j->n_place, now, diag, sizeof(diag));
                coord_job_diagnose(c, j, diag);
            }
        } else if (j->state == MT_JOBSTATE_STALLED && c->opts.stall_restart_ms > 0 &&
                   now - j->prog_mono_ms >=
                       (int64_t)c->opts.stall_timeout_ms + c->opts.stall_restart_ms &&
                   any_inside(j)) {
            char cause[300];
            coord_stall_diagnose(j->devs, j->n_place, now, diag, sizeof(diag));
            snprintf(cause, sizeof(cause), "stalled for %lld s: %s",
                     (long long)((now - j->prog_mono_ms) / 1000), diag);
            mt_log_warn("job %s: restarting from its checkpoint: %s", j->job_id, cause);
            coord_job_restart(c, j, cause);
        } else if (j->state == MT_JOBSTATE_STALLED && now - j->stall_note_mono_ms >= REFRESH_MS) {
            char kind[400];
            coord_stall_diagnose(j->devs, j->n_place, now, diag, sizeof(diag));
            coord_stall_classify(j->devs, j->n_place, now, kind, sizeof(kind));
            coord_job_note_diagnose(c, j, diag, kind);
            j->stall_note_mono_ms = now;
        }
    }
}
