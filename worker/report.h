/* SPDX-License-Identifier: MIT */
/*
 * report.h — a task's metric reporter: the training thread queues metric points and state
 * digests without ever blocking; a thread of the reporter's own sends them to the coordinator
 * (through the caller's send function: ReportMetrics) in the order they were queued, batched,
 * and again after a transient failure. So the step loop never waits on the coordinator: a frozen
 * (SIGSTOP) or restarting coordinator delays the reports, not the training.
 *
 * How it fits: worker/task.c makes one per task run (after its RPC client is open) and frees it
 * before closing the client. The training thread calls worker_report_point / _digest / _kick;
 * the checkpoint upload calls worker_report_drain first (a checkpoint the coordinator holds never
 * lacks the points before it: a restart resumes after it and never reports them again); the end
 * of the task drains and flushes the last log lines before its final state goes out.
 *
 * Delivery: a batch holds every queued point and digest (up to the capacities); it leaves the
 * queue when the send returns OK (delivered) or a code other than UNAVAILABLE and
 * DEADLINE_EXCEEDED (refused for good); a queue longer than one report (batch_points) goes out
 * in several, the next one right after the last one was delivered; after those two it stays and
 * goes again — the coordinator stores a point once per (job, step, name), so a batch whose reply
 * was lost may be sent twice. Points queued while a batch is in flight go with the next one. A full
 * queue drops its oldest half (the caller is told how many, and logs it).
 *
 * Threading: every function is thread-safe (one mutex). send runs on the reporter thread without
 * that mutex; more and give_up run with it held (on the reporter thread or a waiting caller), so
 * they must not call the reporter. Tests:
 * tests/unit/test_worker_report.c; end to end tests/integration/test_coord_frozen.sh.
 */
#ifndef MT_WORKER_REPORT_H
#define MT_WORKER_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/coordinator.pb-c.h"
#include "status/mt_status.h"

typedef struct worker_report worker_report;

/* One report: the queued points and digests, oldest first (both may be empty: the send then
 * carries what its caller has besides, such as log lines). Borrowed for the send call. */
typedef struct worker_report_batch {
    Meshtrain__MetricPoint **points;
    size_t n_points;
    Meshtrain__StepDigest **digests;
    size_t n_digests;
} worker_report_batch;

/* Send b (reporter thread). OK: delivered; UNAVAILABLE or DEADLINE_EXCEEDED: kept and sent
 * again; any other code: dropped. */
typedef mt_code (*worker_report_send_fn)(void *ctx, const worker_report_batch *b);
/* Whether ctx has something to send besides the queue (log lines). */
typedef bool (*worker_report_more_fn)(void *ctx);
/* Whether a waiting drain may give up (cancelled, shutting down). */
typedef bool (*worker_report_give_up_fn)(void *ctx);

typedef struct worker_report_opts {
    double period_s;   /* a report at most this often, unless kicked (batching) */
    double retry_s;    /* the pause after a transient failure, unless kicked or drained */
    size_t max_points; /* queue capacities (a report carries at most this many) */
    size_t max_digests;
    worker_report_send_fn send;       /* required */
    worker_report_more_fn more;       /* NULL: nothing besides the queue */
    worker_report_give_up_fn give_up; /* NULL: drains wait to their deadline */
    void *ctx;                        /* borrowed; passed to the three functions */
    const char *tag;     /* the reporter thread's log tag (copied; NULL: none): core/log */
    size_t batch_points; /* a report carries at most this many points (0: max_points); a longer
                            queue goes out in several reports, back to back, oldest first */
} worker_report_opts;

#define WORKER_REPORT_OPTS_DEFAULTS                                                                \
    {                                                                                              \
        0.1, 1.0, 8192, 256, NULL, NULL, NULL, NULL, NULL, 0                                       \
    }

/* A reporter with its thread running (returns owned: worker_report_free). INVALID_ARGUMENT
 * (no send, a capacity of 0 or 1), RESOURCE_EXHAUSTED (memory, thread). */
mt_code worker_report_new(const worker_report_opts *o, worker_report **out, mt_err *err);

/* Stop the thread (after the send in flight, if any, returns) and free; unsent points are lost
 * (drain first). NULL is a no-op. Blocks at most one send. */
void worker_report_free(worker_report *w);

/* Queue a point (name: a static string, borrowed for the reporter's life). Never blocks on a
 * send. Returns how many of the oldest points a full queue dropped to make room (0 mostly). */
size_t worker_report_point(worker_report *w, const char *name, uint64_t step, uint32_t epoch,
                           double value, int64_t time_ms);

/* Queue a state digest (hex: 64 lower-case hex digits, copied). As worker_report_point. */
size_t worker_report_digest(worker_report *w, uint64_t step, const char *hex, int64_t time_ms);

/* Send what is queued now, without the batching pause or the retry pause. Never blocks. */
void worker_report_kick(worker_report *w);

/*
 * Wait until every point and digest queued before the call left the queue (delivered or refused
 * for good), sending without pauses (kicked again after each failure, at most every 0.2 s), for
 * at most timeout_s; gives up earlier when give_up says so once a send ended during the wait.
 * Blocks. Returns true when the queue is empty.
 */
bool worker_report_drain(worker_report *w, double timeout_s);

/* One send that starts after this call (the last log lines), at most timeout_s; returns at once
 * when nothing is pending. Blocks. */
void worker_report_flush(worker_report *w, double timeout_s);

#endif
