/* SPDX-License-Identifier: MIT */
/*
 * mt_watch.h — follow a job's metrics: the stored history from a step on, then the live
 * stream, with no gap and no duplicate at the seam, ending with the job's final state
 * (WatchJob semantics; `meshtrain watch` and `submit --follow` are built on it).
 *
 * How it works: mt_watch_open asks the coordinator for the job (GetJob: it must exist; the
 * reply names the metrics PUB address), SUBSCRIBES FIRST to the job's topic, and only then
 * reads history (GetMetrics pages from since_step). The coordinator stores a point before it
 * publishes it (coordinator/metrics.c), so any point missing from the history arrives live.
 * Live points already seen in history are dropped: those with a step below the highest
 * history step, and at that step the names already delivered. The stream ends with an event
 * whose `final` is set: published when the job reaches SUCCEEDED/FAILED/CANCELLED, or seen in
 * the history reply when it had already ended.
 * Limits: the subscription buffers up to 8192 live messages while history is read (nng drops
 * beyond that); points re-reported for steps below the history seam (a restart that redoes
 * steps) are not re-delivered live — the fault-tolerance issue (#10) adds restart markers.
 * Threading: one mt_watch is used by one thread; it blocks in mt_watch_next. The RPC client is
 * borrowed and must outlive the watch.
 * Tests: tests/integration/test_jobs.sh (a watcher started mid-run sees every step once).
 */
#ifndef MT_WATCH_H
#define MT_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/mt_rpc.h"
#include "status/mt_status.h"

typedef struct mt_watch mt_watch;

typedef struct mt_watch_point {
    uint64_t step;
    uint32_t epoch;
    char name[64];
    double value;
    int64_t time_ms; /* unix ms when measured */
} mt_watch_point;

typedef struct mt_watch_event {
    const mt_watch_point *points; /* borrowed; valid until the next call on the watch */
    size_t n_points;
    bool final;      /* the job ended: no more events */
    char state[16];  /* with final: "SUCCEEDED" | "FAILED" | "CANCELLED" */
    char error[256]; /* with final: the job's error, "" when none */
    bool live;       /* the points came from the live stream (false: history) */
} mt_watch_event;

/*
 * Start following job_id (borrowed) from since_step (0 = from the start) through cli
 * (borrowed). Blocks for one RPC and the subscription's connect. On MT_OK *out is owned
 * (mt_watch_close). Codes: NOT_FOUND (no such job), UNAVAILABLE (coordinator or metrics socket
 * unreachable), RESOURCE_EXHAUSTED, and the RPC's codes.
 */
mt_code mt_watch_open(mt_rpc_client *cli, const char *job_id, uint64_t since_step, int timeout_ms,
                      mt_watch **out, mt_err *err);

/*
 * The next batch: history pages first, then live batches, then one final event. Waits up to
 * timeout_ms for a live batch (DEADLINE_EXCEEDED when none came: call again). After the final
 * event every call returns OUT_OF_RANGE. *ev is overwritten; its points are borrowed.
 * Codes: DEADLINE_EXCEEDED, OUT_OF_RANGE, the RPC's codes (history), INTERNAL (undecodable
 * stream message).
 */
mt_code mt_watch_next(mt_watch *w, int timeout_ms, mt_watch_event *ev, mt_err *err);

/* Unsubscribe and free. NULL is a no-op. */
void mt_watch_close(mt_watch *w);

#endif
