/* SPDX-License-Identifier: MIT */
/*
 * test_store_upload.c — unit tests for storage/mt_store_upload.h: chunked
 * uploads (order, retries, limits), verification, atomic publish, chunked reads.
 * Each test in its own temporary directory.
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_store_upload.h"
#include "store_test_util.h"

typedef struct uctx {
    store_fixture f;
    char final[PATH_MAX + 64]; /* dir/ckpt/job-000001/step-100.mtckpt */
    char part[PATH_MAX + 80];
    unsigned char data[10000];
} uctx;

static int setup(void **state)
{
    uctx *t = calloc(1, sizeof(*t));
    if (t == NULL || store_fixture_init(&t->f) != 0)
        return -1;
    snprintf(t->final, sizeof(t->final), "%s/ckpt/job-000001/step-100.mtckpt", t->f.dir);
    snprintf(t->part, sizeof(t->part), "%s.part", t->final);
    for (size_t i = 0; i < sizeof(t->data); i++)
        t->data[i] = (unsigned char)(i * 7 + i / 255);
    *state = t;
    return 0;
}

/* Remove the upload files, their directories, then the fixture. */
static int teardown(void **state)
{
    uctx *t = *state;
    char p[PATH_MAX + 64];
    mt_alloc_fail_reset();
    unlink(t->final);
    unlink(t->part);
    snprintf(p, sizeof(p), "%s/ckpt/job-000001", t->f.dir);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/ckpt", t->f.dir);
    rmdir(p);
    store_fixture_fini(&t->f);
    free(t);
    return 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void crc_of(const unsigned char *d, size_t n, char *buf, size_t cap)
{
    snprintf(buf, cap, "crc32:%08lx", (unsigned long)crc32(crc32(0L, Z_NULL, 0), d, (uInt)n));
}

/* Read the whole file into buf (cap bytes); returns its size. */
static size_t slurp(const char *path, unsigned char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    size_t n;
    assert_non_null(fp);
    n = fread(buf, 1, cap, fp);
    fclose(fp);
    return n;
}

static void test_store_upload_chunks_verify_publish(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    char want[32], got[32];
    static unsigned char back[20000];

    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_true(exists(t->part));
    assert_false(exists(t->final));
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 4000, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 4000, t->data + 4000, 4000, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 8000, t->data + 8000, 2000, &err), MT_OK);
    assert_int_equal(mt_store_upload_received(u), 10000);
    crc_of(t->data, 10000, want, sizeof(want));
    mt_store_upload_checksum(u, got, sizeof(got));
    assert_string_equal(got, want);
    assert_int_equal(mt_store_upload_finish(u, 10000, want, &err), MT_OK);
    assert_false(exists(t->part));
    assert_int_equal(slurp(t->final, back, sizeof(back)), 10000);
    assert_memory_equal(back, t->data, 10000);
    /* finished: no more writes or finishes */
    assert_int_equal(mt_store_upload_write(u, 10000, t->data, 1, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_store_upload_finish(u, 10000, NULL, &err), MT_FAILED_PRECONDITION);
    mt_store_upload_close(u);
    assert_true(exists(t->final)); /* close after finish keeps the file */
    mt_store_upload_close(NULL);
}

static void test_store_upload_retried_and_overlapping_chunks(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    char want[32];
    static unsigned char back[20000];

    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 3000, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 3000, &err), MT_OK); /* retry */
    assert_int_equal(mt_store_upload_write(u, 1000, t->data + 1000, 1000, &err), MT_OK);
    assert_int_equal(mt_store_upload_received(u), 3000);
    /* overlaps the end: only 3000..5000 are new */
    assert_int_equal(mt_store_upload_write(u, 2000, t->data + 2000, 3000, &err), MT_OK);
    assert_int_equal(mt_store_upload_received(u), 5000);
    /* a gap */
    assert_int_equal(mt_store_upload_write(u, 6000, t->data + 6000, 10, &err), MT_OUT_OF_RANGE);
    assert_non_null(strstr(err.msg, "expected 5000"));
    assert_int_equal(mt_store_upload_write(u, 5000, NULL, 10, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_store_upload_write(u, 5000, t->data + 5000, 5000, &err), MT_OK);
    crc_of(t->data, 10000, want, sizeof(want));
    assert_int_equal(mt_store_upload_finish(u, 10000, want, &err), MT_OK);
    mt_store_upload_close(u);
    assert_int_equal(slurp(t->final, back, sizeof(back)), 10000);
    assert_memory_equal(back, t->data, 10000);
}

static void test_store_upload_mismatch_keeps_old_file(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    char want[32];
    static unsigned char back[20000];

    /* a first, good version */
    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 100, &err), MT_OK);
    assert_int_equal(mt_store_upload_finish(u, 100, NULL, &err), MT_OK);
    mt_store_upload_close(u);
    /* size mismatch */
    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 500, &err), MT_OK);
    assert_int_equal(mt_store_upload_finish(u, 501, NULL, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "received 500 bytes, expected 501"));
    assert_false(exists(t->part));
    mt_store_upload_close(u);
    /* checksum mismatch */
    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 500, &err), MT_OK);
    crc_of(t->data, 499, want, sizeof(want));
    assert_int_equal(mt_store_upload_finish(u, 500, want, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "checksum"));
    mt_store_upload_close(u);
    /* another checksum format */
    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 500, &err), MT_OK);
    assert_int_equal(mt_store_upload_finish(u, 500, "sha256:abcd", &err), MT_INVALID_ARGUMENT);
    mt_store_upload_close(u);
    /* the old file is untouched */
    assert_false(exists(t->part));
    assert_int_equal(slurp(t->final, back, sizeof(back)), 100);
    assert_memory_equal(back, t->data, 100);
}

