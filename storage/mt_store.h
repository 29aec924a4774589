/* SPDX-License-Identifier: MIT */
/*
 * mt_store.h — the coordinator's durable state in SQLite: workers and their
 * devices, jobs with their state-transition events and placement, per-step
 * metrics, and checkpoint records. Schema and file layout: docs/storage.md.
 *
 * How it fits: the coordinator's libuv loop thread opens one mt_store on
 * STATE_DIR/meshtrain.db at start and calls these typed functions from its
 * handlers; nothing else writes the database. Each call is one short
 * transaction over statements prepared once at open, so a reply that follows
 * a successful call acknowledges a write that survives kill -9 (docs/storage.md).
 *
 * Invariants: the schema version (PRAGMA user_version) equals
 * mt_store_schema_version() after a successful open; forward migrations run on
 * open, a database from a newer version is refused. foreign_keys=ON, WAL.
 *
 * Threading: an mt_store has no internal locking; exactly one thread at a time
 * may use it (the coordinator's loop thread). Other threads that need bulk
 * reads open their own read-only connection (mt_store_open_readonly); WAL lets
 * it read while the owner writes.
 *
 * Errors: SQLite's result codes never leave this module. Messages name the
 * operation and object and keep SQLite's text:
 * "open /x/meshtrain.db: unable to open database file".
 * Common codes of every call: UNAVAILABLE (database locked by another process
 * past the busy timeout, I/O error), RESOURCE_EXHAUSTED (disk full, out of
 * memory), FAILED_PRECONDITION (write on a read-only store), DATA_LOSS
 * (corrupt file), INTERNAL. Each function lists its own codes on top.
 * Tests: tests/unit/test_store.c (open, workers), test_store_jobs.c (jobs,
 * events, placement), test_store_data.c (metrics, checkpoints),
 * test_store_crash.c (kill -9 durability), test_jobstate.c.
 */
#ifndef MT_STORE_H
#define MT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "status/mt_status.h"

typedef struct mt_store mt_store;

/* The schema version this build creates and understands (PRAGMA user_version). */
#define MT_STORE_SCHEMA_VERSION 11

/* Options for mt_store_open_opts(). Initialise with MT_STORE_OPTIONS_DEFAULTS. */
typedef struct mt_store_options {
    int readonly;        /* 1: read-only connection, no migrations (see mt_store_open_readonly) */
    int sync_full;       /* 1: synchronous=FULL (default; survives power loss), 0: NORMAL
                            (survives kill -9 only, fewer fsyncs) */
    int busy_timeout_ms; /* how long a statement waits for a lock held by another connection */
    uint64_t max_size_bytes; /* 0 = unlimited; else writes that would grow the database file
                                beyond it fail with RESOURCE_EXHAUSTED (PRAGMA max_page_count) */
} mt_store_options;

#define MT_STORE_OPTIONS_DEFAULTS                                                                  \
    {                                                                                              \
        0, 1, 2000, 0                                                                              \
    }

/*
 * Open or create the database at path (borrowed) with default options: WAL,
 * foreign_keys=ON, busy_timeout 2000 ms, synchronous=FULL (every commit is
 * fsynced before the call returns, so an acknowledged write also survives a
 * power loss; the coordinator batches writes so the fsync cost is per batch).
 * Applies forward migrations from PRAGMA user_version to
 * MT_STORE_SCHEMA_VERSION, each in its own transaction.
 * On success *out is an owned handle (mt_store_close). On failure *out = NULL.
 * Codes: FAILED_PRECONDITION (schema newer than this build, naming both
 * versions; file is not a database; not a meshtrain database), NOT_FOUND (the
 * directory does not exist), PERMISSION_DENIED (EACCES), UNAVAILABLE (cannot
 * open or lock the file otherwise), DATA_LOSS (corrupt file),
 * RESOURCE_EXHAUSTED, INVALID_ARGUMENT (path or out NULL, empty path), INTERNAL.
 * Blocks on file I/O. Any thread; the handle then belongs to that thread.
 */
mt_code mt_store_open(const char *path, mt_store **out, mt_err *err);

