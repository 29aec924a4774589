/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http.c — fuzz target for the status endpoint's HTTP/1.1 server
 * (core/httpd/httpd.c) as a client on the network reaches it: a real mt_httpd on
 * 127.0.0.1 with small limits, a short timeout and a handler that echoes the method, the URI
 * and the body length. Each input is what the client sends on one connection (one request,
 * several pipelined, or garbage); it is written in two parts split at a position taken from
 * its first byte (so the parser also sees a head or a body arrive in pieces), then the client
 * half-closes and reads until the server ends the connection.
 * Checked: nothing crashes, reads out of bounds, leaks or hangs; the server ends the connection
 * by itself within a few seconds; every response is "HTTP/1.1 NNN ...", has the head's
 * Content-Length bytes of body (none for HEAD) and nothing follows the last one; every few
 * inputs, a well-formed request on a fresh connection still gets 200 (the threads are alive).
 * Seeds: tests/fuzz/corpus/fuzz_http/.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock/mt_clock.h"
#include "httpd/mt_httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEADLINE_MS 3000 /* the server's timeout is 200 ms: 3 s is a hang */
#define ALIVE_EVERY 4    /* inputs between two liveness checks */
#define RESP_MAX    (64 * 1024)

static mt_httpd *srv;
static int port;
static const mt_httpd_opts opts = {
    .timeout_ms = 200,
    .max_conns = 16,
    .threads = 2,
    .max_line = 256,
    .max_head = 1024,
    .max_headers = 16,
    .max_body = 1024,
};

/* The trivial application: 200, "METHOD URI BODYLEN\n"; HEAD answers say so in a header. */
static void echo(void *arg, const mt_httpd_req *q, mt_httpd_res *r)
{
    char line[64];
    int n = snprintf(line, sizeof(line), " %zu\n", q->body_len);

    (void)arg;
    mt_httpd_res_status(r, 200);
    mt_httpd_res_header(r, "Content-Type", "text/plain");
    if (strcmp(q->method, "HEAD") == 0)
        mt_httpd_res_header(r, "X-Head", "1");
    mt_httpd_res_body(r, q->method, strlen(q->method));
    mt_httpd_res_body(r, " ", 1);
    mt_httpd_res_body(r, q->uri, strlen(q->uri));
    mt_httpd_res_body(r, line, (size_t)n);
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_http: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void setup(void)
{
    char bound[128];
    const char *colon;

    if (srv != NULL)
        return;
    if (mt_httpd_open("127.0.0.1:0", &opts, echo, NULL, &srv, bound, sizeof(bound), NULL) != MT_OK)
        die("mt_httpd_open failed", NULL);
    colon = strrchr(bound, ':');
    port = colon != NULL ? (int)strtol(colon + 1, NULL, 10) : 0;
    if (port <= 0)
        die("no port in", bound);
}

static int dial(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;

    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (fd >= 0 && (rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) != 0 && errno == EINTR)
        ; /* libFuzzer's timer signals interrupt system calls */
    if (fd < 0 || rc != 0)
        die("connect", strerror(errno));
    return fd;
}

/* Send what the server takes; it may close early (after an error response): fine. */
static void send_some(int fd, const uint8_t *p, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t k = send(fd, p + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        off += (size_t)k;
    }
}

/* Read until the server ends the connection; the bytes read (at most cap). Aborts when the
 * connection is still open after DEADLINE_MS. */
static size_t read_all(int fd, char *buf, size_t cap)
{
    int64_t end = mt_clock_mono_ms() + DEADLINE_MS;
    size_t got = 0;
    char sink[4096];

    for (;;) {
        int64_t left = end - mt_clock_mono_ms();
        struct pollfd pf = {fd, POLLIN, 0};
        ssize_t k;
        int rc;

        if (left <= 0)
            die("the server kept the connection open", "3 s after the request");
        rc = poll(&pf, 1, left > 500 ? 500 : (int)left);
        if (rc < 0 && errno != EINTR)
            die("poll", strerror(errno));
        if (rc <= 0)
            continue;
        if (got < cap)
            k = recv(fd, buf + got, cap - got, 0);
        else
            k = recv(fd, sink, sizeof(sink), 0); /* more than we check: drain */
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            return got;
        if (k < 0)
            die("recv", strerror(errno));
        if (got < cap)
            got += (size_t)k;
    }
}

/* Every response in buf[0..len) is well formed and nothing follows the last one; how many. */
static int check_responses(const char *buf, size_t len, int *first_status)
{
    size_t off = 0;
    int n = 0;

    while (off < len) {
        const char *r = buf + off, *end, *cl;
        size_t rest = len - off, head, body;
        char tmp[32];

        if (rest < 13 || memcmp(r, "HTTP/1.1 ", 9) != 0 || r[9] < '1' || r[9] > '5' ||
            r[10] < '0' || r[10] > '9' || r[11] < '0' || r[11] > '9' || r[12] != ' ')
            die("a response does not start with HTTP/1.1 NNN", NULL);
        end = memmem(r, rest, "\r\n\r\n", 4);
        if (end == NULL)
            die("a response head is cut short", NULL);
        head = (size_t)(end - r) + 4;
        cl = memmem(r, head, "\r\nContent-Length: ", 18);
        if (cl == NULL)
            die("a response has no Content-Length", NULL);
        body = (size_t)strtoull(cl + 18, NULL, 10);
        if (memmem(r, head, "\r\nX-Head: 1\r\n", 13) != NULL)
            body = 0; /* HEAD: the length of the body a GET would get */
        if (body > rest - head)
            die("a response body is shorter than its Content-Length", NULL);
        if (n++ == 0) {
            memcpy(tmp, r + 9, 3);
            tmp[3] = '\0';
            *first_status = (int)strtol(tmp, NULL, 10);
        }
        off += head + body;
    }
    return n;
}

/* A well-formed request on a fresh connection must still get the echo. */
static void check_alive(void)
{
    static const char req[] = "GET /alive?x=1 HTTP/1.1\r\nHost: fuzz\r\nContent-Length: 3\r\n"
                              "Connection: close\r\n\r\nabc";
    static char buf[4096];
    int fd = dial(), status = 0;
    size_t n;

    send_some(fd, (const uint8_t *)req, sizeof(req) - 1);
    n = read_all(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n] = '\0';
    if (check_responses(buf, n, &status) != 1 || status != 200 ||
        strstr(buf, "\r\n\r\nGET /alive?x=1 3\n") == NULL)
        die("the server no longer answers a well-formed request", buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *resp;
    static unsigned long inputs;
    size_t split = size > 0 ? data[0] % (size + 1) : 0, n;
    int fd, status = 0;

    setup();
    if (resp == NULL && (resp = malloc(RESP_MAX)) == NULL)
        die("out of memory", NULL);
    fd = dial();
    send_some(fd, data, split);
    if (split > 0 && split < size) { /* let the server read the first part on its own */
        struct pollfd pf = {fd, POLLIN, 0};
        (void)poll(&pf, 1, 1);
    }
    send_some(fd, data + split, size - split);
    shutdown(fd, SHUT_WR);
    n = read_all(fd, resp, RESP_MAX);
    close(fd);
    if (n < RESP_MAX) /* else the responses are cut by our buffer, not by the server */
        check_responses(resp, n, &status);
    if (inputs++ % ALIVE_EVERY == 0)
        check_alive();
    return 0;
}