static void test_store_upload_limit_and_abandon(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_upload_open(t->final, 1000, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 1000, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 1000, t->data, 1, &err), MT_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "1000"));
    assert_true(exists(t->part));
    mt_store_upload_close(u); /* never finished: the temporary file goes */
    assert_false(exists(t->part));
    assert_false(exists(t->final));
}

static void test_store_upload_open_errors(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = (mt_store_upload *)0x1;
    mt_err err = MT_ERR_INIT;
    char blocker[PATH_MAX + 32], under[PATH_MAX + 64];
    FILE *fp;

    assert_int_equal(mt_store_upload_open("", 0, &u, &err), MT_INVALID_ARGUMENT);
    assert_null(u);
    assert_int_equal(mt_store_upload_open(NULL, 0, &u, &err), MT_INVALID_ARGUMENT);
    /* a regular file where a directory should be */
    snprintf(blocker, sizeof(blocker), "%s/plainfile", t->f.dir);
    fp = fopen(blocker, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(under, sizeof(under), "%s/x.mtckpt", blocker);
    assert_int_equal(mt_store_upload_open(under, 0, &u, &err), MT_NOT_FOUND);
    assert_null(u);
    assert_non_null(strstr(err.msg, blocker));
    /* allocation failures leak nothing and leave no temporary file */
    for (long k = 0;; k++) {
        mt_alloc_fail_after(k);
        mt_code rc = mt_store_upload_open(t->final, 0, &u, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(u);
        assert_false(exists(t->part));
    }
    mt_store_upload_close(u);
}

static void test_store_file_read_at_chunks(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    unsigned char buf[4096];
    size_t n = 0;
    uint64_t total = 0, off = 0;
    char missing[PATH_MAX + 32];

    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 10000, &err), MT_OK);
    assert_int_equal(mt_store_upload_finish(u, 10000, NULL, &err), MT_OK);
    mt_store_upload_close(u);
    do {
        assert_int_equal(mt_store_file_read_at(t->final, off, buf, sizeof(buf), &n, &total, &err),
                         MT_OK);
        assert_int_equal(total, 10000);
        assert_memory_equal(buf, t->data + off, n);
        off += n;
    } while (n > 0);
    assert_int_equal(off, 10000);
    assert_int_equal(mt_store_file_read_at(t->final, 20000, buf, sizeof(buf), &n, NULL, &err),
                     MT_OK);
    assert_int_equal(n, 0);
    snprintf(missing, sizeof(missing), "%s/nope", t->f.dir);
    assert_int_equal(mt_store_file_read_at(missing, 0, buf, sizeof(buf), &n, NULL, &err),
                     MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, missing));
    assert_int_equal(mt_store_file_read_at(t->final, 0, NULL, 10, &n, NULL, &err),
                     MT_INVALID_ARGUMENT);
}

/* A published file verifies against its checksum; a flipped byte, another size or a missing
 * file do not, and the messages name no path for DATA_LOSS. */
static void test_store_file_verify_detects_corruption(void **state)
{
    uctx *t = *state;
    mt_store_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    char sum[32], missing[PATH_MAX + 32];
    FILE *f;

    assert_int_equal(mt_store_upload_open(t->final, 0, &u, &err), MT_OK);
    assert_int_equal(mt_store_upload_write(u, 0, t->data, 10000, &err), MT_OK);
    mt_store_upload_checksum(u, sum, sizeof(sum));
    assert_int_equal(mt_store_upload_finish(u, 10000, NULL, &err), MT_OK);
    mt_store_upload_close(u);
    assert_int_equal(mt_store_file_verify(t->final, 10000, sum, &err), MT_OK);
    assert_int_equal(mt_store_file_verify(t->final, 9999, sum, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "has 10000 bytes, 9999 recorded"));
    f = fopen(t->final, "r+b");
    assert_non_null(f);
    fseek(f, 5000, SEEK_SET);
    fputc(t->data[5000] ^ 0xff, f);
    fclose(f);
    assert_int_equal(mt_store_file_verify(t->final, 10000, sum, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "recorded crc32:"));
    assert_null(strstr(err.msg, t->final));
    snprintf(missing, sizeof(missing), "%s/nope", t->f.dir);
    assert_int_equal(mt_store_file_verify(missing, 1, sum, &err), MT_NOT_FOUND);
    assert_int_equal(mt_store_file_verify(t->final, 10000, "sha256:00", &err), MT_INVALID_ARGUMENT);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_store_upload_chunks_verify_publish),
        T(test_store_upload_retried_and_overlapping_chunks),
        T(test_store_upload_mismatch_keeps_old_file),
        T(test_store_upload_limit_and_abandon),
        T(test_store_upload_open_errors),
        T(test_store_file_read_at_chunks),
        T(test_store_file_verify_detects_corruption),
    };
#undef T
    return cmocka_run_group_tests_name("store_upload", tests, NULL, NULL);
}
