/* SPDX-License-Identifier: MIT */
/* test_data_npy.c — the NumPy source of core/data (mt_data.h): .npy pairs, .npz archives (stored,
 * deflated, ZIP64 as numpy writes them), dtypes, float targets, and bad input naming the file. */
#include "mt_test.h"

#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"
#include "data/mt_data.h"
#include "data_test_util.h"

/* ------------------------------------------------------------------ writers */

typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static void put(bytes *b, const void *d, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    assert_non_null(b->p);
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put16(bytes *b, uint32_t v)
{
    unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    put(b, c, 2);
}

static void put32(bytes *b, uint32_t v)
{
    put16(b, v & 0xffff);
    put16(b, v >> 16);
}

/* A version 1.0 .npy image: header dict padded to a multiple of 64. */
static bytes npy(const char *descr, const char *shape, const void *data, size_t n)
{
    char h[256];
    bytes b = {NULL, 0};
    int len = snprintf(h, sizeof(h), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       descr, shape);
    while ((10 + len + 1) % 64 != 0)
        h[len++] = ' ';
    h[len++] = '\n';
    put(&b, "\x93NUMPY\x01\x00", 8);
    put16(&b, (uint32_t)len);
    put(&b, h, (size_t)len);
    put(&b, data, n);
    return b;
}

static void write_bytes(const char *name, const bytes *b)
{
    char path[512];
    FILE *fp;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b->p, 1, b->n, fp), b->n);
    fclose(fp);
}

