/* SPDX-License-Identifier: MIT */
/*
 * stall.h — hang diagnosis: the per-device progress records the coordinator keeps from worker
 * heartbeats (DeviceProgress, proto/coordinator.proto) and the pure function that turns a stopped
 * group's records into one line naming the device(s) that never entered the collective the
 * others wait in:
 *   step 412 allreduce #57 on axis batch: worker-b cpu:1 never entered; its last activity:
 *   reading input 31 s ago
 *
 * How it fits: stall.c (coordinator loop) fills one coord_stall_dev per rank of a RUNNING job
 * from heartbeats, notices when no record moves for --stall-timeout-ms while every worker of the
 * job still heartbeats, moves the job to STALLED with this diagnosis as its reason, and back to
 * RUNNING when a record moves again (docs/jobs.md). A worker that stops heartbeating is the lost
 * path (workers.c), never STALLED.
 * Threading: coord_stall_diagnose is pure (any thread). Tests: tests/unit/test_coord_stall.c,
 * tests/integration/test_stall.sh.
 */
#ifndef MT_COORD_STALL_H
#define MT_COORD_STALL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A worker counts as heartbeating when its last heartbeat is at most this old (ms), for a
 * heartbeat interval hb_ms. The stall timeout must exceed it, so that a worker that stops
 * (SIGSTOP, kill) goes stale before its job could be called STALLED (main.c checks this).
 */
#define COORD_STALL_FRESH_MS(hb_ms) (3 * (int64_t)(hb_ms) + 1000)

/* One rank's latest record as the coordinator keeps it (times on the coordinator's clock). */
typedef struct coord_stall_dev {
    int known;            /* a heartbeat reported this rank (else the rest is zero) */
    char worker_id[64];   /* where the rank runs */
    uint32_t local_index; /* cpu:N inside that worker */
    uint64_t step;        /* tag of its latest collective */
    uint32_t seq;
    char op[24];               /* "allreduce" ...; "" none yet */
    char axis[48];             /* mesh axis, "" unknown */
    char state[12];            /* "none" | "entered" | "waiting" | "chunk" | "done" | "failed" */
    uint32_t chunk, chunks;    /* state "chunk" */
    int64_t state_since_ms;    /* coordinator monotonic ms the state began */
    char activity[48];         /* last non-collective activity, "" none */
    int64_t activity_since_ms; /* monotonic ms it was set; -1 never */
    uint64_t ticks;            /* progress events; unchanged = no progress */
} coord_stall_dev;

/*
 * Write the diagnosis of the group devs[0..n) (indexed by rank; borrowed) at coordinator time
 * now_ms into out (cap bytes, always NUL-terminated, truncated if needed):
 *  - some devices inside a collective: the latest (step, seq) any device is in is "the
 *    collective"; every other known device "never entered" it (with its last activity and its
 *    age) or "is still in" an earlier one; if none is missing, "all N devices entered" and how
 *    long no data moved;
 *  - no device inside a collective: each device's last activity and its age.
 * Unknown ranks (known == 0) are listed as "no progress reported".
 */
void coord_stall_diagnose(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap);

/*
 * The job's diagnosis for a stalled group (docs/jobs.md#diagnosis): the text of
 * coord_stall_diagnose prefixed with what kind of fault it is:
 *  - "link A<->B: " when every device is inside a collective, waiting for data that does not
 *    come (all in the same one, or some still in an earlier one whose data never arrived: the
 *    side that finished it went on to the next), over devices of exactly two workers ("a link
 *    among A, B, C: " over more), since their workers all heartbeat;
 *  - "device stuck: " otherwise: a device outside every collective (computing, reading input,
 *    never reported) while the others wait for it, or a group on one worker.
 * Same contract as coord_stall_diagnose (pure, any thread).
 */
void coord_stall_classify(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap);

#endif
