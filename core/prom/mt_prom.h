/* SPDX-License-Identifier: MIT */
/*
 * mt_prom.h — pieces of the Prometheus text exposition format (0.0.4) that more than one program
 * exports: the process_* families of Prometheus' client libraries with meshtrain_build_info, and
 * a fixed-bucket histogram that any thread may observe into.
 *
 * How it fits: the coordinator's /metrics (coordinator/http_prom.c) and the worker's
 * (worker/metrics.c) append these to their own families. Writers take a caller's buffer and
 * return the length the whole text needs (snprintf's rule), so a caller can retry larger.
 *
 * Threading: mt_prom_hist_observe and _write are lock-free (atomics) and may run on any threads
 * at once; a write concurrent with observations sees each counter at some moment (the _count
 * may lead the buckets by the observations in flight). Tests: tests/unit/test_prom.c,
 * tests/integration/test_http_api.sh and test_worker_metrics.sh (promtool check metrics).
 */
#ifndef MT_PROM_H
#define MT_PROM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MT_PROM_MAX_BUCKETS 24

/*
 * The process_* families (cpu seconds, virtual and resident memory, start time, open and max
 * fds; from /proc/self, a value /proc does not give is left out) and
 * meshtrain_build_info{version, program} 1, into out (cap bytes, NUL-terminated, truncated when
 * short). Returns the length the text needs. Any thread; reads /proc.
 */
size_t mt_prom_process(char *out, size_t cap, const char *program);

/* A histogram of seconds with fixed upper bounds (ascending, at most MT_PROM_MAX_BUCKETS; the
 * +Inf bucket is implied). Zero it, then mt_prom_hist_init. */
typedef struct mt_prom_hist {
    const double *bounds; /* borrowed (a static table) */
    size_t n;
    _Atomic uint64_t counts[MT_PROM_MAX_BUCKETS + 1]; /* per bucket, not cumulative; [n] = +Inf */
    _Atomic uint64_t sum_ns;
} mt_prom_hist;

void mt_prom_hist_init(mt_prom_hist *h, const double *bounds, size_t n);
/* Count one observation of `seconds` (negative counts as 0). Any thread. */
void mt_prom_hist_observe(mt_prom_hist *h, double seconds);
/* Observations so far. */
uint64_t mt_prom_hist_count(const mt_prom_hist *h);

/*
 * The HELP/TYPE lines (when help != NULL) and the _bucket, _sum and _count lines of h as metric
 * `name` with the extra labels `labels` ("op=\"allreduce\"", or "" none), into out (cap bytes,
 * NUL-terminated). Returns the length the text needs.
 */
size_t mt_prom_hist_write(const mt_prom_hist *h, const char *name, const char *labels,
                          const char *help, char *out, size_t cap);

#endif