/* mt_store_open with explicit options (opts borrowed; NULL = defaults). */
mt_code mt_store_open_opts(const char *path, const mt_store_options *opts, mt_store **out,
                           mt_err *err);

/*
 * Open an existing database read-only (for a pool thread's bulk reads). Runs no
 * migration; the schema version must equal MT_STORE_SCHEMA_VERSION, else
 * FAILED_PRECONDITION. Write functions on it fail with FAILED_PRECONDITION.
 * Codes as mt_store_open; NOT_FOUND when the file does not exist.
 */
mt_code mt_store_open_readonly(const char *path, mt_store **out, mt_err *err);

/* Finalize every statement and close the database. NULL is a no-op. */
void mt_store_close(mt_store *s);

/* The schema version of the open database (== MT_STORE_SCHEMA_VERSION). */
int mt_store_schema_version(const mt_store *s);

/* The path the store was opened with (borrowed, valid until close). */
const char *mt_store_path(const mt_store *s);

/* Diagnostics: the number of prepared statements alive on the connection. Constant from
 * open to close (every statement is prepared once at open and reused); tests check it. */
int mt_store_prepared_count(const mt_store *s);

/*
 * Group several calls into one transaction (one fsync): mt_store_tx_begin, any
 * number of store calls, then mt_store_tx_commit (or mt_store_tx_rollback).
 * Calls inside keep their own all-or-nothing behaviour through savepoints; a
 * failed call inside does not end the outer transaction. Nesting is not
 * allowed: begin while a transaction is open -> FAILED_PRECONDITION; commit or
 * rollback without one -> FAILED_PRECONDITION. Nothing is durable before commit.
 * If SQLite itself rolled the transaction back (disk full, I/O error), every
 * further call fails with ABORTED until mt_store_tx_rollback (which then
 * returns OK) — no call silently runs outside the caller's transaction.
 */
mt_code mt_store_tx_begin(mt_store *s, mt_err *err);
mt_code mt_store_tx_commit(mt_store *s, mt_err *err);
mt_code mt_store_tx_rollback(mt_store *s, mt_err *err);

/* ------------------------------------------------------------------ workers */

typedef struct mt_store_device {
    char kind[16];         /* "cpu" */
    uint32_t index;        /* index inside its worker */
    uint32_t cores;        /* cores this device may use */
    uint64_t memory_bytes; /* memory this device may use */
    char health[64];       /* "ok" or reason */
} mt_store_device;

typedef struct mt_store_worker {
    char worker_id[64];        /* primary key, assigned by the coordinator */
    char name[64];             /* worker name (not unique in the store; see find_by_name) */
    char instance_id[64];      /* per worker process start */
    char host[128];            /* host name */
    uint32_t pid;              /* worker process id */
    char state[16];            /* "alive" | "lost" */
    char data_address[256];    /* data-plane address, may be "" */
    char version[32];          /* worker software version */
    int64_t registered_at_ms;  /* unix ms */
    int64_t last_heartbeat_ms; /* unix ms */
    mt_store_device *devices;  /* owned by the struct when returned by get/list */
    size_t n_devices;
} mt_store_worker;

/*
 * Insert the worker row, or update every column of the existing row with the
 * same worker_id, and replace its device rows; one transaction. Borrows w.
 * Every string field must be NUL-terminated inside its array and worker_id
 * non-empty, device indexes unique, state "alive" or "lost" ->
 * else INVALID_ARGUMENT. Other codes: see the module errors (UNAVAILABLE when
 * the database is locked, RESOURCE_EXHAUSTED when the disk is full).
 */
mt_code mt_store_worker_upsert(mt_store *s, const mt_store_worker *w, mt_err *err);

/*
 * Look one worker up by id. *out is caller-provided and overwritten; on OK its
 * devices array (ordered by index) is owned by *out: release with
 * mt_store_worker_fini. On failure *out is zeroed (fini is still safe).
 * Codes: NOT_FOUND (no such worker), RESOURCE_EXHAUSTED, INTERNAL.
 */
mt_code mt_store_worker_get(mt_store *s, const char *worker_id, mt_store_worker *out, mt_err *err);

/* Like mt_store_worker_get, by name; when several rows share the name, the most
 * recently registered one. NOT_FOUND if none. */
