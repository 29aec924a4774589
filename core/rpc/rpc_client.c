/* SPDX-License-Identifier: MIT */
/*
 * rpc_client.c — the blocking, thread-safe RPC client (mt_rpc.h).
 *
 * One REQ socket per client; each call opens its own nng context, so calls from
 * several threads proceed concurrently. Opening dials the REQ socket without
 * blocking and waits, bounded by connect_timeout_ms, for the handshake; if none
 * comes within 100 ms (300 ms for tls+tcp://) the address is probed with a stream
 * dial (mt_tls_probe, core/tls) so "nothing listens" is UNAVAILABLE and a server
 * certificate that does not verify UNAUTHENTICATED at once with the reason, and
 * an unreachable host cannot hang the caller. The socket then reconnects by itself. A pipe counter
 * maintained by nng's pipe notifications tells a dead connection (UNAVAILABLE) from a slow server
 * (DEADLINE_EXCEEDED) when a call times out.
 */
#include "rpc/rpc_int.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "proto/rpc.pb-c.h"
#include "tls/mt_tls.h"

struct mt_rpc_client {
    nng_socket sock;
    char url[256];
    char token[MT_RPC_TOKEN_MAX];
    mt_tls *tls;      /* a reference held (mt_tls_hold); NULL = none */
    atomic_int pipes; /* connected pipes (nng pipe notifications) */
    atomic_uint_least64_t next_id;
};

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    mt_rpc_client *cli = arg;

    (void)p;
    if (ev == NNG_PIPE_EV_ADD_POST)
        atomic_fetch_add(&cli->pipes, 1);
    else if (ev == NNG_PIPE_EV_REM_POST)
        atomic_fetch_sub(&cli->pipes, 1);
}

/* Wait (bounded) for the REQ socket's SP handshake. 1 when a pipe is up. */
static int wait_pipe(mt_rpc_client *cli, int64_t until)
{
    while (atomic_load(&cli->pipes) == 0 && mt_clock_mono_ms() < until)
        nng_msleep(1);
    return atomic_load(&cli->pipes) > 0;
}

