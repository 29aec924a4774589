/* SPDX-License-Identifier: MIT */
/*
 * coord.h — the coordinator daemon's context (mt_coord) and its internal parts.
 *
 * main.c parses flags into mt_coord_opts, opens the coordinator and runs its
 * libuv loop. One loop thread owns all state (the worker registry, the store).
 * RPCs arrive on nng threads; core/rpc hands each valid call to coord_on_call,
 * which queues it and wakes the loop with uv_async_send; the loop drains the
 * whole queue (wake-ups coalesce) and runs the handler for each call. Handlers
 * never block: SQLite statements are short and indexed; spec validation and bulk
 * reads (GetJob, GetMetrics, checkpoints) run on libuv's thread pool (jobs.c,
 * bulk.c); metric reports of one drain are stored in one commit (metrics.c). Periodic duties
 * (marking lost workers, flushing heartbeats) are uv_timers. SIGINT/SIGTERM
 * stop the loop through uv_signal; shutdown closes the RPC server first, then
 * the HTTP server, then the store.
 *
 * Several coordinators can run in one process (tests): nothing is global.
 * Tests: tests/integration/test_workers.sh (real processes).
 */
#ifndef MT_COORD_H
#define MT_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

/* The largest RPC message by default: core/rpc's MT_RPC_DEFAULT_MAX_MSG (coord.c checks that
 * they agree), spelled here so that this header, and the cores that include it, see no RPC
 * header (and so no protobuf-c.h). */
#define MT_COORD_DEFAULT_MAX_MSG (64u * 1024u * 1024u)

typedef struct mt_coord mt_coord;

typedef struct mt_coord_opts {
    const char *listen;        /* RPC address, default tcp://127.0.0.1:7400 */
    const char *http;          /* status endpoint host:port, default 127.0.0.1:7480; "" = off */
    const char *state_dir;     /* holds meshtrain.db and endpoints.json */
    const char *token;         /* required credential; NULL = none */
    int heartbeat_interval_ms; /* told to workers at registration */
    int heartbeat_timeout_ms;  /* a worker silent this long is marked lost */
    size_t max_msg_bytes;
    const char *dashboard_dir;  /* dashboard assets; NULL = source tree or install location */
    const char *metrics_listen; /* metrics PUB address; NULL = RPC host, ephemeral port */
    int sync_full;        /* 1 (default): fsync every commit, an acknowledged write survives a power
                             loss too; 0: WAL with synchronous=NORMAL, which survives kill -9 of the
                             coordinator with far fewer fsyncs */
    int stall_timeout_ms; /* a RUNNING job none of whose devices advanced this long while its
                             workers heartbeat becomes STALLED (docs/jobs.md); 0 = off */
    int stall_restart_ms; /* a job STALLED this long with a device waiting inside a collective is
                             restarted from its checkpoint like one that lost a worker (counts
                             against restart.max_restarts); 0 = never */
    const struct mt_tls *tls; /* certificate and key when listen is tls+tcp:// (the metrics
                                 stream then uses TLS too); borrowed, outlives the coordinator */
    int metrics_cache_mb;     /* cap of the HTTP metrics cache (coordinator/mcache.h) in MiB;
                                 0 = no cache (every metrics request reads the store) */
    int http_timeout_ms;      /* an HTTP request must arrive, and its response be taken, within
                                 this; idle keep-alive connections close after it */
    int http_max_conns;       /* open HTTP connections; one more is answered 503 */
    int insecure; /* 1: start without a token although an address is reachable from other
                     machines (logged as a warning); 0: refuse that (mt_coord_open) */
} mt_coord_opts;

#define MT_COORD_OPTS_DEFAULTS                                                                     \
    {                                                                                              \
        "tcp://127.0.0.1:7400", "127.0.0.1:7480", "./meshtrain-state", NULL, 1000, 10000,          \
            MT_COORD_DEFAULT_MAX_MSG, NULL, NULL, 1, 10000, 15000, NULL, 64, 10000, 512, 0         \
    }

/*
 * Open the store (creating state_dir), load the registry, listen for RPC and
 * HTTP, write state_dir/endpoints.json. Borrows opts. Returns MT_OK and *out, or
 * the first failure with err naming the file or address. Call from main thread.
 * Secure by default: without a token, an RPC, HTTP or metrics address that other machines can
 * reach (not loopback, not ipc://) is FAILED_PRECONDITION before anything is opened, unless
 * opts->insecure (docs/security.md).
 */
mt_code mt_coord_open(const mt_coord_opts *opts, mt_coord **out, mt_err *err);

/* Run the loop until SIGINT/SIGTERM or mt_coord_stop(). Returns MT_OK on a clean stop. */
mt_code mt_coord_run(mt_coord *c, mt_err *err);

/* Ask the loop to stop (thread-safe, async-signal-unsafe). */
void mt_coord_stop(mt_coord *c);

/* Close listeners and the store, free everything. NULL is a no-op. Not from the loop. */
void mt_coord_free(mt_coord *c);

#endif
