/* SPDX-License-Identifier: MIT */
/*
 * httpd.c — the small HTTP/1.1 server of mt_httpd.h: one poll() thread owns the
 * listening socket and every connection; parsed requests go to a few handler threads.
 *
 * DESIGN. A connection is in one of four states. READ: bytes arrive into its buffer, which is
 * parsed after each read (request line, then the whole head, then Content-Length body bytes);
 * the limits are checked as the bytes come, so a 100 KB URL is refused after max_line bytes.
 * BUSY: a complete request sits in the work queue or in a handler; the socket is not polled
 * (one request at a time per connection; pipelined bytes wait in the buffer). WRITE: the
 * serialized response is sent as the socket takes it. LINGER: after an error response, the
 * write side is shut and the rest of the request is read and dropped for a second, so the
 * client sees the status rather than a reset. Each state but BUSY has a deadline; the poll
 * timeout is the nearest one. The request is parsed in place (NULs written into the head), so
 * a head is parsed once, when its blank line has arrived.
 *
 * Threading: the I/O thread alone touches a connection's socket and state, except that a
 * handler thread owns a BUSY connection's request and response fields until it puts the
 * connection on the done list (mutex) and wakes the I/O thread (eventfd).
 */
#include "httpd/mt_httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

#define LINGER_MS   1000
#define MAX_THREADS 16

/* A growable byte buffer; oom set when a grow failed (the content is then incomplete). */
typedef struct hbuf {
    char *data;
    size_t len, cap;
    bool oom;
} hbuf;

