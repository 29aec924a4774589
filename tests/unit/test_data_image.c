/* SPDX-License-Identifier: MIT */
/* test_data_image.c — the image-folder source of core/data (mt_data.h): classes from folders,
 * PNG and JPEG decoding, resize and normalisation, bad files named, and the augmentation keyed
 * by the global example index (the same bits on every mesh). */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>

#include <jpeglib.h>
#include <png.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"
#include "log/mt_log.h"

/* Write a w×h 8-bit PNG with c channels (1 or 3) at dir/name. */
static void write_png(const char *name, const unsigned char *px, int w, int h, int c)
{
    char path[512];
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_true(png_image_write_to_file(&im, path, 0, px, 0, NULL));
}

/* Write a w×h JPEG (quality 100) with c channels at dir/name. */
static void write_jpeg(const char *name, const unsigned char *px, int w, int h, int c)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    char path[512];
    FILE *fp;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, fp);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * (size_t)(w * c));
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(fp);
}

/* A solid w×h image of colour rgb (c = 3) or gray rgb[0] (c = 1). */
static void solid(unsigned char *px, int w, int h, int c, const unsigned char *rgb)
{
    for (int i = 0; i < w * h; i++)
        for (int k = 0; k < c; k++)
            px[i * c + k] = rgb[k];
}

/* root/cat: b.png (red), a.jpg (gray 128), .hidden.png, notes.txt; root/dog: z.PNG (blue). */
static void write_cats_and_dogs(const char *root)
{
    unsigned char px[4 * 4 * 3];
    static const unsigned char red[3] = {255, 0, 0}, blue[3] = {0, 0, 255}, gray[3] = {128, 0, 0};
    char p[256];
    dt_mkdir(dir, root);
    snprintf(p, sizeof(p), "%s/cat", root);
    dt_mkdir(dir, p);
    snprintf(p, sizeof(p), "%s/dog", root);
    dt_mkdir(dir, p);
    solid(px, 4, 4, 3, red);
    snprintf(p, sizeof(p), "%s/cat/b.png", root);
    write_png(p, px, 4, 4, 3);
    snprintf(p, sizeof(p), "%s/cat/.hidden.png", root);
    dt_write(dir, p, "not read");
    snprintf(p, sizeof(p), "%s/cat/notes.txt", root);
    dt_write(dir, p, "not read");
    solid(px, 4, 4, 1, gray);
    snprintf(p, sizeof(p), "%s/cat/a.jpg", root);
    write_jpeg(p, px, 4, 4, 1);
    solid(px, 8, 2, 3, blue);
    snprintf(p, sizeof(p), "%s/dog/z.PNG", root);
    write_png(p, px, 8, 2, 3);
}

static void test_data_image_folders_classes_and_pixels(void **state)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_cats_and_dogs("train");
    assert_int_equal(
        dt_spec("{\"format\":\"images\",\"train\":\"train\",\"image_size\":[2,2]}", dir, &s, &err),
        MT_OK);
    assert_int_equal(s->shape[0], 2);
    assert_int_equal(s->shape[2], 3);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 3);
    assert_string_equal(mt_data_dataset_classes(ds)->names[1], "dog");
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_OK);
    assert_int_equal(b.dim, 12);
    assert_int_equal(b.shape[2], 3);
    /* cat/a.jpg (gray 128 -> r = g = b), cat/b.png (red), dog/z.PNG (blue) */
    assert_int_equal(b.y[0], 0);
    assert_int_equal(b.y[1], 0);
    assert_int_equal(b.y[2], 1);
    assert_float_equal(b.x[0], 128.0f / 255, 2.0f / 255);
    assert_float_equal(b.x[2], 128.0f / 255, 2.0f / 255);
    assert_true(b.x[12] == 1.0f && b.x[13] == 0.0f && b.x[14] == 0.0f);
    assert_true(b.x[24 + 9] == 0.0f && b.x[24 + 11] == 1.0f);
    mt_data_block_fini(&b);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

/* Bilinear with half-pixel centres (tf.image.resize): [0, 255] over 4 columns. Grayscale,
 * mean/std normalisation. */
