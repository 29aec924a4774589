/* SPDX-License-Identifier: MIT */
/*
 * coll_net.c — the data-plane endpoint of a process and its transports.
 *
 * tcp:// and ipc:// addresses use the direct-socket transport of coll_raw.c
 * (token handshake, one reader thread per connection, synchronous writes); this
 * file routes its frames and lost connections into the same paths as nng's
 * (net_handle, pipe_lost) and dials it per peer process (raw_send). The rest of
 * this comment describes the nng transport, used for nng+tcp:// and nng+ipc://.
 *
 * Each process has one mt_coll_net: a PULL socket listening on the process's
 * data-plane address with one receive aio always outstanding; its callback (on
 * an nng thread) hands every message to the destination comm's inbox
 * (w->engine->deliver) and re-arms. (A dedicated receiver thread blocking in
 * nng_recvmsg was measured slower: one more thread wake-up per hop.) To reach another process a
 * world opens, on first use, one PUSH socket dialed to that process's listener
 * (so connections go only to the ring neighbours actually needed); it is reused
 * by every local device and every step, and closed by mt_coll_world_free after
 * a BYE flush (a send completes only once the pipe finished the previous write,
 * so the BYE proves the last real message left this process).
 *
 * Failure detection: a lost connection (the peer died: its pipe is removed from
 * our PULL or PUSH socket) marks the peer process down (a connection whose peer sent BYE first,
 * nng or direct, ends in order, and so does any connection that ends while this process closes
 * its own world: no warning is logged for them); a device waiting for
 * data from it fails with UNAVAILABLE once COLL_GRACE_NS passed without that
 * data (messages already received are still delivered first). A stopped or
 * unreachable peer is caught by the collective's deadline. Sends carry the
 * collective's deadline as their aio timeout.
 *
 * Threading: the receive callback and nng's pipe callbacks take net->mu; device
 * threads take peer->mu to open a socket. Tests: tests/integration/
 * test_coll_procs.sh (real processes), tests/unit/test_coll.c (loopback).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/supplemental/util/platform.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_int.h"
#include "log/mt_log.h"
#include "tls/mt_tls.h"

#define NET_MAX_PENDING 65536
#define RAW_ARM_WAIT_NS 5000000LL /* a ring frame waits this long for its step to be posted */
#define NET_RECVMAX     ((size_t)(64u << 20) + 4096u)
#define NET_NAIO        4 /* the nng transport: outstanding sends per comm (pipelining depth) */

/* The nng transport's send state of a comm (c->tx; opaque in coll_int.h): its send slots.
 * The device thread's, but for done (set by the aio callback) and the cancels of
 * mt_coll_world_cancel. */
struct coll_comm_tx {
    nng_aio *aio[NET_NAIO];
    int busy[NET_NAIO];         /* 1 + destination process, 0 idle */
    _Atomic int done[NET_NAIO]; /* set by the aio callback */
    int next;
};

/* The nng transport's state of a connection to a peer process (pe->tx, made when it opens):
 * the push socket dialed to that process's listener. */
struct coll_peer_tx {
    nng_socket sock;
};

typedef struct net_pipe {
    uint32_t id; /* pipe id on the PULL socket */
    int proc;    /* process index in the current world */
} net_pipe;

/* Worlds whose late frames a live world drops: a peer may still be finishing a job this process
 * has already left (a cancelled job's last collective) when the next job's world is served. */
#define NET_GONE         8
#define COLL_BYE_WAIT_MS 500 /* a world's close waits at most this long for room for its BYEs */

struct mt_coll_net {
    nng_socket pull;
    nng_listener lst;
    char addr[256];
    mt_tls *tls;         /* held reference for tls+tcp:// (listen and dial peers); else NULL */
    nng_aio *raio;       /* the one outstanding receive; its callback delivers and re-arms */
    _Atomic int closing; /* sockets whose close was left running (close_bounded) */
    pthread_mutex_t mu;
    pthread_cond_t arm_cv; /* with mu: a device thread posted a receive (coll__net_wake_claim) */
    mt_coll_world *world;  /* mu: the world served, NULL when none */
    coll_frame **pending;  /* mu: frames that arrived before the world existed */
    size_t npending, cap_pending;
    uint64_t gone[NET_GONE]; /* mu: job ids of the worlds this net served last (a ring) */
    size_t ngone;            /* mu: worlds detached so far (gone[ngone % NET_GONE] is next) */
    net_pipe *pipes;         /* mu: PULL pipes (or direct connections) seen in the current world */
    size_t npipes, cap_pipes;
    coll_raw *raw;          /* the direct transport (tcp://, ipc://); NULL: nng (nng+tcp://) */
    char token[256];        /* data-plane token ("" none), proven by every dialed connection */
    mt_coll_net_opts opts;  /* as given (token and tls point at the fields above) */
    char refused_addr[256]; /* mu: last dialer refused before the world existed */
    const struct net_transport *tp; /* the operations of the listener's URL scheme */
};

/*
 * One table of operations per transport (the listener's URL scheme decides, as nng registers
 * one per scheme): mt_coll_net_new_opts, the engine's sends (coll__net_send*), closing a
 * world's connections and mt_coll_net_free go through it, never through an if on the
 * transport. direct_transport: tcp://, ipc://, shm:// (coll_raw.c; a connection's frames go
 * through a socket or a coll_shm.c ring); nng_transport: nng+tcp://, nng+ipc:// and
 * tls+tcp:// (nng, with the TLS config for tls+tcp://). inproc_transport carries the frames
 * between the devices of this process (no listener: every world has it, a world of
 * mt_coll_world_new_local only it): it copies the frame into a coll_frame and delivers it
 * through w->engine, the entry point every transport's frames take.
 */
typedef struct net_transport {
    const char *name;
    int direct; /* frames written from the caller's buffer: posted receives and driving apply */
    /* listen on url (the scheme prefix nng+ already removed); fills net->addr */
    mt_code (*listen)(mt_coll_net *net, const char *url, mt_err *err);
    /* one frame (f borrowed) from c to process proc before deadline_ns */
    mt_code (*send)(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err);
    /* a control frame (PING, PONG; f borrowed) within timeout_ms; *out: an aio the caller
     * waits for and frees, or NULL when the send already completed */
    mt_code (*send_ctl)(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms, nng_aio **out);
    /* the comm's send state (c->tx; NULL: the transport keeps none) */
    mt_code (*comm_init)(mt_coll_comm *c, mt_err *err);
    /* end the connection to open peer i in order (BYE first) */
    void (*peer_close)(mt_coll_world *w, int i, coll_peer *pe);
    /* how frames to the open peer go (mt_coll_world_link); addr without nng+ */
    const char *(*link)(const mt_coll_world *w, const coll_peer *pe, const char *addr);
    /* stop receiving (joins or closes); 0: a close is still running, keep net (a leak) */
    int (*stop)(mt_coll_net *net);
    /* the synchronous mode ("driving", coll_int.h; NULL: the transport has none) */
    mt_code (*dial)(mt_coll_world *w, int proc, int64_t deadline_ns, mt_err *err);
    coll_io (*write_some)(mt_coll_world *w, int proc, coll_out *f);
    void (*drop)(mt_coll_world *w, int proc);
    coll_link *(*drive_open)(mt_coll_world *w, int proc);
    coll_io (*drive_take)(coll_link *k);
    coll_drive_io (*drive)(coll_link *k);
    coll_io (*drive_wait)(mt_coll_world *w, coll_link *k, const coll_drive_wait *wt);
    void (*drive_close)(mt_coll_world *w, coll_link *k);
} net_transport;
static const net_transport direct_transport, nng_transport, inproc_transport;

