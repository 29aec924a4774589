/* SPDX-License-Identifier: MIT */
/*
 * coll_progress.c — per-device progress records (contract in mt_coll_progress.h) and the hooks
 * the collectives call (coll__progress_*, declared in coll_int.h).
 *
 * Kept apart from coll_world.c so the collective algorithms carry one-line calls only. Each slot
 * has its own mutex: the writer is the slot's device thread, readers are heartbeat threads; a
 * writer holds it for a handful of stores (a few per collective and one per received segment,
 * against segments of 256 KB), so the cost does not show next to the data movement.
 * Threading: see the header. Tests: tests/unit/test_coll_progress.c.
 */
#include "coll/mt_coll_progress.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_int.h"

#define MAX_SLOTS 4096

struct coll_pslot {
    pthread_mutex_t mu; /* guards every field below */
    int rank;
    uint64_t step;
    uint32_t seq;
    const char *op; /* static string from coll_world.c, NULL none yet */
    mt_coll_pstate state;
    uint32_t chunk, chunks;
    int64_t since_ns;
    char axis[MT_COLL_PROGRESS_TEXT];
    char next_axis[MT_COLL_PROGRESS_TEXT]; /* recorded into axis at the next entry */
    char activity[MT_COLL_PROGRESS_TEXT];
    int64_t act_ns; /* 0: never */
    uint64_t ticks;
    int stall_armed; /* test hook (mt_coll_progress_test_stall) */
    uint64_t stall_step;
    int64_t stall_ms;
};

struct mt_coll_progress {
    int n;
    struct coll_pslot *s; /* [n] */
};

const char *mt_coll_pstate_name(mt_coll_pstate s)
{
    static const char *const names[] = {"none", "entered", "waiting", "chunk", "done", "failed"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

mt_code mt_coll_progress_new(int slots, mt_coll_progress **out, mt_err *err)
{
    mt_coll_progress *p;

    *out = NULL;
    if (slots < 1 || slots > MAX_SLOTS)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll progress: %d slots, expected 1..%d",
                          slots, MAX_SLOTS);
    p = mt_calloc(1, sizeof(*p));
    if (p == NULL || (p->s = mt_calloc((size_t)slots, sizeof(*p->s))) == NULL) {
        mt_free(p);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll progress: out of memory");
    }
    p->n = slots;
    for (int i = 0; i < slots; i++) {
        pthread_mutex_init(&p->s[i].mu, NULL);
        p->s[i].rank = -1;
    }
    *out = p;
    return MT_OK;
}

void mt_coll_progress_free(mt_coll_progress *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->n; i++)
        pthread_mutex_destroy(&p->s[i].mu);
    mt_free(p->s);
    mt_free(p);
}

int mt_coll_progress_slots(const mt_coll_progress *p)
{
    return p->n;
}

mt_code mt_coll_world_set_progress(mt_coll_world *w, mt_coll_progress *p, mt_err *err)
{
    int k = 0;

    if (p != NULL && p->n < w->nlocal)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll progress: %d slots for %d local devices of the world", p->n,
                          w->nlocal);
    for (int r = 0; r < w->size; r++) {
        mt_coll_comm *c = w->by_rank[r];
        if (c == NULL)
            continue;
        c->prog = p != NULL ? &p->s[k] : NULL;
        if (p != NULL) {
            pthread_mutex_lock(&p->s[k].mu);
            p->s[k].rank = r;
            pthread_mutex_unlock(&p->s[k].mu);
        }
        k++;
    }
    return MT_OK;
}

static void copy_text(char *dst, const char *src)
{
    snprintf(dst, MT_COLL_PROGRESS_TEXT, "%s", src != NULL ? src : "");
}

void mt_coll_comm_activity(mt_coll_comm *c, const char *what)
{
    struct coll_pslot *s = c != NULL ? c->prog : NULL;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    if (strncmp(s->activity, what != NULL ? what : "", MT_COLL_PROGRESS_TEXT - 1) != 0) {
        copy_text(s->activity, what);
        s->ticks++;
    }
    s->act_ns = coll__now_ns();
    pthread_mutex_unlock(&s->mu);
}

void mt_coll_comm_axis(mt_coll_comm *c, const char *axis)
{
    struct coll_pslot *s = c != NULL ? c->prog : NULL;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    copy_text(s->next_axis, axis);
    pthread_mutex_unlock(&s->mu);
}

