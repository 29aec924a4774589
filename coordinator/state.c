/* SPDX-License-Identifier: MIT */
/*
 * state.c — the coordinator's domain core (its section of coord_int.h): the tables of active jobs
 * and registered workers, their typed states (worker, job, task: enums with one name table each;
 * the strings exist only in SQL and on the wire), the job transitions with their store writes, the
 * status reason and the fault diagnosis, the restart rule (RESTARTING, or FAILED past
 * restart.max_restarts), a lost worker's jobs, and what a worker's report of its task does to
 * the job (coord_task_report: its state and step recorded, the job started, succeeded, failed,
 * or restarted after a peer failure naming the frozen worker or the broken link), whose
 * decisions it takes from the scheduling core (sched.c: typed in, typed out). It uses no protobuf
 * type, no nng call and no RPC: it includes coord_int.h alone, which includes no RPC header (those
 * declarations are in coord_rpc.h, the RPC adapters' header), so not even protobuf-c.h reaches it;
 * tests/integration/test_coord_no_circles.sh checks it.
 *
 * How it fits: the adapters above it — the RPC handlers (jobs.c, workers.c, ckpt.c,
 * metrics.c), the HTTP endpoints (read-only, through the store) and the sweep (sweep.c) — and
 * the scheduler pass (schedpass.c, the other file of the domain core) call it; it calls only the
 * store, the process stats, the scheduling core and, for what must leave the process (the end of
 * a job's metrics stream), the hooks coord.c installs (mt_coord.hooks). The scheduler pass moves
 * jobs through coord_job_move like everyone else (its placement writes the placement rows and
 * SCHEDULED in one transaction of its own).
 *
 * Invariants: every change of a job's state is one store transaction (job row + event) BEFORE
 * the in-memory change, so what a client was told survives kill -9; a final state removes the
 * job from the table and frees it.
 * Threading: loop thread only.
 * Tests: tests/unit/test_coord_state.c (the core driven directly, no RPC), test_coord_jobs.c and
 * test_coord_stall.c (through the RPCs).
 */
#include "coordinator/coord_int.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

/* ------------------------------------------------------------------ workers */

coord_worker *coord_worker_find(mt_coord *c, const char *worker_id)
{
    for (size_t i = 0; i < c->n_workers; i++)
        if (strcmp(c->workers[i].rec.worker_id, worker_id) == 0)
            return &c->workers[i];
    return NULL;
}

void coord_worker_view(const coord_worker *w, coord_sched_worker *v)
{
    memset(v, 0, sizeof(*v));
    v->id = w->rec.worker_id;
    v->host = w->rec.host;
    v->data_address = w->rec.data_address;
    v->state = w->state;
    v->last_seen_ms = w->last_seen_mono_ms;
    v->instance = w->rec.instance_id;
}

static const char *const worker_state_names[] = {
    [COORD_WORKER_ALIVE] = "alive",
    [COORD_WORKER_LOST] = "lost",
};

const char *coord_worker_state_name(coord_worker_state s)
{
    return (size_t)s < sizeof(worker_state_names) / sizeof(worker_state_names[0])
               ? worker_state_names[s]
               : "?";
}

int coord_worker_state_parse(const char *name, coord_worker_state *out)
{
    for (size_t i = 0; i < sizeof(worker_state_names) / sizeof(worker_state_names[0]); i++)
        if (strcmp(name, worker_state_names[i]) == 0) {
            *out = (coord_worker_state)i;
            return 1;
        }
    return 0;
}

void coord_worker_set_state(coord_worker *w, coord_worker_state s)
{
    w->state = s;
    snprintf(w->rec.state, sizeof(w->rec.state), "%s", coord_worker_state_name(s));
}

/* ------------------------------------------------------------------ tasks */

static const char *const task_state_names[] = {
    [COORD_TASK_ASSIGNED] = "",           [COORD_TASK_RUNNING] = "running",
    [COORD_TASK_SUCCEEDED] = "succeeded", [COORD_TASK_FAILED] = "failed",
    [COORD_TASK_CANCELLED] = "cancelled",
};

const char *coord_task_state_name(coord_task_state s)
{
    return (size_t)s < sizeof(task_state_names) / sizeof(task_state_names[0]) ? task_state_names[s]
                                                                              : "?";
}

int coord_task_state_parse(const char *name, coord_task_state *out)
{
    for (size_t i = 0; i < sizeof(task_state_names) / sizeof(task_state_names[0]); i++)
        if (strcmp(name, task_state_names[i]) == 0) {
            *out = (coord_task_state)i;
            return 1;
        }
    return 0;
}

/* ------------------------------------------------------------------ jobs */

int coord_jobstate_placed(mt_jobstate s)
{
    return s == MT_JOBSTATE_SCHEDULED || s == MT_JOBSTATE_RUNNING || s == MT_JOBSTATE_STALLED;
}

