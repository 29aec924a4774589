/* SPDX-License-Identifier: MIT */
/*
 * stats.h — the coordinator's process metrics: RPC answers by method and status
 * code, an RPC latency histogram per method, and a histogram of SQLite write
 * latency. GET /metrics (http_prom.c) prints them in Prometheus text format.
 *
 * How it fits: mt_coord owns one coord_stats (coord.c). The RPC server's
 * on_reply hook (core/rpc) calls coord_stats_rpc() on whichever thread replied;
 * the loop thread calls coord_stats_store_write() around its store writes
 * (workers.c, jobs.c); HTTP handlers on nng threads read with coord_stats_prom().
 *
 * Invariants: counters only grow; a method keeps its slot for the life of the
 * object; at most COORD_STATS_MAX_METHODS distinct method names are tracked
 * (further names are counted under "other").
 *
 * Threading: every function may be called from any thread at the same time:
 * counters are C11 atomics (relaxed), method slots are claimed with a
 * compare-and-swap. A reader may see one counter of a histogram updated before
 * another (Prometheus tolerates that within a scrape). Never blocks.
 * Tests: tests/unit/test_coord_stats.c; end to end tests/integration/test_http_api.sh.
 */
#ifndef MT_COORD_STATS_H
#define MT_COORD_STATS_H

#include <stdint.h>

#include "status/mt_status.h"

#define COORD_STATS_MAX_METHODS 48
#define COORD_STATS_CODES       17 /* mt_code values 0..16 */

typedef struct coord_stats coord_stats;
struct coord_buf;

/* Allocate zeroed stats. Returns owned (coord_stats_free) or NULL when out of memory. */
coord_stats *coord_stats_new(void);

/* Free; NULL is a no-op. No other thread may use s any more. */
void coord_stats_free(coord_stats *s);

/*
 * Count one RPC answer of `method` (borrowed; must stay valid for the life of s,
 * e.g. a protobuf-c descriptor's name or a string literal; "" = refused before
 * dispatch) with status `code` (out-of-range codes count as UNKNOWN) that took
 * elapsed_us. Signature matches mt_rpc_on_reply with arg = s. Any thread.
 */
void coord_stats_rpc(void *s, const char *method, mt_code code, int64_t elapsed_us);

/* Record one SQLite write transaction that took elapsed_us. Any thread. */
void coord_stats_store_write(coord_stats *s, int64_t elapsed_us);

/* Totals for tests and the dashboard: RPC answers with `code` (all methods when
 * method is NULL), and the number of store writes. Any thread. */
uint64_t coord_stats_rpc_count(const coord_stats *s, const char *method, mt_code code);
uint64_t coord_stats_store_writes(const coord_stats *s);

/* The number of jobs in each state (indexed by mt_jobstate, 8 states), kept by the loop
 * thread as it changes them, so a listing's total costs no scan: _set at open, _moved on every
 * change (from -1: a new job). Any thread; a reader may see a move half done (off by one). */
void coord_stats_jobs_set(coord_stats *s, const size_t counts[8]);
void coord_stats_job_moved(coord_stats *s, int from, int to);
/* Sum of the counts of the states in mask (bit i = mt_jobstate i). */
uint64_t coord_stats_jobs_in(const coord_stats *s, unsigned mask);
/* The jobs table's generation: the loop thread bumps it after each commit that changes a job
 * row (coord_stats_jobs_changed; _job_moved bumps it too), so a reader that read generation G
 * before querying may keep what it rendered for as long as the generation is still G. */
void coord_stats_jobs_changed(coord_stats *s);
uint64_t coord_stats_jobs_gen(const coord_stats *s);

/*
 * Append the metrics in Prometheus text exposition format 0.0.4 to b:
 * meshtrain_rpc_requests_total{method,code}, meshtrain_rpc_duration_seconds
 * histogram{method}, meshtrain_store_write_duration_seconds histogram.
 * Returns MT_OK or RESOURCE_EXHAUSTED (b could not grow). Any thread.
 */
mt_code coord_stats_prom(const coord_stats *s, struct coord_buf *b);

#endif
