/* SPDX-License-Identifier: MIT */
/*
 * coll_raw.c — the direct-socket data-plane transport (tcp:// and ipc://):
 * plain stream sockets whose frames are the coll messages themselves (72-byte
 * header + payload), read by one thread per incoming connection and written
 * synchronously by the sending device thread.
 *
 * Why: nng 1.5.2 hands every received message through its poller thread and
 * one or two task-queue threads before our callback runs; on a loaded 2-core
 * machine each hand-off is a scheduler wake-up, and a 4 KiB allreduce cost
 * 80–160 µs. Here a message costs one wake-up of the reading thread (the kernel
 * wakes it directly) and one of the device thread; sends copy nothing but into
 * the kernel (header and payload go out in one sendmsg from the caller's buffer).
 *
 * Handshake (authentication): the listener sends "MTDC" + a 16-byte random
 * nonce; the dialer answers "MTDH", the job id, its own address and
 * HMAC-SHA-256(token, "mtcoll1" | nonce | job | address); the listener checks
 * the MAC when it has a token and replies a 4-byte code (0, or 16 =
 * UNAUTHENTICATED, after which it closes the connection). No tensor frame is
 * read before that. Without a token the MAC is not checked.
 *
 * Posted receives: before allocating a message for a DATA frame, the reader asks the owner
 * (cb.claim) whether a device thread posted that ring step; if so it reads the payload straight
 * into the posted buffer (copy) or into the comm's piece buffers that the device thread adds
 * (read_claimed), with reads that time out every RAW_POLL_MS so that a device thread giving up
 * (post cancel flag) is seen; after that the rest of the frame is discarded.
 *
 * Driving, this transport's synchronous mode: a device thread may take over reading an
 * accepted connection (coll__raw_drive_take, coll__raw_drive ... coll__raw_drive_end; see
 * coll_int.h "Driving"), asking the engine's claim where each frame goes as the reader thread
 * does and reading the payload itself without waiting. The reader thread waits for data in
 * poll(2) without owning the stream, so the socket can be taken between frames; inside a frame
 * it owns the stream and, if a driver asked (want), hands the socket over at the next header
 * (with that header: held) or frame end. While driven it parks on its condition variable. A
 * driver gives the socket back with a begun header (held) or payload bytes to discard (skip).
 * The eventfd tells a waiting driver that the socket was handed over or the connection ended.
 *
 * Failure detection: a connection that ends (EOF, reset) is reported to the
 * owner (coll_net.c marks the sending process down); a frame with a bad magic or
 * an oversized length ends the connection (never read past a frame).
 *
 * Threading: an acceptor thread and one reader thread per accepted connection
 * call the owner's callbacks; coll__raw_free joins them all (a connection a driver holds a
 * reference to is reaped only after coll__raw_drive_put). Dialed sockets are
 * used by one thread at a time (the caller's peer mutex).
 * Tests: tests/unit/test_coll.c (nng-free transport, wrong token),
 * tests/integration/test_coll_procs.sh.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_int.h"
#include "log/mt_log.h"

#define RAW_MAX_CONNS   64
#define RAW_NONCE       16
#define RAW_MAGIC_CHAL  0x4344544du /* "MTDC" */
#define RAW_MAGIC_HELLO 0x4844544du /* "MTDH" */
#define RAW_MAGIC_SHM   0x5344544du /* "MTDS": the dialer's answer to a shared-memory offer */
#define RAW_HELLO_FIXED (4 + 8 + 2 + 32)
#define RAW_RECVMAX     ((uint64_t)(64u << 20) + 4096u)

#define RAW_SCRATCH COLL_PIECE_BYTES /* a piece of payload added by this thread or discarded */
#define RAW_POLL_MS 10               /* claimed reads time out this often to see a cancellation */

typedef struct coll_link {
    struct coll_raw *r;
    int fd;
    unsigned char *scratch; /* [RAW_SCRATCH + 4]: the reader's, or the driver's while it drives */
    uint32_t id;
    pthread_t thr;
    _Atomic int done;
    char peer[256];       /* the dialer's data-plane address (its hello), once peer_set */
    _Atomic int peer_set; /* the handshake succeeded */
    /* driving (see the header comment); mu guards the fields below */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int driven; /* the socket belongs to a device thread ... */
    int picked; /* ... which has taken it up (else held_n bytes wait for it in hdr) */
    int busy;   /* the reader thread is inside a frame (or reading its header) */
    int want;   /* a device thread asked for the socket: hand it over at the next frame boundary */
    int users;  /* references taken by coll__raw_drive_find; reap frees the conn only at 0 */
    size_t held_n; /* bytes of a frame header that travel with the socket */
    unsigned char hdr[COLL_HDR_SIZE];
    size_t skip;   /* payload bytes of a frame the driver began that the reader discards */
    int evfd;      /* eventfd: written when the socket is handed to the driver or the reader ends */
    coll_shm *shm; /* frames come through this ring after the handshake (never driven) */
    int64_t accepted_ns; /* when it was accepted (the oldest handshake is dropped first) */
    /* the driver's (its thread only): it owns the stream (driven and picked: only it sets
     * both and clears them), and its frame in progress */
    int d_own;
    unsigned char d_hb[COLL_HDR_SIZE];
    size_t d_hn; /* bytes of the current frame's header read */
    int d_in;    /* the header was claimed: payload bytes d_got of d_sink.bytes are read */
    size_t d_got;
    coll_sink d_sink; /* where the claimed payload goes (the posted receive) */
} raw_conn;

struct coll_raw {
    int lfd;
    int is_unix;
    int force_shm; /* a shm:// listener: every connection moves to a ring */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char token[256];
    coll_raw_cfg cfg;               /* cfg.token points at token */
    char host_id[COLL_SHM_HOST_ID]; /* offered to dialers ("" with shm off) */
    coll_raw_cbs cb;
    pthread_t acc;
    _Atomic int closing;
    pthread_mutex_t mu;
    raw_conn *conns[RAW_MAX_CONNS]; /* mu */
    int nconns;
    uint32_t next_id;
};

