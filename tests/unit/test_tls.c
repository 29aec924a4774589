/* SPDX-License-Identifier: MIT */
/*
 * test_tls.c — unit tests for core/tls (mt_tls.h) and TLS in core/rpc: loading certificate,
 * key and CA files (good files, key readable by others refused, missing and non-PEM files),
 * URL helpers, a TLS connection that verifies, a wrong CA and a wrong name refused with
 * UNAUTHENTICATED naming the address, mutual TLS, and an RPC client with the wrong CA failing
 * fast. The certificates are made at start by tests/integration/tls_certs.sh (openssl) in a
 * fresh directory under the current one (the build dir under ctest) and removed at the end.
 */
#include "mt_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "clock/mt_clock.h"
#include "coll/mt_coll.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"
#include "tls/mt_tls.h"

static char g_dir[512]; /* the certificates: ca.pem server.pem server.key other-ca.pem ... */

static const char *path_of(const char *name)
{
    static char buf[4][600];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", g_dir, name);
    return p;
}

static int setup_certs(void)
{
    const char *src = getenv("MT_SOURCE_DIR");
    char cmd[2048];

    snprintf(g_dir, sizeof(g_dir), "tls-test-XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    snprintf(cmd, sizeof(cmd), "bash %s/tests/integration/tls_certs.sh %s", src ? src : "..",
             g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void cleanup_certs(void)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

static mt_tls *load(const char *cert, const char *key, const char *ca, const char *name)
{
    mt_tls_opts o = MT_TLS_OPTS_DEFAULTS;
    mt_tls *t = NULL;
    mt_err err = MT_ERR_INIT;

    o.cert_file = cert ? path_of(cert) : NULL;
    o.key_file = key ? path_of(key) : NULL;
    o.ca_file = ca ? path_of(ca) : NULL;
    o.server_name = name;
    if (mt_tls_new(&o, &t, &err) != MT_OK)
        fail_msg("mt_tls_new: %s", err.msg);
    return t;
}

static void test_tls_new_good_files(void **state)
{
    (void)state;
    mt_tls *srv = load("server.pem", "server.key", "ca.pem", NULL);
    mt_tls *cli = load(NULL, NULL, "ca.pem", "localhost");

    assert_true(mt_tls_can_listen(srv));
    assert_true(mt_tls_can_dial(srv));
    assert_false(mt_tls_can_listen(cli));
    assert_true(mt_tls_can_dial(cli));
    assert_false(mt_tls_can_listen(NULL));
    assert_false(mt_tls_can_dial(NULL));
    mt_tls_free(srv);
    mt_tls_free(cli);
    mt_tls_free(NULL);
}

static void test_tls_new_key_permissions(void **state)
{
    (void)state;
    mt_tls_opts o = MT_TLS_OPTS_DEFAULTS;
    mt_tls *t = (mt_tls *)&o; /* must be reset to NULL on failure */
    mt_err err = MT_ERR_INIT;

    o.cert_file = path_of("server.pem");
    o.key_file = path_of("server.key");
    assert_int_equal(chmod(o.key_file, 0644), 0);
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_PERMISSION_DENIED);
    assert_null(t);
    assert_non_null(strstr(err.msg, "server.key"));
    assert_non_null(strstr(err.msg, "0644"));
    assert_int_equal(chmod(o.key_file, 0640), 0);
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_PERMISSION_DENIED);
    assert_int_equal(chmod(o.key_file, 0600), 0);
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_OK);
    mt_tls_free(t);
    if (geteuid() != 0) { /* root reads any file */
        assert_int_equal(chmod(o.key_file, 0000), 0);
        assert_int_equal(mt_tls_new(&o, &t, &err), MT_PERMISSION_DENIED);
        assert_int_equal(chmod(o.key_file, 0600), 0);
    }
}

