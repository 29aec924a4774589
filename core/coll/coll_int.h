/* SPDX-License-Identifier: MIT */
/*
 * coll_int.h — private structures shared by the files of core/coll below the algorithms:
 * coll_world.c (the engine: worlds, comms, inboxes, posted receives, driving),
 * coll_net.c (the endpoint; the nng transport; routing of the direct transport's frames),
 * coll_raw.c (the direct socket transport), coll_shm.c (its shared-memory rings),
 * coll_auth.c (the handshake's HMAC), coll_progress.c, coll_backend.c and coll_bucket.c. The
 * algorithms (coll_algo.c) never include it: they see coll_engine.h and the wire format
 * (coll_wire.h) only. It names no transport library's types: what a transport keeps per comm
 * or per peer (the nng transport's send slots and push socket) is an opaque tx pointer that only
 * coll_net.c defines, so the engine includes no nng header (tests/tools/coll_graph.py checks it).
 *
 * Message path: every frame is a 72-byte header + payload (coll_wire.h). A send picks the
 * transport by the destination's process (coll__net_send; coll_net.c's tables): the in-process
 * transport for a rank of this process copies the frame into a coll_frame; the direct
 * connection dialed to another process's listener (coll_raw.c) — a socket, or a shared-memory
 * ring when both processes share the host (coll_shm.c) — is written from the caller's buffer and
 * read by the connection's reader thread into a coll_frame; with nng+ addresses a push socket
 * carries it and the pull side's receive callback wraps the nng message in a coll_frame. Every
 * transport hands its frames to the engine's one entry point (w->engine->deliver), whose
 * inboxes are one FIFO of frames per source rank, so per-source order is preserved and the
 * algorithms never see the transport. Direct transport only: an exchange's receive may be
 * posted (coll_post); the reader thread then reads matching frames' payloads straight into the
 * caller's buffer (w->engine->claim) instead of making a frame, and only while the device
 * thread waits for that step. With one device in this process the device thread instead runs
 * the transport's synchronous mode on the partner's connection during the exchanges it runs
 * ("Driving" below): the transport reads the frames and asks the same claim where they go.
 *
 * Locking: net->mu (current world, pending messages, pipe map) is taken before
 * a comm's mu, never after. A comm's mu guards its queues and abort state.
 * Tests: tests/unit/test_coll.c, tests/integration/test_coll_procs.sh.
 */
#ifndef MT_COLL_INT_H
#define MT_COLL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "coll/coll_wire.h"
#include "coll/mt_coll.h"
#include "coll/mt_coll_backend.h"

#define COLL_GRACE_NS      200000000LL /* a lost connection counts after 200 ms without its data */
#define COLL_DIAG_NS       250000000LL /* after a deadline, wait this long for PONGs */
#define COLL_MAXPING       16
#define COLL_MAX_AXES      8           /* mesh axes named in messages (mt_coll_world_opts.mesh) */
#define COLL_FLUSH_NS      100000000LL /* a failing member lets its sends finish for up to 100 ms */
#define COLL_ABORT_NS      100000000LL /* an ABORT to a peer may take at most 100 ms */
#define COLL_CTL_RAW_MS    20          /* direct transport: a PING/PONG may take at most 20 ms */
#define COLL_LINK_STALL_MS 200         /* in-flight data unacknowledged this long: a broken link */

/* a failed send waits this long for an ABORT that explains it (a member that found a mismatch
 * and closed its sockets): 200 ms was too short on a loaded 2-core CI machine */
#define COLL_ABORT_EXPLAIN_NS 1000000000LL

/* Outcome of a step that may have to be tried again (non-blocking I/O, taking a socket). */
typedef enum coll_io {
    COLL_IO_ENDED = -1, /* the connection ended or failed (writes: errno says why) */
    COLL_IO_AGAIN = 0,  /* not now: wait (or look again later) */
    COLL_IO_DONE = 1,   /* complete: written, owned, ready */
} coll_io;

/* A frame written without waiting: header and payload (borrowed) and how much of the two is
 * written so far (sent: 0 at the start, hlen + dlen when complete). */
typedef struct coll_out {
    const void *hdr;
    size_t hlen;
    const void *data;
    size_t dlen;
    size_t sent;
} coll_out;

/*
 * Posted receive (direct transport): a device thread about to receive one ring step from a
 * rank in another process posts the step's destination; the connection's reader thread then
 * reads each matching frame's payload straight into the caller's buffer (copy) or adds it
 * there (acc = partial + own) instead of queueing a message. See coll_world.c recv_posted.
 */
