/* SPDX-License-Identifier: MIT */
/*
 * sched.c — the coordinator's scheduling and liveness rules (contract in sched.h): the scheduler
 * pass, the lost-worker and restart rules, registrations, the reload after a coordinator restart,
 * the once-per-silence note, the collective deadline check, what a task report does to its job,
 * the reading of a task that failed on a peer, and the stall rule and diagnosis. Pure: typed
 * structs in, decisions out; no store, no clock, no protobuf, no nng, no state between calls. It
 * calls only core/sched (mt_sched_place, the placement of one mesh on free devices).
 *
 * DESIGN. A pass copies the alive workers' devices into a free map (a worker held by a placed
 * job has none free: its data plane serves one job), takes the QUEUED and RESTARTING jobs by
 * priority then submission order and decides each in turn on the map as the decisions before it
 * left it, so a placement made earlier in the pass is seen by the jobs behind it. The first job
 * that does not fit now blocks the jobs behind it (strict order: a big job is never starved by
 * smaller ones behind it); a job that can never fit the registered devices, one whose init_from
 * has no source, an elastic one with no usable size and one backing off from a broken link do
 * not block. The pass stops at the first job whose checkpoints are not known to be checked
 * (VERIFY): the caller finds out and asks again, so no job behind it is told to wait for
 * nothing.
 * Threading: any thread. Tests: tests/unit/test_coord_sched.c, test_coord_stall.c.
 */
#include "coordinator/sched.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "jobspec/mt_jobspec.h"

static bool has(const char *s)
{
    return s != NULL && s[0] != '\0';
}

bool coord_sched_silent(const coord_sched_worker *w, int64_t now_ms, int64_t fresh_ms)
{
    return now_ms - w->last_seen_ms > fresh_ms;
}

bool coord_sched_worker_lost(const coord_sched_worker *w, int64_t now_ms, int64_t timeout_ms)
{
    return w->state == COORD_WORKER_ALIVE && now_ms - w->last_seen_ms > timeout_ms;
}

mt_jobstate coord_sched_restart(uint32_t restarts, uint32_t max_restarts, const char *cause,
                                char *reason, size_t cap)
{
    if (restarts >= max_restarts) {
        snprintf(reason, cap, "%.250s; restart limit of %u reached", cause, max_restarts);
        return MT_JOBSTATE_FAILED;
    }
    snprintf(reason, cap, "%s", cause);
    return MT_JOBSTATE_RESTARTING;
}

coord_sched_register_verdict coord_sched_register(const coord_sched_worker *known,
                                                  const char *instance, int64_t now_ms,
                                                  int64_t timeout_ms)
{
    bool same = known != NULL && known->instance != NULL && strcmp(known->instance, instance) == 0;

    if (known == NULL)
        return COORD_SCHED_REGISTER_NEW;
    if (known->state == COORD_WORKER_ALIVE && !same && now_ms - known->last_seen_ms <= timeout_ms)
        return COORD_SCHED_REGISTER_REFUSED;
    if (known->state == COORD_WORKER_ALIVE && same)
        return COORD_SCHED_REGISTER_SAME;
    return COORD_SCHED_REGISTER_REPLACED;
}

void coord_sched_reload(mt_jobstate state, const coord_sched_task *tasks, size_t n,
                        const coord_sched_worker *workers, size_t nw, coord_sched_reload_out *out)
{
    memset(out, 0, sizeof(*out));
    out->task_state = state == MT_JOBSTATE_SCHEDULED ? COORD_TASK_ASSIGNED : COORD_TASK_RUNNING;
    for (size_t t = 0; t < n; t++) {
        size_t i = 0;
        while (i < nw && strcmp(workers[i].id, tasks[t].worker_id) != 0)
            i++;
        if (i < nw && workers[i].state == COORD_WORKER_ALIVE)
            continue;
        out->lost = true;
        snprintf(out->cause, sizeof(out->cause),
                 "worker %.63s was lost while the coordinator was down", tasks[t].worker_id);
        return;
    }
}

