/* SPDX-License-Identifier: MIT */
/*
 * test_rpc.c — unit tests for core/rpc (mt_rpc.h): round trip, concurrency,
 * deadlines, garbage/truncated/oversized requests, unknown methods, protocol
 * versions, tokens, unreachable servers and shutdown with calls in flight.
 * Servers listen on 127.0.0.1 with ephemeral ports.
 */
#include "mt_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>

#include "alloc/mt_alloc.h"
#include "proto/coordinator.pb-c.h"
#include "proto/rpc.pb-c.h"
#include "rpc/mt_rpc.h"

#define SVC (&meshtrain__coordinator__descriptor)

typedef struct fixture {
    mt_rpc_server *srv;
    mt_rpc_client *cli;
    pthread_mutex_t mu;
    mt_rpc_call *held;   /* a call the handler did not answer ("slow") */
    pthread_mutex_t rmu; /* guards the three fields below (tests reply while holding mu) */
    int replies;         /* answers seen by on_reply */
    char last_method[64];
    mt_code last_code;
} fixture;

/* The server's on_reply observer: remember the last answer. */
static void on_reply(void *arg, const char *method, mt_code code, int64_t elapsed_us)
{
    fixture *f = arg;

    pthread_mutex_lock(&f->rmu);
    f->replies++;
    snprintf(f->last_method, sizeof(f->last_method), "%s", method);
    f->last_code = elapsed_us >= 0 ? code : MT_INTERNAL;
    pthread_mutex_unlock(&f->rmu);
}

/* Test service: ListWorkers echoes the filter as a worker name; "slow" is held unanswered. */
static void on_call(void *arg, mt_rpc_call *call)
{
    fixture *f = arg;
    const ProtobufCMethodDescriptor *m = mt_rpc_call_method(call);

    if (strcmp(m->name, "ListWorkers") == 0) {
        const Meshtrain__ListWorkersRequest *req =
            (const Meshtrain__ListWorkersRequest *)mt_rpc_call_request(call);
        if (strcmp(req->state, "slow") == 0) {
            pthread_mutex_lock(&f->mu);
            f->held = call;
            pthread_mutex_unlock(&f->mu);
            return;
        }
        if (strcmp(req->state, "fail") == 0) {
            mt_rpc_call_reply(call, MT_NOT_FOUND, "no workers in state fail", NULL);
            return;
        }
        Meshtrain__ListWorkersReply rep = MESHTRAIN__LIST_WORKERS_REPLY__INIT;
        Meshtrain__WorkerInfo w = MESHTRAIN__WORKER_INFO__INIT;
        Meshtrain__WorkerInfo *ws[1] = {&w};
        w.name = (char *)req->state;
        rep.workers = ws;
        rep.n_workers = 1;
        rep.now_ms = 42;
        mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
        return;
    }
    mt_rpc_call_reply(call, MT_UNIMPLEMENTED, "not in the test service", NULL);
}

