/* SPDX-License-Identifier: MIT */
/*
 * http_reply.c — what every HTTP endpoint shares (http_int.h): the HTTP status of an mt_code,
 * the JSON error body, and the locked read-only store. Below the router (http.c) and the
 * endpoints (http_api.c, http_prom.c), so those never call each other for it.
 * Threading: the HTTP server's handler threads; the store under ctx->mu.
 * Tests: tests/integration/test_http_api.sh.
 */
#include "coordinator/http_int.h"

#define JSON_TYPE "application/json; charset=utf-8"

int coord_http__status_of(mt_code code)
{
    switch (code) {
    case MT_OK:
        return 200;
    case MT_INVALID_ARGUMENT:
    case MT_OUT_OF_RANGE:
        return 400;
    case MT_UNAUTHENTICATED:
        return 401;
    case MT_PERMISSION_DENIED:
        return 403;
    case MT_NOT_FOUND:
        return 404;
    case MT_UNAVAILABLE:
    case MT_RESOURCE_EXHAUSTED:
        return 503;
    default:
        return 500;
    }
}

void coord_http__error(coord_http_reply *r, int status, mt_code code, const char *msg)
{
    coord_buf_fini(&r->body);
    r->status = status;
    r->content_type = JSON_TYPE;
    coord_buf_printf(&r->body, "{\"error\":{\"code\":\"%s\",\"http_status\":%d,\"message\":",
                     mt_code_name(code), status);
    coord_buf_json_str(&r->body, msg);
    coord_buf_puts(&r->body, "}}\n");
}

mt_store *coord_http__store_lock(coord_http_ctx *ctx, mt_err *err)
{
    pthread_mutex_lock(&ctx->mu);
    if (ctx->ro == NULL && mt_store_open_readonly(ctx->db_path, &ctx->ro, err) != MT_OK) {
        pthread_mutex_unlock(&ctx->mu);
        return NULL;
    }
    return ctx->ro;
}