coord_job *coord_job_find(mt_coord *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_jobs; i++)
        if (strcmp(c->jobs[i]->job_id, job_id) == 0)
            return c->jobs[i];
    return NULL;
}

coord_task *coord_job_task(coord_job *j, const char *worker_id)
{
    for (size_t i = 0; i < j->n_tasks; i++)
        if (strcmp(j->tasks[i].worker_id, worker_id) == 0)
            return &j->tasks[i];
    return NULL;
}

void coord_job_release(coord_job *j)
{
    mt_free(j->place);
    mt_free(j->tasks);
    mt_free(j->devs);
    j->place = NULL;
    j->tasks = NULL;
    j->devs = NULL;
    j->prog_sig = 0;
    j->n_place = j->n_tasks = 0;
}

void coord_job_free(coord_job *j)
{
    if (j == NULL)
        return;
    coord_job_release(j);
    mt_free(j);
}

mt_code coord_job_add(mt_coord *c, coord_job *j)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? c->cap_jobs * 2 : 16;
        coord_job **nj = mt_realloc(c->jobs, cap * sizeof(*nj));
        if (nj == NULL)
            return MT_RESOURCE_EXHAUSTED;
        c->jobs = nj;
        c->cap_jobs = cap;
    }
    c->jobs[c->n_jobs++] = j;
    return MT_OK;
}

void coord_jobs_free(mt_coord *c)
{
    for (size_t i = 0; i < c->n_jobs; i++)
        coord_job_free(c->jobs[i]);
    mt_free(c->jobs);
    c->jobs = NULL;
    c->n_jobs = c->cap_jobs = 0;
}

void coord_job_remove(mt_coord *c, coord_job *j)
{
    for (size_t i = 0; i < c->n_jobs; i++) {
        if (c->jobs[i] == j) {
            memmove(&c->jobs[i], &c->jobs[i + 1], (c->n_jobs - i - 1) * sizeof(*c->jobs));
            c->n_jobs--;
            break;
        }
    }
    coord_job_free(j);
}

mt_code coord_job_move(mt_coord *c, coord_job *j, mt_jobstate to, const char *reason)
{
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    /* points already accepted are stored (and published) before the job can end */
    if (mt_jobstate_is_final(to) && c->hooks.flush != NULL)
        c->hooks.flush(c);
    rc = mt_store_job_transition(c->store, j->job_id, mt_jobstate_name(j->state),
                                 mt_jobstate_name(to), reason, mt_clock_wall_ms(), &err);

    if (rc != MT_OK) {
        mt_log_error("job %s: %s -> %s: %s", j->job_id, mt_jobstate_name(j->state),
                     mt_jobstate_name(to), err.msg);
        return rc;
    }
    mt_log_info("job %s: %s -> %s (%s)", j->job_id, mt_jobstate_name(j->state),
                mt_jobstate_name(to), reason ? reason : "");
    coord_stats_job_moved(c->stats, (int)j->state, (int)to);
    j->state = to;
    snprintf(j->reason, sizeof(j->reason), "%s", reason ? reason : "");
    if (to != MT_JOBSTATE_STALLED && to != MT_JOBSTATE_RESTARTING && to != MT_JOBSTATE_SCHEDULED)
        j->diagnosis[0] = '\0'; /* as the store's transition did */
    if (to == MT_JOBSTATE_RESTARTING) {
        j->restarts++;
        if (c->hooks.moved != NULL)
            c->hooks.moved(c, j->job_id, mt_jobstate_name(to), j->reason);
    }
    if (!coord_jobstate_placed(to))
        coord_job_release(j);
    c->sched_dirty = 1;
    if (mt_jobstate_is_final(to)) {
        if (c->hooks.moved != NULL)
            c->hooks.moved(c, j->job_id, mt_jobstate_name(to),
                           to == MT_JOBSTATE_FAILED && reason != NULL ? reason : "");
        coord_job_remove(c, j);
    }
    return MT_OK;
}

void coord_job_progress(mt_coord *c, const char *job_id, uint32_t attempt, const char *worker_id,
                        uint32_t rank, const coord_stall_dev *d)
{
    coord_job *j = coord_job_find(c, job_id);
    coord_stall_dev *to;

    if (j == NULL || attempt != j->attempt || j->n_place == 0 ||
        (j->state != MT_JOBSTATE_RUNNING && j->state != MT_JOBSTATE_STALLED &&
         j->state != MT_JOBSTATE_SCHEDULED))
        return;
    if (j->devs == NULL && (j->devs = mt_calloc(j->n_place, sizeof(*j->devs))) == NULL)
        return;
    if (rank >= j->n_place || strcmp(j->place[rank].worker_id, worker_id) != 0)
        return; /* not this worker's rank: ignore */
    to = &j->devs[rank];
    *to = *d;
    to->known = 1;
    snprintf(to->worker_id, sizeof(to->worker_id), "%s", worker_id);
    to->local_index = j->place[rank].local_index;
}