static mt_code nng_code(int rv)
{
    switch (rv) {
    case 0:
        return MT_OK;
    case NNG_ETIMEDOUT:
        return MT_DEADLINE_EXCEEDED;
    case NNG_ENOMEM:
        return MT_RESOURCE_EXHAUSTED;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
        return MT_INVALID_ARGUMENT;
    case NNG_ECLOSED:
    case NNG_ECANCELED:
        return MT_CANCELLED;
    default:
        return MT_UNAVAILABLE;
    }
}

static void note_pipe(mt_coll_net *net, uint32_t id, int proc)
{
    for (size_t i = 0; i < net->npipes; i++) {
        if (net->pipes[i].id == id)
            return;
    }
    if (net->npipes == net->cap_pipes) {
        size_t ncap = net->cap_pipes ? net->cap_pipes * 2 : 16;
        net_pipe *np = mt_realloc(net->pipes, ncap * sizeof(*np));
        if (np == NULL)
            return;
        net->pipes = np;
        net->cap_pipes = ncap;
    }
    net->pipes[net->npipes++] = (net_pipe){id, proc};
}

static void mark_down(mt_coll_world *w, int proc)
{
    int64_t zero = 0;
    if (proc < 0 || proc >= w->nprocs || proc == w->my_proc)
        return;
    if (atomic_compare_exchange_strong(&w->peers[proc].down_ns, &zero, coll__now_ns())) {
        /* it closed its world (the job's normal end), or this process is closing its own */
        if (atomic_load(&w->peers[proc].bye) || atomic_load(&w->closing))
            mt_log_debug("coll: %s closed its connection", w->proc_addr[proc]);
        else
            mt_log_warn("coll: connection to %s lost", w->proc_addr[proc]);
    }
    /* wake waiters so they notice after the grace period */
    for (int i = 0; i < w->nlocal; i++) {
        pthread_mutex_lock(&w->comms[i].mu);
        coll__comm_wake(&w->comms[i]);
        pthread_mutex_unlock(&w->comms[i].mu);
    }
}

/* Mark the process of pipe (or direct connection) id as lost. */
static void pipe_lost(mt_coll_net *net, uint32_t id)
{
    pthread_mutex_lock(&net->mu);
    for (size_t i = 0; i < net->npipes && net->world != NULL; i++) {
        if (net->pipes[i].id == id)
            mark_down(net->world, net->pipes[i].proc);
    }
    pthread_mutex_unlock(&net->mu);
}

static void pull_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    if (ev == NNG_PIPE_EV_REM_POST)
        pipe_lost(arg, (uint32_t)nng_pipe_id(p));
}

static void push_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    mt_coll_net *net = arg;
    int sid = nng_socket_id(nng_pipe_socket(p));
    pthread_mutex_lock(&net->mu);
    mt_coll_world *w = net->world;
    for (int i = 0; w != NULL && i < w->nprocs; i++) {
        coll_peer *pe = &w->peers[i];
        if (!pe->open || nng_socket_id(pe->tx->sock) != sid)
            continue;
        if (ev == NNG_PIPE_EV_ADD_POST)
            atomic_store(&pe->connected, 1);
        else if (ev == NNG_PIPE_EV_REM_POST && atomic_load(&pe->connected))
            mark_down(w, i);
    }
    pthread_mutex_unlock(&net->mu);
}

/*
 * A BYE (sent by coll__peers_close before it closes a connection, after the last frame) came on
 * pipe (or direct connection) id: the sending process's world is closing, so the end of that
 * connection is not a failure (mark_down logs it at debug level, not as a lost connection).
 * Only a connection already known to carry this job's frames counts.
 */
static void note_bye(mt_coll_net *net, uint32_t id, const coll_hdr *h)
{
    pthread_mutex_lock(&net->mu);
    mt_coll_world *w = net->world;
    for (size_t i = 0; w != NULL && h->job == w->opts.job_id && i < net->npipes; i++) {
        if (net->pipes[i].id == id)
            atomic_store(&w->peers[net->pipes[i].proc].bye, 1);
    }
    pthread_mutex_unlock(&net->mu);
}

/*
 * Hand one received message to the world, or keep it until its world exists. A message of
 * another job id that arrives while a CANCELLED world is still attached is kept too: a restarted
 * job's peers may start sending before this process has freed the old attempt's world (the
 * worker cancels it when the coordinator cancels the attempt); given to the old world it would
 * be lost and the new world would see a later ring step. A live world gets it (a mismatch:
 * INVALID_ARGUMENT). coll__net_attach_pending delivers the kept messages of the new world's
 * job and drops the rest.
 */
/* Whether job is one of the worlds this net served before the current one (mu held). */
static bool net_gone(const mt_coll_net *net, uint64_t job)
{
    size_t n = net->ngone < NET_GONE ? net->ngone : NET_GONE;
    for (size_t i = 0; i < n; i++)
        if (net->gone[i] == job)
            return true;
    return false;
}

static void net_handle(mt_coll_net *net, coll_frame *f)
{
    const coll_hdr h = f->h;
    if (h.kind == COLL_KIND_BYE) {
        note_bye(net, f->conn, &h);
        coll__frame_free(f);
        return;
    }
    pthread_mutex_lock(&net->mu);
    mt_coll_world *w = net->world;
    if (w == NULL || (h.job != w->opts.job_id && atomic_load(&w->cancelled))) {
        if (net->npending == net->cap_pending && net->npending < NET_MAX_PENDING) {
            size_t ncap = net->cap_pending ? net->cap_pending * 2 : 64;
            coll_frame **np = mt_realloc(net->pending, ncap * sizeof(*np));
            if (np != NULL) {
                net->pending = np;
                net->cap_pending = ncap;
            }
        }
        if (net->npending < net->cap_pending) {
            net->pending[net->npending++] = f;
        } else {
            mt_log_warn("coll %s: dropping a message that arrived before its job", net->addr);
            coll__frame_free(f);
        }
    } else if (h.job < w->opts.job_id && w->opts.job_id - h.job <= MT_COLL_MAX_ATTEMPTS) {
        coll__frame_free(f); /* a late frame of an earlier attempt of this job (mt_coll.h) */
    } else if (h.job != w->opts.job_id && net_gone(net, h.job)) {
        coll__frame_free(f); /* a late frame of a job whose world this net served before */
    } else {
        if (h.src >= 0 && h.src < w->size)
            note_pipe(net, f->conn, w->proc_of[h.src]);
        w->engine->deliver(w, f);
    }
    pthread_mutex_unlock(&net->mu);
}

/* A dialer claiming address addr failed authentication (called with net->mu held). */
static void refuse_addr(mt_coll_net *net, const char *addr)
{
    mt_coll_world *w = net->world;
    for (int i = 0; w != NULL && i < w->nprocs; i++) {
        if (i != w->my_proc && strcmp(w->proc_addr[i], addr) == 0) {
            atomic_store(&w->peers[i].refused, 1);
            mark_down(w, i);
        }
    }
}

/* A frame from a direct connection (its id in f->conn has the top bit set, an nng pipe's
 * never, so both kinds of id live in one pipe table). */
static void raw_deliver(void *arg, coll_frame *f)
{
    net_handle(arg, f);
}

/*
 * A DATA header arrived on direct connection conn: claim a posted receive for its payload.
 * A ring frame that arrives before its step is posted (a fast predecessor is already in the
 * next collective) waits up to RAW_ARM_WAIT_NS for the device thread to post it, when
 * the engine's claim says that is safe; net->mu is released while waiting.
 */
