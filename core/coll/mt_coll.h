/* SPDX-License-Identifier: MIT */
/*
 * mt_coll.h — collectives (allreduce, reduce-scatter, allgather, broadcast,
 * barrier) between the devices of a job, in one process or across processes.
 *
 * How it fits: the SPMD training step (worker/, core engine) calls these on
 * every device thread; a group is an ordered array of global ranks that the
 * caller derives from mesh coordinates (this module does not depend on
 * core/mesh). A world (mt_coll_world) holds the devices of one job that live
 * in this process; each device gets one communicator (mt_coll_comm). Devices of
 * other processes are reached through an mt_coll_net (tcp:// or ipc:// direct
 * sockets with a token handshake, or nng+tcp:// / nng+ipc:// nng push/pull);
 * devices of this process exchange messages in shared memory.
 *
 * REDUCTION ORDER (the determinism guarantee). For a group g[0..p-1], let q be
 * the largest power of two <= p and r = p - q. Every element is summed, in
 * float32, by a fixed binary tree over group positions:
 *   leaves   L[v] = x[2v] + x[2v+1]  for v < r   (the first r pairs fold first)
 *            L[v] = x[v+r]           for r <= v < q
 *   levels   for d = 1, 2, 4, ... < q: L[v] = L[v] + L[v+d] for every v that is a
 *            multiple of 2d; the result is L[0]
 * e.g. p = 4: (x0+x1)+(x2+x3); p = 3: (x0+x1)+x2; p = 6: ((x0+x1)+(x2+x3))+(x4+x5)
 * (p = 1: the value itself). Every element uses the same tree. This is the
 * order of the recursive-halving reduce-scatter (a member exchanges half of its
 * range with the member at tree distance 1, 2, 4, ...; float addition is
 * commutative, so both sides of an exchange compute the same bits); the
 * recursive-doubling allgather that follows only copies. The order depends on
 * the group order and p only — never on n, timing, chunk/segment size, the
 * transport of a hop, or how ranks are placed in processes — so the same job
 * on 1 process x 4 devices and on 2 processes x 2 devices is bit-identical, and
 * every member ends with identical bits. Placement only decides which
 * exchanges are shared memory: devices of one worker holding consecutive
 * positions reduce among themselves first (distance 1, 2, ...) and only the
 * later, smaller exchanges cross processes (hierarchical reduction).
 * A host window (3 or more processes of one host: each member reduces its part of every
 * member's buffer in shared memory, opts.window) applies the same tree to each element.
 * mt_coll_reference_allreduce() computes the same order serially. Small
 * allreduces (opts.direct_bytes) bring every member's buffer to every member —
 * in one hop, or, when every member is the only device of its process, by
 * recursive doubling in log2 p driven exchanges — and each member computes the
 * very same tree locally.
 * reduce-scatter returns chunk mt_coll_chunk_range(n, p, position) of the
 * allreduce result (same bits).
 *
 * Invariants: every member of a group calls the same collectives on it in the
 * same order with the same sizes (SPMD). Each collective is tagged (job id,
 * step, sequence number); every message carries the tag, the chunk index and
 * the length, and any mismatch is INVALID_ARGUMENT on every participant.
 * Every wait has the collective's deadline.
 *
 * Backends: these are the built-in stack's promises. The collectives below
 * call the operations of the world's backend (mt_coll_backend.h); a world of
 * another backend (MPI) states in its own header what it does not keep.
 *
 * Threading: a comm is used by one thread at a time (its device thread);
 * different comms of one world may be used concurrently. Worlds and nets are
 * created and freed by one owner thread while no collective runs.
 * Tests: tests/unit/test_coll.c, tests/integration/test_coll_procs.sh
 * (with tests/tools/mt_coll_peer.c). Docs: docs/collectives.md.
 */
#ifndef MT_COLL_H
#define MT_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

typedef struct mt_coll_net mt_coll_net;
typedef struct mt_coll_world mt_coll_world;
typedef struct mt_coll_comm mt_coll_comm;
typedef struct mt_coll_bucket mt_coll_bucket;