typedef enum coll_post_state {
    COLL_POST_NONE = 0,    /* nothing posted, or the device thread handles a queued frame */
    COLL_POST_POSTED = 1,  /* the head step waits for its next frame */
    COLL_POST_CLAIMED = 2, /* a reader thread reads a frame's payload into it */
} coll_post_state;
/* A piece buffer of added payload, between the reader that fills it and the device thread. */
typedef enum coll_piece {
    COLL_PIECE_FREE = 0,    /* unused */
    COLL_PIECE_FILLING = 1, /* the reader reads payload into it */
    COLL_PIECE_FULL = 2,    /* waits for the device thread */
    COLL_PIECE_ADDING = 3,  /* the device thread adds it into its destination */
} coll_piece;
#define COLL_POST_DEPTH  2            /* ring steps posted at once: the current one and the next */
#define COLL_POST_PIECES 4            /* pieces of added payload in flight to the device thread */
#define COLL_PIECE_BYTES (128u << 10) /* bytes per piece (a multiple of sizeof(float)) */
typedef struct coll_post_step {
    coll_hdr want; /* expected header; chunk/offset/len follow next_k */
    float *rbuf;   /* destination buffer, segment k at rbuf + roff + k * seg */
    size_t roff, rlen, seg;
    size_t next_k, nk; /* segments done / expected */
    int add;           /* 1: acc = partial + own; 0: copy */
} coll_post_step;
typedef struct coll_post { /* all fields: comm mu, except cancel */
    coll_post_state state; /* of the head step */
    coll_post_step st[COLL_POST_DEPTH];
    int head, count;      /* posted steps, oldest first */
    uint64_t armed, done; /* steps posted / completed so far (ids) */
    int reader_waiting;   /* a reader waits for a step to be posted (coll__net_wake_claim) */
    /* pieces of added payloads the reader read and the device thread adds (in parallel) */
    unsigned char *piece[COLL_POST_PIECES]; /* [COLL_PIECE_BYTES] each, NULL: not allocated */
    float *piece_dest[COLL_POST_PIECES];
    size_t piece_n[COLL_POST_PIECES]; /* floats */
    coll_piece piece_state[COLL_POST_PIECES];
    int nfull;
    _Atomic int cancel; /* the device thread gave up: the reader stops writing and lets go */
    int drive_proc;     /* the device thread drives this process's connection (-1: none) */
} coll_post;

/*
 * Where a claimed frame's payload goes (filled by w->engine->claim): the posted receive as the
 * transport sees it. The transport reads the payload into dest (copy) or, when add, into piece
 * buffers it gets from ops and hands back full (or adds a piece itself with coll__add_into when
 * none is free); it stops touching the buffers once ops->cancelled says so, and calls
 * ops->finish exactly once. These operations are the engine's (coll_world.c): a transport
 * reaches them only through the sink, never by name.
 */
typedef struct coll_sink coll_sink;
typedef struct coll_sink_ops {
    /* a free piece buffer (marked "filling") in *buf and its index, or -1: none */
    int (*piece_get)(const coll_sink *s, unsigned char **buf);
    /* piece j holds bytes for dest: the device thread adds it */
    void (*piece_full)(const coll_sink *s, int j, unsigned char *dest, size_t bytes);
    /* the device thread gave up: stop writing into its buffers, then finish(s, 0) */
    int (*cancelled)(const coll_sink *s);
    /* the payload was read (ok 1) or not (0: the connection ended, cancelled) */
    void (*finish)(const coll_sink *s, int ok);
} coll_sink_ops;
struct coll_sink {
    const coll_sink_ops *ops;
    mt_coll_comm *c; /* the engine's; opaque to the transport */
    unsigned char *dest;
    size_t bytes;
    int add;
};

/* What the reader of a connection does with a DATA frame whose header it read. */
typedef enum coll_claim {
    COLL_CLAIM_QUEUE = 0,  /* queue it as a message for the device thread */
    COLL_CLAIM_POSTED = 1, /* a posted receive takes the payload (*s says where) */
    COLL_CLAIM_WAIT = 2,   /* its step is not posted yet but will be: wait a little for it (one
                              device here and in the sender: nothing else queues behind it) */
    COLL_CLAIM_DRIVER = 3, /* the device thread drives the sender's connection: hand it over */
} coll_claim;
/* Who asks the engine's claim about a DATA header, and what it may be answered. */
typedef enum coll_claim_mode {
    COLL_CLAIM_BY_READER = 0,          /* a reader thread: QUEUE, POSTED or WAIT */
    COLL_CLAIM_BY_READER_HANDOVER = 1, /* a reader thread that may also hand its stream over
                                          to the driving device thread (DRIVER) */
    COLL_CLAIM_BY_DRIVER = 2,          /* the device thread driving the connection: POSTED (the
                                          next frame of its posted step) or QUEUE (any other) */
} coll_claim_mode;
/*
 * The engine's one entry point for frames from other processes: the endpoint (coll_net.c) hands
 * every frame that arrives on a connection or nng pipe to its world through w->engine, never by
 * name (coll_world.c sets it), so no transport file calls into a file above it.
 */