void coord_job_diagnose(mt_coord *c, coord_job *j, const char *diagnosis)
{
    mt_err err = MT_ERR_INIT;

    if (strcmp(j->diagnosis, diagnosis) == 0)
        return;
    if (mt_store_job_set_diagnosis(c->store, j->job_id, diagnosis, mt_clock_wall_ms(), &err) !=
        MT_OK) {
        mt_log_error("job %s: set diagnosis: %s", j->job_id, err.msg);
        return;
    }
    coord_stats_jobs_changed(c->stats);
    snprintf(j->diagnosis, sizeof(j->diagnosis), "%s", diagnosis);
}

void coord_job_note(mt_coord *c, coord_job *j, const char *reason)
{
    mt_err err = MT_ERR_INIT;

    if (strcmp(j->reason, reason) == 0)
        return;
    if (mt_store_job_set_reason(c->store, j->job_id, reason, mt_clock_wall_ms(), &err) != MT_OK) {
        mt_log_error("job %s: set reason: %s", j->job_id, err.msg);
        return;
    }
    coord_stats_jobs_changed(c->stats); /* committed: listings rendered before are stale */
    snprintf(j->reason, sizeof(j->reason), "%s", reason);
}

void coord_job_note_diagnose(mt_coord *c, coord_job *j, const char *reason, const char *diagnosis)
{
    char old_reason[sizeof(j->reason)], old_diag[sizeof(j->diagnosis)];
    mt_err err = MT_ERR_INIT;

    if (mt_store_tx_begin(c->store, &err) != MT_OK) { /* two commits then */
        coord_job_note(c, j, reason);
        coord_job_diagnose(c, j, diagnosis);
        return;
    }
    memcpy(old_reason, j->reason, sizeof(old_reason));
    memcpy(old_diag, j->diagnosis, sizeof(old_diag));
    coord_job_note(c, j, reason);
    coord_job_diagnose(c, j, diagnosis);
    if (mt_store_tx_commit(c->store, &err) != MT_OK) {
        mt_log_error("job %s: store reason and diagnosis: %s", j->job_id, err.msg);
        mt_store_tx_rollback(c->store, NULL);
        memcpy(j->reason, old_reason, sizeof(old_reason)); /* memory follows the store */
        memcpy(j->diagnosis, old_diag, sizeof(old_diag));
    }
}

mt_code coord_job_set_step(mt_coord *c, coord_job *j, uint64_t step)
{
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (step <= j->step)
        return MT_OK;
    rc = mt_store_job_set_step(c->store, j->job_id, step, mt_clock_wall_ms(), &err);
    if (rc != MT_OK) {
        mt_log_error("job %s: set step: %s", j->job_id, err.msg);
        return rc;
    }
    coord_stats_jobs_changed(c->stats);
    j->step = step;
    return rc;
}

void coord_job_restart(mt_coord *c, coord_job *j, const char *cause)
{
    char reason[300];
    mt_jobstate to = coord_sched_restart(j->restarts, j->sum.max_restarts, cause, reason,
                                         sizeof(reason)); /* the rule is sched.c's */

    coord_job_move(c, j, to, reason);
}

size_t coord_job_worker_views(mt_coord *c, const coord_job *j, coord_sched_worker *out)
{
    size_t n = 0;

    for (size_t i = 0; i < j->n_tasks; i++) {
        const coord_worker *w = coord_worker_find(c, j->tasks[i].worker_id);
        if (w != NULL)
            coord_worker_view(w, &out[n++]);
    }
    return n;
}

void coord_worker_lose(mt_coord *c, const char *worker_id, const char *why)
{
    char cause[256];

    snprintf(cause, sizeof(cause), "worker %s %s", worker_id, why);
    for (size_t i = 0; i < c->n_jobs;) {
        coord_job *j = c->jobs[i];
        size_t before = c->n_jobs;
        if (coord_jobstate_placed(j->state) && coord_job_task(j, worker_id) != NULL) {
            coord_job_restart(c, j, cause); /* its tasks died with the worker */
            if (c->n_jobs < before)
                continue; /* j was removed (FAILED at the limit) */
        }
        i++;
    }
    c->sched_dirty = 1;
}

/* ------------------------------------------------------------------ task reports */

