/* SPDX-License-Identifier: MIT */
/*
 * fuzz_coll_stream.c — fuzz target for the server side of the direct data-plane transport
 * (core/coll/coll_raw.c): the handshake and the frame reader of a real listener on
 * 127.0.0.1, as a peer on the network reaches them. Each input is what the peer sends after
 * the listener's challenge: the hello ("MTDH", job id, address length, MAC, address), then
 * frames (72-byte header + payload). The listener has no token (so the fuzzer can get past the
 * MAC); a world of job 7 with two ranks (rank 0 here, rank 1 a remote address nobody dials)
 * receives what the reader accepts, including posted-receive claims' checks and early or
 * mismatched messages. Nothing may crash, read out of bounds, leak or hang: the reader must
 * drop the connection at the first malformed frame or at the end of the input.
 * Seeds: tests/fuzz/corpus/fuzz_coll_stream/.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "coll/mt_coll.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mt_coll_net *net;
static int port;

static int setup(void)
{
    if (net != NULL)
        return 0;
    if (mt_coll_net_new("tcp://127.0.0.1:0", &net, NULL) != MT_OK)
        return -1;
    const char *a = mt_coll_net_addr(net), *colon = strrchr(a, ':');
    port = colon != NULL ? atoi(colon + 1) : 0;
    return port > 0 ? 0 : -1;
}

static void die(const char *what, int fd)
{
    fprintf(stderr, "fuzz_coll_stream: %s: %s (fd %d)\n", what, strerror(errno), fd);
    abort();
}

/* recv n bytes, retrying interrupted calls; what recv returned last. */
static ssize_t recv_all(int fd, unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, buf + got, n - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_coll_world *w = NULL;
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    unsigned char chal[20], sink[4096];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 5, .tv_usec = 0};

    if (setup() != 0)
        abort();
    mt_coll_rank_addr table[2] = {{mt_coll_net_addr(net), 0}, {"tcp://127.0.0.1:9", 0}};
    o.job_id = 7;
    if (mt_coll_world_new_net(net, 2, table, &o, &w, NULL) != MT_OK)
        abort();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (fd >= 0 && (rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) != 0 && errno == EINTR)
        ; /* libFuzzer's timer signals interrupt system calls */
    if (fd < 0 || rc != 0)
        die("connect", fd);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (recv_all(fd, chal, sizeof(chal)) != (ssize_t)sizeof(chal))
        die("the listener's challenge", fd); /* it always sends one */
    for (size_t off = 0; off < size;) {
        ssize_t k = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break; /* the listener dropped us: fine */
        off += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    /* the listener must end the connection by itself: at a malformed frame or at our end */
    for (;;) {
        ssize_t k = recv(fd, sink, sizeof(sink), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            break;
        if (k < 0)
            die("the listener kept the connection open 5 s", fd);
    }
    close(fd);
    mt_coll_world_free(w);
    return 0;
}