static void test_tls_new_bad_files(void **state)
{
    (void)state;
    mt_tls_opts o = MT_TLS_OPTS_DEFAULTS;
    mt_tls *t = NULL;
    mt_err err = MT_ERR_INIT;
    FILE *f;

    assert_int_equal(mt_tls_new(&o, &t, &err), MT_INVALID_ARGUMENT); /* nothing given */
    o.cert_file = path_of("server.pem");
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_INVALID_ARGUMENT); /* cert without key */
    assert_non_null(strstr(err.msg, "--tls-key"));
    o.key_file = path_of("missing.key");
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "missing.key"));

    f = fopen(path_of("garbage.pem"), "w");
    assert_non_null(f);
    fputs("this is not a certificate\n", f);
    fclose(f);
    o = (mt_tls_opts)MT_TLS_OPTS_DEFAULTS;
    o.ca_file = path_of("garbage.pem");
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "garbage.pem"));

    f = fopen(path_of("broken.pem"), "w"); /* PEM armour, bad contents */
    assert_non_null(f);
    fputs("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", f);
    fclose(f);
    o.ca_file = path_of("broken.pem");
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "broken.pem"));

    o.ca_file = NULL; /* a certificate with a key that is not a key */
    o.cert_file = path_of("server.pem");
    o.key_file = path_of("ca.pem");
    chmod(o.key_file, 0600);
    assert_int_equal(mt_tls_new(&o, &t, &err), MT_INVALID_ARGUMENT);
    chmod(o.key_file, 0644);
    assert_null(t);
}

static void test_tls_url_helpers(void **state)
{
    (void)state;
    mt_tls *named = load(NULL, NULL, "ca.pem", "meshtrain.internal");
    char name[64];

    assert_true(mt_tls_url_is_tls("tls+tcp://127.0.0.1:7400"));
    assert_true(mt_tls_url_is_tls("tls+tcp6://[::1]:7400"));
    assert_false(mt_tls_url_is_tls("tcp://127.0.0.1:7400"));
    assert_false(mt_tls_url_is_tls("tls+tcpx://a:1"));
    assert_false(mt_tls_url_is_tls(NULL));
    mt_tls_expected_name(NULL, "tls+tcp://coord.example:7400", name, sizeof(name));
    assert_string_equal(name, "coord.example");
    mt_tls_expected_name(NULL, "tls+tcp6://[::1]:7400", name, sizeof(name));
    assert_string_equal(name, "::1");
    mt_tls_expected_name(named, "tls+tcp://127.0.0.1:7400", name, sizeof(name));
    assert_string_equal(name, "meshtrain.internal");
    mt_tls_free(named);
}

