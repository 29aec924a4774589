/* SPDX-License-Identifier: MIT */
/* test_data_idx.c — the IDX source adapter of core/data (images + labels pairs, plain or gzip),
 * its errors, and the real Fashion-MNIST files when the Debian package is installed. */
#include "mt_test.h"

#include <zlib.h>

#include "data/mt_data.h"
#include "data_test_util.h"
#include "log/mt_log.h"

/* Write an IDX ubyte file: rank dims, payload value(i) = (i * 7) % 256 (or labels i % 10). */
static void write_idx(const char *name, int rank, const uint32_t *dims, bool labels, bool gz)
{
    char path[512];
    unsigned char hdr[4 + 4 * 4];
    size_t count = 1, hl = 4 + 4 * (size_t)rank;
    unsigned char *buf;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    hdr[0] = hdr[1] = 0;
    hdr[2] = 0x08;
    hdr[3] = (unsigned char)rank;
    for (int i = 0; i < rank; i++) {
        hdr[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        hdr[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        hdr[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        hdr[7 + 4 * i] = (unsigned char)dims[i];
        count *= dims[i];
    }
    buf = malloc(count + 1);
    for (size_t i = 0; i < count; i++)
        buf[i] = (unsigned char)(labels ? i % 10 : (i * 7) % 256);
    if (gz) {
        gzFile g = gzopen(path, "wb");
        assert_non_null(g);
        gzwrite(g, hdr, (unsigned)hl);
        gzwrite(g, buf, (unsigned)count);
        gzclose(g);
    } else {
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        fwrite(hdr, 1, hl, fp);
        fwrite(buf, 1, count, fp);
        fclose(fp);
    }
    free(buf);
}

static void test_data_idx_pairs_plain_and_gzip(void **state)
{
    uint32_t im[3] = {5, 2, 3}, lb[1] = {5}, im2[3] = {3, 2, 3}, lb2[1] = {3};
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_data_pipeline *p;
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_input_ctx ctx = {2, 1, 1, 4, 0, 0};
    const mt_data_step *st;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_idx("a-images", 3, im, false, false);
    write_idx("a-labels", 1, lb, true, false);
    write_idx("b-images.gz", 3, im2, false, true);
    write_idx("b-labels.gz", 1, lb2, true, true);
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"num_classes\":10,\"train\":{\"files\":["
                             "{\"images\":\"a-images\",\"labels\":\"a-labels\"},"
                             "{\"images\":\"b-images.gz\",\"labels\":\"b-labels.gz\"}]}}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 8);
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_OK);
    assert_int_equal(b.dim, 6);
    assert_int_equal(b.shape[0], 2);
    assert_int_equal(b.shape[1], 3);
    assert_int_equal(b.shape[2], 1);
    assert_float_equal(b.x[1], 7.0 / 255.0, 1e-6);
    assert_int_equal(b.y[4], 4);
    mt_data_block_fini(&b);
    /* FILE sharding: pipeline 1 reads only the gzipped pair (3 examples) */
    o.policy = MT_DATA_SHARD_FILE;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_start_epoch(p, 0, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_next(p, &st, &err), MT_OK);
    assert_int_equal(st->replicas[0].n, 2);
    assert_int_equal(st->replicas[0].y[1], 1);
    mt_data_pipeline_free(p);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

static void test_data_idx_errors_name_files(void **state)
{
    uint32_t im[3] = {5, 2, 2}, lb[1] = {4};
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    write_idx("im", 3, im, false, false);
    write_idx("lb", 1, lb, true, false);
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train\":{\"images\":\"im\",\"labels\":\"lb\"},"
                             "\"test\":{\"images\":\"im\",\"labels\":\"missing\"}}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "has 5 images but"));
    assert_non_null(strstr(err.msg, "has 4 labels"));
    mt_data_dataset_free(ds);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &ds, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "missing"));
    mt_data_spec_free(s);
    /* labels that are not rank 1 */
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train\":{\"images\":\"im\",\"labels\":\"im\"}}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "rank-1"));
    mt_data_spec_free(s);
}

/* The real Fashion-MNIST test split (Debian dataset-fashion-mnist), when installed. */
static void test_data_idx_fashion_mnist(void **state)
{
    const char *d = "/usr/share/datasets/fashion-mnist";
    char json[512];
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_data_pipeline *p;
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_input_ctx ctx = {1, 0, 2, 128, 0, 0};
    mt_err err = MT_ERR_INIT;
    (void)state;
    if (access("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", R_OK) != 0) {
        print_message("skip: %s not installed (Debian package dataset-fashion-mnist)\n", d);
        return;
    }
    snprintf(json, sizeof(json),
             "{\"format\":\"idx\",\"num_classes\":10,"
             "\"train\":{\"images\":\"%s/train-images-idx3-ubyte.gz\",\"labels\":\"%s/"
             "train-labels-idx1-ubyte.gz\"},\"test\":{\"images\":\"%s/t10k-images-idx3-ubyte.gz\","
             "\"labels\":\"%s/t10k-labels-idx1-ubyte.gz\"}}",
             d, d, d, d);
    assert_int_equal(dt_spec(json, NULL, &s, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 60000);
    mt_data_dataset_free(ds);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_dim(p), 784);
    assert_int_equal(mt_data_pipeline_steps(p), 79); /* ceil(10000 / 128) */
    mt_data_pipeline_free(p);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_idx_pairs_plain_and_gzip, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_idx_errors_name_files, dt_setup, dt_teardown),
        cmocka_unit_test(test_data_idx_fashion_mnist),
    };
    mt_log_set_level(MT_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
