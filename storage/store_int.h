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

/* Column lists shared by a statement and the row reader that decodes it. */
#define JOB_COLUMNS                                                                                \
    "id, name, state, priority, submitted_at_ms, updated_at_ms, step, total_steps, reason,"        \
    " error, restarts, mesh, devices, diagnosis"
#define JOB_N_COLUMNS 14 /* the columns of JOB_COLUMNS; a statement's spec_json follows them */
#define CKPT_COLUMNS  "step, location, size_bytes, checksum, complete, time_ms"

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
    X(WORKER_DELETE, "DELETE FROM workers WHERE worker_id=?1")                                     \
    X(DEVICE_SET_HEALTH, "UPDATE devices SET health=?3 WHERE worker_id=?1 AND idx=?2")             \
    X(JOB_INSERT,                                                                                  \
      "INSERT INTO jobs(seq, id, name, spec_json, state, priority, submitted_at_ms,"               \
      " updated_at_ms, total_steps, request_id, mesh, devices) SELECT n, printf('job-%06d', n),"   \
      " ?1, ?2, 'QUEUED', ?3, ?4, ?4,"                                                             \
      " ?5, NULLIF(?6, ''), ?7, ?8 FROM (SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM jobs)"         \
      " RETURNING id")                                                                             \
    X(JOBS_UNSUMMARISED, "SELECT id FROM jobs WHERE devices = 0 ORDER BY seq")                     \
    X(JOB_SET_SUMMARY, "UPDATE jobs SET mesh=?2, devices=?3 WHERE id=?1")                          \
    X(JOB_COLUMNS_GET, "SELECT " JOB_COLUMNS ", spec_json FROM jobs WHERE id=?1")                  \
    X(JOB_BY_REQUEST, "SELECT " JOB_COLUMNS ", spec_json FROM jobs WHERE request_id=?1")           \
    X(JOB_LIST, "SELECT " JOB_COLUMNS ", NULL FROM jobs WHERE ?1 IS NULL OR"                       \
                " instr(',' || ?1 || ',', ',' || state || ',') > 0 ORDER BY priority DESC, seq")   \
    X(JOB_PAGE,                                                                                    \
      "SELECT " JOB_COLUMNS ", NULL FROM jobs INDEXED BY jobs_by_order WHERE"                      \
      " (?1 IS NULL OR instr(',' || ?1 || ',', ',' || state || ',') > 0) AND (?2 IS NULL"          \
      " OR priority < ?2 OR (priority = ?2 AND seq > ?3)) ORDER BY priority DESC, seq"             \
      " LIMIT ?4")                                                                                 \
    X(JOB_COUNTS, "SELECT state, count(*) FROM jobs GROUP BY state")                               \
    X(JOB_STATE, "SELECT state FROM jobs WHERE id=?1")                                             \
    X(JOB_TRANSITION, "UPDATE jobs SET state=?2, reason=?3, updated_at_ms=?4,"                     \
                      " restarts=restarts+?5, error=CASE WHEN ?6 THEN ?3 ELSE error END,"          \
                      " diagnosis=CASE WHEN ?2 IN ('STALLED', 'RESTARTING', 'SCHEDULED')"          \
                      " THEN diagnosis ELSE '' END"                                                \
                      " WHERE id=?1")                                                              \
    X(EVENT_INSERT, "INSERT INTO job_events(job_id, time_ms, state, reason, step)"                 \
                    " SELECT ?1, ?2, ?3, ?4, step FROM jobs WHERE id=?1")                          \
    X(EVENT_LIST, "SELECT time_ms, state, reason, step FROM job_events WHERE job_id=?1"            \
                  " ORDER BY seq")                                                                 \
    X(LOG_INSERT, "INSERT OR IGNORE INTO job_logs(job_id, worker_id, attempt, seq, time_ms,"       \
                  " level, text) VALUES (?1,?2,?3,?4,?5,?6,?7)")                                   \
    X(LOG_TRIM, "DELETE FROM job_logs WHERE job_id=?1 AND id <= (SELECT id FROM job_logs"          \
                " WHERE job_id=?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)")                            \
    X(LOG_PAGE, "SELECT id, worker_id, attempt, seq, time_ms, level, text FROM job_logs"           \
                " WHERE job_id=?1 AND id>?2 ORDER BY id LIMIT ?3")                                 \
    X(DIGEST_UPSERT, "INSERT OR REPLACE INTO job_digests(job_id, step, digest, time_ms)"           \
                     " VALUES (?1,?2,?3,?4)")                                                      \
    X(DIGEST_LIST, "SELECT step, digest, time_ms FROM job_digests WHERE job_id=?1 AND step>=?2"    \
                   " ORDER BY step LIMIT ?3")                                                      \
    X(DIGEST_LATEST, "SELECT step, digest, time_ms FROM job_digests WHERE job_id=?1"               \
                     " ORDER BY step DESC LIMIT 1")                                                \
    X(JOB_SET_STEP, "UPDATE jobs SET step=?2, updated_at_ms=?3 WHERE id=?1")                       \
    X(JOB_SET_REASON, "UPDATE jobs SET reason=?2, updated_at_ms=?3 WHERE id=?1")                   \
    X(JOB_SET_DIAGNOSIS, "UPDATE jobs SET diagnosis=?2, updated_at_ms=?3 WHERE id=?1")             \
    X(PLACEMENT_DELETE, "DELETE FROM placements WHERE job_id=?1")                                  \
    X(PLACEMENT_INSERT, "INSERT INTO placements(job_id, device, worker_id, local_index, coords)"   \
                        " VALUES (?1,?2,?3,?4,?5)")                                                \
    X(PLACEMENT_LIST, "SELECT device, worker_id, local_index, coords, task_state FROM placements"  \
                      " WHERE job_id=?1 ORDER BY device")                                          \
    X(PLACEMENT_TASK_STATE,                                                                        \
      "UPDATE placements SET task_state=?3 WHERE job_id=?1 AND worker_id=?2")                      \
    X(JOBS_ON_WORKER,                                                                              \
      "SELECT j.id FROM jobs j WHERE j.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND"      \
      " EXISTS (SELECT 1 FROM placements p WHERE p.job_id=j.id AND p.worker_id=?1)"                \
      " ORDER BY j.seq")                                                                           \
    X(METRIC_UPSERT, "INSERT INTO metrics(job_id, step, name, epoch, value, time_ms)"              \
                     " VALUES (?1,?2,?3,?4,?5,?6) ON CONFLICT(job_id, name, step) DO UPDATE SET"   \
                     " epoch=excluded.epoch, value=excluded.value, time_ms=excluded.time_ms")      \
    X(METRIC_NAMES, "SELECT name FROM metrics_latest WHERE job_id=?1 ORDER BY name")               \
    X(METRIC_SERIES, /* one range seek on the (job_id, name, step) primary key */                  \
      "SELECT step, epoch, value, time_ms FROM metrics WHERE job_id=?1 AND name=?2 AND step>=?3"   \
      " ORDER BY step LIMIT ?4")                                                                   \
    X(METRIC_LATEST_UPSERT, /* keeps the point with the highest step per (job, name) */            \
      "INSERT INTO metrics_latest(job_id, name, step, epoch, value, time_ms)"                      \
      " VALUES (?1,?2,?3,?4,?5,?6) ON CONFLICT(job_id, name) DO UPDATE SET step=excluded.step,"    \
      " epoch=excluded.epoch, value=excluded.value, time_ms=excluded.time_ms"                      \
      " WHERE excluded.step >= metrics_latest.step")                                               \
    X(METRIC_LATEST, "SELECT step, epoch, name, value, time_ms FROM metrics_latest"                \
                     " WHERE job_id=?1 ORDER BY name")                                             \
    X(METRIC_TRUNCATE, "DELETE FROM metrics WHERE job_id=?1 AND step>?2")                          \
    X(METRIC_LATEST_DROP, /* names with no point left */                                           \
      "DELETE FROM metrics_latest WHERE job_id=?1 AND step>?2 AND NOT EXISTS (SELECT 1"            \
      " FROM metrics m WHERE m.job_id=?1 AND m.name=metrics_latest.name)")                         \
    X(METRIC_LATEST_REDO, /* the others fall back to their highest remaining step */               \
      "UPDATE metrics_latest SET (step, epoch, value, time_ms) = (SELECT step, epoch, value,"      \
      " time_ms FROM metrics m WHERE m.job_id=?1 AND m.name=metrics_latest.name"                   \
      " ORDER BY step DESC LIMIT 1) WHERE job_id=?1 AND step>?2")                                  \
    X(CKPT_COMPLETE_OF, "SELECT complete FROM checkpoints WHERE job_id=?1 AND step=?2")            \
    X(CKPT_UPSERT, "INSERT OR REPLACE INTO checkpoints(job_id, step, location, size_bytes,"        \
                   " checksum, complete, time_ms) VALUES (?1,?2,?3,?4,?5,0,?6)")                   \
    X(CKPT_COMPLETE, "UPDATE checkpoints SET complete=1, size_bytes=?3,"                           \
                     " checksum=COALESCE(?4, checksum), time_ms=?5 WHERE job_id=?1 AND step=?2")   \
    X(CKPT_DROP_INCOMPLETE, "DELETE FROM checkpoints WHERE job_id=?1 AND step=?2 AND complete=0")  \
    X(CKPT_SET_CORRUPT, "UPDATE checkpoints SET complete=0, time_ms=?3 WHERE job_id=?1 AND"        \
                        " step=?2")                                                                \
    X(CKPT_LIST, "SELECT " CKPT_COLUMNS " FROM checkpoints WHERE job_id=?1 ORDER BY step")         \
    X(CKPT_LATEST, "SELECT " CKPT_COLUMNS " FROM checkpoints WHERE job_id=?1 AND complete=1"       \
                   " ORDER BY step DESC LIMIT 1")                                                  \
    X(CKPT_GET, "SELECT " CKPT_COLUMNS " FROM checkpoints WHERE job_id=?1 AND step=?2")            \
    /* older than the oldest of the newest ?2 complete ones; with ?2 > 0 not the best one (the     \
       step of the job's latest "best_step" point, validation.best) */                             \
    X(CKPT_GC_VICTIMS,                                                                             \
      "SELECT step, location FROM checkpoints WHERE job_id=?1 AND step < COALESCE("                \
      "(SELECT MIN(step) FROM (SELECT step FROM checkpoints WHERE job_id=?1 AND complete=1"        \
      " ORDER BY step DESC LIMIT ?2)), CASE WHEN ?2=0 THEN (SELECT MAX(step)+1 FROM checkpoints"   \
      " WHERE job_id=?1) ELSE -1 END)"                                                             \
      " AND NOT (?2 > 0 AND step IS (SELECT CAST(value AS INTEGER) FROM metrics_latest"            \
      " WHERE job_id=?1 AND name='best_step')) ORDER BY step")                                     \
    X(CKPT_DELETE, "DELETE FROM checkpoints WHERE job_id=?1 AND step=?2")

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

