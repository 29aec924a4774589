/* SPDX-License-Identifier: MIT */
/*
 * mt_tls.h — TLS settings for nng's tls+tcp:// transport, shared by the control plane (core/rpc,
 * the coordinator's metrics stream, core/watch) and the data plane (core/coll).
 *
 * An mt_tls holds what one process needs to speak TLS: its own certificate and private key (to
 * listen, and to present to peers that require one), the CA certificates peers are verified
 * against, and optionally the name expected in servers' certificates. mt_tls_new reads and
 * checks the files once (the key file must not be readable by group or others, as the token
 * file) and keeps their contents, so later connections do not touch the file system.
 *
 * mt_tls_listen / mt_tls_dial replace nng_listen / nng_dial: for a tls+tcp:// URL they attach an
 * nng TLS configuration built from the mt_tls; any other URL goes to nng unchanged (tls may then
 * be NULL). A dialer always verifies the server's certificate (chain to the CA, and the name:
 * server_name when set, else the URL's host). mbed TLS, which Debian's libnng 1.5.2 uses, does not
 * match IP-address subjectAltNames: give certificates a DNS name and set server_name when
 * dialing an IP address. A listener asked to (require_peer) also verifies the dialer's certificate
 * against the CA (mutual TLS, used by the data plane).
 *
 * mt_tls_describe_nng turns an nng error from a TLS connection into a message naming the address
 * and the cause (UNAUTHENTICATED when the peer's certificate did not verify).
 *
 * Threading: an mt_tls is immutable after mt_tls_new (but for its atomic reference count,
 * mt_tls_hold / mt_tls_free); every function may be called from any
 * thread. Tests: tests/unit/test_tls.c, tests/integration/test_tls.sh.
 */
#ifndef MT_TLS_H
#define MT_TLS_H

#include <nng/nng.h>

#include "status/mt_status.h"

#define MT_TLS_FILE_MAX (1u << 20) /* largest certificate, key or CA file read */

typedef struct mt_tls mt_tls;

typedef struct mt_tls_opts {
    const char *cert_file;   /* own certificate (chain), PEM; NULL = none (may only dial) */
    const char *key_file;    /* its private key, PEM, unencrypted, mode 0600; with cert_file */
    const char *ca_file;     /* CA certificate(s) peers are verified against; NULL = none (may
                                only listen without verifying dialers) */
    const char *server_name; /* name expected in servers' certificates; NULL = the URL's host */
} mt_tls_opts;

#define MT_TLS_OPTS_DEFAULTS                                                                       \
    {                                                                                              \
        NULL, NULL, NULL, NULL                                                                     \
    }

/*
 * Read and check the files of *o (borrowed). Needs cert_file and key_file together, and at least
 * them or ca_file. Returns MT_OK and *out (returns owned: mt_tls_free), or: INVALID_ARGUMENT (no
 * files, cert without key, a file that is not PEM or that nng cannot parse — the message names
 * the file), NOT_FOUND (missing file), PERMISSION_DENIED (key
 * file readable by group or others, naming its mode; unreadable file), UNIMPLEMENTED (libnng
 * built without TLS). Any thread.
 */
mt_code mt_tls_new(const mt_tls_opts *o, mt_tls **out, mt_err *err);

/*
 * Drop a reference; the last one frees (wiping the key bytes). NULL is a no-op. Sockets dialed or
 * listening with it keep working.
 */
void mt_tls_free(mt_tls *t);

/* Take another reference to t (for an object that keeps it); returns t. NULL: NULL. Any thread. */
mt_tls *mt_tls_hold(const mt_tls *t);

/* 1 when url uses nng's TLS transport ("tls+tcp://", "tls+tcp4://", "tls+tcp6://"), else 0. */
int mt_tls_url_is_tls(const char *url);

/* 1 when t can listen (has a certificate and key); 0 for NULL. */
int mt_tls_can_listen(const mt_tls *t);

/* 1 when t can dial (has a CA to verify servers with); 0 for NULL. */
int mt_tls_can_dial(const mt_tls *t);

/*
 * nng_listen(s, url, out, 0), with TLS when url is tls+tcp:// (t borrowed; nng keeps its own
 * reference to the configuration). require_peer: dialers must present a certificate that
 * verifies against t's CA. Returns MT_OK and *out (may be NULL), or INVALID_ARGUMENT (TLS URL
 * without t or without a certificate; require_peer without a CA; a malformed URL), UNAVAILABLE
 * (address in use / cannot listen; names the address), RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_tls_listen(nng_socket s, const char *url, const mt_tls *t, int require_peer,
                      nng_listener *out, mt_err *err);

/*
 * nng_dial(s, url, NULL, flags), with TLS when url is tls+tcp:// (t borrowed): the server's
 * certificate must verify against t's CA with the expected name; t's own certificate, when it
 * has one, is presented. Codes as mt_tls_listen (INVALID_ARGUMENT for a TLS URL without t or
 * without a CA), and for a blocking dial the connection's failure (mt_tls_describe_nng).
 */
mt_code mt_tls_dial(nng_socket s, const char *url, const mt_tls *t, int flags, mt_err *err);

/*
 * A stream dialer for url (nng_stream_dialer_alloc), with t's client configuration when url is
 * tls+tcp:// (t borrowed). Returns MT_OK and *out (returns owned: nng_stream_dialer_free), or
 * INVALID_ARGUMENT / RESOURCE_EXHAUSTED. Used to probe an address and report why it fails.
 */
mt_code mt_tls_stream_dialer_new(const char *url, const mt_tls *t, nng_stream_dialer **out,
                                 mt_err *err);

/*
 * Probe url within timeout_ms to say why a connection fails: a stream connection is made and,
 * for tls+tcp://, the TLS handshake completed (reading the server's first bytes; nothing is
 * sent) and the server's certificate checked. Returns MT_OK when a server answers and its
 * certificate verifies; else UNAUTHENTICATED (certificate did not verify: wrong CA or name,
 * naming the address, the CA file and the name), UNAVAILABLE ("connect URL: Connection
 * refused", no answer in time, or the TLS handshake failed), INVALID_ARGUMENT (bad URL, TLS URL
 * without a CA). Blocks up to timeout_ms. Note: with nng 1.5.2 a listener-side pipe is leaked
 * for each connection that closes before the SP handshake, so probe only when the normal dial
 * did not succeed.
 */
mt_code mt_tls_probe(const char *url, const mt_tls *t, int timeout_ms, mt_err *err);

/*
 * Set err from nng error rv of a connection to url: "connect URL: TLS: the server's certificate
 * did not verify against CA F for name N (wrong CA or server name?)" -> UNAUTHENTICATED for
 * NNG_EPEERAUTH, "... TLS handshake failed (not a TLS server, or it refused our certificate?)"
 * -> UNAVAILABLE for NNG_ECRYPTO (nng 1.5.2 also reports a certificate that did not verify so:
 * mt_tls_probe tells them apart), else "connect URL: <nng text>" (UNAVAILABLE, DEADLINE_EXCEEDED
 * for a timeout, INVALID_ARGUMENT for a bad address). `what` prefixes the message ("connect").
 * Returns the code. t may be NULL.
 */
mt_code mt_tls_describe_nng(const mt_tls *t, const char *what, const char *url, int rv,
                            mt_err *err);

/* The name servers' certificates are checked against for url (server_name or the URL's host)
 * into out; "" when unknown. */
void mt_tls_expected_name(const mt_tls *t, const char *url, char *out, size_t cap);

#endif