/* An ordered set of global ranks (borrowed by every call; not kept). */
typedef struct mt_coll_group {
    const int *ranks; /* size entries, distinct, each in [0, world size) */
    int size;         /* >= 1 */
} mt_coll_group;

/* Tag and deadline of one collective. */
typedef struct mt_coll_call {
    uint64_t step;       /* training step */
    uint32_t seq;        /* collective sequence number within the step */
    int64_t deadline_ms; /* time allowed for the whole collective; <= 0: world default */
} mt_coll_call;

/* Whether a process's one device thread reads its connections itself during an exchange
 * (docs/collectives.md, "Driving"). */
typedef enum mt_coll_drive_mode {
    MT_COLL_DRIVE_AUTO = 0, /* when the world has one device in this process (the fast path) */
    MT_COLL_DRIVE_OFF = 1,  /* never: the reader threads feed every exchange (comparisons) */
} mt_coll_drive_mode;

/* Whether an allreduce of 3 or more processes of one host (one device each, shared memory on)
 * above direct_bytes goes through a host window: one shared-memory segment the members map,
 * each reducing its part of every member's buffer in place (docs/collectives.md, "Host
 * window"); the same bits as the tree. */
typedef enum mt_coll_window_mode {
    MT_COLL_WINDOW_AUTO = 0, /* when every member can map it (agreed at the group's first call) */
    MT_COLL_WINDOW_OFF = 1,  /* never: the tree over the rings (comparisons) */
} mt_coll_window_mode;

/* Attempts of one job whose stragglers a live world drops (job_id = base + attempt). */
#define MT_COLL_MAX_ATTEMPTS 1024

/* World options: public struct with defaults (MT_COLL_WORLD_DEFAULTS). */
typedef struct mt_coll_world_opts {
    uint64_t job_id;             /* carried in every message; a mismatch is INVALID_ARGUMENT */
    int64_t default_deadline_ms; /* used when a call has no deadline */
    size_t segment_bytes;        /* pipelining unit on the wire (rounded to floats, >= 4) */
    size_t direct_bytes; /* allreduce of at most this many bytes: one direct exchange between all
                            members instead of the tree (fewer hops, same bits); 0 = always tree */
    const char *mesh;    /* "batch=4,model=2" (copied; NULL: none): the job's mesh, ranks numbered
                            row-major over it; error messages then name the mesh axes a group
                            runs along ("allreduce over batch ..."). Sizes must multiply to the
                            world size. */
    mt_coll_drive_mode drive;
    int drive_yields;  /* a driving thread with nothing to do yields the CPU this often before
                          it sleeps (a partner sharing its core runs at once); 0: sleep at once */
    int drive_spin_us; /* ... but in a small allreduce of 2 members (at most direct_bytes) it
                          first polls without giving its core up for this long (a partner running
                          on another core answers within microseconds), unless such polls kept
                          failing lately (the partner was not running: then it yields at once);
                          0: never */
    mt_coll_window_mode window; /* the host window (one host, >= 3 processes, large allreduces) */
    int local_spin_us; /* a device thread waiting for a device of its own process (the in-process
                          transport) polls this long, yielding its core between looks, before it
                          sleeps (a sleeper is woken onto its waker's core, and the two then take
                          turns on one core), unless such polls kept failing lately (then it
                          sleeps at once); 0: never */
    /* called at the end of every collective a comm of this world took part in (NULL: none), on
     * that comm's device thread, with observe_arg, the operation's name ("allreduce", a static
     * string), the bytes of the tensor it works on (its element count x 4), how long the call
     * took and how it ended; must not block (the worker's metrics, worker/metrics.c) */
    void (*observe)(void *arg, const char *op, uint64_t bytes, int64_t ns, mt_code rc);
    void *observe_arg;
} mt_coll_world_opts;

#define MT_COLL_WORLD_DEFAULTS                                                                     \
    {                                                                                              \
        .job_id = 0, .default_deadline_ms = 10000, .segment_bytes = 256 * 1024,                    \
        .direct_bytes = 64 * 1024, .mesh = NULL, .drive = MT_COLL_DRIVE_AUTO,                      \
        .drive_yields = 1000, .drive_spin_us = 20, .window = MT_COLL_WINDOW_AUTO,                  \
        .local_spin_us = 50                                                                        \
    }