void coord_sched_silence(const coord_sched_worker *workers, size_t nw, mt_jobstate state,
                         const char *diagnosis, int64_t noted_ms, int64_t now_ms, int64_t fresh_ms,
                         int64_t timeout_ms, coord_sched_silence_out *out)
{
    const coord_sched_worker *w = NULL;
    long long silent;

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < nw && w == NULL; i++)
        if (coord_sched_silent(&workers[i], now_ms, fresh_ms)) {
            w = &workers[i];
            out->worker = i;
        }
    if (w == NULL) {
        if (noted_ms == 0)
            return; /* COORD_SCHED_SILENCE_NONE */
        out->verdict = COORD_SCHED_SILENCE_BACK;
        snprintf(out->reason, sizeof(out->reason), "every worker heartbeats again");
        snprintf(out->diagnosis, sizeof(out->diagnosis), "%s",
                 state == MT_JOBSTATE_RUNNING || diagnosis == NULL ? "" : diagnosis);
        return;
    }
    if (noted_ms != 0) {
        out->verdict = COORD_SCHED_SILENCE_NOTED; /* named once per silence */
        return;
    }
    out->verdict = COORD_SCHED_SILENCE_NOTE;
    silent = (long long)((now_ms - w->last_seen_ms) / 1000);
    snprintf(out->reason, sizeof(out->reason),
             "worker %.63s (%.63s) silent for %lld s: no heartbeat; it is declared lost and the "
             "job restarts %lld s after its last one",
             w->id, has(w->host) ? w->host : "", silent, (long long)(timeout_ms / 1000));
    snprintf(out->diagnosis, sizeof(out->diagnosis),
             "device stuck: worker %.63s (%.63s) silent for %lld s: no heartbeat (a frozen "
             "process or machine); the others wait for it until the collective deadline",
             w->id, has(w->host) ? w->host : "", silent);
}

mt_code coord_sched_deadline_check(uint32_t deadline_ms, int64_t fresh_ms, char *msg, size_t cap)
{
    if (deadline_ms == 0) { /* the spec sets none: the workers' default applies */
        if ((int64_t)MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS > fresh_ms)
            return MT_OK;
        snprintf(msg, cap,
                 "the workers' default collective deadline of %d ms (a spec without "
                 "restart.collective_deadline_ms) is not longer than this coordinator's "
                 "heartbeat window of %lld ms (3 heartbeat intervals + 1 s)",
                 MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS, (long long)fresh_ms);
        return MT_FAILED_PRECONDITION;
    }
    if ((int64_t)deadline_ms > fresh_ms)
        return MT_OK;
    snprintf(msg, cap,
             "restart.collective_deadline_ms: %u ms is not longer than this coordinator's "
             "heartbeat window of %lld ms (3 heartbeat intervals + 1 s)",
             deadline_ms, (long long)fresh_ms);
    return MT_FAILED_PRECONDITION;
}

/* ------------------------------------------------------------------ placement */

typedef struct free_map {
    mt_sched_worker *pw; /* alive workers: their free devices */
    size_t *widx;        /* pw[i] is workers[widx[i]] */
    size_t n;
    size_t registered; /* healthy devices of alive workers */
} free_map;

static void free_map_fini(free_map *m)
{
    mt_free(m->pw);
    mt_free(m->widx);
    memset(m, 0, sizeof(*m));
}

static mt_code free_map_build(const coord_sched_worker *w, size_t nw, free_map *m)
{
    memset(m, 0, sizeof(*m));
    m->pw = mt_calloc(nw + 1, sizeof(*m->pw));
    m->widx = mt_calloc(nw + 1, sizeof(*m->widx));
    if (m->pw == NULL || m->widx == NULL) {
        free_map_fini(m);
        return MT_RESOURCE_EXHAUSTED;
    }
    for (size_t i = 0; i < nw; i++) {
        if (w[i].state != COORD_WORKER_ALIVE)
            continue;
        m->registered += w[i].n_devices;
        m->pw[m->n].free = w[i].devices;
        m->pw[m->n].n_free = w[i].held_by != NULL ? 0 : w[i].n_devices;
        m->widx[m->n++] = i;
    }
    return MT_OK;
}

static size_t free_now(const free_map *m)
{
    size_t n = 0;

    for (size_t i = 0; i < m->n; i++)
        n += m->pw[i].n_free;
    return n;
}

/* mt_sched_place on the free devices with worker `without`'s hidden (NULL or "" hides none);
 * slots name indexes into the workers given. */