static int open_pair(fixture *f, const char *server_token, const char *client_token, size_t max_msg)
{
    mt_rpc_server_opts so = MT_RPC_SERVER_OPTS_DEFAULTS;
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;

    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->rmu, NULL);
    so.url = "tcp://127.0.0.1:0";
    so.service = SVC;
    so.on_call = on_call;
    so.on_reply = on_reply;
    so.arg = f;
    so.token = server_token;
    if (max_msg)
        so.max_msg_bytes = max_msg;
    if (mt_rpc_server_open(&so, &f->srv, &err) != MT_OK) {
        print_error("server open: %s\n", err.msg);
        return -1;
    }
    co.url = mt_rpc_server_url(f->srv);
    co.token = client_token;
    if (mt_rpc_client_open(&co, &f->cli, &err) != MT_OK) {
        print_error("client open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void close_pair(fixture *f)
{
    mt_rpc_client_close(f->cli);
    mt_rpc_server_close(f->srv);
    if (f->held != NULL)
        mt_rpc_call_reply(f->held, MT_CANCELLED, "test over", NULL); /* after close: frees */
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->rmu);
}

static mt_code list_workers(mt_rpc_client *cli, const char *state, int timeout_ms,
                            Meshtrain__ListWorkersReply **out, mt_err *err)
{
    Meshtrain__ListWorkersRequest req = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    req.state = (char *)state;
    return mt_rpc_client_call(cli, SVC, "ListWorkers", &req.base, (ProtobufCMessage **)out,
                              timeout_ms, err);
}

/* Pack a request envelope with the given fields into a malloc'd buffer. */
static uint8_t *envelope(uint32_t major, const char *method, const char *cred, const void *payload,
                         size_t plen, size_t *len)
{
    Meshtrain__Rpc__Request env = MESHTRAIN__RPC__REQUEST__INIT;
    env.protocol_major = major;
    env.method = (char *)method;
    env.credential = (char *)cred;
    env.request_id = 7;
    env.payload.data = (uint8_t *)payload;
    env.payload.len = plen;
    *len = meshtrain__rpc__request__get_packed_size(&env);
    uint8_t *buf = malloc(*len);
    meshtrain__rpc__request__pack(&env, buf);
    return buf;
}

static void test_rpc_round_trip(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    assert_int_equal(list_workers(f.cli, "alive", 2000, &rep, &err), MT_OK);
    assert_int_equal(rep->n_workers, 1);
    assert_string_equal(rep->workers[0]->name, "alive");
    assert_int_equal(rep->now_ms, 42);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    /* an application error travels with its code and message */
    assert_int_equal(list_workers(f.cli, "fail", 2000, &rep, &err), MT_NOT_FOUND);
    assert_null(rep);
    assert_string_equal(err.msg, "no workers in state fail");
    close_pair(&f);
}

typedef struct par_arg {
    mt_rpc_client *cli;
    int ok;
} par_arg;

static void *par_thread(void *p)
{
    par_arg *a = p;
    for (int i = 0; i < 50; i++) {
        char name[32];
        Meshtrain__ListWorkersReply *rep = NULL;
        snprintf(name, sizeof(name), "w%d", i);
        if (list_workers(a->cli, name, 5000, &rep, NULL) == MT_OK &&
            strcmp(rep->workers[0]->name, name) == 0)
            a->ok++;
        if (rep)
            protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return NULL;
}

static void test_rpc_concurrent_calls(void **state)
{
    fixture f;
    pthread_t th[4];
    par_arg args[4];
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    for (int i = 0; i < 4; i++) {
        args[i].cli = f.cli;
        args[i].ok = 0;
        pthread_create(&th[i], NULL, par_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].ok, 50);
    }
    close_pair(&f);
}

/* Wait (bounded) until the handler holds a call; the server may still be dispatching it. */
static mt_rpc_call *wait_held(fixture *f)
{
    mt_rpc_call *c = NULL;
    for (int i = 0; i < 2000 && c == NULL; i++) {
        pthread_mutex_lock(&f->mu);
        c = f->held;
        pthread_mutex_unlock(&f->mu);
        if (c == NULL)
            usleep(1000);
    }
    return c;
}

static void test_rpc_deadline_exceeded(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    assert_int_equal(list_workers(f.cli, "slow", 200, &rep, &err), MT_DEADLINE_EXCEEDED);
    assert_non_null(strstr(err.msg, "200 ms"));
    /* the held call sees that its caller gave up */
    assert_non_null(wait_held(&f));
    pthread_mutex_lock(&f.mu);
    /* the server measures from arrival, so poll briefly (bounded) */
    for (int i = 0; i < 1000 && !mt_rpc_call_expired(f.held); i++)
        usleep(1000);
    assert_true(mt_rpc_call_expired(f.held));
    mt_rpc_call_reply(f.held, MT_OK, NULL, NULL);
    f.held = NULL;
    pthread_mutex_unlock(&f.mu);
    /* and the server keeps serving */
    assert_int_equal(list_workers(f.cli, "after", 2000, &rep, &err), MT_OK);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    close_pair(&f);
}

static void test_rpc_garbage_and_truncated(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    mt_code sc;
    uint8_t garbage[64];
    size_t len;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    memset(garbage, 0xff, sizeof(garbage));
    assert_int_equal(mt_rpc_client_call_raw(f.cli, garbage, sizeof(garbage), 2000, &sc, &err),
                     MT_OK);
    assert_int_equal(sc, MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "malformed request"));
    /* empty message: decodes as an envelope of protocol version 0 */
    assert_int_equal(mt_rpc_client_call_raw(f.cli, "", 0, 2000, &sc, &err), MT_OK);
    assert_int_equal(sc, MT_FAILED_PRECONDITION);
    /* a valid envelope cut short */
    uint8_t *buf = envelope(1, "Coordinator.ListWorkers", "", "\x0a\x05hello", 7, &len);
    for (size_t cut = 1; cut < len; cut += 3) {
        assert_int_equal(mt_rpc_client_call_raw(f.cli, buf, cut, 2000, &sc, &err), MT_OK);
        assert_true(sc == MT_INVALID_ARGUMENT || sc == MT_UNIMPLEMENTED ||
                    sc == MT_FAILED_PRECONDITION);
    }
    free(buf);
    /* a good envelope with a payload that is not a ListWorkersRequest */
    buf = envelope(1, "Coordinator.ListWorkers", "", "\xff\xff\xff", 3, &len);
    assert_int_equal(mt_rpc_client_call_raw(f.cli, buf, len, 2000, &sc, &err), MT_OK);
    assert_int_equal(sc, MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "ListWorkersRequest"));
    free(buf);
    /* still serving */
    Meshtrain__ListWorkersReply *rep = NULL;
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_OK);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    close_pair(&f);
}