typedef struct coll_engine_ops {
    /* put f into the destination comm's inbox (takes f) or record an ABORT. Any thread. */
    void (*deliver)(mt_coll_world *w, coll_frame *f);
    /* a reader thread or a driver (mode), net mu held: what to do with DATA header h;
     * COLL_CLAIM_POSTED fills *s */
    coll_claim (*claim)(mt_coll_world *w, const coll_hdr *h, coll_claim_mode mode, coll_sink *s);
} coll_engine_ops;
/* Wake readers waiting after COLL_CLAIM_WAIT (takes net mu). */
void coll__net_wake_claim(mt_coll_net *net);

typedef struct coll_queue {
    coll_frame **items;
    size_t head, count, cap;
} coll_queue;

/*
 * A transport's connection from another process that a device thread may drive (the
 * transport's synchronous mode, "Driving" below): opaque to the engine, which reaches it only
 * through the endpoint's coll__net_drive_* operations (the transport's table).
 */
typedef struct coll_link coll_link;
/* A waiter's polls before it gives its core up, backed off while they fail: after k polls in a
 * row that saw no progress the next 2^k - 1 waits (at most 63) skip them (coll_world.c:
 * backoff_skip, backoff_miss; miss = 0 after one that saw progress). */
typedef struct coll_backoff {
    int miss; /* polls in a row that ended without progress (at most 6) */
    int skip; /* waits left that skip polling */
} coll_backoff;

/* The connections a device thread drives (coll_world.c, "driving"); device thread only. */
#define COLL_DRIVE_SLOTS 8 /* connections driven at once (tree partners: log2 of the group) */
typedef struct coll_drive_conn {
    coll_link *k;  /* the connection (a reference), NULL: free slot */
    int proc;      /* the process that dialed it */
    uint64_t used; /* tick of its last exchange (the oldest slot is given back first) */
} coll_drive_conn;
typedef struct coll_drive {
    coll_drive_conn s[COLL_DRIVE_SLOTS];
    int off;           /* driving gave up for this collective: the reader threads serve */
    uint64_t tick;     /* exchanges driven so far */
    coll_backoff spin; /* its polls before the yields (drive_poll in coll_world.c) */
} coll_drive;

/* What a transport keeps per comm and per peer process (coll_net.c defines both; NULL when the
 * transport keeps nothing): no transport library's type appears in this header. */
typedef struct coll_comm_tx coll_comm_tx;
typedef struct coll_peer_tx coll_peer_tx;

struct mt_coll_comm {
    mt_coll_world *w;
    int rank;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t wakes; /* bumped (under mu) with every broadcast of cv: what a polling
                               waiter watches (wait_turn) */
    coll_backoff spin;      /* device thread: its polls before an in-process wait sleeps */
    coll_queue *q;          /* [w->size], one FIFO per source rank; mu */
    int aborted;            /* mu: an ABORT arrived */
    int active;             /* mu: inside a collective */
    mt_code abort_code;
    char abort_msg[MT_ERR_MSG_SIZE];
    uint64_t abort_step;
    uint32_t abort_seq;
    uint64_t abort_job; /* mu: the job id the ABORT carried */
    int has_failed;     /* mu: collectives up to failed_step/seq failed; drop their leftovers */
    uint64_t failed_step;
    uint32_t failed_seq;
    int blame;                       /* mu: the ABORT says this rank sent bad data (-1 none) */
    int ping_from[COLL_MAXPING];     /* mu: PINGs to answer: asking rank ... */
    uint64_t ping_tag[COLL_MAXPING]; /* ... and its packed tag */
    int nping;
    uint8_t *pong;            /* mu: [w->size] enum coll_pong per rank (coll_wire.h) */
    _Atomic uint64_t entered; /* packed tag + 1 of the collective entered last; 0 never */
    uint64_t auto_step;       /* device thread */
    uint32_t auto_seq;
    coll_comm_tx *tx;        /* the transport's send state (the nng transport's send slots) */
    struct coll_pslot *prog; /* progress slot written by the device thread, NULL none */
    coll_post post;          /* direct transport: the ring step being received in place */
    coll_drive drive;        /* direct transport, one local device: the connection it drives */
    struct coll_wins *wins;  /* host windows of its groups (coll_world.c), NULL: none yet */
};