/*
 * A task failed on a peer (its error is "UNAVAILABLE: ..." or "DEADLINE_EXCEEDED: ...": a
 * collective lost or timed out on another process). That is a fault of the cluster, not of the
 * job: restart it (within restart.max_restarts), and say which (coord_sched_peer_failure): a
 * worker of the job that stopped heartbeating ("worker wb stopped answering"), which the next
 * placement leaves out while it stays silent, else the link between the reporting worker and the
 * peer its error names ("link wa<->wb"), which the next placement avoids or waits out with a
 * back-off. Returns 1 when it handled the report. Issue 19, faults 7 and 8.
 */
static int job_peer_failure(mt_coord *c, coord_job *j, const char *worker_id, const char *error)
{
    coord_sched_worker *v = mt_calloc(j->n_tasks + 1, sizeof(*v));
    coord_sched_peer_verdict pv;
    size_t n = v != NULL ? coord_job_worker_views(c, j, v) : 0;

    coord_sched_peer_failure(v, n, worker_id, error, j->backoff_ms, mt_clock_mono_ms(),
                             COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms), &pv);
    if (pv.fault == COORD_SCHED_FAULT_FROZEN) {
        snprintf(j->frozen, sizeof(j->frozen), "%s", v[pv.worker].id);
    } else if (pv.fault == COORD_SCHED_FAULT_LINK) {
        snprintf(j->link_a, sizeof(j->link_a), "%s", worker_id);
        snprintf(j->link_b, sizeof(j->link_b), "%s", v[pv.worker].id);
        j->backoff_ms = pv.backoff_ms;
        j->backoff_until_mono_ms = pv.backoff_until_ms;
    }
    mt_free(v);
    if (pv.fault == COORD_SCHED_FAULT_NONE)
        return 0;
    mt_log_warn("job %s: %s", j->job_id, pv.cause);
    coord_job_diagnose(c, j, pv.diagnosis);
    coord_job_restart(c, j, pv.cause);
    return 1;
}

coord_report_ack coord_task_report(mt_coord *c, const char *worker_id, const coord_task_status *t)
{
    coord_job *j = coord_job_find(c, t->job_id);
    coord_sched_task *v = NULL;
    coord_sched_report out;
    coord_task *task;

    if (j != NULL && (v = mt_calloc(j->n_tasks + 1, sizeof(*v))) == NULL)
        return COORD_REPORT_UNSTORED; /* out of memory: the worker reports it again */
    for (size_t i = 0; j != NULL && i < j->n_tasks; i++)
        v[i] = (coord_sched_task){j->tasks[i].worker_id, j->tasks[i].state, j->tasks[i].step};
    coord_sched_task_report(j != NULL ? j->state : MT_JOBSTATE_CANCELLED,
                            j != NULL ? j->attempt : 0, v, j != NULL ? j->n_tasks : 0, worker_id,
                            t->attempt, t->state, t->step, t->error, &out);
    mt_free(v);
    if (out.verdict == COORD_SCHED_REPORT_CANCEL)
        return COORD_REPORT_CANCEL;
    if (!out.accepted)
        return COORD_REPORT_ACK;
    task = &j->tasks[out.task];
    if (t->step > task->step)
        task->step = t->step;
    if (t->step > j->step)
        coord_job_set_step(c, j, t->step);
    if (out.verdict == COORD_SCHED_REPORT_FAIL) {
        if (!out.failed || !job_peer_failure(c, j, worker_id, t->error))
            coord_job_move(c, j, MT_JOBSTATE_FAILED, out.reason);
        return COORD_REPORT_ACK;
    }
    if (out.verdict != COORD_SCHED_REPORT_RECORD)
        return COORD_REPORT_ACK;
    if (out.resume &&
        coord_job_move(c, j, MT_JOBSTATE_RUNNING,
                       "progress resumed: a task reported a new step or state") != MT_OK)
        return COORD_REPORT_ACK;
    if (out.state == COORD_TASK_SUCCEEDED && task->state != COORD_TASK_SUCCEEDED &&
        !out.succeeded) {
        /* others still run: the store must know it before the worker is told (it then forgets
         * the task, and a coordinator restarted now would wait for its report forever) */
        mt_err err = MT_ERR_INIT;
        if (mt_store_job_set_task_state(c->store, j->job_id, worker_id,
                                        coord_task_state_name(COORD_TASK_SUCCEEDED),
                                        &err) != MT_OK) {
            mt_log_warn("job %s: the task of %s succeeded but could not be stored (%s); the "
                        "report is not acknowledged",
                        j->job_id, worker_id, err.msg);
            return COORD_REPORT_UNSTORED;
        }
    }
    task->state = out.state;
    if (out.started && coord_job_move(c, j, MT_JOBSTATE_RUNNING, out.reason) != MT_OK)
        return COORD_REPORT_ACK;
    if (out.succeeded)
        coord_job_move(c, j, MT_JOBSTATE_SUCCEEDED, "all tasks succeeded");
    return COORD_REPORT_ACK;
}
