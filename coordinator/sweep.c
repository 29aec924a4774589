/* SPDX-License-Identifier: MIT */
/*
 * sweep.c — the coordinator's periodic sweep (coord_sweep, coord_int.h), an adapter: on the sweep
 * timer (every 250 ms, coord.c) it reads the clock and the registry, asks the scheduling core
 * (sched.c) what the time means and applies its decisions through the domain core (state.c):
 *  - lost workers: an alive worker silent past --heartbeat-timeout-ms is lost
 *    (coord_sched_worker_lost), stored as such, and its placed jobs restart
 *    (coord_worker_lose: RESTARTING, or FAILED past restart.max_restarts);
 *  - silent workers: a worker of a RUNNING or STALLED job silent for the heartbeat window
 *    (3 intervals + 1 s) is named in the job's reason and diagnosis once per silence
 *    (coord_sched_silence), long before the heartbeat timeout; the stall rule then waits;
 *  - stalls: coord_sched_stall over the per-rank progress records (coord_job_progress keeps them
 * from heartbeats): STALLED, resumed, restarted, or the reason refreshed every 5 s;
 *  - the coordinator's own pause (SIGSTOP, a suspended VM, a loop blocked for a while): a sweep
 *    that runs more than SWEEP_PAUSE_MS after the last one moves every worker's last-heard time
 *    forward by the gap, so a worker is lost only after a whole timeout of silence the
 *    coordinator was awake to hear (libuv runs the timer before the queued heartbeats);
 *  - heartbeat times: written to the store in one batched transaction once a second (a
 *    thousand workers cost one write per second).
 * It calls no RPC handler and no HTTP handler, and none calls it: only coord.c (the timer, and
 * coord_sweep_workers once at shutdown). tests/tools/coord_graph.py checks it.
 * Threading: loop thread only.
 * Tests: the rules in tests/unit/test_coord_sched.c; the sweep itself through the daemons in
 * tests/integration/test_workers.sh, test_stall.sh, test_fault_frozen_worker.sh.
 */
#include "coordinator/coord_int.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

#define REFRESH_MS 5000 /* a STALLED job's reason is refreshed this often (the ages grow) */

/* ------------------------------------------------------------------ workers */

/* Write every dirty heartbeat time in ONE transaction (one fsync per tick). */
static void flush_heartbeats(mt_coord *c)
{
    const char *ids[256];
    int64_t times[256];
    size_t n = 0, dirty = 0;
    mt_err err = MT_ERR_INIT;
    mt_code rc = MT_OK;

    for (size_t i = 0; i < c->n_workers; i++)
        dirty += c->workers[i].hb_dirty != 0;
    if (dirty == 0)
        return;
    int64_t t0 = mt_clock_mono_us();
    if (mt_store_tx_begin(c->store, &err) != MT_OK) {
        mt_log_error("store heartbeats: %s", err.msg);
        return;
    }
    for (size_t i = 0; i <= c->n_workers && rc == MT_OK; i++) {
        if (n == 256 || (i == c->n_workers && n > 0)) {
            rc = mt_store_worker_heartbeats(c->store, ids, times, n, NULL, &err);
            n = 0;
        }
        if (i < c->n_workers && c->workers[i].hb_dirty) {
            ids[n] = c->workers[i].rec.worker_id;
            times[n++] = c->workers[i].rec.last_heartbeat_ms;
        }
    }
    if (rc == MT_OK)
        rc = mt_store_tx_commit(c->store, &err);
    coord_stats_store_write(c->stats, mt_clock_mono_us() - t0);
    if (rc != MT_OK) {
        mt_log_error("store heartbeats: %s", err.msg);
        mt_store_tx_rollback(c->store, NULL);
        return; /* still dirty: retried next tick */
    }
    for (size_t i = 0; i < c->n_workers; i++)
        c->workers[i].hb_dirty = 0;
}

/* Far longer than the sweep timer's 250 ms: only a pause of the loop itself gets here. The
 * timer's runs are measured (coord_sweep), not the one at shutdown. */
#define SWEEP_PAUSE_MS 1000

/* The time the coordinator could not hear anyone is nobody's silence (see the header). */
static void forgive_own_pause(mt_coord *c, int64_t now)
{
    int64_t gap = now - c->last_sweep_mono_ms;

    if (c->last_sweep_mono_ms != 0 && gap > SWEEP_PAUSE_MS) {
        mt_log_warn("coordinator loop paused for %lld ms: workers' heartbeat silence counted from "
                    "now",
                    (long long)gap);
        for (size_t i = 0; i < c->n_workers; i++) {
            coord_worker *w = &c->workers[i];
            w->last_seen_mono_ms =
                w->last_seen_mono_ms + gap < now ? w->last_seen_mono_ms + gap : now;
        }
    }
    c->last_sweep_mono_ms = now;
}

