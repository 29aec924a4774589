/* SPDX-License-Identifier: MIT */
/*
 * store_test_util.h — helpers shared by the storage tests (tests/unit/test_store*.c):
 * a temporary directory per test with the database path inside it, and raw
 * SQLite access for arranging or inspecting files behind the store's back.
 */
#ifndef MT_STORE_TEST_UTIL_H
#define MT_STORE_TEST_UTIL_H

#include <dirent.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_store.h"

typedef struct store_fixture {
    char dir[PATH_MAX];       /* mkdtemp directory */
    char path[PATH_MAX + 32]; /* dir/meshtrain.db */
} store_fixture;

/* Create a fresh temporary directory; returns 0 on success. */
static inline int store_fixture_init(store_fixture *f)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof(f->dir), "%s/mtstore-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/meshtrain.db", f->dir);
    return 0;
}

/* Remove every file in the directory, then the directory. */
static inline void store_fixture_fini(store_fixture *f)
{
    DIR *d = opendir(f->dir);
    struct dirent *e;
    char p[PATH_MAX + 256];

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(f->dir);
}

/* Run SQL on the file through a separate raw connection; returns the SQLite code. */
static inline int store_raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}

/* One integer from a query through a raw connection (-1 on error). */
static inline long long store_raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_open(path, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Fail the 1st, 2nd, ... allocation of `call` until it returns MT_OK; every failure must be
 * RESOURCE_EXHAUSTED and then `check` (a statement) runs. Evaluates to nothing; use in a test. */
#define STORE_ALLOC_TORTURE(call, check)                                                           \
    for (long k_ = 0;; k_++) {                                                                     \
        mt_alloc_fail_after(k_);                                                                   \
        mt_code rc_ = (call);                                                                      \
        mt_alloc_fail_reset();                                                                     \
        if (rc_ == MT_OK)                                                                          \
            break;                                                                                 \
        assert_int_equal(rc_, MT_RESOURCE_EXHAUSTED);                                              \
        check;                                                                                     \
    }

/* cmocka state for the store tests: a temporary directory and a store open on it. */
typedef struct store_tctx {
    store_fixture f;
    mt_store *s;
} store_tctx;

/* cmocka setup: fresh directory, store opened on f.path. */
static inline int store_setup(void **state)
{
    store_tctx *t = calloc(1, sizeof(*t));
    mt_err err = MT_ERR_INIT;

    if (t == NULL || store_fixture_init(&t->f) != 0) {
        free(t);
        return -1;
    }
    if (mt_store_open(t->f.path, &t->s, &err) != MT_OK) {
        fprintf(stderr, "open %s: %s\n", t->f.path, err.msg);
        store_fixture_fini(&t->f);
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

/* cmocka teardown: disarm the allocation hook, close, remove the directory. */
static inline int store_teardown(void **state)
{
    store_tctx *t = *state;
    mt_alloc_fail_reset();
    mt_store_close(t->s);
    store_fixture_fini(&t->f);
    free(t);
    return 0;
}

/* Insert a job with an empty spec and return its id in id[32]; fails the test otherwise. */
static inline void store_test_add_job(mt_store *s, char id[32])
{
    mt_store_job j;
    mt_err err = MT_ERR_INIT;
    memset(&j, 0, sizeof(j));
    j.spec_json = (char *)"{}";
    if (mt_store_job_insert(s, &j, 1, &err) != MT_OK)
        fail_msg("insert job: %s", err.msg);
    memcpy(id, j.job_id, 32);
}

#endif
