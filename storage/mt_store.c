/* SPDX-License-Identifier: MIT */
/*
 * mt_store.c — open/close, schema migrations, transactions and the SQLite
 * error translation of the coordinator's store (mt_store.h).
 *
 * DESIGN. The schema is an ordered array of migration scripts; script i
 * brings a database from user_version i to i + 1 and runs in its own
 * transaction together with the user_version bump, so a crash mid-migration
 * leaves the previous version intact. A database with a higher user_version
 * than the array knows was written by a newer meshtrain and is refused rather
 * than guessed at. Every statement the store uses is prepared once, after the
 * migrations, and reset after each call (store_int.h). Durability: WAL plus
 * synchronous=FULL by default means COMMIT returns only after the WAL frame is
 * fsynced; the coordinator replies after the call returns (docs/storage.md).
 *
 * Threading: one thread at a time per mt_store (SQLITE_OPEN_NOMUTEX).
 * Tests: tests/unit/test_store.c, tests/unit/test_store_crash.c.
 */
#include "storage/store_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"

/* 'MTRN': marks a database as meshtrain's (PRAGMA application_id). */
#define MT_STORE_APP_ID 0x4d54524e

/*
 * Migration scripts: migrations[i] takes user_version i to i + 1. Append only;
 * never edit a script that has shipped (databases in the field ran it).
 */
