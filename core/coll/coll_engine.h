/* SPDX-License-Identifier: MIT */
/*
 * coll_engine.h — what the algorithms (coll_algo.c) may ask of the engine (coll_world.c):
 * run a collective call, post a receive, send, wait, and the exchange the engine may drive.
 *
 * The algorithms plan which member sends which region to whom in which order (the fixed
 * reduction order of mt_coll.h) and combine what arrives; everything else is the engine's:
 * per-source inboxes, posted receives, driving a connection, deadlines, ABORTs, PINGs and the
 * hang diagnosis, progress slots. This header is all an algorithm file includes of core/coll
 * below mt_coll.h (checked by tests/tools/coll_graph.py): it names no transport, no socket, no
 * nng type, so an algorithm cannot reach one. gloo's shape: post the receive buffers, send,
 * wait.
 *
 * Threading: every call runs on the device thread of the collective's comm, inside coll__run.
 * Errors: calls that can fail return an mt_code and have already written the message (naming
 * the collective, the member and the peer) into the call's mt_err; the algorithm returns the
 * code unchanged. Tests: tests/unit/test_coll.c, test_coll_conformance.c.
 */
#ifndef MT_COLL_ENGINE_H
#define MT_COLL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coll/coll_wire.h"
#include "coll/mt_coll.h"

/* One collective call as an algorithm sees it (set by coll__run; total may be changed). */
typedef struct coll_call {
    int p, pos;          /* group size; this member's position in it */
    const int *ranks;    /* [p] the group's global ranks, in group order */
    int rank;            /* this member's global rank */
    uint8_t op;          /* enum coll_op */
    uint64_t total;      /* elements of the collective (per member for allgather) */
    size_t seg;          /* elements per segment (mt_coll_world_opts.segment_bytes) */
    size_t direct_bytes; /* mt_coll_world_opts.direct_bytes */
} coll_call;

/* What a receive does with the elements that arrive. */
typedef enum coll_mix {
    COLL_MIX_COPY = 1, /* overwrite */
    COLL_MIX_ADD = 2,  /* acc = partial + own: one float32 addition per element */
} coll_mix;

/*
 * One exchange: send sbuf[so, so+sl) to dst and receive rbuf[ro, ro+rl) from src, in
 * segments of seg elements; every frame carries phase and rstep (received frames rstep_in).
 */
typedef struct coll_xchg {
    uint8_t phase;     /* enum coll_phase */
    uint32_t rstep;    /* the step within the phase of the frames sent */
    uint32_t rstep_in; /* ... and of the frames received (the same but for the one-hop swap) */
    int dst, src;      /* global ranks, -1: nothing sent / received */
    size_t so, sl;     /* region sent */
    size_t ro, rl;     /* region received */
    coll_mix mix;      /* what the received elements do */
    bool chain;        /* forward what arrives: segment k is received before it is sent */
} coll_xchg;

/* The algorithm of a collective, run by coll__run between the engine's entry and exit. */
typedef mt_code (*coll_algo_fn)(coll_call *x, void *arg);
typedef struct coll_run {
    uint8_t op;      /* enum coll_op */
    uint64_t total;  /* elements (per member for allgather) */
    coll_algo_fn fn; /* the algorithm */
    void *arg;       /* its buffers and sizes */
} coll_run;

/*
 * Run one collective on comm over group: check the group and the world, take the tag (call,
 * or the comm's automatic one) and the deadline, record progress, run r->fn, then wait for the
 * sends, tell the other members about a failure (ABORT) and report the call (opts.observe).
 * Returns what fn returned, or the engine's failure. Device thread of comm.
 */
mt_code coll__run(mt_coll_comm *comm, const mt_coll_group *group, const mt_coll_call *call,
                  const coll_run *r, mt_err *err);