/* Parse tcp://HOST:PORT or ipc:///path into a socket address. */
static mt_code parse_url(const char *url, struct sockaddr_storage *sa, socklen_t *len, int *is_unix)
{
    memset(sa, 0, sizeof(*sa));
    if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "shm://", 6) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)sa;
        const char *p = url + 6;
        if (p[0] == '\0' || strlen(p) >= sizeof(un->sun_path))
            return MT_INVALID_ARGUMENT;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, p, strlen(p) + 1);
        *len = sizeof(*un);
        *is_unix = 1;
        return MT_OK;
    }
    if (strncmp(url, "tcp://", 6) != 0)
        return MT_INVALID_ARGUMENT;
    const char *hp = url + 6, *colon = strrchr(hp, ':');
    char host[256];
    if (colon == NULL || (size_t)(colon - hp) >= sizeof(host))
        return MT_INVALID_ARGUMENT;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535)
        return MT_INVALID_ARGUMENT;
    struct sockaddr_in *in = (struct sockaddr_in *)sa;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    *len = sizeof(*in);
    *is_unix = 0;
    if (host[0] == '\0' || strcmp(host, "*") == 0) {
        in->sin_addr.s_addr = htonl(INADDR_ANY);
        return MT_OK;
    }
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1)
        return MT_OK;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
        return MT_INVALID_ARGUMENT;
    in->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return MT_OK;
}

int coll__raw_url(const char *url)
{
    return url != NULL && (strncmp(url, "tcp://", 6) == 0 || strncmp(url, "ipc://", 6) == 0 ||
                           strncmp(url, "shm://", 6) == 0);
}

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails harmlessly on AF_UNIX */
}

int coll__fd_io_full(int fd, void *buf, size_t n, int is_write, int64_t deadline_ns)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = is_write ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                             : recv(fd, (char *)buf + done, n - done, MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0) {
            errno = EPIPE;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        int64_t left = (deadline_ns - coll__now_ns()) / 1000000LL;
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = is_write ? POLLOUT : POLLIN};
        poll(&p, 1, left > 1000 ? 1000 : (int)left + 1);
    }
    return 0;
}

static mt_code mac_of(const char *token, const unsigned char *nonce, uint64_t job, const char *addr,
                      unsigned char out[32])
{
    unsigned char m[7 + RAW_NONCE + 8 + 256];
    size_t al = strlen(addr) > 255 ? 255 : strlen(addr);
    memcpy(m, "mtcoll1", 7);
    memcpy(m + 7, nonce, RAW_NONCE);
    memcpy(m + 7 + RAW_NONCE, &job, 8);
    memcpy(m + 7 + RAW_NONCE + 8, addr, al);
    return coll__hmac_sha256(token, strlen(token), m, 7 + RAW_NONCE + 8 + al, out);
}

/* ------------------------------------------------------------- listener */

/*
 * Listener side of the shared-memory step, after a successful handshake: offer this host's
 * identity (or nothing: shm off); a dialer on this host answers with the name of a ring it
 * created, which this side maps and confirms (a 4-byte code); any other answer keeps the
 * connection on its socket. A shm:// listener accepts only a ring. 0, or -1: drop it.
 */
static int shm_accept(raw_conn *k, const char *addr, int64_t dl)
{
    coll_raw *r = k->r;
    unsigned char offer[COLL_SHM_HOST_ID], dec[4 + COLL_SHM_NAME];
    uint32_t magic;
    memcpy(offer, r->host_id, sizeof(offer));
    if (coll__fd_io_full(k->fd, offer, sizeof(offer), 1, dl) != 0)
        return -1;
    if (offer[0] == '\0')
        return 0;
    if (coll__fd_io_full(k->fd, dec, sizeof(dec), 0, dl) != 0)
        return -1;
    memcpy(&magic, dec, 4);
    dec[sizeof(dec) - 1] = '\0';
    const char *name = (const char *)dec + 4;
    if (magic != RAW_MAGIC_SHM) {
        mt_log_warn("coll: dropping a data-plane connection from %s that did not answer the "
                    "shared-memory offer",
                    addr);
        return -1;
    }
    if (name[0] == '\0')
        return r->force_shm ? -1 : 0; /* another host, or the dialer keeps its socket */
    mt_err e = MT_ERR_INIT;
    uint32_t code = (uint32_t)coll__shm_attach(name, r->cfg.shm_spin_ns, &k->shm, &e);
    if (code != MT_OK)
        mt_log_warn("coll: data-plane connection from %s stays on its socket: %s", addr, e.msg);
    if (coll__fd_io_full(k->fd, &code, 4, 1, dl) != 0 || (code != MT_OK && r->force_shm))
        return -1;
    return 0;
}

