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
 * State changes: the coordinator also publishes a non-final event with no points when the job
 * moves to RESTARTING (reason: the cause) or is placed again (SCHEDULED, reason: "placed on ...
 * (attempt N, resuming from a checkpoint at step S)"); they are delivered with `state` and
 * `reason` set. After one, the seam is forgotten: the restarted attempt redoes steps below it and
 * those points are delivered live again (they replace the lost ones in the store).
 * State digests: the history's come with the last history batch (GetJobDigests from since_step,
 * read after the points, so any digest stored later arrives live), the live ones with their
 * report's points; a live digest of a step delivered from history is dropped, as points are.
 * Restart markers: mt_watch_restart_scan reads the restarts (cause, attempt, resume step) out of
 * a job's state history (GetJob events, the API's events, or the live state events above).
 * Limits: the subscription buffers up to 8192 live messages while history is read (nng drops
 * beyond that).
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

/* A state digest of the job (docs/reproducibility.md): the Merkle root after `step`. */
typedef struct mt_watch_digest {
    uint64_t step;
    char digest[65]; /* 64 lower-case hex digits */
} mt_watch_digest;

typedef struct mt_watch_event {
    const mt_watch_point *points; /* borrowed; valid until the next call on the watch */
    size_t n_points;
    const mt_watch_digest *digests; /* borrowed as points: the state digests of this batch, by
                                       step (history: all of them, with the last history batch) */
    size_t n_digests;
    bool final;      /* the job ended: no more events */
    char state[16];  /* with final: "SUCCEEDED" | "FAILED" | "CANCELLED"; without final and
                        with no points: a live state change ("RESTARTING", "SCHEDULED"), "" else */
    char error[256]; /* with final: the job's error, "" when none; with a state change: its
                        reason (the state history's text) */
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

/*
 * Unsubscribe and free. NULL is a no-op. Never blocks for long: the subscription socket is
 * closed on a detached thread, waited for up to 2 s and otherwise left to finish (or to the
 * process's exit) — nng 1.5.2 (Debian 12) can deadlock in nng_close (nanomsg/nng#1543, #1813),
 * which hung `meshtrain submit --wait --timeout` forever in a test run.
 */
void mt_watch_close(mt_watch *w);

/* One restart of a job, read from its state history (RESTARTING, then SCHEDULED again). */
typedef struct mt_watch_restart {
    uint32_t number;     /* 1 for the first restart */
    uint32_t attempt;    /* the attempt that resumed (number + 1) */
    int64_t time_ms;     /* when that attempt was placed (its SCHEDULED event) */
    int64_t resume_step; /* the checkpoint step it resumed from (0: from the start); -1 when
                            unknown (history recorded before the step was written down) */
    uint64_t lost_step;  /* the job's step when it went to RESTARTING */
    char cause[256];     /* the RESTARTING event's reason ("worker w2 lost (...)"), "" unknown */
} mt_watch_restart;

/* Scanner state between events; initialise with mt_watch_restart_scan_init. Plain data. */
typedef struct mt_watch_restart_scan {
    uint32_t restarts; /* restarts seen so far */
    bool pending;      /* a RESTARTING event waits for its SCHEDULED one */
    uint64_t lost_step;
    char cause[256];
} mt_watch_restart_scan;

/* Start a scan before a job's first event. */
void mt_watch_restart_scan_init(mt_watch_restart_scan *s);

/*
 * Feed the next event of a job's state history, in order: state, reason (borrowed; NULL = ""),
 * when and the job's step at that time. Returns true and fills *out when the event completes a
 * restart: a SCHEDULED event whose reason says "attempt N" with N >= 2 (restart number N - 1),
 * or, without an attempt, one following a RESTARTING event (the next number). The resume step is
 * read from "at step S" / "from step S" in its reason (coordinator/jobs.c writes it); -1 when the
 * reason says it resumed from a checkpoint without naming the step; 0 otherwise. Never fails;
 * unknown states are ignored.
 */
bool mt_watch_restart_scan_event(mt_watch_restart_scan *s, const char *state, const char *reason,
                                 int64_t time_ms, uint64_t step, mt_watch_restart *out);

struct cJSON;

/*
 * The JSON form of a restart (docs/api.md restart_markers, `meshtrain watch --json`,
 * `meshtrain status --json`): {"restart", "attempt", "time_ms", "resume_step" (null when
 * unknown), "lost_step", "cause"}. Returns an owned cJSON object (cJSON_Delete), NULL when out of
 * memory.
 */
struct cJSON *mt_watch_restart_json(const mt_watch_restart *r);

#endif
