/* SPDX-License-Identifier: MIT */
/*
 * store_int.h — private to storage/: the mt_store struct, the table of
 * prepared statements and the helpers every store_*.c file shares.
 *
 * Invariant: every statement in MT_STORE_STMTS is prepared once in
 * mt_store_open_opts() (after migrations) and finalized in mt_store_close();
 * a function resets its statement (store_stmt) before binding, so no statement
 * is left half-stepped between calls.
 * Threading: as mt_store (one thread at a time).
 */
#ifndef MT_STORE_INT_H
#define MT_STORE_INT_H

#include <sqlite3.h>

#include "storage/mt_store.h"

/* X(id, sql): every statement the store runs after open. */
#define MT_STORE_STMTS(X)                                                                          \
    X(SAVEPOINT, "SAVEPOINT mt_call")                                                              \
    X(RELEASE, "RELEASE mt_call")                                                                  \
    X(ROLLBACK_TO, "ROLLBACK TO mt_call")                                                          \
    X(BEGIN, "BEGIN IMMEDIATE")                                                                    \
    X(COMMIT, "COMMIT")                                                                            \
    X(ROLLBACK, "ROLLBACK")                                                                        \
    X(WORKER_UPSERT,                                                                               \
      "INSERT INTO workers(worker_id, name, instance_id, host, pid, state, data_address,"          \
      " version, registered_at_ms, last_heartbeat_ms) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)"     \
      " ON CONFLICT(worker_id) DO UPDATE SET name=excluded.name,"                                  \
      " instance_id=excluded.instance_id, host=excluded.host, pid=excluded.pid,"                   \
      " state=excluded.state, data_address=excluded.data_address, version=excluded.version,"       \
      " registered_at_ms=excluded.registered_at_ms, last_heartbeat_ms=excluded.last_heartbeat_ms") \
    X(DEVICES_DELETE, "DELETE FROM devices WHERE worker_id=?1")                                    \
    X(DEVICE_INSERT, "INSERT INTO devices(worker_id, idx, kind, cores, memory_bytes, health)"      \
                     " VALUES (?1,?2,?3,?4,?5,?6)")                                                \
    X(WORKER_GET, "SELECT worker_id, name, instance_id, host, pid, state, data_address, version,"  \
                  " registered_at_ms, last_heartbeat_ms FROM workers WHERE worker_id=?1")          \
    X(WORKER_BY_NAME,                                                                              \
      "SELECT worker_id, name, instance_id, host, pid, state, data_address, version,"              \
      " registered_at_ms, last_heartbeat_ms FROM workers WHERE name=?1"                            \
      " ORDER BY registered_at_ms DESC, worker_id DESC LIMIT 1")                                   \
    X(WORKER_LIST, "SELECT worker_id, name, instance_id, host, pid, state, data_address, version," \
                   " registered_at_ms, last_heartbeat_ms FROM workers"                             \
                   " WHERE ?1 IS NULL OR state=?1 ORDER BY name, worker_id")                       \
    X(DEVICES_OF, "SELECT kind, idx, cores, memory_bytes, health FROM devices WHERE worker_id=?1"  \
                  " ORDER BY idx")                                                                 \
    X(DEVICES_ALL, "SELECT worker_id, kind, idx, cores, memory_bytes, health FROM devices"         \
                   " ORDER BY worker_id, idx")                                                     \
    X(WORKER_HEARTBEAT, "UPDATE workers SET last_heartbeat_ms=?2 WHERE worker_id=?1")              \
    X(WORKER_SET_STATE, "UPDATE workers SET state=?2 WHERE worker_id=?1")                          \
    X(WORKER_DELETE, "DELETE FROM workers WHERE worker_id=?1")

#define MT_STORE_STMT_ENUM(id, sql) MT_STMT_##id,
enum mt_store_stmt_id { MT_STORE_STMTS(MT_STORE_STMT_ENUM) MT_STMT_COUNT };
#undef MT_STORE_STMT_ENUM

struct mt_store {
    sqlite3 *db;                       /* the connection */
    char *path;                        /* owned copy of the path */
    int schema_version;                /* PRAGMA user_version after open */
    int readonly;                      /* opened with mt_store_open_readonly */
    int in_tx;                         /* mt_store_tx_begin is open */
    sqlite3_stmt *stmt[MT_STMT_COUNT]; /* prepared once at open */
};

/* The statement id, reset and with its bindings cleared, ready to bind. */
sqlite3_stmt *mt_store__stmt(mt_store *s, enum mt_store_stmt_id id);

/* Translate a SQLite result code to an mt_code (no message). */
mt_code mt_store__code(int rc);

/* Set err from the connection's last error: "<what>: <sqlite text>"; returns the code.
 * Call right after the failing sqlite call (before any other call on the connection). */
mt_code mt_store__fail(mt_store *s, int rc, mt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Run a statement that returns no rows to completion; SQLITE_DONE -> MT_OK. */
int mt_store__step_done(sqlite3_stmt *st);

/* Open a savepoint around one call (a transaction when none is open). */
mt_code mt_store__call_begin(mt_store *s, mt_err *err);
/* End the call's savepoint: release when rc == MT_OK, else roll it back. Returns rc,
 * or the release's error code when rc was OK and the release (commit) failed. */
mt_code mt_store__call_end(mt_store *s, mt_code rc, mt_err *err);

/* Reset st and clear its bindings: every function calls this on each statement it
 * stepped before returning, so no read transaction stays open between calls. */
void mt_store__stmt_done(sqlite3_stmt *st);

/* Bind a text (NULL binds SQL NULL) as SQLITE_STATIC: v must stay valid until the
 * statement is done (mt_store__stmt_done), which every function does before returning. */
int mt_store__bind_text(sqlite3_stmt *st, int i, const char *v);

/* Copy column col of the current row into dst[cap], truncating, always terminated. */
void mt_store__col_text(sqlite3_stmt *st, int col, char *dst, size_t cap);

/* 1 when s is NUL-terminated within cap bytes. */
int mt_store__terminated(const char *s, size_t cap);

#endif