/* Server side of the handshake. Returns 0 when the peer may send frames. */
static int conn_handshake(raw_conn *k)
{
    coll_raw *r = k->r;
    unsigned char chal[4 + RAW_NONCE], hello[RAW_HELLO_FIXED];
    char addr[256];
    uint32_t magic = RAW_MAGIC_CHAL, code = 0;
    uint64_t job;
    uint16_t al;
    int64_t dl = coll__now_ns() + r->cfg.handshake_ms * 1000000LL;

    memcpy(chal, &magic, 4);
    if (getrandom(chal + 4, RAW_NONCE, 0) != RAW_NONCE)
        return -1;
    if (coll__fd_io_full(k->fd, chal, sizeof(chal), 1, dl) != 0 ||
        coll__fd_io_full(k->fd, hello, sizeof(hello), 0, dl) != 0)
        return -1;
    memcpy(&magic, hello, 4);
    memcpy(&job, hello + 4, 8);
    memcpy(&al, hello + 12, 2);
    if (magic != RAW_MAGIC_HELLO || al > 255 || coll__fd_io_full(k->fd, addr, al, 0, dl) != 0) {
        mt_log_warn("coll: dropping a data-plane connection that did not say hello");
        return -1;
    }
    addr[al] = '\0';
    if (r->token[0] != '\0') {
        unsigned char want[32], diff = 0;
        if (mac_of(r->token, chal + 4, job, addr, want) != MT_OK) {
            mt_log_error("coll: data-plane connection from %s: no HMAC (out of memory)", addr);
            return -1;
        }
        for (int i = 0; i < 32; i++)
            diff |= (unsigned char)(want[i] ^ hello[14 + i]);
        if (diff != 0)
            code = MT_UNAUTHENTICATED;
    }
    if (coll__fd_io_full(k->fd, &code, 4, 1, dl) != 0)
        return -1;
    if (code != 0) {
        mt_log_error("coll: data-plane connection from %s (job %" PRIu64
                     ") refused: UNAUTHENTICATED (wrong token)",
                     addr, job);
        if (r->cb.refused != NULL)
            r->cb.refused(r->cb.arg, addr);
        return -1;
    }
    if (shm_accept(k, addr, dl) != 0)
        return -1;
    memcpy(k->peer, addr, (size_t)al + 1); /* coll__raw_drive_find looks it up ... */
    atomic_store(&k->peer_set, 1);         /* ... once this is set (not r->mu: reap joins us) */
    return 0;
}

/* Read n bytes into buf (blocking socket); 0, or -1 when the connection ended. */
static int read_full(coll_raw *r, int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, (char *)buf + got, n - got, MSG_WAITALL);
        if (k > 0)
            got += (size_t)k;
        else if (k == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) ||
                 atomic_load(&r->closing))
            return -1;
    }
    return 0;
}

/* Read n bytes of k's stream (socket or ring) into buf; 0, or -1 when the connection ended. */
static int conn_read_full(raw_conn *k, void *buf, size_t n)
{
    size_t got = 0;
    if (k->shm == NULL)
        return read_full(k->r, k->fd, buf, n);
    coll_shm_wait wt = {.fd = k->fd, .timeout_ms = 100, .closing = &k->r->closing};
    while (got < n) {
        size_t g;
        if (coll__shm_read(k->shm, &wt, (char *)buf + got, n - got, &g) == COLL_IO_ENDED)
            return -1;
        got += g; /* 0 after a timeout (AGAIN) */
    }
    return 0;
}

/*
 * Read up to n bytes of a claimed payload into buf, waiting for all of them (one wake-up),
 * but returning early (with what was read) every RAW_POLL_MS so that the caller sees a
 * cancellation. DONE: *got (> 0) bytes read; AGAIN: a timeout; ENDED: the connection ended.
 */
static coll_io read_some(raw_conn *k, unsigned char *buf, size_t n, size_t *got)
{
    *got = 0;
    if (k->shm != NULL) {
        coll_shm_wait wt = {.fd = k->fd, .timeout_ms = RAW_POLL_MS, .closing = &k->r->closing};
        return coll__shm_read(k->shm, &wt, buf, n, got);
    }
    ssize_t g = recv(k->fd, buf, n, MSG_WAITALL);
    if (g > 0) {
        *got = (size_t)g;
        return COLL_IO_DONE;
    }
    if (g < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) &&
        !atomic_load(&k->r->closing))
        return COLL_IO_AGAIN;
    return COLL_IO_ENDED;
}

/*
 * Read a claimed payload straight into the posted buffer (copy), or in pieces of
 * COLL_PIECE_BYTES that the device thread adds into the buffer while this thread reads the
 * next one (or that this thread adds itself when no piece buffer is free). Between reads it
 * looks at the post's cancel flag (at least every RAW_POLL_MS): once set it stops touching
 * the buffers, lets the post go and reads the rest of the frame into scratch. Returns 0, or
 * -1 when the connection ended.
 */
static int read_claimed(raw_conn *k, const coll_sink *s)
{
    size_t done = 0;
    int let_go = 0;
    while (done < s->bytes) {
        size_t piece = s->bytes - done < COLL_PIECE_BYTES ? s->bytes - done : COLL_PIECE_BYTES;
        unsigned char *pb = NULL;
        int j = let_go || !s->add ? -1 : s->ops->piece_get(s, &pb);
        unsigned char *to = let_go || s->add ? k->scratch : s->dest + done;
        if (j >= 0)
            to = pb;
        size_t got = 0;
        while (got < piece) {
            if (!let_go && s->ops->cancelled(s)) {
                s->ops->finish(s, 0); /* the device thread resets the piece */
                let_go = 1;
                to = k->scratch; /* the rest of this piece (at most a piece) is discarded */
            }
            size_t n;
            if (read_some(k, to + got, piece - got, &n) == COLL_IO_ENDED) {
                if (!let_go)
                    s->ops->finish(s, 0);
                return -1;
            }
            got += n;
        }
        if (!let_go && j >= 0)
            s->ops->piece_full(s, j, s->dest + done, piece);
        else if (!let_go && s->add)
            coll__add_into((float *)(s->dest + done), k->scratch, piece / sizeof(float));
        done += piece;
    }
    if (!let_go)
        s->ops->finish(s, 1);
    return 0;
}

/* ------------------------------------------------------------- driving */

/* Give the socket to the driver that asked for it (k->mu held), with held_n header bytes. */
static void hand_over(raw_conn *k, const unsigned char *hb, size_t held_n)
{
    uint64_t one = 1;
    k->driven = 1;
    k->picked = 0;
    k->want = 0;
    k->busy = 0;
    k->held_n = held_n;
    if (held_n > 0)
        memcpy(k->hdr, hb, held_n);
    if (write(k->evfd, &one, sizeof(one)) < 0) {
        /* the counter cannot overflow here; the driver also polls on a timeout */
    }
}

/* Discard n bytes of the stream (blocking); 0, or -1 when the connection ended. */
static int discard(raw_conn *k, size_t n)
{
    while (n > 0) {
        size_t c = n < RAW_SCRATCH ? n : RAW_SCRATCH;
        if (conn_read_full(k, k->scratch, c) != 0)
            return -1;
        n -= c;
    }
    return 0;
}

