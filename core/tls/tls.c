/* SPDX-License-Identifier: MIT */
/*
 * tls.c — TLS settings for nng's tls+tcp:// transport (mt_tls.h).
 *
 * The PEM texts are read once and kept; every listener and dialer gets its own nng_tls_config
 * built from them (nng holds a reference, so the mt_tls may be freed while sockets run). A
 * configuration per dialer lets each carry the name expected for its URL's host.
 * Immutable after mt_tls_new except the reference count (atomic): no locking. Tests:
 * tests/unit/test_tls.c.
 */
#include "tls/mt_tls.h"

#include <errno.h>
#include <nng/supplemental/tls/tls.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"

struct mt_tls {
    atomic_int refs; /* mt_tls_hold / mt_tls_free */
    char *cert;      /* PEM text, NUL-terminated; NULL = none */
    char *key;
    char *ca;
    char ca_file[256];
    char server_name[256]; /* "" = the URL's host */
};

/* Read path (at most MT_TLS_FILE_MAX bytes) into *out (owned, NUL-terminated). */
static mt_code read_pem(const char *what, const char *path, int secret, char **out, mt_err *err)
{
    struct stat st;
    FILE *f;
    char *buf;
    size_t n;

    *out = NULL;
    if (stat(path, &st) != 0)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED, "%s %s: %s",
                          what, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s %s: not a regular file", what, path);
    if (secret && (st.st_mode & 077) != 0)
        return mt_err_set(err, MT_PERMISSION_DENIED,
                          "%s %s: readable by group or others (mode %04o); run chmod 600 %s", what,
                          path, (unsigned)(st.st_mode & 07777), path);
    if (st.st_size <= 0 || (unsigned long long)st.st_size > MT_TLS_FILE_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s %s: %s", what, path,
                          st.st_size <= 0 ? "empty" : "larger than 1 MiB");
    if ((f = fopen(path, "rb")) == NULL)
        return mt_err_set(err, MT_PERMISSION_DENIED, "%s %s: %s", what, path, strerror(errno));
    buf = mt_malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        fclose(f);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s %s: out of memory", what, path);
    }
    n = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    buf[n] = '\0';
    if (strstr(buf, "-----BEGIN ") == NULL) {
        mt_free(buf);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s %s: not PEM (no -----BEGIN line)", what,
                          path);
    }
    *out = buf;
    return MT_OK;
}

static void wipe_free(char *s)
{
    if (s == NULL)
        return;
    for (volatile char *p = s; *p != '\0'; p++)
        *p = '\0';
    mt_free(s);
}

