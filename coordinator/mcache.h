/* SPDX-License-Identifier: MIT */
/*
 * mcache.h — the coordinator's per-job cache of encoded metric series, so that
 * GET /api/v1/jobs/{id}/metrics does not re-read and re-encode every stored point
 * of a job on each request (issue #9 target: 100,000 points, p99 <= 50 ms).
 *
 * How it fits: http.c owns one coord_mcache (none when --metrics-cache-mb is 0) and
 * http_api.c answers the metrics endpoint with coord_mcache_answer(), which loads a
 * job's whole history from the store on a miss (the caller's load function) and
 * renders the JSON body from the cached pieces. metrics.c calls coord_mcache_append()
 * on the loop thread after every successful store commit and before acknowledging
 * the reports, so the cache only ever holds durable points and never misses an
 * acknowledged one.
 *
 * Invariants: a cached job holds exactly what the store holds for it (points are
 * keyed (name, step); an appended point with an existing step REPLACES it, a lower
 * step is inserted in order, as the store's upsert does). A load snapshots the store
 * AFTER the job was registered as loading; every point appended meanwhile is queued
 * and replayed in order on top of the snapshot (an upsert replayed over a state that
 * already has it changes nothing), so no commit is lost between the snapshot and the
 * install. Points that another process writes to the database directly never reach append;
 * the caller passes the store's newest step per name with each query and an entry that is
 * behind it is loaded again (steps rewritten in place by such a writer are not detected).
 * Memory: the sum of the entries' allocations stays at most cap_bytes after
 * each call (least recently read jobs are evicted first; a job larger than the cap
 * alone is not kept); a job not read for idle_ms is evicted.
 *
 * Threading: every function may be called from any thread; one mutex guards the
 * state and is held only for short work (appending points, encoding the tail that
 * changed since the last read, copying the answer); the store load and the first
 * encoding of a job happen outside it, so the loop thread's append never waits for
 * a load. Tests: tests/unit/test_mcache.c (module, and cached vs uncached answers
 * byte for byte); tests/integration/test_http_api.sh (cache on and off).
 */
#ifndef MT_COORD_MCACHE_H
#define MT_COORD_MCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator/buf.h"
#include "status/mt_status.h"
#include "storage/mt_store.h"

typedef struct coord_mcache coord_mcache;

#define COORD_MCACHE_MAX_NAMES  32  /* names= entries in one query */
#define COORD_MCACHE_MAX_SERIES 200 /* series in one answer (as the uncached path) */

/* One metrics query, as http_api.c parsed it (docs/api.md). */
typedef struct coord_mcache_query {
    uint64_t since_step;      /* points with step >= since_step */
    const char *const *names; /* borrowed; n_names == 0: every name */
    size_t n_names;           /* <= COORD_MCACHE_MAX_NAMES; duplicates allowed */
    size_t limit;             /* the first `limit` points by (step, name); 0 = all */
    size_t max_points;        /* per series, an even stride keeping first and last; 0 = all */
    /* the store's newest point per name (mt_store_metrics_latest), read just before the call,
     * or NULL: a cached job behind it for some name was grown by another writer (a tool writing
     * to the database directly) and is loaded again; borrowed */
    const mt_store_metric *latest;
    size_t n_latest;
} coord_mcache_query;

/* Counters for tests and logs. */
typedef struct coord_mcache_stats {
    uint64_t hits, misses, evictions, invalidations;
    size_t bytes, jobs;
} coord_mcache_stats;

/*
 * Fill the cache: call add(add_arg, p) for every stored point of the job (all names, from
 * step 0), series by series in name order, each by ascending step, as mt_store_metrics_scan
 * does; return MT_OK or the code add or the store returned.
 */
typedef mt_code (*coord_mcache_load_fn)(void *arg, mt_store_metric_fn add, void *add_arg,
                                        mt_err *err);

/*
 * A cache of at most cap_bytes (> 0) whose entries are dropped after idle_ms without a read
 * (<= 0: never). *out owned (coord_mcache_free). Codes: INVALID_ARGUMENT (cap_bytes 0 or out
 * NULL), RESOURCE_EXHAUSTED.
 */
mt_code coord_mcache_new(size_t cap_bytes, int64_t idle_ms, coord_mcache **out, mt_err *err);

/* Free m and everything cached. NULL is a no-op. No other call may be running. */
void coord_mcache_free(coord_mcache *m);

/*
 * Points pts[0..n) of job_id were just committed to the store (in this order): apply them to
 * the job's entry, if it is cached or loading; otherwise do nothing. Borrows everything. Never
 * fails: if memory runs out the job's entry is dropped (the next read loads it again). Any
 * thread; does not block on the store.
 */
void coord_mcache_append(coord_mcache *m, const char *job_id, const mt_store_metric_ref *pts,
                         size_t n);

/* Forget job_id (for a writer that deletes or rewrites its points outside append). */
void coord_mcache_invalidate(coord_mcache *m, const char *job_id);

/*
 * Append to out the metrics answer for job_id and q, byte for byte what the uncached endpoint
 * writes: {"job_id":..., "since_step":N, "count":n, "last_step":M|null, "series":{...}}\n.
 * On a miss, load(load_arg, ...) reads the job's history first (on the calling thread, outside
 * the cache's lock) and the job is then cached. The caller checked that the job exists.
 * Borrows everything. Codes: OK (out filled, *hit (may be NULL) = 1 when no load was needed);
 * UNAVAILABLE (the cache cannot answer: the job is being loaded by another thread, it does not
 * fit in the cap, or a limit query spans more than COORD_MCACHE_MAX_SERIES names; out untouched,
 * the caller answers uncached); the code load returned; RESOURCE_EXHAUSTED.
 */
mt_code coord_mcache_answer(coord_mcache *m, const char *job_id, const coord_mcache_query *q,
                            coord_mcache_load_fn load, void *load_arg, coord_buf *out, int *hit,
                            mt_err *err);

/* Drop the entries not read since now_mono_ms - idle_ms (append and answer call it with the
 * current monotonic time; tests pass a later one). */
void coord_mcache_sweep(coord_mcache *m, int64_t now_mono_ms);

/* A snapshot of the counters. */
void coord_mcache_get_stats(coord_mcache *m, coord_mcache_stats *out);

/* Write the head of a metrics answer, {"job_id":...,"series":{ (shared with the uncached path
 * so both are identical). */
void coord_mcache_write_head(coord_buf *b, const char *job_id, uint64_t since_step, uint64_t count,
                             uint64_t last_step);

#endif
