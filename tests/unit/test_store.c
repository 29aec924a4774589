/* SPDX-License-Identifier: MIT */
/*
 * test_store.c — unit tests for storage/mt_store.h: open, migrations, errors,
 * transactions, read-only connections, workers and devices. Every test runs on
 * its own database in a mkdtemp directory (store_test_util.h).
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_store.h"
#include "store_test_util.h"

typedef store_tctx tctx;

/* A worker with n devices cpu:0..n-1 (n <= 8). */
static mt_store_worker make_worker(const char *id, const char *name, size_t n,
                                   mt_store_device devs[8])
{
    mt_store_worker w;
    memset(&w, 0, sizeof(w));
    snprintf(w.worker_id, sizeof(w.worker_id), "%s", id);
    snprintf(w.name, sizeof(w.name), "%s", name);
    snprintf(w.instance_id, sizeof(w.instance_id), "inst-%s", id);
    snprintf(w.host, sizeof(w.host), "host-%s", name);
    w.pid = 4242;
    snprintf(w.state, sizeof(w.state), "alive");
    snprintf(w.data_address, sizeof(w.data_address), "tcp://127.0.0.1:9%03zu", n);
    snprintf(w.version, sizeof(w.version), "0.1.0");
    w.registered_at_ms = 1000;
    w.last_heartbeat_ms = 1000;
    for (size_t i = 0; i < n; i++) {
        memset(&devs[i], 0, sizeof(devs[i]));
        snprintf(devs[i].kind, sizeof(devs[i].kind), "cpu");
        devs[i].index = (uint32_t)i;
        devs[i].cores = 1;
        devs[i].memory_bytes = (1ull << 33) + i; /* above 32 bits */
        snprintf(devs[i].health, sizeof(devs[i].health), "ok");
    }
    w.devices = devs;
    w.n_devices = n;
    return w;
}

/* ------------------------------------------------------------------ open */

static void test_store_open_creates_wal_schema(void **state)
{
    tctx *t = *state;
    assert_int_equal(mt_store_schema_version(t->s), MT_STORE_SCHEMA_VERSION);
    assert_string_equal(mt_store_path(t->s), t->f.path);
    assert_int_equal(store_raw_int(t->f.path, "PRAGMA user_version"), MT_STORE_SCHEMA_VERSION);
    /* the readable history has one row per version, the newest equal to user_version */
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM schema_migrations"),
                     MT_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(t->f.path, "SELECT max(version) FROM schema_migrations"),
                     MT_STORE_SCHEMA_VERSION);
    /* journal_mode is persistent for WAL: a fresh raw connection sees it */
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(t->f.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    mt_store_close(NULL); /* no-op */
}

static void test_store_open_bad_path_names_path(void **state)
{
    mt_store *s = (mt_store *)0x1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    mt_code rc = mt_store_open("/nonexistent-mt-dir/x/meshtrain.db", &s, &err);
    assert_int_not_equal(rc, MT_OK);
    assert_null(s);
    assert_string_equal(err.msg,
                        "open /nonexistent-mt-dir/x/meshtrain.db: unable to open database file");
    assert_int_equal(mt_store_open("", &s, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_open(NULL, &s, NULL), MT_INVALID_ARGUMENT);
}

static void test_store_open_refuses_newer_schema(void **state)
{
    tctx *t = *state;
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    char want[64];

    mt_store_close(t->s);
    t->s = NULL;
    assert_int_equal(store_raw_exec(t->f.path, "PRAGMA user_version = 999"), SQLITE_OK);
    assert_int_equal(mt_store_open(t->f.path, &s, &err), MT_FAILED_PRECONDITION);
    assert_null(s);
    assert_non_null(strstr(err.msg, t->f.path));
    assert_non_null(strstr(err.msg, "schema version 999"));
    snprintf(want, sizeof(want), "(version %d)", MT_STORE_SCHEMA_VERSION);
    assert_non_null(strstr(err.msg, want));
    /* the file is untouched */
    assert_int_equal(store_raw_int(t->f.path, "PRAGMA user_version"), 999);
}

static void test_store_open_refuses_non_database(void **state)
{
    tctx *t = *state;
    char path[PATH_MAX + 16];
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/notes.txt", t->f.dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < 100; i++)
        fputs("this is not a database, it is a text file with some lines\n", fp);
    fclose(fp);
    assert_int_equal(mt_store_open(path, &s, &err), MT_FAILED_PRECONDITION);
    assert_null(s);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "file is not a database"));
}