/* ABORTED when the caller's mt_store_tx_begin transaction was rolled back by SQLite; every
 * write runs this first (mt_store__call_begin does). */
mt_code mt_store__tx_guard(mt_store *s, mt_err *err);

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

/* Ensure room for element `count` in *arr (elements of `elem` bytes, capacity *cap, grown by
 * doubling from 16 with mt_realloc). Returns 0, or -1 with *arr unchanged when allocation fails. */
int mt_store__grow(void **arr, size_t *cap, size_t count, size_t elem);

/* Decode the current row of st into *elem (zeroed first by the caller). */
typedef void (*mt_store__row_fn)(sqlite3_stmt *st, void *elem);

/* Step st (bound by the caller) to the end, decoding each row with `read` into a growing
 * array of elem-byte elements; then mt_store__stmt_done(st). On OK *out is an owned array
 * (NULL when *n == 0). On failure *out = NULL, *n = 0, err says "<what>: ..."; the decoded
 * elements must own no memory (the array alone is freed). */
mt_code mt_store__collect(mt_store *s, sqlite3_stmt *st, size_t elem, mt_store__row_fn read,
                          void **out, size_t *n, const char *what, mt_err *err);

/* NOT_FOUND ("<what>: job <id> not found") unless the job exists. */
mt_code mt_store__need_job(mt_store *s, const char *job_id, const char *what, mt_err *err);

/* Check an optional borrowed string key; INVALID_ARGUMENT naming `what` when NULL. */
mt_code mt_store__need(const char *v, const char *what, mt_err *err);

/* 1 when s is NUL-terminated within cap bytes. */
int mt_store__terminated(const char *s, size_t cap);

#endif
