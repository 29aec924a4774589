/* SPDX-License-Identifier: MIT */
/*
 * schedpass.c — the scheduler pass and the reload of active jobs at open, part of the domain core
 * (its section of coord_int.h): the pass applies the scheduling core's decisions (sched.c:
 * coord_sched_plan_make, coord_sched_reload) to the job table, the store and the registry.
 * It uses no protobuf type, no nng call and no RPC (it includes coord_int.h alone) and calls no
 * adapter by name: the checkpoint check before a resume (ckpt.c) and the restart marker on the
 * metrics stream (metrics.c) go through the hooks coord.c installs (mt_coord.hooks).
 *
 * How it fits: coord.c runs the pass (coord_schedpass_run) after each drain of the RPC queue and
 * on the sweep timer after the sweep, whenever something set sched_dirty (a submit, a worker
 * registered or lost, a job moved, a checkpoint check done), and the reload once at open.
 * SubmitJob (jobs.c) asks it where an "init_from" job would start (coord_job_init_source).
 *
 * DESIGN. The registry and the active jobs are copied into the scheduling core's plain structs
 * (worker_views, job_view) and coord_sched_plan_make decides (sched.h has the rules: QUEUED and
 * RESTARTING jobs in priority then submission order, gang placement by mt_sched_place on the
 * healthy devices of alive workers that hold no other job, strict order with the exceptions it
 * lists). schedule_once applies the decisions in the core's order: a placement is the placement
 * rows and the SCHEDULED transition in ONE store transaction, before memory changes (so what a
 * worker is assigned survives kill -9); a wait stores its reason; a failure moves the job to
 * FAILED. A job whose checkpoint files have not been read back since its last placement makes
 * the core stop (VERIFY): the check is started off the loop (hooks.verify) and the core is asked
 * again; the job waits (VERIFYING, keeping its turn) until the check's answer sets sched_dirty.
 *
 * Coordinator restart: active jobs are reloaded with their placement, and the scheduling core's
 * reload rule (coord_sched_reload) decides: RUNNING/SCHEDULED jobs are RE-ATTACHED, to be kept
 * when their workers come back as the same processes (same instance id: a worker re-registers
 * after the coordinator's instance changed and keeps running its tasks); a worker the store
 * knew as lost sends its jobs to RESTARTING at once, and one that does not come back within the
 * heartbeat timeout, or comes back as a new process, later (sweep.c, workers.c).
 *
 * Threading: loop thread only.
 * Tests: tests/unit/test_coord_state.c (the pass and the reload driven directly, on a temp
 * store), test_coord_jobs.c (through the RPCs), tests/integration/test_jobs.sh,
 * test_coord_crash.sh, test_elastic.sh.
 */
#include "coordinator/coord_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"
#include "mesh/mt_mesh.h"
#include "sched/mt_sched.h"

/* Tasks = the distinct workers of the placement, in rank order of first appearance. */
static mt_code job_build_tasks(coord_job *j, coord_task_state init_state)
{
    j->tasks = mt_calloc(j->n_place ? j->n_place : 1, sizeof(*j->tasks));
    if (j->tasks == NULL)
        return MT_RESOURCE_EXHAUSTED;
    j->n_tasks = 0;
    for (size_t r = 0; r < j->n_place; r++) {
        if (coord_job_task(j, j->place[r].worker_id) != NULL)
            continue;
        coord_task *t = &j->tasks[j->n_tasks++];
        snprintf(t->worker_id, sizeof(t->worker_id), "%s", j->place[r].worker_id);
        t->state = init_state;
    }
    return MT_OK;
}

/* An elastic job runs its attempt on mesh batch=b (the summary says what is placed now). */
static void job_set_batch(coord_job *j, uint32_t b)
{
    j->sum.mesh_sizes[0] = (int)b;
    j->sum.n_devices = (int)b;
    snprintf(j->sum.mesh_text, sizeof(j->sum.mesh_text), "batch=%u", b);
}

/* ------------------------------------------------------------------ load */

/*
 * A job reloaded as placed, its tasks built: the scheduling core's reload rule
 * (coord_sched_reload) says whether its tasks are kept — RUNNING ones re-attached as they run,
 * SCHEDULED ones assigned again — or whether a worker of it is already gone, and it restarts now.
 * Codes: RESOURCE_EXHAUSTED.
 */