/* A zip of members (name, data), deflated or stored, without ZIP64. */
static bytes zip(const char *const *names, const bytes *data, size_t n, bool deflated)
{
    bytes z = {NULL, 0}, cd = {NULL, 0};
    for (size_t i = 0; i < n; i++) {
        uint32_t crc = (uint32_t)crc32(0L, data[i].p, (uInt)data[i].n), off = (uint32_t)z.n;
        unsigned char *c = malloc(data[i].n * 2 + 64);
        size_t cn = data[i].n;
        if (deflated) {
            z_stream s;
            memset(&s, 0, sizeof(s));
            assert_int_equal(deflateInit2(&s, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
            s.next_in = data[i].p;
            s.avail_in = (uInt)data[i].n;
            s.next_out = c;
            s.avail_out = (uInt)(data[i].n * 2 + 64);
            assert_int_equal(deflate(&s, Z_FINISH), Z_STREAM_END);
            cn = s.total_out;
            deflateEnd(&s);
        } else {
            memcpy(c, data[i].p, cn);
        }
        put32(&z, 0x04034b50);
        put16(&z, 20), put16(&z, 0), put16(&z, deflated ? 8 : 0), put16(&z, 0), put16(&z, 0);
        put32(&z, crc), put32(&z, (uint32_t)cn), put32(&z, (uint32_t)data[i].n);
        put16(&z, (uint32_t)strlen(names[i])), put16(&z, 0);
        put(&z, names[i], strlen(names[i]));
        put(&z, c, cn);
        put32(&cd, 0x02014b50);
        put16(&cd, 20), put16(&cd, 20), put16(&cd, 0), put16(&cd, deflated ? 8 : 0);
        put16(&cd, 0), put16(&cd, 0);
        put32(&cd, crc), put32(&cd, (uint32_t)cn), put32(&cd, (uint32_t)data[i].n);
        put16(&cd, (uint32_t)strlen(names[i])), put16(&cd, 0), put16(&cd, 0);
        put16(&cd, 0), put16(&cd, 0), put32(&cd, 0), put32(&cd, off);
        put(&cd, names[i], strlen(names[i]));
        free(c);
    }
    {
        uint32_t cdo = (uint32_t)z.n;
        put(&z, cd.p, cd.n);
        put32(&z, 0x06054b50);
        put16(&z, 0), put16(&z, 0), put16(&z, (uint32_t)n), put16(&z, (uint32_t)n);
        put32(&z, (uint32_t)cd.n), put32(&z, cdo), put16(&z, 0);
    }
    free(cd.p);
    return z;
}

static const float X12[12] = {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f, 5, 5.5f};

/* The pair x (3, 2, 2, 1) f4 + y (3) i8. */
static void write_pair(void)
{
    int64_t y[3] = {2, 0, 1};
    bytes bx = npy("<f4", "(3, 2, 2, 1)", X12, sizeof(X12)), by = npy("<i8", "(3,)", y, sizeof(y));
    write_bytes("x.npy", &bx);
    write_bytes("y.npy", &by);
    free(bx.p);
    free(by.p);
}

/* ------------------------------------------------------------------ tests */

/* The block of write_pair() / the numpy fixture: 3 examples of 2×2×1, labels 2, 0, 1. */
static void check_pair_block(mt_data_block *b)
{
    assert_int_equal(b->n, 3);
    assert_int_equal(b->dim, 4);
    assert_int_equal(b->shape[0], 2);
    assert_int_equal(b->shape[1], 2);
    assert_int_equal(b->shape[2], 1);
    assert_memory_equal(b->x, X12, sizeof(X12));
    assert_int_equal(b->y[0], 2);
    assert_int_equal(b->y[2], 1);
    assert_null(b->t);
    mt_data_block_fini(b);
}

static void test_data_npy_pair_image_shape(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_pair();
    assert_int_equal(
        dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", &b, &err),
        MT_OK);
    check_pair_block(&b);
}

/* savez (stored) and savez_compressed (deflated) give the same block; custom keys; u8 + scale. */
static void test_data_npy_npz_stored_deflated_keys(void **state)
{
    unsigned char px[6] = {0, 51, 102, 153, 204, 255};
    int32_t y[3] = {1, 1, 0};
    bytes m[2] = {npy("|u1", "(3, 2)", px, 6), npy("<i4", "(3,)", y, sizeof(y))};
    const char *names[2] = {"images.npy", "labels.npy"};
    (void)state;
    for (int deflated = 0; deflated < 2; deflated++) {
        bytes z = zip(names, m, 2, deflated);
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        write_bytes("d.npz", &z);
        free(z.p);
        assert_int_equal(dt_load0("{\"format\":\"npy\",\"train\":\"d.npz\",\"x_key\":\"images\","
                                  "\"y_key\":\"labels\",\"scale\":0.00392156862745098}",
                                  &b, &err),
                         MT_OK);
        assert_int_equal(b.n, 3);
        assert_int_equal(b.dim, 2);
        assert_float_equal(b.x[1], 0.2f, 1e-6);
        assert_float_equal(b.x[5], 1.0f, 1e-6);
        assert_int_equal(b.y[0], 1);
        assert_int_equal(b.y[2], 0);
        assert_int_equal(b.shape[0], 0); /* (N, D): flat */
        mt_data_block_fini(&b);
    }
    free(m[0].p);
    free(m[1].p);
}

/* The archive Python's zipfile writes for numpy.savez_compressed (ZIP64 local headers). */
static void test_data_npy_numpy_written_npz(void **state)
{
    char json[1024];
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    const char *src = getenv("MT_SOURCE_DIR");
    (void)state;
    snprintf(json, sizeof(json),
             "{\"format\":\"npy\",\"train\":\"%s/tests/fixtures/npz/numpy_savez_compressed.npz\"}",
             src != NULL ? src : ".");
    assert_int_equal(dt_load0(json, &b, &err), MT_OK);
    check_pair_block(&b);
}

static void test_data_npy_float_targets_and_dtypes(void **state)
{
    /* big-endian i2 features, bool features, f8 targets (N, 2) */
    unsigned char be[6] = {0xff, 0xfe, 0x01, 0x00, 0x00, 0x07}; /* -2, 256, 7 */
    double t[6] = {0.5, -1, 2.25, 3, 1e3, -7.5};
    bytes bx = npy(">i2", "(3,)", be, 6), by = npy("<f8", "(3, 2)", t, sizeof(t));
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_bytes("x.npy", &bx);
    write_bytes("t.npy", &by);
    assert_int_equal(dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"t.npy\"},"
                              "\"label_type\":\"float\"}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.dim, 1);
    assert_true(b.x[0] == -2.0f && b.x[1] == 256.0f && b.x[2] == 7.0f);
    assert_int_equal(b.t_dim, 2);
    assert_true(b.t[0] == 0.5f && b.t[3] == 3.0f && b.t[5] == -7.5f);
    assert_int_equal(b.y[1], 0);
    mt_data_block_fini(&b);
    /* the same targets as class labels: refused (float dtype), naming the file */
    assert_int_equal(
        dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"t.npy\"}}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "t.npy"));
    free(bx.p);
    free(by.p);
}

/* Bad input: every message names the file and the cause. */
static void test_data_npy_bad_input_names_file(void **state)
{
    static const struct {
        const char *descr, *shape;
        size_t bytes;
        const char *want;
    } bad[] = {
        {"<f4", "(3, 4)", 20, "truncated"},   /* 48 promised */
        {"<c16", "(3,)", 48, "dtype '<c16'"}, /* complex */
        {"|O", "(3,)", 24, "dtype '|O'"},     /* objects */
        {"<f4", "(3, 4)", 52, "bytes after"}, /* trailing garbage */
        {"<f2", "(3,)", 6, "dtype '<f2'"},    /* half floats */
        {"<f4", "[3, 4]", 48, "shape"},       /* not a tuple */
    };
    float data[16] = {0};
    int64_t y[3] = {0, 1, 0};
    bytes by = npy("<i8", "(3,)", y, sizeof(y));
    (void)state;
    write_bytes("y.npy", &by);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bytes bx = npy(bad[i].descr, bad[i].shape, data, bad[i].bytes);
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        write_bytes("x.npy", &bx);
        free(bx.p);
        assert_int_equal(
            dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", &b, &err),
            MT_INVALID_ARGUMENT);
        if (strstr(err.msg, "x.npy") == NULL || strstr(err.msg, bad[i].want) == NULL)
            fail_msg("case %zu: '%s' lacks the file or '%s'", i, err.msg, bad[i].want);
    }
    /* ragged: 2 labels for 3 examples */
    {
        bytes bx = npy("<f4", "(3, 4)", data, 48), b2 = npy("<i8", "(2,)", y, 16);
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        write_bytes("x.npy", &bx);
        write_bytes("y.npy", &b2);
        free(bx.p);
        free(b2.p);
        assert_int_equal(
            dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", &b, &err),
            MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "2 labels for the 3 examples"));
    }
    /* not a .npy at all; a .npy alone in the spec */
    {
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        dt_write(dir, "x.npy", "a,b\n1,2\n");
        assert_int_equal(
            dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", &b, &err),
            MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "x.npy: not a .npy file"));
        assert_int_equal(dt_load0("{\"format\":\"npy\",\"train\":\"x.npy\"}", &b, &err),
                         MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "dataset.train: a .npy file holds one array"));
    }
    free(by.p);
}

