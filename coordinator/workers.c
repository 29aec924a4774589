/* SPDX-License-Identifier: MIT */
/*
 * workers.c — the coordinator's worker registry, an RPC adapter: RegisterWorker, Heartbeat,
 * ListWorkers, and the registry's load at open. What a registration means (a new worker, the
 * same process re-attached, a new process whose old tasks are gone, a name refused) is the
 * scheduling core's rule (coord_sched_register); the jobs of a replaced process restart through
 * the domain core (coord_worker_lose). The periodic sweep (lost workers, the heartbeat times
 * written once a second) is sweep.c's; this file never calls it, nor any other adapter: it calls
 * the two cores alone. Loop thread only (coord_int.h).
 *
 * Heartbeats. Each carries the worker's task statuses: their per-rank progress goes to the
 * domain core (coord_job_progress, the stall rule's records) and each status to
 * coord_task_report, which moves the job (SCHEDULED -> RUNNING when every task reported running,
 * SUCCEEDED when all succeeded, FAILED or a restart when one failed). The reply repeats a task's
 * assignment (built here from the placement, heartbeat_tasks) until the worker reports a status
 * for that (job, attempt); workers ignore an assignment they already run. Reconciliation
 * replaces explicit cancel messages: whenever a worker reports a running task the coordinator
 * does not want (job final, restarted under a new attempt, or not placed there), the reply
 * carries a cancellation for it.
 *
 * The registry lives in memory and in the store. Registration is written
 * through at once (one transaction); heartbeats only touch memory and sweep.c
 * flushes them in one batched transaction per second, so a thousand workers cost
 * one write per second. A worker is identified by its name (worker_id = name);
 * a second live process with the same name is refused with ALREADY_EXISTS until
 * the first is marked lost. After a coordinator restart every worker the store
 * knew as alive gets a fresh grace period of one heartbeat timeout; its next
 * heartbeat sees a new coordinator instance and it re-registers.
 */
#include "coordinator/coord_rpc.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

#define MAX_DEVICES_PER_WORKER 1024

mt_code coord_workers_load(mt_coord *c, mt_err *err)
{
    mt_store_worker *list = NULL;
    size_t n = 0;
    int64_t now = mt_clock_mono_ms();
    mt_code rc = mt_store_worker_list(c->store, NULL, &list, &n, err);

    if (rc != MT_OK)
        return rc;
    c->workers = n ? mt_calloc(n, sizeof(*c->workers)) : NULL;
    if (n && c->workers == NULL) {
        mt_store_worker_list_free(list, n);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "load workers: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        c->workers[i].rec = list[i]; /* takes the devices array */
        c->workers[i].last_seen_mono_ms = now;
        if (!coord_worker_state_parse(list[i].state, &c->workers[i].state))
            coord_worker_set_state(&c->workers[i],
                                   COORD_WORKER_LOST); /* unknown: not schedulable */
        list[i].devices = NULL;
        list[i].n_devices = 0;
    }
    c->n_workers = c->cap_workers = n;
    mt_store_worker_list_free(list, n);
    return MT_OK;
}

void coord_workers_free(mt_coord *c)
{
    for (size_t i = 0; i < c->n_workers; i++)
        mt_store_worker_fini(&c->workers[i].rec);
    mt_free(c->workers);
    c->workers = NULL;
    c->n_workers = c->cap_workers = 0;
}