static void hbuf_add(hbuf *b, const void *p, size_t n)
{
    if (b->oom || n == 0) /* p may be NULL then (an empty body) */
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 512;
        char *d;
        while (cap < b->len + n + 1)
            cap *= 2;
        if ((d = mt_realloc(b->data, cap)) == NULL) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void hbuf_puts(hbuf *b, const char *s)
{
    hbuf_add(b, s, strlen(s));
}

static void hbuf_fini(hbuf *b)
{
    mt_free(b->data);
    memset(b, 0, sizeof(*b));
}

struct mt_httpd_res {
    int status;
    hbuf hdrs; /* "Name: value\r\n" ... */
    hbuf body;
};

typedef enum conn_state { CONN_READ, CONN_BUSY, CONN_WRITE, CONN_LINGER } conn_state;

typedef struct conn {
    int fd;
    conn_state st;
    int64_t deadline; /* monotonic ms; READ, WRITE, LINGER */
    char *in;         /* received bytes not yet consumed; in_cap = the server's in_cap */
    size_t in_len;
    bool parsed;      /* the current request's head is parsed (req valid, NULs written) */
    size_t head_len;  /* bytes of that head, blank line included */
    size_t body_len;  /* its Content-Length */
    bool close_after; /* close once the response is written */
    bool eof;         /* the client half-closed: the complete requests are still served */
    mt_httpd_req req; /* BUSY: the request the handler gets */
    const char **hdr; /* 2 * max_headers pointers into in */
    char *body;       /* a NUL-terminated copy of the body, or NULL */
    hbuf out;         /* the serialized response */
    size_t out_off;
    short revents;     /* I/O thread: what the last poll saw on fd */
    struct conn *next; /* work queue / done list */
} conn;

struct mt_httpd {
    mt_httpd_opts o;
    mt_httpd_fn fn;
    void *arg;
    int lfd;        /* listening socket */
    int efd;        /* eventfd: handlers and close wake the I/O thread */
    size_t in_cap;  /* a connection's input buffer: max_head + max_body + 1 */
    conn **conns;   /* I/O thread only */
    size_t n_conns; /* <= o.max_conns */
    pthread_t io, workers[MAX_THREADS];
    int n_workers;
    bool io_started;
    atomic_bool stop;
    pthread_mutex_t mu;      /* guards work, done */
    pthread_cond_t cv;       /* work queued or stop */
    conn *work, **work_tail; /* complete requests, oldest first */
    conn *done;              /* handled, to be written (any order) */
};

/* ------------------------------------------------------------ requests and responses */

const char *mt_httpd_req_header(const mt_httpd_req *q, const char *name)
{
    for (size_t i = 0; i < q->n_hdr; i++)
        if (strcasecmp(q->hdr[2 * i], name) == 0)
            return q->hdr[2 * i + 1];
    return NULL;
}

void mt_httpd_res_status(mt_httpd_res *r, int status)
{
    r->status = status;
}

void mt_httpd_res_header(mt_httpd_res *r, const char *name, const char *value)
{
    hbuf_puts(&r->hdrs, name);
    hbuf_add(&r->hdrs, ": ", 2);
    hbuf_puts(&r->hdrs, value);
    hbuf_add(&r->hdrs, "\r\n", 2);
}

void mt_httpd_res_body(mt_httpd_res *r, const void *data, size_t len)
{
    hbuf_add(&r->body, data, len);
}

static const char *reason_of(int status)
{
    static const struct {
        int status;
        const char *text;
    } t[] = {
        {200, "OK"},
        {303, "See Other"},
        {304, "Not Modified"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {503, "Service Unavailable"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (t[i].status == status)
            return t[i].text;
    return "Status";
}

/* Serialize into c->out: status line, Content-Length, Connection, r's headers, the body
 * (none for HEAD). */
static void serialize(conn *c, mt_httpd_res *r, bool head_only)
{
    char line[128];

    if (r->hdrs.oom || r->body.oom) {
        hbuf_fini(&r->hdrs);
        hbuf_fini(&r->body);
        r->status = 503;
        mt_httpd_res_header(r, "Content-Type", "text/plain; charset=utf-8");
        mt_httpd_res_body(r, "out of memory\n", 14);
    }
    hbuf_fini(&c->out);
    c->out_off = 0;
    snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: %s\r\n",
             r->status, reason_of(r->status), r->body.len, c->close_after ? "close" : "keep-alive");
    hbuf_puts(&c->out, line);
    if (r->hdrs.len > 0)
        hbuf_add(&c->out, r->hdrs.data, r->hdrs.len);
    hbuf_add(&c->out, "\r\n", 2);
    if (!head_only && r->body.len > 0)
        hbuf_add(&c->out, r->body.data, r->body.len);
    hbuf_fini(&r->hdrs);
    hbuf_fini(&r->body);
}

/* The server's own answers (limits, timeouts, cap): a JSON error as the API's, then close. */
static void error_response(conn *c, int status, const char *code, const char *msg)
{
    mt_httpd_res r = {status, {0}, {0}};
    char body[512];
    int n = snprintf(body, sizeof(body),
                     "{\"error\":{\"code\":\"%s\",\"http_status\":%d,\"message\":\"%s\"}}\n", code,
                     status, msg);

    mt_httpd_res_header(&r, "Content-Type", "application/json; charset=utf-8");
    mt_httpd_res_header(&r, "Cache-Control", "no-store");
    if (status == 503)
        mt_httpd_res_header(&r, "Retry-After", "1");
    mt_httpd_res_body(&r, body, n > 0 && (size_t)n < sizeof(body) ? (size_t)n : 0);
    c->close_after = true;
    serialize(c, &r, false);
}

/* ------------------------------------------------------------ parsing */

typedef enum parse_rc { PARSE_MORE, PARSE_READY, PARSE_ERROR } parse_rc;

/* Where the head ends in c->in (just past its blank line), 0 when it has not all arrived; sets
 * *lines to the header lines seen and *too_big when a limit is passed. Read-only. */
static size_t head_end(const mt_httpd *s, const conn *c, size_t *lines, int *too_big)
{
    const char *p = c->in, *end = c->in + c->in_len;
    const char *nl = memchr(p, '\n', c->in_len);

    *lines = 0;
    *too_big = 0;
    if (nl == NULL) {
        if (c->in_len > s->o.max_line)
            *too_big = 414;
        return 0;
    }
    if ((size_t)(nl - p) > s->o.max_line + 1) /* + 1: the CR */
        *too_big = 414;
    for (p = nl + 1; p < end && !*too_big;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t len;
        if (e == NULL)
            break;
        len = (size_t)(e - p);
        if (len == 0 || (len == 1 && p[0] == '\r'))
            return (size_t)(e + 1 - c->in) <= s->o.max_head ? (size_t)(e + 1 - c->in)
                                                            : (*too_big = 431, 0);
        if (++*lines > s->o.max_headers)
            *too_big = 431;
        p = e + 1;
    }
    if (!*too_big && c->in_len > s->o.max_head)
        *too_big = 431;
    return 0;
}

/* Cut the line starting at *p (NUL over its CR/LF); returns it and moves *p past it. */
static char *cut_line(char **p)
{
    char *l = *p, *nl = strchr(l, '\n');

    *nl = '\0';
    if (nl > l && nl[-1] == '\r')
        nl[-1] = '\0';
    *p = nl + 1;
    return l;
}

static char *trim(char *v)
{
    size_t n;

    while (*v == ' ' || *v == '\t')
        v++;
    n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        v[--n] = '\0';
    return v;
}

/* Parse the arrived head in place into c->req. 0, or the HTTP status of the refusal with msg. */
static int parse_head(const mt_httpd *s, conn *c, const char **msg)
{
    char *p = c->in, *line, *sp1, *sp2;
    const char *conn_hdr, *cl, *ver;
    bool http10;

    if (memchr(c->in, '\0', c->head_len) != NULL) { /* the string functions below stop at it */
        *msg = "NUL byte in the request head";
        return 400;
    }
    c->in[c->head_len - 1] = '\0'; /* the blank line's LF: the head is now a string */
    line = cut_line(&p);
    sp1 = strchr(line, ' ');
    sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == line || sp2 == sp1 + 1 ||
        strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || strchr(line, '\r') != NULL) { /* a bare CR */
        *msg = "malformed request line";
        return 400;
    }
    *sp1 = *sp2 = '\0';
    ver = sp2 + 1;
    http10 = strcmp(ver, "HTTP/1.0") == 0;
    c->req.method = line;
    c->req.uri = sp1 + 1;
    c->req.n_hdr = 0;
    c->req.hdr = c->hdr;
    while (*p != '\0' && strcmp(p, "\r") != 0) { /* up to the blank line: "\r" or "" */
        char *h = cut_line(&p), *colon = strchr(h, ':');
        if (colon == NULL || colon == h || h[0] == ' ' || h[0] == '\t' ||
            strpbrk(h, " \t") < colon || strchr(h, '\r') != NULL) {
            *msg =
                strpbrk(h, " \t") == h ? "obsolete header line folding" : "malformed header line";
            return 400;
        }
        *colon = '\0';
        c->hdr[2 * c->req.n_hdr] = h;
        c->hdr[2 * c->req.n_hdr + 1] = trim(colon + 1);
        c->req.n_hdr++;
    }
    if (mt_httpd_req_header(&c->req, "Transfer-Encoding") != NULL) {
        *msg = "Transfer-Encoding is not supported; send Content-Length";
        return 501;
    }
    c->body_len = 0;
    if ((cl = mt_httpd_req_header(&c->req, "Content-Length")) != NULL) {
        char *end = NULL;
        unsigned long long v = strtoull(cl, &end, 10);
        if (end == cl || *end != '\0' || cl[0] == '-') {
            *msg = "malformed Content-Length";
            return 400;
        }
        if (v > s->o.max_body) {
            *msg = "request body too large";
            return 413;
        }
        c->body_len = (size_t)v;
    }
    conn_hdr = mt_httpd_req_header(&c->req, "Connection");
    if (conn_hdr != NULL && strcasecmp(conn_hdr, "close") == 0)
        c->close_after = true;
    if (http10 && (conn_hdr == NULL || strcasecmp(conn_hdr, "keep-alive") != 0))
        c->close_after = true;
    return 0;
}

/* Parse what has arrived of the current request. ERROR: c->out holds the refusal. */
static parse_rc parse(mt_httpd *s, conn *c)
{
    const char *msg = "";
    size_t lines;
    int too_big, status;

    if (!c->parsed) {
        c->head_len = head_end(s, c, &lines, &too_big);
        if (too_big == 414) {
            error_response(c, 414, "INVALID_ARGUMENT", "request line too long");
            return PARSE_ERROR;
        }
        if (too_big == 431) {
            error_response(c, 431, "INVALID_ARGUMENT",
                           "request header fields too large or too many");
            return PARSE_ERROR;
        }
        if (c->head_len == 0)
            return PARSE_MORE;
        c->parsed = true;
        if ((status = parse_head(s, c, &msg)) != 0) {
            error_response(c, status, status == 501 ? "UNIMPLEMENTED" : "INVALID_ARGUMENT", msg);
            return PARSE_ERROR;
        }
    }
    if (c->in_len < c->head_len + c->body_len)
        return PARSE_MORE;
    mt_free(c->body);
    c->body = mt_malloc(c->body_len + 1);
    if (c->body == NULL) {
        error_response(c, 503, "RESOURCE_EXHAUSTED", "out of memory");
        return PARSE_ERROR;
    }
    memcpy(c->body, c->in + c->head_len, c->body_len);
    c->body[c->body_len] = '\0';
    c->req.body = c->body;
    c->req.body_len = c->body_len;
    if (c->eof && c->in_len == c->head_len + c->body_len)
        c->close_after = true; /* the last request before the client's EOF */
    return PARSE_READY;
}

/* ------------------------------------------------------------ connections (I/O thread) */

static void conn_free(conn *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    mt_free(c->in);
    mt_free(c->hdr);
    mt_free(c->body);
    hbuf_fini(&c->out);
    mt_free(c);
}

static void conn_drop(mt_httpd *s, size_t i)
{
    conn_free(s->conns[i]);
    s->conns[i] = s->conns[--s->n_conns];
}

static void to_write(mt_httpd *s, conn *c)
{
    c->st = CONN_WRITE;
    c->deadline = mt_clock_mono_ms() + s->o.timeout_ms;
}

/* The connection is ready for its next request: parse what is buffered, queue it when
 * complete. */
static void conn_next(mt_httpd *s, conn *c)
{
    switch (parse(s, c)) {
    case PARSE_MORE:
        return;
    case PARSE_ERROR:
        to_write(s, c);
        return;
    case PARSE_READY:
        c->st = CONN_BUSY;
        c->next = NULL;
        pthread_mutex_lock(&s->mu);
        *s->work_tail = c;
        s->work_tail = &c->next;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return;
    }
}

/* Read what the socket has, up to a full buffer (parse then refuses what passes a limit).
 * false: the connection is to be dropped. */
static bool conn_read(mt_httpd *s, conn *c)
{
    for (;;) {
        ssize_t n;
        if (c->in_len == s->in_cap)
            return true;
        n = recv(c->fd, c->in + c->in_len, s->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n == 0) { /* the client closed its side: answer what came, then close */
            c->eof = true;
            return true;
        }
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
}

/* Send what the socket takes; when all is sent, go on (next request, or linger). false: drop. */
static bool conn_write(mt_httpd *s, conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    hbuf_fini(&c->out);
    c->out_off = 0;
    if (c->close_after) {
        shutdown(c->fd, SHUT_WR);
        c->st = CONN_LINGER;
        c->deadline = mt_clock_mono_ms() + LINGER_MS;
        return true;
    }
    /* consume the request; pipelined bytes behind it stay */
    memmove(c->in, c->in + c->head_len + c->body_len, c->in_len - c->head_len - c->body_len);
    c->in_len -= c->head_len + c->body_len;
    c->parsed = false;
    c->head_len = c->body_len = 0;
    c->st = CONN_READ;
    c->deadline = mt_clock_mono_ms() + s->o.timeout_ms;
    conn_next(s, c);
    if (c->st == CONN_WRITE)
        return conn_write(s, c);
    return !(c->st == CONN_READ && c->eof); /* half a request before EOF: not served */
}

/* Drop what arrives after an error response until the client closes. false: drop now. */
static bool conn_linger(conn *c)
{
    char sink[4096];

    for (;;) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
}

static void accept_all(mt_httpd *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        conn *c;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                mt_log_warn("http: accept: %s", strerror(errno));
            return;
        }
        if (s->n_conns >= (size_t)s->o.max_conns) { /* best effort, never waits */
            conn busy = {.fd = fd};
            ssize_t n = 0;
            error_response(&busy, 503, "UNAVAILABLE", "too many connections; retry later");
            if (!busy.out.oom)
                n = send(fd, busy.out.data, busy.out.len, MSG_NOSIGNAL);
            (void)n;
            hbuf_fini(&busy.out);
            shutdown(fd, SHUT_WR);
            close(fd);
            continue;
        }
        c = mt_calloc(1, sizeof(*c));
        if (c != NULL) {
            c->in = mt_malloc(s->in_cap);
            c->hdr = mt_calloc(2 * s->o.max_headers + 2, sizeof(*c->hdr));
        }
        if (c == NULL || c->in == NULL || c->hdr == NULL) {
            if (c != NULL)
                c->fd = -1;
            conn_free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->st = CONN_READ;
        c->deadline = mt_clock_mono_ms() + s->o.timeout_ms;
        s->conns[s->n_conns++] = c;
    }
}

/* Handled requests back from the handler threads: start writing their responses. */
static void take_done(mt_httpd *s)
{
    conn *c;
    uint64_t v;
    ssize_t n = read(s->efd, &v, sizeof(v));

    (void)n;
    pthread_mutex_lock(&s->mu);
    c = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    while (c != NULL) {
        conn *next = c->next;
        to_write(s, c);
        c = next;
    }
}

static void *io_main(void *arg)
{
    mt_httpd *s = arg;
    struct pollfd *pf = mt_calloc((size_t)s->o.max_conns + 2, sizeof(*pf));
    conn **who = mt_calloc((size_t)s->o.max_conns + 2, sizeof(*who));

    if (pf == NULL || who == NULL) {
        mt_log_error("http: out of memory; the status endpoint does not answer");
        mt_free(pf);
        mt_free(who);
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        int64_t now = mt_clock_mono_ms(), wait = 1000;
        size_t n = 0;

        pf[n++] = (struct pollfd){s->efd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->lfd, POLLIN, 0};
        for (size_t i = 0; i < s->n_conns; i++) {
            conn *c = s->conns[i];
            if (c->st == CONN_BUSY)
                continue;
            if (c->deadline - now < wait)
                wait = c->deadline - now < 0 ? 0 : c->deadline - now;
            who[n] = c;
            pf[n++] = (struct pollfd){c->fd, c->st == CONN_WRITE ? POLLOUT : POLLIN, 0};
        }
        if (poll(pf, n, (int)wait) < 0 && errno != EINTR) {
            mt_log_error("http: poll: %s", strerror(errno));
            break;
        }
        /* mark the polled connections' events, then act by index of s->conns */
        for (size_t k = 2; k < n; k++)
            who[k]->revents = pf[k].revents;
        if (pf[0].revents & POLLIN)
            take_done(s);
        now = mt_clock_mono_ms();
        for (size_t i = 0; i < s->n_conns;) {
            conn *c = s->conns[i];
            bool keep = true;
            if (c->st != CONN_BUSY && c->revents != 0) {
                c->revents = 0;
                if (c->st == CONN_READ) {
                    keep = conn_read(s, c);
                    if (keep)
                        conn_next(s, c);
                    if (keep && c->st == CONN_READ && (c->eof || c->in_len == s->in_cap))
                        keep = false; /* half a request before EOF, or pipelined beyond the
                                         buffer: not served */
                    if (keep && c->st == CONN_WRITE)
                        keep = conn_write(s, c);
                } else if (c->st == CONN_WRITE) {
                    keep = conn_write(s, c);
                } else {
                    keep = conn_linger(c);
                }
            } else if (c->st == CONN_WRITE && c->out_off == 0 && c->out.len > 0) {
                keep = conn_write(s, c); /* just handled: try at once */
            }
            if (keep && c->st != CONN_BUSY && now >= c->deadline) {
                if (c->st == CONN_READ && c->in_len > 0) {
                    error_response(c, 408, "DEADLINE_EXCEEDED",
                                   "the request did not arrive in time");
                    to_write(s, c);
                    keep = conn_write(s, c);
                } else {
                    keep = false; /* idle, or a client that does not read its response */
                }
            }
            if (keep)
                i++;
            else
                conn_drop(s, i);
        }
        if (pf[1].revents & POLLIN)
            accept_all(s);
    }
    mt_free(pf);
    mt_free(who);
    return NULL;
}

/* ------------------------------------------------------------ handler threads */

static void *worker_main(void *arg)
{
    mt_httpd *s = arg;
    uint64_t one = 1;

    for (;;) {
        conn *c;
        mt_httpd_res r = {200, {0}, {0}};
        ssize_t n;

        pthread_mutex_lock(&s->mu);
        while (s->work == NULL && !atomic_load(&s->stop))
            pthread_cond_wait(&s->cv, &s->mu);
        if (atomic_load(&s->stop)) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        c = s->work;
        s->work = c->next;
        if (s->work == NULL)
            s->work_tail = &s->work;
        pthread_mutex_unlock(&s->mu);

        s->fn(s->arg, &c->req, &r);
        serialize(c, &r, strcmp(c->req.method, "HEAD") == 0);

        pthread_mutex_lock(&s->mu);
        c->next = s->done;
        s->done = c;
        pthread_mutex_unlock(&s->mu);
        n = write(s->efd, &one, sizeof(one));
        (void)n;
    }
}

/* ------------------------------------------------------------ open / close */

static mt_code listen_on(const char *addr, int *out, char *bound, size_t cap, mt_err *err)
{
    char host[256], port[16], ip[INET6_ADDRSTRLEN];
    const char *colon = strrchr(addr, ':');
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    size_t hl;
    int fd = -1, rv, one = 1, saved = 0;

    *out = -1;
    if (colon == NULL || colon == addr || strlen(colon + 1) == 0 ||
        strlen(colon + 1) >= sizeof(port) || (size_t)(colon - addr) >= sizeof(host))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "--http %s: expected HOST:PORT", addr);
    hl = (size_t)(colon - addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [::1]:7480 */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    snprintf(port, sizeof(port), "%s", colon + 1);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if ((rv = getaddrinfo(host, port, &hints, &res)) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "--http %s: %s (expected HOST:PORT)", addr,
                          gai_strerror(rv));
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 512) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return mt_err_set(err, MT_UNAVAILABLE, "http listen %s: %s", addr, strerror(saved));
    snprintf(bound, cap, "http://%s", addr);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
            snprintf(bound, cap, "http://%s:%u", ip, (unsigned)ntohs(a->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
            snprintf(bound, cap, "http://[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
        }
    }
    *out = fd;
    return MT_OK;
}

void mt_httpd_close(mt_httpd *s)
{
    uint64_t one = 1;
    ssize_t n;

    if (s == NULL)
        return;
    atomic_store(&s->stop, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->efd >= 0) {
        n = write(s->efd, &one, sizeof(one));
        (void)n;
    }
    if (s->io_started)
        pthread_join(s->io, NULL);
    for (int i = 0; i < s->n_workers; i++) /* each finishes the request it is on */
        pthread_join(s->workers[i], NULL);
    for (size_t i = 0; i < s->n_conns; i++)
        conn_free(s->conns[i]);
    mt_free(s->conns);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->efd >= 0)
        close(s->efd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    mt_free(s);
}

mt_code mt_httpd_open(const char *addr, const mt_httpd_opts *opts, mt_httpd_fn fn, void *arg,
                      mt_httpd **out, char *bound, size_t cap, mt_err *err)
{
    mt_httpd *s;
    mt_code rc;

    *out = NULL;
    if (opts->timeout_ms <= 0 || opts->max_conns <= 0 || opts->threads <= 0 ||
        opts->max_line == 0 || opts->max_head < opts->max_line || opts->max_headers == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "http: invalid server options");
    s = mt_calloc(1, sizeof(*s));
    if (s == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: out of memory");
    s->o = *opts;
    if (s->o.threads > MAX_THREADS)
        s->o.threads = MAX_THREADS;
    s->fn = fn;
    s->arg = arg;
    s->lfd = s->efd = -1;
    s->in_cap = s->o.max_head + s->o.max_body + 1;
    s->work_tail = &s->work;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->conns = mt_calloc((size_t)s->o.max_conns, sizeof(*s->conns));
    if (s->conns == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: out of memory");
        goto fail;
    }
    if ((s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: eventfd: %s", strerror(errno));
        goto fail;
    }
    if ((rc = listen_on(addr, &s->lfd, bound, cap, err)) != MT_OK)
        goto fail;
    for (; s->n_workers < s->o.threads; s->n_workers++)
        if (pthread_create(&s->workers[s->n_workers], NULL, worker_main, s) != 0) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: cannot start a thread");
            goto fail;
        }
    if (pthread_create(&s->io, NULL, io_main, s) != 0) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "http: cannot start a thread");
        goto fail;
    }
    s->io_started = true;
    *out = s;
    return MT_OK;
fail:
    mt_httpd_close(s);
    return rc;
}
