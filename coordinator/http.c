/* SPDX-License-Identifier: MIT */
/*
 * http.c — the coordinator's HTTP status endpoint on its own small HTTP/1.1
 * server (core/httpd: limits, timeouts, a connection cap): one catch-all
 * handler that authenticates and routes through a table (routes[]), the
 * dashboard's static assets, and the login form. Endpoints: docs/api.md; dashboard:
 * docs/dashboard.md.
 *
 * How it fits: coord.c calls coord_http_open() after the store is open and
 * coord_http_close() at shutdown. Routes: /healthz (always open), /login,
 * /logout, /metrics (http_prom.c), /api/v1/... (http_api.c; its POST actions in http_act.c,
 * a checkpoint download sent from here as a file), /, /jobs/ID, /compare, /workers (dashboard
 * pages) and /static/NAME (assets). Only /login and /api/v1 take POST.
 *
 * DESIGN: handlers run on the server's threads, so nothing here touches the
 * loop's state: data comes from a read-only SQLite connection owned by this
 * file and serialised by a mutex (coord_http_ctx), process metrics from the
 * atomic coord_stats. Dashboard assets are read into memory once at open (a
 * few hundred KB); each gets an ETag (FNV-1a of the bytes) and the pages refer
 * to them with ?v=HASH, so /static/ answers may be cached for a year. When a
 * token is configured every route but /healthz and /login requires it, as
 * "Authorization: Bearer TOKEN" or as the HttpOnly SameSite=Strict cookie the
 * login form sets; the comparison is constant-time (mt_rpc_token_equal).
 *
 * Threading: open/close on the main thread; handlers on the server's threads.
 * Tests: tests/integration/test_http_api.sh, test_dashboard.sh, test_workers.sh,
 * test_http_limits.sh.
 */
#include "coordinator/coord_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/http_int.h"
#include "coordinator/mcache.h"
#include "httpd/mt_httpd.h"
#include "log/mt_log.h"

#define HTML_TYPE "text/html; charset=utf-8"
#define COOKIE    "mt_session"
/* a job's cached metric series are dropped after this long without a read (mcache.h) */
#define METRICS_CACHE_IDLE_MS (10 * 60 * 1000)
/* pages load only their own scripts and styles; inline style attributes (set by app.js and
 * Chart.js) are allowed; no framing (clickjacking) */
#define PAGE_CSP "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"

typedef struct asset {
    const char *name; /* file name under the dashboard dir, served as /static/NAME or a page */
    const char *type; /* Content-Type */
    int page;         /* 1: an HTML page (revalidated each time, @V@ replaced) */
    char *data;       /* owned; NULL when the file could not be read */
    size_t len;
    char etag[24]; /* "\"<16 hex>\"" */
} asset;

struct coord_http {
    mt_httpd *srv;
    coord_http_ctx ctx;
    char token[MT_RPC_TOKEN_MAX];         /* "" = open */
    char token_hex[2 * MT_RPC_TOKEN_MAX]; /* the cookie's value: hex, so any token byte is safe */
    char dir[1024];                       /* dashboard dir */
    asset assets[7];
    size_t n_assets;
};

#define FILE_MAX  (1L << 30) /* the largest checkpoint a download reads into memory */
#define ASSET_MAX (32L << 20)

static char *read_file(const char *path, size_t *len, long max);

/* Send r (status, type, body copied) with extra headers (name/value pairs, NULL-ended). */
static void send_reply(mt_httpd_res *res, coord_http_reply *r, const char *cache,
                       const char *const *hdr)
{
    if (r->body.oom) {
        coord_buf_fini(&r->body);
        r->status = 503;
        r->content_type = "text/plain; charset=utf-8";
        coord_buf_puts(&r->body, "out of memory\n");
    }
    mt_httpd_res_status(res, r->status);
    if (r->content_type != NULL)
        mt_httpd_res_header(res, "Content-Type", r->content_type);
    mt_httpd_res_header(res, "Cache-Control", cache ? cache : "no-store");
    mt_httpd_res_header(res, "X-Content-Type-Options", "nosniff");
    if (r->content_type != NULL && strncmp(r->content_type, "text/html", 9) == 0)
        mt_httpd_res_header(res, "Content-Security-Policy", PAGE_CSP);
    for (size_t i = 0; hdr != NULL && hdr[i] != NULL; i += 2)
        mt_httpd_res_header(res, hdr[i], hdr[i + 1]);
    mt_httpd_res_body(res, r->body.data, r->body.len);
    coord_buf_fini(&r->body);
}