static const char *const migrations[] = {
    /* 0 -> 1: workers and their devices */
    "CREATE TABLE workers ("
    " worker_id TEXT PRIMARY KEY NOT NULL,"
    " name TEXT NOT NULL,"
    " instance_id TEXT NOT NULL DEFAULT '',"
    " host TEXT NOT NULL DEFAULT '',"
    " pid INTEGER NOT NULL DEFAULT 0,"
    " state TEXT NOT NULL CHECK (state IN ('alive', 'lost')),"
    " data_address TEXT NOT NULL DEFAULT '',"
    " version TEXT NOT NULL DEFAULT '',"
    " registered_at_ms INTEGER NOT NULL,"
    " last_heartbeat_ms INTEGER NOT NULL);"
    "CREATE INDEX workers_by_name ON workers(name);"
    "CREATE TABLE devices ("
    " worker_id TEXT NOT NULL REFERENCES workers(worker_id) ON DELETE CASCADE,"
    " idx INTEGER NOT NULL,"
    " kind TEXT NOT NULL,"
    " cores INTEGER NOT NULL,"
    " memory_bytes INTEGER NOT NULL,"
    " health TEXT NOT NULL,"
    " PRIMARY KEY (worker_id, idx)) WITHOUT ROWID;",

    /* 1 -> 2: jobs, their events and placement, metrics, checkpoints */
    "CREATE TABLE jobs ("
    " seq INTEGER PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE,"
    " name TEXT NOT NULL DEFAULT '',"
    " spec_json TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " submitted_at_ms INTEGER NOT NULL,"
    " updated_at_ms INTEGER NOT NULL,"
    " step INTEGER NOT NULL DEFAULT 0,"
    " total_steps INTEGER NOT NULL DEFAULT 0,"
    " reason TEXT NOT NULL DEFAULT '',"
    " error TEXT NOT NULL DEFAULT '',"
    " restarts INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_by_state ON jobs(state, priority DESC, seq);"
    "CREATE TABLE job_events ("
    " seq INTEGER PRIMARY KEY,"
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " time_ms INTEGER NOT NULL,"
    " state TEXT NOT NULL,"
    " reason TEXT NOT NULL DEFAULT '',"
    " step INTEGER NOT NULL DEFAULT 0);" /* the job's step when it happened */
    "CREATE INDEX job_events_by_job ON job_events(job_id, seq);"
    "CREATE TABLE placements ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " device INTEGER NOT NULL,"
    " worker_id TEXT NOT NULL,"
    " local_index INTEGER NOT NULL,"
    " coords TEXT NOT NULL DEFAULT '',"
    " PRIMARY KEY (job_id, device)) WITHOUT ROWID;"
    "CREATE INDEX placements_by_worker ON placements(worker_id);"
    "CREATE TABLE metrics ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " epoch INTEGER NOT NULL DEFAULT 0,"
    " value REAL," /* NULL stands for NaN (SQLite stores NaN as NULL) */
    " time_ms INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, step, name)) WITHOUT ROWID;"
    "CREATE INDEX metrics_by_name ON metrics(job_id, name, step);"
    "CREATE TABLE checkpoints ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL,"
    " location TEXT NOT NULL,"
    " size_bytes INTEGER NOT NULL DEFAULT 0,"
    " checksum TEXT NOT NULL DEFAULT '',"
    " complete INTEGER NOT NULL DEFAULT 0 CHECK (complete IN (0, 1)),"
    " time_ms INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, step)) WITHOUT ROWID;",

    /* 2 -> 3: latest value per metric name kept in its own small table, updated once per
     * name per batch, instead of an index on every point (1.7 of 4.1 us CPU per point) */
    "CREATE TABLE metrics_latest ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " name TEXT NOT NULL,"
    " step INTEGER NOT NULL,"
    " epoch INTEGER NOT NULL DEFAULT 0,"
    " value REAL,"
    " time_ms INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, name)) WITHOUT ROWID;"
    "INSERT INTO metrics_latest(job_id, name, step, epoch, value, time_ms)"
    " SELECT job_id, name, MAX(step), epoch, value, time_ms FROM metrics GROUP BY job_id, name;"
    "DROP INDEX metrics_by_name;",

    /* 3 -> 4: a readable history of the schema versions next to PRAGMA user_version
     * (which stays the authority); migrate() adds one row per later migration */
    "CREATE TABLE schema_migrations ("
    " version INTEGER PRIMARY KEY,"
    " applied_at_ms INTEGER NOT NULL);"
    "WITH RECURSIVE v(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM v WHERE n < 4)"
    " INSERT INTO schema_migrations(version, applied_at_ms)"
    " SELECT n, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) FROM v;",

    /* 4 -> 5: metrics clustered by (job_id, name, step) instead of (job_id, step, name): the
     * primary key is then an index covering (job, name, step) at no cost per point (no second
     * B-tree), a names= filter reads only its series, and a series comes out in step order
     * for the columnar JSON; since_step seeks once per name (names from metrics_latest) */
    "CREATE TABLE metrics_v5 ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " name TEXT NOT NULL,"
    " step INTEGER NOT NULL,"
    " epoch INTEGER NOT NULL DEFAULT 0,"
    " value REAL," /* NULL stands for NaN */
    " time_ms INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, name, step)) WITHOUT ROWID;"
    "INSERT INTO metrics_v5(job_id, name, step, epoch, value, time_ms)"
    " SELECT job_id, name, step, epoch, value, time_ms FROM metrics ORDER BY job_id, name, step;"
    "DROP TABLE metrics;"
    "ALTER TABLE metrics_v5 RENAME TO metrics;",

    /* 5 -> 6: the client's request id (idempotency key) of a submit; NULL when none was sent.
     * Unique, so a retried submit finds the job its first attempt created (docs/jobs.md) */
    ("ALTER TABLE jobs ADD COLUMN request_id TEXT;"
     "CREATE UNIQUE INDEX jobs_by_request ON jobs(request_id);"),

    /* 6 -> 7: the listing order as an index, so a page of jobs (mt_store_job_page) reads its
     * rows in order and stops at the limit instead of sorting the whole table */
    "CREATE INDEX IF NOT EXISTS jobs_by_order ON jobs(priority DESC, seq);",

    /* 7 -> 8: what the coordinator needs of a spec, stored at submit so the spec text is not
     * parsed again (issue 17): the mesh text ("batch=4,model=2") and its device count. Rows
     * of older versions get devices 0 ("not summarised"); the coordinator fills them once at
     * open (mt_store_job_summarise_old). And the job's current fault diagnosis (issue 19,
     * fault 8: a silent worker, a stuck device, a broken link), "" none */
    ("ALTER TABLE jobs ADD COLUMN mesh TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE jobs ADD COLUMN devices INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE jobs ADD COLUMN diagnosis TEXT NOT NULL DEFAULT '';"),

    /* 8 -> 9: the lines workers logged while running a job's tasks (issue 21), in arrival
     * order (id); (job, worker, attempt, seq) unique so a report sent twice stores its lines
     * once; the newest MT_STORE_JOB_LOG_KEEP per job are kept */
    ("CREATE TABLE job_logs ("
     " id INTEGER PRIMARY KEY,"
     " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
     " worker_id TEXT NOT NULL,"
     " attempt INTEGER NOT NULL,"
     " seq INTEGER NOT NULL,"
     " time_ms INTEGER NOT NULL,"
     " level TEXT NOT NULL,"
     " text TEXT NOT NULL,"
     " UNIQUE (job_id, worker_id, attempt, seq));"
     "CREATE INDEX job_logs_by_job ON job_logs(job_id, id);"),

    /* 9 -> 10: the state digests a job's rank-0 worker reported (issue 18), one per step (a
     * step redone after a restart keeps the newest) */
    ("CREATE TABLE job_digests ("
     " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
     " step INTEGER NOT NULL,"
     " digest TEXT NOT NULL,"
     " time_ms INTEGER NOT NULL,"
     " PRIMARY KEY (job_id, step)) WITHOUT ROWID;"),

    /* 10 -> 11: a task's final state the coordinator acknowledged to its worker ("succeeded";
     * "" none), on every placement row of that worker. The worker forgets a final task once a
     * heartbeat carried it, so a coordinator restarted before the job's last task ended reads
     * it back here instead of waiting for a report that never comes */
    "ALTER TABLE placements ADD COLUMN task_state TEXT NOT NULL DEFAULT '';",
};

