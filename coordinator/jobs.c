/* SPDX-License-Identifier: MIT */
/*
 * jobs.c — the coordinator's job calls, an RPC adapter: SubmitJob, GetJob, ListJobs, CancelJob
 * and UpdateTask. Loop thread only (coord_int.h), except what runs on the pool (below). The job
 * table, the typed states, the transitions, the restart rule, what a worker's report of its
 * task does to the job (coord_task_report, which UpdateTask and the heartbeat share), the
 * scheduler pass and the reload of active jobs at open (schedpass.c) are the domain core's;
 * whether a job's collective deadline suits the heartbeat window is the scheduling core's
 * (sched.c). This file turns the calls into those functions' typed inputs, calls them and
 * replies; it calls no other adapter.
 *
 * SubmitJob validates on the thread pool (submit_validate) and stores on the loop; GetJob reads
 * on the pool with a read-only connection (bulk.c). Everything else here runs on the loop.
 *
 * DESIGN. The store is the truth; the loop keeps a table of the active (non-final) jobs for the
 * scheduler. A submit is the job row and its first event in one transaction, inserted before the
 * reply and after a look-up of its request id (a retry gets the same job); a cancel goes through
 * coord_job_move (state.c): one store transaction BEFORE the in-memory change and before any
 * reply, so what a client was told survives kill -9. Listings read one page through the store's
 * index and take their total from the per-state counts the loop keeps (no call scans the table).
 */
#include "coordinator/coord_rpc.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

#define MAX_JOB_NAME 127

/* ------------------------------------------------------------------ task reports */

void coord_handle_update_task(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__UpdateTaskRequest *r =
        (const Meshtrain__UpdateTaskRequest *)mt_rpc_call_request(call);
    Meshtrain__UpdateTaskReply rep = MESHTRAIN__UPDATE_TASK_REPLY__INIT;
    coord_worker *w = coord_worker_find(c, r->worker_id);
    coord_task_status st;
    coord_job *j;
    char state[16] = "";

    if (w == NULL || strcmp(w->rec.instance_id, r->instance_id) != 0) {
        mt_rpc_call_reply(call, MT_FAILED_PRECONDITION, "unknown worker instance: register again",
                          NULL);
        return;
    }
    if (r->task == NULL || r->task->job_id[0] == '\0') {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT, "task: a job_id is required", NULL);
        return;
    }
    st = coord_task_status_of(r->task);
    switch (coord_task_report(c, r->worker_id, &st)) {
    case COORD_REPORT_CANCEL:
        mt_rpc_call_reply(call, MT_FAILED_PRECONDITION,
                          "the coordinator does not run this task any more: stop it", NULL);
        return;
    case COORD_REPORT_UNSTORED:
        mt_rpc_call_reply(call, MT_UNAVAILABLE,
                          "the coordinator could not store the task's state: report it again",
                          NULL);
        return;
    case COORD_REPORT_ACK:
        break;
    }
    j = coord_job_find(c, r->task->job_id);
    if (j != NULL) {
        snprintf(state, sizeof(state), "%s", mt_jobstate_name(j->state));
    } else {
        mt_store_job rec;
        if (mt_store_job_get(c->store, r->task->job_id, &rec, NULL) == MT_OK)
            snprintf(state, sizeof(state), "%s", rec.state);
        mt_store_job_fini(&rec);
    }
    rep.job_state = state;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
}

/* ------------------------------------------------------------------ client calls */

#define MAX_REQUEST_ID 64

/* A submit's request id is "" (none) or 1..64 bytes of [A-Za-z0-9._:-]. */
static bool request_id_ok(const char *id)
{
    size_t n = strlen(id);

    if (n > MAX_REQUEST_ID)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)id[i]) && strchr("._:-", id[i]) == NULL)
            return false;
    return true;
}