/*
 * Reader thread: wait until it owns the socket, then get the next frame header into hb.
 * DONE: a header is in hb (*back: a driver handed it back, so it must not be handed over
 * again); AGAIN: look again (a driver took the socket, or nothing arrived within 100 ms);
 * ENDED: the connection ended or the listener closes.
 */
static coll_io reader_next(raw_conn *k, unsigned char *hb, int *back)
{
    coll_raw *r = k->r;
    size_t have, skip;
    *back = 0;
    pthread_mutex_lock(&k->mu);
    while (k->driven && !atomic_load(&r->closing)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    }
    if (atomic_load(&r->closing)) {
        pthread_mutex_unlock(&k->mu);
        return COLL_IO_ENDED;
    }
    have = k->held_n;
    skip = k->skip;
    k->held_n = 0;
    k->skip = 0;
    if (have > 0)
        memcpy(hb, k->hdr, have);
    k->busy = have > 0 || skip > 0;
    pthread_mutex_unlock(&k->mu);
    if (skip > 0 && discard(k, skip) != 0)
        return COLL_IO_ENDED;
    if (have == COLL_HDR_SIZE) {
        *back = 1;
        return COLL_IO_DONE;
    }
    if (have == 0 && skip == 0) {
        /* wait for data without owning the stream: a driver may take it meanwhile */
        if (k->shm != NULL) {
            if (coll__shm_wait_data(k->shm, k->fd, 100) == COLL_IO_AGAIN)
                return COLL_IO_AGAIN; /* ENDED: the read below reports it */
        } else {
            struct pollfd p = {.fd = k->fd, .events = POLLIN};
            if (poll(&p, 1, 100) <= 0)
                return COLL_IO_AGAIN;
        }
        pthread_mutex_lock(&k->mu);
        /* a driver took the socket meanwhile (and may have given it back with a frame begun) */
        int taken = k->driven || k->held_n > 0 || k->skip > 0;
        k->busy = !taken;
        pthread_mutex_unlock(&k->mu);
        if (taken)
            return COLL_IO_AGAIN;
    }
    if (conn_read_full(k, hb + have, COLL_HDR_SIZE - have) != 0)
        return COLL_IO_ENDED;
    *back = have > 0; /* a driver gave back a header it began: do not hand it over again */
    pthread_mutex_lock(&k->mu);
    if (k->want && !*back) {
        hand_over(k, hb, COLL_HDR_SIZE);
        pthread_mutex_unlock(&k->mu);
        return COLL_IO_AGAIN;
    }
    pthread_mutex_unlock(&k->mu);
    return COLL_IO_DONE;
}

/* Reader thread: the frame is done; a driver that asked meanwhile gets the socket now. */
static void reader_frame_done(raw_conn *k)
{
    pthread_mutex_lock(&k->mu);
    k->busy = 0;
    if (k->want)
        hand_over(k, NULL, 0);
    pthread_mutex_unlock(&k->mu);
}

/* Reader thread, claim answered 3: hand the socket over with hb if the driver still wants it. */
static int reader_hand_over(raw_conn *k, const unsigned char *hb)
{
    pthread_mutex_lock(&k->mu);
    int ok = k->want;
    if (ok)
        hand_over(k, hb, COLL_HDR_SIZE);
    pthread_mutex_unlock(&k->mu);
    return ok;
}

raw_conn *coll__raw_drive_find(coll_raw *r, const char *peer_addr)
{
    raw_conn *best = NULL;
    if (r == NULL || peer_addr == NULL)
        return NULL;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nconns; i++) {
        raw_conn *k = r->conns[i];
        if (!atomic_load(&k->done) && atomic_load(&k->peer_set) &&
            strcmp(k->peer, peer_addr) == 0 && (best == NULL || k->id > best->id))
            best = k; /* the newest connection from that process */
    }
    if (best != NULL)
        best->users++;
    pthread_mutex_unlock(&r->mu);
    return best;
}

void coll__raw_drive_put(coll_raw *r, raw_conn *k)
{
    pthread_mutex_lock(&r->mu);
    k->users--;
    pthread_mutex_unlock(&r->mu);
}

int coll__raw_drive_fd(const raw_conn *k)
{
    return k->fd;
}

/* Driver: up to n bytes of the stream (socket or ring) without waiting: DONE *got (> 0) bytes,
 * AGAIN none now, ENDED the connection ended. */
static coll_io drive_recv(raw_conn *k, void *buf, size_t n, size_t *got)
{
    if (k->shm != NULL)
        return coll__shm_get_some(k->shm, buf, n, got);
    for (;;) {
        ssize_t g = recv(k->fd, buf, n, MSG_DONTWAIT);
        if (g > 0) {
            *got = (size_t)g;
            return COLL_IO_DONE;
        }
        if (g < 0 && errno == EINTR)
            continue;
        *got = 0;
        return g < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? COLL_IO_AGAIN : COLL_IO_ENDED;
    }
}