static mt_code place_without(const coord_sched_worker *w, free_map *m, const char *without,
                             size_t need, size_t inner, mt_sched_slot *slot)
{
    size_t hidden = (size_t)-1, kept = 0;
    mt_code rc;

    for (size_t i = 0; has(without) && i < m->n; i++)
        if (strcmp(w[m->widx[i]].id, without) == 0)
            hidden = i;
    if (hidden != (size_t)-1) {
        kept = m->pw[hidden].n_free;
        m->pw[hidden].n_free = 0;
    }
    rc = mt_sched_place(m->pw, m->n, need, inner, slot);
    if (hidden != (size_t)-1)
        m->pw[hidden].n_free = kept;
    if (rc == MT_OK)
        for (size_t r = 0; r < need; r++)
            slot[r].worker = m->widx[slot[r].worker];
    return rc;
}

static void append(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *out, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(out);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out + len, cap - len, fmt, ap);
    va_end(ap);
}

/*
 * Place j (need devices in groups of inner). A frozen worker still silent is left out. After a
 * broken link a placement that does not hold both ends comes first; when there is none the job
 * waits until its back-off ends (MT_UNAVAILABLE, reason in d) and is then placed anywhere.
 * Codes: mt_sched_place's, MT_UNAVAILABLE.
 */
static mt_code job_place(const coord_sched_worker *w, size_t nw, const coord_sched_job *j,
                         free_map *m, size_t need, size_t inner, int64_t now, int64_t fresh,
                         coord_sched_decision *d, bool *again)
{
    const coord_sched_worker *fw = NULL;
    mt_code rc;

    for (size_t i = 0; has(j->frozen) && i < nw && fw == NULL; i++)
        if (strcmp(w[i].id, j->frozen) == 0 && coord_sched_silent(&w[i], now, fresh))
            fw = &w[i];
    if (fw != NULL) { /* the worker that froze the last attempt is still silent: not on it */
        *again = true;
        return place_without(w, m, j->frozen, need, inner, d->slots);
    }
    if (!has(j->link_a) || !has(j->link_b))
        return place_without(w, m, NULL, need, inner, d->slots);
    if (place_without(w, m, j->link_b, need, inner, d->slots) == MT_OK ||
        place_without(w, m, j->link_a, need, inner, d->slots) == MT_OK) {
        append(d->reason, sizeof(d->reason), ", avoiding the link %.40s<->%.40s", j->link_a,
               j->link_b);
        return MT_OK;
    }
    if (now < j->backoff_until_ms) {
        snprintf(d->reason, sizeof(d->reason),
                 "backing off %lld s after the link %.63s<->%.63s broke: no placement avoids it",
                 (long long)((j->backoff_until_ms - now + 999) / 1000), j->link_a, j->link_b);
        *again = true;
        return MT_UNAVAILABLE;
    }
    rc = place_without(w, m, NULL, need, inner, d->slots);
    if (rc == MT_OK)
        append(d->reason, sizeof(d->reason),
               ", again over the link %.40s<->%.40s after %lld s of back-off", j->link_a, j->link_b,
               (long long)(j->backoff_ms / 1000));
    return rc;
}

typedef struct order_key {
    size_t job;
    int32_t priority;
    uint64_t seq;
} order_key;