mt_code mt_store_worker_find_by_name(mt_store *s, const char *name, mt_store_worker *out,
                                     mt_err *err);

/* Free w's devices and zero them. NULL or a zeroed struct is a no-op. */
void mt_store_worker_fini(mt_store_worker *w);

/*
 * Record heartbeats: set last_heartbeat_ms of worker_ids[i] to times_ms[i] for
 * i < n, all in ONE transaction (the coordinator batches them). Unknown ids are
 * skipped, not an error; *updated (may be NULL) receives the number of rows
 * updated. Does not change the state column. n == 0 is OK (nothing written).
 * Codes: INVALID_ARGUMENT (NULL arrays with n > 0, NULL id), store errors.
 */
mt_code mt_store_worker_heartbeats(mt_store *s, const char *const *worker_ids,
                                   const int64_t *times_ms, size_t n, size_t *updated, mt_err *err);

/* Set the worker's state ("alive" | "lost", else INVALID_ARGUMENT). NOT_FOUND if absent. */
mt_code mt_store_worker_set_state(mt_store *s, const char *worker_id, const char *state,
                                  mt_err *err);

/* Set the health of device `index` of the worker ("ok" or a reason; borrowed, at most 63
 * bytes, else INVALID_ARGUMENT), as heartbeats report it. NOT_FOUND if no such device. */
mt_code mt_store_worker_set_device_health(mt_store *s, const char *worker_id, uint32_t index,
                                          const char *health, mt_err *err);

/* Delete the worker and its devices. NOT_FOUND if absent. */
mt_code mt_store_worker_delete(mt_store *s, const char *worker_id, mt_err *err);

/*
 * All workers whose state equals state_filter (NULL or "" = all), ordered by
 * name then worker_id, each with its devices. On OK *out is an owned array of
 * *n workers (NULL when *n == 0): free with mt_store_worker_list_free. On
 * failure *out = NULL, *n = 0 and nothing leaks.
 * Codes: RESOURCE_EXHAUSTED (allocation failed), store errors.
 */
mt_code mt_store_worker_list(mt_store *s, const char *state_filter, mt_store_worker **out,
                             size_t *n, mt_err *err);

/* Free a list from mt_store_worker_list. NULL is a no-op. */
void mt_store_worker_list_free(mt_store_worker *list, size_t n);

/* ------------------------------------------------------------------ jobs */

typedef struct mt_store_job {
    char job_id[32];         /* "job-000001", assigned by mt_store_job_insert, never reused */
    char name[128];          /* user-given name, may be "" */
    char state[16];          /* an mt_jobstate name ("QUEUED" ...) */
    int32_t priority;        /* higher runs first */
    int64_t submitted_at_ms; /* unix ms */
    int64_t updated_at_ms;   /* unix ms of the last change */
    uint64_t step;           /* last step reported */
    uint64_t total_steps;    /* from the spec, 0 if unknown */
    char reason[256];        /* why it waits / why it changed state (last transition reason) */
    char error[256];         /* the reason of the transition to FAILED, "" otherwise */
    uint32_t restarts;       /* number of transitions to RESTARTING */
    char *spec_json;         /* insert: borrowed; get: owned (mt_store_job_fini); list: NULL */
    char request_id[72];     /* insert: the client's idempotency key, "" = none; not read back */
    char mesh[256];          /* the spec's mesh as text ("batch=4,model=2"), stored at insert */
    uint32_t devices;        /* devices that mesh needs; 0: a job stored before schema 8 whose
                                summary mt_store_job_summarise_old has not filled yet */
    char diagnosis[256];     /* what is wrong with it now ("device stuck: worker w2 ...", "link
                                w1<->w2 ..."), "" none (mt_store_job_set_diagnosis) */
} mt_store_job;

/*
 * Store a new job in state QUEUED and its first event (QUEUED, "submitted"), in
 * one transaction. Reads j->name, j->spec_json (non-NULL), j->priority,
 * j->total_steps, j->request_id, j->mesh and j->devices (borrowed); on OK writes the new id into
 * j->job_id and sets j->state, j->submitted_at_ms = j->updated_at_ms = now_ms, step 0, restarts 0.
 * Validating the spec is the caller's business (the store keeps any text).
 * Codes: INVALID_ARGUMENT (NULL spec, unterminated name), ALREADY_EXISTS (a job already
 * carries j->request_id: see mt_store_job_by_request), store errors.
 */
