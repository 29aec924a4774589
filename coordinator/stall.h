/* SPDX-License-Identifier: MIT */
/*
 * stall.h — hang diagnosis: the per-device progress records the coordinator keeps from worker
 * heartbeats (DeviceProgress, proto/coordinator.proto). The rules that read them (sched.h:
 * coord_sched_stall, and coord_stall_diagnose, which turns a stopped group's records into one
 * line naming the device(s) that never entered the collective the others wait in) are the
 * scheduling core's (sched.c):
 *   step 412 allreduce #57 on axis batch: worker-b cpu:1 never entered; its last activity:
 *   reading input 31 s ago
 *
 * How it fits: the domain core (coord_job_progress, state.c; the Heartbeat handler builds the
 * records) fills one coord_stall_dev per rank of a RUNNING job from heartbeats; on the sweep timer
 * sweep.c applies what coord_sched_stall decides: STALLED with this diagnosis as its reason when no
 * record moves for --stall-timeout-ms while every worker of the job still heartbeats, back to
 * RUNNING when a record moves again (docs/jobs.md). A worker that stops heartbeating is the lost
 * path (sweep.c), never STALLED. No protobuf type here: the domain core and the scheduling core
 * include it. Tests: tests/unit/test_coord_stall.c, tests/unit/test_coord_sched.c,
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

#endif