static int by_priority(const void *a, const void *b)
{
    const order_key *x = a, *y = b;

    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The batch size an elastic job restarts with: the largest one the free devices hold (free;
 * 0 when it must wait its turn), else the largest the registered devices would hold (it then
 * waits for them). 0 when even the registered devices hold none. */
static uint32_t elastic_batch(const coord_sched_job *j, size_t free, size_t registered)
{
    uint32_t ever =
        mt_sched_elastic_batch(j->elastic_min, j->elastic_max, j->batch_size, registered);
    uint32_t now =
        ever > 0 ? mt_sched_elastic_batch(j->elastic_min, j->elastic_max, j->batch_size, free) : 0;

    return now > 0 ? now : ever;
}

mt_code coord_sched_plan_make(const coord_sched_worker *workers, size_t nw,
                              const coord_sched_job *jobs, size_t nj, int64_t now_ms,
                              int64_t fresh_ms, coord_sched_plan *out)
{
    order_key *order = NULL;
    free_map m;
    size_t n = 0;
    const char *blocker = NULL;
    mt_code rc = MT_OK;

    memset(out, 0, sizeof(*out));
    memset(&m, 0, sizeof(m));
    order = mt_calloc(nj + 1, sizeof(*order));
    out->d = mt_calloc(nj + 1, sizeof(*out->d));
    if (order == NULL || out->d == NULL || free_map_build(workers, nw, &m) != MT_OK) {
        rc = MT_RESOURCE_EXHAUSTED;
        goto out;
    }
    out->registered = m.registered;
    out->free_devices = free_now(&m);
    for (size_t i = 0; i < nj; i++)
        if (jobs[i].state == MT_JOBSTATE_QUEUED || jobs[i].state == MT_JOBSTATE_RESTARTING)
            order[n++] = (order_key){i, jobs[i].priority, jobs[i].seq};
    qsort(order, n, sizeof(*order), by_priority);
    for (size_t k = 0; k < n; k++) {
        const coord_sched_job *j = &jobs[order[k].job];
        coord_sched_decision *d = &out->d[out->n++];
        size_t need = j->devices, inner = j->inner, avail = free_now(&m);

        d->job = order[k].job;
        d->verdict = COORD_SCHED_WAIT;
        if (j->init_error != NULL) {
            d->verdict = COORD_SCHED_FAIL;
            snprintf(d->reason, sizeof(d->reason), "%s", j->init_error);
            continue;
        }
        if (j->state == MT_JOBSTATE_RESTARTING && j->elastic_max > 0) {
            uint32_t b = elastic_batch(j, blocker == NULL ? avail : 0, m.registered);
            if (b == 0) {
                snprintf(d->reason, sizeof(d->reason),
                         "elastic: no batch size in %u..%u divides the global batch %llu and fits "
                         "the %zu registered devices",
                         j->elastic_min, j->elastic_max, (unsigned long long)j->batch_size,
                         m.registered);
                continue;
            }
            if (j->placed_devices > 0 && b != j->placed_devices)
                snprintf(d->reason, sizeof(d->reason), ", elastic: mesh batch=%u, was batch=%zu", b,
                         j->placed_devices);
            d->batch = b;
            need = inner = b; /* mesh {"batch": b}: one group */
        }
        if (need > m.registered) {
            snprintf(d->reason, sizeof(d->reason), "needs %zu devices, %zu registered", need,
                     m.registered);
            continue;
        }
        if (blocker != NULL) {
            snprintf(d->reason, sizeof(d->reason),
                     "waiting behind %s (priority, then submission order)", blocker);
            continue;
        }
        if (j->ckpt == COORD_SCHED_CKPT_UNCHECKED) {
            d->verdict = COORD_SCHED_VERIFY;
            d->reason[0] = '\0';
            break;
        }
        if (j->ckpt == COORD_SCHED_CKPT_VERIFYING) {
            d->verdict = COORD_SCHED_HOLD;
            d->reason[0] = '\0';
            blocker = j->id;
            continue;
        }
        if ((d->slots = mt_calloc(need + 1, sizeof(*d->slots))) == NULL) {
            rc = MT_RESOURCE_EXHAUSTED;
            goto out;
        }
        switch (job_place(workers, nw, j, &m, need, inner ? inner : 1, now_ms, fresh_ms, d,
                          &out->again)) {
        case MT_OK:
            d->verdict = COORD_SCHED_PLACE;
            d->n_slots = need;
            for (size_t r = 0; r < need; r++) /* the job holds its workers now */
                for (size_t i = 0; i < m.n; i++)
                    if (m.widx[i] == d->slots[r].worker)
                        m.pw[i].n_free = 0;
            break;
        case MT_UNAVAILABLE: /* backing off from a broken link: not a blocker */
            break;
        default:
            snprintf(d->reason, sizeof(d->reason), "waiting for %zu free devices (%zu free of %zu)",
                     need, avail, m.registered);
            blocker = j->id;
            break;
        }
        if (d->verdict != COORD_SCHED_PLACE) {
            mt_free(d->slots);
            d->slots = NULL;
        }
    }
out:
    free_map_fini(&m);
    mt_free(order);
    return rc;
}

void coord_sched_plan_fini(coord_sched_plan *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n; i++)
        mt_free(p->d[i].slots);
    mt_free(p->d);
    memset(p, 0, sizeof(*p));
}

/* ------------------------------------------------------------------ task reports */