static mt_code reload_placed(mt_coord *c, coord_job *j, mt_err *err)
{
    coord_sched_worker *wv = mt_calloc(c->n_workers + 1, sizeof(*wv));
    coord_sched_task *tv = mt_calloc(j->n_tasks + 1, sizeof(*tv));
    coord_sched_reload_out out;

    if (tv == NULL || wv == NULL) {
        mt_free(tv);
        mt_free(wv);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "load jobs: out of memory");
    }
    for (size_t i = 0; i < c->n_workers; i++)
        coord_worker_view(&c->workers[i], &wv[i]);
    for (size_t t = 0; t < j->n_tasks; t++)
        tv[t] = (coord_sched_task){j->tasks[t].worker_id, j->tasks[t].state, j->tasks[t].step};
    coord_sched_reload(j->state, tv, j->n_tasks, wv, c->n_workers, &out);
    mt_free(tv);
    mt_free(wv);
    if (out.lost) {
        coord_job_restart(c, j, out.cause); /* may free j (FAILED at the limit) */
        return MT_OK;
    }
    for (size_t t = 0; t < j->n_tasks; t++)
        j->tasks[t].state = out.task_state;
    /* a task whose success was stored before the restart stays succeeded (its worker forgot it
     * once told: it never reports it again) */
    for (size_t r = 0; out.task_state == COORD_TASK_RUNNING && r < j->n_place; r++) {
        coord_task *task = coord_job_task(j, j->place[r].worker_id);
        coord_task_state st;
        if (task != NULL && coord_task_state_parse(j->place[r].task_state, &st) &&
            st == COORD_TASK_SUCCEEDED)
            task->state = st;
    }
    return MT_OK;
}

static mt_code load_one(mt_coord *c, const mt_store_job *rec, mt_err *err)
{
    mt_jobspec_opts legacy = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_store_job full;
    coord_job *j;
    mt_err verr = MT_ERR_INIT;
    mt_code rc;

    memset(&full, 0, sizeof(full));
    if ((rc = mt_store_job_get(c->store, rec->job_id, &full, err)) != MT_OK)
        return rc;
    j = mt_calloc(1, sizeof(*j));
    if (j == NULL) {
        mt_store_job_fini(&full);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "load jobs: out of memory");
    }
    legacy.base_dir = ".";
    snprintf(j->job_id, sizeof(j->job_id), "%s", rec->job_id);
    mt_jobstate_parse(rec->state, &j->state, NULL);
    j->priority = rec->priority;
    j->seq = strtoull(rec->job_id + 4, NULL, 10);
    j->restarts = rec->restarts;
    j->step = rec->step;
    snprintf(j->reason, sizeof(j->reason), "%s", rec->reason);
    snprintf(j->diagnosis, sizeof(j->diagnosis), "%s", rec->diagnosis);
    /* structure only, as at submit; "." keeps a relative path stored before the paths rule
     * (the worker reads it against its working directory, as it did then) */
    rc = mt_jobspec_validate_structure(full.spec_json, strlen(full.spec_json), &legacy, &j->sum,
                                       &verr);
    mt_store_job_fini(&full);
    if ((rc = coord_job_add(c, j)) != MT_OK) {
        coord_job_free(j);
        return mt_err_set(err, rc, "load jobs: out of memory");
    }
    j->placed_devices = j->sum.n_devices; /* a reloaded RESTARTING job ran on the spec's mesh
                                             or, if elastic, its size is unknown here */
    if (verr.code != MT_OK) {
        /* the spec was valid at submit (a build with other rules may have stored it) */
        char reason[300];
        snprintf(reason, sizeof(reason), "spec invalid after coordinator restart: %s", verr.msg);
        coord_job_move(c, j, MT_JOBSTATE_FAILED, reason);
        return MT_OK;
    }
    if (coord_jobstate_placed(j->state)) {
        rc = mt_store_job_placement(c->store, j->job_id, &j->place, &j->n_place, err);
        if (rc != MT_OK)
            return rc;
        if (j->sum.elastic_max_batch > 0 && j->n_place > 0)
            job_set_batch(j, (uint32_t)j->n_place); /* an elastic restart resized it */
        j->placed_devices = j->sum.n_devices;
        j->attempt = j->restarts + 1;
        /* SCHEDULED: the assignment is sent again and must name the same resume checkpoint. No
         * newer one can exist yet (training needs every task of the attempt running). */
        if (j->state == MT_JOBSTATE_SCHEDULED && j->restarts > 0) {
            mt_store_checkpoint ck;
            if (mt_store_checkpoint_latest(c->store, j->job_id, &ck, NULL) == MT_OK)
                j->resume_step = ck.step;
        }
        if (job_build_tasks(j, COORD_TASK_ASSIGNED) != MT_OK)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "load jobs: out of memory");
        return reload_placed(c, j, err);
    }
    return MT_OK;
}