mt_code mt_rpc_client_open(const mt_rpc_client_opts *o, mt_rpc_client **out, mt_err *err)
{
    int timeout = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    int64_t start = mt_clock_mono_ms();
    mt_rpc_client *cli;
    mt_code rc;
    int rv, first;

    *out = NULL;
    if (o == NULL || o->url == NULL || o->url[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "rpc client: no address given");
    if (o->token != NULL && strlen(o->token) >= MT_RPC_TOKEN_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "rpc client: token too long");
    cli = mt_calloc(1, sizeof(*cli));
    if (cli == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "rpc client %s: out of memory", o->url);
    snprintf(cli->url, sizeof(cli->url), "%s", o->url);
    snprintf(cli->token, sizeof(cli->token), "%s", o->token ? o->token : "");
    atomic_init(&cli->pipes, 0);
    atomic_init(&cli->next_id, 1);
    if ((rv = nng_req0_open(&cli->sock)) != 0) {
        mt_free(cli);
        return mt_err_set(err, mt_rpc_code_from_nng(rv), "rpc client %s: %s", o->url,
                          nng_strerror(rv));
    }
    nng_socket_set_size(cli->sock, NNG_OPT_RECVMAXSZ,
                        o->max_msg_bytes ? o->max_msg_bytes : MT_RPC_DEFAULT_MAX_MSG);
    /* TLS: no redial while open() waits and probes. nng 1.5.2 leaks the listener's socket of a
     * TLS connection cut mid-handshake (measured: 6 coordinator fds per 20 failed opens of a
     * worker with the wrong CA at 50 ms, 1 at 1000 ms), and closing the socket after a failed
     * open cuts the redial in flight. */
    nng_socket_set_ms(cli->sock, NNG_OPT_RECONNMINT, mt_tls_url_is_tls(o->url) ? 1000 : 50);
    nng_socket_set_ms(cli->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_pipe_notify(cli->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, cli);
    nng_pipe_notify(cli->sock, NNG_PIPE_EV_REM_POST, pipe_cb, cli);
    cli->tls = mt_tls_hold(o->tls);
    if ((rc = mt_tls_dial(cli->sock, o->url, o->tls, NNG_FLAG_NONBLOCK, err)) != MT_OK)
        goto fail;
    /* A live server completes the handshake in well under 100 ms. Only when it
     * does not is the address probed, to report why (refused, unreachable) at
     * once. Probing a live server is avoided: nng 1.5.2 leaks a listener-side
     * pipe for every connection that closes before the SP handshake. */
    first = mt_tls_url_is_tls(o->url) ? 300 : 100; /* a TLS handshake takes longer */
    if (!wait_pipe(cli, start + (timeout < first ? timeout : first))) {
        int64_t left = start + timeout - mt_clock_mono_ms();
        if ((rc = mt_tls_probe(o->url, o->tls, left > 0 ? (int)left : 1, err)) != MT_OK)
            goto fail;
        if (!wait_pipe(cli, start + timeout)) {
            rc = mt_err_set(err, MT_UNAVAILABLE,
                            "connect %s: no meshtrain server answered within %d ms", o->url,
                            timeout);
            goto fail;
        }
    }
    *out = cli;
    return MT_OK;
fail:
    nng_close(cli->sock);
    mt_tls_free(cli->tls);
    mt_free(cli);
    return rc;
}

const mt_tls *mt_rpc_client_tls(const mt_rpc_client *cli)
{
    return cli->tls;
}

/* nng 1.5.2's nng_close can wait forever for a pipe it never reaps (nanomsg/nng#1543; seen
 * after a frame the server dropped). The close runs on a thread of its own; the caller waits
 * for it CLOSE_LIMIT_MS at most and then leaves it (and the client's memory) behind. */
#define CLOSE_LIMIT_MS 5000

typedef struct closer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, abandoned;
    mt_rpc_client *cli;
} closer;

static void closer_free(closer *k)
{
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    mt_free(k);
}

static void *close_thread(void *arg)
{
    closer *k = arg;
    int abandoned;

    nng_close(k->cli->sock);
    mt_tls_free(k->cli->tls);
    mt_free(k->cli);
    pthread_mutex_lock(&k->mu);
    k->done = 1;
    abandoned = k->abandoned;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (abandoned) /* the caller left: the last one out frees */
        closer_free(k);
    return NULL;
}

void mt_rpc_client_close(mt_rpc_client *cli)
{
    closer *k;
    pthread_t t;
    struct timespec until;
    int done;

    if (cli == NULL)
        return;
    k = mt_calloc(1, sizeof(*k));
    if (k == NULL || pthread_mutex_init(&k->mu, NULL) != 0) {
        mt_free(k);
        k = NULL;
    } else if (pthread_cond_init(&k->cv, NULL) != 0) {
        pthread_mutex_destroy(&k->mu);
        mt_free(k);
        k = NULL;
    }
    if (k != NULL) {
        k->cli = cli;
        if (pthread_create(&t, NULL, close_thread, k) != 0) {
            closer_free(k);
            k = NULL;
        }
    }
    if (k == NULL) { /* no thread: close here, unbounded */
        nng_close(cli->sock);
        mt_tls_free(cli->tls);
        mt_free(cli);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLOSE_LIMIT_MS / 1000;
    pthread_mutex_lock(&k->mu);
    while (!k->done && pthread_cond_timedwait(&k->cv, &k->mu, &until) == 0)
        ;
    done = k->done;
    if (!done)
        k->abandoned = 1;
    pthread_mutex_unlock(&k->mu);
    if (done) {
        pthread_join(t, NULL);
        closer_free(k);
    } else {
        pthread_detach(t);
    }
}

/* Send `req` bytes on a fresh context and wait for the reply message (returned owned). */
static mt_code exchange(mt_rpc_client *cli, nng_msg *req, int timeout_ms, nng_msg **reply,
                        const char *what, mt_err *err)
{
    nng_ctx ctx;
    nng_aio *aio = NULL;
    int64_t until = mt_clock_mono_ms() + timeout_ms;
    int rv;

    *reply = NULL;
    if ((rv = nng_ctx_open(&ctx, cli->sock)) != 0) {
        nng_msg_free(req);
        return mt_err_set(err, mt_rpc_code_from_nng(rv), "%s to %s: %s", what, cli->url,
                          nng_strerror(rv));
    }
    if ((rv = nng_aio_alloc(&aio, NULL, NULL)) != 0) {
        nng_msg_free(req);
        nng_ctx_close(ctx);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: %s", what, nng_strerror(rv));
    }
    nng_aio_set_timeout(aio, timeout_ms);
    nng_aio_set_msg(aio, req);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    if ((rv = nng_aio_result(aio)) == 0) {
        int64_t left = until - mt_clock_mono_ms();
        nng_aio_set_timeout(aio, left > 0 ? (nng_duration)left : 1);
        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv == 0)
            *reply = nng_aio_get_msg(aio);
    } else {
        nng_msg_free(req);
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    if (rv == NNG_ETIMEDOUT && atomic_load(&cli->pipes) == 0)
        return mt_err_set(err, MT_UNAVAILABLE, "%s: no connection to %s", what, cli->url);
    if (rv == NNG_ETIMEDOUT)
        return mt_err_set(err, MT_DEADLINE_EXCEEDED, "%s to %s: no reply within %d ms", what,
                          cli->url, timeout_ms);
    if (rv != 0)
        return mt_err_set(err, mt_rpc_code_from_nng(rv), "%s to %s: %s", what, cli->url,
                          nng_strerror(rv));
    return MT_OK;
}

/* Decode a Reply envelope from msg; returns it owned or NULL with err set. */
static Meshtrain__Rpc__Reply *decode_reply(mt_rpc_client *cli, nng_msg *msg, const char *what,
                                           mt_err *err)
{
    Meshtrain__Rpc__Reply *env =
        meshtrain__rpc__reply__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));

    if (env == NULL)
        mt_err_set(err, MT_INTERNAL, "%s: undecodable reply from %s", what, cli->url);
    return env;
}