/* One entry of a job's rank table: where rank r lives. */
typedef struct mt_coll_rank_addr {
    const char *addr; /* data-plane address of its process ("tcp://127.0.0.1:4000", "ipc://...") */
    int local_index;  /* device index inside that process (distinct per address) */
} mt_coll_rank_addr;

/* ------------------------------------------------------------------ chunks */

/* Chunk c of n elements over p members: *off and *len in elements (n/p, one more when c < n%p,
 * laid out in order): reduce-scatter's result of position c, and allgather's layout. */
void mt_coll_chunk_range(size_t n, int p, int c, size_t *off, size_t *len);

/*
 * Serial reference of the documented allreduce order: out[e] for e < n from
 * inputs[0..p-1] (inputs[i] is member i's buffer, group order). Borrows all
 * arrays; out may alias none of the inputs. Any thread.
 */
void mt_coll_reference_allreduce(const float *const *inputs, int p, size_t n, float *out);

/* -------------------------------------------------------------- data plane */

/*
 * Open a process's data-plane endpoint listening on url ("tcp://HOST:PORT",
 * port 0 = ephemeral, or "ipc:///path": the direct transport; "nng+tcp://…" or
 * "nng+ipc://…": nng), and start receiving. No token (see mt_coll_net_new_auth).
 * *out is owned by the caller (mt_coll_net_free). Codes: INVALID_ARGUMENT (bad
 * url), UNAVAILABLE (cannot listen), RESOURCE_EXHAUSTED.
 * A net serves one world at a time (one job's data plane per process endpoint).
 */
mt_code mt_coll_net_new(const char *url, mt_coll_net **out, mt_err *err);

/*
 * mt_coll_net_new, and for a "tls+tcp://HOST:PORT" url over TLS (core/tls): tls (borrowed; the
 * net keeps a reference) must have a certificate, its key and a CA. The listener requires
 * dialing peers to present a certificate from that CA, and connections to peers verify theirs
 * (name: tls's server name, else the peer address's host). Other urls: tls is ignored. Codes
 * as mt_coll_net_new; INVALID_ARGUMENT for a tls+tcp:// url without those files.
 */
struct mt_tls;
mt_code mt_coll_net_new_tls(const char *url, const struct mt_tls *tls, mt_coll_net **out,
                            mt_err *err);

/*
 * As mt_coll_net_new, with the job's shared data-plane token (borrowed, copied;
 * NULL or "" = none, at most 255 bytes). tcp:// and ipc:// use the direct
 * socket transport, whose every connection starts with a handshake: the dialer
 * proves the token (HMAC-SHA-256 of the listener's nonce, the job id and its
 * address, keyed with the token) before any tensor frame is read. A listener
 * with a token refuses a dialer with another token (or none): the dialer's
 * collective fails with UNAUTHENTICATED naming the listener, and a member of
 * the listener's process waiting for the refused process's data fails with
 * UNAUTHENTICATED naming it. nng+tcp:// and nng+ipc:// select the nng
 * transport (no handshake: the token is not checked there).
 * Codes as mt_coll_net_new; INVALID_ARGUMENT for a token longer than 255 bytes.
 */
mt_code mt_coll_net_new_auth(const char *url, const char *token, mt_coll_net **out, mt_err *err);

/*
 * Shared memory between two processes of one host. A direct-transport connection (tcp://,
 * ipc://) between processes with the same host identity (boot id and host name) moves to a
 * shared-memory ring after its token handshake: same frames, tags, deadlines and aborts, no
 * kernel socket on the data path (the socket stays open only to tell when a process dies).
 * A listener on "shm:///path" (a Unix socket at path for the handshake) requires it.
 */
typedef enum mt_coll_shm_mode {
    MT_COLL_SHM_AUTO = 0, /* shared memory when both ends are on one host and both allow it */
    MT_COLL_SHM_OFF = 1,  /* never: connections stay on their sockets (e.g. for comparisons) */
} mt_coll_shm_mode;