mt_code mt_store_job_insert(mt_store *s, mt_store_job *j, int64_t now_ms, mt_err *err);

/*
 * Fill the mesh summary of jobs stored before schema 8 (devices 0): for each, in submission
 * order, summarise(arg, spec_json, mesh, cap, &devices) writes the mesh text and device count of
 * the spec (borrowed for the call; devices must come back > 0, else the row is left as it is),
 * and the row is updated; all in one transaction. *n (may be NULL) gets the number of rows
 * filled. Loop thread of the only writer, at open. Codes: RESOURCE_EXHAUSTED, store errors.
 */
typedef void (*mt_store_summarise_fn)(void *arg, const char *spec_json, char *mesh, size_t cap,
                                      uint32_t *devices);
mt_code mt_store_job_summarise_old(mt_store *s, mt_store_summarise_fn summarise, void *arg,
                                   size_t *n, mt_err *err);

/* The job a submit with this request id (non-empty, borrowed) created, with its spec: as
 * mt_store_job_get. Codes: NOT_FOUND (no job carries that request id), RESOURCE_EXHAUSTED. */
mt_code mt_store_job_by_request(mt_store *s, const char *request_id, mt_store_job *out,
                                mt_err *err);

/* One job with its spec. *out is caller-provided; on OK out->spec_json is owned
 * (mt_store_job_fini). On failure *out is zeroed. Codes: NOT_FOUND, RESOURCE_EXHAUSTED. */
mt_code mt_store_job_get(mt_store *s, const char *job_id, mt_store_job *out, mt_err *err);

/* Free j->spec_json and set it NULL. NULL is a no-op. */
void mt_store_job_fini(mt_store_job *j);

/*
 * Jobs whose state is in state_filter, ordered by priority DESC then submission
 * order (the scheduler's order). state_filter: NULL or "" = all, else one state
 * name or a comma-separated list ("QUEUED,RESTARTING"). spec_json is NULL in
 * the results (use mt_store_job_get). On OK *out is an owned array of *n jobs
 * (NULL when 0): free with mt_store_job_list_free. On failure *out = NULL, *n = 0.
 * Codes: INVALID_ARGUMENT (an unknown state name in the filter), RESOURCE_EXHAUSTED.
 */
mt_code mt_store_job_list(mt_store *s, const char *state_filter, mt_store_job **out, size_t *n,
                          mt_err *err);
void mt_store_job_list_free(mt_store_job *list, size_t n);

/* A position in the listing order (priority DESC, then submission): the last job of a page.
 * Its text form ("PRIORITY.SEQ", e.g. "0.1201") is the opaque cursor of the RPC and HTTP APIs. */
typedef struct mt_store_job_cursor {
    int32_t priority;
    uint64_t seq; /* the numeric part of the job id */
} mt_store_job_cursor;

/* Format c into out (cap >= 32). */
void mt_store_job_cursor_format(const mt_store_job_cursor *c, char *out, size_t cap);
/* Parse a cursor's text (borrowed) into *c. Codes: INVALID_ARGUMENT (malformed). */
mt_code mt_store_job_cursor_parse(const char *text, mt_store_job_cursor *c, mt_err *err);
/* The cursor of a listed job (its priority and the seq in its id). */
mt_store_job_cursor mt_store_job_cursor_of(const mt_store_job *j);

/*
 * One page of mt_store_job_list: at most limit (1..10000) jobs whose state is in state_filter
 * (as mt_store_job_list), in the same order, starting after `after` (NULL = from the first).
 * Reads the rows in index order and stops at the limit: the cost is the page, plus the rows of
 * other states skipped when a filter is given. Results as mt_store_job_list (free with
 * mt_store_job_list_free). Codes: INVALID_ARGUMENT (unknown state, limit 0), store errors.
 */
mt_code mt_store_job_page(mt_store *s, const char *state_filter, const mt_store_job_cursor *after,
                          size_t limit, mt_store_job **out, size_t *n, mt_err *err);