/* Worker names: 1..63 characters of [A-Za-z0-9._-]. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

static mt_code validate_register(const Meshtrain__RegisterWorkerRequest *r, char *msg, size_t cap)
{
    if (!valid_name(r->name)) {
        snprintf(msg, cap, "worker name '%.64s': use 1-63 characters from A-Z a-z 0-9 . _ -",
                 r->name);
        return MT_INVALID_ARGUMENT;
    }
    if (r->instance_id[0] == '\0' || strlen(r->instance_id) > 63) {
        snprintf(msg, cap, "worker %s: instance_id must have 1-63 characters", r->name);
        return MT_INVALID_ARGUMENT;
    }
    if (r->n_devices == 0 || r->n_devices > MAX_DEVICES_PER_WORKER) {
        snprintf(msg, cap, "worker %s: %zu devices; a worker registers 1 to %d", r->name,
                 r->n_devices, MAX_DEVICES_PER_WORKER);
        return MT_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < r->n_devices; i++) {
        const Meshtrain__Device *d = r->devices[i];
        if (d->index != i) {
            snprintf(msg, cap, "worker %s: devices[%zu] has index %u; indexes must be 0..%zu",
                     r->name, i, d->index, r->n_devices - 1);
            return MT_INVALID_ARGUMENT;
        }
        if (strcmp(d->kind, "cpu") != 0) {
            snprintf(msg, cap, "worker %s: devices[%zu] kind '%.15s'; only 'cpu' is supported",
                     r->name, i, d->kind);
            return MT_INVALID_ARGUMENT;
        }
    }
    if (strlen(r->host) >= 128 || strlen(r->data_address) >= 256 || strlen(r->version) >= 32) {
        snprintf(msg, cap, "worker %s: host, data_address or version too long", r->name);
        return MT_INVALID_ARGUMENT;
    }
    return MT_OK;
}

void coord_handle_register(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__RegisterWorkerRequest *r =
        (const Meshtrain__RegisterWorkerRequest *)mt_rpc_call_request(call);
    Meshtrain__RegisterWorkerReply rep = MESHTRAIN__REGISTER_WORKER_REPLY__INIT;
    mt_store_worker rec;
    mt_store_device *devs;
    coord_worker *w;
    coord_sched_worker known;
    coord_sched_register_verdict verdict;
    char msg[1024];
    mt_err err = MT_ERR_INIT;
    int64_t now = mt_clock_mono_ms();
    mt_code rc;

    if ((rc = validate_register(r, msg, sizeof(msg))) != MT_OK) {
        mt_rpc_call_reply(call, rc, msg, NULL);
        return;
    }
    w = coord_worker_find(c, r->name);
    memset(&known, 0, sizeof(known));
    if (w != NULL)
        coord_worker_view(w, &known);
    verdict = coord_sched_register(w != NULL ? &known : NULL, r->instance_id, now,
                                   c->opts.heartbeat_timeout_ms); /* the scheduling core's rule */
    if (verdict == COORD_SCHED_REGISTER_REFUSED) {
        snprintf(msg, sizeof(msg),
                 "worker name '%s' is in use by a live worker (pid %u on %s, last heartbeat "
                 "%lld ms ago); pick another --name or wait %d ms for it to be marked lost",
                 r->name, w->rec.pid, w->rec.host, (long long)(now - w->last_seen_mono_ms),
                 c->opts.heartbeat_timeout_ms);
        mt_rpc_call_reply(call, MT_ALREADY_EXISTS, msg, NULL);
        return;
    }
    devs = mt_calloc(r->n_devices, sizeof(*devs));
    if (devs == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        return;
    }
    memset(&rec, 0, sizeof(rec));
    snprintf(rec.worker_id, sizeof(rec.worker_id), "%s", r->name);
    snprintf(rec.name, sizeof(rec.name), "%s", r->name);
    snprintf(rec.instance_id, sizeof(rec.instance_id), "%s", r->instance_id);
    snprintf(rec.host, sizeof(rec.host), "%s", r->host);
    snprintf(rec.state, sizeof(rec.state), "%s", coord_worker_state_name(COORD_WORKER_ALIVE));
    snprintf(rec.data_address, sizeof(rec.data_address), "%s", r->data_address);
    snprintf(rec.version, sizeof(rec.version), "%s", r->version);
    rec.pid = r->pid;
    rec.registered_at_ms = rec.last_heartbeat_ms = mt_clock_wall_ms();
    for (size_t i = 0; i < r->n_devices; i++) {
        snprintf(devs[i].kind, sizeof(devs[i].kind), "%s", r->devices[i]->kind);
        devs[i].index = r->devices[i]->index;
        devs[i].cores = r->devices[i]->cores;
        devs[i].memory_bytes = r->devices[i]->memory_bytes;
        snprintf(devs[i].health, sizeof(devs[i].health), "%s",
                 r->devices[i]->health[0] ? r->devices[i]->health : "ok");
    }
    rec.devices = devs;
    rec.n_devices = r->n_devices;
    int64_t t0 = mt_clock_mono_us();
    rc = mt_store_worker_upsert(c->store, &rec, &err);
    coord_stats_store_write(c->stats, mt_clock_mono_us() - t0);
    if (rc != MT_OK) {
        mt_log_error("register worker %s: %s", r->name, err.msg);
        mt_free(devs);
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    if (w == NULL) {
        if (c->n_workers == c->cap_workers) {
            size_t cap = c->cap_workers ? c->cap_workers * 2 : 16;
            coord_worker *nw = mt_realloc(c->workers, cap * sizeof(*nw));
            if (nw == NULL) {
                mt_free(devs);
                mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
                return;
            }
            c->workers = nw;
            c->cap_workers = cap;
        }
        w = &c->workers[c->n_workers++];
        memset(w, 0, sizeof(*w));
    } else {
        mt_store_worker_fini(&w->rec);
    }
    w->rec = rec; /* takes devs */
    w->state = COORD_WORKER_ALIVE;
    w->last_seen_mono_ms = now;
    w->hb_dirty = 0;
    mt_log_info("worker %s registered: %zu devices, pid %u on %s, data plane %s", rec.worker_id,
                rec.n_devices, rec.pid, rec.host, rec.data_address[0] ? rec.data_address : "-");
    if (verdict == COORD_SCHED_REGISTER_REPLACED) /* a new process: the old one's tasks died */
        coord_worker_lose(c, w->rec.worker_id, "restarted (its tasks are gone)");
    c->sched_dirty = 1;
    rep.worker_id = w->rec.worker_id;
    rep.coordinator_instance = c->instance;
    rep.heartbeat_interval_ms = (uint32_t)c->opts.heartbeat_interval_ms;
    rep.heartbeat_timeout_ms = (uint32_t)c->opts.heartbeat_timeout_ms;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
}
/* A task status's per-rank collective progress (hang diagnosis, docs/jobs.md), as the domain
 * core's typed records; ages become coordinator times (now - age), so worker clocks never
 * matter. */