void coord_sched_task_report(mt_jobstate job_state, uint32_t job_attempt,
                             const coord_sched_task *tasks, size_t n, const char *worker_id,
                             uint32_t attempt, coord_task_state state, uint64_t step,
                             const char *error, coord_sched_report *out)
{
    bool placed = job_state == MT_JOBSTATE_SCHEDULED || job_state == MT_JOBSTATE_RUNNING ||
                  job_state == MT_JOBSTATE_STALLED;
    bool known = state != COORD_TASK_ASSIGNED;
    size_t t = 0, started = 0, succeeded = 0;

    memset(out, 0, sizeof(*out));
    while (t < n && strcmp(tasks[t].worker_id, worker_id) != 0)
        t++;
    if (!placed || attempt != job_attempt || t == n) {
        out->verdict =
            state == COORD_TASK_RUNNING ? COORD_SCHED_REPORT_CANCEL : COORD_SCHED_REPORT_IGNORE;
        return;
    }
    if (known && tasks[t].state == state && step <= tasks[t].step)
        return; /* nothing new */
    out->accepted = true;
    out->task = t;
    if (state == COORD_TASK_FAILED || state == COORD_TASK_CANCELLED) {
        out->verdict = COORD_SCHED_REPORT_FAIL;
        out->failed = state == COORD_TASK_FAILED;
        snprintf(out->reason, sizeof(out->reason), "worker %s: %s", worker_id,
                 error != NULL && error[0]       ? error
                 : state == COORD_TASK_CANCELLED ? "task cancelled by the worker"
                                                 : "task failed");
        return;
    }
    if (state != COORD_TASK_RUNNING && state != COORD_TASK_SUCCEEDED)
        return; /* not a state word the coordinator knows: ignored */
    out->verdict = COORD_SCHED_REPORT_RECORD;
    out->state = state;
    out->resume = job_state == MT_JOBSTATE_STALLED;
    if (out->resume)
        job_state = MT_JOBSTATE_RUNNING;
    for (size_t i = 0; i < n; i++) {
        coord_task_state s = i == t ? state : tasks[i].state;
        started += s != COORD_TASK_ASSIGNED;
        succeeded += s == COORD_TASK_SUCCEEDED;
    }
    if (job_state == MT_JOBSTATE_SCHEDULED && started == n) {
        out->started = true;
        job_state = MT_JOBSTATE_RUNNING;
        snprintf(out->reason, sizeof(out->reason), "all %zu tasks started (attempt %u)", n,
                 job_attempt);
    }
    out->succeeded = succeeded == n && job_state == MT_JOBSTATE_RUNNING;
}

/* ------------------------------------------------------------------ peer failures */

void coord_sched_peer_failure(const coord_sched_worker *w, size_t nw, const char *reporter,
                              const char *error, int64_t backoff_ms, int64_t now_ms,
                              int64_t fresh_ms, coord_sched_peer_verdict *out)
{
    memset(out, 0, sizeof(*out));
    if (strncmp(error, "UNAVAILABLE: ", 13) != 0 && strncmp(error, "DEADLINE_EXCEEDED: ", 19) != 0)
        return; /* COORD_SCHED_FAULT_NONE */
    for (size_t i = 0; i < nw; i++) {
        long long silent = (long long)((now_ms - w[i].last_seen_ms) / 1000);
        if (strcmp(w[i].id, reporter) == 0 || !coord_sched_silent(&w[i], now_ms, fresh_ms))
            continue;
        out->fault = COORD_SCHED_FAULT_FROZEN;
        out->worker = i;
        snprintf(out->cause, sizeof(out->cause),
                 "worker %s stopped answering (no heartbeat for %lld s) while worker %s waited "
                 "on it: %s",
                 w[i].id, silent, reporter, error);
        snprintf(out->diagnosis, sizeof(out->diagnosis),
                 "device stuck: worker %.63s (%.63s) stopped answering: no heartbeat for %lld s "
                 "while worker %.63s waited on it in a collective",
                 w[i].id, w[i].host, silent, reporter);
        return;
    }
    for (size_t i = 0; i < nw; i++) {
        if (strcmp(w[i].id, reporter) == 0 || !has(w[i].data_address) ||
            strstr(error, w[i].data_address) == NULL)
            continue;
        out->fault = COORD_SCHED_FAULT_LINK;
        out->worker = i;
        out->backoff_ms = backoff_ms <= 0 ? 2000 : (backoff_ms >= 30000 ? 60000 : 2 * backoff_ms);
        out->backoff_until_ms = now_ms + out->backoff_ms;
        snprintf(out->cause, sizeof(out->cause),
                 "link %s<->%s broken (both workers heartbeat; not a stuck device): %s", reporter,
                 w[i].id, error);
        snprintf(out->diagnosis, sizeof(out->diagnosis),
                 "link %.63s<->%.63s: a collective between them failed while both workers "
                 "heartbeat (not a stuck device); the next placement avoids the pair",
                 reporter, w[i].id);
        return;
    }
    out->fault = COORD_SCHED_FAULT_PEER;
    snprintf(out->cause, sizeof(out->cause), "worker %s lost a peer: %s", reporter, error);
}