/* Endpoint options: public struct with defaults (MT_COLL_NET_DEFAULTS). */
typedef struct mt_coll_net_opts {
    const char *token;        /* data-plane token (borrowed, copied); NULL or "": none */
    const struct mt_tls *tls; /* tls+tcp:// only (borrowed; the net keeps a reference) */
    mt_coll_shm_mode shm;     /* shared memory with processes of this host */
    size_t shm_ring_bytes;    /* ring per connection: a power of two, 4 KiB .. 1 GiB */
    int64_t shm_spin_us;      /* a side waiting on a ring spins this long before it sleeps */
    int64_t handshake_ms;     /* an accepted connection not authenticated by then is dropped */
    int max_handshakes;       /* accepted connections in their handshake at once; a new one
                                 beyond this drops the oldest (idle strangers cannot crowd out
                                 a job's peers) */
} mt_coll_net_opts;

#define MT_COLL_NET_DEFAULTS                                                                       \
    {                                                                                              \
        .token = NULL, .tls = NULL, .shm = MT_COLL_SHM_AUTO, .shm_ring_bytes = 4u << 20,           \
        .shm_spin_us = 50, .handshake_ms = 2000, .max_handshakes = 16                              \
    }

/*
 * mt_coll_net_new with options (NULL: MT_COLL_NET_DEFAULTS): the token and TLS of
 * mt_coll_net_new_auth / mt_coll_net_new_tls, shared memory, handshake limits. Codes as
 * mt_coll_net_new; INVALID_ARGUMENT for options out of range or shm:// with shm OFF.
 */
mt_code mt_coll_net_new_opts(const char *url, const mt_coll_net_opts *opts, mt_coll_net **out,
                             mt_err *err);

/*
 * How the connection to the process at addr (a rank table address) carries frames once dialed:
 * "shm", "tcp", "ipc", "nng" or "tls"; "none" before the first frame to it. Borrowed static
 * text. For logs, placements and tests. Any thread.
 */
const char *mt_coll_world_link(const mt_coll_world *w, const char *addr);

/* The bound address ("tcp://127.0.0.1:41234"), borrowed from net. */
const char *mt_coll_net_addr(const mt_coll_net *net);

/*
 * Replace the address net reports (mt_coll_net_addr) and matches this process's ranks by: for
 * a listener on a wildcard ("tcp://0.0.0.0:7500") the address peers dial instead
 * ("tcp://10.0.0.2:7500"). addr is copied. Call before any world uses net (not thread-safe
 * against world creation). Codes: INVALID_ARGUMENT (not tcp://, tls+tcp:// or ipc://, or longer
 * than 255).
 */
mt_code mt_coll_net_set_addr(mt_coll_net *net, const char *addr, mt_err *err);

/*
 * Stop receiving and close the listener. Free any world using it first. NULL: no-op.
 * Bounded: if nng's close does not finish within 2 s the endpoint is left to it (leaked).
 */
void mt_coll_net_free(mt_coll_net *net);

/* ------------------------------------------------------------------ worlds */

/*
 * A world of `size` devices that are all threads of this process (shared
 * memory only). opts may be NULL (defaults). *out owned by the caller.
 * Codes: INVALID_ARGUMENT (size < 1, bad opts), RESOURCE_EXHAUSTED.
 */
mt_code mt_coll_world_new_local(int size, const mt_coll_world_opts *opts, mt_coll_world **out,
                                mt_err *err);

/*
 * A world of `size` ranks spread over processes: table[r] says where rank r
 * lives (borrowed, copied). Ranks whose address equals mt_coll_net_addr(net)
 * are this process's devices. Connections to other processes are opened on
 * first use, reused across steps and closed by mt_coll_world_free. Messages
 * that arrive before the world exists are kept and delivered to it, also those
 * that arrive while net still serves a CANCELLED world of another job_id (a
 * restarted job's peers may start before this process has freed the old
 * attempt's world); kept messages of other job ids are dropped when the world is
 * made. A live world drops messages of an earlier attempt of its job (a job_id up to
 * MT_COLL_MAX_ATTEMPTS below its own: callers number attempts base + attempt, and a healed
 * partition can deliver the cut attempt's last frames late) and of the last 8 worlds its net
 * served (a peer may still be finishing a cancelled job this process has left), and gets those
 * of any other job_id (INVALID_ARGUMENT mismatch).
 * Codes: INVALID_ARGUMENT (no local rank, duplicate local index, bad size, an address that is
 * not tcp://, tls+tcp:// or ipc://), FAILED_PRECONDITION (net already serves a world; net uses
 * TLS and a rank's address is not tls+tcp://), RESOURCE_EXHAUSTED.
 */
