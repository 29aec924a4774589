/* SPDX-License-Identifier: MIT */
/*
 * mt_coll_progress.h — where each local device of a job is right now: the collective it is in
 * (step, sequence number, operation, mesh axis, state, since when) and its last non-collective
 * activity ("computing", "reading input" ...). The worker sends these records with every
 * heartbeat; the coordinator uses them to tell a job that stopped advancing while its workers are
 * alive (STALLED) from a lost worker, and to name the device that never entered (docs/jobs.md).
 *
 * How it fits: the owner (the worker's task runner) creates a progress table with one slot per
 * local device and attaches it to the job's world (mt_coll_world_set_progress). The collectives
 * (coll_world.c) then write the slot of their comm on entry, while they wait, per received
 * segment and on exit; the SPMD trainer (core/spmd) writes the activity and the mesh axis of the
 * next collective through the comm (mt_coll_comm_activity / mt_coll_comm_axis). A heartbeat thread
 * reads the slots (mt_coll_progress_read). A comm without a table attached costs one NULL check.
 *
 * Invariants: `ticks` of a slot only grows; it moves on every collective entry, received segment,
 * successful exit and activity change, never while a device only waits or when a collective
 * fails — so "no slot's ticks moved" means "no device made progress". Sequence numbers are per step
 * (mt_coll_comm_set_step resets them).
 *
 * Threading: each slot is written by the one device thread of its comm and read by any thread;
 * a per-slot mutex makes each record read consistent (writers hold it for a few stores only).
 * The table must outlive the world it is attached to; it may outlive the world (read after the
 * world is freed gives the last records).
 * Tests: tests/unit/test_coll_progress.c; end to end tests/integration/test_stall.sh.
 */
#ifndef MT_COLL_PROGRESS_H
#define MT_COLL_PROGRESS_H

#include <stdint.h>

#include "coll/mt_coll.h"
#include "status/mt_status.h"

typedef struct mt_coll_progress mt_coll_progress;

/* State of the device with respect to its latest collective. */
typedef enum mt_coll_pstate {
    MT_COLL_PSTATE_NONE = 0,    /* no collective entered yet */
    MT_COLL_PSTATE_ENTERED = 1, /* inside, sending or computing its part */
    MT_COLL_PSTATE_WAITING = 2, /* inside, blocked waiting for a peer's data */
    MT_COLL_PSTATE_CHUNK = 3,   /* inside: segment `chunk` of `chunks` of an exchange received
                                   (posted: exchanges done) */
    MT_COLL_PSTATE_DONE = 4,    /* the latest collective completed */
    MT_COLL_PSTATE_FAILED = 5,  /* the latest collective failed */
} mt_coll_pstate;

/* "none", "entered", "waiting", "chunk", "done", "failed"; "unknown" out of range. */
const char *mt_coll_pstate_name(mt_coll_pstate s);

#define MT_COLL_PROGRESS_TEXT 48

/* One device's record as read (a copy; times are ages relative to the read). */
typedef struct mt_coll_progress_rec {
    int rank;                             /* global rank of the slot's device, -1 unattached */
    uint64_t step;                        /* tag of the latest collective */
    uint32_t seq;                         /*   (valid when state != NONE) */
    const char *op;                       /* "allreduce", ... (static string), "" when NONE */
    char axis[MT_COLL_PROGRESS_TEXT];     /* mesh axis of the latest collective, "" unknown */
    mt_coll_pstate state;                 /* see above */
    uint32_t chunk, chunks;               /* CHUNK: segment (or posted exchange) k, 1-based, of n */
    int64_t state_age_ms;                 /* time in this state */
    char activity[MT_COLL_PROGRESS_TEXT]; /* last non-collective activity, "" none yet */
    int64_t activity_age_ms;              /* time since it was set (-1: never) */
    uint64_t ticks;                       /* progress events so far (see Invariants) */
} mt_coll_progress_rec;

/*
 * A table of `slots` (1..4096) empty records; *out returns owned (mt_coll_progress_free).
 * Codes: INVALID_ARGUMENT (slots out of range), RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_coll_progress_new(int slots, mt_coll_progress **out, mt_err *err);

/* Free the table; detach it from its world first (or free the world). NULL: no-op. */
void mt_coll_progress_free(mt_coll_progress *p);

/* Number of slots. */
int mt_coll_progress_slots(const mt_coll_progress *p);

/*
 * Attach p (borrowed; must outlive the attachment) to w: slot i records the comm of the i-th
 * local rank in increasing rank order, and gets its rank. p NULL detaches. No collective may be
 * running (owner thread, like mt_coll_world_free). Codes: INVALID_ARGUMENT (p has fewer slots
 * than w has local ranks; nothing attached).
 */
mt_code mt_coll_world_set_progress(mt_coll_world *w, mt_coll_progress *p, mt_err *err);

/*
 * Record the device's current non-collective activity (what, borrowed for the call, copied; at
 * most 47 bytes kept). A change of text counts as progress. Device thread of c, or another
 * thread while c's device thread runs no collective (the trainer's host thread between steps);
 * no-op when c is NULL or has no table.
 */
void mt_coll_comm_activity(mt_coll_comm *c, const char *what);

/* The mesh axis the NEXT collective on c runs over (copied; recorded at its entry). As above. */
void mt_coll_comm_axis(mt_coll_comm *c, const char *axis);

/* Copy slot's record into *out (out of range: rank -1, state NONE). Any thread; never blocks
 * longer than a writer's few stores. */
void mt_coll_progress_read(mt_coll_progress *p, int slot, mt_coll_progress_rec *out);

/*
 * TEST ONLY (tests/integration/test_stall.sh through the worker's MT_TEST_STALL_AT_STEP): the
 * device of `slot` sleeps `ms` milliseconds before entering its first collective of a step >= step,
 * once, with the activity "test stall hook: sleeping before a collective". Call before the
 * device's first collective. Codes: INVALID_ARGUMENT (slot out of range, ms < 0).
 */
mt_code mt_coll_progress_test_stall(mt_coll_progress *p, int slot, uint64_t step, int64_t ms,
                                    mt_err *err);

#endif