/*
 * Move a job to to_state, in one transaction that updates the job row (state,
 * reason, updated_at_ms = now_ms; restarts + 1 when to_state is RESTARTING;
 * error = reason when to_state is FAILED; the diagnosis is kept when to_state is STALLED,
 * RESTARTING or SCHEDULED and cleared otherwise) AND appends a job event
 * (now_ms, to_state, reason). expected_from (NULL = any) guards against races:
 * the job must currently be in that state. reason may be NULL ("").
 * Codes: NOT_FOUND (no such job), INVALID_ARGUMENT (unknown state name),
 * FAILED_PRECONDITION (current state != expected_from, or the transition is
 * not allowed by mt_jobstate_can_transition: the message names both states).
 * Nothing changes on failure.
 */
mt_code mt_store_job_transition(mt_store *s, const char *job_id, const char *expected_from,
                                const char *to_state, const char *reason, int64_t now_ms,
                                mt_err *err);

/* Number of jobs in each state, indexed by mt_jobstate (counts[MT_JOBSTATE_QUEUED] ...),
 * for status pages and Prometheus gauges; one indexed scan. counts has MT_JOBSTATE_COUNT
 * entries (8); stored states this build does not know are not counted. */
mt_code mt_store_job_counts(mt_store *s, size_t counts[8], mt_err *err);

/* Record training progress: job.step = step, updated_at_ms = now_ms. No event. NOT_FOUND. */
mt_code mt_store_job_set_step(mt_store *s, const char *job_id, uint64_t step, int64_t now_ms,
                              mt_err *err);

/* Change the job's status reason without a transition ("waiting for 8 devices, 4 free"),
 * updated_at_ms = now_ms. No event. NOT_FOUND. */
mt_code mt_store_job_set_reason(mt_store *s, const char *job_id, const char *reason, int64_t now_ms,
                                mt_err *err);

/* Set the job's fault diagnosis (borrowed; NULL or "" clears it), updated_at_ms = now_ms. No
 * event. NOT_FOUND. */
mt_code mt_store_job_set_diagnosis(mt_store *s, const char *job_id, const char *diagnosis,
                                   int64_t now_ms, mt_err *err);

typedef struct mt_store_job_event {
    int64_t time_ms;  /* unix ms */
    char state[16];   /* the state entered */
    char reason[256]; /* why */
    uint64_t step;    /* the job's step (mt_store_job_set_step) when it happened: where a
                         restart marker goes on a metrics chart */
} mt_store_job_event;

/* The job's events in the order they happened. *out owned (mt_store_job_events_free), NULL
 * when *n == 0. Codes: NOT_FOUND (no such job), RESOURCE_EXHAUSTED. */
mt_code mt_store_job_events(mt_store *s, const char *job_id, mt_store_job_event **out, size_t *n,
                            mt_err *err);
void mt_store_job_events_free(mt_store_job_event *events);

/* ------------------------------------------------------------------ worker log lines */

#define MT_STORE_JOB_LOG_KEEP 5000 /* lines kept per job: the newest */
#define MT_STORE_LOG_TEXT_MAX 1000 /* bytes of one line's text */

typedef struct mt_store_log_line {
    int64_t id; /* arrival order within the store (read only) */
    char worker_id[64];
    uint32_t attempt;
    uint64_t seq;    /* the worker's number of the line within (job, attempt), from 1 */
    int64_t time_ms; /* wall time on the worker */
    char level[8];   /* "debug" | "info" | "warn" | "error" */
    char text[MT_STORE_LOG_TEXT_MAX + 1];
} mt_store_log_line;

/*
 * Append lines[0..n) that worker_id logged during attempt `attempt` of job_id (their id is
 * ignored). A line whose (worker, attempt, seq) is stored already is skipped, so a report
 * sent twice stores each line once; the job then keeps its newest MT_STORE_JOB_LOG_KEEP
 * lines. One call is one commit unless inside mt_store_tx_begin. Codes: NOT_FOUND (no such
 * job), INVALID_ARGUMENT (unterminated text/level/worker), store errors.
 */