#define N_MIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

_Static_assert(N_MIGRATIONS == MT_STORE_SCHEMA_VERSION,
               "MT_STORE_SCHEMA_VERSION must equal the number of migrations");

static const char *const stmt_sql[MT_STMT_COUNT] = {
#define MT_STORE_STMT_SQL(id, sql) [MT_STMT_##id] = sql,
    MT_STORE_STMTS(MT_STORE_STMT_SQL)
#undef MT_STORE_STMT_SQL
};

mt_code mt_store__code(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return MT_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PROTOCOL:
        return MT_UNAVAILABLE;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return MT_PERMISSION_DENIED;
    case SQLITE_READONLY:
    case SQLITE_NOTADB:
    case SQLITE_SCHEMA:
        return MT_FAILED_PRECONDITION;
    case SQLITE_NOMEM:
    case SQLITE_FULL:
    case SQLITE_TOOBIG:
        return MT_RESOURCE_EXHAUSTED;
    case SQLITE_CORRUPT:
        return MT_DATA_LOSS;
    case SQLITE_CONSTRAINT:
        switch (rc) {
        case SQLITE_CONSTRAINT_PRIMARYKEY:
        case SQLITE_CONSTRAINT_UNIQUE:
            return MT_ALREADY_EXISTS;
        case SQLITE_CONSTRAINT_FOREIGNKEY:
            return MT_FAILED_PRECONDITION;
        default:
            return MT_INVALID_ARGUMENT;
        }
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
        return MT_INVALID_ARGUMENT;
    default:
        return MT_INTERNAL;
    }
}

static mt_code fail_db(sqlite3 *db, int rc, mt_err *err, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

static mt_code fail_db(sqlite3 *db, int rc, mt_err *err, const char *fmt, va_list ap)
{
    char what[160];
    mt_code code = mt_store__code(rc);
    const char *text = db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc);

    if (code == MT_OK)
        code = MT_INTERNAL;
    /* "unable to open database file": say why when the OS told SQLite */
    if ((rc & 0xff) == SQLITE_CANTOPEN && db != NULL) {
        int e = sqlite3_system_errno(db);
        if (e == ENOENT)
            code = MT_NOT_FOUND;
        else if (e == EACCES || e == EPERM)
            code = MT_PERMISSION_DENIED;
    }
    vsnprintf(what, sizeof(what), fmt, ap);
    return mt_err_set(err, code, "%s: %s", what, text);
}

mt_code mt_store__fail(mt_store *s, int rc, mt_err *err, const char *fmt, ...)
{
    va_list ap;
    mt_code code;

    va_start(ap, fmt);
    code = fail_db(s->db, rc, err, fmt, ap);
    va_end(ap);
    return code;
}