static coll_claim raw_claim(void *arg, const unsigned char *hb, uint32_t conn, coll_claim_mode mode,
                            coll_sink *s)
{
    mt_coll_net *net = arg;
    coll_hdr h;
    coll_claim r = COLL_CLAIM_QUEUE;
    int noted = 0;
    int64_t until = coll__now_ns() + RAW_ARM_WAIT_NS;
    coll__hdr_parse(hb, &h);
    pthread_mutex_lock(&net->mu);
    for (;;) {
        mt_coll_world *w = net->world;
        if (w == NULL || h.kind != COLL_KIND_DATA || h.job != w->opts.job_id ||
            atomic_load(&w->cancelled) || h.src < 0 || h.src >= w->size)
            break;
        if (!noted)
            note_pipe(net, conn, w->proc_of[h.src]);
        noted = 1;
        r = w->engine->claim(w, &h, mode, s);
        int64_t now = coll__now_ns();
        if (r != COLL_CLAIM_WAIT || now >= until)
            break;
        int64_t t = until - now > 1000000LL ? now + 1000000LL : until;
        struct timespec ts = {.tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL};
        pthread_cond_timedwait(&net->arm_cv, &net->mu, &ts);
    }
    pthread_mutex_unlock(&net->mu);
    return r == COLL_CLAIM_WAIT ? COLL_CLAIM_QUEUE : r;
}

void coll__net_wake_claim(mt_coll_net *net)
{
    pthread_mutex_lock(&net->mu);
    pthread_cond_broadcast(&net->arm_cv);
    pthread_mutex_unlock(&net->mu);
}

static void raw_lost(void *arg, uint32_t conn)
{
    pipe_lost(arg, conn);
}

static void raw_refused(void *arg, const char *addr)
{
    mt_coll_net *net = arg;
    pthread_mutex_lock(&net->mu);
    if (net->world != NULL)
        refuse_addr(net, addr);
    else
        snprintf(net->refused_addr, sizeof(net->refused_addr), "%s", addr);
    pthread_mutex_unlock(&net->mu);
}

static void msg_frame_release(coll_frame *f)
{
    nng_msg_free(f->owner);
    mt_free(f);
}

/* The frame of nng message m (taken; the frame keeps it: no copy), or NULL (m freed) when it is
 * malformed or memory is short. */
static coll_frame *msg_to_frame(mt_coll_net *net, nng_msg *m)
{
    coll_hdr h;
    const unsigned char *b = nng_msg_body(m);
    size_t n = nng_msg_len(m);
    coll_frame *f = NULL;
    if (coll__hdr_decode(b, n, &h) != MT_OK)
        mt_log_warn("coll %s: dropping a malformed message of %zu bytes", net->addr, n);
    else if ((f = mt_malloc(sizeof(*f))) == NULL)
        mt_log_error("coll %s: out of memory for a message of %zu bytes", net->addr, n);
    if (f == NULL) {
        nng_msg_free(m);
        return NULL;
    }
    *f = (coll_frame){.h = h,
                      .data = b + COLL_HDR_SIZE,
                      .bytes = n - COLL_HDR_SIZE,
                      .conn = nng_msg_get_pipe(m).id,
                      .release = msg_frame_release,
                      .owner = m};
    return f;
}

/* Receive callback (nng thread): deliver, then receive again until the socket closes. */
static void net_recv_cb(void *arg)
{
    mt_coll_net *net = arg;
    int rv = nng_aio_result(net->raio);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv == 0) {
        coll_frame *f = msg_to_frame(net, nng_aio_get_msg(net->raio));
        nng_aio_set_msg(net->raio, NULL);
        if (f != NULL)
            net_handle(net, f);
    }
    nng_recv_aio(net->pull, net->raio);
}

static mt_code format_addr(mt_coll_net *net, const char *url, mt_err *err)
{
    nng_sockaddr sa;
    int rv = nng_listener_get_addr(net->lst, NNG_OPT_LOCADDR, &sa);
    if (rv == 0 && sa.s_family == NNG_AF_INET) {
        char host[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sa.s_in.sa_addr, host, sizeof(host));
        snprintf(net->addr, sizeof(net->addr), "%s://%s:%u", net->tls ? "tls+tcp" : "nng+tcp", host,
                 ntohs(sa.s_in.sa_port));
        return MT_OK;
    }
    if (strlen(url) + 4 >= sizeof(net->addr))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: address %s too long", url);
    if (net->tls != NULL) { /* tls+tcp:// names itself */
        snprintf(net->addr, sizeof(net->addr), "%s", url);
        return MT_OK;
    }
    memcpy(net->addr, "nng+", 4);
    memcpy(net->addr + 4, url, strlen(url) + 1);
    return MT_OK;
}

/*
 * nng 1.5.2's nng_close can, rarely, wait forever (nanomsg/nng#1543, fixed after
 * 1.5.2). Closing must not hang a worker, so a helper thread closes the socket
 * and the caller waits a bounded time; if the close is still running then, it
 * is left to finish in the background (the helper frees its record; whichever
 * of the two finishes last frees it).
 */
typedef struct net_closer {
    nng_socket s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;             /* mu */
    _Atomic int refs;     /* helper + caller */
    _Atomic int *closing; /* the net's count of closes under way */
} net_closer;

static void closer_release(net_closer *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1) {
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        mt_free(k);
    }
}

static void *closer_main(void *arg)
{
    net_closer *k = arg;
    nng_close(k->s);
    atomic_fetch_sub(k->closing, 1); /* no callback of this socket runs any more */
    pthread_mutex_lock(&k->mu);
    k->done = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    closer_release(k);
    return NULL;
}

/* Close s within ms milliseconds. Returns 1 when closed, 0 when left closing. */
static int close_bounded(mt_coll_net *net, nng_socket s, int64_t ms, const char *what)
{
    pthread_condattr_t ca;
    pthread_t t;
    net_closer *k = mt_calloc(1, sizeof(*k));
    if (k == NULL) {
        nng_close(s);
        return 1;
    }
    k->s = s;
    k->closing = &net->closing;
    atomic_fetch_add(&net->closing, 1);
    atomic_init(&k->refs, 2);
    pthread_mutex_init(&k->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t, NULL, closer_main, k) != 0) {
        nng_close(s);
        atomic_fetch_sub(&net->closing, 1);
        atomic_store(&k->refs, 1);
        closer_release(k);
        return 1;
    }
    pthread_detach(t);
    int64_t until = coll__now_ns() + ms * 1000000LL;
    struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
    pthread_mutex_lock(&k->mu);
    while (!k->done && pthread_cond_timedwait(&k->cv, &k->mu, &ts) == 0)
        ;
    int done = k->done;
    pthread_mutex_unlock(&k->mu);
    closer_release(k);
    if (!done)
        mt_log_warn("coll: closing %s takes over %" PRId64 " ms (nng); left to finish in the "
                    "background",
                    what, ms);
    return done;
}

mt_code mt_coll_net_new(const char *url, mt_coll_net **out, mt_err *err)
{
    return mt_coll_net_new_opts(url, NULL, out, err);
}

mt_code mt_coll_net_new_tls(const char *url, const mt_tls *tls, mt_coll_net **out, mt_err *err)
{
    mt_coll_net_opts o = MT_COLL_NET_DEFAULTS;
    o.tls = tls;
    return mt_coll_net_new_opts(url, &o, out, err);
}

