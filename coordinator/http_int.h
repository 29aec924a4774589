/* SPDX-License-Identifier: MIT */
/*
 * http_int.h — private glue of the coordinator's HTTP status endpoint: the
 * request context the router passes to each endpoint, the helpers every endpoint
 * shares (http_reply.c), and the endpoint functions of http_api.c (JSON API) and
 * http_prom.c (Prometheus). Bodies are built in a coord_buf (buf.h).
 *
 * Threading: endpoint functions run on the HTTP server's handler threads. They read the
 * database only through the read-only store in the context, holding its mutex
 * (coord_http_ctx.mu) for the whole read; they never touch the loop's state.
 * Tests: tests/integration/test_http_api.sh, test_dashboard.sh.
 */
#ifndef MT_COORD_HTTP_INT_H
#define MT_COORD_HTTP_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/buf.h"
#include "coordinator/stats.h"
#include "rpc/mt_rpc.h"
#include "status/mt_status.h"
#include "storage/mt_store.h"

/* What every endpoint gets: the read-only store and the process stats. */
typedef struct coord_http_ctx {
    pthread_mutex_t mu; /* serialises every use of ro (nng runs handlers on several threads) */
    mt_store *ro;       /* read-only connection, opened lazily under mu; NULL until then */
    char db_path[1100];
    char state_dir[1024];        /* checkpoint downloads are files under it */
    const coord_stats *stats;    /* borrowed from mt_coord; NULL = no process metrics */
    struct coord_mcache *mcache; /* metric series cache (mcache.h), owned; NULL = off */
    struct coord_http_page {     /* rendered GET /api/v1/jobs answers (http_api.c), under mu */
        uint64_t gen;            /* coord_stats_jobs_gen when rendered */
        char query[256];         /* the query string it answers */
        char *body;              /* owned; NULL = empty slot */
        size_t len;
    } pages[8];
    size_t next_page; /* the slot the next miss replaces */
    /* the dashboard's actions (http_act.c): RPCs to the coordinator's in-process listener */
    char local_url[96];           /* "" = no actions */
    char token[MT_RPC_TOKEN_MAX]; /* the coordinator's token; "" = none: actions refused */
    pthread_mutex_t act_mu;       /* guards act_cli */
    mt_rpc_client *act_cli;       /* opened on the first action; owned */
} coord_http_ctx;

/* The result of an endpoint: HTTP status, content type and body (owned by the caller). */
typedef struct coord_http_reply {
    int status;
    const char *content_type;
    coord_buf body;
    /* instead of body: send this file (a checkpoint download), read after the store's lock is
     * released, named `filename` for the browser ("" = none) */
    char file[1100];
    char filename[96];
} coord_http_reply;

/* A request as the API sees it: method, path (no query), query ("" none), body. */
typedef struct coord_http_call {
    const char *method; /* "GET", "HEAD" or "POST" */
    const char *path;
    const char *query;
    const char *body; /* "" when none */
    size_t body_len;
    const char *content_type; /* the request's Content-Type; NULL when absent */
} coord_http_call;

/* ---- http_reply.c ---- */
/* Locks ctx->mu and returns the read-only store (opening it on first use), or unlocks and
 * returns NULL with err set. On success the caller unlocks ctx->mu when done. */
mt_store *coord_http__store_lock(coord_http_ctx *ctx, mt_err *err);

/* Fill r with a JSON error body {"error": {"code": NAME, "message": msg}} and HTTP status. */
void coord_http__error(coord_http_reply *r, int status, mt_code code, const char *msg);

/* HTTP status for an mt_code (NOT_FOUND 404, INVALID_ARGUMENT 400, UNAVAILABLE 503 ...). */
int coord_http__status_of(mt_code code);

/*
 * http_api.c: serve a request under /api/v1/ into r (GET and HEAD read; POST runs an action of
 * http_act.c). Always fills r (errors as JSON with 4xx/5xx; a method a path does not take: 405).
 */
void coord_http__api(coord_http_ctx *ctx, const coord_http_call *call, coord_http_reply *r);

/* ---- http_act.c: the dashboard's actions, each an RPC to the coordinator's in-process
 * listener with its token (so the loop thread applies them exactly as it applies the CLI's).
 * They need a configured token (403 PERMISSION_DENIED otherwise; the caller has already checked
 * the request's credentials) and a JSON body (Content-Type: application/json, so a cross-site
 * form cannot post one). Any handler thread; blocks for the RPC (up to 10 s). */

/* POST /api/v1/jobs/{id}/cancel: CancelJob; 200 {"job_id", "state"}. */
void coord_http__act_cancel(coord_http_ctx *ctx, const coord_http_call *call, const char *id,
                            coord_http_reply *r);
/* POST /api/v1/jobs {"spec": OBJECT|STRING, "name"?, "priority"?, "request_id"?}: SubmitJob;
 * 201 {"job_id"}. */
void coord_http__act_submit(coord_http_ctx *ctx, const coord_http_call *call, coord_http_reply *r);
/* Close the actions' RPC client (at close). */
void coord_http__act_fini(coord_http_ctx *ctx);

/* http_api.c: free the kept GET /api/v1/jobs answers (at close). */
void coord_http__pages_free(coord_http_ctx *ctx);

/* http_prom.c: GET /metrics into r (text/plain; version=0.0.4). */
void coord_http__prom(coord_http_ctx *ctx, coord_http_reply *r);

#endif
