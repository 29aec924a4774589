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
#include "status/mt_status.h"
#include "storage/mt_store.h"

/* What every endpoint gets: the read-only store and the process stats. */
typedef struct coord_http_ctx {
    pthread_mutex_t mu; /* serialises every use of ro (nng runs handlers on several threads) */
    mt_store *ro;       /* read-only connection, opened lazily under mu; NULL until then */
    char db_path[1100];
    const coord_stats *stats;    /* borrowed from mt_coord; NULL = no process metrics */
    struct coord_mcache *mcache; /* metric series cache (mcache.h), owned; NULL = off */
    struct coord_http_page {     /* rendered GET /api/v1/jobs answers (http_api.c), under mu */
        uint64_t gen;            /* coord_stats_jobs_gen when rendered */
        char query[256];         /* the query string it answers */
        char *body;              /* owned; NULL = empty slot */
        size_t len;
    } pages[8];
    size_t next_page; /* the slot the next miss replaces */
} coord_http_ctx;

/* The result of an endpoint: HTTP status, content type and body (owned by the caller). */
typedef struct coord_http_reply {
    int status;
    const char *content_type;
    coord_buf body;
} coord_http_reply;

/* ---- http_reply.c ---- */
/* Locks ctx->mu and returns the read-only store (opening it on first use), or unlocks and
 * returns NULL with err set. On success the caller unlocks ctx->mu when done. */
mt_store *coord_http__store_lock(coord_http_ctx *ctx, mt_err *err);

/* Fill r with a JSON error body {"error": {"code": NAME, "message": msg}} and HTTP status. */
void coord_http__error(coord_http_reply *r, int status, mt_code code, const char *msg);

/* HTTP status for an mt_code (NOT_FOUND 404, INVALID_ARGUMENT 400, UNAVAILABLE 503 ...). */
int coord_http__status_of(mt_code code);

/*
 * http_api.c: serve GET path?query under /api/v1/ (path without the query; query may be NULL
 * or "") into r. Always fills r (errors as JSON with 4xx/5xx).
 */
void coord_http__api(coord_http_ctx *ctx, const char *path, const char *query, coord_http_reply *r);

/* http_api.c: free the kept GET /api/v1/jobs answers (at close). */
void coord_http__pages_free(coord_http_ctx *ctx);

/* http_prom.c: GET /metrics into r (text/plain; version=0.0.4). */
void coord_http__prom(coord_http_ctx *ctx, coord_http_reply *r);

#endif