mt_code mt_coll_net_new_auth(const char *url, const char *token, mt_coll_net **out, mt_err *err)
{
    mt_coll_net_opts o = MT_COLL_NET_DEFAULTS;
    o.token = token;
    return mt_coll_net_new_opts(url, &o, out, err);
}

static mt_code check_net_opts(const char *url, const mt_coll_net_opts *o, mt_err *err)
{
    size_t ring = o->shm_ring_bytes;
    if (o->shm != MT_COLL_SHM_AUTO && o->shm != MT_COLL_SHM_OFF)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: shm mode %d: want AUTO or OFF",
                          (int)o->shm);
    if (ring < 4096 || (ring & (ring - 1)) != 0 || ring > ((size_t)1 << 30))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: shm_ring_bytes %zu: want a power of two from 4 KiB to 1 GiB",
                          ring);
    if (o->shm_spin_us < 0 || o->shm_spin_us > 1000000)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: shm_spin_us %lld: want 0 .. 1e6",
                          (long long)o->shm_spin_us);
    if (o->handshake_ms < 1 || o->max_handshakes < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: handshake_ms %lld and max_handshakes %d must be >= 1",
                          (long long)o->handshake_ms, o->max_handshakes);
    if (url != NULL && strncmp(url, "shm://", 6) == 0 && o->shm == MT_COLL_SHM_OFF)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: %s with shared memory off", url);
    return MT_OK;
}

/* The direct transport's listener; its reader threads deliver through the raw_* callbacks. */
static mt_code direct_listen(mt_coll_net *net, const char *url, mt_err *err)
{
    const mt_coll_net_opts *opts = &net->opts;
    coll_raw_cfg cfg = {.url = url,
                        .cbs = {net, raw_deliver, raw_lost, raw_refused, raw_claim},
                        .token = net->token,
                        .shm = opts->shm,
                        .shm_ring = opts->shm_ring_bytes,
                        .shm_spin_ns = opts->shm_spin_us * 1000,
                        .handshake_ms = opts->handshake_ms,
                        .max_handshakes = opts->max_handshakes};
    return coll__raw_listen(&cfg, &net->raw, net->addr, sizeof(net->addr), err);
}

/* nng's PULL listener with one receive always outstanding (net_recv_cb delivers). */
static mt_code nngt_listen(mt_coll_net *net, const char *url, mt_err *err)
{
    mt_code rc;
    int rv;
    if ((rv = nng_pull0_open(&net->pull)) != 0)
        return mt_err_set(err, nng_code(rv), "coll net: open socket: %s", nng_strerror(rv));
    nng_socket_set_size(net->pull, NNG_OPT_RECVMAXSZ, NET_RECVMAX);
    nng_socket_set_int(net->pull, NNG_OPT_RECVBUF, 1024);
    nng_pipe_notify(net->pull, NNG_PIPE_EV_REM_POST, pull_pipe_cb, net);
    if ((rc = mt_tls_listen(net->pull, url, net->tls, 1, &net->lst, err)) != MT_OK)
        goto fail; /* peers must present a certificate from the CA */
    if ((rc = format_addr(net, url, err)) != MT_OK)
        goto fail;
    if ((rv = nng_aio_alloc(&net->raio, net_recv_cb, net)) != 0) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll net: cannot allocate aio");
        goto fail;
    }
    nng_recv_aio(net->pull, net->raio);
    return MT_OK;
fail:
    nng_close(net->pull);
    return rc;
}

/* tcp://, ipc:// and shm://: the direct transport (with the token handshake); nng+tcp://,
 * nng+ipc:// and tls+tcp:// (with tls): nng. */
mt_code mt_coll_net_new_opts(const char *url, const mt_coll_net_opts *opts, mt_coll_net **out,
                             mt_err *err)
{
    mt_coll_net_opts def = MT_COLL_NET_DEFAULTS;
    mt_coll_net *net;
    mt_code rc;
    int use_nng = 0;

    *out = NULL;
    if (opts == NULL)
        opts = &def;
    const mt_tls *tls = opts->tls;
    const char *token = opts->token;
    if ((rc = check_net_opts(url, opts, err)) != MT_OK)
        return rc;
    if (url != NULL && strncmp(url, "nng+", 4) == 0) {
        url += 4;
        use_nng = 1;
    } else if (url != NULL && mt_tls_url_is_tls(url)) {
        use_nng = 1;
    }
    if (url == NULL || (!coll__raw_url(url) && !mt_tls_url_is_tls(url)) ||
        (use_nng && strncmp(url, "shm://", 6) == 0))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: listen address %s: want tcp://HOST:PORT, ipc://PATH, "
                          "shm://PATH, tls+tcp://HOST:PORT or nng+tcp://, nng+ipc://",
                          url ? url : "(null)");
    if (mt_tls_url_is_tls(url) && (!mt_tls_can_listen(tls) || !mt_tls_can_dial(tls)))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: %s needs a certificate, its key and the CA peers are "
                          "verified with (--tls-cert, --tls-key, --tls-ca)",
                          url);
    if (token != NULL && strlen(token) >= sizeof(net->token))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: token longer than 255 bytes");
    net = mt_calloc(1, sizeof(*net));
    if (net == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll net: out of memory");
    if (mt_tls_url_is_tls(url))
        net->tls = mt_tls_hold(tls);
    pthread_mutex_init(&net->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&net->arm_cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(net->token, sizeof(net->token), "%s", token != NULL ? token : "");
    net->opts = *opts;
    net->opts.token = net->token;
    net->opts.tls = NULL; /* net->tls holds it */
    net->tp = use_nng ? &nng_transport : &direct_transport;
    if ((rc = net->tp->listen(net, url, err)) != MT_OK)
        goto fail_sock;
    *out = net;
    return MT_OK;
fail_sock:
    pthread_mutex_destroy(&net->mu);
    pthread_cond_destroy(&net->arm_cv);
    mt_tls_free(net->tls);
    mt_free(net);
    return rc;
}

const char *mt_coll_net_addr(const mt_coll_net *net)
{
    return net->addr;
}

mt_code mt_coll_net_set_addr(mt_coll_net *net, const char *addr, mt_err *err)
{
    const char *a = addr != NULL && strncmp(addr, "nng+", 4) == 0 ? addr + 4 : addr;
    if (a == NULL || (!coll__raw_url(a) && strncmp(a, "tls+tcp://", 10) != 0))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll net: advertised address %s: want tcp://HOST:PORT, "
                          "tls+tcp://HOST:PORT, ipc://PATH or shm://PATH",
                          addr ? addr : "(null)");
    if (strlen(addr) >= sizeof(net->addr))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll net: address %s too long", addr);
    snprintf(net->addr, sizeof(net->addr), "%s", addr);
    return MT_OK;
}

void mt_coll_net_free(mt_coll_net *net)
{
    if (net == NULL)
        return;
    if (!net->tp->stop(net))
        return; /* callbacks of a socket still closing may use net: keep it (a leak) */
    for (size_t i = 0; i < net->npending; i++)
        coll__frame_free(net->pending[i]);
    mt_free(net->pending);
    mt_free(net->pipes);
    pthread_mutex_destroy(&net->mu);
    pthread_cond_destroy(&net->arm_cv);
    mt_tls_free(net->tls);
    mt_free(net);
}

mt_code coll__net_check_addr(const mt_coll_net *net, const char *addr, int *is_local)
{
    const char *a = strncmp(addr, "nng+", 4) == 0 ? addr + 4 : addr;
    if (!coll__raw_url(a) && !mt_tls_url_is_tls(a))
        return MT_INVALID_ARGUMENT;
    if (net->tls != NULL && !mt_tls_url_is_tls(addr))
        return MT_FAILED_PRECONDITION; /* never send tensors in clear from a TLS data plane */
    *is_local = strcmp(addr, net->addr) == 0;
    return MT_OK;
}