mt_tls *mt_tls_hold(const mt_tls *t)
{
    mt_tls *m = (mt_tls *)t; /* only the count changes: the settings stay immutable */
    if (m != NULL)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

void mt_tls_free(mt_tls *t)
{
    if (t == NULL || atomic_fetch_sub(&t->refs, 1) > 1)
        return;
    mt_free(t->cert);
    wipe_free(t->key);
    mt_free(t->ca);
    mt_free(t);
}

int mt_tls_url_is_tls(const char *url)
{
    return url != NULL && strncmp(url, "tls+tcp", 7) == 0 &&
           (strncmp(url + 7, "://", 3) == 0 || strncmp(url + 7, "4://", 4) == 0 ||
            strncmp(url + 7, "6://", 4) == 0);
}

int mt_tls_can_listen(const mt_tls *t)
{
    return t != NULL && t->cert != NULL && t->key != NULL;
}

int mt_tls_can_dial(const mt_tls *t)
{
    return t != NULL && t->ca != NULL;
}

void mt_tls_expected_name(const mt_tls *t, const char *url, char *out, size_t cap)
{
    const char *h, *end;

    out[0] = '\0';
    if (t != NULL && t->server_name[0] != '\0') {
        snprintf(out, cap, "%s", t->server_name);
        return;
    }
    if (url == NULL || (h = strstr(url, "://")) == NULL)
        return;
    h += 3;
    if (*h == '[') { /* [v6]:port */
        h++;
        end = strchr(h, ']');
    } else {
        end = strrchr(h, ':');
    }
    if (end == NULL)
        end = h + strlen(h);
    snprintf(out, cap, "%.*s", (int)(end - h), h);
}

/* A configuration of `mode` from t; *out owned by the caller (nng_tls_config_free). */
static mt_code make_config(const mt_tls *t, nng_tls_mode mode, nng_tls_auth_mode auth,
                           const char *name, nng_tls_config **out, mt_err *err)
{
    nng_tls_config *cfg = NULL;
    int rv;

    *out = NULL;
    if ((rv = nng_tls_config_alloc(&cfg, mode)) != 0)
        return mt_err_set(err, rv == NNG_ENOTSUP ? MT_UNIMPLEMENTED : MT_RESOURCE_EXHAUSTED,
                          "TLS: %s%s", nng_strerror(rv),
                          rv == NNG_ENOTSUP ? " (this libnng was built without TLS)" : "");
    rv = nng_tls_config_auth_mode(cfg, auth);
    if (rv == 0 && auth != NNG_TLS_AUTH_MODE_NONE &&
        (rv = nng_tls_config_ca_chain(cfg, t->ca, NULL)) != 0) {
        nng_tls_config_free(cfg);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "TLS CA file %s: %s", t->ca_file,
                          nng_strerror(rv));
    }
    if (rv == 0 && t->cert != NULL && (rv = nng_tls_config_own_cert(cfg, t->cert, t->key, NULL))) {
        nng_tls_config_free(cfg);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "TLS certificate or key: %s (is it PEM, unencrypted, and a pair?)",
                          nng_strerror(rv));
    }
    if (rv == 0 && name != NULL && name[0] != '\0')
        rv = nng_tls_config_server_name(cfg, name);
    if (rv != 0) {
        nng_tls_config_free(cfg);
        return mt_err_set(err, MT_INTERNAL, "TLS configuration: %s", nng_strerror(rv));
    }
    *out = cfg;
    return MT_OK;
}

mt_code mt_tls_new(const mt_tls_opts *o, mt_tls **out, mt_err *err)
{
    nng_tls_config *probe = NULL;
    mt_tls *t;
    mt_code rc;

    *out = NULL;
    if (o == NULL || ((o->cert_file == NULL) != (o->key_file == NULL)))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "TLS: a certificate needs its key and a key its certificate "
                          "(--tls-cert with --tls-key)");
    if (o->cert_file == NULL && o->ca_file == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "TLS: give a certificate and key (to listen) or a CA file (to dial)");
    if (o->server_name != NULL && strlen(o->server_name) >= sizeof(t->server_name))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "TLS: server name too long");
    if ((t = mt_calloc(1, sizeof(*t))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "TLS: out of memory");
    atomic_init(&t->refs, 1);
    snprintf(t->server_name, sizeof(t->server_name), "%s", o->server_name ? o->server_name : "");
    snprintf(t->ca_file, sizeof(t->ca_file), "%s", o->ca_file ? o->ca_file : "");
    if (o->cert_file != NULL &&
        ((rc = read_pem("TLS certificate", o->cert_file, 0, &t->cert, err)) != MT_OK ||
         (rc = read_pem("TLS key file", o->key_file, 1, &t->key, err)) != MT_OK))
        goto fail;
    if (o->ca_file != NULL && (rc = read_pem("TLS CA file", o->ca_file, 0, &t->ca, err)) != MT_OK)
        goto fail;
    /* parse everything now, so a bad file fails at start-up, not at the first connection */
    for (int client = 0; client < 2; client++) {
        if (client ? t->ca == NULL : t->cert == NULL)
            continue;
        rc = make_config(t, client ? NNG_TLS_MODE_CLIENT : NNG_TLS_MODE_SERVER,
                         t->ca != NULL ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE, NULL,
                         &probe, err);
        if (rc != MT_OK)
            goto fail;
        nng_tls_config_free(probe); /* nng_tls_config_free(NULL) crashes */
    }
    *out = t;
    return MT_OK;
fail:
    mt_tls_free(t);
    return rc;
}

static mt_code nng_addr_code(int rv)
{
    switch (rv) {
    case NNG_EADDRINVAL:
    case NNG_EINVAL:
    case NNG_ENOTSUP:
        return MT_INVALID_ARGUMENT;
    case NNG_ENOMEM:
        return MT_RESOURCE_EXHAUSTED;
    case NNG_ETIMEDOUT:
        return MT_DEADLINE_EXCEEDED;
    case NNG_EPEERAUTH:
        return MT_UNAUTHENTICATED;
    default:
        return MT_UNAVAILABLE;
    }
}