mt_code mt_store_job_log_insert(mt_store *s, const char *job_id, const char *worker_id,
                                uint32_t attempt, const mt_store_log_line *lines, size_t n,
                                mt_err *err);

/*
 * The job's lines with id > after_id, oldest first, at most limit (0: 1000). *out owned
 * (mt_store_job_log_free), NULL when *n == 0. Codes: NOT_FOUND (no such job), store errors.
 */
mt_code mt_store_job_log_page(mt_store *s, const char *job_id, int64_t after_id, size_t limit,
                              mt_store_log_line **out, size_t *n, mt_err *err);
void mt_store_job_log_free(mt_store_log_line *lines);

/* ---- state digests (issue 18; docs/reproducibility.md) ---- */

typedef struct mt_store_digest {
    uint64_t step;   /* < 2^63 */
    char digest[65]; /* 64 lower-case hex digits */
    int64_t time_ms; /* wall time on the worker */
} mt_store_digest;

/*
 * Store the digests d[0..n) of job_id; a step stored already is replaced (a step redone after a
 * restart keeps the newest). One call is one commit unless inside mt_store_tx_begin. Codes:
 * NOT_FOUND (no such job), INVALID_ARGUMENT (a digest not 64 lower-case hex digits, a step
 * >= 2^63), store errors.
 */
mt_code mt_store_job_digests_put(mt_store *s, const char *job_id, const mt_store_digest *d,
                                 size_t n, mt_err *err);

/* The digests of job_id with step >= since_step by ascending step, at most limit (0: 10000);
 * *out owned (mt_free), NULL when *n == 0. Codes: NOT_FOUND (no such job), store errors. */
mt_code mt_store_job_digests(mt_store *s, const char *job_id, uint64_t since_step, size_t limit,
                             mt_store_digest **out, size_t *n, mt_err *err);

/* The digest of job_id's highest step into *out; *found false (and *out zeroed) when it has
 * none. Codes: NOT_FOUND (no such job), store errors. */
mt_code mt_store_job_digest_latest(mt_store *s, const char *job_id, mt_store_digest *out,
                                   bool *found, mt_err *err);

#define MT_STORE_MAX_MESH_DIMS 8

typedef struct mt_store_placement {
    uint32_t device;                         /* global device index in the job's mesh */
    char worker_id[64];                      /* worker that runs it */
    uint32_t local_index;                    /* device index inside that worker */
    uint32_t coords[MT_STORE_MAX_MESH_DIMS]; /* mesh coordinates */
    uint32_t n_coords;                       /* <= MT_STORE_MAX_MESH_DIMS */
    char task_state[16]; /* read only: the final state of this worker's task that the
                            coordinator acknowledged (mt_store_job_set_task_state), "" none */
} mt_store_placement;

/* Replace the job's placement with p[0..n) (n == 0 clears it), one transaction. Borrows p.
 * Codes: NOT_FOUND (no such job), INVALID_ARGUMENT (duplicate device, n_coords too big,
 * empty worker_id). */
mt_code mt_store_job_set_placement(mt_store *s, const char *job_id, const mt_store_placement *p,
                                   size_t n, mt_err *err);

/* The job's placement ordered by device. *out owned (mt_store_placement_free), NULL when
 * *n == 0 (no placement is not an error). Codes: NOT_FOUND (no such job). */
mt_code mt_store_job_placement(mt_store *s, const char *job_id, mt_store_placement **out, size_t *n,
                               mt_err *err);
void mt_store_placement_free(mt_store_placement *p);

/* Record state ("succeeded") as the final state of worker_id's task in job_id's current
 * placement (every row of that worker), one transaction; a new placement clears it. The
 * coordinator writes it before it acknowledges the worker's report (the worker then forgets the
 * task), so a restart reads it back (mt_store_placement.task_state). Codes: INVALID_ARGUMENT
 * (NULL argument), NOT_FOUND (the worker has no device in the job's placement), store errors. */
mt_code mt_store_job_set_task_state(mt_store *s, const char *job_id, const char *worker_id,
                                    const char *state, mt_err *err);