void coord_sweep_workers(mt_coord *c)
{
    int64_t now = mt_clock_mono_ms();
    mt_err err = MT_ERR_INIT;

    for (size_t i = 0; i < c->n_workers; i++) {
        coord_worker *w = &c->workers[i];
        int64_t silent = now - w->last_seen_mono_ms;
        coord_sched_worker v;
        coord_worker_view(w, &v);
        if (!coord_sched_worker_lost(&v, now, c->opts.heartbeat_timeout_ms)) /* sched.c's rule */
            continue;
        coord_worker_set_state(w, COORD_WORKER_LOST);
        mt_log_warn("worker %s lost: no heartbeat for %lld ms (timeout %d ms)", w->rec.worker_id,
                    (long long)silent, c->opts.heartbeat_timeout_ms);
        int64_t t0 = mt_clock_mono_us();
        if (mt_store_worker_set_state(c->store, w->rec.worker_id, w->rec.state, &err) != MT_OK)
            mt_log_error("store worker %s state: %s", w->rec.worker_id, err.msg);
        coord_stats_store_write(c->stats, mt_clock_mono_us() - t0);
        coord_worker_lose(c, w->rec.worker_id, "lost (no heartbeat)");
    }
    if (now - c->last_flush_mono_ms >= 1000) {
        flush_heartbeats(c);
        c->last_flush_mono_ms = now;
    }
}

/* ------------------------------------------------------------------ jobs */

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
 * A worker of j stopped heartbeating (frozen, SIGSTOPped, cut off): the scheduling core's
 * once-per-silence rule (coord_sched_silence) says whether to name it now, and when every worker
 * heartbeats again. Returns true while a worker is silent (the stall rule does not apply then:
 * the lost-worker path decides). Issue 19, fault 8.
 */
static bool note_silent(mt_coord *c, coord_job *j, int64_t now)
{
    coord_sched_worker *v = mt_calloc(j->n_tasks + 1, sizeof(*v));
    coord_sched_silence_out out;
    size_t n;

    if (v == NULL)
        return false; /* out of memory: asked again next sweep */
    n = coord_job_worker_views(c, j, v);
    coord_sched_silence(v, n, j->state, j->diagnosis, j->silent_note_mono_ms, now,
                        COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms),
                        c->opts.heartbeat_timeout_ms, &out);
    mt_free(v);
    switch (out.verdict) {
    case COORD_SCHED_SILENCE_NONE:
        return false;
    case COORD_SCHED_SILENCE_BACK:
        coord_job_note_diagnose(c, j, out.reason, out.diagnosis);
        j->silent_note_mono_ms = 0;
        return false;
    case COORD_SCHED_SILENCE_NOTE:
        mt_log_warn("job %s: %s", j->job_id, out.reason);
        coord_job_note_diagnose(c, j, out.reason, out.diagnosis);
        j->silent_note_mono_ms = now;
        return true;
    case COORD_SCHED_SILENCE_NOTED:
        return true;
    }
    return false;
}

/* The stall rule for j (coord_sched_stall), applied. */
static void sweep_stall(mt_coord *c, coord_job *j, int64_t now)
{
    coord_sched_stall_in in = {j->state,
                               j->devs,
                               j->n_place,
                               j->step,
                               j->prog_sig,
                               j->prog_mono_ms,
                               j->stall_note_mono_ms,
                               workers_fresh(c, j, now),
                               c->opts.stall_timeout_ms,
                               c->opts.stall_restart_ms};
    coord_sched_stall_out out;

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
        mt_log_warn("job %s: no progress for %lld ms while its workers heartbeat: %s", j->job_id,
                    (long long)(now - j->prog_mono_ms), out.reason);
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

static void sweep_jobs(mt_coord *c, int64_t now)
{
    for (size_t i = 0; i < c->n_jobs;) {
        coord_job *j = c->jobs[i];
        size_t before = c->n_jobs;
        if (j->state == MT_JOBSTATE_RUNNING || j->state == MT_JOBSTATE_STALLED) {
            if (!note_silent(c, j, now)) /* a silent worker is named whether or not stalls are */
                sweep_stall(c, j, now);
            if (c->n_jobs < before)
                continue; /* j was removed (a restart FAILED it at its limit): i is the next */
        }
        i++;
    }
}

void coord_sweep(mt_coord *c)
{
    forgive_own_pause(c, mt_clock_mono_ms()); /* the timer's runs only, not shutdown's sweep */
    coord_sweep_workers(c);
    sweep_jobs(c, mt_clock_mono_ms());
}