mt_code mt_tls_describe_nng(const mt_tls *t, const char *what, const char *url, int rv, mt_err *err)
{
    char name[256];

    if (rv == NNG_EPEERAUTH) {
        mt_tls_expected_name(t, url, name, sizeof(name));
        return mt_err_set(err, MT_UNAUTHENTICATED,
                          "%s %s: TLS: the peer's certificate did not verify against CA %s for "
                          "name '%s' (wrong CA or server name?)",
                          what, url, t != NULL && t->ca_file[0] ? t->ca_file : "(none)", name);
    }
    if (rv == NNG_ECRYPTO)
        return mt_err_set(err, MT_UNAVAILABLE,
                          "%s %s: TLS handshake failed: %s (not a TLS server, or it wants a "
                          "client certificate from the CA and refused ours?)",
                          what, url, nng_strerror(rv));
    return mt_err_set(err, nng_addr_code(rv), "%s %s: %s", what, url, nng_strerror(rv));
}

static mt_code need_tls(const char *url, const mt_tls *t, int listen, mt_err *err)
{
    if (listen && !mt_tls_can_listen(t))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "listen %s: a TLS address needs a certificate and key (--tls-cert, "
                          "--tls-key)",
                          url);
    if (!listen && !mt_tls_can_dial(t))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "connect %s: a TLS address needs the CA that signed the server's "
                          "certificate (--tls-ca)",
                          url);
    return MT_OK;
}

mt_code mt_tls_listen(nng_socket s, const char *url, const mt_tls *t, int require_peer,
                      nng_listener *out, mt_err *err)
{
    nng_tls_config *cfg = NULL;
    nng_listener l;
    mt_code rc;
    int rv;

    if (!mt_tls_url_is_tls(url)) {
        if ((rv = nng_listen(s, url, &l, 0)) != 0)
            return mt_err_set(err, nng_addr_code(rv), "listen %s: %s", url, nng_strerror(rv));
        if (out != NULL)
            *out = l;
        return MT_OK;
    }
    if ((rc = need_tls(url, t, 1, err)) != MT_OK)
        return rc;
    if (require_peer && t->ca == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "listen %s: verifying peers needs a CA file (--tls-ca)", url);
    if ((rc = make_config(t, NNG_TLS_MODE_SERVER,
                          require_peer ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE, NULL,
                          &cfg, err)) != MT_OK)
        return rc;
    if ((rv = nng_listener_create(&l, s, url)) != 0) {
        nng_tls_config_free(cfg);
        return mt_err_set(err, nng_addr_code(rv), "listen %s: %s", url, nng_strerror(rv));
    }
    rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    nng_tls_config_free(cfg); /* the listener holds its own reference */
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0) {
        nng_listener_close(l);
        return mt_err_set(err, nng_addr_code(rv), "listen %s: %s", url, nng_strerror(rv));
    }
    if (out != NULL)
        *out = l;
    return MT_OK;
}

mt_code mt_tls_dial(nng_socket s, const char *url, const mt_tls *t, int flags, mt_err *err)
{
    nng_tls_config *cfg = NULL;
    nng_dialer d;
    char name[256];
    mt_code rc;
    int rv;

    if (!mt_tls_url_is_tls(url)) {
        if ((rv = nng_dial(s, url, NULL, flags)) != 0)
            return mt_tls_describe_nng(t, "connect", url, rv, err);
        return MT_OK;
    }
    if ((rc = need_tls(url, t, 0, err)) != MT_OK)
        return rc;
    mt_tls_expected_name(t, url, name, sizeof(name));
    if ((rc = make_config(t, NNG_TLS_MODE_CLIENT, NNG_TLS_AUTH_MODE_REQUIRED, name, &cfg, err)) !=
        MT_OK)
        return rc;
    if ((rv = nng_dialer_create(&d, s, url)) != 0) {
        nng_tls_config_free(cfg);
        return mt_tls_describe_nng(t, "connect", url, rv, err);
    }
    rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
    nng_tls_config_free(cfg); /* the dialer holds its own reference */
    if (rv == 0)
        rv = nng_dialer_start(d, flags);
    if (rv != 0) {
        nng_dialer_close(d);
        if (rv == NNG_ECRYPTO && mt_tls_probe(url, t, 2000, err) != MT_OK)
            return err != NULL ? err->code : MT_UNAVAILABLE; /* the probe said why */
        return mt_tls_describe_nng(t, "connect", url, rv, err);
    }
    return MT_OK;
}

