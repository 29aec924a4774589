/* SPDX-License-Identifier: MIT */
/*
 * task.c — the worker's task table, without a task runner (contract in task.h): every
 * assignment is reported FAILED with "task runner not available in this build". Issue #8
 * replaces this file with the runner.
 */
#include "worker/task.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "log/mt_log.h"

#define MAX_TASKS 64

typedef struct task_rec {
    char job_id[32];
    unsigned attempt;
    char state[16]; /* "running" | "succeeded" | "failed" | "cancelled" */
    unsigned long long step;
    char error[256];
} task_rec;

struct worker_tasks {
    pthread_mutex_t mu;
    task_rec t[MAX_TASKS];
    size_t n;
};

mt_code worker_tasks_new(worker_tasks **out, mt_err *err)
{
    worker_tasks *t = mt_calloc(1, sizeof(*t));

    *out = NULL;
    if (t == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "worker tasks: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return MT_OK;
}

void worker_tasks_free(worker_tasks *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->mu);
    mt_free(t);
}

static task_rec *find(worker_tasks *t, const char *job_id, unsigned attempt)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->t[i].attempt == attempt && strcmp(t->t[i].job_id, job_id) == 0)
            return &t->t[i];
    return NULL;
}

void worker_on_assignment(worker_tasks *t, const Meshtrain__TaskAssignment *a)
{
    task_rec *r;

    pthread_mutex_lock(&t->mu);
    if (find(t, a->job_id, a->attempt) != NULL || t->n == MAX_TASKS) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    r = &t->t[t->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->job_id, sizeof(r->job_id), "%s", a->job_id);
    r->attempt = a->attempt;
    snprintf(r->state, sizeof(r->state), "failed");
    snprintf(r->error, sizeof(r->error), "task runner not available in this build");
    pthread_mutex_unlock(&t->mu);
    mt_log_warn("job %s attempt %u: %zu of %zu devices here; task runner not available in this "
                "build, reporting it failed",
                a->job_id, a->attempt, a->n_devices, a->n_ranks);
}

void worker_on_cancel(worker_tasks *t, const Meshtrain__TaskCancel *x)
{
    task_rec *r;

    pthread_mutex_lock(&t->mu);
    r = find(t, x->job_id, x->attempt);
    if (r != NULL && strcmp(r->state, "running") == 0)
        snprintf(r->state, sizeof(r->state), "cancelled");
    pthread_mutex_unlock(&t->mu);
    mt_log_info("job %s attempt %u: cancelled by the coordinator (%s)", x->job_id, x->attempt,
                x->reason);
}

void worker_tasks_snapshot(worker_tasks *t, Meshtrain__TaskStatus ***out, size_t *n)
{
    Meshtrain__TaskStatus **s;

    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    if (t->n == 0 || (s = mt_calloc(t->n, sizeof(*s))) == NULL) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        /* one allocation: the message, then its strings */
        Meshtrain__TaskStatus *m = mt_calloc(1, sizeof(*m) + 32 + 16 + 256);
        if (m == NULL)
            break;
        meshtrain__task_status__init(m);
        m->job_id = (char *)(m + 1);
        m->state = m->job_id + 32;
        m->error = m->state + 16;
        memcpy(m->job_id, t->t[i].job_id, 32);
        memcpy(m->state, t->t[i].state, 16);
        memcpy(m->error, t->t[i].error, 256);
        m->attempt = t->t[i].attempt;
        m->step = t->t[i].step;
        s[(*n)++] = m;
    }
    pthread_mutex_unlock(&t->mu);
    *out = s;
}

void worker_tasks_snapshot_free(Meshtrain__TaskStatus **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mt_free(s[i]);
    mt_free(s);
}

void worker_tasks_reported(worker_tasks *t, Meshtrain__TaskStatus *const *s, size_t n)
{
    pthread_mutex_lock(&t->mu);
    for (size_t k = 0; k < n; k++) {
        task_rec *r = find(t, s[k]->job_id, s[k]->attempt);
        if (r == NULL || strcmp(s[k]->state, "running") == 0 || strcmp(r->state, s[k]->state) != 0)
            continue;
        *r = t->t[--t->n]; /* final and seen by the coordinator: forget it */
    }
    pthread_mutex_unlock(&t->mu);
}