static void task_progress(mt_coord *c, const char *worker_id, const Meshtrain__TaskStatus *t)
{
    int64_t now = mt_clock_mono_ms();

    for (size_t i = 0; i < t->n_devices; i++) {
        const Meshtrain__DeviceProgress *p = t->devices[i];
        coord_stall_dev d;
        memset(&d, 0, sizeof(d));
        d.step = p->step;
        d.seq = p->seq;
        snprintf(d.op, sizeof(d.op), "%s", p->op != NULL ? p->op : "");
        snprintf(d.axis, sizeof(d.axis), "%s", p->axis != NULL ? p->axis : "");
        snprintf(d.state, sizeof(d.state), "%s", p->state != NULL ? p->state : "");
        d.chunk = p->chunk;
        d.chunks = p->chunks;
        d.state_since_ms = now - (p->state_age_ms > 0 ? p->state_age_ms : 0);
        snprintf(d.activity, sizeof(d.activity), "%s", p->activity != NULL ? p->activity : "");
        d.activity_since_ms = p->activity_age_ms < 0 ? -1 : now - p->activity_age_ms;
        d.ticks = p->ticks;
        coord_job_progress(c, t->job_id, t->attempt, worker_id, p->rank, &d);
    }
}

/* An assignment built by build_assignment, and what it owns (NULL: no-op). */
static void free_assignment(Meshtrain__TaskAssignment *a)
{
    if (a == NULL)
        return;
    for (size_t k = 0; a->mesh != NULL && k < a->n_mesh; k++)
        mt_free(a->mesh[k]);
    for (size_t k = 0; k < a->n_ranks; k++)
        mt_free(a->ranks[k]);
    for (size_t k = 0; k < a->n_devices; k++)
        mt_free(a->devices[k]);
    mt_free(a->mesh);
    mt_free(a->ranks);
    mt_free(a->devices);
    mt_free(a->spec_json);
    mt_free(a);
}

/* Build the assignment of j for worker_id (allocations freed by free_assignment). */
static Meshtrain__TaskAssignment *build_assignment(mt_coord *c, coord_job *j, const char *worker_id)
{
    Meshtrain__TaskAssignment *a = mt_calloc(1, sizeof(*a));
    mt_store_job rec;
    size_t nd = 0;

    if (a == NULL)
        return NULL;
    meshtrain__task_assignment__init(a);
    memset(&rec, 0, sizeof(rec));
    if (mt_store_job_get(c->store, j->job_id, &rec, NULL) != MT_OK) {
        mt_free(a);
        return NULL;
    }
    a->job_id = j->job_id;
    a->attempt = j->attempt;
    a->spec_json = rec.spec_json; /* owned by a now */
    a->resume_step = j->resume_step;
    a->resume_job = j->resume_job;
    a->n_mesh = (size_t)j->sum.mesh_ndims;
    a->mesh = mt_calloc(a->n_mesh + 1, sizeof(*a->mesh));
    a->ranks = mt_calloc(j->n_place + 1, sizeof(*a->ranks));
    a->devices = mt_calloc(j->n_place + 1, sizeof(*a->devices));
    if (a->mesh == NULL || a->ranks == NULL || a->devices == NULL)
        goto oom;
    for (size_t d = 0; d < a->n_mesh; d++) {
        Meshtrain__MeshDim *m = mt_calloc(1, sizeof(*m));
        if (m == NULL)
            goto oom;
        meshtrain__mesh_dim__init(m);
        m->name = j->sum.mesh_names[d];
        m->size = (uint32_t)j->sum.mesh_sizes[d];
        a->mesh[d] = m;
    }
    for (size_t r = 0; r < j->n_place; r++) {
        const mt_store_placement *p = &j->place[r];
        coord_worker *w = coord_worker_find(c, p->worker_id);
        Meshtrain__RankAddress *ra = mt_calloc(1, sizeof(*ra));
        if (ra == NULL)
            goto oom;
        meshtrain__rank_address__init(ra);
        ra->rank = p->device;
        ra->worker_id = (char *)p->worker_id;
        ra->data_address = w != NULL ? w->rec.data_address : (char *)"";
        ra->local_index = p->local_index;
        a->ranks[a->n_ranks++] = ra;
        if (strcmp(p->worker_id, worker_id) == 0) {
            Meshtrain__TaskDevice *td = mt_calloc(1, sizeof(*td));
            if (td == NULL)
                goto oom;
            meshtrain__task_device__init(td);
            td->local_index = p->local_index;
            td->rank = p->device;
            td->coords = (uint32_t *)p->coords;
            td->n_coords = p->n_coords;
            a->devices[nd++] = td;
            a->n_devices = nd;
        }
    }
    return a;
oom:
    free_assignment(a);
    return NULL;
}