/* Wake c's waiters (c->mu held): the sleepers on c->cv and a device thread polling c->wakes
 * before it sleeps (wait_turn in coll_world.c). Every broadcast of c->cv goes through here. */
static inline void coll__comm_wake(mt_coll_comm *c)
{
    atomic_fetch_add_explicit(&c->wakes, 1, memory_order_release);
    pthread_cond_broadcast(&c->cv);
}

typedef struct coll_peer {
    pthread_mutex_t mu; /* guards open, tx, fd and shm */
    int open;
    coll_peer_tx *tx;        /* the transport's state of it (nng: the push socket), or NULL */
    _Atomic int connected;   /* a pipe was added */
    _Atomic int64_t down_ns; /* monotonic time the connection was lost; 0 = not lost */
    _Atomic int refused;     /* it refused our token, or we refused its (UNAUTHENTICATED) */
    _Atomic int bye;         /* it sent BYE: the end of its connection is an orderly close */
    int fd;                  /* direct transport: dialed socket when open (guarded by mu) */
    struct coll_shm *shm;    /* direct transport: its frames go through this ring (mu), or NULL */
    int nranks;              /* ranks living in that process */
} coll_peer;

struct mt_coll_world {
    const struct mt_coll_backend *backend; /* the collectives' operations (coll_backend.c) */
    const coll_engine_ops *engine;         /* where the endpoint delivers frames (coll_world.c) */
    void *backend_state;                   /* mt_coll_world_new_backend's state, else NULL */
    int size;
    mt_coll_world_opts opts;
    size_t seg; /* segment size in elements */
    mt_coll_net *net;
    int nprocs;
    int my_proc;
    int *proc_of;           /* [size] process index of each rank */
    char **proc_addr;       /* [nprocs] */
    mt_coll_comm **by_rank; /* [size], NULL for remote ranks */
    int nlocal;
    mt_coll_comm *comms;   /* [nlocal] */
    coll_peer *peers;      /* [nprocs] */
    _Atomic int cancelled; /* mt_coll_world_cancel: every collective fails with CANCELLED */
    _Atomic uint64_t remote_floats; /* payload sent to other processes (DATA frames) */
    int drive; /* the one local device's thread drives its exchanges (coll_world.c, tree_run) */
    int drive_yields; /* a driving thread with nothing to do yields this often before it sleeps */
    int64_t
        drive_spin_ns; /* ... after polling this long in a small allreduce (opts.drive_spin_us) */
    int64_t bye_until_ns; /* coll__peers_close: BYE frames wait for room until then */
    _Atomic int closing;  /* coll__peers_close began: a peer's end is no longer news */
    int naxes;            /* opts.mesh, parsed (0: none): axis names and sizes, row-major */
    char axis_name[COLL_MAX_AXES][32];
    int axis_size[COLL_MAX_AXES];
};

/* Where a rank stands in a group: its position, or what is wrong with the group. */
typedef struct coll_group_pos {
    int pos;       /* -1 when the group is not valid for the rank */
    char why[128]; /* then: what is wrong */
} coll_group_pos;
/*
 * NULL when group g is valid for rank (ranks in [0, w->size), none twice, rank a member;
 * out->pos its position), else what is wrong (out->why).
 */
const char *coll__group_problem(const mt_coll_world *w, int rank, const mt_coll_group *g,
                                coll_group_pos *out);
/*
 * The engine's worlds (coll_world.c) on backend b (borrowed): the public constructors of
 * mt_coll.h and mt_coll_backend.h (coll_backend.c) choose the backend, so that the engine never
 * names the built-in one (coll_algo.c, above it). The fields are those constructors' arguments
 * (each constructor reads its own; all borrowed), and so are the codes;
 * coll__world_new_backend refuses b == NULL.
 */
typedef struct coll_world_spec {
    const mt_coll_backend *b;
    int size;
    const mt_coll_world_opts *opts; /* NULL: MT_COLL_WORLD_DEFAULTS */
    mt_coll_net *net;               /* _new_net: the endpoint and the rank table [size] */
    const mt_coll_rank_addr *table;
    void *state;      /* _new_backend: the backend's state (the world owns it on success) */
    const int *local; /* _new_backend: the ranks of this process [nlocal] */
    int nlocal;
} coll_world_spec;
mt_code coll__world_new_local(const coll_world_spec *s, mt_coll_world **out, mt_err *err);
mt_code coll__world_new_net(const coll_world_spec *s, mt_coll_world **out, mt_err *err);
mt_code coll__world_new_backend(const coll_world_spec *s, mt_coll_world **out, mt_err *err);
/* Floats of DATA payload this world's devices sent to other processes so far (tests: which
 * exchanges crossed processes). Any thread. */