mt_code mt_coll_world_new_net(mt_coll_net *net, int size, const mt_coll_rank_addr *table,
                              const mt_coll_world_opts *opts, mt_coll_world **out, mt_err *err);

/*
 * Flush and close connections (each close bounded to 2 s), free comms. No collective may
 * be running. NULL: no-op.
 */
void mt_coll_world_free(mt_coll_world *w);

/*
 * Cancel w: every collective of w that is running or starts later fails with CANCELLED within
 * about 50 ms (also one waiting for a peer whose link is dead, which would otherwise wait for its
 * deadline); sends still in flight are cancelled. Remote members are not told: their owner
 * cancels them (the coordinator cancels every task of a restarted job). Any thread; w must stay
 * valid during the call (the caller orders it before mt_coll_world_free). NULL: no-op.
 */
void mt_coll_world_cancel(mt_coll_world *w);

int mt_coll_world_size(const mt_coll_world *w);

/* The comm of global rank `rank` if it lives in this process, else NULL. Borrowed from w. */
mt_coll_comm *mt_coll_world_comm(mt_coll_world *w, int rank);

/* How many ranks of w run on this process's host: its own, plus every rank whose process address
 * (tcp://HOST:PORT) names the same HOST as this process's address. Addresses of other forms (a
 * backend world's) count only this process's ranks. So a host named two ways counts low. */
int mt_coll_world_host_ranks(const mt_coll_world *w);

int mt_coll_comm_rank(const mt_coll_comm *c);

/*
 * Set the step used by calls made with call == NULL, and restart their
 * automatic sequence number at 0. Device thread only.
 */
void mt_coll_comm_set_step(mt_coll_comm *c, uint64_t step);

/* ------------------------------------------------------------- collectives
 *
 * Common to all: comm borrowed, used by its device thread; group borrowed;
 * call may be NULL (tag = the comm's step and next automatic sequence number,
 * world default deadline); an explicit call tag also moves the automatic
 * sequence number past it. A failed collective is not retried under the same
 * tag. Blocks until done; on failure returns within the deadline plus about
 * 0.5 s (a 250 ms round asking the other processes who is missing, and up to
 * 100 ms letting in-flight sends leave). Codes:
 *   INVALID_ARGUMENT   comm's rank not in group, bad group (duplicate or out of
 *                      range rank), NULL buffer with n > 0, size overflow, or a
 *                      peer's message disagrees (job, step, seq, op, size,
 *                      chunk) — reported by every participant;
 *   DEADLINE_EXCEEDED  a peer did not deliver in time; names the rank(s)
 *                      (and address) that never arrived;
 *   UNAVAILABLE        a peer's connection was lost or it cannot be reached, or (tcp) the
 *                      link to a peer that did not deliver in time is broken: what was sent
 *                      to it stays unacknowledged (a stopped process's kernel still
 *                      acknowledges); the message names both ends;
 *   RESOURCE_EXHAUSTED out of memory.
 * On error the buffer contents are unspecified; the other members also fail.
 */

/* buf[0..n) := sum over members, in the documented order. In place. */
mt_code mt_coll_allreduce_sum(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                              const mt_coll_call *call, mt_err *err);

/*
 * in[0..n) summed over members; out receives this member's chunk, i.e. the
 * elements [off, off+len) of the allreduce result where (off, len) =
 * mt_coll_chunk_range(n, p, position of comm's rank in group). Same bits as
 * the allreduce. in and out borrowed; out must not overlap in.
 */
mt_code mt_coll_reduce_scatter(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                               float *out, size_t n, const mt_coll_call *call, mt_err *err);