/* ------------------------------------------------------------------ stall diagnosis */

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

/* ------------------------------------------------------------------ stall detection */

static uint64_t signature(const coord_sched_stall_in *in)
{
    uint64_t h = 1469598103934665603ULL ^ in->step;

    for (size_t r = 0; r < in->n; r++) {
        const coord_stall_dev *d = &in->devs[r];
        uint64_t v[4] = {(uint64_t)d->known, d->ticks, d->step, d->seq};
        for (int k = 0; k < 4; k++)
            h = (h ^ v[k]) * 1099511628211ULL;
    }
    return h;
}

/* Every rank reported and some rank entered a collective of this attempt (before that the
 * workers are opening their input pipelines or restoring a checkpoint, which may take a while). */
static bool all_known_and_started(const coord_sched_stall_in *in)
{
    bool started = false;

    for (size_t r = 0; r < in->n; r++) {
        if (!in->devs[r].known)
            return false;
        started |= in->devs[r].op[0] != '\0';
    }
    return started;
}

static bool any_inside(const coord_stall_dev *devs, size_t n)
{
    for (size_t r = 0; r < n; r++)
        if (inside(&devs[r]))
            return true;
    return false;
}

void coord_sched_stall(const coord_sched_stall_in *in, int64_t now_ms, int64_t refresh_ms,
                       coord_sched_stall_out *out)
{
    uint64_t sig;
    char diag[256];

    memset(out, 0, sizeof(*out));
    out->prog_sig = in->prog_sig;
    out->prog_ms = in->prog_ms;
    if ((in->state != MT_JOBSTATE_RUNNING && in->state != MT_JOBSTATE_STALLED) ||
        in->stall_timeout_ms <= 0 || in->devs == NULL)
        return;
    sig = signature(in);
    if (sig != in->prog_sig) {
        out->prog_sig = sig;
        out->prog_ms = now_ms;
        /* a first signature of this attempt (or since a coordinator restart) compares nothing */
        if (in->state == MT_JOBSTATE_STALLED && in->prog_sig != 0) {
            out->verdict = COORD_SCHED_STALL_RESUMED;
            snprintf(out->reason, sizeof(out->reason),
                     "progress resumed after %lld s without progress",
                     (long long)((now_ms - in->prog_ms) / 1000));
        }
        return;
    }
    if (!in->workers_fresh || !all_known_and_started(in))
        return;
    if (in->state == MT_JOBSTATE_RUNNING && now_ms - in->prog_ms >= in->stall_timeout_ms) {
        out->verdict = COORD_SCHED_STALL_STALLED;
        coord_stall_diagnose(in->devs, in->n, now_ms, out->reason, sizeof(out->reason));
        coord_stall_classify(in->devs, in->n, now_ms, out->diagnosis, sizeof(out->diagnosis));
    } else if (in->state == MT_JOBSTATE_STALLED && in->stall_restart_ms > 0 &&
               now_ms - in->prog_ms >= in->stall_timeout_ms + in->stall_restart_ms &&
               any_inside(in->devs, in->n)) {
        out->verdict = COORD_SCHED_STALL_RESTART;
        coord_stall_diagnose(in->devs, in->n, now_ms, diag, sizeof(diag));
        snprintf(out->reason, sizeof(out->reason), "stalled for %lld s: %s",
                 (long long)((now_ms - in->prog_ms) / 1000), diag);
    } else if (in->state == MT_JOBSTATE_STALLED && now_ms - in->stall_note_ms >= refresh_ms) {
        out->verdict = COORD_SCHED_STALL_REFRESH;
        coord_stall_diagnose(in->devs, in->n, now_ms, out->reason, sizeof(out->reason));
        coord_stall_classify(in->devs, in->n, now_ms, out->diagnosis, sizeof(out->diagnosis));
    }
}