static void test_rpc_oversize(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    char big[3000];
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 1024), 0);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(list_workers(f.cli, big, 2000, &rep, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "exceeds the maximum message size of 1024"));
    assert_int_equal(list_workers(f.cli, "small", 2000, &rep, &err), MT_OK);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    close_pair(&f);
}

static void test_rpc_unknown_method(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    mt_code sc;
    size_t len;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    uint8_t *buf = envelope(1, "Coordinator.Nope", "", NULL, 0, &len);
    assert_int_equal(mt_rpc_client_call_raw(f.cli, buf, len, 2000, &sc, &err), MT_OK);
    assert_int_equal(sc, MT_UNIMPLEMENTED);
    assert_non_null(strstr(err.msg, "Coordinator.Nope"));
    free(buf);
    buf = envelope(1, "Other.ListWorkers", "", NULL, 0, &len);
    assert_int_equal(mt_rpc_client_call_raw(f.cli, buf, len, 2000, &sc, &err), MT_OK);
    assert_int_equal(sc, MT_UNIMPLEMENTED);
    free(buf);
    /* the client refuses a method its service lacks before sending */
    Meshtrain__ListWorkersRequest req = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    assert_int_equal(mt_rpc_client_call(f.cli, SVC, "Nope", &req.base, &rep, 1000, &err),
                     MT_INVALID_ARGUMENT);
    close_pair(&f);
}

static void test_rpc_protocol_version(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    mt_code sc;
    size_t len;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    uint8_t *buf = envelope(2, "Coordinator.ListWorkers", "", NULL, 0, &len);
    assert_int_equal(mt_rpc_client_call_raw(f.cli, buf, len, 2000, &sc, &err), MT_OK);
    assert_int_equal(sc, MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "2.0"));
    assert_non_null(strstr(err.msg, "1.0"));
    free(buf);
    close_pair(&f);
}

static void test_rpc_bad_token(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;
    assert_int_equal(open_pair(&f, "s3cret", "wrong", 0), 0);
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_UNAUTHENTICATED);
    close_pair(&f);
    assert_int_equal(open_pair(&f, "s3cret", NULL, 0), 0);
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "requires a token"));
    close_pair(&f);
    assert_int_equal(open_pair(&f, "s3cret", "s3cret", 0), 0);
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_OK);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    close_pair(&f);
    assert_true(mt_rpc_token_equal("abc", "abc"));
    assert_false(mt_rpc_token_equal("abc", "abd"));
    assert_false(mt_rpc_token_equal("abc", "abcd"));
    assert_false(mt_rpc_token_equal("", "a"));
}