uint64_t coll__world_remote_floats(mt_coll_world *w);

/*
 * Transport hooks implemented in coll_net.c. Sends pick the transport by the destination:
 * a process of the world's other processes goes through the endpoint's transport (the
 * listener's URL scheme), this process through the in-process one (its frames are delivered
 * to the receiver's inbox through w->engine like every other transport's).
 */
/* Frame f (a COLL_HDR_SIZE header and its payload, borrowed: written or copied before this
 * returns) from c to process proc before deadline_ns. */
mt_code coll__net_send(mt_coll_comm *c, int proc, coll_out *f, int64_t deadline_ns, mt_err *err);
void coll__net_attach_pending(mt_coll_net *net, mt_coll_world *w);
void coll__net_detach(mt_coll_net *net, mt_coll_world *w);
void coll__peers_close(mt_coll_world *w);
/* Wait for c's outstanding sends (cancelling them first if cancel); first failure in err. */
mt_code coll__sends_wait(mt_coll_comm *c, int cancel, mt_err *err);
/* Control sends still in flight (the nng transport's; opaque to the engine), up to a bound:
 * coll__net_ctl_reap waits for (or cancels) them and frees them. */
typedef struct coll_ctl_set {
    void *pending[2 * COLL_MAXPING];
    int n;
} coll_ctl_set;
/* A control frame f (PING, PONG; borrowed) to process proc within timeout_ms, unless set is
 * full; a send that has not completed on return is added to set. */
void coll__net_send_ctl(mt_coll_world *w, int proc, coll_out *f, int64_t timeout_ms,
                        coll_ctl_set *set);
void coll__net_ctl_reap(coll_ctl_set *set);
/* A comm's transport state for sends (c->tx: the nng transport's send slots; none for the other
 * transports): made with the comm, cancelled by mt_coll_world_cancel (a send stuck on a dead
 * peer ends), freed with it. */
mt_code coll__net_comm_init(mt_coll_comm *c, mt_err *err);
void coll__net_cancel_sends(mt_coll_comm *c);
void coll__net_comm_fini(mt_coll_comm *c);
/* INVALID_ARGUMENT for an address of another transport, FAILED_PRECONDITION for a plain address
 * when net uses TLS; else MT_OK and *is_local (addr is net's own). */
mt_code coll__net_check_addr(const mt_coll_net *net, const char *addr, int *is_local);
/* 1 when the world's data plane is the direct transport (coll_raw.c). */
int coll__net_is_raw(const mt_coll_world *w);
/* The host windows of w's endpoint (the direct transport with shared memory allowed; *spin_ns:
 * its spin before sleeping), or NULL: the endpoint makes none. */
struct coll_win_ops;
const struct coll_win_ops *coll__net_win(const mt_coll_world *w, int64_t *spin_ns);

/* ---- coll_auth.c */
/* out = HMAC-SHA-256(key, msg) (libmbedcrypto); MT_OK, else RESOURCE_EXHAUSTED or INTERNAL. */
mt_code coll__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                          unsigned char out[32]);

/* ---- coll_shm.c: shared-memory rings (see its header comment) */
typedef struct coll_shm coll_shm;
#define COLL_SHM_NAME    64  /* ring names ("/mtcoll-<job>-<pid>-<n>"), with the NUL */
#define COLL_SHM_HOST_ID 128 /* host identity text, with the NUL */
/* "<boot id>/<host name>", or "" when the boot id is unknown (never share then). */
void coll__shm_host_id(char out[COLL_SHM_HOST_ID]);
/* The ring a writer creates: for job, cap bytes (a power of two), spinning spin_ns before it
 * sleeps. */
typedef struct coll_shm_spec {
    uint64_t job;
    size_t cap;
    int64_t spin_ns;
} coll_shm_spec;
/* A new ring as q says, mapped; its name in name. Writer side. */
mt_code coll__shm_create(const coll_shm_spec *q, coll_shm **out, char name[COLL_SHM_NAME],
                         mt_err *err);