/* Ids of the jobs that have at least one device placed on worker_id (to fail them over when
 * the worker is lost), in submission order. *out is an owned array of *n ids
 * (mt_store_job_ids_free). Unknown worker -> OK with *n == 0. */
typedef struct mt_store_job_id {
    char id[32];
} mt_store_job_id;
mt_code mt_store_jobs_on_worker(mt_store *s, const char *worker_id, mt_store_job_id **out,
                                size_t *n, mt_err *err);
void mt_store_job_ids_free(mt_store_job_id *ids);

/* ------------------------------------------------------------------ metrics */

typedef struct mt_store_metric {
    uint64_t step;   /* training step (< 2^63) */
    uint32_t epoch;  /* epoch of the step */
    char name[64];   /* "loss", "accuracy" ... */
    double value;    /* NaN and infinities are kept */
    int64_t time_ms; /* unix ms when measured */
} mt_store_metric;

/*
 * Store pts[0..n) for job_id in ONE transaction. A point with the same
 * (job, step, name) as a stored one REPLACES it (steps redone after a restart).
 * All or nothing. Borrows pts. n == 0 is OK. Throughput comes from batch size:
 * each call is one commit (one fsync); to store several reports (jobs) with
 * one commit, wrap the calls in mt_store_tx_begin/mt_store_tx_commit.
 * Codes: NOT_FOUND (no such job), INVALID_ARGUMENT (empty or unterminated name,
 * step >= 2^63), store errors.
 */
mt_code mt_store_metrics_insert(mt_store *s, const char *job_id, const mt_store_metric *pts,
                                size_t n, mt_err *err);

/* A stored point as mt_store_metrics_scan hands it to its callback. */
typedef struct mt_store_metric_ref {
    uint64_t step;
    uint32_t epoch;
    const char *name; /* borrowed: valid during the callback only */
    double value;     /* NaN when stored as NaN */
    int64_t time_ms;
} mt_store_metric_ref;

/* Called once per point; returning anything but MT_OK stops the scan with that code. */
typedef mt_code (*mt_store_metric_fn)(void *arg, const mt_store_metric_ref *p);

/*
 * Call fn(arg, point) for each point of job_id with step >= since_step, series by series:
 * the metric names in byte (strcmp) order, each series by ascending step. Only the names in
 * names[0..n_names) when n_names > 0 (NULL entries skipped, duplicates scanned once, unknown
 * names give nothing); at most limit points per series (0 = no limit). Each series is one
 * range seek on the (job_id, name, step) primary key, so a names filter or a since_step near
 * the end reads only the points it returns; all series come from one read snapshot. Nothing
 * is copied or allocated per point. Borrows names. An unknown job gives OK with no calls.
 * Codes: INVALID_ARGUMENT (s, job_id or fn NULL, names NULL with n_names > 0), the code fn
 * returned to stop (err untouched by the store then), store errors.
 */
mt_code mt_store_metrics_scan(mt_store *s, const char *job_id, uint64_t since_step,
                              const char *const *names, size_t n_names, size_t limit,
                              mt_store_metric_fn fn, void *arg, mt_err *err);

/*
 * Points of job_id with step >= since_step, ordered by step then name; only
 * the names in names[0..n_names) when n_names > 0; at most limit points
 * (0 = no limit). *out owned (mt_store_metrics_free), NULL when *n == 0.
 * An unknown job gives OK with no points (the caller checks the job).
 * Codes: INVALID_ARGUMENT (names NULL with n_names > 0), RESOURCE_EXHAUSTED.
 */
mt_code mt_store_metrics_query(mt_store *s, const char *job_id, uint64_t since_step,
                               const char *const *names, size_t n_names, size_t limit,
                               mt_store_metric **out, size_t *n, mt_err *err);

/* The point with the highest step for each metric name of job_id, ordered by name.
 * Ownership and codes as mt_store_metrics_query. */
mt_code mt_store_metrics_latest(mt_store *s, const char *job_id, mt_store_metric **out, size_t *n,
                                mt_err *err);

/* Delete job_id's points with step > after_step (the steps a restart will redo or never
 * reach again). *deleted (may be NULL) gets the count. OK for an unknown job. */
mt_code mt_store_metrics_truncate(mt_store *s, const char *job_id, uint64_t after_step,
                                  size_t *deleted, mt_err *err);

