/* SPDX-License-Identifier: MIT */
/*
 * rpc_server.c — the RPC server: an nng REP socket with N contexts (mt_rpc.h).
 *
 * Each context is a slot that cycles RECV -> (APP) -> SEND -> RECV. Its aio
 * callback runs on an nng thread. In RECV it decodes and checks the envelope
 * (mt_rpc_decode_request, rpc_decode.c);
 * anything refusable is answered right there (SEND), a valid call moves to APP
 * and is handed to the application's on_call, which answers later with
 * mt_rpc_call_reply() from any thread.
 *
 * Shutdown (two phases, as nng): close() marks the server closed, closes the
 * socket (pending receives fail with NNG_ECLOSED) and stops every aio, waiting
 * for callbacks in progress. Slots the application still holds keep the server
 * alive: the memory is freed by whichever of close() and the last
 * mt_rpc_call_reply() comes second. `mu` guards closed, stopped, app_held and
 * the decision to send a reply.
 */
#include "rpc/rpc_int.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"
#include "proto/rpc.pb-c.h"
#include "tls/mt_tls.h"

enum slot_state { SLOT_RECV, SLOT_APP, SLOT_SEND };

struct mt_rpc_call {
    struct slot *slot;
    const ProtobufCMethodDescriptor *method;
    ProtobufCMessage *request; /* owned; type method->input */
    uint64_t request_id;
    int64_t deadline_ms;
    int64_t received_us; /* monotonic, for on_reply */
};

struct slot {
    mt_rpc_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    enum slot_state state;
    mt_rpc_call call;
};

struct mt_rpc_server {
    nng_socket sock;
    nng_listener listener;
    char url[256];
    const ProtobufCServiceDescriptor *service;
    size_t max_msg;
    char token[MT_RPC_TOKEN_MAX];
    int has_token;
    mt_rpc_on_call on_call;
    mt_rpc_on_reply on_reply;
    void *arg;
    int nslots;
    struct slot *slots;
    pthread_mutex_t mu;
    int closed;   /* no new receives or replies */
    int stopped;  /* close() has stopped every aio */
    int app_held; /* slots in SLOT_APP */
};

static void server_free(mt_rpc_server *srv)
{
    for (int i = 0; i < srv->nslots; i++) {
        if (srv->slots[i].aio != NULL)
            nng_aio_free(srv->slots[i].aio);
    }
    pthread_mutex_destroy(&srv->mu);
    mt_free(srv->slots);
    mt_free(srv);
}

/* Pack a Reply envelope into msg (cleared first). 0 or an nng error. */
static int pack_reply(nng_msg *msg, uint64_t request_id, mt_code code, const char *message,
                      const ProtobufCMessage *reply)
{
    Meshtrain__Rpc__Reply env = MESHTRAIN__RPC__REPLY__INIT;
    uint8_t *payload = NULL;
    size_t plen = 0, n;
    int rv;

    env.protocol_major = MT_RPC_PROTOCOL_MAJOR;
    env.protocol_minor = MT_RPC_PROTOCOL_MINOR;
    env.request_id = request_id;
    env.code = (uint32_t)code;
    env.message = (char *)(message ? message : "");
    if (code == MT_OK && reply != NULL) {
        plen = protobuf_c_message_get_packed_size(reply);
        payload = mt_malloc(plen);
        if (payload == NULL) {
            env.code = MT_RESOURCE_EXHAUSTED;
            env.message = "server out of memory packing the reply";
        } else {
            protobuf_c_message_pack(reply, payload);
            env.payload.data = payload;
            env.payload.len = plen;
        }
    }
    n = meshtrain__rpc__reply__get_packed_size(&env);
    nng_msg_clear(msg);
    rv = nng_msg_realloc(msg, n);
    if (rv == 0)
        meshtrain__rpc__reply__pack(&env, nng_msg_body(msg));
    mt_free(payload);
    return rv;
}

/* Send `msg` from slot s; on failure drop it and go back to receiving. Called without mu. */
static void slot_send(struct slot *s, nng_msg *msg)
{
    s->state = SLOT_SEND;
    nng_aio_set_msg(s->aio, msg);
    nng_ctx_send(s->ctx, s->aio);
}

static void slot_recv(struct slot *s)
{
    s->state = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
}