void coll__net_attach_pending(mt_coll_net *net, mt_coll_world *w)
{
    pthread_mutex_lock(&net->mu);
    if (net->world != NULL) {
        pthread_mutex_unlock(&net->mu);
        w->net = NULL; /* tells the caller: refused */
        return;
    }
    net->world = w;
    net->npipes = 0;
    if (net->refused_addr[0] != '\0') {
        refuse_addr(net, net->refused_addr);
        net->refused_addr[0] = '\0';
    }
    for (size_t i = 0; i < net->npending; i++) {
        coll_frame *f = net->pending[i];
        if (f->h.job != w->opts.job_id) {
            coll__frame_free(f); /* a straggler of another job */
            continue;
        }
        if (f->h.src >= 0 && f->h.src < w->size)
            note_pipe(net, f->conn, w->proc_of[f->h.src]);
        w->engine->deliver(w, f);
    }
    net->npending = 0;
    pthread_mutex_unlock(&net->mu);
}

void coll__net_detach(mt_coll_net *net, mt_coll_world *w)
{
    pthread_mutex_lock(&net->mu);
    if (net->world == w) {
        net->world = NULL;
        net->gone[net->ngone++ % NET_GONE] = w->opts.job_id;
    }
    net->npipes = 0;
    pthread_mutex_unlock(&net->mu);
}

/* Open the PUSH socket to process proc if needed. */
static mt_code peer_open(mt_coll_world *w, int proc, mt_err *err)
{
    coll_peer *pe = &w->peers[proc];
    mt_code rc = MT_OK;
    int rv;
    pthread_mutex_lock(&pe->mu);
    if (pe->open)
        goto out;
    nng_socket s;
    if (pe->tx == NULL && (pe->tx = mt_calloc(1, sizeof(*pe->tx))) == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "open socket to %s: out of memory",
                        w->proc_addr[proc]);
        goto out;
    }
    if ((rv = nng_push0_open(&s)) != 0) {
        rc = mt_err_set(err, nng_code(rv), "open socket to %s: %s", w->proc_addr[proc],
                        nng_strerror(rv));
        goto out;
    }
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 10);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 200);
    pthread_mutex_lock(&w->net->mu);
    pe->tx->sock = s;
    pe->open = 1;
    pthread_mutex_unlock(&w->net->mu);
    nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, push_pipe_cb, w->net);
    nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, push_pipe_cb, w->net);
    const char *url = w->proc_addr[proc];
    if (strncmp(url, "nng+", 4) == 0)
        url += 4;
    rc = mt_tls_dial(s, url, w->net->tls, NNG_FLAG_NONBLOCK, err);
out:
    pthread_mutex_unlock(&pe->mu);
    return rc;
}

static mt_code aio_finish(coll_comm_tx *t, int slot, mt_err *err)
{
    nng_aio *a = t->aio[slot];
    nng_aio_wait(a);
    t->busy[slot] = 0;
    int rv = nng_aio_result(a);
    if (rv == 0)
        return MT_OK;
    nng_msg *m = nng_aio_get_msg(a);
    if (m != NULL)
        nng_msg_free(m);
    nng_aio_set_msg(a, NULL);
    return mt_err_set(err, nng_code(rv), "%s", nng_strerror(rv));
}

const char *mt_coll_world_link(const mt_coll_world *w, const char *addr)
{
    const char *a = addr != NULL && strncmp(addr, "nng+", 4) == 0 ? addr + 4 : addr;
    const char *kind = "none";
    for (int i = 0; w != NULL && addr != NULL && i < w->nprocs; i++) {
        coll_peer *pe = &w->peers[i];
        if (strcmp(w->proc_addr[i], addr) != 0)
            continue;
        if (i == w->my_proc)
            return inproc_transport.link(w, pe, a);
        pthread_mutex_lock(&pe->mu);
        if (pe->open)
            kind = w->net->tp->link(w, pe, a);
        pthread_mutex_unlock(&pe->mu);
    }
    return kind;
}

int coll__net_is_raw(const mt_coll_world *w)
{
    return w->net != NULL && w->net->tp->direct;
}

/* Host windows live beside the direct transport's rings (coll_shm.c): same host, same user, the
 * same shared-memory switch (a process with MT_COLL_SHM_OFF offers none). */
const coll_win_ops *coll__net_win(const mt_coll_world *w, int64_t *spin_ns)
{
    if (!coll__net_is_raw(w) || w->net->opts.shm == MT_COLL_SHM_OFF)
        return NULL;
    *spin_ns = w->net->opts.shm_spin_us * 1000;
    return &coll__shm_win_ops;
}

/*
 * Direct transport: write one frame to process proc, dialing first if needed
 * (pe->mu serialises the local devices' frames on the connection). A failed
 * write leaves a partial frame: the connection is closed (the next send dials
 * again; the peer saw it end).
 */
typedef struct raw_stop {
    mt_coll_world *w;
    coll_peer *pe;
} raw_stop;

/* Dial retries stop once the world is cancelled or the peer is known lost (its connection to
 * us ended). */
static int peer_gone(void *arg)
{
    const raw_stop *st = arg;
    return atomic_load(&st->w->cancelled) != 0 || atomic_load(&st->pe->down_ns) != 0;
}

/* Dial process proc unless its socket is open (pe->mu held). */
static mt_code peer_dial_locked(mt_coll_world *w, int proc, int64_t deadline_ns, mt_err *err)
{
    coll_peer *pe = &w->peers[proc];
    raw_stop stop = {w, pe};
    if (pe->open)
        return MT_OK;
    int fd;
    coll_shm *shm;
    const mt_coll_net_opts *o = &w->net->opts;
    coll_raw_dial_req q = {.url = w->proc_addr[proc],
                           .my_addr = w->net->addr,
                           .job = w->opts.job_id,
                           .token = w->net->token,
                           .deadline_ns = deadline_ns,
                           .give_up = peer_gone,
                           .arg = &stop,
                           .shm = o->shm,
                           .shm_ring = o->shm_ring_bytes,
                           .shm_spin_ns = o->shm_spin_us * 1000};
    mt_code rc = coll__raw_dial(&q, &fd, &shm, err);
    if (rc == MT_OK) {
        pe->fd = fd;
        pe->shm = shm;
        if (shm != NULL)
            mt_log_debug("coll: frames to %s go through shared memory", w->proc_addr[proc]);
        pthread_mutex_lock(&w->net->mu);
        pe->open = 1;
        pthread_mutex_unlock(&w->net->mu);
        atomic_store(&pe->connected, 1);
    } else if (rc == MT_UNAUTHENTICATED) {
        atomic_store(&pe->refused, 1);
    }
    return rc;
}

/* Close the dialed socket and its ring (the listener's reader sees the end). */
static void peer_release(coll_peer *pe)
{
    coll__shm_close(pe->shm, 1);
    coll__shm_free(pe->shm);
    pe->shm = NULL;
    close(pe->fd);
}

/* Close process proc's socket after a partial frame (pe->mu held). */
static void peer_close_locked(mt_coll_world *w, coll_peer *pe)
{
    if (!pe->open)
        return;
    peer_release(pe);
    pthread_mutex_lock(&w->net->mu);
    pe->open = 0;
    pthread_mutex_unlock(&w->net->mu);
}