/* A submit that carries a request id the store already has (a retry: the client resent it
 * after a lost reply or a coordinator crash) is answered with the job the first attempt
 * created, or ALREADY_EXISTS when it came with another spec. true when it replied. Loop thread:
 * one indexed read, and it runs before each insert, so two concurrent attempts make one job. */
static bool submit_replay(mt_coord *c, mt_rpc_call *call, const Meshtrain__SubmitJobRequest *r)
{
    Meshtrain__SubmitJobReply rep = MESHTRAIN__SUBMIT_JOB_REPLY__INIT;
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (r->request_id[0] == '\0')
        return false;
    rc = mt_store_job_by_request(c->store, r->request_id, &rec, &err);
    if (rc == MT_NOT_FOUND)
        return false;
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return true;
    }
    if (strcmp(rec.spec_json, r->spec_json) != 0) {
        mt_err_set(&err, MT_ALREADY_EXISTS,
                   "request id %s was already used by job %s with another spec", r->request_id,
                   rec.job_id);
        mt_rpc_call_reply(call, MT_ALREADY_EXISTS, err.msg, NULL);
    } else {
        mt_log_info("job %s: submit with request id %s repeated; answering the same job",
                    rec.job_id, r->request_id);
        rep.job_id = rec.job_id;
        mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
    }
    mt_store_job_fini(&rec);
    return true;
}

/* SubmitJob validates the spec's structure on the thread pool (it builds the model to check the
 * layouts against real parameter shapes when the spec fixes the input shape, which may take a
 * while) and stores on the loop thread. The coordinator never opens a job's data files: the
 * workers check them (mt_jobspec_check) before training and fail the task with the same
 * messages `plan` gives. */
typedef struct submit_req {
    uv_work_t work;
    mt_coord *c;
    mt_rpc_call *call;
    coord_job *j;
    mt_code rc;
    mt_err err;
} submit_req;

static void submit_validate(uv_work_t *w)
{
    submit_req *q = w->data;
    const Meshtrain__SubmitJobRequest *r =
        (const Meshtrain__SubmitJobRequest *)mt_rpc_call_request(q->call);

    q->rc = mt_jobspec_validate_structure(r->spec_json, strlen(r->spec_json), NULL, &q->j->sum,
                                          &q->err);
}