static mt_code open_fail(sqlite3 *db, int rc, mt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static mt_code open_fail(sqlite3 *db, int rc, mt_err *err, const char *fmt, ...)
{
    va_list ap;
    mt_code code;

    va_start(ap, fmt);
    code = fail_db(db, rc, err, fmt, ap);
    va_end(ap);
    return code;
}

sqlite3_stmt *mt_store__stmt(mt_store *s, enum mt_store_stmt_id id)
{
    sqlite3_stmt *st = s->stmt[id];

    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

void mt_store__stmt_done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

int mt_store__step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);

    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int mt_store__bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v == NULL)
        return sqlite3_bind_null(st, i);
    return sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

void mt_store__col_text(sqlite3_stmt *st, int col, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    size_t n = t != NULL ? (size_t)sqlite3_column_bytes(st, col) : 0;

    if (cap == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

int mt_store__grow(void **arr, size_t *cap, size_t count, size_t elem)
{
    size_t ncap;
    void *p;

    if (count < *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    p = mt_realloc(*arr, ncap * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

mt_code mt_store__collect(mt_store *s, sqlite3_stmt *st, size_t elem, mt_store__row_fn read,
                          void **out, size_t *n, const char *what, mt_err *err)
{
    void *arr = NULL;
    size_t count = 0, cap = 0;
    mt_code code = MT_OK;
    int rc;

    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (mt_store__grow(&arr, &cap, count, elem) != 0) {
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
            break;
        }
        memset((char *)arr + count * elem, 0, elem);
        read(st, (char *)arr + count * elem);
        count++;
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "%s", what);
    mt_store__stmt_done(st);
    if (code != MT_OK) {
        mt_free(arr);
        return code;
    }
    *out = arr;
    *n = count;
    return MT_OK;
}

mt_code mt_store__need(const char *v, const char *what, mt_err *err)
{
    if (v == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s is NULL", what);
    return MT_OK;
}

int mt_store__terminated(const char *str, size_t cap)
{
    return memchr(str, '\0', cap) != NULL;
}

/* Run one statement (or a script) with sqlite3_exec; translate failure. */
static mt_code exec_sql(sqlite3 *db, const char *sql, const char *path, const char *what,
                        mt_err *err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

    if (rc != SQLITE_OK)
        return open_fail(db, rc, err, "%s %s", what, path);
    return MT_OK;
}

/* Read one integer pragma ("PRAGMA user_version"). */
static mt_code pragma_int(sqlite3 *db, const char *sql, const char *path, long long *out,
                          mt_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        mt_code code = open_fail(db, rc, err, "open %s", path);
        sqlite3_finalize(st);
        return code;
    }
    sqlite3_finalize(st);
    return MT_OK;
}

static mt_code migrate(sqlite3 *db, const char *path, int from, mt_err *err)
{
    for (int v = from; v < N_MIGRATIONS; v++) {
        char bump[96];
        mt_code rc;

        snprintf(bump, sizeof(bump), "PRAGMA user_version = %d; PRAGMA application_id = %d;", v + 1,
                 MT_STORE_APP_ID);
        rc = exec_sql(db, "BEGIN IMMEDIATE", path, "migrate", err);
        if (rc != MT_OK)
            return rc;
        rc = exec_sql(db, migrations[v], path, "migrate", err);
        if (rc == MT_OK && v + 1 > 4) {
            char rec[160];
            snprintf(rec, sizeof(rec),
                     "INSERT INTO schema_migrations(version, applied_at_ms) VALUES (%d, "
                     "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));",
                     v + 1);
            rc = exec_sql(db, rec, path, "migrate", err);
        }
        if (rc == MT_OK)
            rc = exec_sql(db, bump, path, "migrate", err);
        if (rc == MT_OK)
            rc = exec_sql(db, "COMMIT", path, "migrate", err);
        if (rc != MT_OK) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            mt_err_prefix(err, "schema version %d -> %d", v, v + 1);
            return rc;
        }
    }
    return MT_OK;
}

/* Configure the connection, check what the file is, migrate. */
static mt_code prepare_db(sqlite3 *db, const char *path, const mt_store_options *o, int *version,
                          mt_err *err)
{
    long long app_id = 0, user_version = 0, n_tables = 0;
    mt_code rc;

    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, o->busy_timeout_ms);
    if (!o->readonly) {
        /* the first statement reads the header: a non-database file fails here */
        rc = exec_sql(db, "PRAGMA journal_mode = WAL", path, "open", err);
        if (rc != MT_OK)
            return rc;
    }
    rc = exec_sql(db,
                  o->sync_full ? "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL"
                               : "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL",
                  path, "open", err);
    if (rc == MT_OK && o->max_size_bytes > 0) {
        long long page_size = 0;
        char sql[64];
        rc = pragma_int(db, "PRAGMA page_size", path, &page_size, err);
        if (rc == MT_OK && page_size > 0) {
            snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %llu",
                     (unsigned long long)(o->max_size_bytes / (uint64_t)page_size + 1));
            rc = exec_sql(db, sql, path, "open", err);
        }
    }
    if (rc == MT_OK)
        rc = pragma_int(db, "PRAGMA application_id", path, &app_id, err);
    if (rc == MT_OK)
        rc = pragma_int(db, "PRAGMA user_version", path, &user_version, err);
    if (rc == MT_OK)
        rc = pragma_int(db, "SELECT count(*) FROM sqlite_schema", path, &n_tables, err);
    if (rc != MT_OK)
        return rc;
    if ((app_id != 0 && app_id != MT_STORE_APP_ID) ||
        (app_id == 0 && user_version == 0 && n_tables > 0))
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "open %s: not a meshtrain database (application_id %lld, "
                          "%lld schema objects)",
                          path, app_id, n_tables);
    if (user_version > N_MIGRATIONS || user_version < 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "open %s: database schema version %lld is newer than this meshtrain "
                          "supports (version %d); upgrade meshtrain or use another state dir",
                          path, user_version, N_MIGRATIONS);
    if (o->readonly && user_version != N_MIGRATIONS)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "open %s read-only: database schema version %lld, this meshtrain "
                          "needs version %d (open it read-write once to migrate)",
                          path, user_version, N_MIGRATIONS);
    if (!o->readonly) {
        rc = migrate(db, path, (int)user_version, err);
        if (rc != MT_OK)
            return rc;
    }
    *version = N_MIGRATIONS;
    return MT_OK;
}

