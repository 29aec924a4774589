/* SPDX-License-Identifier: MIT */
/*
 * mt_httpd.h — a small HTTP/1.1 server: sockets, parsing, limits and timeouts, and nothing
 * about meshtrain. Its users pass one handler that turns a parsed request into a response: the
 * coordinator's status endpoint (coordinator/http.c) and the worker's metrics endpoint
 * (worker/metrics.c).
 *
 * What it promises a hostile or careless client (docs/api.md, "Limits"):
 *   a request line longer than max_line          -> 414, then the connection is closed;
 *   a head (request line + headers) longer than max_head, or more than max_headers header
 *   lines                                         -> 431, closed;
 *   a body longer than max_body                   -> 413, closed; Transfer-Encoding -> 501;
 *   a malformed request line or header            -> 400, closed;
 *   a request that has not fully arrived timeout_ms after the connection was ready for it
 *   (a slow or idle client)                       -> 408 if part of it came, else silently closed;
 *   a response the client has not taken within timeout_ms -> closed;
 *   more than max_conns open connections          -> the new one gets 503 and is closed.
 * An error response is followed by a lingering close (write side shut, the rest of the
 * request read and dropped for up to a second) so the client reads the status instead of a
 * reset. Keep-alive and pipelined requests are served in order. A client that half-closes
 * (shutdown) still gets the answers to the requests that fully arrived, then the connection
 * closes; half a request before the half-close is dropped without an answer.
 *
 * Threading: one I/O thread (poll) owns the sockets; `threads` handler threads run the handler,
 * several at once, each on its own connection. open/close from the main thread; close waits for
 * the handlers in progress. Tests: tests/integration/test_http_limits.sh, test_http_api.sh,
 * test_worker_metrics.sh; tests/fuzz/fuzz_http.c.
 */
#ifndef MT_HTTPD_H
#define MT_HTTPD_H

#include <stddef.h>

#include "status/mt_status.h"

typedef struct mt_httpd mt_httpd;

/* A parsed request; every pointer borrowed, valid during the handler call. */
typedef struct mt_httpd_req {
    const char *method; /* "GET" ... */
    const char *uri;    /* as sent: path?query */
    const char *body;   /* Content-Length bytes (NUL-terminated), "" when none */
    size_t body_len;
    const char *const *hdr; /* name, value, name, value ... (names as sent) */
    size_t n_hdr;           /* pairs */
} mt_httpd_req;

typedef struct mt_httpd_res mt_httpd_res;

/* The value of header name (case-insensitive), or NULL. */
const char *mt_httpd_req_header(const mt_httpd_req *q, const char *name);

/* Building the response, from the handler: the status (default 200), extra headers (copied;
 * Content-Length and Connection are the server's), the body (copied). */
void mt_httpd_res_status(mt_httpd_res *r, int status);
void mt_httpd_res_header(mt_httpd_res *r, const char *name, const char *value);
void mt_httpd_res_body(mt_httpd_res *r, const void *data, size_t len);

/* Runs on a handler thread; must fill r (an untouched r is an empty 200). */
typedef void (*mt_httpd_fn)(void *arg, const mt_httpd_req *q, mt_httpd_res *r);

typedef struct mt_httpd_opts {
    int timeout_ms;     /* a request must arrive, and a response be taken, within this */
    int max_conns;      /* open connections; one more is answered 503 */
    int threads;        /* handler threads */
    size_t max_line;    /* request line bytes (414) */
    size_t max_head;    /* request line + headers bytes (431) */
    size_t max_headers; /* header lines (431) */
    size_t max_body;    /* body bytes (413) */
} mt_httpd_opts;

#define MT_HTTPD_OPTS_DEFAULTS                                                                     \
    {                                                                                              \
        10000, 512, 4, 8192, 16384, 100, 8192                                                      \
    }

/*
 * Listen on addr ("HOST:PORT"; port 0 picks one) and start the threads. opts and fn/arg are
 * borrowed until mt_httpd_close. On OK *out is owned and bound (cap bytes) gets
 * "http://IP:PORT". Codes: INVALID_ARGUMENT (address), UNAVAILABLE (cannot bind: in use,
 * not local), RESOURCE_EXHAUSTED. Blocks briefly (DNS for a host name); main thread.
 */
mt_code mt_httpd_open(const char *addr, const mt_httpd_opts *opts, mt_httpd_fn fn, void *arg,
                      mt_httpd **out, char *bound, size_t cap, mt_err *err);

/* Stop accepting, wait for the handlers in progress, close every connection, free. NULL: no-op.
 */
void mt_httpd_close(mt_httpd *s);

#endif