mt_code mt_rpc_client_call(mt_rpc_client *cli, const ProtobufCServiceDescriptor *svc,
                           const char *method, const ProtobufCMessage *req,
                           ProtobufCMessage **reply, int timeout_ms, mt_err *err)
{
    Meshtrain__Rpc__Request env = MESHTRAIN__RPC__REQUEST__INIT;
    const ProtobufCMethodDescriptor *m;
    Meshtrain__Rpc__Reply *renv;
    char name[128];
    uint8_t *payload;
    nng_msg *msg = NULL, *rmsg = NULL;
    size_t plen;
    mt_code rc;

    *reply = NULL;
    if (!mt_rpc__method_name(svc, method, name, sizeof(name)) ||
        (m = mt_rpc__find_method(svc, name)) == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "no method %s in service %s", method,
                          svc->short_name);
    if (req->descriptor != m->input)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s takes %s, not %s", name,
                          m->input->short_name, req->descriptor->short_name);
    plen = protobuf_c_message_get_packed_size(req);
    payload = mt_malloc(plen);
    if (payload == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
    protobuf_c_message_pack(req, payload);
    env.protocol_major = MT_RPC_PROTOCOL_MAJOR;
    env.protocol_minor = MT_RPC_PROTOCOL_MINOR;
    env.method = name;
    env.request_id = atomic_fetch_add(&cli->next_id, 1);
    env.timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0;
    env.credential = cli->token;
    env.payload.data = payload;
    env.payload.len = plen;
    if (nng_msg_alloc(&msg, meshtrain__rpc__request__get_packed_size(&env)) != 0) {
        mt_free(payload);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
    }
    meshtrain__rpc__request__pack(&env, nng_msg_body(msg));
    mt_free(payload);

    rc = exchange(cli, msg, timeout_ms > 0 ? timeout_ms : 10000, &rmsg, name, err);
    if (rc != MT_OK)
        return rc;
    renv = decode_reply(cli, rmsg, name, err);
    nng_msg_free(rmsg);
    if (renv == NULL)
        return MT_INTERNAL;
    if (renv->request_id != env.request_id && renv->request_id != 0) {
        rc = mt_err_set(err, MT_INTERNAL, "%s: reply for request %llu, expected %llu", name,
                        (unsigned long long)renv->request_id, (unsigned long long)env.request_id);
    } else if (renv->code != MT_OK) {
        rc = mt_err_set(err, mt_code_valid((int)renv->code) ? (mt_code)renv->code : MT_UNKNOWN,
                        "%s", renv->message);
    } else {
        *reply = protobuf_c_message_unpack(m->output, NULL, renv->payload.len, renv->payload.data);
        rc = *reply ? MT_OK
                    : mt_err_set(err, MT_INTERNAL, "%s: undecodable %s from %s", name,
                                 m->output->short_name, cli->url);
    }
    meshtrain__rpc__reply__free_unpacked(renv, NULL);
    return rc;
}

mt_code mt_rpc_client_call_raw(mt_rpc_client *cli, const void *bytes, size_t len, int timeout_ms,
                               mt_code *server_code, mt_err *err)
{
    Meshtrain__Rpc__Reply *renv;
    nng_msg *msg = NULL, *rmsg = NULL;
    mt_code rc;

    *server_code = MT_UNKNOWN;
    if (nng_msg_alloc(&msg, len) != 0)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "raw call: out of memory");
    if (len > 0)
        memcpy(nng_msg_body(msg), bytes, len);
    rc = exchange(cli, msg, timeout_ms, &rmsg, "raw call", err);
    if (rc != MT_OK)
        return rc;
    renv = decode_reply(cli, rmsg, "raw call", err);
    nng_msg_free(rmsg);
    if (renv == NULL)
        return MT_INTERNAL;
    *server_code = mt_code_valid((int)renv->code) ? (mt_code)renv->code : MT_UNKNOWN;
    mt_err_set(err, *server_code, "%s", renv->message);
    meshtrain__rpc__reply__free_unpacked(renv, NULL);
    return MT_OK;
}