/* Listen with srv on an ephemeral port; the bound URL into url. */
static nng_socket listen_pair(const mt_tls *srv, int require_peer, char *url, size_t cap)
{
    nng_socket s;
    nng_listener l;
    mt_err err = MT_ERR_INIT;
    int port = 0;

    assert_int_equal(nng_pair0_open(&s), 0);
    if (mt_tls_listen(s, "tls+tcp://127.0.0.1:0", srv, require_peer, &l, &err) != MT_OK)
        fail_msg("listen: %s", err.msg);
    assert_int_equal(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(url, cap, "tls+tcp://127.0.0.1:%d", port);
    return s;
}

/* Dial url with cli (blocking) and, when it connects, exchange one message. */
static mt_code dial_and_talk(nng_socket ls, const char *url, const mt_tls *cli, mt_err *err)
{
    nng_socket c;
    mt_code rc;
    char *buf = NULL;
    size_t n = 0;

    assert_int_equal(nng_pair0_open(&c), 0);
    nng_socket_set_ms(c, NNG_OPT_RECVTIMEO, 3000);
    nng_socket_set_ms(ls, NNG_OPT_RECVTIMEO, 3000);
    rc = mt_tls_dial(c, url, cli, 0, err);
    if (rc == MT_OK) {
        assert_int_equal(nng_send(c, "hello", 6, 0), 0);
        if (nng_recv(ls, &buf, &n, NNG_FLAG_ALLOC) != 0)
            rc = mt_err_set(err, MT_UNAVAILABLE, "nothing received over %s", url);
        else
            assert_string_equal(buf, "hello");
        if (buf != NULL)
            nng_free(buf, n);
    }
    nng_close(c);
    return rc;
}

static void test_tls_connection_verifies(void **state)
{
    (void)state;
    mt_tls *srv = load("server.pem", "server.key", NULL, NULL);
    mt_tls *cli = load(NULL, NULL, "ca.pem", "localhost");
    mt_err err = MT_ERR_INIT;
    char url[64];
    nng_socket ls = listen_pair(srv, 0, url, sizeof(url));

    if (dial_and_talk(ls, url, cli, &err) != MT_OK)
        fail_msg("%s", err.msg);
    nng_close(ls);
    mt_tls_free(srv);
    mt_tls_free(cli);
}

static void test_tls_wrong_ca_and_wrong_name(void **state)
{
    (void)state;
    mt_tls *srv = load("server.pem", "server.key", NULL, NULL);
    mt_tls *wrong_ca = load(NULL, NULL, "other-ca.pem", "localhost");
    mt_tls *wrong_name = load(NULL, NULL, "ca.pem", "coord.example");
    mt_tls *by_ip = load(NULL, NULL, "ca.pem", NULL); /* expects "127.0.0.1": not in the cert */
    mt_err err = MT_ERR_INIT;
    char url[64];
    nng_socket ls = listen_pair(srv, 0, url, sizeof(url));
    int64_t t0 = mt_clock_mono_ms();

    assert_int_equal(dial_and_talk(ls, url, wrong_ca, &err), MT_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, url));
    assert_non_null(strstr(err.msg, "other-ca.pem"));
    assert_int_equal(dial_and_talk(ls, url, wrong_name, &err), MT_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "coord.example"));
    assert_int_equal(dial_and_talk(ls, url, by_ip, &err), MT_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "127.0.0.1"));
    assert_true(mt_clock_mono_ms() - t0 < 3000); /* refused, not timed out */
    /* a TLS address without TLS settings, or without a CA, is a usage error */
    assert_int_equal(dial_and_talk(ls, url, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "--tls-ca"));
    assert_int_equal(dial_and_talk(ls, url, srv, &err), MT_INVALID_ARGUMENT);
    nng_close(ls);
    {
        nng_socket s;
        assert_int_equal(nng_pair0_open(&s), 0);
        assert_int_equal(mt_tls_listen(s, "tls+tcp://127.0.0.1:0", wrong_ca, 0, NULL, &err),
                         MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "--tls-cert"));
        assert_int_equal(mt_tls_listen(s, "tls+tcp://127.0.0.1:0", srv, 1, NULL, &err),
                         MT_INVALID_ARGUMENT); /* verifying peers needs a CA */
        nng_close(s);
    }
    mt_tls_free(srv);
    mt_tls_free(wrong_ca);
    mt_tls_free(wrong_name);
    mt_tls_free(by_ip);
}

static void test_tls_mutual(void **state)
{
    (void)state;
    mt_tls *peer = load("server.pem", "server.key", "ca.pem", "localhost");
    mt_tls *anon = load(NULL, NULL, "ca.pem", "localhost");
    mt_tls *stranger = load("other.pem", "other.key", "ca.pem", "localhost");
    mt_err err = MT_ERR_INIT;
    char url[64];
    nng_socket ls = listen_pair(peer, 1, url, sizeof(url));

    if (dial_and_talk(ls, url, peer, &err) != MT_OK)
        fail_msg("%s", err.msg);
    /* no certificate, or one from another CA: the listener refuses the connection */
    assert_int_not_equal(dial_and_talk(ls, url, anon, &err), MT_OK);
    assert_int_not_equal(dial_and_talk(ls, url, stranger, &err), MT_OK);
    nng_close(ls);
    mt_tls_free(peer);
    mt_tls_free(anon);
    mt_tls_free(stranger);
}

static void on_call(void *arg, mt_rpc_call *call)
{
    Meshtrain__ListWorkersReply rep = MESHTRAIN__LIST_WORKERS_REPLY__INIT;
    (void)arg;
    rep.now_ms = 7;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
}