static void test_store_open_refuses_foreign_database(void **state)
{
    tctx *t = *state;
    char path[PATH_MAX + 16];
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;

    snprintf(path, sizeof(path), "%s/other.db", t->f.dir);
    assert_int_equal(store_raw_exec(path, "CREATE TABLE t(x); INSERT INTO t VALUES (1);"),
                     SQLITE_OK);
    assert_int_equal(mt_store_open(path, &s, &err), MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "not a meshtrain database"));
    assert_int_equal(store_raw_exec(path, "PRAGMA application_id = 1234"), SQLITE_OK);
    assert_int_equal(mt_store_open(path, &s, &err), MT_FAILED_PRECONDITION);
    assert_null(s);
}

static void test_store_open_corrupt_file_is_data_loss(void **state)
{
    tctx *t = *state;
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    char junk[3000];
    FILE *fp;

    mt_store_close(t->s); /* checkpoints the WAL into the main file */
    t->s = NULL;
    memset(junk, 0xa5, sizeof(junk));
    fp = fopen(t->f.path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 100, SEEK_SET), 0); /* keep the 100-byte header, smash page 1 */
    assert_int_equal(fwrite(junk, 1, sizeof(junk), fp), sizeof(junk));
    fclose(fp);
    assert_int_equal(mt_store_open(t->f.path, &s, &err), MT_DATA_LOSS);
    assert_null(s);
    assert_non_null(strstr(err.msg, t->f.path));
    assert_non_null(strstr(err.msg, "malformed"));
}

/* A version-1 database written by hand (the schema meshtrain 0.1 shipped) is migrated. */
static void test_store_open_migrates_version_1(void **state)
{
    tctx *t = *state;
    char path[PATH_MAX + 16];
    mt_store *s = NULL;
    mt_store_worker got;
    mt_store_job j;
    mt_err err = MT_ERR_INIT;

    snprintf(path, sizeof(path), "%s/v1.db", t->f.dir);
    assert_int_equal(
        store_raw_exec(
            path, "PRAGMA journal_mode = WAL;"
                  "CREATE TABLE workers (worker_id TEXT PRIMARY KEY NOT NULL,"
                  " name TEXT NOT NULL, instance_id TEXT NOT NULL DEFAULT '',"
                  " host TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,"
                  " state TEXT NOT NULL CHECK (state IN ('alive', 'lost')),"
                  " data_address TEXT NOT NULL DEFAULT '', version TEXT NOT NULL DEFAULT '',"
                  " registered_at_ms INTEGER NOT NULL, last_heartbeat_ms INTEGER NOT NULL);"
                  "CREATE INDEX workers_by_name ON workers(name);"
                  "CREATE TABLE devices (worker_id TEXT NOT NULL REFERENCES"
                  " workers(worker_id) ON DELETE CASCADE, idx INTEGER NOT NULL,"
                  " kind TEXT NOT NULL, cores INTEGER NOT NULL, memory_bytes INTEGER NOT NULL,"
                  " health TEXT NOT NULL, PRIMARY KEY (worker_id, idx)) WITHOUT ROWID;"
                  "INSERT INTO workers VALUES ('w-old', 'old', 'i', 'h', 1, 'lost', '', '0.0.9',"
                  " 5, 6);"
                  "INSERT INTO devices VALUES ('w-old', 0, 'cpu', 2, 1024, 'ok');"
                  "PRAGMA user_version = 1; PRAGMA application_id = 1297371726;"),
        SQLITE_OK);
    assert_int_equal(mt_store_open(path, &s, &err), MT_OK);
    assert_int_equal(mt_store_schema_version(s), MT_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(path, "PRAGMA user_version"), MT_STORE_SCHEMA_VERSION);
    /* old rows kept */
    assert_int_equal(mt_store_worker_get(s, "w-old", &got, &err), MT_OK);
    assert_string_equal(got.version, "0.0.9");
    assert_int_equal(got.n_devices, 1);
    assert_int_equal(got.devices[0].cores, 2);
    mt_store_worker_fini(&got);
    /* new tables usable */
    memset(&j, 0, sizeof(j));
    j.spec_json = (char *)"{}";
    assert_int_equal(mt_store_job_insert(s, &j, 1, &err), MT_OK);
    mt_store_close(s);
    /* opening again is a no-op migration */
    assert_int_equal(mt_store_open(path, &s, &err), MT_OK);
    mt_store_close(s);
}