mt_code mt_store_open_opts(const char *path, const mt_store_options *opts, mt_store **out,
                           mt_err *err)
{
    static const mt_store_options defaults = MT_STORE_OPTIONS_DEFAULTS;
    const mt_store_options *o = opts != NULL ? opts : &defaults;
    mt_store *s = NULL;
    int flags, rc;
    mt_code code;

    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL || path[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "open store: %s",
                          out == NULL ? "out is NULL" : "empty database path");
    s = mt_calloc(1, sizeof(*s));
    if (s == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "open %s: out of memory", path);
    s->path = mt_strdup(path);
    if (s->path == NULL) {
        code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "open %s: out of memory", path);
        goto fail;
    }
    s->readonly = o->readonly != 0;
    flags = SQLITE_OPEN_NOMUTEX |
            (s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    rc = sqlite3_open_v2(path, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        code = open_fail(s->db, rc, err, "open %s", path);
        goto fail;
    }
    code = prepare_db(s->db, path, o, &s->schema_version, err);
    if (code != MT_OK)
        goto fail;
    for (int i = 0; i < MT_STMT_COUNT; i++) {
        rc = sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[i],
                                NULL);
        if (rc != SQLITE_OK) {
            code = open_fail(s->db, rc, err, "open %s: prepare statement %d", path, i);
            goto fail;
        }
    }
    *out = s;
    return MT_OK;
fail:
    mt_store_close(s);
    return code;
}

mt_code mt_store_open(const char *path, mt_store **out, mt_err *err)
{
    return mt_store_open_opts(path, NULL, out, err);
}

mt_code mt_store_open_readonly(const char *path, mt_store **out, mt_err *err)
{
    mt_store_options o = MT_STORE_OPTIONS_DEFAULTS;

    o.readonly = 1;
    return mt_store_open_opts(path, &o, out, err);
}