static mt_code stream_dialer(const char *url, const mt_tls *t, nng_tls_auth_mode auth,
                             nng_stream_dialer **out, mt_err *err)
{
    nng_tls_config *cfg = NULL;
    nng_stream_dialer *d = NULL;
    char name[256];
    mt_code rc;
    int rv;

    *out = NULL;
    if (mt_tls_url_is_tls(url)) {
        if ((rc = need_tls(url, t, 0, err)) != MT_OK)
            return rc;
        mt_tls_expected_name(t, url, name, sizeof(name));
        if ((rc = make_config(t, NNG_TLS_MODE_CLIENT, auth, name, &cfg, err)) != MT_OK)
            return rc;
    }
    if ((rv = nng_stream_dialer_alloc(&d, url)) != 0) {
        if (cfg != NULL)
            nng_tls_config_free(cfg);
        return mt_tls_describe_nng(t, "connect", url, rv, err);
    }
    if (cfg != NULL) {
        rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
        nng_tls_config_free(cfg);
        if (rv != 0) {
            nng_stream_dialer_free(d);
            return mt_tls_describe_nng(t, "connect", url, rv, err);
        }
    }
    *out = d;
    return MT_OK;
}

mt_code mt_tls_stream_dialer_new(const char *url, const mt_tls *t, nng_stream_dialer **out,
                                 mt_err *err)
{
    return stream_dialer(url, t, NNG_TLS_AUTH_MODE_REQUIRED, out, err);
}

mt_code mt_tls_probe(const char *url, const mt_tls *t, int timeout_ms, mt_err *err)
{
    nng_stream_dialer *d = NULL;
    nng_stream *st = NULL;
    nng_aio *aio = NULL;
    uint8_t hdr[8];
    nng_iov iov = {hdr, sizeof(hdr)};
    int64_t until = mt_clock_mono_ms() + timeout_ms;
    bool verified = true;
    mt_code rc;
    int rv;

    /* OPTIONAL: the handshake completes whatever the certificate, and NNG_OPT_TLS_VERIFIED
     * then says whether it verified (nng 1.5.2 reports a failed verification in REQUIRED mode
     * only as the generic NNG_ECRYPTO). Nothing is sent to the server. */
    if ((rc = stream_dialer(url, t, NNG_TLS_AUTH_MODE_OPTIONAL, &d, err)) != MT_OK)
        return rc;
    if ((rv = nng_aio_alloc(&aio, NULL, NULL)) != 0) {
        nng_stream_dialer_free(d);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "connect %s: %s", url, nng_strerror(rv));
    }
    nng_aio_set_timeout(aio, timeout_ms);
    nng_stream_dialer_dial(d, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv == 0 && mt_tls_url_is_tls(url)) {
        int64_t left = until - mt_clock_mono_ms();
        st = nng_aio_get_output(aio, 0);
        nng_aio_set_timeout(aio, left > 0 ? (nng_duration)left : 1);
        nng_aio_set_iov(aio, 1, &iov);
        nng_stream_recv(st, aio); /* completes the handshake: the server sends its SP header */
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv == 0 && nng_stream_get_bool(st, NNG_OPT_TLS_VERIFIED, &verified) != 0)
            verified = false;
        nng_stream_free(st);
    } else if (rv == 0) {
        nng_stream_free(nng_aio_get_output(aio, 0));
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    if (rv == NNG_ETIMEDOUT)
        return mt_err_set(err, MT_UNAVAILABLE, "connect %s: no answer within %d ms", url,
                          timeout_ms);
    if (rv == 0 && !verified)
        return mt_tls_describe_nng(t, "connect", url, NNG_EPEERAUTH, err);
    if (rv == NNG_ECRYPTO)
        return mt_tls_describe_nng(t, "connect", url, rv, err);
    if (rv != 0)
        return mt_err_set(err, MT_UNAVAILABLE, "connect %s: %s", url, nng_strerror(rv));
    return MT_OK;
}