static void test_store_open_alloc_failure_leaks_nothing(void **state)
{
    tctx *t = *state;
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    for (long k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_open(t->f.path, &s, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(s);
    }
    mt_store_close(s);
}

static void test_store_reopen_keeps_data(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "alpha", 2, devs), got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    mt_store_close(t->s);
    t->s = NULL;
    assert_int_equal(mt_store_open(t->f.path, &t->s, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_string_equal(got.name, "alpha");
    assert_int_equal(got.n_devices, 2);
    mt_store_worker_fini(&got);
}

/* ------------------------------------------------------------------ transactions */

static void test_store_tx_groups_and_rolls_back(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w1 = make_worker("w-1", "a", 1, devs), got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_tx_commit(t->s, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_store_tx_rollback(t->s, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_store_tx_begin(t->s, &err), MT_OK);
    assert_int_equal(mt_store_tx_begin(t->s, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_store_worker_upsert(t->s, &w1, &err), MT_OK);
    /* a failing call inside does not end the transaction */
    assert_int_equal(mt_store_worker_set_state(t->s, "nope", "lost", &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_tx_rollback(t->s, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_NOT_FOUND);

    assert_int_equal(mt_store_tx_begin(t->s, &err), MT_OK);
    assert_int_equal(mt_store_worker_upsert(t->s, &w1, &err), MT_OK);
    assert_int_equal(mt_store_tx_commit(t->s, &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM workers"), 1);
}

static void test_store_readonly_reads_and_refuses_writes(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 3, devs), *list = NULL;
    mt_store *ro = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    char missing[PATH_MAX + 16];

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_open_readonly(t->f.path, &ro, &err), MT_OK);
    assert_int_equal(mt_store_worker_list(ro, NULL, &list, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].n_devices, 3);
    mt_store_worker_list_free(list, n);
    /* the writer keeps writing while the reader is open (WAL) */
    w.pid = 7;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_state(ro, "w-1", "lost", &err), MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "readonly"));
    mt_store_close(ro);

    snprintf(missing, sizeof(missing), "%s/missing.db", t->f.dir);
    assert_int_equal(mt_store_open_readonly(missing, &ro, &err), MT_NOT_FOUND);
    assert_null(ro);
}

static void test_store_readonly_refuses_old_schema(void **state)
{
    tctx *t = *state;
    mt_store *ro = NULL;
    mt_err err = MT_ERR_INIT;
    char path[PATH_MAX + 16];

    snprintf(path, sizeof(path), "%s/empty.db", t->f.dir);
    assert_int_equal(store_raw_exec(path, "PRAGMA user_version = 0"), SQLITE_OK);
    assert_int_equal(mt_store_open_readonly(path, &ro, &err), MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "read-only"));
}

/* ------------------------------------------------------------------ workers */

static void test_store_worker_upsert_get_roundtrip(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "alpha", 3, devs), got;
    mt_err err = MT_ERR_INIT;

    w.registered_at_ms = 1700000000123;
    w.last_heartbeat_ms = 1700000000456;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_string_equal(got.worker_id, "w-1");
    assert_string_equal(got.name, "alpha");
    assert_string_equal(got.instance_id, "inst-w-1");
    assert_string_equal(got.host, "host-alpha");
    assert_int_equal(got.pid, 4242);
    assert_string_equal(got.state, "alive");
    assert_string_equal(got.data_address, "tcp://127.0.0.1:9003");
    assert_string_equal(got.version, "0.1.0");
    assert_int_equal(got.registered_at_ms, 1700000000123);
    assert_int_equal(got.last_heartbeat_ms, 1700000000456);
    assert_int_equal(got.n_devices, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(got.devices[i].kind, "cpu");
        assert_int_equal(got.devices[i].index, i);
        assert_int_equal(got.devices[i].cores, 1);
        assert_true(got.devices[i].memory_bytes == (1ull << 33) + i);
        assert_string_equal(got.devices[i].health, "ok");
    }
    mt_store_worker_fini(&got);
    assert_null(got.devices);
    mt_store_worker_fini(&got); /* twice is fine */
    mt_store_worker_fini(NULL);
}

static void test_store_worker_upsert_replaces_row_and_devices(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "alpha", 4, devs), got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    w = make_worker("w-1", "alpha2", 2, devs);
    devs[1].index = 7;
    snprintf(devs[1].health, sizeof(devs[1].health), "thermal throttling");
    snprintf(w.instance_id, sizeof(w.instance_id), "second-start");
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_string_equal(got.name, "alpha2");
    assert_string_equal(got.instance_id, "second-start");
    assert_int_equal(got.n_devices, 2);
    assert_int_equal(got.devices[0].index, 0);
    assert_int_equal(got.devices[1].index, 7);
    assert_string_equal(got.devices[1].health, "thermal throttling");
    mt_store_worker_fini(&got);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM devices"), 2);
    /* zero devices is allowed */
    w.n_devices = 0;
    w.devices = NULL;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_int_equal(got.n_devices, 0);
    mt_store_worker_fini(&got);
}

static void test_store_worker_upsert_rejects_bad_input(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 2, devs);
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_upsert(t->s, NULL, &err), MT_INVALID_ARGUMENT);
    w.worker_id[0] = '\0';
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "worker_id is empty"));
    w = make_worker("w-1", "a", 2, devs);
    snprintf(w.state, sizeof(w.state), "zombie");
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "zombie"));
    w = make_worker("w-1", "a", 2, devs);
    memset(w.host, 'h', sizeof(w.host));
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "host"));
    w = make_worker("w-1", "a", 2, devs);
    devs[1].index = 0;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "index 0 appears twice"));
    w = make_worker("w-1", "a", 2, devs);
    w.devices = NULL;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_INVALID_ARGUMENT);
    /* nothing was written */
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM workers"), 0);
}

