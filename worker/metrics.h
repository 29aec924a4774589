/* SPDX-License-Identifier: MIT */
/*
 * metrics.h — the worker's Prometheus endpoint (--metrics-listen HOST:PORT, docs/cli.md):
 * GET /metrics answers the worker's own numbers in the text format 0.0.4: step time, collective
 * time, calls, bytes and failures (a deadline that expired is a stall), checkpoint uploads (time,
 * size, outcome), running tasks, and the process_* families with meshtrain_build_info.
 *
 * How it fits: main.c opens it when the flag is given and hands it to the worker (worker.h),
 * which passes it to the task table; task.c records steps and checkpoints, and every collective
 * world a task builds reports to it (mt_coll_world_opts.observe). A NULL worker_metrics is
 * valid everywhere and records nothing. The HTTP server is core/httpd (limits and timeouts as
 * the coordinator's); with a token, /metrics requires it (Authorization: Bearer), as the
 * coordinator's /metrics does.
 *
 * Threading: the record functions are lock-free (atomics) and run on device and task threads;
 * the endpoint's handler runs on the server's threads. open/close on the main thread.
 * Tests: tests/integration/test_worker_metrics.sh (promtool check metrics), test_grafana.sh.
 */
#ifndef MT_WORKER_METRICS_H
#define MT_WORKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

typedef struct worker_metrics worker_metrics;

/*
 * Listen on addr ("HOST:PORT"; port 0 picks one) and serve /metrics (and /healthz). token
 * (copied; NULL or "" = none) is then required on /metrics. On OK *out is owned
 * (worker_metrics_close) and bound gets "http://IP:PORT". Codes: INVALID_ARGUMENT (address),
 * UNAVAILABLE (cannot bind), RESOURCE_EXHAUSTED.
 */
mt_code worker_metrics_open(const char *addr, const char *token, worker_metrics **out, char *bound,
                            size_t cap, mt_err *err);

/* Stop the endpoint (waits for requests in progress) and free. NULL: no-op. */
void worker_metrics_close(worker_metrics *m);

/* One training step of this worker's devices took `seconds`. */
void worker_metrics_step(worker_metrics *m, double seconds);

/* A collective ended (the mt_coll_world_opts.observe signature; arg is a worker_metrics *). */
void worker_metrics_collective(void *arg, const char *op, uint64_t bytes, int64_t ns, mt_code rc);

/* A checkpoint of `bytes` went to the coordinator in `seconds` (rc: OK uploaded,
 * RESOURCE_EXHAUSTED skipped, anything else failed). */
void worker_metrics_checkpoint(worker_metrics *m, double seconds, uint64_t bytes, mt_code rc);

/* A task started (+1) or ended (-1) on this worker. */
void worker_metrics_task(worker_metrics *m, int delta);

#endif