/* Map the ring a peer created (validated: name form, owner, header). Reader side. */
mt_code coll__shm_attach(const char *name, int64_t spin_ns, coll_shm **out, mt_err *err);
void coll__shm_unlink(const char *name);
/* Mark this side (writer 1 / reader 0) gone and wake the other; the mapping stays. */
void coll__shm_close(coll_shm *s, int writer);
void coll__shm_free(coll_shm *s); /* unmap; NULL: no-op */
/* Writer, never waits: more of frame f; DONE complete, AGAIN the ring is full, ENDED the
 * reader is gone. */
coll_io coll__shm_put_some(coll_shm *s, coll_out *f);
/* Reader, never waits: up to n bytes into buf; DONE *got (> 0) bytes read, AGAIN none now,
 * ENDED the writer closed and nothing is left (or the ring is corrupt). */
coll_io coll__shm_get_some(coll_shm *s, void *buf, size_t n, size_t *got);
/* Reader, never waits: adds up to n bytes (a multiple of sizeof(float)) of floats into d as
 * coll__add_into does (no copy in between), taking whole floats only; DONE *got (> 0, a
 * multiple of sizeof(float)), AGAIN none (or only part of a float) now, ENDED as get_some (or
 * the writer closed in the middle of a float). */
coll_io coll__shm_add_some(coll_shm *s, float *d, size_t n, size_t *got);
/* Reader: wait up to timeout_ms for data (spinning first): DONE data (or the writer closed:
 * read on), AGAIN none in time, ENDED the writer's socket fd ended and nothing is left. */
coll_io coll__shm_wait_data(coll_shm *s, int fd, int timeout_ms);
/* Writer: wait up to timeout_ms for need bytes of room (at most the ring's size): DONE there
 * are, AGAIN not in time, ENDED the reader is gone. */
coll_io coll__shm_wait_room(coll_shm *s, int fd, size_t need, int timeout_ms);
/* Writer: b[0..n) if it fits now (1), else nothing (0). Never waits. */
int coll__shm_write_now(coll_shm *s, const void *b, size_t n);
/* How a reader waits: at most timeout_ms, until the writer's socket fd ends (its process died)
 * or *closing is set (may be NULL). */
typedef struct coll_shm_wait {
    int fd;
    int timeout_ms;
    _Atomic int *closing;
} coll_shm_wait;
/*
 * Reader: up to n bytes into buf, waiting as wt says for all of them. DONE: *got (> 0) bytes
 * read; AGAIN: none came in time; ENDED: the stream ended (the writer closed, its socket
 * ended, *closing set or the ring is corrupt) and nothing is left.
 */
coll_io coll__shm_read(coll_shm *s, const coll_shm_wait *wt, void *buf, size_t n, size_t *got);
/* Wake a reader sleeping on s (it then sees its closing flag). */
void coll__shm_wake_reader(coll_shm *s);
/* Unlink rings left in /dev/shm by processes that no longer run (a kill -9 mid-dial). */
void coll__shm_sweep(void);

/*
 * Host windows (coll_shm.c, "group windows"): one segment that every member of a group of
 * processes of this host maps, with two buffers of one slot per member, a barrier and a tag
 * record per member. The engine reaches it through the endpoint (coll__net_win), never by name.
 */
typedef struct coll_win coll_win;
typedef struct coll_win_spec {
    uint64_t job;      /* names the segment, as a ring's */
    int p;             /* members */
    size_t slot_bytes; /* per member and buffer: a multiple of 4 KiB (create; attach reads it) */
    int64_t spin_ns;   /* a waiter spins this long before it sleeps */
} coll_win_spec;
typedef struct coll_win_ops {
    /* a new window (its name in name, "" on failure) / map the one named by the creator */
    mt_code (*create)(const coll_win_spec *q, coll_win **out, char name[COLL_SHM_NAME],
                      mt_err *err);
    mt_code (*attach)(const char *name, const coll_win_spec *q, coll_win **out, mt_err *err);
    void (*unlink)(const char *name); /* the creator, once every member mapped it */
    void (*free)(coll_win *g);        /* unmap; NULL: no-op */
    float *(*slot)(const coll_win *g, int buf, int i); /* member i's slot of buffer buf (0, 1) */
    size_t (*slot_floats)(const coll_win *g);
    /* member i arrives at barrier epoch, with its tag stamped (NULL: the stamp stays) */
    void (*arrive)(coll_win *g, int i, uint32_t epoch, const coll_hdr *stamp);
    /* wait until every member arrived at epoch or until_ns: -1, or the first one missing */
    int (*wait)(coll_win *g, uint32_t epoch, int64_t until_ns);
    void (*stamp)(const coll_win *g, int i, coll_hdr *out); /* member i's last stamp */
} coll_win_ops;
extern const coll_win_ops coll__shm_win_ops;