static void test_store_worker_get_not_found(void **state)
{
    tctx *t = *state;
    mt_store_worker got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_get(t->s, "ghost", &got, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "ghost"));
    assert_null(got.devices);
    assert_int_equal(mt_store_worker_get(t->s, NULL, &got, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_worker_find_by_name(t->s, "ghost", &got, &err), MT_NOT_FOUND);
}

static void test_store_worker_find_by_name_latest(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "same", 1, devs), got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    w = make_worker("w-2", "same", 2, devs);
    w.registered_at_ms = 5000;
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_find_by_name(t->s, "same", &got, &err), MT_OK);
    assert_string_equal(got.worker_id, "w-2");
    assert_int_equal(got.n_devices, 2);
    mt_store_worker_fini(&got);
}

static void test_store_worker_get_alloc_failure(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 8, devs), got;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    long k;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_worker_get(t->s, "w-1", &got, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(got.devices);
        assert_int_equal(got.n_devices, 0);
    }
    assert_true(k > 0);
    assert_int_equal(got.n_devices, 8);
    mt_store_worker_fini(&got);
}

static void test_store_worker_heartbeats_batch(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 1, devs), got;
    mt_err err = MT_ERR_INIT;
    const char *ids[] = {"w-1", "unknown", "w-2", "w-1"};
    int64_t times[] = {2000, 2001, 2002, 2003};
    size_t updated = 99;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    w = make_worker("w-2", "b", 1, devs);
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-2", "lost", &err), MT_OK);
    assert_int_equal(mt_store_worker_heartbeats(t->s, ids, times, 4, &updated, &err), MT_OK);
    assert_int_equal(updated, 3);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_int_equal(got.last_heartbeat_ms, 2003);
    mt_store_worker_fini(&got);
    assert_int_equal(mt_store_worker_get(t->s, "w-2", &got, &err), MT_OK);
    assert_int_equal(got.last_heartbeat_ms, 2002);
    assert_string_equal(got.state, "lost"); /* heartbeats do not change the state */
    mt_store_worker_fini(&got);

    assert_int_equal(mt_store_worker_heartbeats(t->s, NULL, NULL, 0, &updated, &err), MT_OK);
    assert_int_equal(updated, 0);
    assert_int_equal(mt_store_worker_heartbeats(t->s, ids, times, 1, NULL, &err), MT_OK);
    assert_int_equal(mt_store_worker_heartbeats(t->s, NULL, times, 2, &updated, &err),
                     MT_INVALID_ARGUMENT);
    const char *bad[] = {"w-1", NULL};
    assert_int_equal(mt_store_worker_heartbeats(t->s, bad, times, 2, &updated, &err),
                     MT_INVALID_ARGUMENT);
}

static void test_store_worker_set_state_and_delete(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 2, devs), got;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-1", "lost", &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_string_equal(got.state, "lost");
    mt_store_worker_fini(&got);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-1", "dead", &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-1", NULL, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_worker_set_state(t->s, "nope", "alive", &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_worker_delete(t->s, "w-1", &err), MT_OK);
    assert_int_equal(store_raw_int(t->f.path, "SELECT count(*) FROM devices"), 0);
    assert_int_equal(mt_store_worker_delete(t->s, "w-1", &err), MT_NOT_FOUND);
}

