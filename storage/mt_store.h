/* SPDX-License-Identifier: MIT */
/*
 * mt_store.h — the coordinator's durable state in SQLite: workers and their
 * devices (more tables — jobs, metrics, checkpoints — follow in this header).
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
 * Tests: tests/unit/test_store.c.
 */
#ifndef MT_STORE_H
#define MT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

typedef struct mt_store mt_store;

/* The schema version this build creates and understands (PRAGMA user_version). */
#define MT_STORE_SCHEMA_VERSION 1

/* Options for mt_store_open_opts(). Initialise with MT_STORE_OPTIONS_DEFAULTS. */
typedef struct mt_store_options {
    int readonly;        /* 1: read-only connection, no migrations (see mt_store_open_readonly) */
    int sync_full;       /* 1: synchronous=FULL (default; survives power loss), 0: NORMAL
                            (survives kill -9 only, fewer fsyncs) */
    int busy_timeout_ms; /* how long a statement waits for a lock held by another connection */
} mt_store_options;

#define MT_STORE_OPTIONS_DEFAULTS                                                                  \
    {                                                                                              \
        0, 1, 2000                                                                                 \
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
 * versions; file is not a database; not a meshtrain database), UNAVAILABLE
 * (cannot open or lock the file), PERMISSION_DENIED, DATA_LOSS (corrupt file),
 * RESOURCE_EXHAUSTED, INVALID_ARGUMENT (path NULL/empty), INTERNAL.
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
 * Codes as mt_store_open, plus UNAVAILABLE when the file does not exist.
 */
mt_code mt_store_open_readonly(const char *path, mt_store **out, mt_err *err);

/* Finalize every statement and close the database. NULL is a no-op. */
void mt_store_close(mt_store *s);

/* The schema version of the open database (== MT_STORE_SCHEMA_VERSION). */
int mt_store_schema_version(const mt_store *s);

/* The path the store was opened with (borrowed, valid until close). */
const char *mt_store_path(const mt_store *s);

/*
 * Group several calls into one transaction (one fsync): mt_store_tx_begin, any
 * number of store calls, then mt_store_tx_commit (or mt_store_tx_rollback).
 * Calls inside keep their own all-or-nothing behaviour through savepoints; a
 * failed call inside does not end the outer transaction. Nesting is not
 * allowed: begin while a transaction is open -> FAILED_PRECONDITION; commit or
 * rollback without one -> FAILED_PRECONDITION. Nothing is durable before commit.
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

#endif