/*
 * mt_coll_reduce_scatter in place: buf[0..n) summed over members is scratch; on return this
 * member's chunk of it, buf[off, off+len) with (off, len) = mt_coll_chunk_range(n, p, position),
 * holds the reduced elements (the same bits); the rest is unspecified. No copy of the input (the
 * built-in backend). buf borrowed.
 */
mt_code mt_coll_reduce_scatter_inplace(mt_coll_comm *comm, const mt_coll_group *group, float *buf,
                                       size_t n, const mt_coll_call *call, mt_err *err);

/* out[i*count .. (i+1)*count) := member i's in[0..count) (group order). out must not overlap in. */
mt_code mt_coll_allgather(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                          float *out, size_t count, const mt_coll_call *call, mt_err *err);

/* buf[0..n) := root's buf on every member. root is a global rank in group. */
mt_code mt_coll_broadcast(mt_coll_comm *comm, const mt_coll_group *group, float *buf, size_t n,
                          int root, const mt_coll_call *call, mt_err *err);

/* Returns once every member has entered the barrier. */
mt_code mt_coll_barrier(mt_coll_comm *comm, const mt_coll_group *group, const mt_coll_call *call,
                        mt_err *err);

/* ------------------------------------------------------- gradient buckets
 *
 * Fuses many small tensors into one buffer so a step sends few messages.
 * The bucket borrows the registered tensors (they must outlive it). Its
 * result is deterministic for a given registration order (the fused buffer is
 * reduced with the documented order). When the registered tensors lie back to
 * back (each starts where the previous one ends, in registration order), they
 * are the fused buffer: the collectives run on them in place, with no pack or
 * unpack copy and the same bits. Used by one device thread.
 */

/* *out owned by caller. Codes: RESOURCE_EXHAUSTED. */
mt_code mt_coll_bucket_new(mt_coll_bucket **out, mt_err *err);
void mt_coll_bucket_free(mt_coll_bucket *b);

/* Register tensor t[0..n) (borrowed). Codes: INVALID_ARGUMENT (NULL with n > 0),
 * RESOURCE_EXHAUSTED. */
mt_code mt_coll_bucket_add(mt_coll_bucket *b, float *t, size_t n, mt_err *err);

/* Total registered elements. */
size_t mt_coll_bucket_size(const mt_coll_bucket *b);

/* Pack every registered tensor, one allreduce_sum, unpack in place. Codes as allreduce. */
mt_code mt_coll_bucket_allreduce(mt_coll_bucket *b, mt_coll_comm *comm, const mt_coll_group *group,
                                 const mt_coll_call *call, mt_err *err);

/*
 * The first half of a sharded update: pack every registered tensor and reduce-scatter the fused
 * buffer. *chunk (borrowed from b, valid until the next call on b) gets this member's *len
 * elements, the fused elements [*off, *off + *len) (mt_coll_chunk_range of the bucket's size
 * over the group, at comm's position) of mt_coll_bucket_allreduce's result, the same bits. The
 * registered tensors are left as they were, unless they lie back to back: then the reduce-scatter
 * runs on them in place (*chunk points into them; the rest of them is unspecified). Codes as
 * reduce-scatter; INVALID_ARGUMENT when comm's rank is not in group.
 */
mt_code mt_coll_bucket_reduce_scatter(mt_coll_bucket *b, mt_coll_comm *comm,
                                      const mt_coll_group *group, const mt_coll_call *call,
                                      float **chunk, size_t *off, size_t *len, mt_err *err);

/*
 * The second half: every member sends its chunk (mt_coll_chunk_range of the bucket's size over
 * the group, at its position) of its registered tensors; afterwards each registered tensor holds,
 * in every other member's chunk, that member's values (this member's chunk keeps its values).
 * Every member must have registered the same sizes. One allgather of ceil(size / members) floats
 * per member, straight into the registered tensors when they lie back to back and the size is a
 * multiple of the members. Codes as allgather; INVALID_ARGUMENT when comm's rank is not in group.
 */
mt_code mt_coll_bucket_allgather(mt_coll_bucket *b, mt_coll_comm *comm, const mt_coll_group *group,
                                 const mt_coll_call *call, mt_err *err);

#endif