static void test_data_npy_bad_npz(void **state)
{
    int64_t y[3] = {0, 1, 0};
    bytes m[2] = {npy("<f4", "(3,)", X12, 12), npy("<i8", "(3,)", y, sizeof(y))};
    const char *names[2] = {"x.npy", "labels.npy"};
    bytes z = zip(names, m, 2, true);
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_bytes("a.npz", &z);
    /* no member y: lists the arrays */
    assert_int_equal(dt_load0("{\"format\":\"npy\",\"train\":\"a.npz\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "a.npz: no array 'y' in the archive (arrays: x, labels)"));
    /* truncated archive */
    z.n -= 30;
    write_bytes("a.npz", &z);
    assert_int_equal(
        dt_load0("{\"format\":\"npy\",\"train\":\"a.npz\",\"y_key\":\"labels\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "a.npz: "));
    z.n += 30;
    /* a flipped byte inside the deflated x: corrupt data or CRC mismatch */
    z.p[40] ^= 0x55;
    write_bytes("a.npz", &z);
    assert_int_equal(
        dt_load0("{\"format\":\"npy\",\"train\":\"a.npz\",\"y_key\":\"labels\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "a.npz: member x.npy"));
    free(z.p);
    free(m[0].p);
    free(m[1].p);
    /* shorter than a ZIP64 end record, whose locator points far past the end */
    {
        unsigned char t[42] = {0x50, 0x4b, 0x06, 0x07};
        bytes tz = {t, sizeof(t)};
        t[8 + 2] = 0x10; /* locator: the ZIP64 record at 0x100000 */
        memcpy(t + 20, "\x50\x4b\x05\x06", 4);
        memset(t + 20 + 10, 0xff, 2); /* entries 0xffff */
        memset(t + 20 + 16, 0xff, 4); /* directory at 0xffffffff */
        write_bytes("a.npz", &tz);
        assert_int_equal(dt_load0("{\"format\":\"npy\",\"train\":\"a.npz\"}", &b, &err),
                         MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "a.npz: corrupt ZIP64 end record"));
    }
}

/* Float targets travel through the pipeline beside the features (shuffled with them). */
static void test_data_npy_pipeline_carries_targets(void **state)
{
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    float t[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    bytes bx = npy("<f4", "(8,)", x, sizeof(x)), by = npy("<f4", "(8,)", t, sizeof(t));
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_pipeline *p = NULL;
    mt_data_input_ctx ctx = {1, 0, 2, 4, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    const mt_data_step *st;
    mt_err err = MT_ERR_INIT;
    size_t seen = 0;
    (void)state;
    write_bytes("x.npy", &bx);
    write_bytes("t.npy", &by);
    free(bx.p);
    free(by.p);
    assert_int_equal(dt_spec("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"t.npy\"},"
                             "\"label_type\":\"float\"}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        o.permute = shuffle == 1;
        o.seed = 5;
        assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_OK);
        assert_int_equal(mt_data_pipeline_target_dim(p), 1);
        assert_int_equal(mt_data_pipeline_start_epoch(p, 0, &err), MT_OK);
        while (mt_data_pipeline_next(p, &st, &err) == MT_OK) {
            for (size_t l = 0; l < st->n_replicas; l++) {
                const mt_data_batch *bt = &st->replicas[l];
                assert_int_equal(bt->t_dim, 1);
                for (size_t i = 0; i < bt->n; i++, seen++)
                    assert_true(bt->t[i] == bt->x[i] + 10.0f);
            }
        }
        mt_data_pipeline_free(p);
    }
    assert_int_equal(seen, 16);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

/* y of shape (N, H, W) integers: H·W class labels per example (a label per pixel), carried in
 * (n, y_dim) rows through a shuffled, rebatched pipeline; a bad label names its example. */
static void test_data_npy_label_rows(void **state)
{
    float x[6] = {0, 1, 2, 3, 4, 5};
    int32_t y[24];
    bytes bx = npy("<f4", "(6,)", x, sizeof(x)), by;
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_pipeline *p = NULL;
    mt_data_input_ctx ctx = {1, 0, 2, 4, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    const mt_data_step *st;
    mt_err err = MT_ERR_INIT;
    size_t seen = 0;
    (void)state;
    for (int i = 0; i < 24; i++)
        y[i] = (i / 4) * 10 + i % 4; /* example e, pixel k: 10·e + k */
    by = npy("<i4", "(6, 2, 2)", y, sizeof(y));
    write_bytes("x.npy", &bx);
    write_bytes("y.npy", &by);
    free(bx.p);
    free(by.p);
    assert_int_equal(
        dt_spec("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", dir, &s, &err),
        MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    o.permute = true;
    o.seed = 3;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_label_dim(p), 4);
    assert_int_equal(mt_data_pipeline_target_dim(p), 0);
    assert_int_equal(mt_data_pipeline_start_epoch(p, 0, &err), MT_OK);
    while (mt_data_pipeline_next(p, &st, &err) == MT_OK)
        for (size_t l = 0; l < st->n_replicas; l++) {
            const mt_data_batch *bt = &st->replicas[l];
            assert_int_equal(bt->y_dim, 4);
            for (size_t i = 0; i < bt->n; i++, seen++)
                for (int k = 0; k < 4; k++)
                    assert_int_equal(bt->y[i * 4 + (size_t)k], (int)bt->x[i] * 10 + k);
        }
    assert_int_equal(seen, 6);
    mt_data_pipeline_free(p);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
    /* label -1 at example 4, pixel 2 */
    y[18] = -1;
    by = npy("<i4", "(6, 2, 2)", y, sizeof(y));
    write_bytes("y.npy", &by);
    free(by.p);
    {
        mt_data_block b;
        assert_int_equal(
            dt_load0("{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}", &b, &err),
            MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "y.npy: label -1 of example 4 outside"));
    }
}

/* Two files whose targets per example differ: the pipeline refuses the second, naming it. */
static void test_data_npy_target_count_mismatch_named(void **state)
{
    float x[2] = {1, 2}, t1[2] = {1, 2}, t2[4] = {1, 2, 3, 4};
    bytes bx = npy("<f4", "(2,)", x, sizeof(x)), b1 = npy("<f4", "(2,)", t1, sizeof(t1));
    bytes b2 = npy("<f4", "(2, 2)", t2, sizeof(t2));
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_pipeline *p = NULL;
    mt_data_input_ctx ctx = {1, 0, 1, 2, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_bytes("x.npy", &bx);
    write_bytes("t1.npy", &b1);
    write_bytes("t2.npy", &b2);
    free(bx.p);
    free(b1.p);
    free(b2.p);
    assert_int_equal(dt_spec("{\"format\":\"npy\",\"train\":[{\"x\":\"x.npy\",\"y\":\"t1.npy\"},"
                             "{\"x\":\"x.npy\",\"y\":\"t2.npy\"}],\"label_type\":\"float\"}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    o.policy = MT_DATA_SHARD_OFF;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "x.npy: 2 targets per example, earlier files have 1"));
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_npy_pair_image_shape, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_npz_stored_deflated_keys, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_numpy_written_npz, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_float_targets_and_dtypes, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_bad_input_names_file, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_bad_npz, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_pipeline_carries_targets, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_label_rows, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_npy_target_count_mismatch_named, dt_setup,
                                        dt_teardown),
    };
    return MT_RUN_TESTS(tests);
}