static void refuse(struct slot *s, nng_msg *msg, uint64_t request_id, mt_code code, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

static void refuse(struct slot *s, nng_msg *msg, uint64_t request_id, mt_code code, const char *fmt,
                   ...)
{
    char text[MT_ERR_MSG_SIZE];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    mt_log_debug("rpc %s: refused %s: %s", s->srv->url, mt_code_name(code), text);
    if (s->srv->on_reply != NULL)
        s->srv->on_reply(s->srv->arg, "", code, mt_clock_mono_us() - s->call.received_us);
    if (pack_reply(msg, request_id, code, text, NULL) != 0) {
        nng_msg_free(msg);
        slot_recv(s);
        return;
    }
    slot_send(s, msg);
}

/* A request arrived in slot s: decode, check, then refuse it or hand it to the application. */
static void on_request(struct slot *s, nng_msg *msg)
{
    mt_rpc_server *srv = s->srv;
    mt_err err = MT_ERR_INIT;
    mt_rpc_request r;
    mt_code rc;

    s->call.received_us = mt_clock_mono_us();
    rc = mt_rpc_decode_request(nng_msg_body(msg), nng_msg_len(msg), srv->service,
                               srv->has_token ? srv->token : NULL, srv->max_msg, &r, &err);
    if (rc != MT_OK) {
        refuse(s, msg, r.request_id, rc, "%s", err.msg);
        return;
    }
    s->call.slot = s;
    s->call.method = r.method;
    s->call.request = r.message; /* ownership moves to the call */
    s->call.request_id = r.request_id;
    s->call.deadline_ms = r.timeout_ms > 0 ? mt_clock_mono_ms() + (int64_t)r.timeout_ms : INT64_MAX;
    nng_msg_free(msg);
    pthread_mutex_lock(&srv->mu);
    s->state = SLOT_APP;
    srv->app_held++;
    pthread_mutex_unlock(&srv->mu);
    srv->on_call(srv->arg, &s->call);
}

static void slot_cb(void *arg)
{
    struct slot *s = arg;
    mt_rpc_server *srv = s->srv;
    int rv = nng_aio_result(s->aio);
    int closed;

    pthread_mutex_lock(&srv->mu);
    closed = srv->closed;
    pthread_mutex_unlock(&srv->mu);

    if (s->state == SLOT_SEND) {
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        if (!closed)
            slot_recv(s);
        return;
    }
    /* SLOT_RECV */
    if (rv != 0) {
        if (!closed && rv != NNG_ECLOSED)
            slot_recv(s);
        return;
    }
    if (closed) {
        nng_msg_free(nng_aio_get_msg(s->aio));
        return;
    }
    on_request(s, nng_aio_get_msg(s->aio));
}

mt_code mt_rpc_server_open(const mt_rpc_server_opts *o, mt_rpc_server **out, mt_err *err)
{
    mt_rpc_server *srv;
    int rv, port = 0;
    mt_code rc;

    *out = NULL;
    if (o == NULL || o->url == NULL || o->service == NULL || o->on_call == NULL ||
        o->contexts <= 0 || o->max_msg_bytes == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "rpc server: url, service, on_call, "
                          "contexts and max_msg_bytes are required");
    if (o->token != NULL && strlen(o->token) >= MT_RPC_TOKEN_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "rpc server: token too long");
    srv = mt_calloc(1, sizeof(*srv));
    if (srv == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "rpc server %s: out of memory", o->url);
    srv->slots = mt_calloc((size_t)o->contexts, sizeof(*srv->slots));
    if (srv->slots == NULL) {
        mt_free(srv);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "rpc server %s: out of memory", o->url);
    }
    pthread_mutex_init(&srv->mu, NULL);
    srv->service = o->service;
    srv->max_msg = o->max_msg_bytes;
    srv->on_call = o->on_call;
    srv->on_reply = o->on_reply;
    srv->arg = o->arg;
    srv->nslots = o->contexts;
    if (o->token != NULL && o->token[0] != '\0') {
        snprintf(srv->token, sizeof(srv->token), "%s", o->token);
        srv->has_token = 1;
    }
    snprintf(srv->url, sizeof(srv->url), "%s", o->url);

    if ((rv = nng_rep0_open(&srv->sock)) != 0) {
        rc = mt_err_set(err, mt_rpc_code_from_nng(rv), "rpc server %s: %s", o->url,
                        nng_strerror(rv));
        server_free(srv);
        return rc;
    }
    /* Requests up to 2 x max + 1 MiB are received and refused with a reply;
     * larger ones make nng drop the connection (the client sees UNAVAILABLE). */
    nng_socket_set_size(srv->sock, NNG_OPT_RECVMAXSZ,
                        o->max_msg_bytes > SIZE_MAX / 4 ? SIZE_MAX
                                                        : o->max_msg_bytes * 2 + (1u << 20));
    for (int i = 0; i < srv->nslots; i++) {
        struct slot *s = &srv->slots[i];
        s->srv = srv;
        if ((rv = nng_aio_alloc(&s->aio, slot_cb, s)) != 0 ||
            (rv = nng_ctx_open(&s->ctx, srv->sock)) != 0) {
            rc = mt_err_set(err, mt_rpc_code_from_nng(rv), "rpc server %s: %s", o->url,
                            nng_strerror(rv));
            goto fail;
        }
    }
    if ((rc = mt_tls_listen(srv->sock, o->url, o->tls, 0, &srv->listener, err)) != MT_OK)
        goto fail;
    if ((strncmp(o->url, "tcp", 3) == 0 || mt_tls_url_is_tls(o->url)) &&
        nng_listener_get_int(srv->listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0) {
        const char *colon = strrchr(o->url, ':');
        int prefix = colon ? (int)(colon - o->url) : (int)strlen(o->url);
        snprintf(srv->url, sizeof(srv->url), "%.*s:%d", prefix, o->url, port);
    }
    for (int i = 0; i < srv->nslots; i++)
        slot_recv(&srv->slots[i]);
    *out = srv;
    return MT_OK;
fail:
    nng_close(srv->sock);
    server_free(srv);
    return rc;
}

const char *mt_rpc_server_url(const mt_rpc_server *srv)
{
    return srv->url;
}

void mt_rpc_server_close(mt_rpc_server *srv)
{
    int free_now;

    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->closed = 1;
    pthread_mutex_unlock(&srv->mu);
    nng_close(srv->sock);
    for (int i = 0; i < srv->nslots; i++)
        nng_aio_stop(srv->slots[i].aio);
    pthread_mutex_lock(&srv->mu);
    srv->stopped = 1;
    free_now = srv->app_held == 0;
    pthread_mutex_unlock(&srv->mu);
    if (free_now)
        server_free(srv);
}

const ProtobufCMethodDescriptor *mt_rpc_call_method(const mt_rpc_call *call)
{
    return call->method;
}

const ProtobufCMessage *mt_rpc_call_request(const mt_rpc_call *call)
{
    return call->request;
}

int64_t mt_rpc_call_deadline_ms(const mt_rpc_call *call)
{
    return call->deadline_ms;
}

int mt_rpc_call_expired(const mt_rpc_call *call)
{
    return call->deadline_ms != INT64_MAX && mt_clock_mono_ms() > call->deadline_ms;
}

void mt_rpc_call_reply(mt_rpc_call *call, mt_code code, const char *message,
                       const ProtobufCMessage *reply)
{
    struct slot *s = call->slot;
    mt_rpc_server *srv = s->srv;
    nng_msg *msg = NULL;
    int closed, free_now = 0;

    if (nng_msg_alloc(&msg, 0) != 0 ||
        pack_reply(msg, call->request_id, code, message, reply) != 0) {
        if (msg != NULL)
            nng_msg_free(msg);
        msg = NULL;
    }
    protobuf_c_message_free_unpacked(call->request, NULL);
    call->request = NULL;
    if (srv->on_reply != NULL)
        srv->on_reply(srv->arg, call->method->name, code, mt_clock_mono_us() - call->received_us);

    pthread_mutex_lock(&srv->mu);
    srv->app_held--;
    closed = srv->closed;
    if (!closed) {
        if (msg != NULL)
            slot_send(s, msg); /* async: never blocks, never calls back inline */
        else
            slot_recv(s);
        msg = NULL;
    } else {
        free_now = srv->stopped && srv->app_held == 0;
    }
    pthread_mutex_unlock(&srv->mu);
    if (msg != NULL)
        nng_msg_free(msg);
    if (free_now)
        server_free(srv);
}