static void test_rpc_on_reply_observes_every_answer(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;

    assert_int_equal(open_pair(&f, "s3cret", "s3cret", 0), 0);
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_OK);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    pthread_mutex_lock(&f.rmu);
    assert_int_equal(f.replies, 1);
    assert_string_equal(f.last_method, "ListWorkers");
    assert_int_equal(f.last_code, MT_OK);
    pthread_mutex_unlock(&f.rmu);
    assert_int_equal(list_workers(f.cli, "fail", 2000, &rep, &err), MT_NOT_FOUND);
    pthread_mutex_lock(&f.rmu);
    assert_int_equal(f.replies, 2);
    assert_int_equal(f.last_code, MT_NOT_FOUND);
    pthread_mutex_unlock(&f.rmu);
    close_pair(&f);
    /* refused by the server itself (wrong token): method "" */
    assert_int_equal(open_pair(&f, "s3cret", "wrong", 0), 0);
    assert_int_equal(list_workers(f.cli, "x", 2000, &rep, &err), MT_UNAUTHENTICATED);
    pthread_mutex_lock(&f.rmu);
    assert_int_equal(f.replies, 1);
    assert_string_equal(f.last_method, "");
    assert_int_equal(f.last_code, MT_UNAUTHENTICATED);
    pthread_mutex_unlock(&f.rmu);
    close_pair(&f);
}

static void test_rpc_unreachable(void **state)
{
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_rpc_client *cli = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    co.url = "tcp://127.0.0.1:1";
    co.connect_timeout_ms = 1000;
    assert_int_equal(mt_rpc_client_open(&co, &cli, &err), MT_UNAVAILABLE);
    assert_null(cli);
    assert_non_null(strstr(err.msg, "tcp://127.0.0.1:1"));
    co.url = "bogus://x";
    assert_int_equal(mt_rpc_client_open(&co, &cli, &err), MT_INVALID_ARGUMENT);
}

static void test_rpc_server_gone_mid_session(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    mt_rpc_server_close(f.srv);
    f.srv = NULL;
    mt_code rc = list_workers(f.cli, "x", 300, &rep, &err);
    assert_true(rc == MT_UNAVAILABLE || rc == MT_DEADLINE_EXCEEDED);
    assert_null(rep);
    mt_rpc_client_close(f.cli);
    pthread_mutex_destroy(&f.mu);
}

static void test_rpc_close_with_call_held(void **state)
{
    fixture f;
    mt_err err = MT_ERR_INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    (void)state;
    assert_int_equal(open_pair(&f, NULL, NULL, 0), 0);
    assert_int_equal(list_workers(f.cli, "slow", 100, &rep, &err), MT_DEADLINE_EXCEEDED);
    assert_non_null(wait_held(&f));
    close_pair(&f); /* closes with the call held, then replies: ASan proves no leak or UAF */
}

static void test_rpc_server_open_errors(void **state)
{
    mt_rpc_server_opts so = MT_RPC_SERVER_OPTS_DEFAULTS;
    mt_rpc_server *srv = NULL, *srv2 = NULL;
    mt_err err = MT_ERR_INIT;
    fixture f;
    (void)state;
    memset(&f, 0, sizeof(f));
    so.service = SVC;
    so.on_call = on_call;
    so.arg = &f;
    assert_int_equal(mt_rpc_server_open(&so, &srv, &err), MT_INVALID_ARGUMENT); /* no url */
    so.url = "tcp://127.0.0.1:0";
    assert_int_equal(mt_rpc_server_open(&so, &srv, &err), MT_OK);
    so.url = mt_rpc_server_url(srv);
    assert_int_equal(mt_rpc_server_open(&so, &srv2, &err), MT_UNAVAILABLE); /* in use */
    assert_non_null(strstr(err.msg, so.url));
    mt_rpc_server_close(srv);
    /* allocation failures: every one is reported, none leaks */
    so.url = "tcp://127.0.0.1:0";
    for (long n = 0; n < 3; n++) {
        mt_alloc_fail_after(n);
        mt_code rc = mt_rpc_server_open(&so, &srv, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK) {
            mt_rpc_server_close(srv);
            break;
        }
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(srv);
    }
}

