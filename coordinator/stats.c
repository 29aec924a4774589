/* SPDX-License-Identifier: MIT */
/*
 * stats.c — lock-free process metrics of the coordinator (contract in stats.h).
 *
 * DESIGN: every counter is an _Atomic uint64_t updated with relaxed ordering;
 * nothing needs ordering between counters. Methods get a slot on first use: the
 * slot's name pointer is claimed with a compare-and-swap from NULL. Slots fill in
 * order and are never released, and a failed CAS returns the name that won, so
 * a method name is in at most one slot (no duplicate label sets in /metrics).
 * Histograms keep a count per bucket (not cumulative); the printer sums them.
 * Tests: tests/unit/test_coord_stats.c.
 */
#include "coordinator/stats.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "coordinator/buf.h"

/* Upper bounds in microseconds; the last bucket is +Inf. */
static const int64_t bounds_us[] = {100,   250,    500,    1000,   2500,    5000,    10000,  25000,
                                    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000};
#define NB ((int)(sizeof(bounds_us) / sizeof(bounds_us[0])) + 1)

typedef struct hist {
    _Atomic uint64_t bucket[NB];
    _Atomic uint64_t sum_us;
    _Atomic uint64_t count;
} hist;

typedef struct method_slot {
    const char *_Atomic name; /* NULL = free; borrowed, lives as long as the stats */
    _Atomic uint64_t by_code[COORD_STATS_CODES];
    hist latency;
} method_slot;

struct coord_stats {
    method_slot methods[COORD_STATS_MAX_METHODS];
    method_slot other; /* methods beyond COORD_STATS_MAX_METHODS */
    hist store_write;
    atomic_uint_least64_t jobs[8];  /* jobs per mt_jobstate (coord_stats_jobs_set) */
    atomic_uint_least64_t jobs_gen; /* coord_stats_jobs_changed */
};

coord_stats *coord_stats_new(void)
{
    coord_stats *s = mt_calloc(1, sizeof(*s));

    if (s != NULL)
        s->other.name = "other";
    return s;
}

void coord_stats_free(coord_stats *s)
{
    mt_free(s);
}

void coord_stats_jobs_set(coord_stats *s, const size_t counts[8])
{
    for (int i = 0; i < 8; i++)
        atomic_store_explicit(&s->jobs[i], counts[i], memory_order_relaxed);
}

void coord_stats_job_moved(coord_stats *s, int from, int to)
{
    if (from >= 0 && from < 8)
        atomic_fetch_sub_explicit(&s->jobs[from], 1, memory_order_relaxed);
    if (to >= 0 && to < 8)
        atomic_fetch_add_explicit(&s->jobs[to], 1, memory_order_relaxed);
    coord_stats_jobs_changed(s);
}

void coord_stats_jobs_changed(coord_stats *s)
{
    atomic_fetch_add_explicit(&s->jobs_gen, 1, memory_order_release);
}

uint64_t coord_stats_jobs_gen(const coord_stats *s)
{
    return atomic_load_explicit(&s->jobs_gen, memory_order_acquire);
}

uint64_t coord_stats_jobs_in(const coord_stats *s, unsigned mask)
{
    uint64_t n = 0;

    for (int i = 0; i < 8; i++)
        if (mask & (1u << i))
            n += atomic_load_explicit(&s->jobs[i], memory_order_relaxed);
    return n;
}

