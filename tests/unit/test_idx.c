/* SPDX-License-Identifier: MIT */
/* test_idx.c — unit tests for core/data/mt_idx.h: generated plain and gzipped IDX files,
 * truncated and corrupt ones, the conversions and the image/label pair loader. */
#include "mt_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "data/mt_idx.h"

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/mt_idx_XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

/* Build an IDX image: type, rank, dims, payload of n bytes (values i*7 mod 256). */
static size_t make_idx(unsigned char *buf, int type, int rank, const uint32_t *dims, size_t n)
{
    size_t o = 0;
    buf[o++] = 0;
    buf[o++] = 0;
    buf[o++] = (unsigned char)type;
    buf[o++] = (unsigned char)rank;
    for (int i = 0; i < rank; i++) {
        buf[o++] = (unsigned char)(dims[i] >> 24);
        buf[o++] = (unsigned char)(dims[i] >> 16);
        buf[o++] = (unsigned char)(dims[i] >> 8);
        buf[o++] = (unsigned char)dims[i];
    }
    for (size_t i = 0; i < n; i++)
        buf[o++] = (unsigned char)((i * 7) % 256);
    return o;
}

static const char *write_file(fixture *f, const char *name, const unsigned char *buf, size_t n,
                              int gz)
{
    snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
    if (gz) {
        gzFile g = gzopen(f->path, "wb");
        assert_non_null(g);
        if (n > 0)
            assert_int_equal(gzwrite(g, buf, (unsigned)n), (int)n);
        gzclose(g);
    } else {
        FILE *fp = fopen(f->path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(buf, 1, n, fp), n);
        fclose(fp);
    }
    return f->path;
}

static void test_idx_read_mem_valid(void **state)
{
    unsigned char buf[256];
    uint32_t dims[3] = {2, 3, 4};
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    size_t n = make_idx(buf, MT_IDX_UBYTE, 3, dims, 24);
    (void)state;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_OK);
    assert_int_equal(x.rank, 3);
    assert_int_equal(x.count, 24);
    assert_int_equal(x.dims[2], 4);
    assert_int_equal(x.data[5], 35);
    mt_idx_fini(&x);
    mt_idx_fini(&x); /* zeroed: no-op */
    mt_idx_fini(NULL);
}

static void test_idx_read_mem_rejects_bad_headers(void **state)
{
    unsigned char buf[256];
    uint32_t dims[3] = {2, 3, 4};
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    size_t n = make_idx(buf, MT_IDX_UBYTE, 3, dims, 24);
    (void)state;

    buf[0] = 1;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "m: bad IDX magic"));
    buf[0] = 0;
    buf[2] = 0x07;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "type byte 0x07"));
    buf[2] = MT_IDX_UBYTE;
    buf[3] = 5;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "rank 5"));
    buf[3] = 0;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    /* zero inner dimension */
    dims[1] = 0;
    n = make_idx(buf, MT_IDX_UBYTE, 3, dims, 0);
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dimension 1 is zero"));
    /* overflowing dimensions */
    uint32_t big[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 2};
    n = make_idx(buf, MT_IDX_FLOAT64, 4, big, 0);
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "too large"));
    assert_null(x.data);
}

static void test_idx_read_mem_truncated_and_trailing(void **state)
{
    unsigned char buf[256];
    uint32_t dims[2] = {5, 2};
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    size_t n = make_idx(buf, MT_IDX_INT16, 2, dims, 20);
    (void)state;
    assert_int_equal(mt_idx_read_mem(buf, n, "m", &x, &err), MT_OK);
    assert_int_equal(x.elem_size, 2);
    mt_idx_fini(&x);
    assert_int_equal(mt_idx_read_mem(buf, n - 1, "m", &x, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "need 20 bytes, 19 present"));
    assert_int_equal(mt_idx_read_mem(buf, 3, "m", &x, &err), MT_DATA_LOSS);
    assert_int_equal(mt_idx_read_mem(buf, 9, "m", &x, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "truncated IDX header"));
    assert_int_equal(mt_idx_read_mem(buf, n + 3, "m", &x, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "3 trailing bytes"));
}

static void test_idx_read_file_plain_and_gz(void **state)
{
    fixture *f = *state;
    unsigned char buf[4096];
    uint32_t dims[3] = {3, 28, 28};
    size_t n = make_idx(buf, MT_IDX_UBYTE, 3, dims, 3 * 28 * 28);
    mt_idx x;
    mt_err err = MT_ERR_INIT;

    for (int gz = 0; gz < 2; gz++) {
        const char *p = write_file(f, gz ? "a.gz" : "a", buf, n, gz);
        assert_int_equal(mt_idx_read_file(p, &x, &err), MT_OK);
        assert_int_equal(x.count, 3 * 28 * 28);
        assert_memory_equal(x.data, buf + 16, x.count);
        mt_idx_fini(&x);
    }
}