static coll_io direct_write_some(mt_coll_world *w, int proc, coll_out *f);
static coll_io wait_room(mt_coll_world *w, int proc, int ms);

/*
 * Write frame f to process proc's socket or ring (pe->mu held) before the deadline
 * (DEADLINE_EXCEEDED), UNAVAILABLE when the connection failed, CANCELLED once the world is.
 */
static mt_code peer_write_locked(mt_coll_world *w, int proc, coll_out *f, int64_t deadline_ns,
                                 mt_err *err)
{
    for (;;) {
        coll_io r = direct_write_some(w, proc, f);
        if (r == COLL_IO_DONE)
            return MT_OK;
        if (r == COLL_IO_ENDED)
            return mt_err_set(err, MT_UNAVAILABLE, "%s", strerror(errno));
        int64_t left = (deadline_ns - coll__now_ns()) / 1000000LL;
        if (left <= 0)
            return mt_err_set(err, MT_DEADLINE_EXCEEDED, "not reading (send timed out)");
        if (atomic_load(&w->cancelled))
            return mt_err_set(err, MT_CANCELLED, "send cancelled");
        /* short slices: cancellation is polled */
        if (wait_room(w, proc, left > 50 ? 50 : (int)left + 1) == COLL_IO_ENDED)
            return mt_err_set(err, MT_UNAVAILABLE, "connection closed");
    }
}

/* Frame f (a COLL_HDR_SIZE header) to process proc, dialing first, before the deadline. */
static mt_code raw_send(mt_coll_world *w, int proc, coll_out *f, int64_t deadline_ns, mt_err *err)
{
    coll_peer *pe = &w->peers[proc];
    mt_err e = MT_ERR_INIT;
    pthread_mutex_lock(&pe->mu);
    mt_code rc = peer_dial_locked(w, proc, deadline_ns, &e);
    if (rc == MT_OK) {
        rc = peer_write_locked(w, proc, f, deadline_ns, &e);
        if (rc != MT_OK)
            peer_close_locked(w, pe);
    }
    pthread_mutex_unlock(&pe->mu);
    if (rc != MT_OK)
        mt_err_set(err, rc, "%s", e.msg);
    return rc;
}

static mt_code direct_dial(mt_coll_world *w, int proc, int64_t deadline_ns, mt_err *err)
{
    coll_peer *pe = &w->peers[proc];
    pthread_mutex_lock(&pe->mu);
    mt_code rc = peer_dial_locked(w, proc, deadline_ns, err);
    pthread_mutex_unlock(&pe->mu);
    return rc;
}

static coll_io direct_write_some(mt_coll_world *w, int proc, coll_out *f)
{
    coll_peer *pe = &w->peers[proc];
    if (pe->shm == NULL)
        return coll__raw_write_some(pe->fd, f);
    coll_io r = coll__shm_put_some(pe->shm, f);
    if (r == COLL_IO_AGAIN &&
        atomic_load(&pe->down_ns) != 0) { /* its reader died: the ring never drains */
        errno = EPIPE;
        return COLL_IO_ENDED;
    }
    if (r == COLL_IO_ENDED)
        errno = EPIPE;
    return r;
}

/* Wait up to ms for room toward process proc (ring or socket): DONE room (or the wait ended),
 * ENDED its ring's reader is gone. */
static coll_io wait_room(mt_coll_world *w, int proc, int ms)
{
    coll_peer *pe = &w->peers[proc];
    if (pe->shm != NULL)
        return coll__shm_wait_room(pe->shm, pe->fd, 1, ms) == COLL_IO_ENDED ? COLL_IO_ENDED
                                                                            : COLL_IO_DONE;
    struct pollfd p = {.fd = pe->fd, .events = POLLOUT};
    poll(&p, 1, ms);
    return COLL_IO_DONE;
}