static void hist_add(hist *h, int64_t us)
{
    int i = 0;

    if (us < 0)
        us = 0;
    while (i < NB - 1 && us > bounds_us[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

static method_slot *slot_for(coord_stats *s, const char *method)
{
    for (int i = 0; i < COORD_STATS_MAX_METHODS; i++) {
        method_slot *m = &s->methods[i];
        const char *cur = atomic_load_explicit(&m->name, memory_order_acquire);
        if (cur == NULL) {
            const char *expected = NULL;
            if (atomic_compare_exchange_strong(&m->name, &expected, method))
                return m;
            cur = expected;
        }
        if (cur == method || strcmp(cur, method) == 0)
            return m;
    }
    return &s->other;
}

void coord_stats_rpc(void *arg, const char *method, mt_code code, int64_t elapsed_us)
{
    coord_stats *s = arg;
    method_slot *m;

    if (s == NULL)
        return;
    m = slot_for(s, method != NULL ? method : "");
    if ((int)code < 0 || (int)code >= COORD_STATS_CODES)
        code = MT_UNKNOWN;
    atomic_fetch_add_explicit(&m->by_code[code], 1, memory_order_relaxed);
    hist_add(&m->latency, elapsed_us);
}

void coord_stats_store_write(coord_stats *s, int64_t elapsed_us)
{
    if (s != NULL)
        hist_add(&s->store_write, elapsed_us);
}

uint64_t coord_stats_rpc_count(const coord_stats *s, const char *method, mt_code code)
{
    uint64_t n = 0;

    if ((int)code < 0 || (int)code >= COORD_STATS_CODES)
        return 0;
    for (int i = 0; i <= COORD_STATS_MAX_METHODS; i++) {
        const method_slot *m = i < COORD_STATS_MAX_METHODS ? &s->methods[i] : &s->other;
        const char *name = atomic_load_explicit(&m->name, memory_order_acquire);
        if (name == NULL || (method != NULL && strcmp(name, method) != 0))
            continue;
        n += atomic_load_explicit(&m->by_code[code], memory_order_relaxed);
    }
    return n;
}

uint64_t coord_stats_store_writes(const coord_stats *s)
{
    return atomic_load_explicit(&s->store_write.count, memory_order_relaxed);
}

static void hist_prom(coord_buf *b, const char *metric, const char *labels, const hist *h)
{
    uint64_t cum = 0;

    for (int i = 0; i < NB; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < NB - 1)
            coord_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", metric, labels,
                             labels[0] ? "," : "", (double)bounds_us[i] / 1e6,
                             (unsigned long long)cum);
        else
            coord_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", metric, labels,
                             labels[0] ? "," : "", (unsigned long long)cum);
    }
    coord_buf_printf(b, "%s_sum%s%s%s %.6f\n", metric, labels[0] ? "{" : "", labels,
                     labels[0] ? "}" : "",
                     (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    /* _count equals the +Inf bucket so the two never disagree within one scrape */
    coord_buf_printf(b, "%s_count%s%s%s %llu\n", metric, labels[0] ? "{" : "", labels,
                     labels[0] ? "}" : "", (unsigned long long)cum);
}

static const method_slot *slot_at(const coord_stats *s, int i)
{
    return i < COORD_STATS_MAX_METHODS ? &s->methods[i] : &s->other;
}

mt_code coord_stats_prom(const coord_stats *s, coord_buf *b)
{
    char labels[160];

    coord_buf_puts(b, "# HELP meshtrain_rpc_requests_total RPC answers sent by the coordinator, "
                      "by method and status code (method \"\" = refused before dispatch).\n"
                      "# TYPE meshtrain_rpc_requests_total counter\n");
    for (int i = 0; i <= COORD_STATS_MAX_METHODS; i++) {
        const method_slot *m = slot_at(s, i);
        const char *name = atomic_load_explicit(&m->name, memory_order_acquire);
        if (name == NULL)
            continue;
        for (int c = 0; c < COORD_STATS_CODES; c++) {
            uint64_t v = atomic_load_explicit(&m->by_code[c], memory_order_relaxed);
            if (v == 0)
                continue;
            coord_buf_printf(b, "meshtrain_rpc_requests_total{method=\"%s\",code=\"%s\"} %llu\n",
                             name, mt_code_name((mt_code)c), (unsigned long long)v);
        }
    }
    coord_buf_puts(b, "# HELP meshtrain_rpc_duration_seconds Time from receiving an RPC to "
                      "queueing its reply, by method.\n"
                      "# TYPE meshtrain_rpc_duration_seconds histogram\n");
    for (int i = 0; i <= COORD_STATS_MAX_METHODS; i++) {
        const method_slot *m = slot_at(s, i);
        const char *name = atomic_load_explicit(&m->name, memory_order_acquire);
        if (name == NULL || atomic_load_explicit(&m->latency.count, memory_order_relaxed) == 0)
            continue;
        snprintf(labels, sizeof(labels), "method=\"%s\"", name);
        hist_prom(b, "meshtrain_rpc_duration_seconds", labels, &m->latency);
    }
    coord_buf_puts(b, "# HELP meshtrain_store_write_duration_seconds Duration of the "
                      "coordinator's SQLite write transactions (commit included).\n"
                      "# TYPE meshtrain_store_write_duration_seconds histogram\n");
    hist_prom(b, "meshtrain_store_write_duration_seconds", "", &s->store_write);
    return b->oom ? MT_RESOURCE_EXHAUSTED : MT_OK;
}
