/* SPDX-License-Identifier: MIT */
/*
 * http_act.c — the dashboard's actions: cancel a job and submit one (the page's "Resubmit"),
 * as POST requests under /api/v1 (docs/api.md, "Actions").
 *
 * How it fits: http_api.c's route table sends POST /api/v1/jobs and POST
 * /api/v1/jobs/{id}/cancel here, after http.c has checked the request's credentials. Each
 * action is an RPC (SubmitJob, CancelJob) to the coordinator's own in-process listener
 * (inproc://meshtrain-coordinator-INSTANCE, opened by coord.c next to the network one) with the
 * coordinator's token, so the loop thread validates and applies it exactly as it does a call
 * from the CLI, and nothing here touches the loop's state.
 *
 * Who may act: only a coordinator with a token offers actions, and http.c has already required
 * that token (cookie or bearer) of the request. Without a token the status endpoint stays
 * read-only (403 PERMISSION_DENIED), as it was. A cross-site page cannot act for a signed-in
 * user: the cookie is SameSite=Strict and an action needs a JSON body (a form cannot send one,
 * and a cross-origin fetch with it needs a CORS preflight this server never grants).
 *
 * Threading: HTTP handler threads; the RPC client is thread-safe, opened on first use under
 * act_mu. Each action blocks for its RPC, at most ACT_TIMEOUT_MS.
 * Tests: tests/integration/test_dashboard.sh (cancel from the page in Chromium),
 * test_http_api.sh (the API answers).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "coordinator/http_int.h"
#include "proto/coordinator.pb-c.h"

#define ACT_TIMEOUT_MS 10000

/* The RPC client to the in-process listener, opened on first use. NULL with r filled. */
static mt_rpc_client *act_client(coord_http_ctx *ctx, coord_http_reply *r)
{
    mt_rpc_client_opts o = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    mt_rpc_client *cli;

    pthread_mutex_lock(&ctx->act_mu);
    if (ctx->act_cli == NULL) {
        o.url = ctx->local_url;
        o.token = ctx->token;
        if (mt_rpc_client_open(&o, &ctx->act_cli, &err) != MT_OK) {
            pthread_mutex_unlock(&ctx->act_mu);
            coord_http__error(r, coord_http__status_of(err.code), err.code, err.msg);
            return NULL;
        }
    }
    cli = ctx->act_cli;
    pthread_mutex_unlock(&ctx->act_mu);
    return cli;
}

/* Whether the request may act: a token is configured and the body is JSON. Fills r when not. */
static bool act_allowed(const coord_http_ctx *ctx, const coord_http_call *call, coord_http_reply *r)
{
    const char *ct = call->content_type;

    if (ctx->token[0] == '\0' || ctx->local_url[0] == '\0') {
        coord_http__error(r, 403, MT_PERMISSION_DENIED,
                          "this coordinator has no token, so its status endpoint is read-only: "
                          "start it with --token-file to act from the dashboard, or use the CLI "
                          "(meshtrain cancel / meshtrain submit)");
        return false;
    }
    if (ct == NULL || strncasecmp(ct, "application/json", 16) != 0) {
        coord_http__error(r, 415, MT_INVALID_ARGUMENT,
                          "an action needs a JSON body (Content-Type: application/json)");
        return false;
    }
    return true;
}

/* Run method with req; on OK *rep is owned by the caller. Fills r on failure. */
static bool act_call(coord_http_ctx *ctx, const char *method, const ProtobufCMessage *req,
                     ProtobufCMessage **rep, coord_http_reply *r)
{
    mt_err err = MT_ERR_INIT;
    mt_rpc_client *cli = act_client(ctx, r);

    if (cli == NULL)
        return false;
    if (mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, method, req, rep,
                           ACT_TIMEOUT_MS, &err) != MT_OK) {
        coord_http__error(r, coord_http__status_of(err.code), err.code, err.msg);
        return false;
    }
    return true;
}

void coord_http__act_cancel(coord_http_ctx *ctx, const coord_http_call *call, const char *id,
                            coord_http_reply *r)
{
    Meshtrain__CancelJobRequest req = MESHTRAIN__CANCEL_JOB_REQUEST__INIT;
    Meshtrain__CancelJobReply *rep = NULL;

    if (!act_allowed(ctx, call, r))
        return;
    req.job_id = (char *)id;
    if (!act_call(ctx, "CancelJob", &req.base, (ProtobufCMessage **)&rep, r))
        return;
    r->status = 200;
    r->content_type = "application/json; charset=utf-8";
    coord_buf_puts(&r->body, "{\"job_id\":");
    coord_buf_json_str(&r->body, id);
    coord_buf_puts(&r->body, ",\"state\":");
    coord_buf_json_str(&r->body, rep->state);
    coord_buf_puts(&r->body, "}\n");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* The optional string field key of o into out ("" when absent); false when not a string. */
static bool opt_str(const cJSON *o, const char *key, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    *out = "";
    if (v == NULL || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v))
        return false;
    *out = v->valuestring;
    return true;
}

void coord_http__act_submit(coord_http_ctx *ctx, const coord_http_call *call, coord_http_reply *r)
{
    Meshtrain__SubmitJobRequest req = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
    Meshtrain__SubmitJobReply *rep = NULL;
    cJSON *root, *spec, *prio;
    char *spec_text = NULL;
    const char *name, *request_id;

    if (!act_allowed(ctx, call, r))
        return;
    root = cJSON_ParseWithLength(call->body, call->body_len);
    if (root == NULL || !cJSON_IsObject(root)) {
        coord_http__error(r, 400, MT_INVALID_ARGUMENT,
                          "the body is not a JSON object: expected {\"spec\": {...}}");
        goto done;
    }
    spec = cJSON_GetObjectItemCaseSensitive(root, "spec");
    prio = cJSON_GetObjectItemCaseSensitive(root, "priority");
    if (spec == NULL || !(cJSON_IsObject(spec) || cJSON_IsString(spec))) {
        coord_http__error(r, 400, MT_INVALID_ARGUMENT,
                          "field spec: required, the job spec as a JSON object (or its text)");
        goto done;
    }
    if (!opt_str(root, "name", &name) || !opt_str(root, "request_id", &request_id) ||
        (prio != NULL && !cJSON_IsNull(prio) &&
         (!cJSON_IsNumber(prio) || prio->valuedouble != (double)(int32_t)prio->valuedouble))) {
        coord_http__error(r, 400, MT_INVALID_ARGUMENT,
                          "fields name and request_id are strings, priority an integer");
        goto done;
    }
    spec_text = cJSON_IsString(spec) ? NULL : cJSON_PrintUnformatted(spec);
    if (!cJSON_IsString(spec) && spec_text == NULL) {
        coord_http__error(r, 503, MT_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    req.spec_json = spec_text != NULL ? spec_text : spec->valuestring;
    req.name = (char *)name;
    req.request_id = (char *)request_id;
    req.priority = prio != NULL && cJSON_IsNumber(prio) ? (int32_t)prio->valuedouble : 0;
    if (!act_call(ctx, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, r))
        goto done;
    r->status = 201;
    r->content_type = "application/json; charset=utf-8";
    coord_buf_puts(&r->body, "{\"job_id\":");
    coord_buf_json_str(&r->body, rep->job_id);
    coord_buf_puts(&r->body, "}\n");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
done:
    cJSON_free(spec_text);
    cJSON_Delete(root);
}

void coord_http__act_fini(coord_http_ctx *ctx)
{
    mt_rpc_client_close(ctx->act_cli);
    ctx->act_cli = NULL;
}
