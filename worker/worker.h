/* SPDX-License-Identifier: MIT */
/*
 * worker.h — the worker daemon's context (mt_worker).
 *
 * main.c parses flags into mt_worker_opts and runs the worker. The worker owns a
 * libuv loop: a timer drives registration and heartbeats; each control RPC is a
 * blocking core/rpc call run on libuv's thread pool (uv_queue_work), one at a
 * time, and its result is applied on the loop thread. The worker keeps
 * registering until the coordinator answers, re-registers when the coordinator
 * restarts (its instance id changes) or forgets it, and exits cleanly on SIGTERM
 * or SIGINT. The task runner of the end-to-end issue plugs in here.
 * Tests: tests/integration/test_workers.sh.
 */
#ifndef MT_WORKER_H
#define MT_WORKER_H

#include "pathsafe/mt_pathsafe.h"
#include "status/mt_status.h"

typedef struct mt_worker mt_worker;

typedef struct mt_worker_opts {
    const char *coordinator; /* tcp://HOST:7400 */
    const char *name;        /* unique worker name; default: host name */
    const char *token;       /* credential; NULL = none */
    const char *data_listen; /* data-plane listener; NULL: this host's address toward the
                              * coordinator, ephemeral port (worker.c explains the rule) */
    int devices;             /* virtual CPU devices; 0 = one per core */
    int rpc_timeout_ms;      /* per control RPC */
    /* borrowed, outlives the worker: every file a task's spec names (dataset files, checkpoint
     * directories) must pass mt_pathsafe_check_data_spec / mt_pathsafe_check against it before
     * it is opened (--data-root; main.c sets the defaults when none is given) */
    const mt_pathsafe *data_roots;
    /* borrowed, outlives the worker; NULL = none: the CA (and server name) to verify a
     * tls+tcp:// coordinator with, and the certificate, key and CA of a tls+tcp:// data plane */
    const struct mt_tls *tls;
    /* borrowed, outlives the worker; NULL = none: the --metrics-listen endpoint (metrics.h) its
     * tasks record steps, collectives and checkpoints into */
    struct worker_metrics *metrics;
    /* --data-plane mpi: this process's "mpi://WORLD/RANK" (core/coll/mt_coll_mpi.h; MPI already
     * initialised by main.c), registered as its data-plane address; no listener is opened and
     * jobs run on the MPI backend. NULL: the direct transport (data_listen). */
    const char *mpi_addr;
    int mpi_blocking; /* --mpi-collectives blocking: mt_coll_mpi_opts.blocking (no deadline) */
} mt_worker_opts;

#define MT_WORKER_OPTS_DEFAULTS                                                                    \
    {                                                                                              \
        "tcp://127.0.0.1:7400", NULL, NULL, NULL, 0, 3000, NULL, NULL, NULL, NULL, 0               \
    }

/* Build the worker (no network yet). Borrows opts. MT_OK and *out, or INVALID_ARGUMENT. */
mt_code mt_worker_open(const mt_worker_opts *opts, mt_worker **out, mt_err *err);

/* Run until SIGTERM/SIGINT or mt_worker_stop(). Blocks the calling thread. */
mt_code mt_worker_run(mt_worker *w, mt_err *err);

/* Ask the worker to stop (thread-safe). */
void mt_worker_stop(mt_worker *w);

/* Free; NULL is a no-op. Not while running. */
void mt_worker_free(mt_worker *w);

#endif