/* ---- coll_raw.c: the direct-socket transport (see its header comment) */
typedef struct coll_raw coll_raw;
typedef struct coll_raw_cbs {
    void *arg;
    void (*deliver)(void *arg, coll_frame *f);         /* a frame arrived (takes f) */
    void (*lost)(void *arg, uint32_t conn);            /* the connection ended */
    void (*refused)(void *arg, const char *peer_addr); /* a dialer failed authentication */
    /* a DATA header arrived: COLL_CLAIM_POSTED and *s when a posted receive takes the payload,
     * COLL_CLAIM_DRIVER when the device thread drives that connection and reads the frame
     * itself (only for COLL_CLAIM_BY_READER_HANDOVER), else COLL_CLAIM_QUEUE (may be NULL) */
    coll_claim (*claim)(void *arg, const unsigned char *hdr, uint32_t conn, coll_claim_mode mode,
                        coll_sink *s);
} coll_raw_cbs;
/* Send (is_write) or receive n bytes on a non-blocking socket fd before deadline_ns (monotonic,
 * coll__now_ns). Returns 0, or -1 with errno (ETIMEDOUT at the deadline, EPIPE at EOF, the
 * socket's error otherwise). */
int coll__fd_io_full(int fd, void *buf, size_t n, int is_write, int64_t deadline_ns);
/* 1 for the URLs the direct transport serves (tcp://, ipc://, shm://). */
int coll__raw_url(const char *url);
/* Listener settings (from mt_coll_net_opts; borrowed for the call) and its callbacks. */
typedef struct coll_raw_cfg {
    const char *url;     /* tcp://HOST:PORT, ipc://PATH or shm://PATH */
    coll_raw_cbs cbs;    /* where frames, lost connections and refusals go */
    const char *token;   /* NULL or "": none required */
    int shm;             /* mt_coll_shm_mode (a shm:// listener requires shared memory) */
    size_t shm_ring;     /* ring bytes a dialer creates */
    int64_t shm_spin_ns; /* spin before sleeping on a ring */
    int64_t handshake_ms;
    int max_handshakes;
} coll_raw_cfg;
/* Listen on cfg->url; the bound address goes to addr[cap]. */
mt_code coll__raw_listen(const coll_raw_cfg *cfg, coll_raw **out, char *addr, size_t cap,
                         mt_err *err);
/* Stop accepting, end every connection, join every thread. NULL: no-op. */
void coll__raw_free(coll_raw *r);
/* What coll__raw_dial needs (all borrowed). */
typedef struct coll_raw_dial_req {
    const char *url, *my_addr;
    uint64_t job;
    const char *token;
    int64_t deadline_ns;
    int (*give_up)(void *); /* may be NULL: the peer is known gone, stop retrying */
    void *arg;
    int shm;             /* mt_coll_shm_mode of this process */
    size_t shm_ring;     /* ring bytes to create */
    int64_t shm_spin_ns; /* spin before sleeping on the ring */
} coll_raw_dial_req;
/*
 * Connect to q->url and authenticate, retrying a refused or dropped connection until the
 * deadline unless give_up says the peer is gone; *fd_out owned by the caller. When the
 * listener is on this host and both allow it (or the url is shm://), the frames then go
 * through *shm_out (owned by the caller: coll__shm_close(s, 1), coll__shm_free), else NULL.
 */
mt_code coll__raw_dial(const coll_raw_dial_req *q, int *fd_out, struct coll_shm **shm_out,
                       mt_err *err);

/*
 * Driving, the direct transport's synchronous mode (coll_raw.c): a device thread reads an
 * accepted connection itself while it runs an exchange with that process, interleaved with its
 * own non-blocking sends, instead of being fed by the connection's reader thread (one thread
 * per process moves the data, as OpenMPI's progress loop does: no reader-to-device hand-off, no
 * second runnable thread per process). Each frame goes where the reader thread would put it:
 * the transport asks the engine's one entry point (cb.claim, COLL_CLAIM_BY_DRIVER) and reads
 * the payload into the posted receive the sink names; any other frame gives the stream back.
 * The socket changes hands only at frame boundaries, or with the bytes of a begun header or
 * payload that the next owner completes or discards. One driver per connection at a time (the
 * caller's rule: worlds with one local device). The engine reaches these only through the
 * endpoint's table (coll__net_drive_*).
 */