/* A file download the API chose (r->file, a checkpoint): read it now, outside the store's lock. */
static void send_file(mt_httpd_res *res, coord_http_reply *r)
{
    char disp[160];
    size_t len = 0;
    char *data = read_file(r->file, &len, FILE_MAX);

    if (data == NULL) {
        char msg[1300];
        snprintf(msg, sizeof(msg), "read %s: %s", r->file,
                 errno == EFBIG ? "larger than the 1 GiB a download may be: use meshtrain export"
                                : strerror(errno));
        r->file[0] = '\0';
        coord_http__error(r, errno == ENOENT ? 404 : 503,
                          errno == ENOENT ? MT_NOT_FOUND : MT_UNAVAILABLE, msg);
        send_reply(res, r, NULL, NULL);
        return;
    }
    snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", r->filename);
    mt_httpd_res_status(res, 200);
    mt_httpd_res_header(res, "Content-Type", "application/octet-stream");
    mt_httpd_res_header(res, "Content-Disposition", disp);
    mt_httpd_res_header(res, "Cache-Control", "no-store");
    mt_httpd_res_header(res, "X-Content-Type-Options", "nosniff");
    mt_httpd_res_body(res, data, len);
    mt_free(data);
    coord_buf_fini(&r->body);
}

/* ------------------------------------------------------------ assets */

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The whole file (NUL-terminated), owned; NULL with errno set (EFBIG: longer than max). */
static char *read_file(const char *path, size_t *len, long max)
{
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    long n = -1;
    int e = 0;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        e = errno ? errno : EIO;
    else if (n >= max)
        e = EFBIG;
    else if ((data = mt_malloc((size_t)n + 1)) == NULL)
        e = ENOMEM;
    else if (fread(data, 1, (size_t)n, f) != (size_t)n)
        e = EIO;
    if (e != 0) {
        mt_free(data);
        data = NULL;
    } else {
        data[n] = '\0';
        *len = (size_t)n;
    }
    fclose(f);
    errno = e;
    return data;
}