/* mt_rpc_decode_request: every code of the server's checks, without a socket. */
static void test_rpc_decode_request(void **state)
{
    Meshtrain__ListWorkersRequest lw = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    uint8_t payload[64];
    size_t plen, len;
    uint8_t *buf;
    mt_rpc_request r;
    mt_err err = MT_ERR_INIT;
    (void)state;

    lw.state = "alive";
    plen = meshtrain__list_workers_request__pack(&lw, payload);
    buf = envelope(1, "Coordinator.ListWorkers", "tok", payload, plen, &len);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", 1024, &r, &err), MT_OK);
    assert_string_equal(r.method->name, "ListWorkers");
    assert_int_equal(r.request_id, 7);
    assert_string_equal(((Meshtrain__ListWorkersRequest *)r.message)->state, "alive");
    mt_rpc_request_fini(&r);
    assert_null(r.message);
    /* no token configured: any credential passes */
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, NULL, 1024, &r, &err), MT_OK);
    mt_rpc_request_fini(&r);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "other", 1024, &r, &err),
                     MT_UNAUTHENTICATED);
    assert_null(r.message);
    assert_int_equal(r.request_id, 7);
    assert_non_null(strstr(err.msg, "invalid credential"));
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", len - 1, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "exceeds the maximum message size"));
    assert_int_equal(mt_rpc_decode_request(buf, len / 2, SVC, "tok", 1024, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "malformed request"));
    free(buf);

    buf = envelope(1, "Coordinator.ListWorkers", "", payload, plen, &len);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", 1024, &r, &err),
                     MT_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "requires a token"));
    free(buf);
    buf = envelope(3, "Coordinator.ListWorkers", "tok", payload, plen, &len);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", 1024, &r, &err),
                     MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "the client speaks 3.0, this server speaks 1.0"));
    free(buf);
    buf = envelope(1, "Coordinator.Nope", "tok", payload, plen, &len);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", 1024, &r, &err), MT_UNIMPLEMENTED);
    free(buf);
    buf = envelope(1, "Coordinator.ListWorkers", "tok", "\xff\xff\xff", 3, &len);
    assert_int_equal(mt_rpc_decode_request(buf, len, SVC, "tok", 1024, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "malformed ListWorkersRequest payload"));
    assert_null(r.message);
    free(buf);
    mt_rpc_request_fini(NULL);
}

static void test_rpc_token_file(void **state)
{
    char dir[] = "/tmp/mt_rpc_tokXXXXXX", path[256], tok[MT_RPC_TOKEN_MAX];
    mt_err err = MT_ERR_INIT;
    FILE *fp;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/token", dir);
    assert_int_equal(mt_rpc_token_load(path, tok, &err), MT_NOT_FOUND);
    fp = fopen(path, "w");
    fputs("hunter2\n", fp);
    fclose(fp);
    chmod(path, 0644);
    assert_int_equal(mt_rpc_token_load(path, tok, &err), MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "0644"));
    chmod(path, 0600);
    assert_int_equal(mt_rpc_token_load(path, tok, &err), MT_OK);
    assert_string_equal(tok, "hunter2");
    fp = fopen(path, "w");
    fputs("\n", fp);
    fclose(fp);
    assert_int_equal(mt_rpc_token_load(path, tok, &err), MT_INVALID_ARGUMENT);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rpc_round_trip),
        cmocka_unit_test(test_rpc_concurrent_calls),
        cmocka_unit_test(test_rpc_deadline_exceeded),
        cmocka_unit_test(test_rpc_garbage_and_truncated),
        cmocka_unit_test(test_rpc_oversize),
        cmocka_unit_test(test_rpc_unknown_method),
        cmocka_unit_test(test_rpc_protocol_version),
        cmocka_unit_test(test_rpc_bad_token),
        cmocka_unit_test(test_rpc_unreachable),
        cmocka_unit_test(test_rpc_server_gone_mid_session),
        cmocka_unit_test(test_rpc_close_with_call_held),
        cmocka_unit_test(test_rpc_server_open_errors),
        cmocka_unit_test(test_rpc_on_reply_observes_every_answer),
        cmocka_unit_test(test_rpc_token_file),
        cmocka_unit_test(test_rpc_decode_request),
    };
    int failed = MT_RUN_TESTS(tests);
    nng_fini(); /* let nng's reaper free closed sockets before LeakSanitizer looks */
    return failed;
}