static void test_data_image_resize_and_normalise(void **state)
{
    unsigned char px[2] = {0, 255};
    float out[4];
    mt_data_spec *s = NULL;
    mt_err err = MT_ERR_INIT;
    char p[512];
    (void)state;
    write_png("g.png", px, 2, 1, 1);
    assert_int_equal(dt_spec("{\"format\":\"images\",\"train\":\".\",\"image_size\":[1,4],"
                             "\"color_mode\":\"grayscale\",\"scale\":1,\"mean\":100,\"std\":[2]}",
                             dir, &s, &err),
                     MT_OK);
    snprintf(p, sizeof(p), "%s/g.png", dir);
    assert_int_equal(mt_data_image_read(s, p, out, &err), MT_OK);
    assert_float_equal(out[0], (0 - 100) / 2.0f, 1e-4);
    assert_float_equal(out[1], (63.75f - 100) / 2.0f, 1e-4);
    assert_float_equal(out[2], (191.25f - 100) / 2.0f, 1e-4);
    assert_float_equal(out[3], (255 - 100) / 2.0f, 1e-4);
    mt_data_spec_free(s);
}

/* A test folder that is not a training class, class_names order, spec errors. */
static void test_data_image_classes_and_spec_errors(void **state)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_cats_and_dogs("train");
    write_cats_and_dogs("test");
    dt_mkdir(dir, "test/bird");
    assert_int_equal(dt_spec("{\"format\":\"images\",\"train\":\"train\",\"test\":\"test\","
                             "\"image_size\":[2,2]}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &ds, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "test/bird: not one of the 2 classes"));
    mt_data_spec_free(s);
    assert_int_equal(dt_spec("{\"format\":\"images\",\"train\":\"train\",\"image_size\":[2,2],"
                             "\"class_names\":[\"dog\",\"cat\"]}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_OK);
    assert_int_equal(b.y[0], 0); /* dog/z.PNG first */
    assert_true(b.x[2] == 1.0f);
    assert_int_equal(b.y[2], 1);
    mt_data_block_fini(&b);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
    assert_int_equal(dt_spec("{\"format\":\"images\",\"train\":\"train\"}", dir, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.image_size: required"));
    assert_int_equal(
        dt_spec("{\"format\":\"csv\",\"train\":\"x.csv\",\"image_size\":[2,2]}", dir, &s, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.image_size: only image-folder"));
    assert_int_equal(dt_spec("{\"format\":\"images\",\"train\":\"train\",\"image_size\":[2,2],"
                             "\"augment\":{\"flip\":\"diagonal\"}}",
                             dir, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.augment.flip: must be"));
}

/* Truncated or wrong files fail the open with the file's name and the cause. */
static void test_data_image_bad_files_named(void **state)
{
    static const struct {
        const char *name;
        const char *want;
    } cases[] = {{"cat/t.png", "t.png: corrupt PNG"},
                 {"cat/t.jpg", "t.jpg: corrupt JPEG"},
                 {"cat/x.png", "x.png: not a PNG or JPEG file"}};
    unsigned char px[16 * 16 * 3];
    static const unsigned char grey[3] = {9, 99, 199};
    (void)state;
    solid(px, 16, 16, 3, grey);
    for (size_t i = 0; i < 3; i++) {
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        char path[512];
        FILE *fp;
        long len;
        dt_rm_rf(dir);
        assert_int_equal(mkdir(dir, 0755), 0);
        dt_mkdir(dir, "cat");
        if (i == 0)
            write_png(cases[i].name, px, 16, 16, 3);
        else if (i == 1)
            write_jpeg(cases[i].name, px, 16, 16, 3);
        else
            dt_write(dir, cases[i].name, "label,text\n0,hello\n");
        snprintf(path, sizeof(path), "%s/%s", dir, cases[i].name);
        fp = fopen(path, "rb+");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        len = ftell(fp);
        fclose(fp);
        if (i < 2)
            assert_int_equal(truncate(path, len / 2), 0);
        assert_int_equal(
            dt_load0("{\"format\":\"images\",\"train\":\".\",\"image_size\":[4,4]}", &b, &err),
            MT_INVALID_ARGUMENT);
        if (strstr(err.msg, cases[i].want) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].want);
    }
}

/* A FIFO named like an image is refused without opening it (an open would block forever). */
static void test_data_image_fifo_refused_not_hung(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    char p[512];
    (void)state;
    dt_mkdir(dir, "cat");
    snprintf(p, sizeof(p), "%s/cat/pipe.png", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(
        dt_load0("{\"format\":\"images\",\"train\":\".\",\"image_size\":[4,4]}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "pipe.png: not a regular file"));
}

/* ------------------------------------------------------------------ augmentation */

#define AUG_N 12 /* examples: 4×4 gray, pixel (y, x) = id·16 + y·4 + x */

static void write_numbered(const char *root, size_t first, size_t n)
{
    char p[256];
    dt_mkdir(dir, root);
    snprintf(p, sizeof(p), "%s/c", root);
    dt_mkdir(dir, p);
    for (size_t id = first; id < first + n; id++) {
        unsigned char px[16];
        for (int k = 0; k < 16; k++)
            px[k] = (unsigned char)(id * 16 + (size_t)k);
        snprintf(p, sizeof(p), "%s/c/%02zu.png", root, id);
        write_png(p, px, 4, 4, 1);
    }
}

/* The example id of an augmented image: any original pixel v has floor(v / 16) = id. */
static size_t id_of(const float *x)
{
    float mx = 0;
    for (int k = 0; k < 16; k++)
        mx = x[k] > mx ? x[k] : mx;
    return (size_t)(mx / 16.0f);
}

/* Run one epoch of every pipeline of a configuration; out[id] = that example's 16 values. */
static void run_aug(const char *spec, size_t N, size_t L, mt_data_shard_policy pol, bool permute,
                    size_t epoch, float out[AUG_N][16])
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_err err = MT_ERR_INIT;
    size_t seen = 0;

    assert_int_equal(dt_spec(spec, dir, &s, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    for (size_t w = 0; w < N; w++) {
        mt_data_input_ctx ctx = {N, w, L, 6, 0, 0};
        mt_data_pipeline_opts o;
        mt_data_pipeline *p = NULL;
        const mt_data_step *st;
        mt_data_pipeline_opts_from_spec(s, &o);
        o.policy = pol;
        o.permute = permute;
        o.seed = 77;
        if (mt_data_pipeline_open(ds, &ctx, &o, &p, &err) != MT_OK)
            fail_msg("open: %s", err.msg);
        assert_int_equal(mt_data_pipeline_start_epoch(p, epoch, &err), MT_OK);
        while (mt_data_pipeline_next(p, &st, &err) == MT_OK) {
            for (size_t l = 0; l < st->n_replicas; l++) {
                for (size_t i = 0; i < st->replicas[l].n; i++, seen++) {
                    const float *x = st->replicas[l].x + i * 16;
                    memcpy(out[id_of(x)], x, sizeof(out[0]));
                }
            }
        }
        mt_data_pipeline_free(p);
    }
    assert_int_equal(seen, AUG_N);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

static void test_data_image_augment_independent_of_mesh(void **state)
{
    static const char *spec = "{\"format\":\"images\",\"train\":[\"r0\",\"r1\"],"
                              "\"image_size\":[4,4],\"color_mode\":\"grayscale\",\"scale\":1,"
                              "\"augment\":{\"flip\":\"horizontal\",\"crop_padding\":1}}";
    static float a[AUG_N][16], b[AUG_N][16], c[AUG_N][16], d[AUG_N][16], e1[AUG_N][16];
    size_t flipped = 0, moved = 0, changed = 0;
    (void)state;
    mt_log_set_level(MT_LOG_WARN);
    write_numbered("r0", 0, 7);
    write_numbered("r1", 7, 5);
    run_aug(spec, 1, 1, MT_DATA_SHARD_OFF, false, 0, a);
    run_aug(spec, 2, 1, MT_DATA_SHARD_FILE, false, 0, b);
    run_aug(spec, 1, 3, MT_DATA_SHARD_OFF, true, 0, c);
    run_aug(spec, 2, 2, MT_DATA_SHARD_DATA, true, 0, d);
    run_aug(spec, 1, 1, MT_DATA_SHARD_OFF, false, 1, e1);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_equal(a, c, sizeof(a));
    assert_memory_equal(a, d, sizeof(a));
    for (size_t id = 0; id < AUG_N; id++) {
        bool h = true, same = true;
        /* a horizontal flip without shift maps (y, x) to id·16 + y·4 + 3 − x */
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++) {
                h = h && a[id][y * 4 + x] == (float)(id * 16 + (size_t)(y * 4 + 3 - x));
                same = same && a[id][y * 4 + x] == (float)(id * 16 + (size_t)(y * 4 + x));
            }
        flipped += h;
        moved += !h && !same;
        changed += memcmp(a[id], e1[id], sizeof(a[id])) != 0;
    }
    assert_true(flipped + moved > 0); /* something was augmented */
    assert_true(changed > 0);         /* epoch 1 draws differently */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_image_folders_classes_and_pixels, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_image_resize_and_normalise, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_image_classes_and_spec_errors, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_image_bad_files_named, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_image_fifo_refused_not_hung, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_image_augment_independent_of_mesh, dt_setup,
                                        dt_teardown),
    };
    return MT_RUN_TESTS(tests);
}
