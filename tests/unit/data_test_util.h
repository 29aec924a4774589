/* SPDX-License-Identifier: MIT */
/*
 * data_test_util.h — helpers shared by the test_data_*.c binaries: a temporary directory that is
 * removed afterwards, writing small files, and parsing a `dataset` section from a JSON string.
 * Header-only (static functions) because each test file is its own binary.
 */
#ifndef MT_DATA_TEST_UTIL_H
#define MT_DATA_TEST_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/mt_data.h"

static inline int dt_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

/* Remove a directory tree. */
static inline void dt_rm_rf(const char *dir)
{
    nftw(dir, dt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Create a fresh temporary directory into buf (size >= 64). */
static inline void dt_mkdtemp(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/mt_data_test_XXXXXX");
    assert_non_null(mkdtemp(buf));
}

/* Write `text` to dir/name (creating dir/sub-directories given in name's path must exist). */
static inline void dt_write(const char *dir, const char *name, const char *text)
{
    char path[1024];
    FILE *fp;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    fclose(fp);
}

static inline void dt_mkdir(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(mkdir(path, 0755), 0);
}

/* The per-test temporary directory: cmocka setup/teardown create and remove it. */
static char dir[128];

static inline int dt_setup(void **state)
{
    (void)state;
    dt_mkdtemp(dir, sizeof(dir));
    return 0;
}

static inline int dt_teardown(void **state)
{
    (void)state;
    dt_rm_rf(dir);
    return 0;
}

/* Parse a dataset section given as JSON text with base_dir; returns the code, fills err. */
static inline mt_code dt_spec(const char *json, const char *base, mt_data_spec **out, mt_err *err)
{
    cJSON *j = cJSON_Parse(json);
    mt_code rc;
    assert_non_null(j);
    rc = mt_data_spec_parse(j, NULL, base, out, err);
    cJSON_Delete(j);
    return rc;
}

/* Parse a spec (JSON text, base dir `dir`), open its training split, load file 0 into *b. */
static inline mt_code dt_load0(const char *json, mt_data_block *b, mt_err *err)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_code rc = dt_spec(json, dir, &s, err);
    memset(b, 0, sizeof(*b));
    if (rc == MT_OK)
        rc = mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, err);
    if (rc == MT_OK)
        rc = mt_data_dataset_load(ds, 0, b, err);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
    return rc;
}

#endif