int coll__net_link_stalled(mt_coll_world *w, int proc, int64_t *ms)
{
    coll_peer *pe = &w->peers[proc];
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int stalled = 0;
    if (w->net == NULL || w->net->raw == NULL || pthread_mutex_trylock(&pe->mu) != 0)
        return 0; /* another device writes to it: it reports that write */
    if (pe->open && pe->shm == NULL && getsockopt(pe->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_unacked > 0 && ti.tcpi_last_ack_recv >= COLL_LINK_STALL_MS) {
        *ms = ti.tcpi_last_ack_recv;
        stalled = 1;
    }
    pthread_mutex_unlock(&pe->mu);
    return stalled;
}

static void direct_drop(mt_coll_world *w, int proc)
{
    coll_peer *pe = &w->peers[proc];
    pthread_mutex_lock(&pe->mu);
    peer_close_locked(w, pe);
    pthread_mutex_unlock(&pe->mu);
}

static coll_link *direct_drive_open(mt_coll_world *w, int proc)
{
    coll_link *k = coll__raw_drive_find(w->net->raw, w->proc_addr[proc]);
    if (k != NULL) { /* its end marks proc lost even if the reader never saw one of its frames */
        pthread_mutex_lock(&w->net->mu);
        if (w->net->world == w)
            note_pipe(w->net, coll__raw_drive_id(k), proc);
        pthread_mutex_unlock(&w->net->mu);
    }
    return k;
}

/*
 * Nothing moved: wait up to wt->ms for room toward wt->send_proc (socket or ring) or data on
 * the driven connection k (its eventfd while the reader thread still holds it). A ring cannot
 * be polled with a socket: when both are in play the wait is cut to 1 ms.
 */
static coll_io direct_drive_wait(mt_coll_world *w, coll_link *k, const coll_drive_wait *wt)
{
    struct pollfd pf[2];
    int np = 0, ms = wt->ms, sproc = wt->send_proc;
    int sfd = sproc >= 0 && w->peers[sproc].shm == NULL ? w->peers[sproc].fd : -1;
    int own = wt->recv && coll__raw_drive_take(k) == COLL_IO_DONE; /* owned, or asked for */
    if (own && coll__raw_drive_is_shm(k))
        return coll__raw_drive_wait(k, sproc >= 0 ? 1 : ms) == COLL_IO_ENDED ? COLL_IO_ENDED
                                                                             : COLL_IO_AGAIN;
    if (sfd >= 0)
        pf[np++] = (struct pollfd){.fd = sfd, .events = POLLOUT};
    if (wt->recv)
        pf[np++] = (struct pollfd){.fd = own ? coll__raw_drive_fd(k) : coll__raw_drive_evfd(k),
                                   .events = POLLIN};
    if (sproc >= 0 && sfd < 0 && np > 0)
        ms = 1; /* the ring toward sproc is not in the poll set */
    if (np > 0)
        poll(pf, (nfds_t)np, ms);
    else if (sproc >= 0)
        wait_room(w, sproc, ms);
    return COLL_IO_AGAIN;
}

static void direct_drive_close(mt_coll_world *w, coll_link *k)
{
    coll__raw_drive_end(k);
    coll__raw_drive_put(w->net->raw, k);
}

mt_code coll__net_dial(mt_coll_world *w, int proc, int64_t deadline_ns, mt_err *err)
{
    return w->net->tp->dial != NULL ? w->net->tp->dial(w, proc, deadline_ns, err) : MT_OK;
}

coll_io coll__net_write_some(mt_coll_world *w, int proc, coll_out *f)
{
    return w->net->tp->write_some(w, proc, f);
}

void coll__net_drop(mt_coll_world *w, int proc)
{
    w->net->tp->drop(w, proc);
}

coll_link *coll__net_drive_open(mt_coll_world *w, int proc)
{
    if (w->net == NULL || w->net->tp->drive_open == NULL || proc < 0 || proc >= w->nprocs)
        return NULL;
    return w->net->tp->drive_open(w, proc);
}

coll_io coll__net_drive_take(mt_coll_world *w, coll_link *k)
{
    return w->net->tp->drive_take(k);
}

coll_drive_io coll__net_drive(mt_coll_world *w, coll_link *k)
{
    return w->net->tp->drive(k);
}

coll_io coll__net_drive_wait(mt_coll_world *w, coll_link *k, const coll_drive_wait *wt)
{
    return w->net->tp->drive_wait(w, k, wt);
}

void coll__net_drive_close(mt_coll_world *w, coll_link *k)
{
    w->net->tp->drive_close(w, k);
}

/* The transport that carries frames to process proc of w. */
static const net_transport *transport_to(const mt_coll_world *w, int proc)
{
    return proc == w->my_proc || w->net == NULL ? &inproc_transport : w->net->tp;
}

mt_code coll__net_send(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err)
{
    return transport_to(c->w, proc)->send(c, proc, f, deadline_ns, err);
}

void coll__net_send_ctl(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms,
                        coll_ctl_set *set)
{
    nng_aio *a = NULL;
    if (set->n == (int)(sizeof(set->pending) / sizeof(set->pending[0])))
        return;
    if (transport_to(w, proc)->send_ctl(w, proc, f, timeout_ms, &a) == MT_OK && a != NULL)
        set->pending[set->n++] = a; /* the direct transport sent it synchronously (a == NULL) */
}

void coll__net_ctl_reap(coll_ctl_set *set)
{
    for (int i = 0; i < set->n; i++) {
        nng_aio *a = set->pending[i];
        nng_aio_cancel(a);
        nng_aio_wait(a);
        if (nng_aio_result(a) != 0)
            nng_msg_free(nng_aio_get_msg(a));
        nng_aio_free(a);
    }
    set->n = 0;
}

static void aio_done_cb(void *arg)
{
    atomic_store((_Atomic int *)arg, 1);
}

mt_code coll__net_comm_init(mt_coll_comm *c, mt_err *err)
{
    const net_transport *tp = c->w->net != NULL ? c->w->net->tp : NULL;
    return tp != NULL && tp->comm_init != NULL ? tp->comm_init(c, err) : MT_OK;
}

/* The nng transport's send slots of c (freed by coll__net_comm_fini, also after a failure). */
static mt_code nngt_comm_init(mt_coll_comm *c, mt_err *err)
{
    coll_comm_tx *t = c->tx = mt_calloc(1, sizeof(*c->tx));
    if (t == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll comm %d: out of memory", c->rank);
    for (int i = 0; i < NET_NAIO; i++) {
        atomic_init(&t->done[i], 1);
        if (nng_aio_alloc(&t->aio[i], aio_done_cb, &t->done[i]) != 0)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll comm %d: cannot allocate aio",
                              c->rank);
    }
    return MT_OK;
}

void coll__net_cancel_sends(mt_coll_comm *c)
{
    for (int k = 0; c->tx != NULL && k < NET_NAIO; k++)
        if (c->tx->aio[k] != NULL)
            nng_aio_cancel(c->tx->aio[k]);
}

void coll__net_comm_fini(mt_coll_comm *c)
{
    coll_comm_tx *t = c->tx;
    if (t == NULL)
        return;
    for (int i = 0; i < NET_NAIO; i++) {
        if (t->aio[i] != NULL) {
            nng_aio_cancel(t->aio[i]);
            nng_aio_wait(t->aio[i]);
            nng_msg *m = nng_aio_get_msg(t->aio[i]);
            if (m != NULL && nng_aio_result(t->aio[i]) != 0)
                nng_msg_free(m);
            nng_aio_free(t->aio[i]);
        }
    }
    mt_free(t);
    c->tx = NULL;
}

static mt_code direct_send(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err)
{
    return raw_send(c->w, proc, f, deadline_ns, err);
}

/* An nng message holding frame f (a copy: nng owns what it sends), or NULL. */
static nng_msg *frame_msg(const coll_out *f)
{
    nng_msg *m;
    /* reserve + append: nng_msg_alloc(size) would zero the body before we copy over it */
    if (nng_msg_alloc(&m, 0) != 0)
        return NULL;
    if (nng_msg_reserve(m, f->hlen + f->dlen) != 0 || nng_msg_append(m, f->hdr, f->hlen) != 0 ||
        (f->dlen > 0 && nng_msg_append(m, f->data, f->dlen) != 0)) {
        nng_msg_free(m);
        return NULL;
    }
    return m;
}

static mt_code nngt_send(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err)
{
    mt_coll_world *w = c->w;
    coll_comm_tx *t = c->tx;
    mt_code rc;
    if ((rc = peer_open(w, proc, err)) != MT_OK)
        return rc;
    int slot = t->next;
    t->next = (slot + 1) % NET_NAIO;
    if (t->busy[slot]) {
        mt_err e = MT_ERR_INIT;
        int dst_proc = t->busy[slot] - 1;
        if ((rc = aio_finish(t, slot, &e)) != MT_OK)
            return mt_err_set(err, rc == MT_DEADLINE_EXCEEDED ? rc : MT_UNAVAILABLE, "%s %s: %s",
                              w->proc_addr[dst_proc],
                              atomic_load(&w->peers[dst_proc].connected) ? "not reading"
                                                                         : "not reachable",
                              e.msg);
    }
    nng_msg *m = frame_msg(f);
    if (m == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "out of memory for a %zu-byte message",
                          f->hlen + f->dlen);
    int64_t ms = (deadline_ns - coll__now_ns()) / 1000000LL;
    nng_aio *a = t->aio[slot];
    nng_aio_set_msg(a, m);
    nng_aio_set_timeout(a, ms < 1 ? 1 : (nng_duration)ms);
    atomic_store(&t->done[slot], 0);
    nng_send_aio(w->peers[proc].tx->sock, a);
    t->busy[slot] = proc + 1;
    return MT_OK;
}

static mt_code direct_send_ctl(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms,
                               nng_aio **out)
{
    /* synchronous, so bounded tightly: a PING/PONG that cannot leave at once goes to a peer
     * that does not read (stopped), which the diagnosis reports as "no answer" */
    int64_t ms = timeout_ms < COLL_CTL_RAW_MS ? timeout_ms : COLL_CTL_RAW_MS;
    *out = NULL;
    return raw_send(w, proc, f, coll__now_ns() + ms * 1000000LL, NULL);
}

static mt_code nngt_send_ctl(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms,
                             nng_aio **out)
{
    nng_aio *a;
    nng_msg *m;
    if (peer_open(w, proc, NULL) != MT_OK || (m = frame_msg(f)) == NULL)
        return MT_UNAVAILABLE;
    if (nng_aio_alloc(&a, NULL, NULL) != 0) {
        nng_msg_free(m);
        return MT_UNAVAILABLE;
    }
    nng_aio_set_msg(a, m);
    nng_aio_set_timeout(a, (nng_duration)timeout_ms);
    nng_send_aio(w->peers[proc].tx->sock, a);
    *out = a;
    return MT_OK;
}

/* The in-process hop: a copy of f in a frame of its own, delivered to the receiver's inbox. */
static mt_code inproc_send(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err)
{
    coll_hdr h;
    (void)proc;
    (void)deadline_ns;
    coll__hdr_parse(f->hdr, &h);
    coll_frame *fr = coll__frame_new(&h, f->dlen);
    if (fr == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "out of memory for a %zu-byte frame",
                          f->dlen);
    if (f->dlen > 0)
        memcpy(coll__frame_payload(fr), f->data, f->dlen);
    c->w->engine->deliver(c->w, fr);
    return MT_OK;
}

/* Members of one process see each other's state: no PING or PONG goes between them. */
static mt_code inproc_send_ctl(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms,
                               nng_aio **out)
{
    (void)w;
    (void)proc;
    (void)f;
    (void)timeout_ms;
    *out = NULL;
    return MT_OK;
}

mt_code coll__sends_wait(mt_coll_comm *c, int cancel, mt_err *err)
{
    coll_comm_tx *t = c->tx;
    mt_code first = MT_OK;
    if (t == NULL)
        return MT_OK; /* the transport's sends complete before they return */
    /* after a failure, give sends already under way a moment to leave (a peer may
     * need them to see the problem itself), then cancel what is still stuck */
    int64_t until = coll__now_ns() + COLL_FLUSH_NS;
    for (int i = 0; cancel && i < NET_NAIO; i++) {
        while (t->busy[i] && !atomic_load(&t->done[i]) && coll__now_ns() < until)
            usleep(1000);
    }
    for (int i = 0; i < NET_NAIO; i++) {
        if (!t->busy[i])
            continue;
        int dst_proc = t->busy[i] - 1;
        mt_err e = MT_ERR_INIT;
        if (cancel)
            nng_aio_cancel(t->aio[i]);
        mt_code rc = aio_finish(t, i, &e);
        if (rc != MT_OK && first == MT_OK) {
            first = rc == MT_DEADLINE_EXCEEDED ? rc : MT_UNAVAILABLE;
            mt_err_set(err, first, "send to %s: %s", c->w->proc_addr[dst_proc], e.msg);
        }
    }
    return first;
}

/*
 * Direct transport: tell the peer process this connection ends in order (a header-only BYE
 * frame, after every frame of the world), unless it is known lost (a peer that closed first
 * with a BYE is not lost: it may still be reading). The last frames of the job
 * may still fill the socket buffer or the ring (the peer's reader drains them): the BYE waits
 * for room until w->bye_until_ns (one budget for the whole close), then is left out (the peer
 * then logs a lost connection). A peer that died ends the wait at once.
 */
static void raw_bye(mt_coll_world *w, coll_peer *pe)
{
    unsigned char b[COLL_HDR_SIZE];
    coll_hdr h = {
        .magic = COLL_MAGIC, .kind = COLL_KIND_BYE, .job = w->opts.job_id, .src = -1, .dst = -1};

    /* a peer that closed first in order (its BYE came) may still be reading: it gets one too */
    if (atomic_load(&pe->down_ns) != 0 && !atomic_load(&pe->bye))
        return;
    coll__hdr_encode(&h, b);
    if (pe->shm == NULL) { /* a broken connection, or no room in time: the BYE is left out */
        (void)coll__fd_io_full(pe->fd, b, sizeof(b), 1, w->bye_until_ns);
        return;
    }
    while (!coll__shm_write_now(pe->shm, b, sizeof(b))) {
        int64_t left_ms = (w->bye_until_ns - coll__now_ns()) / 1000000LL;
        if (left_ms <= 0 ||
            coll__shm_wait_room(pe->shm, pe->fd, sizeof(b), (int)left_ms) != COLL_IO_DONE)
            return;
    }
}

void coll__peers_close(mt_coll_world *w)
{
    w->bye_until_ns = coll__now_ns() + COLL_BYE_WAIT_MS * 1000000LL;
    atomic_store(&w->closing, 1);
    for (int i = 0; i < w->nprocs; i++) {
        coll_peer *pe = &w->peers[i];
        if (pe->open) {
            w->net->tp->peer_close(w, i, pe);
            pthread_mutex_lock(&w->net->mu);
            pe->open = 0; /* no pipe callback looks at pe->tx any more */
            pthread_mutex_unlock(&w->net->mu);
        }
        mt_free(pe->tx);
        pe->tx = NULL;
    }
}

/* Every frame was written synchronously: BYE, close. */
static void direct_peer_close(mt_coll_world *w, int i, coll_peer *pe)
{
    (void)i;
    raw_bye(w, pe);
    peer_release(pe);
}

static void nngt_peer_close(mt_coll_world *w, int i, coll_peer *pe)
{
    if (atomic_load(&pe->connected) && (atomic_load(&pe->down_ns) == 0 || atomic_load(&pe->bye))) {
        nng_msg *m;
        if (nng_msg_alloc(&m, COLL_HDR_SIZE) == 0) {
            coll_hdr h = {.magic = COLL_MAGIC,
                          .kind = COLL_KIND_BYE,
                          .job = w->opts.job_id,
                          .src = -1,
                          .dst = -1};
            coll__hdr_encode(&h, nng_msg_body(m));
            nng_socket_set_ms(pe->tx->sock, NNG_OPT_SENDTIMEO, 50);
            if (nng_sendmsg(pe->tx->sock, m, 0) != 0)
                nng_msg_free(m);
        }
    }
    /* TLS: let the TLS layer finish writing (the BYE only proves the data reached it).
     * Closing at once stalled nng 1.5.2's close in ~40% of runs (tests/unit/test_tls.c,
     * test_tls_data_plane); after 20 or 100 ms: none in 28. */
    if (w->net->tls != NULL)
        nng_msleep(50);
    close_bounded(w->net, pe->tx->sock, 2000, w->proc_addr[i]);
}

static const char *direct_link(const mt_coll_world *w, const coll_peer *pe, const char *addr)
{
    (void)w;
    return pe->shm != NULL ? "shm" : strncmp(addr, "tcp://", 6) == 0 ? "tcp" : "ipc";
}

static const char *nngt_link(const mt_coll_world *w, const coll_peer *pe, const char *addr)
{
    (void)pe;
    (void)addr;
    return w->net->tls != NULL ? "tls" : "nng";
}

static int direct_stop(mt_coll_net *net)
{
    coll__raw_free(net->raw); /* joins its threads: no callback runs after this */
    return 1;
}

static int nngt_stop(mt_coll_net *net)
{
    if (!close_bounded(net, net->pull, 2000, net->addr) || atomic_load(&net->closing) != 0)
        return 0;
    nng_aio_stop(net->raio);
    nng_aio_free(net->raio);
    return 1;
}

static const net_transport direct_transport = {
    .name = "direct",
    .direct = 1,
    .listen = direct_listen,
    .send = direct_send,
    .send_ctl = direct_send_ctl,
    .peer_close = direct_peer_close,
    .link = direct_link,
    .stop = direct_stop,
    .dial = direct_dial,
    .write_some = direct_write_some,
    .drop = direct_drop,
    .drive_open = direct_drive_open,
    .drive_take = coll__raw_drive_take,
    .drive = coll__raw_drive,
    .drive_wait = direct_drive_wait,
    .drive_close = direct_drive_close,
};

static const net_transport nng_transport = {
    .name = "nng",
    .direct = 0,
    .listen = nngt_listen,
    .send = nngt_send,
    .send_ctl = nngt_send_ctl,
    .comm_init = nngt_comm_init,
    .peer_close = nngt_peer_close,
    .link = nngt_link,
    .stop = nngt_stop,
};

static const char *inproc_link(const mt_coll_world *w, const coll_peer *pe, const char *addr)
{
    (void)w;
    (void)pe;
    (void)addr;
    return "local";
}

static const net_transport inproc_transport = {
    .name = "in-process",
    .direct = 0,
    .send = inproc_send,
    .send_ctl = inproc_send_ctl,
    .link = inproc_link,
};