static void test_tls_rpc(void **state)
{
    (void)state;
    mt_tls *srv_tls = load("server.pem", "server.key", NULL, NULL);
    mt_tls *good = load(NULL, NULL, "ca.pem", "localhost");
    mt_tls *wrong = load(NULL, NULL, "other-ca.pem", "localhost");
    mt_rpc_server_opts so = MT_RPC_SERVER_OPTS_DEFAULTS;
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    Meshtrain__ListWorkersRequest req = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    mt_rpc_server *srv = NULL;
    mt_rpc_client *cli = NULL;
    mt_err err = MT_ERR_INIT;
    int64_t t0;

    so.url = "tls+tcp://127.0.0.1:0";
    so.service = &meshtrain__coordinator__descriptor;
    so.on_call = on_call;
    so.tls = srv_tls;
    assert_int_equal(mt_rpc_server_open(&so, &srv, &err), MT_OK);
    assert_non_null(strstr(mt_rpc_server_url(srv), "tls+tcp://127.0.0.1:"));
    assert_null(strstr(mt_rpc_server_url(srv), ":0"));
    mt_tls_free(srv_tls); /* the listener keeps its configuration */

    co.url = mt_rpc_server_url(srv);
    co.tls = good;
    if (mt_rpc_client_open(&co, &cli, &err) != MT_OK)
        fail_msg("%s", err.msg);
    assert_ptr_equal(mt_rpc_client_tls(cli), good);
    mt_tls_free(good); /* the client holds its own reference */
    assert_int_equal(mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, "ListWorkers",
                                        &req.base, (ProtobufCMessage **)&rep, 3000, &err),
                     MT_OK);
    assert_int_equal(rep->now_ms, 7);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    mt_rpc_client_close(cli);

    co.tls = wrong;
    t0 = mt_clock_mono_ms();
    assert_int_equal(mt_rpc_client_open(&co, &cli, &err), MT_UNAUTHENTICATED);
    assert_null(cli);
    assert_true(mt_clock_mono_ms() - t0 < 2000);
    assert_non_null(strstr(err.msg, co.url));
    assert_non_null(strstr(err.msg, "did not verify"));

    co.tls = NULL;
    assert_int_equal(mt_rpc_client_open(&co, &cli, &err), MT_INVALID_ARGUMENT);

    { /* a plain tcp:// client to the TLS port: bounded, UNAVAILABLE */
        char plain[80];
        snprintf(plain, sizeof(plain), "tcp://%s", co.url + strlen("tls+tcp://"));
        co.url = plain;
        co.connect_timeout_ms = 1000;
        t0 = mt_clock_mono_ms();
        assert_int_equal(mt_rpc_client_open(&co, &cli, &err), MT_UNAVAILABLE);
        assert_true(mt_clock_mono_ms() - t0 < 2500);
    }
    mt_rpc_server_close(srv);
    mt_tls_free(wrong);
}

typedef struct coll_arg {
    mt_coll_comm *comm;
    float buf[1000];
    mt_code rc;
    mt_err err;
} coll_arg;

static void *allreduce_main(void *p)
{
    static const int members[] = {0, 1};
    const mt_coll_group g = {members, 2};
    coll_arg *a = p;
    mt_coll_call call = {1, 0, 1500};
    a->rc = mt_coll_allreduce_sum(a->comm, &g, a->buf, 1000, &call, &a->err);
    return NULL;
}