void mt_coll_progress_read(mt_coll_progress *p, int slot, mt_coll_progress_rec *out)
{
    struct coll_pslot *s;
    int64_t now = coll__now_ns();

    memset(out, 0, sizeof(*out));
    out->rank = -1;
    out->op = "";
    out->activity_age_ms = -1;
    if (p == NULL || slot < 0 || slot >= p->n)
        return;
    s = &p->s[slot];
    pthread_mutex_lock(&s->mu);
    out->rank = s->rank;
    out->step = s->step;
    out->seq = s->seq;
    out->op = s->op != NULL ? s->op : "";
    memcpy(out->axis, s->axis, sizeof(out->axis));
    out->state = s->state;
    out->chunk = s->chunk;
    out->chunks = s->chunks;
    out->state_age_ms = s->since_ns != 0 ? (now - s->since_ns) / 1000000 : 0;
    memcpy(out->activity, s->activity, sizeof(out->activity));
    out->activity_age_ms = s->act_ns != 0 ? (now - s->act_ns) / 1000000 : -1;
    out->ticks = s->ticks;
    pthread_mutex_unlock(&s->mu);
}

mt_code mt_coll_progress_test_stall(mt_coll_progress *p, int slot, uint64_t step, int64_t ms,
                                    mt_err *err)
{
    if (slot < 0 || slot >= p->n || ms < 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll progress test stall: slot %d of %d, %lld ms", slot, p->n,
                          (long long)ms);
    pthread_mutex_lock(&p->s[slot].mu);
    p->s[slot].stall_armed = 1;
    p->s[slot].stall_step = step;
    p->s[slot].stall_ms = ms;
    pthread_mutex_unlock(&p->s[slot].mu);
    return MT_OK;
}

/* ------------------------------------------------------------------ hooks (coll_int.h) */

/* Set the state (under s->mu); a new state restarts "since". */
static void set_state(struct coll_pslot *s, mt_coll_pstate st, int64_t now)
{
    if (s->state != st)
        s->since_ns = now;
    s->state = st;
}

void coll__progress_enter(mt_coll_comm *c, const char *op, uint64_t step, uint32_t seq)
{
    struct coll_pslot *s = c->prog;
    int64_t sleep_ms = 0;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->stall_armed && step >= s->stall_step) {
        s->stall_armed = 0;
        sleep_ms = s->stall_ms;
        copy_text(s->activity, "test stall hook: sleeping before a collective");
        s->act_ns = coll__now_ns();
        s->ticks++;
    }
    pthread_mutex_unlock(&s->mu);
    if (sleep_ms > 0) {
        struct timespec ts = {.tv_sec = sleep_ms / 1000, .tv_nsec = (sleep_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    pthread_mutex_lock(&s->mu);
    s->step = step;
    s->seq = seq;
    s->op = op;
    memcpy(s->axis, s->next_axis, sizeof(s->axis));
    s->chunk = s->chunks = 0;
    s->state = MT_COLL_PSTATE_NONE; /* force a fresh "since" */
    set_state(s, MT_COLL_PSTATE_ENTERED, coll__now_ns());
    s->ticks++;
    pthread_mutex_unlock(&s->mu);
}

void coll__progress_wait(mt_coll_comm *c)
{
    struct coll_pslot *s = c->prog;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    set_state(s, MT_COLL_PSTATE_WAITING, coll__now_ns());
    pthread_mutex_unlock(&s->mu);
}

void coll__progress_chunk(mt_coll_comm *c, size_t k, size_t n)
{
    struct coll_pslot *s = c->prog;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->chunk = (uint32_t)k + 1;
    s->chunks = (uint32_t)n;
    s->state = MT_COLL_PSTATE_NONE; /* every segment restarts "since" */
    set_state(s, MT_COLL_PSTATE_CHUNK, coll__now_ns());
    s->ticks++;
    pthread_mutex_unlock(&s->mu);
}

void coll__progress_exit(mt_coll_comm *c, mt_code rc)
{
    struct coll_pslot *s = c->prog;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    set_state(s, rc == MT_OK ? MT_COLL_PSTATE_DONE : MT_COLL_PSTATE_FAILED, coll__now_ns());
    if (rc == MT_OK) /* a failure is not progress */
        s->ticks++;
    pthread_mutex_unlock(&s->mu);
}