/* Fail the call with code: "OP over AXES (job J step S seq Q) on rank R: TEXT". Returns code. */
mt_code coll__fail(coll_call *x, mt_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Blocking exchange through the inboxes: segment k sent, then segment k received (t->chain:
 * the other way round). */
mt_code coll__xchg(coll_call *x, const coll_xchg *t, const float *sbuf, float *rbuf);

/* Posted receives: a receive from src is posted before the sends, and a transport that can
 * fills it in place (the engine's choice); coll__wait then takes what the inbox holds. */
bool coll__can_post(const coll_call *x, int src);
/* Post the receive of t (src, ro, rl, mix) into rbuf; returns its id for coll__wait. */
uint64_t coll__post(coll_call *x, const coll_xchg *t, float *rbuf);
/* Send every segment of t's region (dst, so, sl) from sbuf. */
mt_code coll__send(coll_call *x, const coll_xchg *t, const float *sbuf);
/* Wait until posted receive id (from src) is complete; on failure every post is withdrawn. */
mt_code coll__wait(coll_call *x, int src, uint64_t id);
/* Withdraw every posted receive of this call (the buffers are the caller's again). */
void coll__withdraw(coll_call *x);

/*
 * Run exchange t driven by this thread when the engine can (one device in this process, t->src
 * in another process, its connection known): the receive is posted and waited for. *driven
 * false: nothing was done (run it otherwise). The posted receive stays until coll__withdraw.
 */
mt_code coll__drive(coll_call *x, const coll_xchg *t, const float *sbuf, float *rbuf, bool *driven);
/* Give back the connections this thread drives (before anything that blocks), unless keep
 * (an allreduce keeps them for the next one). */
void coll__drive_end(coll_call *x, bool keep);
/* Before the exchanges st[0, ns): give back driven connections none of them receives from, and
 * connect to every destination (a member that fails early then reaches every partner with its
 * ABORT at once). */
mt_code coll__prepare(coll_call *x, const coll_xchg *st, int ns);
/* Every member of the group is the only rank of its process and receives can be posted. */
bool coll__sole_ranks(const coll_call *x);

/* One frame each: sbuf[so, so+sl) to t->dst / rbuf[ro, ro+rl) from t->src, unsegmented. */
mt_code coll__send_frame(coll_call *x, const coll_xchg *t, const float *sbuf);
mt_code coll__recv_frame(coll_call *x, const coll_xchg *t, float *rbuf);

/*
 * The host window (the engine's host-local fast path): one shared-memory segment every member
 * of the group maps, two buffers of one slot per member, used in chunks of at most one slot.
 * Offered for an allreduce over 3 to COLL_WIN_MAX members that are each the only rank of their
 * process, all on one host (their rank table addresses name one host) with shared memory on
 * (opts.window AUTO); made at the group's first such call (one round of frames among the
 * members: either every member maps it or none uses it, so the choice is the same everywhere)
 * and kept for the world's life, dropped when a call on it fails. *ok false: run without it.
 * *slot_floats: the chunk size.
 */
#define COLL_WIN_MAX 64
mt_code coll__win_open(coll_call *x, bool *ok, size_t *slot_floats);
/* Member i's slot (group position) of the current chunk's buffer. */
float *coll__win_slot(coll_call *x, int i);
/*
 * Barrier of the current chunk, elements [off, off + len) of the collective: inputs true once this
 * member's input is in its slot (every member's tag is then compared: a mismatch is
 * INVALID_ARGUMENT), false once it reduced its part (the chunk is done: the next one uses the
 * other buffer). Waits as for data: the deadline, ABORTs, a lost member, a cancel.
 */
mt_code coll__win_sync(coll_call *x, bool inputs, size_t off, size_t len);

/* Progress of the call for hang diagnosis: part k of n is done. */
void coll__progress(coll_call *x, size_t k, size_t n);

/* ---- the built-in backend's worlds (the engine's objects; coll_algo.c gives the table) */
/* Cancel every collective of w (mt_coll_backend.cancel of the built-in backend). */
void coll__world_cancel(mt_coll_world *w);

#endif