static void test_idx_read_file_errors(void **state)
{
    fixture *f = *state;
    unsigned char buf[4096];
    uint32_t dims[3] = {3, 28, 28};
    size_t n = make_idx(buf, MT_IDX_UBYTE, 3, dims, 3 * 28 * 28);
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    const char *p;
    char cmd[300];

    assert_int_equal(mt_idx_read_file("/nonexistent/x.gz", &x, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gz"));
    for (int gz = 0; gz < 2; gz++) {
        p = write_file(f, "t", buf, n - 100, gz);
        assert_int_equal(mt_idx_read_file(p, &x, &err), MT_DATA_LOSS);
        assert_non_null(strstr(err.msg, p));
        assert_non_null(strstr(err.msg, "truncated IDX payload"));
        p = write_file(f, "h", buf, 10, gz);
        assert_int_equal(mt_idx_read_file(p, &x, &err), MT_DATA_LOSS);
        assert_non_null(strstr(err.msg, "truncated IDX header"));
        p = write_file(f, "e", buf, 0, gz);
        assert_int_equal(mt_idx_read_file(p, &x, &err), MT_DATA_LOSS);
        p = write_file(f, "x", buf, n + 1, gz);
        assert_int_equal(mt_idx_read_file(p, &x, &err), MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "trailing bytes"));
    }
    /* a gzip file cut in the middle of its compressed stream */
    p = write_file(f, "c.gz", buf, n, 1);
    snprintf(cmd, sizeof(cmd), "truncate -s 40 %s", p);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mt_idx_read_file(p, &x, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, p));
    /* corrupt compressed bytes: flip the CRC trailer */
    p = write_file(f, "d.gz", buf, n, 1);
    {
        FILE *fp = fopen(p, "r+b");
        assert_non_null(fp);
        fseek(fp, -8, SEEK_END);
        fputc(0x5a, fp);
        fputc(0xa5, fp);
        fclose(fp);
    }
    assert_int_equal(mt_idx_read_file(p, &x, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "corrupt gzip"));
    assert_null(x.data);
}

static void test_idx_conversions(void **state)
{
    unsigned char buf[256];
    uint32_t dims[3] = {2, 2, 3};
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    float *px;
    int32_t *lab;
    size_t n, h, w, c;
    (void)state;

    make_idx(buf, MT_IDX_UBYTE, 3, dims, 12);
    buf[16] = 255;
    assert_int_equal(mt_idx_read_mem(buf, 16 + 12, "img", &x, &err), MT_OK);
    assert_int_equal(mt_idx_to_images(&x, "img", &px, &n, &h, &w, &c, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(h, 2);
    assert_int_equal(w, 3);
    assert_int_equal(c, 1);
    assert_true(px[0] == 1.0f);
    assert_float_equal(px[1], 7.0f / 255.0f, 1e-7);
    mt_free(px);
    assert_int_equal(mt_idx_to_labels(&x, "img", 10, &lab, &n, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "rank 1"));
    mt_idx_fini(&x);

    uint32_t d1[1] = {4};
    make_idx(buf, MT_IDX_UBYTE, 1, d1, 4); /* 0 7 14 21 */
    assert_int_equal(mt_idx_read_mem(buf, 8 + 4, "lab", &x, &err), MT_OK);
    assert_int_equal(mt_idx_to_labels(&x, "lab", 10, &lab, &n, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "label 14 at index 2"));
    assert_int_equal(mt_idx_to_labels(&x, "lab", 0, &lab, &n, &err), MT_OK);
    assert_int_equal(lab[3], 21);
    mt_free(lab);
    assert_int_equal(mt_idx_to_images(&x, "lab", &px, &n, &h, &w, &c, &err), MT_INVALID_ARGUMENT);
    mt_idx_fini(&x);
}

static void test_idx_set_load(void **state)
{
    fixture *f = *state;
    unsigned char buf[4096];
    char ip[128], lp[128], lp2[128];
    uint32_t di[3] = {3, 4, 4}, dl[1] = {3}, dl2[1] = {4};
    mt_idx_set s;
    mt_err err = MT_ERR_INIT;
    size_t n;

    n = make_idx(buf, MT_IDX_UBYTE, 3, di, 48);
    snprintf(ip, sizeof(ip), "%s", write_file(f, "i.gz", buf, n, 1));
    n = make_idx(buf, MT_IDX_UBYTE, 1, dl, 3);
    snprintf(lp, sizeof(lp), "%s", write_file(f, "l.gz", buf, n, 1));
    n = make_idx(buf, MT_IDX_UBYTE, 1, dl2, 4);
    snprintf(lp2, sizeof(lp2), "%s", write_file(f, "l2", buf, n, 0));
    assert_int_equal(mt_idx_set_load(ip, lp, 20, &s, &err), MT_OK);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.h * s.w * s.c, 16);
    assert_int_equal(s.labels[1], 7);
    mt_idx_set_fini(&s);
    assert_int_equal(mt_idx_set_load(ip, lp2, 0, &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "3 images"));
    assert_non_null(strstr(err.msg, "4 labels"));
    assert_null(s.images);
    assert_int_equal(mt_idx_set_load(ip, "/nonexistent", 0, &s, &err), MT_NOT_FOUND);
    /* allocation failures: every one returns RESOURCE_EXHAUSTED and leaks nothing */
    for (long k = 0; k < 8; k++) {
        mt_code rc;
        mt_alloc_fail_after(k);
        rc = mt_idx_set_load(ip, lp, 20, &s, &err);
        mt_alloc_fail_reset();
        if (rc == MT_OK) {
            mt_idx_set_fini(&s);
            break;
        }
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
    }
}

static void test_idx_real_fashion_mnist(void **state)
{
    const char *ti = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    const char *tl = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    mt_idx_set s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    if (access(ti, R_OK) != 0) {
        skip();
        return;
    }
    assert_int_equal(mt_idx_set_load(ti, tl, 10, &s, &err), MT_OK);
    assert_int_equal(s.n, 10000);
    assert_int_equal(s.h, 28);
    assert_int_equal(s.w, 28);
    mt_idx_set_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_read_mem_valid),
        cmocka_unit_test(test_idx_read_mem_rejects_bad_headers),
        cmocka_unit_test(test_idx_read_mem_truncated_and_trailing),
        cmocka_unit_test_setup_teardown(test_idx_read_file_plain_and_gz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_read_file_errors, setup, teardown),
        cmocka_unit_test(test_idx_conversions),
        cmocka_unit_test_setup_teardown(test_idx_set_load, setup, teardown),
        cmocka_unit_test(test_idx_real_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