/* Two TLS data-plane endpoints (standing for two workers), one rank each: an allreduce. */
static mt_code tls_allreduce(const mt_tls *t0, const mt_tls *t1, mt_err *err)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_net *nets[2];
    mt_coll_world *ws[2];
    mt_coll_rank_addr table[2];
    coll_arg a[2];
    pthread_t th[2];
    mt_code rc = MT_OK;

    o.job_id = 9;
    o.segment_bytes = 1024;
    o.direct_bytes = 0;
    memset(a, 0, sizeof(a));
    assert_int_equal(mt_coll_net_new_tls("tls+tcp://127.0.0.1:0", t0, &nets[0], err), MT_OK);
    assert_int_equal(mt_coll_net_new_tls("tls+tcp://127.0.0.1:0", t1, &nets[1], err), MT_OK);
    assert_non_null(strstr(mt_coll_net_addr(nets[0]), "tls+tcp://127.0.0.1:"));
    for (int k = 0; k < 2; k++)
        table[k] = (mt_coll_rank_addr){mt_coll_net_addr(nets[k]), 0};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(mt_coll_world_new_net(nets[k], 2, table, &o, &ws[k], err), MT_OK);
        a[k].comm = mt_coll_world_comm(ws[k], k);
        for (int e = 0; e < 1000; e++)
            a[k].buf[e] = (float)(k + 1) * (float)e;
        pthread_create(&th[k], NULL, allreduce_main, &a[k]);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        if (a[k].rc != MT_OK && rc == MT_OK)
            rc = mt_err_set(err, a[k].rc, "%s", a[k].err.msg);
        for (int e = 0; e < 1000 && a[k].rc == MT_OK; e++)
            assert_true(a[k].buf[e] == 3.0f * (float)e);
    }
    int64_t freed = mt_clock_mono_ms();
    for (int k = 0; k < 2; k++) {
        mt_coll_world_free(ws[k]);
        mt_coll_net_free(nets[k]);
    }
    /* nng 1.5.2 can stall closing a TLS socket; coll_net.c bounds each close at 2 s (two per
     * world here: the peer's connection and the listener). A stall within the bounds is the
     * known upstream one (docs/robustness.md): reported, not failed; past them the bound broke. */
    int64_t took = mt_clock_mono_ms() - freed;
    if (rc == MT_OK && took >= 2000)
        print_message("TLS close stalled %lld ms (nng 1.5.2; bounded at 2 s a close)\n",
                      (long long)took);
    if (rc == MT_OK)
        assert_true(took < 4 * 2000 + 500);
    return rc;
}

static void test_tls_data_plane(void **state)
{
    (void)state;
    mt_tls *peer = load("server.pem", "server.key", "ca.pem", "localhost");
    mt_tls *stranger = load("other.pem", "other.key", "other-ca.pem", "localhost");
    mt_tls *no_cert = load(NULL, NULL, "ca.pem", "localhost");
    mt_coll_rank_addr table[2];
    mt_coll_net *net = NULL;
    mt_coll_world *w = NULL;
    mt_err err = MT_ERR_INIT;

    if (tls_allreduce(peer, peer, &err) != MT_OK)
        fail_msg("allreduce over TLS: %s", err.msg);
    /* a peer with a certificate from another CA never gets its data through */
    assert_int_not_equal(tls_allreduce(peer, stranger, &err), MT_OK);
    /* a TLS endpoint needs certificate, key and CA; and never talks to a plain peer */
    assert_int_equal(mt_coll_net_new_tls("tls+tcp://127.0.0.1:0", no_cert, &net, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "--tls-cert"));
    assert_int_equal(mt_coll_net_new_tls("tls+tcp://127.0.0.1:0", NULL, &net, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_coll_net_new_tls("tls+tcp://127.0.0.1:0", peer, &net, &err), MT_OK);
    table[0] = (mt_coll_rank_addr){mt_coll_net_addr(net), 0};
    table[1] = (mt_coll_rank_addr){"tcp://127.0.0.1:9", 0};
    assert_int_equal(mt_coll_world_new_net(net, 2, table, NULL, &w, &err), MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "tcp://127.0.0.1:9"));
    mt_coll_net_free(net);
    mt_tls_free(peer);
    mt_tls_free(stranger);
    mt_tls_free(no_cert);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_new_good_files),
        cmocka_unit_test(test_tls_new_key_permissions),
        cmocka_unit_test(test_tls_new_bad_files),
        cmocka_unit_test(test_tls_url_helpers),
        cmocka_unit_test(test_tls_connection_verifies),
        cmocka_unit_test(test_tls_wrong_ca_and_wrong_name),
        cmocka_unit_test(test_tls_mutual),
        cmocka_unit_test(test_tls_rpc),
        cmocka_unit_test(test_tls_data_plane),
    };
    int rc;

    if (setup_certs() != 0) {
        fprintf(stderr, "test_tls: could not make certificates with openssl\n");
        return 1;
    }
    rc = MT_RUN_TESTS(tests);
    cleanup_certs();
    return rc;
}