/* The mesh summary of a job stored before schema 8 (mt_store_summarise_fn): its spec's mesh
 * ("batch=1", 1 device without one). Runs once per old row, at the first open after the
 * migration; later opens find every row summarised and parse nothing. */
static void summarise_old(void *arg, const char *spec_json, char *text, size_t cap,
                          uint32_t *devices)
{
    cJSON *root = cJSON_Parse(spec_json);
    mt_mesh *m = NULL;
    const cJSON *mj = root ? cJSON_GetObjectItemCaseSensitive(root, "mesh") : NULL;

    (void)arg;
    snprintf(text, cap, "batch=1");
    *devices = 1;
    if (mj != NULL && mt_mesh_from_json(mj, "mesh", NULL, 0, &m, NULL) == MT_OK) {
        mt_mesh_format(m, text, cap);
        *devices = (uint32_t)mt_mesh_num_devices(m);
    }
    mt_mesh_free(m);
    cJSON_Delete(root);
}

mt_code coord_schedpass_reload(mt_coord *c, mt_err *err)
{
    mt_store_job *list = NULL;
    size_t n = 0, counts[8], filled = 0;
    mt_code rc;

    if ((rc = mt_store_job_summarise_old(c->store, summarise_old, NULL, &filled, err)) != MT_OK)
        return rc;
    if (filled > 0)
        mt_log_info("%zu jobs of an older schema given their mesh summary", filled);

    /* the per-state counts listings report as their total; kept up to date from here on */
    if ((rc = mt_store_job_counts(c->store, counts, err)) != MT_OK)
        return rc;
    coord_stats_jobs_set(c->stats, counts);
    rc = mt_store_job_list(c->store, "QUEUED,SCHEDULED,RUNNING,RESTARTING,STALLED", &list, &n, err);
    if (rc != MT_OK)
        return rc;
    for (size_t i = 0; i < n && rc == MT_OK; i++)
        rc = load_one(c, &list[i], err);
    mt_store_job_list_free(list, n);
    if (rc != MT_OK)
        return rc;
    c->sched_dirty = 1;
    mt_log_info("%zu active jobs reloaded", c->n_jobs);
    return MT_OK;
}

/* ------------------------------------------------------------------ scheduling */

/* The job that holds worker_id: a placed job with a rank there (a worker's data plane serves
 * one world, mt_coll.h, docs/cli.md). NULL: none. */
static const char *worker_holder(mt_coord *c, const char *worker_id)
{
    for (size_t i = 0; i < c->n_jobs; i++) {
        const coord_job *j = c->jobs[i];
        if (!coord_jobstate_placed(j->state))
            continue;
        for (size_t r = 0; r < j->n_place; r++)
            if (strcmp(j->place[r].worker_id, worker_id) == 0)
                return j->job_id;
    }
    return NULL;
}

/* The registry as the scheduling core sees it: (*out)[i] is c->workers[i], its devices the
 * healthy ones (*devs, one owned array). Both mt_free'd by the caller. */
static mt_code worker_views(mt_coord *c, coord_sched_worker **out, uint32_t **devs)
{
    size_t total = 0, k = 0;

    for (size_t i = 0; i < c->n_workers; i++)
        total += c->workers[i].rec.n_devices;
    *out = mt_calloc(c->n_workers + 1, sizeof(**out));
    *devs = mt_calloc(total + 1, sizeof(**devs));
    if (*out == NULL || *devs == NULL)
        return MT_RESOURCE_EXHAUSTED;
    for (size_t i = 0; i < c->n_workers; i++) {
        const mt_store_worker *w = &c->workers[i].rec;
        coord_sched_worker *v = &(*out)[i];
        coord_worker_view(&c->workers[i], v);
        v->devices = *devs + k;
        for (size_t d = 0; d < w->n_devices; d++)
            if (strcmp(w->devices[d].health, "ok") == 0)
                (*devs)[k++] = w->devices[d].index;
        v->n_devices = (size_t)(*devs + k - v->devices);
        if (v->state == COORD_WORKER_ALIVE)
            v->held_by = worker_holder(c, w->worker_id);
    }
    return MT_OK;
}

static int job_has_checkpoint(mt_coord *c, const coord_job *j)
{
    mt_store_checkpoint ck;

    return mt_store_checkpoint_latest(c->store, j->job_id, &ck, NULL) == MT_OK;
}