/* Loop thread: store the validated job (QUEUED + its first event, one transaction), reply. */
static void submit_store(uv_work_t *w, int status)
{
    submit_req *q = w->data;
    mt_coord *c = q->c;
    const Meshtrain__SubmitJobRequest *r =
        (const Meshtrain__SubmitJobRequest *)mt_rpc_call_request(q->call);
    Meshtrain__SubmitJobReply rep = MESHTRAIN__SUBMIT_JOB_REPLY__INIT;
    coord_job *j = q->j;
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (status != 0 || q->rc != MT_OK) {
        mt_rpc_call_reply(q->call, status != 0 ? MT_UNAVAILABLE : q->rc,
                          status != 0 ? "coordinator shutting down" : q->err.msg, NULL);
        goto out;
    }
    if (submit_replay(c, q->call, r))
        goto out;
    if ((rc = coord_sched_deadline_check(j->sum.coll_deadline_ms,
                                         COORD_STALL_FRESH_MS(c->opts.heartbeat_interval_ms),
                                         err.msg, sizeof(err.msg))) != MT_OK) {
        mt_rpc_call_reply(q->call, rc, err.msg, NULL); /* the scheduling core's rule */
        goto out;
    }
    if (j->sum.init_job[0] != '\0') {
        uint64_t st;
        if ((rc = coord_job_init_source(c, &j->sum, &st, &err)) != MT_OK) {
            mt_rpc_call_reply(q->call, rc, err.msg, NULL);
            goto out;
        }
    }
    memset(&rec, 0, sizeof(rec));
    snprintf(rec.name, sizeof(rec.name), "%s", r->name[0] ? r->name : j->sum.name);
    rec.spec_json = r->spec_json;
    rec.priority = r->priority;
    rec.total_steps = j->sum.total_steps;
    snprintf(rec.request_id, sizeof(rec.request_id), "%s", r->request_id);
    snprintf(rec.mesh, sizeof(rec.mesh), "%s", j->sum.mesh_text); /* listings never re-read the
                                                                    spec (issue 17) */
    rec.devices = (uint32_t)j->sum.n_devices;
    if ((rc = coord_job_add(c, j)) != MT_OK) {
        mt_rpc_call_reply(q->call, rc, "coordinator out of memory", NULL);
        goto out;
    }
    rc = mt_store_job_insert(c->store, &rec, mt_clock_wall_ms(), &err);
    if (rc != MT_OK) {
        c->n_jobs--; /* j is the last entry: coord_job_add just appended it */
        mt_rpc_call_reply(q->call, rc, err.msg, NULL);
        goto out;
    }
    snprintf(j->job_id, sizeof(j->job_id), "%s", rec.job_id);
    j->state = MT_JOBSTATE_QUEUED;
    coord_stats_job_moved(c->stats, -1, MT_JOBSTATE_QUEUED);
    j->priority = r->priority;
    j->seq = strtoull(rec.job_id + 4, NULL, 10);
    snprintf(j->reason, sizeof(j->reason), "submitted");
    c->sched_dirty = 1;
    mt_log_info("job %s submitted: %s, %d devices (%s), priority %d", j->job_id, rec.name,
                j->sum.n_devices, j->sum.mesh_text, j->priority);
    rep.job_id = j->job_id;
    mt_rpc_call_reply(q->call, MT_OK, NULL, &rep.base);
    j = NULL; /* the table owns it */
out:
    coord_job_free(j);
    mt_free(q);
}

void coord_handle_submit_job(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__SubmitJobRequest *r =
        (const Meshtrain__SubmitJobRequest *)mt_rpc_call_request(call);
    submit_req *q;

    if (strlen(r->name) > MAX_JOB_NAME) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT, "name: at most 127 bytes", NULL);
        return;
    }
    if (!request_id_ok(r->request_id)) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT,
                          "request_id: at most 64 bytes of letters, digits and ._:-", NULL);
        return;
    }
    if (submit_replay(c, call, r))
        return;
    q = mt_calloc(1, sizeof(*q));
    if (q == NULL || (q->j = mt_calloc(1, sizeof(*q->j))) == NULL) {
        mt_free(q);
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        return;
    }
    q->c = c;
    q->call = call;
    q->work.data = q;
    if (uv_queue_work(&c->loop, &q->work, submit_validate, submit_store) != 0) {
        coord_job_free(q->j);
        mt_free(q);
        mt_rpc_call_reply(call, MT_INTERNAL, "cannot queue the validation", NULL);
    }
}

/* Fill s (strings borrowed from rec) from a store row and the active job, if any (c may be
 * NULL off the loop thread: no active-job fields then). */
static void fill_summary(mt_coord *c, Meshtrain__JobSummary *s, mt_store_job *rec)
{
    coord_job *j = c != NULL ? coord_job_find(c, rec->job_id) : NULL;

    meshtrain__job_summary__init(s);
    s->job_id = rec->job_id;
    s->name = rec->name;
    s->state = rec->state;
    s->priority = rec->priority;
    s->submitted_at_ms = rec->submitted_at_ms;
    s->step = rec->step;
    s->total_steps = rec->total_steps;
    s->reason = rec->reason;
    s->diagnosis = rec->diagnosis;
    s->restarts = rec->restarts;
    s->devices = rec->devices; /* the spec's mesh, stored at submit */
    s->mesh = rec->mesh;
    if (j != NULL) { /* an elastic job's current attempt may run on another batch size */
        s->devices = (uint32_t)j->sum.n_devices;
        s->mesh = j->sum.mesh_text;
    }
}