/* The heartbeat's task statuses, applied by the domain core (coord_task_report), and rep's
 * cancellations (tasks the coordinator does not run) and assignments (tasks of SCHEDULED jobs
 * this worker has not reported yet: repeated until it does). What rep gets is owned here until
 * heartbeat_done. False when a task's final state could not be stored (the heartbeat then
 * fails, so the worker keeps reporting it). */
static bool heartbeat_tasks(mt_coord *c, const Meshtrain__HeartbeatRequest *r,
                            Meshtrain__HeartbeatReply *rep)
{
    size_t cap = r->n_tasks + 1;
    bool stored = true;

    rep->cancellations = mt_calloc(cap, sizeof(*rep->cancellations));
    for (size_t i = 0; i < r->n_tasks; i++) {
        const Meshtrain__TaskStatus *t = r->tasks[i];
        coord_task_status st = coord_task_status_of(t);
        coord_report_ack ack = coord_task_report(c, r->worker_id, &st);
        stored = stored && ack != COORD_REPORT_UNSTORED;
        if (ack == COORD_REPORT_CANCEL && rep->cancellations != NULL) {
            Meshtrain__TaskCancel *x = mt_calloc(1, sizeof(*x));
            if (x == NULL)
                continue;
            meshtrain__task_cancel__init(x);
            x->job_id = mt_calloc(1, strlen(t->job_id) + 1);
            if (x->job_id == NULL) {
                mt_free(x);
                continue;
            }
            memcpy(x->job_id, t->job_id, strlen(t->job_id) + 1);
            x->attempt = t->attempt;
            x->reason = (char *)"the coordinator does not run this task any more";
            rep->cancellations[rep->n_cancellations++] = x;
        }
    }
    /* assignments this worker has not acknowledged yet */
    for (size_t i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        coord_task *t;
        Meshtrain__TaskAssignment *a, **grown;
        if (j->state != MT_JOBSTATE_SCHEDULED || (t = coord_job_task(j, r->worker_id)) == NULL ||
            t->state != COORD_TASK_ASSIGNED)
            continue;
        a = build_assignment(c, j, r->worker_id);
        if (a == NULL)
            continue;
        grown = mt_realloc(rep->assignments, (rep->n_assignments + 1) * sizeof(*grown));
        if (grown == NULL) {
            free_assignment(a);
            continue;
        }
        rep->assignments = grown;
        rep->assignments[rep->n_assignments++] = a;
    }
    return stored;
}

/* Free what heartbeat_tasks put into rep (after the reply was sent). */
static void heartbeat_done(Meshtrain__HeartbeatReply *rep)
{
    for (size_t i = 0; i < rep->n_assignments; i++)
        free_assignment(rep->assignments[i]);
    mt_free(rep->assignments);
    for (size_t i = 0; i < rep->n_cancellations; i++) {
        mt_free(rep->cancellations[i]->job_id);
        mt_free(rep->cancellations[i]);
    }
    mt_free(rep->cancellations);
    rep->assignments = NULL;
    rep->cancellations = NULL;
    rep->n_assignments = rep->n_cancellations = 0;
}