/* Loop thread: the files of job_id's checkpoints were checked (hooks.verify). */
static void ckpt_verified(mt_coord *c, const char *job_id, uint64_t step, const char *skipped)
{
    coord_job *j = coord_job_find(c, job_id);

    if (j == NULL || j->ckpt_check != COORD_CKPT_VERIFYING)
        return;
    j->ckpt_check = COORD_CKPT_VERIFIED;
    j->ckpt_step = step;
    snprintf(j->ckpt_note, sizeof(j->ckpt_note), "%s", skipped);
    if (skipped[0] != '\0')
        mt_log_warn("job %s: %s; resuming from %s", job_id, skipped,
                    step ? "an older checkpoint" : "the start");
    c->sched_dirty = 1;
}

mt_code coord_job_init_source(mt_coord *c, const mt_jobspec_summary *sum, uint64_t *step,
                              mt_err *err)
{
    mt_store_checkpoint ck;
    mt_code rc;

    if (sum->init_step == 0) {
        rc = mt_store_checkpoint_latest(c->store, sum->init_job, &ck, NULL);
        if (rc != MT_OK)
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "init_from: job %s has no complete checkpoint", sum->init_job);
    } else {
        rc = mt_store_checkpoint_get(c->store, sum->init_job, sum->init_step, &ck, NULL);
        if (rc != MT_OK || !ck.complete)
            return mt_err_set(err, rc != MT_OK ? MT_NOT_FOUND : MT_FAILED_PRECONDITION,
                              "init_from: job %s has no %scheckpoint at step %u", sum->init_job,
                              rc != MT_OK ? "" : "complete ", sum->init_step);
    }
    *step = ck.step;
    return MT_OK;
}

/* The job j as the scheduling core sees it; init_err: where a failing init_from check writes
 * (borrowed by the view). */
static void job_view(mt_coord *c, coord_job *j, coord_sched_job *v, mt_err *init_err)
{
    static const coord_sched_ckpt ckpt[] = {
        [COORD_CKPT_UNCHECKED] = COORD_SCHED_CKPT_UNCHECKED,
        [COORD_CKPT_VERIFYING] = COORD_SCHED_CKPT_VERIFYING,
        [COORD_CKPT_VERIFIED] = COORD_SCHED_CKPT_READY,
        [COORD_CKPT_NONE] = COORD_SCHED_CKPT_READY,
    };
    uint64_t st;

    memset(v, 0, sizeof(*v));
    v->id = j->job_id;
    v->state = j->state;
    v->priority = j->priority;
    v->seq = j->seq;
    v->devices = (size_t)j->sum.n_devices;
    v->inner = (size_t)j->sum.mesh_sizes[j->sum.mesh_ndims > 0 ? j->sum.mesh_ndims - 1 : 0];
    v->elastic_min = j->sum.elastic_min_batch;
    v->elastic_max = j->sum.elastic_max_batch;
    v->batch_size = j->sum.batch_size;
    v->placed_devices = j->placed_devices > 0 ? (size_t)j->placed_devices : 0;
    v->restarts = j->restarts;
    v->max_restarts = j->sum.max_restarts;
    v->ckpt = ckpt[j->ckpt_check];
    v->link_a = j->link_a;
    v->link_b = j->link_b;
    v->backoff_ms = j->backoff_ms;
    v->backoff_until_ms = j->backoff_until_mono_ms;
    v->frozen = j->frozen;
    if ((j->state == MT_JOBSTATE_QUEUED || j->state == MT_JOBSTATE_RESTARTING) &&
        j->sum.init_job[0] != '\0' && !job_has_checkpoint(c, j) &&
        coord_job_init_source(c, &j->sum, &st, init_err) != MT_OK)
        v->init_error = init_err->msg;
}

/*
 * COORD_SCHED_VERIFY: a job resumes only from a checkpoint whose file was read back and matched
 * its record, so the first time it is up for placement its checkpoints are checked on the pool
 * (newest first, ckpt.c through hooks.verify) and it waits for that (VERIFYING). With no
 * checkpoint, or when the check cannot be queued (logged: it resumes from the latest without the
 * check), it may be placed in this pass (COORD_CKPT_NONE, reset at the end of the pass if it was
 * not).
 */