static void get_job_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__GetJobRequest *r = (const Meshtrain__GetJobRequest *)mt_rpc_call_request(call);
    Meshtrain__GetJobReply rep = MESHTRAIN__GET_JOB_REPLY__INIT;
    Meshtrain__JobSummary sum;
    mt_store_job rec;
    mt_store_job_event *ev = NULL;
    mt_store_placement *pl = NULL;
    mt_store_metric *mx = NULL;
    mt_store_checkpoint *ck = NULL;
    size_t nev = 0, npl = 0, nmx = 0, nck = 0;
    Meshtrain__JobEvent *pev = NULL, **ppev = NULL;
    Meshtrain__Placement *ppl = NULL, **pppl = NULL;
    Meshtrain__MetricPoint *pmx = NULL, **ppmx = NULL;
    Meshtrain__CheckpointInfo *pck = NULL, **ppck = NULL;
    char mesh[256];
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    memset(&rec, 0, sizeof(rec));
    rc = mt_store_job_get(ro, r->job_id, &rec, &err);
    if (rc == MT_OK)
        rc = mt_store_job_events(ro, r->job_id, &ev, &nev, &err);
    if (rc == MT_OK)
        rc = mt_store_job_placement(ro, r->job_id, &pl, &npl, &err);
    if (rc == MT_OK)
        rc = mt_store_metrics_latest(ro, r->job_id, &mx, &nmx, &err);
    if (rc == MT_OK)
        rc = mt_store_checkpoint_list(ro, r->job_id, &ck, &nck, &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        goto out;
    }
    pev = mt_calloc(nev + 1, sizeof(*pev));
    ppev = mt_calloc(nev + 1, sizeof(*ppev));
    ppl = mt_calloc(npl + 1, sizeof(*ppl));
    pppl = mt_calloc(npl + 1, sizeof(*pppl));
    pck = mt_calloc(nck + 1, sizeof(*pck));
    ppck = mt_calloc(nck + 1, sizeof(*ppck));
    if (!pev || !ppev || !ppl || !pppl || !pck || !ppck ||
        coord_metric_points(mx, nmx, &pmx, &ppmx) != MT_OK) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    fill_summary(NULL, &sum, &rec);
    if (npl > 0 && npl != sum.devices && strncmp(rec.mesh, "batch=", 6) == 0 &&
        strchr(rec.mesh, ',') == NULL) {
        /* an elastic job placed on another batch size than its spec says */
        snprintf(mesh, sizeof(mesh), "batch=%zu", npl);
        sum.devices = (uint32_t)npl;
        sum.mesh = mesh;
    }
    for (size_t i = 0; i < nev; i++) {
        meshtrain__job_event__init(&pev[i]);
        pev[i].time_ms = ev[i].time_ms;
        pev[i].state = ev[i].state;
        pev[i].reason = ev[i].reason;
        ppev[i] = &pev[i];
    }
    for (size_t i = 0; i < npl; i++) {
        meshtrain__placement__init(&ppl[i]);
        ppl[i].device = pl[i].device;
        ppl[i].worker_id = pl[i].worker_id;
        ppl[i].local_index = pl[i].local_index;
        ppl[i].coords = pl[i].coords;
        ppl[i].n_coords = pl[i].n_coords;
        pppl[i] = &ppl[i];
    }
    for (size_t i = 0; i < nck; i++) {
        meshtrain__checkpoint_info__init(&pck[i]);
        pck[i].step = ck[i].step;
        pck[i].location = ck[i].location;
        pck[i].size_bytes = ck[i].size_bytes;
        pck[i].checksum = ck[i].checksum;
        pck[i].complete = ck[i].complete;
        pck[i].time_ms = ck[i].time_ms;
        ppck[i] = &pck[i];
    }
    rep.job = &sum;
    rep.spec_json = rec.spec_json;
    rep.events = ppev;
    rep.n_events = nev;
    rep.placement = pppl;
    rep.n_placement = npl;
    rep.latest_metrics = ppmx;
    rep.n_latest_metrics = nmx;
    rep.checkpoints = ppck;
    rep.n_checkpoints = nck;
    rep.error = rec.error;
    rep.metrics_address = (char *)c->metrics_url;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(pev);
    mt_free(ppev);
    mt_free(ppl);
    mt_free(pppl);
    mt_free(pmx);
    mt_free(ppmx);
    mt_free(pck);
    mt_free(ppck);
    mt_store_job_events_free(ev);
    mt_store_placement_free(pl);
    mt_store_metrics_free(mx);
    mt_store_checkpoints_free(ck);
    mt_store_job_fini(&rec);
}