void mt_store_metrics_free(mt_store_metric *pts);

/* ------------------------------------------------------------------ checkpoints */

typedef struct mt_store_checkpoint {
    uint64_t step;       /* training step the checkpoint holds */
    char location[512];  /* file path (under the state dir) or URL */
    uint64_t size_bytes; /* size of the file */
    char checksum[96];   /* "crc32:..." / "sha256:..." as the caller computes it */
    bool complete;       /* the file is fully written, fsynced and verified */
    int64_t time_ms;     /* unix ms of the last change */
} mt_store_checkpoint;

/*
 * Record a checkpoint of job_id that is being written: complete is stored as
 * false whatever c->complete says. A record for the same (job, step) that is
 * not complete is replaced (a retried upload). Borrows c.
 * Codes: NOT_FOUND (no such job), ALREADY_EXISTS (a complete checkpoint of that
 * step exists), INVALID_ARGUMENT (empty/unterminated location or checksum).
 */
mt_code mt_store_checkpoint_insert(mt_store *s, const char *job_id, const mt_store_checkpoint *c,
                                   mt_err *err);

/* Mark (job_id, step) complete with its final size and checksum (checksum borrowed;
 * NULL keeps the stored one), time_ms = now_ms. NOT_FOUND when no such record. */
mt_code mt_store_checkpoint_complete(mt_store *s, const char *job_id, uint64_t step,
                                     uint64_t size_bytes, const char *checksum, int64_t now_ms,
                                     mt_err *err);

/* Delete the record of (job_id, step) if it is not complete: an upload that failed leaves no
 * pending row. OK also when there is none (or it is complete: kept). */
mt_code mt_store_checkpoint_drop_incomplete(mt_store *s, const char *job_id, uint64_t step,
                                            mt_err *err);

/* Mark (job_id, step) incomplete again: its file failed verification (a restart or an export
 * then uses an older complete one; the file is deleted by the next start's orphan sweep, and a
 * new upload of that step replaces the record). NOT_FOUND when no such record. */
mt_code mt_store_checkpoint_set_corrupt(mt_store *s, const char *job_id, uint64_t step,
                                        int64_t now_ms, mt_err *err);

/* All checkpoint records of job_id (complete or not) by step ascending. *out owned
 * (mt_store_checkpoints_free), NULL when *n == 0; unknown job -> OK, 0. */
mt_code mt_store_checkpoint_list(mt_store *s, const char *job_id, mt_store_checkpoint **out,
                                 size_t *n, mt_err *err);

/* The complete checkpoint with the highest step into *out. NOT_FOUND when none. */
mt_code mt_store_checkpoint_latest(mt_store *s, const char *job_id, mt_store_checkpoint *out,
                                   mt_err *err);

/* The record of (job_id, step) into *out, complete or not. NOT_FOUND when none. */
mt_code mt_store_checkpoint_get(mt_store *s, const char *job_id, uint64_t step,
                                mt_store_checkpoint *out, mt_err *err);

/*
 * Keep-N garbage collection, one transaction: keep the `keep` complete
 * checkpoints with the highest steps; delete the records of older complete
 * ones and of incomplete ones older than the oldest kept (abandoned uploads).
 * Incomplete records newer than that are kept (uploads in progress). On OK
 * *locations is an owned array of the *n deleted records' locations (the caller
 * deletes the files; free with mt_store_strings_free), NULL when *n == 0.
 * With keep > 0 the best checkpoint is kept too: the step that the job's latest
 * "best_step" metric point names (validation.best; the worker uploads the best
 * checkpoint as that step's), however old it is.
 * keep == 0 keeps nothing complete (and deletes every incomplete record).
 * Codes: RESOURCE_EXHAUSTED (nothing is deleted then), store errors.
 */
mt_code mt_store_checkpoint_gc(mt_store *s, const char *job_id, size_t keep, char ***locations,
                               size_t *n, mt_err *err);

void mt_store_checkpoints_free(mt_store_checkpoint *c);

/* Free an array of n owned strings and the array. NULL is a no-op. */
void mt_store_strings_free(char **strs, size_t n);

#endif