void mt_store_close(mt_store *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < MT_STMT_COUNT; i++)
        sqlite3_finalize(s->stmt[i]);
    if (s->db != NULL) {
        if (s->in_tx)
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        if (!s->readonly && s->stmt[0] != NULL) /* fully opened: refresh planner statistics */
            sqlite3_exec(s->db, "PRAGMA optimize", NULL, NULL, NULL);
        sqlite3_close(s->db);
    }
    mt_free(s->path);
    mt_free(s);
}

int mt_store_schema_version(const mt_store *s)
{
    return s->schema_version;
}

int mt_store_prepared_count(const mt_store *s)
{
    int n = 0;

    for (sqlite3_stmt *st = sqlite3_next_stmt(s->db, NULL); st != NULL;
         st = sqlite3_next_stmt(s->db, st))
        n++;
    return n;
}

const char *mt_store_path(const mt_store *s)
{
    return s->path;
}

/* Run a transaction-control statement. */
static mt_code run_ctl(mt_store *s, enum mt_store_stmt_id id, const char *what, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, id);
    int rc = mt_store__step_done(st);
    mt_code code = MT_OK;

    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "%s %s", what, s->path);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_tx_begin(mt_store *s, mt_err *err)
{
    mt_code rc;

    if (s->in_tx)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "begin transaction on %s: a transaction is already open", s->path);
    rc = run_ctl(s, MT_STMT_BEGIN, "begin transaction on", err);
    if (rc == MT_OK)
        s->in_tx = 1;
    return rc;
}

mt_code mt_store_tx_commit(mt_store *s, mt_err *err)
{
    mt_code rc;

    if (!s->in_tx)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "commit on %s: no transaction is open",
                          s->path);
    if (sqlite3_get_autocommit(s->db)) {
        s->in_tx = 0;
        return mt_err_set(err, MT_ABORTED,
                          "commit on %s: the transaction was rolled back by an earlier error",
                          s->path);
    }
    rc = run_ctl(s, MT_STMT_COMMIT, "commit on", err);
    if (rc != MT_OK) {
        /* a failed COMMIT may leave the transaction open: end it so the store stays usable */
        if (!sqlite3_get_autocommit(s->db))
            run_ctl(s, MT_STMT_ROLLBACK, "rollback on", NULL);
    }
    s->in_tx = 0;
    return rc;
}

mt_code mt_store_tx_rollback(mt_store *s, mt_err *err)
{
    mt_code rc = MT_OK;

    if (!s->in_tx)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "rollback on %s: no transaction is open",
                          s->path);
    if (!sqlite3_get_autocommit(s->db))
        rc = run_ctl(s, MT_STMT_ROLLBACK, "rollback on", err);
    s->in_tx = 0;
    return rc;
}

mt_code mt_store__tx_guard(mt_store *s, mt_err *err)
{
    /* SQLite rolls a whole transaction back on some errors (disk full, I/O): later calls
     * must not run outside the transaction the caller believes is open */
    if (s->in_tx && sqlite3_get_autocommit(s->db))
        return mt_err_set(err, MT_ABORTED,
                          "%s: the open transaction was rolled back by an earlier error; "
                          "roll back and retry",
                          s->path);
    return MT_OK;
}

mt_code mt_store__call_begin(mt_store *s, mt_err *err)
{
    mt_code rc = mt_store__tx_guard(s, err);

    if (rc != MT_OK)
        return rc;
    return run_ctl(s, MT_STMT_SAVEPOINT, "begin call on", err);
}

mt_code mt_store__call_end(mt_store *s, mt_code rc, mt_err *err)
{
    if (rc != MT_OK) {
        run_ctl(s, MT_STMT_ROLLBACK_TO, "rollback on", NULL);
        run_ctl(s, MT_STMT_RELEASE, "release on", NULL);
        return rc;
    }
    rc = run_ctl(s, MT_STMT_RELEASE, "commit on", err);
    if (rc != MT_OK && !s->in_tx && !sqlite3_get_autocommit(s->db)) {
        /* the outermost RELEASE is the COMMIT: if it failed, undo the whole call */
        run_ctl(s, MT_STMT_ROLLBACK, "rollback on", NULL);
    }
    return rc;
}