void coord_handle_get_job(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, get_job_ro);
}

#define LIST_DEFAULT 100
#define LIST_MAX     1000

/* ListJobs: one page in the scheduler's order, read on the loop thread through the
 * jobs_by_order index (the page's rows and no more); the total comes from the per-state counts
 * the loop keeps (coord_stats_jobs_in), so no call scans the table. */
void coord_handle_list_jobs(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__ListJobsRequest *r =
        (const Meshtrain__ListJobsRequest *)mt_rpc_call_request(call);
    Meshtrain__ListJobsReply rep = MESHTRAIN__LIST_JOBS_REPLY__INIT;
    Meshtrain__JobSummary *s = NULL, **ps = NULL;
    mt_store_job *list = NULL;
    mt_store_job_cursor after, next;
    size_t n = 0, limit = r->limit == 0 ? LIST_DEFAULT : r->limit;
    char cursor[32] = "";
    unsigned mask;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (limit > LIST_MAX) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT, "limit: at most 1000 jobs per page", NULL);
        return;
    }
    if ((rc = mt_jobstate_parse_list(r->state, &mask, &err)) != MT_OK ||
        (r->cursor[0] != '\0' &&
         (rc = mt_store_job_cursor_parse(r->cursor, &after, &err)) != MT_OK)) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    /* one more than the page: whether a next page exists */
    rc = mt_store_job_page(c->store, r->state, r->cursor[0] ? &after : NULL, limit + 1, &list, &n,
                           &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    if (n > limit) {
        n = limit;
        next = mt_store_job_cursor_of(&list[n - 1]);
        mt_store_job_cursor_format(&next, cursor, sizeof(cursor));
    }
    s = mt_calloc(n + 1, sizeof(*s));
    ps = mt_calloc(n + 1, sizeof(*ps));
    if (s == NULL || ps == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        fill_summary(c, &s[i], &list[i]);
        ps[i] = &s[i];
    }
    rep.jobs = ps;
    rep.n_jobs = n;
    rep.next_cursor = cursor;
    rep.total = coord_stats_jobs_in(c->stats, mask);
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(s);
    mt_free(ps);
    mt_store_job_list_free(list, n + (cursor[0] != '\0'));
}

void coord_handle_cancel_job(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__CancelJobRequest *r =
        (const Meshtrain__CancelJobRequest *)mt_rpc_call_request(call);
    Meshtrain__CancelJobReply rep = MESHTRAIN__CANCEL_JOB_REPLY__INIT;
    coord_job *j = coord_job_find(c, r->job_id);
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (j != NULL) {
        rc = coord_job_move(c, j, MT_JOBSTATE_CANCELLED, "cancelled by the user");
        if (rc != MT_OK) {
            mt_rpc_call_reply(call, rc, "cancel: the store refused the transition", NULL);
            return;
        }
    }
    /* final already (or just now): answer the stored state, so a repeated cancel is OK */
    memset(&rec, 0, sizeof(rec));
    rc = mt_store_job_get(c->store, r->job_id, &rec, &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    rep.state = rec.state;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
    mt_store_job_fini(&rec);
}