static void test_store_worker_set_device_health(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 2, devs), got;
    mt_err err = MT_ERR_INIT;
    char big[80];

    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-1", 1, "oom", &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    assert_string_equal(got.devices[0].health, "ok");
    assert_string_equal(got.devices[1].health, "oom");
    mt_store_worker_fini(&got);
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-1", 5, "ok", &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-9", 0, "ok", &err), MT_NOT_FOUND);
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-1", 0, big, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-1", 0, NULL, &err),
                     MT_INVALID_ARGUMENT);
}

/* Every API call reuses the statements prepared at open: the count never changes. */
static void test_store_statements_prepared_once(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w = make_worker("w-1", "a", 2, devs), got, *list = NULL;
    mt_store_job j, *jl = NULL;
    mt_store_metric m, *pts = NULL;
    mt_store_checkpoint c, *cl = NULL;
    mt_store_job_event *ev = NULL;
    mt_store_placement p, *pl = NULL;
    mt_store_job_id *ids = NULL;
    char **locs = NULL;
    const char *hb[] = {"w-1"};
    int64_t hbt[] = {5};
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    int before = mt_store_prepared_count(t->s);

    assert_true(before > 30);
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_get(t->s, "w-1", &got, &err), MT_OK);
    mt_store_worker_fini(&got);
    assert_int_equal(mt_store_worker_find_by_name(t->s, "a", &got, &err), MT_OK);
    mt_store_worker_fini(&got);
    assert_int_equal(mt_store_worker_heartbeats(t->s, hb, hbt, 1, NULL, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-1", "lost", &err), MT_OK);
    assert_int_equal(mt_store_worker_set_device_health(t->s, "w-1", 0, "ok", &err), MT_OK);
    assert_int_equal(mt_store_worker_list(t->s, NULL, &list, &n, &err), MT_OK);
    mt_store_worker_list_free(list, n);
    memset(&j, 0, sizeof(j));
    j.spec_json = (char *)"{}";
    assert_int_equal(mt_store_job_insert(t->s, &j, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_transition(t->s, j.job_id, NULL, "SCHEDULED", "", 2, &err),
                     MT_OK);
    assert_int_equal(mt_store_job_set_step(t->s, j.job_id, 3, 3, &err), MT_OK);
    assert_int_equal(mt_store_job_set_reason(t->s, j.job_id, "r", 3, &err), MT_OK);
    assert_int_equal(mt_store_job_events(t->s, j.job_id, &ev, &n, &err), MT_OK);
    mt_store_job_events_free(ev);
    assert_int_equal(mt_store_job_list(t->s, "SCHEDULED", &jl, &n, &err), MT_OK);
    mt_store_job_list_free(jl, n);
    memset(&p, 0, sizeof(p));
    snprintf(p.worker_id, sizeof(p.worker_id), "w-1");
    assert_int_equal(mt_store_job_set_placement(t->s, j.job_id, &p, 1, &err), MT_OK);
    assert_int_equal(mt_store_job_placement(t->s, j.job_id, &pl, &n, &err), MT_OK);
    mt_store_placement_free(pl);
    assert_int_equal(mt_store_jobs_on_worker(t->s, "w-1", &ids, &n, &err), MT_OK);
    mt_store_job_ids_free(ids);
    memset(&m, 0, sizeof(m));
    snprintf(m.name, sizeof(m.name), "loss");
    assert_int_equal(mt_store_metrics_insert(t->s, j.job_id, &m, 1, &err), MT_OK);
    assert_int_equal(mt_store_metrics_query(t->s, j.job_id, 0, NULL, 0, 0, &pts, &n, &err), MT_OK);
    mt_store_metrics_free(pts);
    assert_int_equal(mt_store_metrics_latest(t->s, j.job_id, &pts, &n, &err), MT_OK);
    mt_store_metrics_free(pts);
    assert_int_equal(mt_store_metrics_truncate(t->s, j.job_id, 0, NULL, &err), MT_OK);
    memset(&c, 0, sizeof(c));
    snprintf(c.location, sizeof(c.location), "/x");
    assert_int_equal(mt_store_checkpoint_insert(t->s, j.job_id, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_complete(t->s, j.job_id, 0, 1, NULL, 1, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_list(t->s, j.job_id, &cl, &n, &err), MT_OK);
    mt_store_checkpoints_free(cl);
    assert_int_equal(mt_store_checkpoint_latest(t->s, j.job_id, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_get(t->s, j.job_id, 0, &c, &err), MT_OK);
    assert_int_equal(mt_store_checkpoint_gc(t->s, j.job_id, 0, &locs, &n, &err), MT_OK);
    mt_store_strings_free(locs, n);
    assert_int_equal(mt_store_tx_begin(t->s, &err), MT_OK);
    assert_int_equal(mt_store_tx_commit(t->s, &err), MT_OK);
    assert_int_equal(mt_store_worker_delete(t->s, "w-1", &err), MT_OK);
    assert_int_equal(mt_store_prepared_count(t->s), before);
}

static void test_store_worker_list_order_filter_devices(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 7;

    assert_int_equal(mt_store_worker_list(t->s, NULL, &list, &n, &err), MT_OK);
    assert_null(list);
    assert_int_equal(n, 0);
    w = make_worker("w-c", "charlie", 1, devs);
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    w = make_worker("w-a", "alpha", 3, devs);
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    w = make_worker("w-b", "bravo", 2, devs);
    assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    assert_int_equal(mt_store_worker_set_state(t->s, "w-b", "lost", &err), MT_OK);

    assert_int_equal(mt_store_worker_list(t->s, "", &list, &n, &err), MT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(list[0].name, "alpha");
    assert_int_equal(list[0].n_devices, 3);
    assert_string_equal(list[1].name, "bravo");
    assert_int_equal(list[1].n_devices, 2);
    assert_string_equal(list[2].name, "charlie");
    assert_int_equal(list[2].n_devices, 1);
    assert_int_equal(list[0].devices[2].index, 2);
    mt_store_worker_list_free(list, n);

    assert_int_equal(mt_store_worker_list(t->s, "alive", &list, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "alpha");
    assert_string_equal(list[1].name, "charlie");
    mt_store_worker_list_free(list, n);
    assert_int_equal(mt_store_worker_list(t->s, "lost", &list, &n, &err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].worker_id, "w-b");
    assert_int_equal(list[0].n_devices, 2);
    mt_store_worker_list_free(list, n);
    mt_store_worker_list_free(NULL, 0);
    assert_int_equal(mt_store_worker_list(t->s, NULL, NULL, &n, &err), MT_INVALID_ARGUMENT);
}

static void test_store_worker_list_alloc_failure(void **state)
{
    tctx *t = *state;
    mt_store_device devs[8];
    mt_store_worker w, *list = NULL;
    mt_err err = MT_ERR_INIT;
    size_t n = 0;
    mt_code rc;
    long k;

    for (int i = 0; i < 40; i++) { /* enough to grow both arrays several times */
        char id[16], name[16];
        snprintf(id, sizeof(id), "w-%02d", i);
        snprintf(name, sizeof(name), "n-%02d", i);
        w = make_worker(id, name, (size_t)(i % 8) + 1, devs);
        assert_int_equal(mt_store_worker_upsert(t->s, &w, &err), MT_OK);
    }
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_store_worker_list(t->s, NULL, &list, &n, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(list);
        assert_int_equal(n, 0);
    }
    assert_true(k > 3);
    assert_int_equal(n, 40);
    mt_store_worker_list_free(list, n);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, store_setup, store_teardown)
    const struct CMUnitTest tests[] = {
        T(test_store_open_creates_wal_schema),
        T(test_store_open_bad_path_names_path),
        T(test_store_open_refuses_newer_schema),
        T(test_store_open_refuses_non_database),
        T(test_store_open_refuses_foreign_database),
        T(test_store_open_corrupt_file_is_data_loss),
        T(test_store_open_migrates_version_1),
        T(test_store_open_alloc_failure_leaks_nothing),
        T(test_store_reopen_keeps_data),
        T(test_store_tx_groups_and_rolls_back),
        T(test_store_readonly_reads_and_refuses_writes),
        T(test_store_readonly_refuses_old_schema),
        T(test_store_worker_upsert_get_roundtrip),
        T(test_store_worker_upsert_replaces_row_and_devices),
        T(test_store_worker_upsert_rejects_bad_input),
        T(test_store_worker_get_not_found),
        T(test_store_worker_find_by_name_latest),
        T(test_store_worker_get_alloc_failure),
        T(test_store_worker_heartbeats_batch),
        T(test_store_worker_set_state_and_delete),
        T(test_store_worker_set_device_health),
        T(test_store_statements_prepared_once),
        T(test_store_worker_list_order_filter_devices),
        T(test_store_worker_list_alloc_failure),
    };
#undef T
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
