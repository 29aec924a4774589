/* SPDX-License-Identifier: MIT */
/*
 * http.c — the coordinator's HTTP status endpoint on nng's HTTP server.
 *
 * Serves GET /healthz ("ok", always open, even with a token configured). The
 * JSON API, Prometheus metrics and dashboard of the status issue (#9) register
 * further handlers here. nng runs handlers on its own threads: a handler that
 * needs coordinator state must hand the request to the loop thread.
 */
#include "coordinator/coord_int.h"

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"

struct coord_http {
    nng_http_server *srv;
};

static void healthz(nng_aio *aio)
{
    static const char body[] = "ok\n";
    nng_http_res *res = NULL;
    int rv;

    if ((rv = nng_http_res_alloc(&res)) != 0) {
        nng_aio_finish(aio, rv);
        return;
    }
    nng_http_res_set_header(res, "Content-Type", "text/plain; charset=utf-8");
    nng_http_res_set_header(res, "Cache-Control", "no-store");
    nng_http_res_copy_data(res, body, sizeof(body) - 1);
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

mt_code coord_http_open(mt_coord *c, const char *addr, struct coord_http **out, char *bound,
                        size_t cap, mt_err *err)
{
    struct coord_http *h;
    nng_http_handler *hh = NULL;
    nng_url *url = NULL;
    nng_sockaddr sa;
    char full[300];
    int rv;

    (void)c;
    *out = NULL;
    snprintf(full, sizeof(full), "http://%s", addr);
    if ((rv = nng_url_parse(&url, full)) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "--http %s: %s (expected HOST:PORT)", addr,
                          nng_strerror(rv));
    h = mt_calloc(1, sizeof(*h));
    if (h == NULL) {
        nng_url_free(url);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: out of memory");
    }
    if ((rv = nng_http_server_hold(&h->srv, url)) != 0 ||
        (rv = nng_http_handler_alloc(&hh, "/healthz", healthz)) != 0 ||
        (rv = nng_http_handler_set_method(hh, "GET")) != 0 ||
        (rv = nng_http_server_add_handler(h->srv, hh)) != 0) {
        if (hh != NULL)
            nng_http_handler_free(hh);
        goto fail;
    }
    hh = NULL;
    if ((rv = nng_http_server_start(h->srv)) != 0)
        goto fail;
    snprintf(bound, cap, "http://%s", addr);
    if (nng_http_server_get_addr(h->srv, &sa) == 0 && sa.s_family == NNG_AF_INET) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sa.s_in.sa_addr, ip, sizeof(ip));
        snprintf(bound, cap, "http://%s:%u", ip, (unsigned)ntohs(sa.s_in.sa_port));
    }
    nng_url_free(url);
    *out = h;
    return MT_OK;
fail:
    if (h->srv != NULL)
        nng_http_server_release(h->srv);
    mt_free(h);
    nng_url_free(url);
    return mt_err_set(err, rv == NNG_EADDRINUSE ? MT_UNAVAILABLE : MT_INVALID_ARGUMENT,
                      "http listen %s: %s", addr, nng_strerror(rv));
}

void coord_http_close(struct coord_http *h)
{
    if (h == NULL)
        return;
    nng_http_server_stop(h->srv);
    nng_http_server_release(h->srv);
    mt_free(h);
}