/* Replace every "@V@" in a page with the assets' version hash. Takes data, returns owned. */
static char *subst_version(char *data, size_t *len, const char *v)
{
    coord_buf b = {0};
    const char *p = data, *q;

    while ((q = strstr(p, "@V@")) != NULL) {
        coord_buf_add(&b, p, (size_t)(q - p));
        coord_buf_puts(&b, v);
        p = q + 3;
    }
    coord_buf_puts(&b, p);
    mt_free(data);
    if (b.oom) {
        coord_buf_fini(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

static void assets_load(struct coord_http *h)
{
    static const struct {
        const char *name, *type;
        int page;
    } list[] = {
        {"index.html", HTML_TYPE, 1},
        {"job.html", HTML_TYPE, 1},
        {"workers.html", HTML_TYPE, 1},
        {"compare.html", HTML_TYPE, 1},
        {"app.js", "text/javascript; charset=utf-8", 0},
        {"app.css", "text/css; charset=utf-8", 0},
        {"chart.min.js", "text/javascript; charset=utf-8", 0},
    };
    static const char *const chart_paths[] = {
        "/usr/share/javascript/chart.js/chart.min.js",
        "/usr/share/javascript/chart.js/chart.umd.min.js",
    };
    uint64_t all = 1469598103934665603ull;
    char path[1100], version[17];

    h->n_assets = sizeof(list) / sizeof(list[0]);
    for (size_t i = 0; i < h->n_assets; i++) {
        asset *a = &h->assets[i];
        a->name = list[i].name;
        a->type = list[i].type;
        a->page = list[i].page;
        snprintf(path, sizeof(path), "%s/%s", h->dir, a->name);
        a->data = read_file(path, &a->len, ASSET_MAX);
        for (size_t k = 0; a->data == NULL && strcmp(a->name, "chart.min.js") == 0 &&
                           k < sizeof(chart_paths) / sizeof(chart_paths[0]);
             k++)
            a->data = read_file(chart_paths[k], &a->len, ASSET_MAX);
        if (a->data == NULL) {
            mt_log_warn("dashboard: cannot read %s: %s (the page that needs it will not work)",
                        path, strerror(errno));
            continue;
        }
        if (!a->page)
            all ^= fnv1a(a->data, a->len) + i;
    }
    snprintf(version, sizeof(version), "%016llx", (unsigned long long)all);
    for (size_t i = 0; i < h->n_assets; i++) {
        asset *a = &h->assets[i];
        if (a->data != NULL && a->page)
            a->data = subst_version(a->data, &a->len, version);
        if (a->data != NULL)
            snprintf(a->etag, sizeof(a->etag), "\"%016llx\"",
                     (unsigned long long)fnv1a(a->data, a->len));
    }
}

static const asset *asset_find(const struct coord_http *h, const char *name)
{
    for (size_t i = 0; i < h->n_assets; i++)
        if (strcmp(h->assets[i].name, name) == 0)
            return h->assets[i].data != NULL ? &h->assets[i] : NULL;
    return NULL;
}

static void send_asset(mt_httpd_res *res, const mt_httpd_req *req, const asset *a)
{
    const char *inm = mt_httpd_req_header(req, "If-None-Match");

    mt_httpd_res_header(res, "ETag", a->etag);
    mt_httpd_res_header(res, "Cache-Control",
                        a->page ? "no-cache" : "public, max-age=31536000, immutable");
    mt_httpd_res_header(res, "X-Content-Type-Options", "nosniff");
    if (a->page)
        mt_httpd_res_header(res, "Content-Security-Policy", PAGE_CSP);
    if (inm != NULL && strstr(inm, a->etag) != NULL) {
        mt_httpd_res_status(res, 304);
    } else {
        mt_httpd_res_header(res, "Content-Type", a->type);
        mt_httpd_res_body(res, a->data, a->len);
    }
}

/* ------------------------------------------------------------ auth */

/* Copy the value of cookie `name` from a Cookie header into out. 1 when found. */
static int cookie_get(const char *hdr, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);

    while (hdr != NULL && *hdr) {
        while (*hdr == ' ' || *hdr == ';')
            hdr++;
        const char *end = strchr(hdr, ';');
        size_t len = end ? (size_t)(end - hdr) : strlen(hdr);
        if (len > nl && strncmp(hdr, name, nl) == 0 && hdr[nl] == '=') {
            size_t vl = len - nl - 1;
            if (vl >= cap)
                return 0;
            memcpy(out, hdr + nl + 1, vl);
            out[vl] = '\0';
            return 1;
        }
        hdr = end;
    }
    return 0;
}

static int authorized(const struct coord_http *h, const mt_httpd_req *req)
{
    const char *auth;
    char tok[2 * MT_RPC_TOKEN_MAX];

    if (h->token[0] == '\0')
        return 1;
    auth = mt_httpd_req_header(req, "Authorization");
    if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *t = auth + 7;
        while (*t == ' ')
            t++;
        return strlen(t) < MT_RPC_TOKEN_MAX && mt_rpc_token_equal(t, h->token);
    }
    if (cookie_get(mt_httpd_req_header(req, "Cookie"), COOKIE, tok, sizeof(tok)))
        return mt_rpc_token_equal(tok, h->token_hex);
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decode application/x-www-form-urlencoded field `key` of body into out. 1 when found. */
static int form_get(const char *body, size_t len, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key), i = 0;

    while (i < len) {
        size_t end = i;
        while (end < len && body[end] != '&')
            end++;
        if (end - i > kl && strncmp(body + i, key, kl) == 0 && body[i + kl] == '=') {
            size_t o = 0;
            for (size_t k = i + kl + 1; k < end; k++) {
                int c = body[k];
                if (c == '+') {
                    c = ' ';
                } else if (c == '%' && k + 2 < end && hexval(body[k + 1]) >= 0 &&
                           hexval(body[k + 2]) >= 0) {
                    c = hexval(body[k + 1]) * 16 + hexval(body[k + 2]);
                    k += 2;
                }
                if (o + 1 >= cap)
                    return 0;
                out[o++] = (char)c;
            }
            out[o] = '\0';
            return 1;
        }
        i = end + 1;
    }
    return 0;
}

static void login_page(coord_http_reply *r, int status, const char *msg)
{
    r->status = status;
    r->content_type = HTML_TYPE;
    coord_buf_puts(&r->body,
                   "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>meshtrain: sign in</title><style>body{font:15px system-ui,sans-serif;"
                   "margin:4em auto;max-width:22em}input{font:inherit;padding:.4em;width:100%;"
                   "box-sizing:border-box;margin:.4em 0}p.e{color:#b00}</style></head><body>"
                   "<h1>meshtrain</h1><form method=\"post\" action=\"/login\">"
                   "<label>Coordinator token<input type=\"password\" name=\"token\" "
                   "autocomplete=\"current-password\" autofocus></label>"
                   "<input type=\"submit\" value=\"Sign in\"></form>");
    if (msg != NULL)
        coord_buf_printf(&r->body, "<p class=\"e\">%s</p>", msg);
    coord_buf_puts(&r->body, "</body></html>\n");
}

static void handle_login(struct coord_http *h, mt_httpd_res *res, const mt_httpd_req *req)
{
    coord_http_reply r = {0};
    char tok[MT_RPC_TOKEN_MAX], cookie[2 * MT_RPC_TOKEN_MAX + 80];
    const char *body = req->body;
    size_t len = req->body_len;

    if (strcmp(req->method, "POST") != 0) {
        login_page(&r, 200,
                   h->token[0] ? NULL
                               : "This coordinator has no token: no sign-in "
                                 "needed.");
        send_reply(res, &r, NULL, NULL);
        return;
    }
    if (h->token[0] == '\0' || !form_get(body, len, "token", tok, sizeof(tok)) ||
        !mt_rpc_token_equal(tok, h->token)) {
        login_page(&r, 401, "Wrong token.");
        send_reply(res, &r, NULL, NULL);
        return;
    }
    snprintf(cookie, sizeof(cookie), COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict", h->token_hex);
    const char *hdr[] = {"Set-Cookie", cookie, "Location", "/", NULL};
    r.status = 303;
    send_reply(res, &r, NULL, hdr);
}

/* ------------------------------------------------------------ routing */

typedef void (*route_fn)(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                         const char *path, const char *query);

static void route_healthz(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                          const char *path, const char *query)
{
    coord_http_reply r = {0};

    (void)h, (void)req, (void)path, (void)query;
    r.status = 200;
    r.content_type = "text/plain; charset=utf-8";
    coord_buf_puts(&r.body, "ok\n");
    send_reply(res, &r, NULL, NULL);
}

static void route_login(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                        const char *path, const char *query)
{
    (void)path, (void)query;
    handle_login(h, res, req);
}

static void route_logout(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                         const char *path, const char *query)
{
    const char *hdr[] = {"Set-Cookie", COOKIE "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
                         "Location", "/login", NULL};
    coord_http_reply r = {0};

    (void)h, (void)req, (void)path, (void)query;
    r.status = 303;
    send_reply(res, &r, NULL, hdr);
}

static void route_prom(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                       const char *path, const char *query)
{
    coord_http_reply r = {0};

    (void)req, (void)path, (void)query;
    coord_http__prom(&h->ctx, &r);
    send_reply(res, &r, NULL, NULL);
}

static void route_api(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                      const char *path, const char *query)
{
    coord_http_reply r = {0};
    coord_http_call call = {req->method, path,          query,
                            req->body,   req->body_len, mt_httpd_req_header(req, "Content-Type")};

    coord_http__api(&h->ctx, &call, &r);
    if (r.file[0] != '\0')
        send_file(res, &r);
    else
        send_reply(res, &r, NULL, NULL);
}

static void not_found(mt_httpd_res *res, const char *path)
{
    coord_http_reply r = {0};
    char msg[600];

    snprintf(msg, sizeof(msg), "no such resource: %s", path);
    coord_http__error(&r, 404, MT_NOT_FOUND, msg);
    send_reply(res, &r, NULL, NULL);
}

/* The dashboard's pages (/, /workers, /compare, /jobs/ID) and assets (/static/NAME, not the
 * pages). */
static void route_page(struct coord_http *h, const mt_httpd_req *req, mt_httpd_res *res,
                       const char *path, const char *query)
{
    const char *page = NULL;
    const asset *a;

    (void)query;
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
        page = "index.html";
    else if (strcmp(path, "/workers") == 0)
        page = "workers.html";
    else if (strcmp(path, "/compare") == 0)
        page = "compare.html";
    else if (strncmp(path, "/jobs/", 6) == 0 && path[6] != '\0' && strchr(path + 6, '/') == NULL)
        page = "job.html";
    else if (strncmp(path, "/static/", 8) == 0 && strcmp(path + 8, "index.html") != 0 &&
             strcmp(path + 8, "job.html") != 0 && strcmp(path + 8, "workers.html") != 0 &&
             strcmp(path + 8, "compare.html") != 0)
        page = path + 8;
    a = page != NULL ? asset_find(h, page) : NULL;
    if (a != NULL)
        send_asset(res, req, a);
    else
        not_found(res, path);
}

/* One route: an exact path, or a prefix when it ends in '/' (after the exact ones), as coord.c's
 * RPC handler table and http_api.c's api_routes. */
typedef struct http_route {
    const char *path;
    int open;       /* served without the token */
    int any_method; /* else GET and HEAD only (405 otherwise) */
    int post;       /* POST too (the API's actions, http_act.c) */
    int api;        /* without the token: 401 with a JSON error, else a redirect to /login */
    route_fn fn;
} http_route;

static const http_route routes[] = {
    {"/healthz", 1, 0, 0, 0, route_healthz}, {"/login", 1, 1, 0, 0, route_login},
    {"/logout", 1, 1, 0, 0, route_logout},   {"/metrics", 0, 0, 0, 1, route_prom},
    {"/api/v1", 0, 0, 0, 1, route_api},      {"/", 0, 0, 0, 0, route_page},
    {"/index.html", 0, 0, 0, 0, route_page}, {"/workers", 0, 0, 0, 0, route_page},
    {"/compare", 0, 0, 0, 0, route_page},    {"/api/v1/", 0, 0, 1, 1, route_api},
    {"/jobs/", 0, 0, 0, 0, route_page},      {"/static/", 0, 0, 0, 1, route_page},
};

static const http_route *route_find(const char *path)
{
    size_t n = sizeof(routes) / sizeof(routes[0]);

    for (size_t i = 0; i < n; i++)
        if (strcmp(routes[i].path, path) == 0)
            return &routes[i];
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(routes[i].path);
        if (len > 1 && routes[i].path[len - 1] == '/' && strncmp(routes[i].path, path, len) == 0)
            return &routes[i];
    }
    return NULL;
}

static void handle(void *arg, const mt_httpd_req *req, mt_httpd_res *res)
{
    struct coord_http *h = arg;
    const char *uri = req->uri;
    const char *q = strchr(uri, '?');
    coord_http_reply r = {0};
    char path[512];
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    int get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
    int post = strcmp(req->method, "POST") == 0;
    const http_route *rt;

    if (plen >= sizeof(path)) {
        coord_http__error(&r, 414, MT_INVALID_ARGUMENT, "request path too long");
        send_reply(res, &r, NULL, NULL);
        return;
    }
    memcpy(path, uri, plen);
    path[plen] = '\0';
    rt = route_find(path);
    if (!get && (rt == NULL || !(rt->any_method || (rt->post && post)))) {
        const char *hdr[] = {"Allow", "GET, HEAD", NULL};
        coord_http__error(&r, 405, MT_INVALID_ARGUMENT,
                          "the status endpoint is read-only but for the API's actions");
        send_reply(res, &r, NULL, hdr);
        return;
    }
    if ((rt == NULL || !rt->open) && !authorized(h, req)) {
        if (rt != NULL ? rt->api : strncmp(path, "/api/", 5) == 0) {
            const char *hdr[] = {"WWW-Authenticate", "Bearer realm=\"meshtrain\"", NULL};
            coord_http__error(&r, 401, MT_UNAUTHENTICATED,
                              "this coordinator requires its token: send 'Authorization: "
                              "Bearer TOKEN' or sign in at /login");
            send_reply(res, &r, NULL, hdr);
        } else {
            const char *hdr[] = {"Location", "/login", NULL};
            r.status = 303;
            send_reply(res, &r, NULL, hdr);
        }
        return;
    }
    if (rt == NULL)
        not_found(res, path);
    else
        rt->fn(h, req, res, path, q ? q + 1 : "");
}

/* --dashboard-dir, else the source tree's copy (a development build), else the installed one. */
static const char *dashboard_dir(const char *flag)
{
    char probe[1100];

    if (flag != NULL && flag[0] != '\0')
        return flag;
    snprintf(probe, sizeof(probe), "%s/index.html", MT_DASHBOARD_SRC_DIR);
    return access(probe, R_OK) == 0 ? MT_DASHBOARD_SRC_DIR : MT_DASHBOARD_INSTALL_DIR;
}

static void http_free(struct coord_http *h)
{
    for (size_t i = 0; i < h->n_assets; i++)
        mt_free(h->assets[i].data);
    coord_http__act_fini(&h->ctx);
    pthread_mutex_destroy(&h->ctx.act_mu);
    mt_store_close(h->ctx.ro);
    coord_http__pages_free(&h->ctx);
    coord_mcache_free(h->ctx.mcache);
    pthread_mutex_destroy(&h->ctx.mu);
    mt_free(h);
}

mt_code coord_http_open(mt_coord *c, const char *addr, struct coord_http **out, char *bound,
                        size_t cap, mt_err *err)
{
    mt_httpd_opts so = MT_HTTPD_OPTS_DEFAULTS;
    struct coord_http *h;
    mt_code rc;

    *out = NULL;
    h = mt_calloc(1, sizeof(*h));
    if (h == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: out of memory");
    pthread_mutex_init(&h->ctx.mu, NULL);
    pthread_mutex_init(&h->ctx.act_mu, NULL);
    snprintf(h->ctx.db_path, sizeof(h->ctx.db_path), "%s/meshtrain.db", c->state_dir);
    snprintf(h->ctx.state_dir, sizeof(h->ctx.state_dir), "%s", c->state_dir);
    snprintf(h->ctx.local_url, sizeof(h->ctx.local_url), "%s", c->local_url);
    snprintf(h->ctx.token, sizeof(h->ctx.token), "%s", c->token);
    h->ctx.stats = c->stats;
    snprintf(h->token, sizeof(h->token), "%s", c->token);
    for (size_t i = 0; h->token[i] != '\0'; i++)
        snprintf(h->token_hex + 2 * i, 3, "%02x", (unsigned char)h->token[i]);
    snprintf(h->dir, sizeof(h->dir), "%s", dashboard_dir(c->opts.dashboard_dir));
    assets_load(h);
    if (c->opts.metrics_cache_mb > 0) {
        rc = coord_mcache_new((size_t)c->opts.metrics_cache_mb << 20, METRICS_CACHE_IDLE_MS,
                              &h->ctx.mcache, err);
        if (rc != MT_OK) {
            http_free(h);
            return rc;
        }
    }
    if (c->opts.http_timeout_ms > 0)
        so.timeout_ms = c->opts.http_timeout_ms;
    if (c->opts.http_max_conns > 0)
        so.max_conns = c->opts.http_max_conns;
    so.max_body = 256 * 1024; /* a job spec submitted from the dashboard */
    if ((rc = mt_httpd_open(addr, &so, handle, h, &h->srv, bound, cap, err)) != MT_OK) {
        http_free(h);
        return rc;
    }
    *out = h;
    return MT_OK;
}

struct coord_mcache *coord_http_mcache(struct coord_http *h)
{
    return h != NULL ? h->ctx.mcache : NULL;
}

void coord_http_close(struct coord_http *h)
{
    if (h == NULL)
        return;
    mt_httpd_close(h->srv); /* waits for handlers in progress */
    http_free(h);
}