coll_io coll__raw_drive_wait(raw_conn *k, int ms)
{
    if (k->shm != NULL)
        return coll__shm_wait_data(k->shm, k->fd, ms);
    struct pollfd p = {.fd = k->fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0 ? COLL_IO_DONE : COLL_IO_AGAIN;
}

int coll__raw_drive_is_shm(const raw_conn *k)
{
    return k->shm != NULL;
}

uint32_t coll__raw_drive_id(const raw_conn *k)
{
    return k->id;
}

int coll__raw_drive_evfd(const raw_conn *k)
{
    return k->evfd;
}

coll_io coll__raw_drive_take(raw_conn *k)
{
    coll_io rv = COLL_IO_AGAIN;
    uint64_t v;
    if (k->d_own)
        return COLL_IO_DONE;
    while (read(k->evfd, &v, sizeof(v)) > 0)
        ; /* reset the notification before looking */
    pthread_mutex_lock(&k->mu);
    if (k->driven) { /* handed over (one driver per connection), with the header begun */
        k->d_hn = k->held_n;
        memcpy(k->d_hb, k->hdr, k->held_n);
        k->d_in = 0;
        k->held_n = 0;
        k->picked = 1;
        rv = COLL_IO_DONE;
    } else if (atomic_load(&k->done)) {
        rv = COLL_IO_ENDED;
    } else if (!k->busy && k->skip == 0 && k->held_n == 0) {
        k->driven = 1; /* the reader is between frames: take the socket */
        k->picked = 1;
        k->want = 0;
        k->d_hn = 0;
        k->d_in = 0;
        rv = COLL_IO_DONE;
    } else {
        k->want = 1; /* the reader hands it over at its next frame boundary */
    }
    k->d_own = rv == COLL_IO_DONE;
    pthread_mutex_unlock(&k->mu);
    return rv;
}

/* Driver: read the claimed payload's next bytes (added straight from a ring; from a socket
 * a piece at a time into scratch, then added; else straight into the posted buffer). DONE:
 * all of it; AGAIN, ENDED: as drive_recv. */
static coll_io drive_payload(raw_conn *k, int *moved)
{
    const coll_sink *s = &k->d_sink;
    while (s->add && k->shm != NULL && k->d_got < s->bytes) {
        size_t g;
        coll_io io =
            coll__shm_add_some(k->shm, (float *)(s->dest + k->d_got), s->bytes - k->d_got, &g);
        if (io != COLL_IO_DONE)
            return io;
        k->d_got += g;
        *moved = 1;
    }
    while (k->d_got < s->bytes) {
        size_t n = s->bytes - k->d_got, pin = k->d_got % COLL_PIECE_BYTES, g;
        unsigned char *to = s->dest + k->d_got;
        if (s->add) { /* a piece at a time into scratch, then added */
            n = n < COLL_PIECE_BYTES - pin ? n : COLL_PIECE_BYTES - pin;
            to = k->scratch + pin;
        }
        coll_io io = drive_recv(k, to, n, &g);
        if (io != COLL_IO_DONE)
            return io;
        k->d_got += g;
        *moved = 1;
        if (s->add && (k->d_got % COLL_PIECE_BYTES == 0 || k->d_got == s->bytes)) {
            size_t pl = (k->d_got - 1) % COLL_PIECE_BYTES + 1;
            coll__add_into((float *)(s->dest + k->d_got - pl), k->scratch, pl / sizeof(float));
        }
    }
    return COLL_IO_DONE;
}

coll_drive_io coll__raw_drive(raw_conn *k)
{
    int moved = 0;
    while (!k->d_in && k->d_hn < COLL_HDR_SIZE) {
        size_t g;
        coll_io io = drive_recv(k, k->d_hb + k->d_hn, COLL_HDR_SIZE - k->d_hn, &g);
        if (io == COLL_IO_AGAIN)
            return moved ? COLL_DRIVE_MOVED : COLL_DRIVE_IDLE;
        if (io == COLL_IO_ENDED) /* the end of the connection: the reader thread reports it */
            return COLL_DRIVE_BACK;
        k->d_hn += g;
        moved = 1;
    }
    if (!k->d_in) {
        uint32_t magic;
        memcpy(&magic, k->d_hb, 4);
        /* a frame the posted receive does not take (another step, a control frame, a mismatch,
         * a malformed header): the reader thread handles it once the driver gives the stream
         * back (with this header) */
        if (magic != COLL_MAGIC || k->d_hb[4] != COLL_KIND_DATA ||
            k->r->cb.claim(k->r->cb.arg, k->d_hb, k->id, COLL_CLAIM_BY_DRIVER, &k->d_sink) !=
                COLL_CLAIM_POSTED)
            return COLL_DRIVE_BACK;
        k->d_in = 1;
        k->d_got = 0;
    }
    coll_io io = drive_payload(k, &moved);
    if (io == COLL_IO_AGAIN)
        return moved ? COLL_DRIVE_MOVED : COLL_DRIVE_IDLE;
    if (io == COLL_IO_ENDED)
        return COLL_DRIVE_BACK;
    k->d_in = 0;
    k->d_hn = 0;
    k->d_sink.ops->finish(&k->d_sink, 1);
    return COLL_DRIVE_FRAME;
}

void coll__raw_drive_end(raw_conn *k)
{
    size_t skip = 0;
    if (k->d_in) { /* a payload begun: the posted receive lets it go, the reader discards it */
        skip = k->d_sink.bytes - k->d_got;
        k->d_sink.ops->finish(&k->d_sink, 0);
    }
    pthread_mutex_lock(&k->mu);
    k->want = 0;
    if (k->driven) {
        k->driven = 0;
        if (k->picked) { /* else the reader's own header is still in k->hdr: it reads on */
            k->skip = skip;
            k->held_n = k->d_in ? 0 : k->d_hn;
            if (k->held_n > 0)
                memcpy(k->hdr, k->d_hb, k->held_n);
        }
        k->picked = 0;
        pthread_cond_broadcast(&k->cv);
    }
    k->d_own = 0;
    k->d_in = 0;
    k->d_hn = 0;
    pthread_mutex_unlock(&k->mu);
}

coll_io coll__raw_write_some(int fd, coll_out *f)
{
    size_t hlen = f->hlen, dlen = f->dlen;
    while (f->sent < hlen + dlen) {
        struct iovec iov[2];
        int n = 0;
        if (f->sent < hlen) {
            iov[n++] = (struct iovec){(char *)f->hdr + f->sent, hlen - f->sent};
            if (dlen > 0)
                iov[n++] = (struct iovec){(void *)f->data, dlen};
        } else {
            iov[n++] = (struct iovec){(char *)f->data + (f->sent - hlen), dlen - (f->sent - hlen)};
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? COLL_IO_AGAIN : COLL_IO_ENDED;
        }
        f->sent += (size_t)k;
    }
    return COLL_IO_DONE;
}

/* ----------------------------------------------------------- reader thread */

static void *conn_main(void *arg)
{
    raw_conn *k = arg;
    coll_raw *r = k->r;
    unsigned char hb[COLL_HDR_SIZE];
    /* before the handshake: a driver may take the connection as soon as it is authenticated */
    int ok = (k->scratch = mt_malloc(RAW_SCRATCH + 4)) != NULL;

    pthread_setname_np(pthread_self(), "mt-coll-rd"); /* for top -H, perf, bench/step_threads.sh */
    if (!ok)
        mt_log_error("coll: out of memory for a receive buffer; dropping the connection");
    ok = ok && conn_handshake(k) == 0;
    if (ok) {
        int fl = fcntl(k->fd, F_GETFL);
        fcntl(k->fd, F_SETFL, fl & ~O_NONBLOCK); /* from here on: blocking reads */
    }
    while (ok && !atomic_load(&r->closing)) {
        int back;
        coll_io got = reader_next(k, hb, &back);
        if (got == COLL_IO_ENDED)
            break;
        if (got == COLL_IO_AGAIN)
            continue;
        uint32_t magic;
        uint64_t len;
        memcpy(&magic, hb, 4);
        memcpy(&len, hb + 64, 8);
        uint64_t unit = hb[4] == COLL_KIND_DATA ? sizeof(float) : 1;
        if (magic != COLL_MAGIC || len > RAW_RECVMAX / unit) {
            mt_log_warn("coll: dropping a data-plane connection that sent a malformed frame "
                        "(magic %08x, length %" PRIu64 ")",
                        magic, len);
            break;
        }
        coll_sink sink;
        if (hb[4] == COLL_KIND_DATA && r->cb.claim != NULL && len > 0) {
            coll_claim c =
                r->cb.claim(r->cb.arg, hb, k->id,
                            back ? COLL_CLAIM_BY_READER : COLL_CLAIM_BY_READER_HANDOVER, &sink);
            if (c == COLL_CLAIM_DRIVER && reader_hand_over(k, hb))
                continue; /* the device thread reads this frame itself */
            if (c == COLL_CLAIM_DRIVER)
                c = r->cb.claim(r->cb.arg, hb, k->id, COLL_CLAIM_BY_READER, &sink);
            if (c == COLL_CLAIM_POSTED) {
                /* reads of a claimed payload time out, so that a cancellation is seen */
                struct timeval tv = {.tv_sec = 0, .tv_usec = RAW_POLL_MS * 1000}, none = {0};
                if (k->shm == NULL)
                    setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                int bad = read_claimed(k, &sink) != 0;
                if (k->shm == NULL)
                    setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
                if (bad)
                    break;
                reader_frame_done(k);
                continue;
            }
        }
        coll_hdr h;
        size_t pl = (size_t)(len * unit);
        coll__hdr_parse(hb, &h);
        coll_frame *f = coll__frame_new(&h, pl);
        if (f == NULL) {
            mt_log_error("coll: out of memory for a %zu-byte frame; dropping the connection", pl);
            break;
        }
        f->conn = k->id;
        if (conn_read_full(k, coll__frame_payload(f), pl) != 0) {
            coll__frame_free(f);
            break;
        }
        r->cb.deliver(r->cb.arg, f);
        reader_frame_done(k);
    }
    if (ok && !atomic_load(&r->closing))
        r->cb.lost(r->cb.arg, k->id);
    coll__shm_close(k->shm, 0); /* a writer waiting for room stops */
    shutdown(k->fd, SHUT_RDWR); /* the dialer sees the end now; the fd is closed when reaped */
    pthread_mutex_lock(&k->mu);
    atomic_store(&k->done, 1);
    uint64_t one = 1;
    if (write(k->evfd, &one, sizeof(one)) < 0) { /* a waiting driver looks again */
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Join finished reader threads (mu held). */
static void reap(coll_raw *r, int all)
{
    for (int i = 0; i < r->nconns;) {
        raw_conn *k = r->conns[i];
        if (!all && (!atomic_load(&k->done) || k->users > 0)) {
            i++;
            continue;
        }
        if (all)
            shutdown(k->fd, SHUT_RDWR);
        pthread_join(k->thr, NULL);
        close(k->fd);
        close(k->evfd);
        coll__shm_free(k->shm);
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        mt_free(k->scratch);
        mt_free(k);
        r->conns[i] = r->conns[--r->nconns];
    }
}

/*
 * Before accepting one more connection (r->mu held): when cfg.max_handshakes connections are
 * still in their handshake, or the table is full, end the oldest one still in its handshake
 * (its reader thread sees the end and leaves; reap frees it). Connections that authenticated
 * are never dropped for a newcomer. Returns 1 when the table has no room now (the dialer
 * retries), else 0.
 */
static int drop_oldest_handshake(coll_raw *r)
{
    raw_conn *oldest = NULL;
    int pending = 0;
    for (int i = 0; i < r->nconns; i++) {
        raw_conn *k = r->conns[i];
        if (atomic_load(&k->done) || atomic_load(&k->peer_set) || k->accepted_ns == 0)
            continue;
        pending++;
        if (oldest == NULL || k->accepted_ns < oldest->accepted_ns)
            oldest = k;
    }
    if (oldest != NULL && (pending >= r->cfg.max_handshakes || r->nconns >= RAW_MAX_CONNS)) {
        mt_log_warn("coll: dropping a data-plane connection still in its handshake after %" PRId64
                    " ms (%d in their handshake)",
                    (int64_t)((coll__now_ns() - oldest->accepted_ns) / 1000000LL), pending);
        oldest->accepted_ns = 0; /* dropped once */
        shutdown(oldest->fd, SHUT_RDWR);
    }
    return r->nconns >= RAW_MAX_CONNS;
}

static void *acc_main(void *arg)
{
    coll_raw *r = arg;

    pthread_setname_np(pthread_self(), "mt-coll-acc");
    while (!atomic_load(&r->closing)) {
        struct pollfd p = {.fd = r->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&r->mu);
        reap(r, 0);
        int full = drop_oldest_handshake(r);
        raw_conn *k = !full ? mt_calloc(1, sizeof(*k)) : NULL;
        if (k != NULL) {
            k->r = r;
            k->fd = fd;
            k->accepted_ns = coll__now_ns();
            k->id = 0x80000000u | (r->next_id++ & 0x7fffffffu);
            atomic_init(&k->done, 0);
            atomic_init(&k->peer_set, 0);
            k->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            pthread_mutex_init(&k->mu, NULL);
            pthread_cond_init(&k->cv, NULL);
            if (k->evfd >= 0 && pthread_create(&k->thr, NULL, conn_main, k) == 0) {
                r->conns[r->nconns++] = k;
                fd = -1;
            } else {
                if (k->evfd >= 0)
                    close(k->evfd);
                pthread_mutex_destroy(&k->mu);
                pthread_cond_destroy(&k->cv);
                mt_free(k);
            }
        }
        pthread_mutex_unlock(&r->mu);
        if (fd >= 0) {
            mt_log_warn("coll: refusing a data-plane connection (%d open)", r->nconns);
            close(fd);
        }
    }
    return NULL;
}

mt_code coll__raw_listen(const coll_raw_cfg *cfg, coll_raw **out, char *addr, size_t cap,
                         mt_err *err)
{
    const char *url = cfg->url, *token = cfg->token;
    struct sockaddr_storage sa;
    socklen_t sl;
    int is_unix;
    *out = NULL;
    if (parse_url(url, &sa, &sl, &is_unix) != MT_OK)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: listen address %s: want tcp://HOST:PORT or ipc://PATH", url);
    if (token != NULL && strlen(token) >= sizeof(((coll_raw *)0)->token))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: token longer than 255 bytes");
    coll_raw *r = mt_calloc(1, sizeof(*r));
    if (r == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll net: out of memory");
    r->cb = cfg->cbs;
    r->is_unix = is_unix;
    snprintf(r->token, sizeof(r->token), "%s", token != NULL ? token : "");
    r->cfg = *cfg;
    r->cfg.url = NULL; /* the caller's: not kept */
    r->cfg.token = r->token;
    r->force_shm = strncmp(url, "shm://", 6) == 0;
    if (cfg->shm != MT_COLL_SHM_OFF) {
        coll__shm_host_id(r->host_id);
        if (r->force_shm && r->host_id[0] == '\0')
            snprintf(r->host_id, sizeof(r->host_id), "shm"); /* the Unix socket proves the host */
        coll__shm_sweep(); /* rings a killed process of this host left behind */
    }
    r->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->lfd < 0) {
        mt_free(r);
        return mt_err_set(err, MT_UNAVAILABLE, "coll net: socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (is_unix) {
        const char *p = ((struct sockaddr_un *)&sa)->sun_path;
        /* a stale socket file of a process that is gone: nobody accepts on it */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sl) != 0 && errno == ECONNREFUSED)
            unlink(p);
        if (probe >= 0)
            close(probe);
        memcpy(r->path, p, strlen(p) + 1); /* parse_url checked it fits */
    }
    if (bind(r->lfd, (struct sockaddr *)&sa, sl) != 0 || listen(r->lfd, 64) != 0) {
        int e = errno;
        close(r->lfd);
        mt_free(r);
        return mt_err_set(err, e == EADDRNOTAVAIL ? MT_INVALID_ARGUMENT : MT_UNAVAILABLE,
                          "coll net: listen on %s: %s", url, strerror(e));
    }
    if (is_unix) {
        snprintf(addr, cap, "%s", url);
    } else {
        struct sockaddr_in b;
        socklen_t bl = sizeof(b);
        char host[INET_ADDRSTRLEN];
        getsockname(r->lfd, (struct sockaddr *)&b, &bl);
        inet_ntop(AF_INET, &b.sin_addr, host, sizeof(host));
        snprintf(addr, cap, "tcp://%s:%u", host, ntohs(b.sin_port));
    }
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->closing, 0);
    if (pthread_create(&r->acc, NULL, acc_main, r) != 0) {
        close(r->lfd);
        pthread_mutex_destroy(&r->mu);
        mt_free(r);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll net: cannot start a thread");
    }
    *out = r;
    return MT_OK;
}

void coll__raw_free(coll_raw *r)
{
    if (r == NULL)
        return;
    atomic_store(&r->closing, 1);
    pthread_join(r->acc, NULL);
    close(r->lfd);
    pthread_mutex_lock(&r->mu);
    reap(r, 1);
    pthread_mutex_unlock(&r->mu);
    if (r->is_unix)
        unlink(r->path);
    pthread_mutex_destroy(&r->mu);
    mt_free(r);
}

/* --------------------------------------------------------------- dialer */

/*
 * Dialer side of the shared-memory step (see shm_accept): answer the listener's offer with a
 * ring when it is on this host and both allow it (always for shm://), else with "".
 * MT_OK (*shm_out set or NULL), or a code with *retry when the connection failed.
 */
static mt_code shm_answer(const coll_raw_dial_req *q, int fd, coll_shm **shm_out, int *retry,
                          mt_err *err)
{
    int force = strncmp(q->url, "shm://", 6) == 0; /* a shm:// listener takes only a ring */
    unsigned char offer[COLL_SHM_HOST_ID], dec[4 + COLL_SHM_NAME] = {0};
    char mine[COLL_SHM_HOST_ID], name[COLL_SHM_NAME] = "";
    uint32_t magic = RAW_MAGIC_SHM, code = 0;
    coll_shm *s = NULL;
    mt_err e = MT_ERR_INIT;
    if (coll__fd_io_full(fd, offer, sizeof(offer), 0, q->deadline_ns) != 0)
        goto io_fail;
    offer[sizeof(offer) - 1] = '\0';
    if (offer[0] == '\0') {
        if (force)
            return mt_err_set(err, MT_UNAVAILABLE, "%s does not offer shared memory", q->url);
        return MT_OK; /* its shm is off */
    }
    coll__shm_host_id(mine);
    if (force ||
        (q->shm != MT_COLL_SHM_OFF && mine[0] != '\0' && strcmp(mine, (const char *)offer) == 0)) {
        coll_shm_spec spec = {.job = q->job, .cap = q->shm_ring, .spin_ns = q->shm_spin_ns};
        if (coll__shm_create(&spec, &s, name, &e) != MT_OK) {
            if (force)
                return mt_err_set(err, MT_UNAVAILABLE, "%s: %s", q->url, e.msg);
            mt_log_warn("coll: the connection to %s stays on its socket: %s", q->url, e.msg);
        }
    }
    memcpy(dec, &magic, 4);
    memcpy(dec + 4, name, strlen(name));
    if (coll__fd_io_full(fd, dec, sizeof(dec), 1, q->deadline_ns) != 0 ||
        (s != NULL && coll__fd_io_full(fd, &code, 4, 0, q->deadline_ns) != 0)) {
        int en = errno;
        coll__shm_unlink(name);
        coll__shm_free(s);
        errno = en;
        goto io_fail;
    }
    coll__shm_unlink(name); /* both sides have it mapped (or it failed): nothing stays behind */
    if (s != NULL && code != 0) {
        coll__shm_free(s);
        s = NULL;
        if (force)
            return mt_err_set(err, MT_UNAVAILABLE, "%s could not map the shared-memory ring",
                              q->url);
        mt_log_warn("coll: %s could not map a shared-memory ring; the connection stays on its "
                    "socket",
                    q->url);
    }
    *shm_out = s;
    return MT_OK;
io_fail:
    *retry = errno == EPIPE || errno == ECONNRESET;
    return mt_err_set(err, errno == ETIMEDOUT ? MT_DEADLINE_EXCEEDED : MT_UNAVAILABLE,
                      "%s: handshake: %s", q->url,
                      errno == EPIPE ? "connection closed" : strerror(errno));
}

/* One attempt of coll__raw_dial; *retry when a later attempt may succeed. */
static mt_code dial_once(const coll_raw_dial_req *q, int *fd_out, coll_shm **shm_out, int *retry,
                         mt_err *err)
{
    struct sockaddr_storage sa;
    socklen_t sl;
    int is_unix, fd = -1, e = 0;
    *retry = 0;
    if (parse_url(q->url, &sa, &sl, &is_unix) != MT_OK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "bad data-plane address %s", q->url);
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return mt_err_set(err, MT_UNAVAILABLE, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
        e = errno;
        if (e == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int64_t left = (q->deadline_ns - coll__now_ns()) / 1000000LL;
            socklen_t el = sizeof(e);
            e = poll(&p, 1, left < 1 ? 1 : (left > 1000 ? 1000 : (int)left)) == 1 ? 0 : ETIMEDOUT;
            if (e == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                e = errno;
        }
    }
    if (e != 0) { /* the peer may not listen yet (a fast process starts first) */
        close(fd);
        *retry = 1;
        return mt_err_set(err, MT_DEADLINE_EXCEEDED, "%s not reachable: %s", q->url, strerror(e));
    }
    if (!is_unix)
        set_nodelay(fd);
    unsigned char chal[4 + RAW_NONCE], hello[RAW_HELLO_FIXED + 255];
    uint32_t magic = RAW_MAGIC_HELLO, code = 0;
    uint16_t al = (uint16_t)(strlen(q->my_addr) > 255 ? 255 : strlen(q->my_addr));
    if (coll__fd_io_full(fd, chal, sizeof(chal), 0, q->deadline_ns) != 0)
        goto io_fail;
    memcpy(hello, &magic, 4);
    memcpy(hello + 4, &q->job, 8);
    memcpy(hello + 12, &al, 2);
    memset(hello + 14, 0, 32);
    if (q->token != NULL && q->token[0] != '\0' &&
        mac_of(q->token, chal + 4, q->job, q->my_addr, hello + 14) != MT_OK) {
        close(fd);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "%s: the HMAC of the data-plane handshake failed (out of memory)",
                          q->url);
    }
    memcpy(hello + RAW_HELLO_FIXED, q->my_addr, al);
    if (coll__fd_io_full(fd, hello, RAW_HELLO_FIXED + al, 1, q->deadline_ns) != 0 ||
        coll__fd_io_full(fd, &code, 4, 0, q->deadline_ns) != 0)
        goto io_fail;
    if (code != 0) {
        close(fd);
        return mt_err_set(err, MT_UNAUTHENTICATED,
                          "%s refused this process's data-plane token (job %" PRIu64
                          "): UNAUTHENTICATED",
                          q->url, q->job);
    }
    mt_code rc = shm_answer(q, fd, shm_out, retry, err);
    if (rc != MT_OK) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return MT_OK;
io_fail:
    e = errno;
    close(fd);
    *retry = e == EPIPE || e == ECONNRESET; /* the listener dropped it (e.g. too many handshakes) */
    return mt_err_set(err, e == ETIMEDOUT ? MT_DEADLINE_EXCEEDED : MT_UNAVAILABLE,
                      "%s: handshake: %s", q->url, e == EPIPE ? "connection closed" : strerror(e));
}

mt_code coll__raw_dial(const coll_raw_dial_req *q, int *fd_out, coll_shm **shm_out, mt_err *err)
{
    *fd_out = -1;
    *shm_out = NULL;
    for (;;) {
        int retry;
        mt_err e = MT_ERR_INIT;
        mt_code rc = dial_once(q, fd_out, shm_out, &retry, &e);
        if (rc == MT_OK)
            return MT_OK;
        if (!retry)
            return mt_err_set(err, rc, "%s", e.msg);
        if (q->give_up != NULL && q->give_up(q->arg))
            return mt_err_set(err, MT_UNAVAILABLE, "%s and lost", e.msg);
        if (coll__now_ns() >= q->deadline_ns)
            return mt_err_set(err, MT_DEADLINE_EXCEEDED, "%s", e.msg);
        usleep(10000);
    }
}
