/* SPDX-License-Identifier: MIT */
/*
 * coord_int.h — the coordinator's private state, shared by its files
 * (coord.c: loop and dispatch; workers.c: registry; http.c: status endpoint).
 * Every field is owned by the loop thread unless its comment says otherwise.
 */
#ifndef MT_COORD_INT_H
#define MT_COORD_INT_H

#include <pthread.h>
#include <uv.h>

#include "coordinator/coord.h"
#include "proto/coordinator.pb-c.h"
#include "storage/mt_store.h"

struct coord_http;

/* One registered worker as the loop sees it (the store holds the durable copy). */
typedef struct coord_worker {
    mt_store_worker rec;       /* durable fields; rec.devices owned */
    int64_t last_seen_mono_ms; /* monotonic time of the last register/heartbeat */
    int hb_dirty;              /* rec.last_heartbeat_ms not yet flushed to the store */
} coord_worker;

struct mt_coord {
    mt_coord_opts opts;
    char listen_url[256];
    char state_dir[1024];
    char token[MT_RPC_TOKEN_MAX];
    char instance[33]; /* random per start; workers re-register when it changes */
    uv_loop_t loop;
    uv_async_t wake;    /* nng threads -> loop */
    uv_async_t stopper; /* mt_coord_stop from any thread */
    uv_timer_t sweep;   /* lost-worker detection + heartbeat flush */
    uv_signal_t sigint, sigterm;
    int handles_open; /* closed handles not yet called back */
    mt_store *store;
    mt_rpc_server *rpc;
    struct coord_http *http;

    pthread_mutex_t qmu; /* guards the call queue (nng threads push) */
    mt_rpc_call **queue;
    size_t qlen, qcap;

    coord_worker *workers; /* registry, loop thread only */
    size_t n_workers, cap_workers;
    int64_t last_flush_mono_ms;
};

/* ---- workers.c ---- */
mt_code coord_workers_load(mt_coord *c, mt_err *err);
void coord_workers_free(mt_coord *c);
void coord_workers_sweep(mt_coord *c); /* mark lost, flush heartbeats; loop thread */
void coord_handle_register(mt_coord *c, mt_rpc_call *call);
void coord_handle_heartbeat(mt_coord *c, mt_rpc_call *call);
void coord_handle_list_workers(mt_coord *c, mt_rpc_call *call);

/* ---- http.c ---- */
mt_code coord_http_open(mt_coord *c, const char *addr, struct coord_http **out, char *bound,
                        size_t cap, mt_err *err);
void coord_http_close(struct coord_http *h);

#endif