void coord_handle_heartbeat(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__HeartbeatRequest *r =
        (const Meshtrain__HeartbeatRequest *)mt_rpc_call_request(call);
    Meshtrain__HeartbeatReply rep = MESHTRAIN__HEARTBEAT_REPLY__INIT;
    coord_worker *w = coord_worker_find(c, r->worker_id);

    rep.coordinator_instance = c->instance;
    /* unknown, replaced by another process, or already declared lost: register again */
    if (w == NULL || strcmp(w->rec.instance_id, r->instance_id) != 0 ||
        w->state != COORD_WORKER_ALIVE) {
        rep.reregister = 1;
        mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
        return;
    }
    w->last_seen_mono_ms = mt_clock_mono_ms();
    w->rec.last_heartbeat_ms = mt_clock_wall_ms();
    w->hb_dirty = 1;
    for (size_t i = 0; i < r->n_devices && i < w->rec.n_devices; i++) {
        if (r->devices[i]->health[0] != '\0')
            snprintf(w->rec.devices[i].health, sizeof(w->rec.devices[i].health), "%s",
                     r->devices[i]->health);
    }
    for (size_t i = 0; i < r->n_tasks; i++)
        task_progress(c, r->worker_id, r->tasks[i]);
    if (heartbeat_tasks(c, r, &rep))
        mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
    else /* a final task state the store did not take: the worker keeps it and sends it again */
        mt_rpc_call_reply(call, MT_UNAVAILABLE, "the coordinator could not store a task's state",
                          NULL);
    heartbeat_done(&rep);
}

static int by_name(const void *a, const void *b)
{
    const Meshtrain__WorkerInfo *x = *(Meshtrain__WorkerInfo *const *)a;
    const Meshtrain__WorkerInfo *y = *(Meshtrain__WorkerInfo *const *)b;
    return strcmp(x->name, y->name);
}

void coord_handle_list_workers(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__ListWorkersRequest *r =
        (const Meshtrain__ListWorkersRequest *)mt_rpc_call_request(call);
    Meshtrain__ListWorkersReply rep = MESHTRAIN__LIST_WORKERS_REPLY__INIT;
    Meshtrain__WorkerInfo *infos = NULL, **ptrs = NULL;
    Meshtrain__Device *devs = NULL, **dptrs = NULL;
    size_t n = 0, nd = 0, k = 0;

    coord_worker_state want = COORD_WORKER_ALIVE;

    if (r->state[0] && !coord_worker_state_parse(r->state, &want)) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT,
                          "state filter must be 'alive' or 'lost' (or empty for all)", NULL);
        return;
    }
    for (size_t i = 0; i < c->n_workers; i++) {
        if (r->state[0] && c->workers[i].state != want)
            continue;
        n++;
        nd += c->workers[i].rec.n_devices;
    }
    infos = mt_calloc(n, sizeof(*infos));
    ptrs = mt_calloc(n, sizeof(*ptrs));
    devs = mt_calloc(nd, sizeof(*devs));
    dptrs = mt_calloc(nd, sizeof(*dptrs));
    if (!infos || !ptrs || !devs || !dptrs) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    n = 0;
    for (size_t i = 0; i < c->n_workers; i++) {
        mt_store_worker *w = &c->workers[i].rec;
        Meshtrain__WorkerInfo *wi = &infos[n];
        if (r->state[0] && c->workers[i].state != want)
            continue;
        meshtrain__worker_info__init(wi);
        wi->worker_id = w->worker_id;
        wi->name = w->name;
        wi->host = w->host;
        wi->pid = w->pid;
        wi->state = w->state;
        wi->data_address = w->data_address;
        wi->registered_at_ms = w->registered_at_ms;
        wi->last_heartbeat_ms = w->last_heartbeat_ms;
        wi->version = w->version;
        wi->devices = &dptrs[k];
        wi->n_devices = w->n_devices;
        for (size_t d = 0; d < w->n_devices; d++, k++) {
            meshtrain__device__init(&devs[k]);
            devs[k].kind = w->devices[d].kind;
            devs[k].index = w->devices[d].index;
            devs[k].cores = w->devices[d].cores;
            devs[k].memory_bytes = w->devices[d].memory_bytes;
            devs[k].health = w->devices[d].health;
            dptrs[k] = &devs[k];
        }
        ptrs[n++] = wi;
    }
    qsort(ptrs, n, sizeof(*ptrs), by_name);
    rep.workers = ptrs;
    rep.n_workers = n;
    rep.now_ms = mt_clock_wall_ms();
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(infos);
    mt_free(ptrs);
    mt_free(devs);
    mt_free(dptrs);
}