static void ckpt_check(mt_coord *c, coord_job *j)
{
    mt_store_checkpoint ck;
    mt_err err = MT_ERR_INIT;
    char reason[96];
    mt_code rc;

    if (mt_store_checkpoint_latest(c->store, j->job_id, &ck, NULL) != MT_OK) {
        j->ckpt_check = COORD_CKPT_NONE; /* nothing to resume from */
        return;
    }
    /* the check runs in the checkpoint adapter (ckpt.c), reached through the core's hook */
    rc = c->hooks.verify != NULL
             ? c->hooks.verify(c, j->job_id, ckpt_verified, &err)
             : mt_err_set(&err, MT_UNIMPLEMENTED, "no checkpoint check installed");
    if (rc != MT_OK) {
        mt_log_error("job %s: %s; resuming without the check", j->job_id, err.msg);
        j->ckpt_check = COORD_CKPT_NONE;
        return;
    }
    j->ckpt_check = COORD_CKPT_VERIFYING;
    snprintf(reason, sizeof(reason), "checking checkpoint step %llu before resuming",
             (unsigned long long)ck.step);
    coord_job_note(c, j, reason);
}

/* Place j on slots: placement + SCHEDULED in one transaction. */
static mt_code job_start(mt_coord *c, coord_job *j, const mt_sched_slot *slot, const char *note)
{
    mt_store_placement *p = mt_calloc((size_t)j->sum.n_devices, sizeof(*p));
    mt_store_checkpoint ck;
    mt_err err = MT_ERR_INIT;
    char reason[256], from[48] = "";
    mt_code rc;
    size_t nworkers = 0;

    if (p == NULL)
        return MT_RESOURCE_EXHAUSTED;
    for (int r = 0; r < j->sum.n_devices; r++) {
        const mt_store_worker *w = &c->workers[slot[r].worker].rec; /* views are 1:1 */
        int rem = r;
        p[r].device = (uint32_t)r;
        snprintf(p[r].worker_id, sizeof(p[r].worker_id), "%s", w->worker_id);
        p[r].local_index = slot[r].local_index;
        p[r].n_coords = (uint32_t)j->sum.mesh_ndims;
        for (int d = j->sum.mesh_ndims - 1; d >= 0; d--) {
            p[r].coords[d] = (uint32_t)(rem % j->sum.mesh_sizes[d]);
            rem /= j->sum.mesh_sizes[d];
        }
    }
    j->resume_step = 0;
    j->resume_job[0] = '\0';
    if (j->ckpt_check == COORD_CKPT_VERIFIED) /* the newest whose file verified (ckpt_check) */
        j->resume_step = j->ckpt_step;
    else if (mt_store_checkpoint_latest(c->store, j->job_id, &ck, NULL) == MT_OK)
        j->resume_step = ck.step;
    if (j->resume_step == 0 && j->sum.init_job[0] != '\0' &&
        coord_job_init_source(c, &j->sum, &j->resume_step, NULL) == MT_OK)
        snprintf(j->resume_job, sizeof(j->resume_job), "%s", j->sum.init_job);
    j->place = p;
    j->n_place = (size_t)j->sum.n_devices;
    if ((rc = job_build_tasks(j, COORD_TASK_ASSIGNED)) != MT_OK)
        goto fail;
    nworkers = j->n_tasks;
    /* the step it resumes from is where the restart markers go (core/watch/restart.c reads it) */
    if (j->resume_step > 0 || j->restarts > 0)
        snprintf(from, sizeof(from), " %s step %llu", j->resume_step ? "at" : "from",
                 (unsigned long long)j->resume_step);
    snprintf(reason, sizeof(reason), "placed on %zu worker%s (attempt %u%s%s%s%s%s)", nworkers,
             nworkers == 1 ? "" : "s", j->restarts + 1,
             j->resume_job[0] ? ", starting from the checkpoint of "
                              : (j->resume_step ? ", resuming from a checkpoint"
                                                : (j->restarts ? ", starting over" : "")),
             j->resume_job, j->resume_job[0] ? " (init_from)" : "", from, note);
    if (j->ckpt_note[0] != '\0') { /* newer checkpoints whose files did not verify */
        size_t len = strlen(reason);
        snprintf(reason + len, sizeof(reason) - len, "; %s", j->ckpt_note);
    }
    if ((rc = mt_store_tx_begin(c->store, &err)) != MT_OK)
        goto fail;
    rc = mt_store_job_set_placement(c->store, j->job_id, p, j->n_place, &err);
    if (rc == MT_OK)
        rc = mt_store_job_transition(c->store, j->job_id, mt_jobstate_name(j->state), "SCHEDULED",
                                     reason, mt_clock_wall_ms(), &err);
    if (rc == MT_OK)
        rc = mt_store_tx_commit(c->store, &err);
    else
        mt_store_tx_rollback(c->store, NULL);
    if (rc != MT_OK)
        goto fail;
    mt_log_info("job %s: %s -> SCHEDULED (%s)", j->job_id, mt_jobstate_name(j->state), reason);
    coord_stats_job_moved(c->stats, (int)j->state, MT_JOBSTATE_SCHEDULED);
    if (j->restarts > 0 && c->hooks.moved != NULL) /* watchers print the restart marker
                                                      (core/watch) */
        c->hooks.moved(c, j->job_id, "SCHEDULED", reason);
    j->state = MT_JOBSTATE_SCHEDULED;
    j->ckpt_check = COORD_CKPT_UNCHECKED; /* checked again before the next restart */
    j->ckpt_note[0] = '\0';
    j->attempt = j->restarts + 1;
    j->placed_devices = j->sum.n_devices;
    snprintf(j->reason, sizeof(j->reason), "%s", reason);
    return MT_OK;
fail:
    mt_log_error("job %s: start: %s", j->job_id, err.msg);
    coord_job_release(j);
    return rc;
}