/* What one turn of driving did. */
typedef enum coll_drive_io {
    COLL_DRIVE_BACK = -1, /* the stream must go back to the reader thread (it ended, or a frame
                             that the posted receive does not take arrived) */
    COLL_DRIVE_IDLE = 0,  /* nothing to read now */
    COLL_DRIVE_MOVED = 1, /* bytes read, the frame is not complete yet */
    COLL_DRIVE_FRAME = 2, /* a frame's payload is complete in the posted receive */
} coll_drive_io;
/* The newest live connection dialed by the process at peer_addr, with a reference; or NULL. */
coll_link *coll__raw_drive_find(coll_raw *r, const char *peer_addr);
void coll__raw_drive_put(coll_raw *r, coll_link *k);
int coll__raw_drive_fd(const coll_link *k);
/* Driver: wait up to ms for k's stream to have data (DONE, or AGAIN), ENDED when it ended. */
coll_io coll__raw_drive_wait(coll_link *k, int ms);
int coll__raw_drive_is_shm(const coll_link *k);  /* its frames come through a ring */
uint32_t coll__raw_drive_id(const coll_link *k); /* the id the lost callback names */
/* Readable when the socket was handed over, or the connection ended: take it again. */
int coll__raw_drive_evfd(const coll_link *k);
/*
 * DONE: the caller reads k's stream now (with the header bytes the reader handed over with it).
 * AGAIN: not yet: the reader thread is inside a frame and hands the socket over at its next
 * frame boundary or header (the eventfd tells). ENDED: the connection ended.
 */
coll_io coll__raw_drive_take(coll_link *k);
/* Driver, owning k: read what the stream holds without waiting (coll_drive_io). */
coll_drive_io coll__raw_drive(coll_link *k);
/*
 * Give the stream back to the reader thread (or withdraw the request): it first reads the rest
 * of a header the driver began, or discards the rest of a payload (whose posted receive is let
 * go: finish(s, 0)).
 */
void coll__raw_drive_end(coll_link *k);
/*
 * Write more of frame f without blocking. DONE: complete; AGAIN: the socket is full; ENDED and
 * errno: failed (a partial frame: close the socket).
 */
coll_io coll__raw_write_some(int fd, coll_out *f);
/*
 * The endpoint's operations a driving device thread uses (coll_net.c, through the transport's
 * table; a transport without a synchronous mode has none: open returns NULL, dial MT_OK).
 */
/* Connect to process proc unless connected (within the deadline). */
mt_code coll__net_dial(mt_coll_world *w, int proc, int64_t deadline_ns, mt_err *err);
/* More of frame f (a COLL_HDR_SIZE header) to process proc without waiting: DONE complete,
 * AGAIN no room now, ENDED and errno failed (a partial frame: coll__net_drop). */
coll_io coll__net_write_some(mt_coll_world *w, int proc, coll_out *f);
/* A write to process proc failed part-way: close that connection (the peer sees it end). */
void coll__net_drop(mt_coll_world *w, int proc);
/* The newest connection from process proc to drive (a reference), or NULL. */
coll_link *coll__net_drive_open(mt_coll_world *w, int proc);
/* Take k's stream (coll__raw_drive_take). */
coll_io coll__net_drive_take(mt_coll_world *w, coll_link *k);
/* One turn of driving k (coll__raw_drive). */
coll_drive_io coll__net_drive(mt_coll_world *w, coll_link *k);
/* How a driver with nothing to do waits: for room toward send_proc (-1: nothing to send) and,
 * when recv, data on the driven connection; at most ms. */
typedef struct coll_drive_wait {
    int send_proc;
    bool recv;
    int ms;
} coll_drive_wait;
/* COLL_IO_ENDED when the driven connection's ring ended, else AGAIN (look again). */
coll_io coll__net_drive_wait(mt_coll_world *w, coll_link *k, const coll_drive_wait *wt);
/* Give k's stream back to its reader thread and drop the reference. */
void coll__net_drive_close(mt_coll_world *w, coll_link *k);
/*
 * 1 and *ms when the tcp connection dialed to process proc has data in flight that no
 * acknowledgement came for in COLL_LINK_STALL_MS or more (*ms: since the last one): the link
 * is broken. 0 for rings, Unix sockets, nng, an idle or busy connection. Any thread.
 */
int coll__net_link_stalled(mt_coll_world *w, int proc, int64_t *ms);

/* Progress hooks (coll_progress.c; no-ops when c->prog is NULL). Device thread of c. */
void coll__progress_enter(mt_coll_comm *c, const char *op, uint64_t step, uint32_t seq);
void coll__progress_wait(mt_coll_comm *c);
void coll__progress_chunk(mt_coll_comm *c, size_t k, size_t n);
void coll__progress_exit(mt_coll_comm *c, mt_code rc);

#endif