/*
 * One pass of the scheduling core (sched.c: coord_sched_plan_make) over the registry and the
 * active jobs, applied in its order: placements (placement + SCHEDULED, one transaction), waits
 * (the reason), failures. A VERIFY ends the core's pass: the checkpoint check is started (or
 * found needless) and the core is asked again. Returns 1 when it must be asked again.
 */
static int schedule_once(mt_coord *c)
{
    coord_sched_worker *wv = NULL;
    uint32_t *devs = NULL;
    coord_sched_job *jv = NULL;
    coord_job **jobs = NULL;
    mt_err *ierr = NULL;
    coord_sched_plan plan;
    size_t nj = c->n_jobs;
    int again = 0;

    memset(&plan, 0, sizeof(plan));
    jv = mt_calloc(nj + 1, sizeof(*jv));
    jobs = mt_calloc(nj + 1, sizeof(*jobs)); /* the decisions' jobs (a FAIL frees one) */
    ierr = mt_calloc(nj + 1, sizeof(*ierr));
    if (jv == NULL || jobs == NULL || ierr == NULL || worker_views(c, &wv, &devs) != MT_OK)
        goto oom;
    for (size_t i = 0; i < nj; i++) {
        jobs[i] = c->jobs[i];
        job_view(c, jobs[i], &jv[i], &ierr[i]);
    }
    if (coord_sched_plan_make(wv, c->n_workers, jv, nj, mt_clock_mono_ms(),
                              COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms), &plan) != MT_OK)
        goto oom;
    if (plan.again)
        c->sched_dirty = 1; /* a back-off or a silent worker: the sweep looks again */
    for (size_t k = 0; k < plan.n; k++) {
        const coord_sched_decision *d = &plan.d[k];
        coord_job *j = jobs[d->job];
        if (d->batch > 0)
            job_set_batch(j, d->batch);
        if (d->verdict == COORD_SCHED_FAIL) {
            coord_job_move(c, j, MT_JOBSTATE_FAILED, d->reason); /* frees j */
        } else if (d->verdict == COORD_SCHED_WAIT) {
            coord_job_note(c, j, d->reason);
        } else if (d->verdict == COORD_SCHED_VERIFY) {
            ckpt_check(c, j);
            again = 1;
        } else if (d->verdict == COORD_SCHED_PLACE &&
                   job_start(c, j, d->slots, d->reason) != MT_OK) {
            c->sched_dirty = 1; /* the store failed (logged): the rest of the pass assumed j
                                   placed; try again on the sweep */
            break;
        }
    }
    goto out;
oom:
    c->sched_dirty = 1; /* out of memory: try again on the sweep */
out:
    coord_sched_plan_fini(&plan);
    mt_free(wv);
    mt_free(devs);
    mt_free(jv);
    mt_free(jobs);
    mt_free(ierr);
    return again;
}

void coord_schedpass_run(mt_coord *c)
{
    if (!c->sched_dirty)
        return;
    c->sched_dirty = 0;
    while (schedule_once(c)) /* each round settles one job's checkpoint question */
        ;
    for (size_t i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->ckpt_check == COORD_CKPT_NONE) /* asked again next time */
            c->jobs[i]->ckpt_check = COORD_CKPT_UNCHECKED;
}
